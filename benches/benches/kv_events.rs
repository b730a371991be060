//! Engines' KV events (issue 15): hashing a prompt's tokens into block hashes, and decoding and
//! applying `BlockStored` batches of 16 blocks, as vLLM sends them (msgpack, `array_like`), at
//! steady state (index and engine-hash map full, evicting), and with removals keeping them from
//! filling.
//! `cargo bench -p libroute-benches --bench kv_events`.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use libroute_core::{
    BlockHasher, BlockSlot, EngineSlot, KvBatch, KvIngest, PrefixIndex, WorkerKey, WorkerSlot,
};

const BLOCK: u32 = 16;

fn hashing(c: &mut Criterion) {
    let mut rng = fastrand::Rng::with_seed(7);
    let tokens: Vec<u32> = (0..2048).map(|_| rng.u32(..152_064)).collect();
    let mut out = [0u64; 128];
    let mut group = c.benchmark_group("hash");
    group.throughput(Throughput::Elements(128));
    for (name, lora) in [("base", None), ("lora", Some(&b"adapter-7"[..]))] {
        let hasher = BlockHasher::new(BLOCK, lora).unwrap();
        group.bench_function(format!("2048-tokens/128-blocks/{name}"), |b| {
            b.iter(|| hasher.sequence_hashes(black_box(&tokens), None, &mut out));
        });
    }
    // The other usual block size: 64 tokens, as some engines and routers are configured.
    group.throughput(Throughput::Elements(32));
    let hasher = BlockHasher::new(64, None).unwrap();
    group.bench_function("2048-tokens/32-blocks-of-64/base", |b| {
        b.iter(|| hasher.sequence_hashes(black_box(&tokens), None, &mut out));
    });
    group.finish();
}

/// A MessagePack unsigned integer, smallest form.
fn uint(p: &mut Vec<u8>, v: u64) {
    if v < 128 {
        p.push(u8::try_from(v).unwrap());
    } else if let Ok(v) = u16::try_from(v) {
        if let Ok(v) = u8::try_from(v) {
            p.extend_from_slice(&[0xcc, v]);
        } else {
            p.push(0xcd);
            p.extend_from_slice(&v.to_be_bytes());
        }
    } else if let Ok(v) = u32::try_from(v) {
        p.push(0xce);
        p.extend_from_slice(&v.to_be_bytes());
    } else {
        p.push(0xcf);
        p.extend_from_slice(&v.to_be_bytes());
    }
}

/// 16 engine block hashes: 64-bit integers, or 32 bytes (vLLM's sha256), each as msgpack.
fn engine_hashes(rng: &mut fastrand::Rng, bytes: bool) -> Vec<Vec<u8>> {
    (0..16)
        .map(|_| {
            let mut h = Vec::new();
            if bytes {
                h.extend_from_slice(&[0xc4, 32]);
                h.extend((0..32).map(|_| rng.u8(..)));
            } else {
                uint(&mut h, rng.u64(..));
            }
            h
        })
        .collect()
}

/// `[ts, [event], 0]`, the event starting with `head` (its array marker and tag) and the 16
/// `hashes`.
fn batch_start(head: &[u8], hashes: &[Vec<u8>]) -> Vec<u8> {
    let mut p = vec![0x93, 0xcb];
    p.extend_from_slice(&1.7e9f64.to_bits().to_be_bytes());
    p.push(0x91);
    p.extend_from_slice(head);
    p.extend_from_slice(&[0xdc, 0, 16]);
    for h in hashes {
        p.extend_from_slice(h);
    }
    p
}

/// `[ts, [["BlockStored", hashes, parent, tokens, 16, None, "GPU"]], 0]`: 16 blocks of random
/// token ids (a 152k vocabulary) and the engine's `hashes`.
fn stored(rng: &mut fastrand::Rng, hashes: &[Vec<u8>]) -> Vec<u8> {
    let mut p = batch_start(b"\x97\xabBlockStored", hashes);
    p.push(0xc0);
    p.extend_from_slice(&[0xdc, 1, 0]); // 256 token ids
    for _ in 0..256 {
        uint(&mut p, u64::from(rng.u32(..152_064)));
    }
    p.extend_from_slice(&[16, 0xc0, 0xa3, b'G', b'P', b'U', 0]);
    p
}

/// `[ts, [["BlockRemoved", hashes, "GPU"]], 0]`.
fn removed(hashes: &[Vec<u8>]) -> Vec<u8> {
    let mut p = batch_start(b"\x93\xacBlockRemoved", hashes);
    p.extend_from_slice(&[0xa3, b'G', b'P', b'U', 0]);
    p
}

