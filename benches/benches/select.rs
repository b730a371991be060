//! One selection of the default policy at 8 to 4,096 candidates (one rank each, 2,048-token
//! prompt, no tier maps: the approximate-mode estimate), at T = 0 and T = 0.7, seeded and
//! unseeded. `cargo xtask bench` runs it; medians are recorded in `benches/RESULTS.md`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use libroute_core::{Cache, DefaultKnobs, Load, Request, Row, Selector, WorkerKey};

const SIZES: [u64; 5] = [8, 64, 256, 1024, 4096];

/// A fleet whose costs mostly differ (a few ties), like a busy deployment.
fn fleet(n: u64) -> Vec<Row> {
    (0..n)
        .map(|id| {
            let half_blocks = (id * 37) % 97;
            let blocks = half_blocks as f64 * 0.5;
            Row::new(WorkerKey::new(id, 0))
                .with_cache(Cache {
                    effective_blocks: blocks,
                    effective_tokens: half_blocks * 8,
                    ..Cache::default()
                })
                .with_load(Load {
                    available: true,
                    active_prefill_tokens: (id * 131) % 4096,
                    active_decode_blocks: (id * 17) % 509,
                    active_requests: id % 13,
                })
        })
        .collect()
}

fn select(c: &mut Criterion) {
    let request = Request::new(2048, 16);
    let mut selector = Box::new(Selector::<4096>::new());
    for (temperature, seed, name) in [
        (0.0, None, "T0"),
        (0.0, Some(42), "T0-seeded"),
        (0.7, None, "T0.7"),
        (0.7, Some(42), "T0.7-seeded"),
    ] {
        let policy = DefaultKnobs {
            temperature,
            seed,
            ..DefaultKnobs::default()
        }
        .build()
        .unwrap();
        let mut group = c.benchmark_group(format!("default/{name}"));
        for n in SIZES {
            let rows = fleet(n);
            group.throughput(Throughput::Elements(n));
            group.bench_with_input(BenchmarkId::from_parameter(n), &rows, |b, rows| {
                b.iter(|| {
                    policy
                        .select(&mut selector, black_box(&request), black_box(rows))
                        .unwrap()
                });
            });
        }
        group.finish();
    }
}

criterion_group!(benches, select);
criterion_main!(benches);
