//! The host-side parts (issue 4): overlap lookup, KV event ingest, book + free, and one full
//! query + select + book. `cargo bench -p libroute-benches --bench host`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use libroute_benches::router_prompts;
use libroute_core::{
    BlockSlot, DefaultKnobs, Fleet, FleetPlace, KvEvent, Ledger, LoadSlot, Overlaps, Place,
    PrefixIndex, Request, RequestSlot, Router, Row, Selector, TaintSet, Tier, WorkerKey,
    WorkerSlot,
};

/// A 256-block prompt; worker `w` of 64 holds its first `4w` blocks, tiers rotating by position.
fn lookup(c: &mut Criterion) {
    let mut index = PrefixIndex::<_, _, 1>::new(
        vec![BlockSlot::<1>::empty(); 1 << 16],
        vec![WorkerSlot::empty(); 128],
    )
    .unwrap();
    let prompt: Vec<u64> = (0..256).map(|b| 0x5eed_0000 + b).collect();
    for w in 0..64u64 {
        let n = usize::try_from(4 * w).unwrap();
        for (i, chunk) in prompt[..n].chunks(16).enumerate() {
            let tier = Tier::ALL[i % 3];
            index
                .apply(&KvEvent::Stored {
                    worker: WorkerKey::new(w, 0),
                    tier,
                    hashes: chunk,
                })
                .unwrap();
        }
    }
    let mut overlaps = Overlaps::<1>::new();
    let mut rows: Vec<Row> = (0..64).map(|w| Row::new(WorkerKey::new(w, 0))).collect();
    c.bench_function("index/lookup/256-blocks/64-workers", |b| {
        b.iter(|| index.query(black_box(&prompt), &mut overlaps));
    });
    c.bench_function("index/lookup+fill-rows/256-blocks/64-workers", |b| {
        b.iter(|| {
            index.query(black_box(&prompt), &mut overlaps);
            index.fill_rows(&overlaps, &mut rows, 0.75, 0.25, 16);
        });
    });
}

/// Stored events of 16 blocks from 64 workers, half of them followed by a removal of 8 blocks,
/// at steady state (the table full, evicting): into a 2^16-slot table (3 MiB, cache-resident) and a
/// 2^20-slot table (48 MiB, mostly cache misses).
fn ingest(c: &mut Criterion) {
    let mut group = c.benchmark_group("index/ingest");
    group.throughput(Throughput::Elements(16 * 1024));
    for log2 in [16u32, 20] {
        let mut index = PrefixIndex::<_, _, 1>::new(
            vec![BlockSlot::<1>::empty(); 1 << log2],
            vec![WorkerSlot::empty(); 128],
        )
        .unwrap();
        let mut next = 0u64;
        group.bench_function(
            BenchmarkId::new("stored+removed-16-block-events/table-slots-2^", log2),
            |b| {
                b.iter(|| {
                    for e in 0..1024u64 {
                        let base = next * 16;
                        let hashes: [u64; 16] = std::array::from_fn(|i| base + i as u64);
                        let worker = WorkerKey::new(e % 64, 0);
                        index
                            .apply(&KvEvent::Stored {
                                worker,
                                tier: Tier::Device,
                                hashes: &hashes,
                            })
                            .unwrap();
                        if e % 2 == 1 {
                            index
                                .apply(&KvEvent::Removed {
                                    worker,
                                    tier: Tier::Device,
                                    hashes: &hashes[8..],
                                })
                                .unwrap();
                        }
                        next += 1;
                    }
                });
            },
        );
    }
    group.finish();
}

fn book_free(c: &mut Criterion) {
    let mut ledger = Ledger::new(
        vec![RequestSlot::empty(); 1 << 14],
        vec![LoadSlot::empty(); 128],
        vec![0u64; 1024],
    )
    .unwrap();
    for w in 0..64 {
        ledger.add_worker(WorkerKey::new(w, 0)).unwrap();
    }
    let mut id = 0u64;
    let mut group = c.benchmark_group("ledger");
    group.throughput(Throughput::Elements(1));
    group.bench_function("book+free", |b| {
        b.iter(|| {
            id += 1;
            ledger
                .book(id, WorkerKey::new(id % 64, 0), 2048, 128)
                .unwrap();
            ledger.free(black_box(id)).unwrap();
        });
    });
    group.finish();
}