/// A stream of `count` stored batches of new blocks; with `bytes`, engine hashes of 32 bytes.
fn stream(count: usize, bytes: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rng = fastrand::Rng::with_seed(11);
    (0..count)
        .map(|_| {
            let hashes = engine_hashes(&mut rng, bytes);
            (stored(&mut rng, &hashes), removed(&hashes))
        })
        .collect()
}

/// The index the ingest feeds.
type Index = PrefixIndex<Vec<BlockSlot<1>>, Vec<WorkerSlot>, 1>;

/// An index and an engine-hash map of 2^16 slots each: 32,768 blocks.
fn tables() -> (Index, KvIngest<Vec<EngineSlot>>) {
    let index = PrefixIndex::new(
        vec![BlockSlot::<1>::empty(); 1 << 16],
        vec![WorkerSlot::empty(); 128],
    )
    .unwrap();
    let kv = KvIngest::new(vec![EngineSlot::empty(); 1 << 16], BLOCK).unwrap();
    (index, kv)
}

fn ingest(c: &mut Criterion) {
    let mut group = c.benchmark_group("kv-ingest");
    group.throughput(Throughput::Elements(16));
    // The payload checked whole and nothing else: what decoding costs apart from hashing, the
    // engine-hash map and the index.
    let payloads: Vec<Vec<u8>> = stream(64, false).into_iter().map(|(s, _)| s).collect();
    let mut i = 0usize;
    group.bench_function("parse-only/int-hashes", |b| {
        b.iter(|| {
            i += 1;
            KvBatch::parse(black_box(&payloads[i % payloads.len()])).map(|batch| batch.len())
        });
    });
    for (name, bytes) in [("int-hashes", false), ("bytes-hashes", true)] {
        // 4,096 batches, 65,536 blocks: twice what the index and the map hold.
        let batches = stream(4096, bytes);
        let payloads: Vec<&[u8]> = batches.iter().map(|(s, _)| s.as_slice()).collect();
        let (mut index, mut kv) = tables();
        let mut i = 0usize;
        group.bench_function(format!("stored-16-blocks/{name}"), |b| {
            b.iter(|| {
                let worker = WorkerKey::new((i % 64) as u64, 0);
                let p = &payloads[i % payloads.len()];
                i += 1;
                kv.apply(&mut index, worker, black_box(p)).unwrap()
            });
        });
        // The same stream, each payload read once (untimed) just before it is applied, as a
        // subscriber applies a payload its socket has just received: in cache. The batches
        // above rotate through 4,096 payloads (5 MiB with bytes hashes), so their first reads
        // of the payload miss the cache; a received one does not. Timed one apply at a time,
        // so it carries the timer's own cost too.
        group.bench_function(format!("stored-16-blocks/{name}/received"), |b| {
            b.iter_batched(
                || {
                    let p = &payloads[i % payloads.len()];
                    let worker = WorkerKey::new((i % 64) as u64, 0);
                    i += 1;
                    black_box(p.iter().fold(0u8, |sum, &byte| sum ^ byte));
                    (worker, p)
                },
                |(worker, p)| kv.apply(&mut index, worker, black_box(p)).unwrap(),
                BatchSize::PerIteration,
            );
        });
        // Each batch's blocks removed 256 batches after they were stored, as an engine reports
        // what it evicts: both tables hold about 4,096 blocks and never fill. A store and a
        // removal per iteration, 32 blocks.
        group.throughput(Throughput::Elements(32));
        let (mut index, mut kv) = tables();
        let mut i = 0usize;
        let lag = 256;
        let at = |i: usize| {
            (
                WorkerKey::new((i % 64) as u64, 0),
                &batches[i % batches.len()],
            )
        };
        for j in 0..lag {
            let (worker, (stored, _)) = at(j);
            kv.apply(&mut index, worker, stored).unwrap();
        }
        group.bench_function(format!("stored+removed-16-blocks/{name}"), |b| {
            b.iter(|| {
                let (worker, (stored, _)) = at(i + lag);
                kv.apply(&mut index, worker, black_box(stored)).unwrap();
                let (worker, (_, removed)) = at(i);
                i += 1;
                kv.apply(&mut index, worker, black_box(removed)).unwrap()
            });
        });
        group.throughput(Throughput::Elements(16));
    }
    group.finish();
}

criterion_group!(benches, hashing, ingest);
criterion_main!(benches);
