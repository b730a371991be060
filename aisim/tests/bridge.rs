//! What the bridge hands libroute's router, checked against what the engines did: the index's
//! view of each worker's cache in exact mode, the ledger's books, and bad input.

use libroute_aisim::bridge::Mode;
use libroute_aisim::run::{self, Engine, Routing};
use libroute_benches::sim::{Synthetic, Trace};

mod common;
use common::mooncake;

/// The built-in workload (always) and the Mooncake trace (where present), `n` requests each.
fn workloads(n: usize) -> Vec<(&'static str, Trace)> {
    let mut all = vec![(
        "built-in",
        Synthetic {
            requests: n,
            ..Synthetic::default()
        }
        .generate(),
    )];
    if let Some(trace) = mooncake(n) {
        all.push(("mooncake", trace));
    }
    all
}

const DEFAULT: &str = r#"{"type": "default"}"#;

/// In exact mode the index learns the engines' own KV events, with the engines' own block
/// hashes: what the router believes the chosen worker caches when it places a request is what
/// the engine finds when it admits it. They can differ only when the state changes in between
/// (blocks stored or evicted while the request waits for the next pass, or computed in a pass
/// whose events are not published yet), so at least 95% of the requests must agree exactly
/// (measured: 97% of 1,500 built-in requests, 1,997 of the first 2,000 Mooncake requests). With
/// any other hash
/// the router would see no overlap where the engine reuses one.
#[test]
fn in_exact_mode_the_router_sees_what_the_engine_reuses() {
    for (name, trace) in workloads(1500) {
        exact_view_agrees(name, &trace);
    }
}

fn exact_view_agrees(name: &str, trace: &Trace) {
    let (report, stats) = run::replay_libroute(
        trace,
        1.0,
        &Engine::default(),
        DEFAULT,
        Routing { mode: Mode::Exact },
    )
    .unwrap();
    assert!(stats.kv_events > 0);
    let (mut agree, mut disagree, mut reused) = (0, 0, 0);
    for r in &report.per_request {
        let believed = r.routing_history[0].reported_overlap_tokens.unwrap();
        let found = r.admission_history[0].reused_input_tokens;
        if found > 0 {
            reused += 1;
        }
        if believed == found {
            agree += 1;
        } else {
            disagree += 1;
        }
    }
    assert!(
        reused > 300,
        "{name}: only {reused} requests reused a prefix"
    );
    assert!(
        disagree * 19 <= agree,
        "{name}: {disagree} requests disagree, {agree} agree"
    );
}

/// Every request is booked at placement, its prefill completion reported and freed at its end:
/// the ledger is empty afterwards (`replay_libroute` fails otherwise), in both modes. A request
/// with one output token ends in its prefill pass, so aisimulate reports only its end.
#[test]
fn the_ledger_books_completes_and_frees_every_request() {
    for (name, trace) in workloads(600) {
        books_balance(name, &trace);
    }
}

fn books_balance(name: &str, trace: &Trace) {
    for (mode, events) in [
        (Mode::Exact, true),
        (Mode::Approximate { ttl_ms: 120_000 }, false),
    ] {
        let (report, stats) =
            run::replay_libroute(trace, 2.0, &Engine::default(), DEFAULT, Routing { mode })
                .unwrap();
        let n = trace.requests.len() as u64;
        let decoding = trace
            .requests
            .iter()
            .filter(|r| r.output_tokens > 1)
            .count() as u64;
        assert_eq!(report.request_counts.completed_requests as u64, n, "{name}");
        assert_eq!(
            (stats.placed, stats.prefill_completed, stats.freed),
            (n, decoding, n),
            "{name}, {mode:?}"
        );
        assert_eq!((stats.booked_at_end, stats.load_at_end), (0, 0), "{name}");
        assert_eq!(stats.kv_events > 0, events, "{name}, {mode:?}");
    }
}

/// Routing on the cache pays in the engine simulator too: Dynamo's default cost finds more of
/// the prompt cached than round-robin, on the engines' own measure.
#[test]
fn a_cache_aware_policy_reuses_more_than_round_robin() {
    for (name, trace) in workloads(1500) {
        let hit = |policy: &str, mode| {
            run::replay_libroute(&trace, 1.0, &Engine::default(), policy, Routing { mode })
                .unwrap()
                .0
                .first_admission_prefix_cache_reused_ratio
        };
        let rr = hit(r#"{"type": "round_robin"}"#, Mode::Exact);
        let exact = hit(DEFAULT, Mode::Exact);
        let approximate = hit(DEFAULT, Mode::Approximate { ttl_ms: 120_000 });
        assert!(
            exact > 1.2 * rr && approximate > 1.2 * rr,
            "{name}: {exact} {approximate} {rr}"
        );
    }
}

/// A report's summary is a function of the report: the same replay summarized twice gives the
/// same bits (the imbalance once summed its windows in a hash map's order, which differs from
/// one map to the next, so its last bits changed between runs of the same binary).
#[test]
fn a_summary_is_the_same_every_time() {
    let trace = Synthetic {
        requests: 1500,
        ..Synthetic::default()
    }
    .generate();
    let engine = Engine::default();
    let routing = Routing { mode: Mode::Exact };
    let (report, _) = run::replay_libroute(&trace, 1.0, &engine, DEFAULT, routing).unwrap();
    let first = run::Summary::new("default", &report, 0.5, engine.workers);
    assert!(first.imbalance > 1.0, "{}", first.imbalance);
    for _ in 0..20 {
        let again = run::Summary::new("default", &report, 0.5, engine.workers);
        assert_eq!(again.imbalance.to_bits(), first.imbalance.to_bits());
        assert_eq!(
            serde_json::to_string(&again).unwrap(),
            serde_json::to_string(&first).unwrap()
        );
    }
}

#[test]
fn bad_policies_and_engines_are_named() {
    let trace = Synthetic {
        requests: 10,
        ..Synthetic::default()
    }
    .generate();
    let exact = Routing { mode: Mode::Exact };
    let err = run::replay_libroute(
        &trace,
        1.0,
        &Engine::default(),
        r#"{"type": "nope"}"#,
        exact,
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("nope"), "{err:#}");
    let err = run::replay_libroute(&trace, 1.0, &Engine::default(), "{", exact).unwrap_err();
    assert!(format!("{err:#}").contains("EOF"), "{err:#}");
    let tiny = Engine {
        kv_blocks: 0,
        ..Engine::default()
    };
    let err = run::replay_libroute(&trace, 1.0, &tiny, DEFAULT, exact).unwrap_err();
    assert!(!format!("{err:#}").is_empty());
}
