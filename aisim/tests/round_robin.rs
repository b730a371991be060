//! The bridge is right only if it changes nothing but the decisions: libroute's `round_robin`
//! through the bridge must reproduce aisimulate's own `RoundRobinComposition` exactly, report
//! and per-request records alike, on the same workload and engine.
//!
//! The two runs share nothing but the workload and the engine settings: one is aisimulate's
//! `Replayer::new` with its built-in composition, the other `Replayer::with_composition` with
//! libroute's router (index, ledger, catalog policy) behind the placement contract, capturing KV
//! events in exact mode. A negative control shows the comparison sees a different decision.

use aisimulate_core::engine::Backend;
use aisimulate_core::replay::ReplayReport;
use libroute_aisim::bridge::Mode;
use libroute_aisim::run::{self, Engine, Routing, Timing};
use libroute_benches::sim::{Synthetic, Trace};

mod common;
use common::mooncake;

/// A small built-in workload: conversations with session ids (the materialized input path).
fn synthetic() -> Trace {
    Synthetic {
        requests: 300,
        ..Synthetic::default()
    }
    .generate()
}

/// The report's fields that depend on the wall clock, not on the simulation.
const WALL_CLOCK: [&str; 3] = [
    "wall_time_ms",
    "processed_tokens_per_s",
    "processed_output_tokens_per_s",
];

/// The report as JSON without its wall-clock fields, and every per-request record.
fn comparable(report: &ReplayReport) -> (serde_json::Value, serde_json::Value) {
    let mut summary = serde_json::to_value(report).unwrap();
    for field in WALL_CLOCK {
        summary
            .as_object_mut()
            .unwrap()
            .remove(field)
            .unwrap_or_else(|| panic!("the report has no {field}"));
    }
    (summary, serde_json::to_value(&report.per_request).unwrap())
}

fn round_robin(trace: &Trace, load: f64, engine: &Engine, mode: Mode) -> ReplayReport {
    run::replay_libroute(
        trace,
        load,
        engine,
        r#"{"type": "round_robin"}"#,
        Routing { mode },
    )
    .unwrap()
    .0
}

fn assert_same(trace: &Trace, load: f64, engine: &Engine, what: &str) {
    let reference = run::replay_reference_round_robin(trace, load, engine).unwrap();
    assert_eq!(reference.request_counts.num_requests, trace.requests.len());
    assert_eq!(
        reference.request_counts.completed_requests,
        trace.requests.len(),
        "{what}: every request completes"
    );
    let (summary, records) = comparable(&reference);
    for mode in [Mode::Exact, Mode::Approximate { ttl_ms: 120_000 }] {
        let bridged = round_robin(trace, load, engine, mode);
        let (bridged_summary, bridged_records) = comparable(&bridged);
        assert_eq!(
            bridged_records, records,
            "{what}, {mode:?}: per-request records"
        );
        assert_eq!(bridged_summary, summary, "{what}, {mode:?}: the report");
    }
}

#[test]
fn round_robin_reproduces_aisimulates_own_on_the_mooncake_trace() {
    let Some(trace) = mooncake(400) else { return };
    for load in [1.0, 4.0] {
        assert_same(&trace, load, &Engine::default(), &format!("vLLM x{load}"));
    }
    let sglang = Engine {
        backend: Backend::Sglang,
        ..Engine::default()
    };
    assert_same(&trace, 2.0, &sglang, "SGLang x2");
}

#[test]
fn round_robin_reproduces_aisimulates_own_on_the_built_in_workload() {
    let small = Engine {
        workers: 3,
        kv_blocks: 2048,
        timing: Timing::Fixed {
            prefill_ms: 20.0,
            decode_ms: 5.0,
        },
        ..Engine::default()
    };
    assert_same(&synthetic(), 1.0, &small, "built-in workload, fixed timing");
}

#[test]
fn the_comparison_sees_a_different_decision() {
    let trace = synthetic();
    let engine = Engine::default();
    let reference = comparable(&run::replay_reference_round_robin(&trace, 1.0, &engine).unwrap());
    let other = run::replay_libroute(
        &trace,
        1.0,
        &engine,
        r#"{"type": "least_loaded"}"#,
        Routing { mode: Mode::Exact },
    )
    .unwrap()
    .0;
    assert_ne!(comparable(&other).1, reference.1);
    assert_ne!(comparable(&other).0, reference.0);
}
