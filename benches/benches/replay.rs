//! The whole Mooncake conversation trace (12,031 requests) through 8 simulated workers under one
//! policy (the default), in exact mode and approximate mode. Target: at most 1 s each. Reads the
//! trace from `../shared/data/` beside the repository and skips, saying so, when it is absent.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use libroute_benches::sim::{self, Fleet};

const TRACE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/data/mooncake_conversation_trace.jsonl"
);

#[allow(clippy::print_stderr, reason = "says why the benchmark is skipped")]
fn replay(c: &mut Criterion) {
    let Ok(text) = std::fs::read_to_string(TRACE) else {
        eprintln!("replay bench: {TRACE} not found, skipped");
        return;
    };
    let trace = sim::parse_mooncake(&text, 512).unwrap();
    let policy = sim::policy(r#"{"type": "default"}"#).unwrap();
    let mut group = c.benchmark_group("replay/mooncake-conversation");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    for (name, approximate) in [("exact", false), ("approximate", true)] {
        let fleet = Fleet {
            approximate,
            ..Fleet::default()
        };
        group.bench_function(name, |b| {
            b.iter(|| sim::replay("default", &trace, &fleet, &policy).unwrap());
        });
    }
    group.finish();
    group = c.benchmark_group("replay/parse");
    group.sample_size(10);
    group.bench_function("mooncake-conversation", |b| {
        b.iter(|| sim::parse_mooncake(&text, 512).unwrap());
    });
    group.finish();
}

criterion_group!(benches, replay);
criterion_main!(benches);
