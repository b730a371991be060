//! Benchmarks and tools around libroute-core: the criterion benchmarks in `benches/` and the
//! `cargo demo` binary. This crate is not published; its crate documentation is the project
//! README, so the README's Rust example is compiled and run as a doctest.
#![doc = include_str!("../../README.md")]
// Why: the README is prose for people, with tool names (CMake, ASan) that are not code items.
#![allow(clippy::doc_markdown)]

use libroute_core::{
    Cache, Load, PreferredTaint, Row, RowFlags, Speed, Taint, TaintSet, WorkerKey,
};

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

/// The benchmark fleet as a real one looks: [`bench_fleet`] with 10% of rows marked overloaded,
/// 10% without a load projection yet and 10% without a cache entry (disjoint), and taints 0 and
/// 1 spread over the fleet, for a request with the two [`MIXED_PREFERRED`] taints.
/// [`bench_fleet`]'s loads with the CACHE inputs a router writes for a request with tier
/// matches: each row's device blocks (`(id * 37) % 97`, the estimate the same count), and
/// `holding` rows of every 1,024, at positions drawn by a multiplicative hash, also holding host
/// and disk blocks.
#[must_use]
pub fn tiers_fleet(n: u64, holding: u64) -> Vec<Row> {
    bench_fleet(n)
        .into_iter()
        .map(|row| {
            let id = row.worker.worker_id;
            #[allow(clippy::cast_possible_truncation, reason = "below 97")]
            let device = ((id * 37) % 97) as u32;
            let holds = ((id + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) < holding;
            row.with_cache(Cache {
                device_blocks: device,
                host_blocks: if holds { 1 + device / 2 } else { 0 },
                disk_blocks: u32::from(holds),
                effective_blocks: f64::from(device),
                effective_tokens: u64::from(device) * 16,
            })
        })
        .collect()
}

#[must_use]
pub fn mixed_fleet(n: u64) -> Vec<Row> {
    bench_fleet(n)
        .into_iter()
        .enumerate()
        .map(|(i, row)| {
            let row = row.with_taints(TaintSet(i as u64 % 4));
            match i % 10 {
                3 => row.overloaded(true),
                5 => Row {
                    flags: RowFlags(row.flags.0 & !RowFlags::HAS_LOAD.0),
                    ..row
                },
                7 => Row {
                    flags: RowFlags(row.flags.0 & !RowFlags::HAS_CACHE.0),
                    ..row
                },
                _ => row,
            }
        })
        .collect()
}

/// The benchmark fleet under load, as the `ttft` policy meets it in a busy deployment: every
/// worker has prefill queued (with an idle queue anywhere the policy's crowd is 0, and with it
/// the first term of every candidate's delay to others) and a speed measured as a
/// [`libroute_core::Router`] learns it, a few speeds apart.
#[must_use]
pub fn busy_fleet(n: u64) -> Vec<Row> {
    bench_fleet(n)
        .into_iter()
        .map(|row| {
            let id = row.worker.worker_id;
            Row {
                active_prefill_tokens: row.active_prefill_tokens + 16,
                ..row
            }
            .with_speed(Speed {
                base_ms: 4.0 + (id % 7) as f64 * 0.5,
                ms_per_prefill_token: 0.05 + (id % 5) as f64 * 0.01,
                ms_per_active_request: 0.8 + (id % 3) as f64 * 0.1,
            })
        })
        .collect()
}

/// The benchmark fleet with a few odd workers, as most real fleets have at any moment: one row
/// in 128 (8 at 1,024) is overloaded, without a load projection yet or without a cache entry,
/// in turn, and taints 0 and 1 are spread as in [`mixed_fleet`]; the first and last rows are
/// ordinary.
#[must_use]
pub fn few_odd_fleet(n: u64) -> Vec<Row> {
    bench_fleet(n)
        .into_iter()
        .enumerate()
        .map(|(i, row)| {
            let row = row.with_taints(TaintSet(i as u64 % 4));
            if i % 128 != 77 {
                return row;
            }
            match i / 128 % 3 {
                0 => row.overloaded(true),
                1 => Row {
                    flags: RowFlags(row.flags.0 & !RowFlags::HAS_LOAD.0),
                    ..row
                },
                _ => Row {
                    flags: RowFlags(row.flags.0 & !RowFlags::HAS_CACHE.0),
                    ..row
                },
            }
        })
        .collect()
}

/// The two preferred taints of a [`mixed_fleet`] request: 0 favoured, 1 avoided.
pub const MIXED_PREFERRED: [PreferredTaint; 2] = [
    PreferredTaint {
        taint: Taint::new(0).unwrap(),
        weight: 0.5,
    },
    PreferredTaint {
        taint: Taint::new(1).unwrap(),
        weight: -0.25,
    },
];

/// The router benchmarks' 64 prompts of 128 block hashes, `(p % 8) * 10_000 + (p / 8) * 100 + b`
/// for block `b` of prompt `p`: no two prompts share any of their first 64 blocks, which is what
/// the benchmarks' workers hold (worker `w` the first 64 of prompt `w % 64`).
#[must_use]
pub fn router_prompts() -> Vec<Vec<u64>> {
    (0..64u64)
        .map(|p| {
            (0..128)
                .map(|b| (p % 8) * 10_000 + (p / 8) * 100 + b)
                .collect()
        })
        .collect()
}
