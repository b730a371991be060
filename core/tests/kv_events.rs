//! Engines' KV-event payloads applied to an index, against a model: random streams of stored,
//! removed and cleared blocks (both msgspec forms, integer and bytes hashes, LoRA adapters,
//! tiers), every truncation and many corruptions of a payload (an error naming a byte, and
//! nothing changed), and each error's sentence.

use std::collections::{BTreeMap, BTreeSet};

use libroute_core::*;
use proptest::prelude::*;

/// A MessagePack writer, for the tests only (what msgspec writes, smallest form first).
#[derive(Default, Clone)]
struct Mp(Vec<u8>);

impl Mp {
    fn header(&mut self, n: usize, fix: u8, fix_max: usize, m16: u8, m32: u8) -> &mut Self {
        if n <= fix_max {
            self.0.push(fix | u8::try_from(n).unwrap());
        } else if let Ok(n) = u16::try_from(n) {
            self.0.push(m16);
            self.0.extend_from_slice(&n.to_be_bytes());
        } else {
            self.0.push(m32);
            self.0
                .extend_from_slice(&u32::try_from(n).unwrap().to_be_bytes());
        }
        self
    }
    fn array(&mut self, n: usize) -> &mut Self {
        self.header(n, 0x90, 15, 0xdc, 0xdd)
    }
    fn map(&mut self, n: usize) -> &mut Self {
        self.header(n, 0x80, 15, 0xde, 0xdf)
    }
    fn str(&mut self, s: &str) -> &mut Self {
        if s.len() < 32 {
            self.0.push(0xa0 | u8::try_from(s.len()).unwrap());
        } else {
            self.0.push(0xd9);
            self.0.push(u8::try_from(s.len()).unwrap());
        }
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn bin(&mut self, b: &[u8]) -> &mut Self {
        self.0.push(0xc4);
        self.0.push(u8::try_from(b.len()).unwrap());
        self.0.extend_from_slice(b);
        self
    }
    fn uint(&mut self, v: u64) -> &mut Self {
        if v < 128 {
            self.0.push(u8::try_from(v).unwrap());
        } else if let Ok(v) = u8::try_from(v) {
            self.0.extend_from_slice(&[0xcc, v]);
        } else if let Ok(v) = u16::try_from(v) {
            self.0.push(0xcd);
            self.0.extend_from_slice(&v.to_be_bytes());
        } else if let Ok(v) = u32::try_from(v) {
            self.0.push(0xce);
            self.0.extend_from_slice(&v.to_be_bytes());
        } else {
            self.0.push(0xcf);
            self.0.extend_from_slice(&v.to_be_bytes());
        }
        self
    }
    fn int(&mut self, v: i64) -> &mut Self {
        if v >= 0 {
            return self.uint(v.unsigned_abs());
        }
        if v >= -32 {
            self.0.push(v.to_le_bytes()[0]);
        } else {
            self.0.push(0xd3);
            self.0.extend_from_slice(&v.to_be_bytes());
        }
        self
    }
    fn nil(&mut self) -> &mut Self {
        self.0.push(0xc0);
        self
    }
    fn f64(&mut self, v: f64) -> &mut Self {
        self.0.push(0xcb);
        self.0.extend_from_slice(&v.to_bits().to_be_bytes());
        self
    }
}

/// An engine block hash as an engine sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum EngineHash {
    Int(i64),
    Bytes([u8; 32]),
}

impl EngineHash {
    fn write(self, mp: &mut Mp) {
        match self {
            EngineHash::Int(v) => {
                mp.int(v);
            }
            EngineHash::Bytes(b) => {
                mp.bin(&b);
            }
        }
    }
    /// The key libroute reads it as.
    fn key(self) -> u64 {
        match self {
            EngineHash::Int(v) => u64::from_ne_bytes(v.to_ne_bytes()),
            EngineHash::Bytes(b) => xxhash_rust::xxh3::xxh3_64_with_seed(&b, 0),
        }
    }
}

#[derive(Debug, Clone)]
enum Ev {
    Stored {
        hashes: Vec<EngineHash>,
        parent: Option<EngineHash>,
        tokens: Vec<u32>,
        block_size: u32,
        lora_id: Option<u64>,
        lora_name: Option<String>,
        medium: Option<&'static str>,
    },
    Removed {
        hashes: Vec<EngineHash>,
        medium: Option<&'static str>,
    },
    Cleared,
}

