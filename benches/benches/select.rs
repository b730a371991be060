//! One selection of the default policy at 8 to 4,096 candidates (one rank each, 2,048-token
//! prompt, no tier maps: the approximate-mode estimate), at T = 0 and T = 0.7, seeded and
//! unseeded; and at T = 0 on a mixed fleet (`mixed_fleet`: 10% overloaded, 10% without a load
//! projection, 10% without a cache entry, two preferred taints) and on a fleet with a few odd
//! workers (`few_odd_fleet`: one row in 128); and at T = 0 with tier matches (`tiers_fleet`):
//! device blocks only, as a router's rows and request are when it matched no block beyond device
//! memory, and one row in 8 holding host and disk blocks. `cargo xtask bench` runs it;
//! medians are recorded in `benches/RESULTS.md`.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use libroute_benches::{MIXED_PREFERRED, bench_fleet, few_odd_fleet, mixed_fleet, tiers_fleet};
use libroute_core::{DefaultKnobs, Request, Row, Selector};

const SIZES: [u64; 5] = [8, 64, 256, 1024, 4096];

fn select(c: &mut Criterion) {
    let plain = Request::new(2048, 16);
    let preferred = plain.preferred_taints(&MIXED_PREFERRED);
    let mut selector = Box::new(Selector::<4096>::new());
    let uniform: fn(u64) -> Vec<Row> = bench_fleet;
    let mixed: fn(u64) -> Vec<Row> = mixed_fleet;
    let few_odd: fn(u64) -> Vec<Row> = few_odd_fleet;
    let tiers = plain.has_tier_matches(true);
    let device_tiers = tiers.device_matches_only(true);
    let device: fn(u64) -> Vec<Row> = |n| tiers_fleet(n, 0);
    let holding: fn(u64) -> Vec<Row> = |n| tiers_fleet(n, 128);
    for (temperature, seed, name, request, fleet) in [
        (0.0, None, "T0", &plain, uniform),
        (0.0, Some(42), "T0-seeded", &plain, uniform),
        (0.7, None, "T0.7", &plain, uniform),
        (0.7, Some(42), "T0.7-seeded", &plain, uniform),
        (0.0, None, "T0-mixed", &preferred, mixed),
        (0.0, None, "T0-few-odd", &preferred, few_odd),
        (0.0, None, "T0-tiers", &device_tiers, device),
        (0.0, None, "T0-tiers-host", &tiers, holding),
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
                        .select(&mut selector, black_box(request), black_box(rows))
                        .unwrap()
                });
            });
        }
        group.finish();
    }
}

criterion_group!(benches, select);
criterion_main!(benches);
