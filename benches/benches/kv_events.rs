//! Engines' KV events (issue 15): hashing a prompt's tokens into block hashes, and decoding and
//! applying `BlockStored` batches of 16 blocks, as vLLM sends them (msgpack, `array_like`), at
//! steady state (index and engine-hash map full, evicting).
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

/// `[ts, [["BlockStored", hashes, parent, tokens, 16, None, "GPU"]], 0]`: 16 blocks of random
/// token ids (a 152k vocabulary), engine hashes as 64-bit integers or 32 bytes (vLLM's sha256).
fn payload(rng: &mut fastrand::Rng, bytes: bool) -> Vec<u8> {
    let mut p = vec![0x93, 0xcb];
    p.extend_from_slice(&1.7e9f64.to_bits().to_be_bytes());
    p.extend_from_slice(&[0x91, 0x97, 0xab]);
    p.extend_from_slice(b"BlockStored");
    p.extend_from_slice(&[0xdc, 0, 16]);
    for _ in 0..16 {
        if bytes {
            p.extend_from_slice(&[0xc4, 32]);
            p.extend((0..32).map(|_| rng.u8(..)));
        } else {
            uint(&mut p, rng.u64(..));
        }
    }
    p.push(0xc0);
    p.extend_from_slice(&[0xdc, 1, 0]); // 256 token ids
    for _ in 0..256 {
        uint(&mut p, u64::from(rng.u32(..152_064)));
    }
    p.extend_from_slice(&[16, 0xc0, 0xa3, b'G', b'P', b'U', 0]);
    p
}

fn ingest(c: &mut Criterion) {
    let mut group = c.benchmark_group("kv-ingest");
    group.throughput(Throughput::Elements(16));
    // The payload checked whole and nothing else: what decoding costs apart from hashing, the
    // engine-hash map and the index.
    let mut rng = fastrand::Rng::with_seed(11);
    let payloads: Vec<Vec<u8>> = (0..64).map(|_| payload(&mut rng, false)).collect();
    let mut i = 0usize;
    group.bench_function("parse-only/int-hashes", |b| {
        b.iter(|| {
            i += 1;
            KvBatch::parse(black_box(&payloads[i % payloads.len()])).map(|batch| batch.len())
        });
    });
    for (name, bytes) in [("int-hashes", false), ("bytes-hashes", true)] {
        let mut rng = fastrand::Rng::with_seed(11);
        // 4,096 batches, 65,536 blocks: twice what the index and the map hold.
        let payloads: Vec<Vec<u8>> = (0..4096).map(|_| payload(&mut rng, bytes)).collect();
        let mut index = PrefixIndex::<_, _, 1>::new(
            vec![BlockSlot::<1>::empty(); 1 << 16],
            vec![WorkerSlot::empty(); 128],
        )
        .unwrap();
        let mut kv = KvIngest::new(vec![EngineSlot::empty(); 1 << 16], BLOCK).unwrap();
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
    }
    group.finish();
}

criterion_group!(benches, hashing, ingest);
criterion_main!(benches);