#[allow(
    clippy::too_many_lines,
    reason = "each event's fields in order, in both forms"
)]
/// Encodes a batch as msgspec does: `array_like` (vLLM <= 0.11, SGLang) or as maps (later vLLM).
fn encode(ts: f64, events: &[Ev], rank: Option<u32>, maps: bool) -> Vec<u8> {
    let mut mp = Mp::default();
    if maps {
        mp.map(if rank.is_some() { 3 } else { 2 });
        mp.str("ts").f64(ts).str("events");
    } else {
        mp.array(if rank.is_some() { 3 } else { 2 });
        mp.f64(ts);
    }
    mp.array(events.len());
    for ev in events {
        match ev {
            Ev::Stored {
                hashes,
                parent,
                tokens,
                block_size,
                lora_id,
                lora_name,
                medium,
            } => {
                let list = |mp: &mut Mp, hashes: &[EngineHash]| {
                    mp.array(hashes.len());
                    for h in hashes {
                        h.write(mp);
                    }
                };
                let opt_hash = |mp: &mut Mp, h: &Option<EngineHash>| match h {
                    Some(h) => h.write(mp),
                    None => {
                        mp.nil();
                    }
                };
                if maps {
                    mp.map(9).str("type").str("BlockStored");
                    mp.str("block_hashes");
                    list(&mut mp, hashes);
                    mp.str("parent_block_hash");
                    opt_hash(&mut mp, parent);
                    // An unknown field in the middle is skipped.
                    mp.str("extra_keys").array(1).array(2).str("mm").uint(3);
                } else {
                    mp.array(9).str("BlockStored");
                    list(&mut mp, hashes);
                    opt_hash(&mut mp, parent);
                }
                mp.str_if(maps, "token_ids").array(tokens.len());
                for t in tokens {
                    mp.uint(u64::from(*t));
                }
                mp.str_if(maps, "block_size").uint(u64::from(*block_size));
                mp.str_if(maps, "lora_id");
                match lora_id {
                    Some(id) => mp.uint(*id),
                    None => mp.nil(),
                };
                mp.str_if(maps, "medium");
                match medium {
                    Some(m) => mp.str(m),
                    None => mp.nil(),
                };
                mp.str_if(maps, "lora_name");
                match lora_name {
                    Some(n) => mp.str(n),
                    None => mp.nil(),
                };
                if !maps {
                    // vLLM's later `extra_keys`: skipped.
                    mp.nil();
                }
            }
            Ev::Removed { hashes, medium } => {
                if maps {
                    mp.map(3)
                        .str("type")
                        .str("BlockRemoved")
                        .str("block_hashes");
                } else {
                    mp.array(3).str("BlockRemoved");
                }
                mp.array(hashes.len());
                for h in hashes {
                    h.write(&mut mp);
                }
                mp.str_if(maps, "medium");
                match medium {
                    Some(m) => mp.str(m),
                    None => mp.nil(),
                };
            }
            Ev::Cleared => {
                if maps {
                    mp.map(1).str("type").str("AllBlocksCleared");
                } else {
                    mp.array(1).str("AllBlocksCleared");
                }
            }
        }
    }
    if let Some(rank) = rank {
        if maps {
            mp.str("data_parallel_rank");
        }
        mp.uint(u64::from(rank));
    }
    mp.0
}

impl Mp {
    fn str_if(&mut self, yes: bool, s: &str) -> &mut Self {
        if yes {
            self.str(s);
        }
        self
    }
}

const BS: u32 = 4;

type Index = PrefixIndex<Vec<BlockSlot<1>>, Vec<WorkerSlot>, 1>;
type Ingest = KvIngest<Vec<EngineSlot>>;

fn index() -> Index {
    PrefixIndex::new(
        vec![BlockSlot::<1>::empty(); 4096],
        vec![WorkerSlot::empty(); 128],
    )
    .unwrap()
}

fn ingest(slots: usize) -> Ingest {
    KvIngest::new(vec![EngineSlot::empty(); slots], BS).unwrap()
}

fn tier_of(medium: Option<&str>) -> usize {
    match medium {
        None | Some("GPU" | "gpu") => 0,
        Some("CPU" | "CPU_PINNED") => 1,
        _ => 2,
    }
}