macro_rules! route_bench {
    ($group:expr, $workers:expr, $words:expr) => {{
        let workers: u64 = $workers;
        let index = PrefixIndex::<_, _, $words>::new(
            vec![BlockSlot::<$words>::empty(); 1 << 18],
            vec![WorkerSlot::empty(); 128 * $words],
        )
        .unwrap();
        let ledger = Ledger::new(
            vec![RequestSlot::empty(); 1 << 12],
            vec![LoadSlot::empty(); 2 * 128 * $words],
            vec![0u64; 64],
        )
        .unwrap();
        let mut router = Router::new(index, ledger, 0.75, 0.25);
        let prompts = router_prompts();
        for w in 0..workers {
            router.ledger.add_worker(WorkerKey::new(w, 0)).unwrap();
            let prompt = &prompts[usize::try_from(w % 64).unwrap()];
            router
                .index
                .apply(&KvEvent::Stored {
                    worker: WorkerKey::new(w, 0),
                    tier: Tier::Device,
                    hashes: &prompt[..64],
                })
                .unwrap();
        }
        let policy = DefaultKnobs::default().build().unwrap();
        let mut selector = Box::new(Selector::<1024>::new());
        let mut rows: Vec<Row> = (0..workers)
            .map(|w| Row::new(WorkerKey::new(w, 0)))
            .collect();
        let request = Request::new(2048, 16).has_tier_matches(true);
        let mut id = 0u64;
        $group.bench_function(BenchmarkId::new("query+select+book", workers), |b| {
            b.iter(|| {
                id += 1;
                let prompt = &prompts[usize::try_from(id % 64).unwrap()];
                let s = router
                    .route(
                        &policy,
                        &mut selector,
                        &request,
                        black_box(prompt),
                        &mut rows,
                        id,
                    )
                    .unwrap();
                router.ledger.free(id).unwrap();
                s.row
            });
        });
        // The same routes over the same rows with places kept beside them
        // (`Router::route_placed`, what the C ABI's router does for its callers).
        let mut places = vec![Place::empty(); rows.len()];
        $group.bench_function(BenchmarkId::new("placed/query+select+book", workers), |b| {
            b.iter(|| {
                id += 1;
                let prompt = &prompts[usize::try_from(id % 64).unwrap()];
                let s = router
                    .route_placed(
                        &policy,
                        &mut selector,
                        &request,
                        black_box(prompt),
                        &mut rows,
                        &mut places,
                        id,
                    )
                    .unwrap();
                router.ledger.free(id).unwrap();
                s.row
            });
        });
        // The same routes over a fleet the router keeps (`Router::route_fleet`): its workers
        // found where they were last time instead of by hashing.
        let mut fleet = Fleet::new(
            vec![Row::default(); rows.len()],
            vec![FleetPlace::empty(); rows.len()],
        )
        .unwrap();
        for w in 0..workers {
            fleet.add(WorkerKey::new(w, 0), TaintSet::EMPTY).unwrap();
        }
        $group.bench_function(BenchmarkId::new("fleet/query+select+book", workers), |b| {
            b.iter(|| {
                id += 1;
                let prompt = &prompts[usize::try_from(id % 64).unwrap()];
                let s = router
                    .route_fleet(
                        &mut fleet,
                        &policy,
                        &mut selector,
                        &request,
                        black_box(prompt),
                        id,
                    )
                    .unwrap();
                router.ledger.free(id).unwrap();
                s.row
            });
        });
    }};
}

fn route(c: &mut Criterion) {
    let mut group = c.benchmark_group("router");
    route_bench!(group, 64, 1);
    route_bench!(group, 1024, 16);
    group.finish();
}

criterion_group!(benches, lookup, ingest, book_free, route);
criterion_main!(benches);
