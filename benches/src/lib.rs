//! Benchmarks and tools around libroute-core: the criterion benchmarks in `benches/` and the
//! `cargo demo` binary. This crate is not published; its crate documentation is the project
//! README, so the README's Rust example is compiled and run as a doctest.
#![doc = include_str!("../../README.md")]
// Why: the README is prose for people, with tool names (CMake, ASan) that are not code items.
#![allow(clippy::doc_markdown)]

use libroute_core::{Cache, Load, Row, WorkerKey};

pub mod sim;

/// The benchmark fleet: `n` workers with one rank each, an approximate-mode cache estimate
/// (no tier maps) and a load projection, so costs mostly differ with a few ties, as in a busy
/// deployment.
#[must_use]
pub fn bench_fleet(n: u64) -> Vec<Row> {
    (0..n)
        .map(|id| {
            let half_blocks = (id * 37) % 97;
            Row::new(WorkerKey::new(id, 0))
                .with_cache(Cache {
                    effective_blocks: half_blocks as f64 * 0.5,
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