fn seed_of(lora_id: Option<u64>, lora_name: Option<&str>) -> u64 {
    match (lora_name, lora_id) {
        (Some(n), _) if !n.is_empty() => BlockHasher::local_seed(Some(n.as_bytes())),
        (_, Some(id)) => BlockHasher::local_seed(Some(id.to_string().as_bytes())),
        _ => BlockHasher::local_seed(None),
    }
}

/// What the index should hold: the straightforward version of `KvIngest`, with an unbounded map.
#[derive(Default, Debug)]
struct Model {
    /// (worker, engine key) -> (router hash, tiers)
    map: BTreeMap<(WorkerKey, u64), (u64, BTreeSet<usize>)>,
    /// (worker, tier, router hash) held.
    held: BTreeSet<(WorkerKey, usize, u64)>,
    /// Every router hash ever stored.
    seen: BTreeSet<u64>,
}

impl Model {
    fn apply(&mut self, worker: WorkerKey, events: &[Ev]) {
        for ev in events {
            match ev {
                Ev::Stored {
                    hashes,
                    parent,
                    tokens,
                    lora_id,
                    lora_name,
                    medium,
                    ..
                } => {
                    let mut parent = match parent {
                        None => None,
                        Some(p) => match self.map.get(&(worker, p.key())) {
                            Some(&(router, _)) => Some(router),
                            None => continue, // orphans
                        },
                    };
                    let tier = tier_of(*medium);
                    let seed = seed_of(*lora_id, lora_name.as_deref());
                    for (h, block) in hashes.iter().zip(tokens.chunks(BS as usize)) {
                        let bytes: Vec<u8> = block.iter().flat_map(|t| t.to_le_bytes()).collect();
                        let local = xxhash_rust::xxh3::xxh3_64_with_seed(&bytes, seed);
                        let router = match parent {
                            None => local,
                            Some(p) => BlockHasher::chain(p, local),
                        };
                        parent = Some(router);
                        let entry = self.map.entry((worker, h.key())).or_default();
                        entry.0 = router;
                        entry.1.insert(tier);
                        self.held.insert((worker, tier, router));
                        self.seen.insert(router);
                    }
                }
                Ev::Removed { hashes, medium } => {
                    let tier = tier_of(*medium);
                    for h in hashes {
                        if let Some((router, tiers)) = self.map.get_mut(&(worker, h.key())) {
                            let router = *router;
                            tiers.remove(&tier);
                            if tiers.is_empty() {
                                self.map.remove(&(worker, h.key()));
                            }
                            self.held.remove(&(worker, tier, router));
                        }
                    }
                }
                Ev::Cleared => {
                    self.map.retain(|(w, _), _| *w != worker);
                    self.held.retain(|(w, _, _)| *w != worker);
                }
            }
        }
    }

    fn check(&self, index: &Index, workers: &[WorkerKey]) {
        let mut overlaps = Overlaps::new();
        for &hash in &self.seen {
            index.query(&[hash], &mut overlaps);
            for &w in workers {
                let got = index.overlap(&overlaps, w).unwrap_or([0; 3]);
                // The index counts a block once, in the fastest tier holding it.
                let mut want = [0; 3];
                if let Some(tier) = (0..3).find(|&t| self.held.contains(&(w, t, hash))) {
                    want[tier] = 1;
                }
                assert_eq!(got, want, "worker {w:?} hash {hash:#x}");
            }
        }
    }
}

fn stored(first: i64, n: usize, parent: Option<i64>, tokens_from: u32) -> Ev {
    Ev::Stored {
        hashes: (first..).take(n).map(EngineHash::Int).collect(),
        parent: parent.map(EngineHash::Int),
        tokens: (tokens_from..).take(n * BS as usize).collect(),
        block_size: BS,
        lora_id: None,
        lora_name: None,
        medium: Some("GPU"),
    }
}

