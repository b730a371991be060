//! One selection of each builtin type of the catalog at 64 and 1,024 candidates (the shared
//! benchmark fleet, a 2,048-token prompt), each also over the mixed fleet (`{type}-mixed`: one
//! row in ten overloaded, one without a load projection, one without a cache entry), `ttft` also
//! over a busy fleet (every prefill queue occupied, speeds measured), and `select_explained` for
//! one of them. Medians are
//! recorded in `benches/RESULTS.md`; the counting-allocator test in `core/tests/no_alloc.rs`
//! proves none of them allocates.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use libroute_benches::{bench_fleet, busy_fleet, mixed_fleet};
use libroute_core::catalog_config::PolicyConfig;
use libroute_core::{Explanation, Request, Row, Selector};

const TYPES: [(&str, &str); 14] = [
    ("default", r#"{"type": "default"}"#),
    ("round_robin", r#"{"type": "round_robin"}"#),
    ("random", r#"{"type": "random"}"#),
    ("power_of_two", r#"{"type": "power_of_two"}"#),
    ("least_loaded", r#"{"type": "least_loaded"}"#),
    ("dynamo_two_tier", r#"{"type": "dynamo_two_tier"}"#),
    ("sglang_cache_aware", r#"{"type": "sglang_cache_aware"}"#),
    ("llm_d", r#"{"type": "llm_d", "kv_capacity_blocks": 4096}"#),
    (
        "session_affinity",
        r#"{"type": "composed", "scorers": [{"type": "session_affinity", "weight": 10}, {"type": "least_loaded"}]}"#,
    ),
    (
        "filters",
        r#"{"type": "least_loaded", "filters": [{"type": "overload", "max_requests": 11},
            {"type": "require_taints", "taints": []}]}"#,
    ),
    (
        "round_robin_filtered",
        r#"{"type": "round_robin", "filters": [{"type": "overload", "max_requests": 11},
            {"type": "require_taints", "taints": []}]}"#,
    ),
    (
        "default_filtered",
        r#"{"type": "composed", "scorers": [{"type": "default"}],
            "filters": [{"type": "overload", "max_requests": 11},
            {"type": "require_taints", "taints": []}]}"#,
    ),
    ("ttft", r#"{"type": "ttft"}"#),
    ("ttft_kv", r#"{"type": "ttft", "kv_capacity_blocks": 4096}"#),
];

/// One selection of the policy `json` over `fleet(n)` at 64 and 1,024 candidates, as the group
/// `catalog/{group}`.
fn select_group(
    c: &mut Criterion,
    selector: &mut Selector<1024>,
    request: &Request<'_>,
    (group, json): (&str, &str),
    fleet: fn(u64) -> Vec<Row>,
) {
    let policy = serde_json::from_str::<PolicyConfig>(json)
        .unwrap()
        .build()
        .unwrap();
    let mut group = c.benchmark_group(format!("catalog/{group}"));
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for n in [64, 1024] {
        let rows = fleet(n);
        group.throughput(Throughput::Elements(n));
        group.bench_with_input(BenchmarkId::from_parameter(n), &rows, |b, rows| {
            b.iter(|| {
                policy
                    .select(selector, black_box(request), black_box(rows))
                    .unwrap()
            });
        });
    }
    group.finish();
}

fn catalog(c: &mut Criterion) {
    let request = Request::new(2048, 16).session(12_345);
    let mut selector = Box::new(Selector::<1024>::new());
    for (name, json) in TYPES {
        select_group(c, &mut selector, &request, (name, json), bench_fleet);
        // A real fleet always has a few such rows; no builtin should slow down much for them.
        let group = format!("{name}-mixed");
        select_group(c, &mut selector, &request, (&group, json), mixed_fleet);
    }
    // `ttft` again over a fleet without an idle prefill queue, whose workers have speeds: the
    // benchmark fleet has an idle one (worker 0) and none.
    for (name, json) in TYPES.iter().filter(|(name, _)| name.starts_with("ttft")) {
        let group = format!("{name}-busy");
        select_group(c, &mut selector, &request, (&group, json), busy_fleet);
    }
    let (_, filters) = TYPES.iter().find(|(name, _)| *name == "filters").unwrap();
    let policy = serde_json::from_str::<PolicyConfig>(filters)
        .unwrap()
        .build()
        .unwrap();
    let mut out = vec![Explanation::EMPTY; 1024];
    let mut group = c.benchmark_group("catalog/explained-filters");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for n in [64, 1024] {
        let rows = bench_fleet(n);
        group.throughput(Throughput::Elements(n));
        group.bench_with_input(BenchmarkId::from_parameter(n), &rows, |b, rows| {
            b.iter(|| {
                policy
                    .select_explained(
                        &mut selector,
                        black_box(&request),
                        black_box(rows),
                        &mut out,
                    )
                    .unwrap()
            });
        });
    }
    group.finish();
}

criterion_group!(benches, catalog);
criterion_main!(benches);
