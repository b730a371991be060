//! Where the router's decision goes at 1,024 workers: the parts of `Router::route` one at a
//! time, on the `host` benchmark's fleet (worker `w` holds the first 64 blocks of prompt
//! `w % 64`, a 128-block prompt): the overlap query (of one prompt, and of the 64 prompts in
//! turn, as the `host` benchmark's router routes them), writing the rows' CACHE inputs from it
//! (`index-fill`; `index-probe` is its worker lookups alone, `from-tiers` its estimates alone),
//! writing their LOAD inputs (`ledger-fill`), and the selection; and the query against an index
//! larger than the cache (`query-rotating/2048-prompts-out-of-cache`). `cargo bench -p
//! libroute-benches --bench route_parts`; medians in `benches/RESULTS.md`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use libroute_benches::router_prompts;
use libroute_core::{
    BlockSlot, Cache, DefaultKnobs, KvEvent, Ledger, LoadSlot, Overlaps, PrefixIndex, Request,
    RequestSlot, Row, Selector, Tier, WorkerKey, WorkerSlot,
};

const WORKERS: u64 = 1024;
const WORDS: usize = 16;

fn parts(c: &mut Criterion) {
    let mut index = PrefixIndex::<_, _, WORDS>::new(
        vec![BlockSlot::<WORDS>::empty(); 1 << 18],
        vec![WorkerSlot::empty(); 128 * WORDS],
    )
    .unwrap();
    let mut ledger = Ledger::new(
        vec![RequestSlot::empty(); 1 << 12],
        vec![LoadSlot::empty(); 2 * 128 * WORDS],
        vec![0u64; 64],
    )
    .unwrap();
    let prompts = router_prompts();
    for w in 0..WORKERS {
        ledger.add_worker(WorkerKey::new(w, 0)).unwrap();
        index
            .apply(&KvEvent::Stored {
                worker: WorkerKey::new(w, 0),
                tier: Tier::Device,
                hashes: &prompts[usize::try_from(w % 64).unwrap()][..64],
            })
            .unwrap();
    }
    let mut rows: Vec<Row> = (0..WORKERS)
        .map(|w| Row::new(WorkerKey::new(w, 0)))
        .collect();
    let mut overlaps = Box::new(Overlaps::<WORDS>::new());
    let prompt = &prompts[5];
    let mut group = c.benchmark_group("route-parts");
    group.bench_function("query", |b| {
        b.iter(|| index.query(black_box(prompt), &mut overlaps));
    });
    let mut turn = 0usize;
    group.bench_function("query-rotating", |b| {
        b.iter(|| {
            turn += 1;
            index.query(black_box(&prompts[turn % 64]), &mut overlaps);
        });
    });
    index.query(prompt, &mut overlaps);
    group.bench_function("index-fill", |b| {
        b.iter(|| index.fill_rows(&overlaps, black_box(&mut rows), 0.75, 0.25, 16));
    });
    group.bench_function("index-probe", |b| {
        b.iter(|| {
            rows.iter()
                .map(|r| {
                    index
                        .overlap(&overlaps, black_box(r.worker))
                        .map_or(0, |o| o[0])
                })
                .sum::<u32>()
        });
    });
    group.bench_function("from-tiers", |b| {
        b.iter(|| {
            (0..WORKERS)
                .map(|w| {
                    let device = u32::try_from(black_box(w) % 64).unwrap();
                    Cache::from_tiers(device, 0, 0, 0.75, 0.25, 16).effective_tokens
                })
                .sum::<u64>()
        });
    });
    group.bench_function("ledger-fill", |b| {
        b.iter(|| ledger.fill_rows(black_box(&mut rows)));
    });
    let policy = DefaultKnobs::default().build().unwrap();
    let mut selector = Box::new(Selector::<1024>::new());
    let request = Request::new(2048, 16).has_tier_matches(true);
    group.bench_function("select", |b| {
        b.iter(|| {
            policy
                .select(&mut selector, &request, black_box(&rows))
                .unwrap()
        });
    });
    group.finish();
}

/// The overlap query against an index far larger than the cache: 2,048 prompts of 128 blocks,
/// each held by 16 of the 1,024 workers (262,144 blocks in 2^19 slots, about 270 MiB),
/// queried in turn, so each query's blocks are cache misses, as in a router whose index holds
/// a real fleet's caches.
fn cold_query(c: &mut Criterion) {
    const PROMPTS: u64 = 2048;
    let mut index = PrefixIndex::<_, _, WORDS>::new(
        vec![BlockSlot::<WORDS>::empty(); 1 << 19],
        vec![WorkerSlot::empty(); 128 * WORDS],
    )
    .unwrap();
    let prompts: Vec<Vec<u64>> = (0..PROMPTS)
        .map(|p| (0..128).map(|b| (p << 32) | b).collect())
        .collect();
    for (p, prompt) in (0u64..).zip(&prompts) {
        for holder in 0..16 {
            index
                .apply(&KvEvent::Stored {
                    worker: WorkerKey::new((p * 16 + holder) % WORKERS, 0),
                    tier: Tier::Device,
                    hashes: prompt,
                })
                .unwrap();
        }
    }
    assert_eq!(index.counters().evictions, 0, "every prompt is held");
    let mut overlaps = Box::new(Overlaps::<WORDS>::new());
    let mut turn = 0usize;
    let mut group = c.benchmark_group("route-parts");
    group.bench_function("query-rotating/2048-prompts-out-of-cache", |b| {
        b.iter(|| {
            turn += 1;
            index.query(black_box(&prompts[turn % prompts.len()]), &mut overlaps);
        });
    });
    group.finish();
}

criterion_group!(benches, parts, cold_query);
criterion_main!(benches);