#[test]
fn a_stream_matches_requests_hashed_by_the_router() {
    let mut index = index();
    let mut ingest = ingest(1024);
    let w = WorkerKey::new(3, 0);
    // Two batches: blocks 1-2, then 3 chained after block 2.
    let first = encode(1.0, &[stored(100, 2, None, 0)], Some(0), false);
    let second = encode(2.0, &[stored(102, 1, Some(101), 8)], Some(0), true);
    assert_eq!(
        ingest.apply(&mut index, w, &first).unwrap().stored_blocks,
        2
    );
    assert_eq!(
        ingest.apply(&mut index, w, &second).unwrap().stored_blocks,
        1
    );
    let tokens: Vec<u32> = (0..13).collect(); // 3 blocks and a partial one
    let mut hashes = [0u64; 3];
    BlockHasher::new(BS, None)
        .unwrap()
        .sequence_hashes(&tokens, None, &mut hashes)
        .unwrap();
    let mut overlaps = Overlaps::new();
    index.query(&hashes, &mut overlaps);
    assert_eq!(index.overlap(&overlaps, w), Some([3, 0, 0]));
    assert_eq!(ingest.router_hash(w, 102), Some(hashes[2]));

    // Removing block 2 (engine hash 101) from the device breaks the prefix after block 1.
    let rm = encode(
        3.0,
        &[Ev::Removed {
            hashes: vec![EngineHash::Int(101)],
            medium: None,
        }],
        None,
        false,
    );
    let s = ingest.apply(&mut index, w, &rm).unwrap();
    assert_eq!((s.removed_blocks, s.unknown_removals), (1, 0));
    index.query(&hashes, &mut overlaps);
    assert_eq!(index.overlap(&overlaps, w), Some([1, 0, 0]));

    // Cleared drops the rest, and the mappings: a child of a forgotten parent is an orphan.
    let clear = encode(
        4.0,
        &[Ev::Cleared, stored(103, 1, Some(102), 12)],
        None,
        true,
    );
    let s = ingest.apply(&mut index, w, &clear).unwrap();
    assert_eq!((s.clears, s.orphaned_blocks, s.stored_blocks), (1, 1, 0));
    index.query(&hashes, &mut overlaps);
    assert_eq!(index.overlap(&overlaps, w), Some([0, 0, 0]));
    let c = ingest.counters();
    assert_eq!(
        (
            c.batches,
            c.stored_blocks,
            c.removed_blocks,
            c.clears,
            c.orphaned_blocks,
            c.mapped
        ),
        (4, 3, 1, 1, 1, 0)
    );
}

/// Every block size, odd and even, short and past a 64-byte block: the tokens are read off the
/// wire in pairs (and an odd one last), and the router's hashes of what an engine stored equal
/// the hasher's of the same tokens. The token ids take every integer width MessagePack has.
#[test]
fn every_block_size_hashes_as_the_router_does() {
    let widths = [5u32, 200, 40_000, 151_000, u32::MAX];
    for bs in (1..=20).chain([31, 63, 64, 65, 255, 257]) {
        let mut index = index();
        let mut ingest = KvIngest::new(vec![EngineSlot::empty(); 64], bs).unwrap();
        let w = WorkerKey::new(1, 0);
        let n = 3usize;
        let tokens: Vec<u32> = (0..3 * bs)
            .map(|i| widths[i as usize % widths.len()].wrapping_sub(i % 3))
            .collect();
        let ev = Ev::Stored {
            hashes: (500..).take(n).map(EngineHash::Int).collect(),
            parent: None,
            tokens: tokens.clone(),
            block_size: bs,
            lora_id: None,
            lora_name: None,
            medium: Some("GPU"),
        };
        let s = ingest
            .apply(&mut index, w, &encode(1.0, &[ev], None, bs % 2 == 0))
            .unwrap();
        assert_eq!(s.stored_blocks, n, "block size {bs}");
        let mut want = vec![0u64; n];
        BlockHasher::new(bs, None)
            .unwrap()
            .sequence_hashes(&tokens, None, &mut want)
            .unwrap();
        for (k, want) in want.iter().enumerate() {
            let got = ingest.router_hash(w, 500 + u64::try_from(k).unwrap());
            assert_eq!(got, Some(*want), "block size {bs}, block {k}");
        }
    }
}

#[test]
fn the_batch_names_the_data_parallel_rank() {
    let mut index = index();
    let mut ingest = ingest(64);
    let payload = encode(1.0, &[stored(1, 1, None, 0)], Some(5), false);
    let s = ingest
        .apply(&mut index, WorkerKey::new(9, 0), &payload)
        .unwrap();
    assert_eq!(s.worker, WorkerKey::new(9, 5));
    assert!(ingest.router_hash(WorkerKey::new(9, 5), 1).is_some());
    assert!(ingest.router_hash(WorkerKey::new(9, 0), 1).is_none());
}

