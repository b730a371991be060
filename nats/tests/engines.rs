//! Engines' own KV-event batches (vLLM's and SGLang's msgpack `KVEventBatch`) relayed over the
//! bus as they came, applied by each replica's `KvIngest`: replicas that start before and after
//! the batches agree with an index fed the same payloads directly, and a replica that reads no
//! engine batches, or a corrupted payload, is counted and changes nothing.

mod common;

use common::{Scratch, bus, router, server};
use libroute_core::{BlockHasher, EngineSlot, IngestError, KvIngest, Overlaps, WorkerKey};
use libroute_nats::{Engines, Replica, wire};

const BLOCK: u32 = 16;

/// msgpack, as msgspec writes an `array_like` `KVEventBatch` (small values only).
struct Mp(Vec<u8>);

impl Mp {
    fn array(&mut self, n: usize) -> &mut Self {
        if n < 16 {
            self.0.push(0x90 | u8::try_from(n).unwrap());
        } else {
            self.0.push(0xdc);
            self.0
                .extend_from_slice(&u16::try_from(n).unwrap().to_be_bytes());
        }
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.0.push(0xa0 | u8::try_from(s.len()).unwrap());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn uint(&mut self, v: u64) -> &mut Self {
        self.0.push(0xcf);
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn nil(&mut self) -> &mut Self {
        self.0.push(0xc0);
        self
    }
}

enum Ev {
    Stored {
        hashes: Vec<u64>,
        parent: Option<u64>,
        tokens: std::ops::Range<u32>,
    },
    Removed(Vec<u64>),
    Cleared,
}

fn batch(events: &[Ev]) -> Vec<u8> {
    let mut mp = Mp(Vec::new());
    mp.array(2);
    mp.0.push(0xcb);
    mp.0.extend_from_slice(&1.5f64.to_bits().to_be_bytes());
    mp.array(events.len());
    for e in events {
        match e {
            Ev::Stored {
                hashes,
                parent,
                tokens,
            } => {
                mp.array(8).str("BlockStored").array(hashes.len());
                for &h in hashes {
                    mp.uint(h);
                }
                match parent {
                    Some(p) => mp.uint(*p),
                    None => mp.nil(),
                };
                mp.array(tokens.len());
                for t in tokens.clone() {
                    mp.uint(u64::from(t));
                }
                mp.uint(u64::from(BLOCK)).nil().nil().nil();
            }
            Ev::Removed(hashes) => {
                mp.array(3).str("BlockRemoved").array(hashes.len());
                for &h in hashes {
                    mp.uint(h);
                }
                mp.nil();
            }
            Ev::Cleared => {
                mp.array(1).str("AllBlocksCleared");
            }
        }
    }
    mp.0
}

fn ingest() -> Engines {
    KvIngest::new(vec![EngineSlot::empty(); 1024], BLOCK).unwrap()
}

/// Each worker's overlap with the request of tokens 0..48 (three blocks).
fn overlaps(
    index: &libroute_core::PrefixIndex<
        Vec<libroute_core::BlockSlot<1>>,
        Vec<libroute_core::WorkerSlot>,
        1,
    >,
) -> Vec<u32> {
    let tokens: Vec<u32> = (0..48).collect();
    let mut hashes = [0u64; 3];
    let n = BlockHasher::new(BLOCK, None)
        .unwrap()
        .sequence_hashes(&tokens, None, &mut hashes)
        .unwrap();
    let mut out = Overlaps::<1>::new();
    index.query(&hashes[..n], &mut out);
    (0..4)
        .map(|w| {
            index
                .overlap(&out, WorkerKey::new(w, 0))
                .map_or(0, |o| o[0])
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_batches_relayed_as_they_came_are_applied_alike_by_every_replica() {
    let scratch = Scratch::new("engines");
    let server = server(&scratch);
    let bus = bus(&server, "engines").await;
    let relay = bus.kv_publisher("relay");
    let (w1, w2, w3) = (
        WorkerKey::new(1, 0),
        WorkerKey::new(2, 0),
        WorkerKey::new(3, 0),
    );
    // Engine hashes are the engines' own; the router re-hashes the token ids.
    let payloads = [
        (
            w1,
            batch(&[
                Ev::Stored {
                    hashes: vec![101],
                    parent: None,
                    tokens: 0..16,
                },
                Ev::Stored {
                    hashes: vec![102],
                    parent: Some(101),
                    tokens: 16..32,
                },
            ]),
        ),
        (
            w2,
            batch(&[Ev::Stored {
                hashes: vec![201],
                parent: None,
                tokens: 0..16,
            }]),
        ),
        (
            w3,
            batch(&[Ev::Stored {
                hashes: vec![301],
                parent: None,
                tokens: 0..16,
            }]),
        ),
        (w3, batch(&[Ev::Cleared])),
        (w1, batch(&[Ev::Removed(vec![102])])),
    ];
    let early = Replica::start_reading_engines(&bus, 0, router(), ingest())
        .await
        .unwrap();
    let blind = Replica::start(&bus, 1, router()).await.unwrap();
    for (worker, payload) in &payloads {
        relay.publish_engine_batch(*worker, payload);
    }
    // A payload cut short: refused by the replicas' ingests, naming its byte.
    let cut = &payloads[0].1[..payloads[0].1.len() - 3];
    relay.publish_engine_batch(w2, cut);
    relay.flush().await;
    let late = Replica::start_reading_engines(&bus, 2, router(), ingest())
        .await
        .unwrap();
    let end = bus.last_sequences().await.unwrap();
    early.wait_for(end).await;
    blind.wait_for(end).await;
    // Its engine-hash map is state a snapshot does not hold: it takes none.
    assert_eq!(
        early.snapshot().await,
        Err(libroute_nats::SnapshotFailure::ReadsEngines)
    );

    // The same payloads applied to an index directly.
    let mut reference = router();
    let mut direct = ingest();
    for (worker, payload) in &payloads {
        direct
            .apply(&mut reference.index, *worker, payload)
            .unwrap();
    }
    assert!(direct.apply(&mut reference.index, w2, cut).is_err());
    let expected = overlaps(&reference.index);
    // Worker 1 kept its first block (the second was removed), worker 2 holds one, worker 3
    // cleared.
    assert_eq!(expected, vec![0, 1, 1, 0]);
    assert_eq!(overlaps(&early.router().index), expected);
    assert_eq!(overlaps(&late.router().index), expected);

    for r in [&early, &late] {
        let s = r.stats();
        assert_eq!(s.kv_events, 6, "{s:?}");
        assert_eq!(s.malformed, 1);
        assert!(matches!(
            s.last_malformed,
            Some((_, wire::WireError::Engine(IngestError::Wire(_))))
        ));
    }
    // A replica that reads no engine batches says so for each, and its index stays empty.
    let s = blind.stats();
    assert_eq!(s.malformed, 6);
    assert_eq!(
        s.last_malformed.map(|(_, e)| e),
        Some(wire::WireError::EngineBatchesNotRead)
    );
    assert_eq!(overlaps(&blind.router().index), vec![0, 0, 0, 0]);
}