#[test]
fn lora_and_bytes_hashes() {
    let mut index = index();
    let mut ingest = ingest(64);
    let w = WorkerKey::new(1, 0);
    let tokens: Vec<u32> = vec![5, 6, 7, 8];
    let ev = |lora_id, lora_name: Option<&str>, h: u8| Ev::Stored {
        hashes: vec![EngineHash::Bytes([h; 32])],
        parent: None,
        tokens: tokens.clone(),
        block_size: BS,
        lora_id,
        lora_name: lora_name.map(str::to_owned),
        medium: Some("gpu"),
    };
    let payload = encode(
        0.5,
        &[
            ev(None, Some("adapter-7"), 1),
            ev(Some(42), None, 2),
            ev(Some(42), Some(""), 3),
        ],
        None,
        false,
    );
    ingest.apply(&mut index, w, &payload).unwrap();
    let expect = |name: &[u8]| {
        let mut h = [0u64; 1];
        BlockHasher::new(BS, Some(name))
            .unwrap()
            .sequence_hashes(&tokens, None, &mut h)
            .unwrap();
        h[0]
    };
    let key = |h: u8| EngineHash::Bytes([h; 32]).key();
    assert_eq!(ingest.router_hash(w, key(1)), Some(expect(b"adapter-7")));
    // Only lora_id: salted with its digits; an empty name falls back to the id.
    assert_eq!(ingest.router_hash(w, key(2)), Some(expect(b"42")));
    assert_eq!(ingest.router_hash(w, key(3)), Some(expect(b"42")));
}

#[test]
fn tiers_are_tracked_per_block() {
    let mut index = index();
    let mut ingest = ingest(64);
    let w = WorkerKey::new(1, 0);
    let on = |medium| {
        let mut e = stored(7, 1, None, 0);
        if let Ev::Stored { medium: m, .. } = &mut e {
            *m = medium;
        }
        e
    };
    let payload = encode(
        0.0,
        &[on(Some("GPU")), on(Some("CPU_PINNED")), on(Some("DISK"))],
        None,
        false,
    );
    ingest.apply(&mut index, w, &payload).unwrap();
    let router = ingest.router_hash(w, 7).unwrap();
    let mut overlaps = Overlaps::new();
    index.query(&[router], &mut overlaps);
    // Counted once, in the fastest tier.
    assert_eq!(index.overlap(&overlaps, w), Some([1, 0, 0]));
    // Evicted from the GPU: still mapped, still on the host and disk.
    let rm = |medium| Ev::Removed {
        hashes: vec![EngineHash::Int(7)],
        medium,
    };
    ingest
        .apply(&mut index, w, &encode(0.0, &[rm(Some("GPU"))], None, false))
        .unwrap();
    index.query(&[router], &mut overlaps);
    assert_eq!(index.overlap(&overlaps, w), Some([0, 1, 0]));
    ingest
        .apply(
            &mut index,
            w,
            &encode(0.0, &[rm(Some("CPU")), rm(Some("EXTERNAL"))], None, false),
        )
        .unwrap();
    assert_eq!(
        ingest.router_hash(w, 7),
        None,
        "gone from every tier: unmapped"
    );
    index.query(&[router], &mut overlaps);
    assert_eq!(index.overlap(&overlaps, w), Some([0, 0, 0]));
}

#[test]
fn the_map_stays_bounded() {
    let mut index = index();
    let mut ingest = ingest(16); // 8 mappings
    let w = WorkerKey::new(1, 0);
    let payload = encode(0.0, &[stored(0, 20, None, 0)], None, false);
    let s = ingest.apply(&mut index, w, &payload).unwrap();
    assert_eq!(s.stored_blocks, 20, "every block reaches the index");
    let c = ingest.counters();
    assert_eq!((c.mapped, c.forgotten), (8, 12));
    // The mapping forgotten is another block's, never the one being stored: the block stored
    // last is always mapped.
    for first in 100..116 {
        let payload = encode(0.0, &[stored(first, 20, None, 0)], None, false);
        ingest.apply(&mut index, w, &payload).unwrap();
        let last = u64::try_from(first + 19).unwrap();
        assert!(ingest.router_hash(w, last).is_some(), "block {last}");
    }
}

/// A snapshot of everything observable, to check that a refused payload changed nothing.
fn snapshot(index: &Index, ingest: &Ingest, workers: &[WorkerKey], hashes: &[u64]) -> Vec<u64> {
    let mut out = vec![
        index.counters().blocks as u64,
        ingest.counters().mapped as u64,
    ];
    let mut overlaps = Overlaps::new();
    for &h in hashes {
        index.query(&[h], &mut overlaps);
        for &w in workers {
            out.extend(index.overlap(&overlaps, w).unwrap_or([9; 3]).map(u64::from));
            out.push(ingest.router_hash(w, h).unwrap_or(0));
        }
    }
    out
}

#[test]
fn every_truncation_and_corruption_is_an_error_that_changes_nothing() {
    let w = WorkerKey::new(2, 0);
    let mut index = index();
    let mut ingest = ingest(256);
    let base = encode(0.0, &[stored(1, 3, None, 0)], None, false);
    ingest.apply(&mut index, w, &base).unwrap();
    let mut probe: Vec<u64> = (1..4).map(|h| ingest.router_hash(w, h).unwrap()).collect();
    probe.extend(1..8);
    let before = snapshot(&index, &ingest, &[w], &probe);
    let payload = encode(
        1.0,
        &[
            Ev::Removed {
                hashes: vec![EngineHash::Int(1)],
                medium: Some("GPU"),
            },
            stored(4, 2, Some(3), 12),
            Ev::Cleared,
        ],
        Some(0),
        false,
    );
    for cut in 0..payload.len() {
        let err = ingest.apply(&mut index, w, &payload[..cut]).unwrap_err();
        let IngestError::Wire(e) = err else {
            panic!("{err}")
        };
        assert!(e.offset <= cut, "cut {cut}: {e}");
        assert_eq!(snapshot(&index, &ingest, &[w], &probe), before, "cut {cut}");
    }
    let mut refused = 0;
    for at in 0..payload.len() {
        for byte in [
            0x00,
            0x7f,
            0xc0,
            0xc1,
            0xcf,
            0xdd,
            0xdf,
            0xff,
            payload[at] ^ 0x01,
        ] {
            let mut bad = payload.clone();
            bad[at] = byte;
            if let Err(err) = ingest.apply(&mut index, w, &bad) {
                refused += 1;
                assert_eq!(
                    snapshot(&index, &ingest, &[w], &probe),
                    before,
                    "byte {at} = {byte:#x}: {err}"
                );
            } else {
                // Accepted: put the state back for the next case.
                index = self::index();
                ingest = self::ingest(256);
                ingest.apply(&mut index, w, &base).unwrap();
            }
        }
    }
    assert!(
        refused > payload.len(),
        "only {refused} corruptions refused"
    );
}

#[test]
#[allow(clippy::too_many_lines, reason = "one case per error")]
fn errors_name_the_byte_and_the_problem() {
    let w = WorkerKey::new(1, 0);
    let mut index = index();
    let mut ingest = ingest(64);
    let mut check = |payload: &[u8], sentence: &str| {
        let err = ingest.apply(&mut index, w, payload).unwrap_err();
        assert_eq!(err.to_string(), sentence);
    };
    let mut wrong_size = stored(1, 1, None, 0);
    if let Ev::Stored {
        block_size, tokens, ..
    } = &mut wrong_size
    {
        *block_size = 2;
        tokens.truncate(2);
    }
    check(
        &encode(0.0, &[wrong_size], None, false),
        "KV event payload, byte 30: block_size 2 differs from the router's block size 4",
    );
    let mut short = stored(1, 2, None, 0);
    if let Ev::Stored { tokens, .. } = &mut short {
        tokens.pop();
    }
    check(
        &encode(0.0, &[short], None, false),
        "KV event payload, byte 28: 7 token ids for 2 blocks of 4 tokens",
    );
    let mut medium = stored(1, 1, None, 0);
    if let Ev::Stored { medium: m, .. } = &mut medium {
        *m = Some("TAPE");
    }
    check(
        &encode(0.0, &[medium], None, false),
        "KV event payload, byte 34: unknown medium (expected GPU, CPU, CPU_PINNED, DISK, EXTERNAL or REMOTE)",
    );
    let mut mp = Mp::default();
    mp.array(2).f64(0.0).array(1).array(1).str("BlockMoved");
    check(
        &mp.0,
        "KV event payload, byte 12: unknown event (expected BlockStored, BlockRemoved or AllBlocksCleared)",
    );
    let mut extra = encode(0.0, &[], None, false);
    extra.push(0);
    check(
        &extra,
        "KV event payload, byte 11: bytes after the end of the batch",
    );
    let mut mp = Mp::default();
    mp.array(2)
        .f64(0.0)
        .array(1)
        .array(6)
        .str("BlockStored")
        .array(0)
        .nil()
        .array(0)
        .int(-1);
    check(
        &mp.0,
        "KV event payload, byte 27: integer out of range (0 to 4294967295)",
    );
    let mut mp = Mp::default();
    mp.map(1).str("ts").f64(0.0);
    check(&mp.0, "KV event payload, byte 0: missing field `events`");
    let mut mp = Mp::default();
    mp.array(2)
        .f64(0.0)
        .array(1)
        .map(1)
        .str("type")
        .str("BlockRemoved");
    check(
        &mp.0,
        "KV event payload, byte 11: missing field `block_hashes`",
    );
    check(
        &[0xc1],
        "KV event payload, byte 0: expected an array or a map, found marker 0xc1",
    );
    check(
        &[],
        "KV event payload, byte 0: the payload ends inside a value",
    );
    // A worker the index has no bit for.
    let mut full = PrefixIndex::<_, _, 1>::new(
        vec![BlockSlot::<1>::empty(); 64],
        vec![WorkerSlot::empty(); 128],
    )
    .unwrap();
    for i in 0..64 {
        full.apply(&KvEvent::Stored {
            worker: WorkerKey::new(i, 0),
            tier: Tier::Device,
            hashes: &[i],
        })
        .unwrap();
    }
    let err = ingest
        .apply(
            &mut full,
            WorkerKey::new(99, 0),
            &encode(0.0, &[stored(1, 1, None, 0)], None, false),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "worker 99/0 does not fit: the index tracks at most 64 workers"
    );
    assert_eq!(ingest.counters().mapped, 0);
}

#[test]
fn sequence_numbers() {
    let mut seq = SequenceCheck::new();
    assert_eq!(seq.step(41), SequenceStep::Next);
    seq.applied(41);
    assert_eq!(seq.step(42), SequenceStep::Next);
    assert_eq!(seq.step(41), SequenceStep::Seen);
    assert_eq!(seq.step(45), SequenceStep::Gap { missed: (42, 44) });
    seq.applied(45);
    seq.applied(43); // a replayed batch never moves it back
    assert_eq!(seq.last(), Some(45));
}

fn arb_hash() -> impl Strategy<Value = EngineHash> {
    prop_oneof![
        (0i64..40).prop_map(EngineHash::Int),
        (-3i64..0).prop_map(EngineHash::Int),
        (0u8..40).prop_map(|b| EngineHash::Bytes([b; 32])),
    ]
}

fn arb_medium() -> impl Strategy<Value = Option<&'static str>> {
    prop_oneof![
        Just(None),
        Just(Some("GPU")),
        Just(Some("CPU")),
        Just(Some("DISK"))
    ]
}

fn arb_event() -> impl Strategy<Value = Ev> {
    prop_oneof![
        4 => (
            prop::collection::vec(arb_hash(), 1..6),
            prop::option::of(arb_hash()),
            prop::option::of(0u64..3),
            prop::option::of(prop_oneof![Just(String::new()), Just("a".to_owned())]),
            arb_medium(),
            0u32..3,
        )
            .prop_map(|(hashes, parent, lora_id, lora_name, medium, t)| Ev::Stored {
                tokens: (0..u32::try_from(hashes.len()).unwrap() * BS).map(|i| i * 7 + t).collect(),
                hashes,
                parent,
                block_size: BS,
                lora_id,
                lora_name,
                medium,
            }),
        2 => (prop::collection::vec(arb_hash(), 1..6), arb_medium())
            .prop_map(|(hashes, medium)| Ev::Removed { hashes, medium }),
        1 => Just(Ev::Cleared),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_streams_match_the_model(
        batches in prop::collection::vec(
            (0u64..3, prop::collection::vec(arb_event(), 0..5), any::<bool>()),
            1..12,
        )
    ) {
        let workers: Vec<WorkerKey> = (0..3).map(|i| WorkerKey::new(i, 0)).collect();
        let mut index = index();
        let mut ingest = ingest(1024);
        // The same stream through `apply_batch`, which hashes every block from its token ids
        // (`apply` hashes them as it checks the payload).
        let (mut index2, mut ingest2) = (self::index(), self::ingest(1024));
        let mut model = Model::default();
        for (w, events, maps) in &batches {
            let worker = workers[usize::try_from(*w).unwrap()];
            let payload = encode(0.0, events, None, *maps);
            ingest.apply(&mut index, worker, &payload).unwrap();
            let batch = KvBatch::parse(&payload).unwrap();
            ingest2.apply_batch(&mut index2, worker, &batch).unwrap();
            prop_assert_eq!(ingest.counters(), ingest2.counters());
            prop_assert_eq!(index.counters(), index2.counters());
            model.apply(worker, events);
            model.check(&index, &workers);
            for (&(mw, key), &(router, _)) in &model.map {
                prop_assert_eq!(ingest.router_hash(mw, key), Some(router));
                prop_assert_eq!(ingest2.router_hash(mw, key), Some(router));
            }
            prop_assert_eq!(ingest.counters().mapped, model.map.len());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The same streams through a map of 8 mappings, which forgets some to make room: it never
    /// holds more, every mapping it counts is found, and, while forgetting has orphaned no
    /// block, each mapping it keeps is that of a map that never forgets.
    #[test]
    fn a_bounded_map_finds_every_mapping_it_keeps(
        batches in prop::collection::vec(
            (0u64..3, prop::collection::vec(arb_event(), 0..5), any::<bool>()),
            1..12,
        )
    ) {
        let workers: Vec<WorkerKey> = (0..3).map(|i| WorkerKey::new(i, 0)).collect();
        let keys: Vec<u64> = (-3i64..40)
            .map(EngineHash::Int)
            .chain((0u8..40).map(|b| EngineHash::Bytes([b; 32])))
            .map(EngineHash::key)
            .collect();
        let (mut index2, mut large) = (index(), ingest(1024));
        let (mut index, mut small) = (index(), ingest(16));
        for (w, events, maps) in &batches {
            let worker = workers[usize::try_from(*w).unwrap()];
            let payload = encode(0.0, events, None, *maps);
            small.apply(&mut index, worker, &payload).unwrap();
            large.apply(&mut index2, worker, &payload).unwrap();
            let (c, l) = (small.counters(), large.counters());
            prop_assert!(c.mapped <= small.capacity());
            let mut found = 0;
            for &w in &workers {
                for &k in &keys {
                    let Some(router) = small.router_hash(w, k) else { continue };
                    found += 1;
                    if c.orphaned_blocks == l.orphaned_blocks {
                        prop_assert_eq!(large.router_hash(w, k), Some(router));
                    }
                }
            }
            prop_assert_eq!(found, c.mapped, "a mapping counted but not found");
        }
    }
}

/// A `BlockRemoved` event longer than the ingest's chunk of 16, with unknown and repeated hashes
/// among the stored ones: every stored block leaves the map and the index, each unknown or
/// repeated hash is counted as unknown.
#[test]
fn a_removal_longer_than_a_chunk_removes_every_block() {
    let w = WorkerKey::new(2, 0);
    let mut index = index();
    let mut ingest = ingest(256);
    ingest
        .apply(
            &mut index,
            w,
            &encode(0.0, &[stored(1, 40, None, 0)], None, false),
        )
        .unwrap();
    let routers: Vec<u64> = (1..41).map(|h| ingest.router_hash(w, h).unwrap()).collect();
    let mut overlaps = Overlaps::<1>::new();
    index.query(&routers, &mut overlaps);
    assert_eq!(index.overlap(&overlaps, w).map(|o| o[0]), Some(40));
    let mut hashes: Vec<EngineHash> = (1..41).map(EngineHash::Int).collect();
    hashes.extend([100, 5, 101, 40, 102].map(EngineHash::Int));
    let removal = Ev::Removed {
        hashes,
        medium: Some("GPU"),
    };
    let s = ingest
        .apply(&mut index, w, &encode(1.0, &[removal], None, false))
        .unwrap();
    assert_eq!((s.removed_blocks, s.unknown_removals), (40, 5));
    assert!((1..41).all(|h| ingest.router_hash(w, h).is_none()));
    index.query(&routers, &mut overlaps);
    assert_eq!(index.overlap(&overlaps, w).map_or(0, |o| o[0]), 0);
}
