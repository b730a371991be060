//! The catalog's builtins: a hand-computed worked example each, the edge cases (all tied, one
//! candidate, all overloaded, empty overlap), the burst test, and configuration rejection.

use libroute_core::catalog::*;
use libroute_core::catalog_config::{CatalogError, PolicyConfig, PolicySetConfig, Range, parse};
use libroute_core::*;

fn row(id: u64, dev: u32, requests: u64) -> Row {
    Row::new(WorkerKey::new(id, 0))
        .with_cache(Cache {
            device_blocks: dev,
            effective_blocks: f64::from(dev),
            effective_tokens: u64::from(dev) * 16,
            ..Cache::default()
        })
        .with_load(Load {
            available: true,
            active_prefill_tokens: requests * 100,
            active_decode_blocks: requests * 10,
            active_requests: requests,
        })
}

fn policy(json: &str) -> CatalogPolicy {
    serde_json::from_str::<PolicyConfig>(json)
        .unwrap_or_else(|e| panic!("{json}: {e}"))
        .build()
        .unwrap_or_else(|e| panic!("{json}: {e}"))
}

/// The costs of every candidate, by host row index (NaN for a removed row).
fn costs(p: &CatalogPolicy, req: &Request<'_>, rows: &[Row]) -> (Selection, Vec<f64>) {
    let mut selector = Selector::<64>::with_entropy(1);
    let s = p.select(&mut selector, req, rows).unwrap();
    let mut out = vec![f64::NAN; rows.len()];
    for (i, c) in selector.last_costs() {
        out[i] = c;
    }
    (s, out)
}

// A 10-block request (160 tokens).
const REQ: Request<'static> = Request::new(160, 16);

#[test]
fn least_loaded_by_each_metric() {
    let rows = [row(1, 0, 3), row(2, 0, 1), row(3, 0, 2)];
    let (s, c) = costs(&policy(r#"{"type": "least_loaded"}"#), &REQ, &rows);
    assert_eq!((s.worker.worker_id, c), (2, vec![3.0, 1.0, 2.0]));
    let (_, c) = costs(
        &policy(r#"{"type": "least_loaded", "metric": "prefill_tokens"}"#),
        &REQ,
        &rows,
    );
    assert_eq!(c, vec![300.0, 100.0, 200.0]);
    let (_, c) = costs(
        &policy(r#"{"type": "least_loaded", "metric": "active_blocks"}"#),
        &REQ,
        &rows,
    );
    assert_eq!(c, vec![30.0, 10.0, 20.0]);
}

#[test]
fn dynamo_two_tier_follows_the_cache_when_balanced() {
    // Requests 10, 12, 40: spread 30 <= 32, so not by load. Best overlap 6 of 10 blocks covers
    // 0.6 > 0.5: cost = 6 - dev, so worker 2 (6 blocks) costs 0, the others 6 - 2 = 4 and 6 - 0.
    let rows = [row(1, 2, 10), row(2, 6, 12), row(3, 0, 40)];
    let (s, c) = costs(&policy(r#"{"type": "dynamo_two_tier"}"#), &REQ, &rows);
    assert_eq!((s.worker.worker_id, c), (2, vec![4.0, 0.0, 6.0]));
}

#[test]
fn dynamo_two_tier_routes_by_load_when_imbalanced_or_uncovered() {
    // Requests 10, 12, 50: spread 40 > 32 and 50 > 1.1 * 10: by load (active requests).
    let rows = [row(1, 2, 10), row(2, 6, 12), row(3, 0, 50)];
    let (s, c) = costs(&policy(r#"{"type": "dynamo_two_tier"}"#), &REQ, &rows);
    assert_eq!((s.worker.worker_id, c), (1, vec![10.0, 12.0, 50.0]));
    // Balanced, but the best overlap 5 of 10 is not more than half: by load.
    let rows = [row(1, 2, 10), row(2, 5, 12)];
    let (s, _) = costs(&policy(r#"{"type": "dynamo_two_tier"}"#), &REQ, &rows);
    assert_eq!(s.worker.worker_id, 1);
    // A wider spread threshold keeps the cache decision for the first fleet.
    let rows = [row(1, 2, 10), row(2, 6, 12), row(3, 0, 50)];
    let (s, _) = costs(
        &policy(r#"{"type": "dynamo_two_tier", "spread": 40}"#),
        &REQ,
        &rows,
    );
    assert_eq!(s.worker.worker_id, 2);
}

#[test]
fn sglang_cache_aware_three_branches() {
    let p = policy(r#"{"type": "sglang_cache_aware"}"#);
    // Balanced (spread 5), best match 4 of 10 = 0.4 > 0.3: the longest match, worker 2.
    let rows = [row(1, 1, 5), row(2, 4, 10)];
    let (s, c) = costs(&p, &REQ, &rows);
    assert_eq!((s.worker.worker_id, c), (2, vec![3.0, 0.0]));
    // Balanced, best match 3 of 10 = 0.3, not above: least loaded, worker 1.
    let rows = [row(1, 1, 5), row(2, 3, 10)];
    assert_eq!(costs(&p, &REQ, &rows).0.worker.worker_id, 1);
    // Imbalanced: 100 - 20 = 80 > 64 and 100 > 1.5 * 20: least loaded despite the match.
    let rows = [row(1, 0, 20), row(2, 9, 100)];
    let (s, c) = costs(&p, &REQ, &rows);
    assert_eq!((s.worker.worker_id, c), (1, vec![20.0, 100.0]));
}

#[test]
fn llm_d_weighted_normalized_scores() {
    // Prefix: dev/10 -> 0.2, 0.8. Queue (min-max over 2 and 6): (6-2)/4 = 1, 0. KV utilization
    // with capacity 100 blocks: 1 - 20/100 = 0.8, 1 - 60/100 = 0.4. Weights 2, 1, 1:
    // worker 1: -(0.4 + 0.8 + 1) = -2.2; worker 2: -(1.6 + 0.4 + 0) = -2.0.
    let p = policy(r#"{"type": "llm_d", "prefix_weight": 2, "kv_capacity_blocks": 100}"#);
    let rows = [row(1, 2, 2), row(2, 8, 6)];
    let (s, c) = costs(&p, &REQ, &rows);
    assert_eq!(s.worker.worker_id, 1);
    assert!(
        (c[0] + 2.2).abs() < 1e-12 && (c[1] + 2.0).abs() < 1e-12,
        "{c:?}"
    );
    // Tier credit: 2 host blocks count 0.8 each, 2 disk blocks 0.5 each: (1.6 + 1.0) / 10.
    let tiered = Row::new(WorkerKey::new(3, 0)).with_cache(Cache {
        host_blocks: 2,
        disk_blocks: 2,
        ..Cache::default()
    });
    let p = policy(r#"{"type": "composed", "scorers": [{"type": "prefix"}]}"#);
    let (_, c) = costs(&p, &REQ, &[tiered]);
    assert!((c[0] + 0.26).abs() < 1e-12, "{c:?}");
}

#[test]
fn session_affinity_is_consistent_and_falls_back() {
    let p = policy(
        r#"{"type": "composed", "scorers": [{"type": "session_affinity", "weight": 100},
            {"type": "least_loaded"}]}"#,
    );
    let rows: Vec<Row> = (1..=8).map(|id| row(id, 0, id)).collect();
    let owner = |session: u64, rows: &[Row]| {
        rows.iter()
            .max_by_key(|r| rendezvous_hash(session, r.worker.worker_id, r.worker.dp_rank))
            .unwrap()
            .worker
    };
    for session in 0..50 {
        let req = Request::new(160, 16).session(session);
        let (s, _) = costs(&p, &req, &rows);
        assert_eq!(s.worker, owner(session, &rows), "session {session}");
    }
    // The owner overloaded: the rest of the policy decides (least loaded, worker 1 unless it is
    // the owner, then worker 2).
    let session = 7;
    let o = owner(session, &rows);
    let busy: Vec<Row> = rows
        .iter()
        .map(|r| {
            if r.worker == o {
                r.overloaded(true)
            } else {
                *r
            }
        })
        .collect();
    let (s, _) = costs(&p, &Request::new(160, 16).session(session), &busy);
    let expected = if o.worker_id == 1 { 2 } else { 1 };
    assert_eq!(s.worker.worker_id, expected);
    // No session: least loaded.
    assert_eq!(costs(&p, &REQ, &rows).0.worker.worker_id, 1);
    // The owner listed twice (an unseeded selection takes that): both rows get the affinity,
    // and the less loaded of them is picked.
    let mut twice = rows.clone();
    let (at, listed) = rows
        .iter()
        .enumerate()
        .find(|(_, r)| r.worker == o)
        .unwrap();
    twice.push(row(o.worker_id, 0, 0));
    let (s, c) = costs(&p, &Request::new(160, 16).session(session), &twice);
    assert_eq!((s.row, s.worker), (8, o));
    assert_eq!(c[8], -100.0);
    assert_eq!(c[at], -100.0 + listed.load().active_requests as f64);
    for (i, &cost) in c.iter().enumerate().filter(|(i, _)| *i != at && *i != 8) {
        assert_eq!(cost, twice[i].load().active_requests as f64, "row {i}");
    }
}

/// Session affinity's costs against the rule written plainly: the owner is the largest
/// `(hash, worker)` among the rows with the request's required taints, and every candidate
/// listing the owner's worker costs -1, every other 0. Random fleets of up to 24 rows over ten
/// workers (so workers are listed twice), two ranks, taints, overloaded rows, sessions and
/// required taints.
#[test]
fn session_affinity_matches_the_rule_written_plainly() {
    let mut rng = WyRand::with_seed(7);
    let mut next = |below: u64| rng::index(&mut rng, below);
    for case in 0..3000 {
        let rows: Vec<Row> = (0..=next(24))
            .map(|_| {
                let worker = WorkerKey::new(next(10), u32::try_from(next(2)).unwrap());
                Row::new(worker)
                    .with_taints(TaintSet(next(4)))
                    .overloaded(next(5) == 0)
            })
            .collect();
        let (session, required) = (next(1 << 40), TaintSet(next(3)));
        let request = Request::new(64, 16)
            .session(session)
            .required_taints(required);
        let view = RequestView::new(&request, WorkerInputs::NONE);
        let order: Vec<u32> = (0..rows.len())
            .filter(|&i| rows[i].is_candidate(required))
            .map(|i| u32::try_from(i).unwrap())
            .collect();
        let mut costs = vec![f64::NAN; order.len()];
        SessionAffinity
            .score(&view, &Candidates::new(view, &rows, &order), &mut costs)
            .unwrap();
        let owner = rows
            .iter()
            .filter(|r| r.taints.contains_all(required))
            .map(|r| {
                (
                    rendezvous_hash(session, r.worker.worker_id, r.worker.dp_rank),
                    r.worker,
                )
            })
            .max()
            .map(|(_, worker)| worker);
        let expected: Vec<f64> = order
            .iter()
            .map(|&i| {
                if Some(rows[i as usize].worker) == owner {
                    -1.0
                } else {
                    0.0
                }
            })
            .collect();
        assert_eq!(costs, expected, "case {case}");
    }
}

#[test]
fn filters_remove_with_their_reasons() {
    let rows = [
        row(1, 0, 1).with_taints(TaintSet::EMPTY.with(Taint::new(3).unwrap())),
        row(2, 0, 50),
        row(3, 0, 2),
    ];
    let p = policy(
        r#"{"type": "least_loaded", "filters": [{"type": "overload", "max_requests": 10},
            {"type": "allow_list", "workers": [1, 2, 3]}]}"#,
    );
    let (s, c) = costs(&p, &REQ, &rows);
    assert_eq!(s.worker.worker_id, 1);
    assert!(c[1].is_nan(), "worker 2 is overloaded: {c:?}");
    let p = policy(
        r#"{"type": "least_loaded", "filters": [{"type": "require_taints", "taints": [3]}]}"#,
    );
    let mut selector = Selector::<8>::new();
    let err = p.select(&mut selector, &REQ, &rows[1..]).unwrap_err();
    assert_eq!(err, SelectError::AllFiltered);
    let p = policy(r#"{"type": "random", "filters": [{"type": "overload", "max_requests": 0}]}"#);
    let err = p.select(&mut selector, &REQ, &rows).unwrap_err();
    assert_eq!(err, SelectError::AllOverloaded);
}

#[test]
fn edge_cases_for_every_builtin() {
    let all = [
        r#"{"type": "default"}"#,
        r#"{"type": "round_robin"}"#,
        r#"{"type": "random", "seed": 1}"#,
        r#"{"type": "power_of_two"}"#,
        r#"{"type": "least_loaded"}"#,
        r#"{"type": "dynamo_two_tier"}"#,
        r#"{"type": "sglang_cache_aware"}"#,
        r#"{"type": "llm_d", "kv_capacity_blocks": 64}"#,
        r#"{"type": "composed", "scorers": [{"type": "session_affinity"}]}"#,
        r#"{"type": "ttft"}"#,
    ];
    for json in all {
        let p = policy(json);
        let mut selector = Selector::<16>::with_entropy(3);
        // One candidate.
        let s = p.select(&mut selector, &REQ, &[row(9, 3, 3)]).unwrap();
        assert_eq!(s.worker.worker_id, 9, "{json}");
        // All tied and an empty overlap: any of the three, never an error.
        let tied = [row(1, 0, 4), row(2, 0, 4), row(3, 0, 4)];
        let s = p.select(&mut selector, &REQ, &tied).unwrap();
        assert!((1..=3).contains(&s.worker.worker_id), "{json}");
        // All overloaded.
        let busy = tied.map(|r| r.overloaded(true));
        assert_eq!(
            p.select(&mut selector, &REQ, &busy).unwrap_err(),
            SelectError::AllOverloaded,
            "{json}"
        );
        // No rows.
        assert_eq!(
            p.select(&mut selector, &REQ, &[]).unwrap_err(),
            SelectError::NoEndpoints
        );
    }
}

#[test]
fn round_robin_and_power_of_two_choices() {
    let rows = [row(1, 0, 5), row(2, 0, 0), row(3, 0, 9)];
    let p = policy(r#"{"type": "round_robin"}"#);
    let mut selector = Selector::<8>::new();
    let picks: Vec<u64> = (0..6)
        .map(|_| {
            p.select(&mut selector, &REQ, &rows)
                .unwrap()
                .worker
                .worker_id
        })
        .collect();
    assert_eq!(picks, [1, 2, 3, 1, 2, 3]);
    // The position is the selector's, not the policy's: a second selector over the same policy
    // starts at the first candidate, and the first one restarts when reset.
    let pick =
        |selector: &mut Selector<8>| p.select(selector, &REQ, &rows).unwrap().worker.worker_id;
    let mut other = Selector::<8>::new();
    assert_eq!([pick(&mut other), pick(&mut other)], [1, 2]);
    assert_eq!(pick(&mut selector), 1);
    selector.reset_seeded();
    assert_eq!([pick(&mut selector), pick(&mut selector)], [1, 2]);
    // Picks of other policies with the same selector do not advance the turn.
    let least = policy(r#"{"type": "least_loaded"}"#);
    least.select(&mut selector, &REQ, &rows).unwrap();
    assert_eq!(pick(&mut selector), 3);
    // k = 3 of 3 candidates: always the least loaded; k = 1: uniformly random.
    let p = policy(r#"{"type": "power_of_two", "k": 3}"#);
    for _ in 0..20 {
        assert_eq!(
            p.select(&mut selector, &REQ, &rows)
                .unwrap()
                .worker
                .worker_id,
            2
        );
    }
    // k = 2: the most loaded worker (3) can only win against itself, which needs two distinct
    // draws, so it is never picked.
    let p = policy(r#"{"type": "power_of_two", "seed": 5}"#);
    let mut seen = [0u32; 4];
    #[allow(clippy::cast_possible_truncation, reason = "worker ids 1 to 3")]
    for _ in 0..300 {
        seen[p
            .select(&mut selector, &REQ, &rows)
            .unwrap()
            .worker
            .worker_id as usize] += 1;
    }
    assert_eq!(seen[3], 0, "{seen:?}");
    // Worker 2 wins every pair it is in (2 of 3 pairs), worker 1 the other: about 200 and 100.
    assert!(seen[2] > 150 && seen[1] > 60, "{seen:?}");
}

#[test]
fn a_burst_of_identical_requests_spreads_evenly_over_tied_workers() {
    // 1,000 identical requests over 8 idle workers, each booked before the next pick: the
    // least-loaded, llm-d and default policies must spread them exactly evenly, and seeded picks
    // must replay.
    for json in [
        r#"{"type": "least_loaded", "seed": 11}"#,
        r#"{"type": "llm_d", "seed": 11}"#,
        r#"{"type": "default", "seed": 11}"#,
        r#"{"type": "dynamo_two_tier", "seed": 11}"#,
    ] {
        let p = policy(json);
        let run = || {
            let mut rows: Vec<Row> = (0..8).map(|id| row(id, 0, 0)).collect();
            let mut selector = Selector::<8>::new();
            let mut order = Vec::new();
            for _ in 0..1000 {
                let s = p.select(&mut selector, &REQ, &rows).unwrap();
                let load = rows[s.row].load();
                rows[s.row] = rows[s.row].with_load(Load {
                    active_requests: load.active_requests + 1,
                    active_decode_blocks: load.active_decode_blocks + 10,
                    active_prefill_tokens: load.active_prefill_tokens + 160,
                    ..load
                });
                order.push(s.worker.worker_id);
            }
            (rows, order)
        };
        let (rows, order) = run();
        for r in &rows {
            assert_eq!(r.load().active_requests, 125, "{json}: {rows:?}");
        }
        assert_eq!(run().1, order, "{json}: seeded picks must replay");
    }
    // Without booking (costs stay tied), the uniform tie-break still spreads: each of 8 workers
    // gets 125 expected, and more than 80 each.
    let p = policy(r#"{"type": "composed", "scorers": [{"type": "queue"}], "seed": 3}"#);
    let rows: Vec<Row> = (0..8).map(|id| row(id, 0, 0)).collect();
    let mut selector = Selector::<8>::new();
    let mut seen = [0u32; 8];
    for _ in 0..1000 {
        seen[p.select(&mut selector, &REQ, &rows).unwrap().row] += 1;
    }
    assert!(seen.iter().all(|&n| n > 80), "{seen:?}");
}

#[test]
fn the_default_type_is_the_default_policy_bit_for_bit() {
    let rows: Vec<Row> = (0..32)
        .map(|id| {
            row(id, u32::try_from(id % 7).unwrap(), id % 5).with_cache(Cache::from_tiers(
                u32::try_from(id % 7).unwrap(),
                1,
                2,
                0.75,
                0.25,
                16,
            ))
        })
        .collect();
    let knobs = r#"{"overlap_score_credit": 0.8, "prefill_load_scale": 1.5, "temperature": 0.7, "seed": 4}"#;
    let mine = policy(&format!(r#"{{"type": "default", {}"#, &knobs[1..]));
    let theirs: DefaultPolicyConfig = serde_json::from_str(knobs).unwrap();
    let theirs = theirs.build().unwrap();
    let (mut a, mut b) = (Selector::<64>::new(), Selector::<64>::new());
    for _ in 0..50 {
        let x = mine.select(&mut a, &REQ, &rows).unwrap();
        let y = theirs.select(&mut b, &REQ, &rows).unwrap();
        assert_eq!(x, y);
    }
}

fn rejected(json: &str) -> CatalogError {
    match parse::<PolicyConfig>(json) {
        Err(e) => e,
        Ok(config) => config.build().unwrap_err(),
    }
}

#[test]
fn configuration_errors_name_what_is_wrong() {
    // Unknown names are values naming the key or type and what exists, not parser text.
    let unknown_type = rejected(r#"{"type": "fastest"}"#);
    assert!(
        matches!(&unknown_type, CatalogError::UnknownType { name, expected }
            if name == "fastest" && expected.contains(&"dynamo_two_tier")),
        "{unknown_type:?}"
    );
    assert!(unknown_type.is_unknown_name());
    let unknown_param = rejected(r#"{"type": "dynamo_two_tier", "spred": 3}"#);
    assert!(
        matches!(&unknown_param, CatalogError::UnknownKey { key, expected }
            if key == "spred" && expected.contains(&"spread")),
        "{unknown_param:?}"
    );
    assert_eq!(
        unknown_param.to_string(),
        "unknown key \"spred\", expected one of `spread`, `ratio`, `coverage`, `filters`, `seed`"
    );
    let bad_value = rejected(r#"{"type": "dynamo_two_tier", "coverage": 1.5}"#);
    assert_eq!(
        bad_value,
        CatalogError::OutOfRange {
            parameter: "coverage",
            value: 1.5,
            range: Range::Within(0.0, 1.0)
        }
    );
    assert_eq!(
        bad_value.to_string(),
        "coverage = 1.5: must be within [0, 1]"
    );
    assert_eq!(
        rejected(r#"{"type": "power_of_two", "k": 0}"#).to_string(),
        "k = 0: must be at least 1"
    );
    assert_eq!(
        rejected(r#"{"type": "ttft", "kv_capacity_blocks": 0}"#).to_string(),
        "kv_capacity_blocks = 0: must be at least 1"
    );
    let shape = rejected(r#"{"type": "composed", "scorers": [{"type": "queue", "weight": "x"}]}"#);
    assert!(
        matches!(&shape, CatalogError::Shape { message } if message.contains("invalid type")),
        "{shape:?}"
    );
    assert!(!shape.is_unknown_name());
    assert!(matches!(
        rejected(r#"{"type": "composed", "#),
        CatalogError::Json { line: 1, .. }
    ));
    assert_eq!(
        rejected(
            r#"{"type": "composed", "filters": [{"type": "require_taints", "taints": [64]}]}"#
        ),
        CatalogError::Taint { index: 64 }
    );
    let too_many = format!(
        r#"{{"type": "composed", "scorers": [{}]}}"#,
        [r#"{"type": "queue"}"#; 9].join(",")
    );
    assert_eq!(
        rejected(&too_many),
        CatalogError::TooMany {
            what: "scorers",
            given: 9,
            most: 8
        }
    );
    assert_eq!(rejected(&too_many).to_string(), "9 scorers, at most 8");
    assert!(matches!(
        rejected(r#"{"type": "default", "temprature": 1}"#),
        CatalogError::UnknownKey { key, .. } if key == "temprature"
    ));
    assert_eq!(
        rejected(r#"{"type": "default", "temperature": -1}"#).to_string(),
        "invalid temperature = -1: must be >= 0"
    );
    assert!(matches!(
        rejected(r#"{"type": "composed", "scorers": [{"type": "default", "knobs": {"seed": 1}}]}"#),
        CatalogError::MisplacedKnob { knob: "seed" }
    ));
}

fn set_error(json: &str) -> CatalogError {
    match parse::<PolicySetConfig>(json) {
        Err(e) => e,
        Ok(config) => config.build().unwrap_err(),
    }
}

#[test]
fn named_instances_per_role() {
    let config: PolicySetConfig = serde_json::from_str(
        r#"{"instances": [{"name": "cache", "policy": {"type": "sglang_cache_aware"}},
                          {"name": "rr", "policy": {"type": "round_robin"}}],
            "roles": {"prefill": "cache", "decode": "rr"}}"#,
    )
    .unwrap();
    let set = config.build().unwrap();
    assert_eq!(set.instance_name(Role::Prefill), "cache");
    assert_eq!(set.instance_name(Role::Decode), "rr");
    assert_eq!(set.instance_name(Role::Aggregated), "default");
    let rows = [row(1, 1, 5), row(2, 4, 10)];
    let mut selector = Selector::<8>::new();
    let s = set
        .policy(Role::Prefill)
        .select(&mut selector, &REQ, &rows)
        .unwrap();
    assert_eq!(s.worker.worker_id, 2);
    assert_eq!(
        set_error(r#"{"roles": {"decode": "nope"}}"#),
        CatalogError::UnknownInstance {
            role: "decode",
            name: "nope".into()
        }
    );
    assert_eq!(
        set_error(r#"{"roles": {"decode": "nope"}}"#).to_string(),
        "role decode names instance \"nope\", which is not defined"
    );
    assert_eq!(
        set_error(
            r#"{"instances": [{"name": "a", "policy": {"type": "random"}},
                               {"name": "a", "policy": {"type": "random"}}]}"#
        ),
        CatalogError::DuplicateName { name: "a".into() }
    );
    let inside = set_error(
        r#"{"instances": [{"name": "x", "policy": {"type": "llm_d", "host_credit": 2}}]}"#,
    );
    assert!(matches!(&inside, CatalogError::InInstance { instance, .. } if instance == "x"));
    assert!(matches!(
        inside.innermost(),
        CatalogError::OutOfRange { value, .. } if *value == 2.0
    ));
    assert_eq!(
        inside.to_string(),
        "instance \"x\": host = 2: must be within [0, 1]"
    );
    assert!(matches!(
        set_error(r#"{"roles": {"decoder": "x"}}"#),
        CatalogError::UnknownKey { key, .. } if key == "decoder"
    ));
}

#[test]
fn every_row_is_explained() {
    let p = policy(
        r#"{"type": "composed",
            "filters": [{"type": "overload", "max_requests": 10},
                        {"type": "allow_list", "workers": [1, 2, 3, 4, 6]}],
            "scorers": [{"type": "least_loaded"}, {"type": "queue", "weight": 2}]}"#,
    );
    let gpu = TaintSet::EMPTY.with(Taint::new(2).unwrap());
    let rows = [
        row(1, 0, 1).with_taints(gpu),
        row(2, 0, 50).with_taints(gpu),
        row(3, 0, 3),
        row(5, 0, 1).with_taints(gpu),
        row(4, 0, 1).with_taints(gpu).overloaded(true),
        row(6, 0, 5).with_taints(gpu),
    ];
    let req = Request::new(160, 16).required_taints(gpu);
    let mut out = [Explanation::EMPTY; 6];
    let mut selector = Selector::<8>::new();
    let s = p
        .select_explained(&mut selector, &req, &rows, &mut out)
        .unwrap();
    assert_eq!(s.worker.worker_id, 1);
    let dispositions: Vec<Disposition> = out.iter().map(|e| e.disposition).collect();
    assert_eq!(
        dispositions,
        [
            Disposition::Candidate,
            Disposition::FilterOverloaded { filter: 0 },
            Disposition::Ineligible,
            Disposition::Filtered { filter: 1 },
            Disposition::Overloaded,
            Disposition::Candidate,
        ]
    );
    // Candidates 1 and 6: least loaded 1 and 5; queue (min 1, max 5), weight 2: -2 and 0.
    assert_eq!(out[0].contributions(), [1.0, -2.0]);
    assert_eq!(out[0].total, -1.0);
    assert!(out[0].chosen && !out[5].chosen);
    assert_eq!(out[5].contributions(), [5.0, 0.0]);
    assert!(out[1].contributions().is_empty() && out[1].total.is_nan());
    // Too small a buffer is refused before selecting; a failed selection still explains rows.
    let err = p
        .select_explained(&mut selector, &req, &rows, &mut out[..2])
        .unwrap_err();
    assert_eq!(
        err,
        SelectError::ExplanationBufferTooSmall { rows: 6, given: 2 }
    );
    let err = p
        .select_explained(&mut selector, &req, &rows[1..5], &mut out)
        .unwrap_err();
    assert_eq!(err, SelectError::AllFiltered);
    assert_eq!(
        out[0].disposition,
        Disposition::FilterOverloaded { filter: 0 }
    );
    assert_eq!(out[2].disposition, Disposition::Filtered { filter: 1 });
}

/// The `ttft` type's worked example with speeds in the rows (as a router fills them): every part
/// by hand from the documented formula, and the explanation shows them.
#[test]
fn ttft_estimates_each_candidates_first_token_and_explains_its_parts() {
    let p = policy(r#"{"type": "ttft"}"#);
    let speed = Speed {
        base_ms: 10.0,
        ms_per_prefill_token: 0.5,
        ms_per_active_request: 2.0,
    };
    // Prompt 160 tokens. Worker 1: 32 cached, 100 queued, 1 active; worker 2: 128 cached, 300
    // queued, 3 active; worker 3: cold, 200 queued, 2 active.
    let rows = [
        row(1, 2, 1).with_speed(speed),
        row(2, 8, 3).with_speed(speed),
        row(3, 0, 2).with_speed(speed),
    ];
    let mut why = [Explanation::EMPTY; 3];
    let s = p
        .select_explained(&mut Selector::<8>::new(), &REQ, &rows, &mut why)
        .unwrap();
    // queue = 10 + 0.5 q; prefill = 0.5 (160 - c); decode = 2 (n + 1); the estimates (their
    // sum) are 128, 184 and 196, mean 508 / 3; every worker queues, the least 50 ms, so
    // crowd = 3 * 50 / (64 + 16 + 80) = 0.9375; others = 0.9375 * estimate / mean * 0.5 (160 -
    // c) + 2 n (1 + n / (2 + 1)), the mean of the active requests being 2; the longest prefix
    // is 128 tokens, so workers 1 and 3 (below 64) pay the gate: 0.5 * (0.9375 / 1.9375) * 128
    // (the best estimate).
    let mean = (128.0 + 184.0 + 196.0) / 3.0;
    let mean_active = (1.0 + 3.0 + 2.0) / 3.0;
    let others = |estimate: f64, uncached: f64, n: f64| {
        0.9375 * estimate / mean * 0.5 * uncached + 2.0 * (n * (1.0 + n / (mean_active + 1.0)))
    };
    let gate = 0.5 * (0.9375 / 1.9375) * 128.0;
    let expected = [
        [60.0, 64.0, 4.0, others(128.0, 128.0, 1.0), gate],
        [160.0, 16.0, 8.0, others(184.0, 32.0, 3.0), 0.0],
        [110.0, 80.0, 6.0, others(196.0, 160.0, 2.0), gate],
    ];
    for (e, w) in expected.iter().zip(&why) {
        assert_eq!(w.contributions(), e);
    }
    // Worker 1 wins: the shortest estimate, though the gate charges it for the prefix it lacks.
    assert_eq!(s.worker.worker_id, 1);
    assert_eq!(s.cost, expected[0].iter().fold(0.0, |t, c| t + c));
    // With worker 3 idle instead, no one need queue behind anyone: crowd 0, no delay for those
    // behind and no gate, and the idle worker's estimate (92) wins.
    let rows = [rows[0], rows[1], row(3, 0, 0).with_speed(speed)];
    let (s, c) = costs(&p, &REQ, &rows);
    assert_eq!(s.worker.worker_id, 3);
    assert_eq!(c[2], 92.0);
}

/// A speed in the configuration overrides the rows'; a row without one takes the mean of those
/// that have one; without any, costs are in token-equivalents (1 ms per prefill token).
#[test]
fn ttft_speeds_come_from_the_config_the_rows_or_their_mean() {
    let fast = Speed {
        base_ms: 0.0,
        ms_per_prefill_token: 1.0,
        ms_per_active_request: 0.0,
    };
    let slow = Speed {
        ms_per_prefill_token: 3.0,
        ..fast
    };
    // Idle workers, no cache: the estimate is the prefill time of the whole prompt.
    let idle = |id| row(id, 0, 0);
    let p = policy(r#"{"type": "ttft"}"#);
    let rows = [idle(1).with_speed(fast), idle(2).with_speed(slow), idle(3)];
    let (s, c) = costs(&p, &REQ, &rows);
    assert_eq!(c, [160.0, 480.0, 320.0]); // worker 3: the mean, 2 ms per token
    assert_eq!(s.worker.worker_id, 1);
    let fixed = policy(
        r#"{"type": "ttft", "speed": {"base_ms": 5, "ms_per_prefill_token": 0.25,
            "ms_per_active_request": 0}}"#,
    );
    let (_, c) = costs(&fixed, &REQ, &rows);
    assert_eq!(c, [45.0, 45.0, 45.0]);
    // A measured speed of zeros is the row's own, not a missing one: the mean takes it in, and
    // its row costs nothing.
    let zero = Speed {
        ms_per_prefill_token: 0.0,
        ..fast
    };
    let (s, c) = costs(&p, &REQ, &[idle(1).with_speed(zero), rows[1], rows[2]]);
    assert_eq!(c, [0.0, 480.0, 240.0]);
    assert_eq!(s.worker.worker_id, 1);
    let (_, c) = costs(&p, &REQ, &[idle(1), idle(2)]);
    assert_eq!(c, [160.0, 160.0]);
    // It reads the speed, and credits blocks routed but not computed.
    let leg = REQ.leg();
    assert!(
        p.inputs(leg)
            .contains(WorkerInputs::SPEED | WorkerInputs::PENDING)
    );
}

/// A saturated holder of the prefix is left: the gate's penalty is bounded by the best estimate.
#[test]
fn ttft_leaves_a_saturated_holder_of_the_prefix() {
    let p = policy(r#"{"type": "ttft"}"#);
    // Worker 1 holds the whole prefix but has 5,000 tokens queued; worker 2 is idle and cold.
    let hot = row(1, 10, 0).with_load(Load {
        available: true,
        active_prefill_tokens: 5000,
        ..Load::default()
    });
    let (s, _) = costs(&p, &REQ, &[hot, row(2, 0, 0)]);
    assert_eq!(s.worker.worker_id, 2);
    // With 100 tokens queued it keeps the request.
    let warm = hot.with_load(Load {
        available: true,
        active_prefill_tokens: 100,
        ..Load::default()
    });
    let (s, _) = costs(&p, &REQ, &[warm, row(2, 0, 0)]);
    assert_eq!(s.worker.worker_id, 1);
}

/// With the workers' KV capacity, the estimate waits for room: a holder of the prefix whose cache
/// its running requests fill loses to a cold worker with room, and the price grows with the
/// utilization, so a lightly used cache keeps the request where its prefix is.
#[test]
fn ttft_with_a_kv_capacity_waits_for_room() {
    let speed = Speed {
        base_ms: 0.0,
        ms_per_prefill_token: 1.0,
        ms_per_active_request: 0.0,
    };
    // Worker 1 holds 8 of the 10 blocks and has `blocks` booked; worker 2 is idle and cold.
    let holder = |blocks| {
        row(1, 8, 0)
            .with_load(Load {
                available: true,
                active_decode_blocks: blocks,
                ..Load::default()
            })
            .with_speed(speed)
    };
    let cold = row(2, 0, 0).with_speed(speed);
    let blind = policy(r#"{"type": "ttft"}"#);
    let priced = policy(r#"{"type": "ttft", "kv_capacity_blocks": 100}"#);
    // Unpriced, 90 booked blocks cost nothing; priced, 16 * 90 * 0.9 = 1,296 tokens of wait.
    let (s, c) = costs(&blind, &REQ, &[holder(90), cold]);
    assert_eq!((s.worker.worker_id, c[0]), (1, 32.0));
    let (s, c) = costs(&priced, &REQ, &[holder(90), cold]);
    assert_eq!(s.worker.worker_id, 2);
    assert_eq!(c[1], 160.0);
    assert!(c[0] > 1296.0, "{c:?}");
    // 20 booked blocks: 16 * 20 * 0.2 = 64 tokens, less than the 128 the prefix saves.
    let (s, c) = costs(&priced, &REQ, &[holder(20), cold]);
    assert_eq!(s.worker.worker_id, 1);
    assert_eq!(c[0], 32.0 + 64.0);
    // Without a load projection a row books nothing, so nothing waits.
    let (_, c) = costs(&priced, &REQ, &[row(1, 8, 0).with_speed(speed), cold]);
    assert_eq!(c[0], 32.0);
}

/// Found by the `catalog` fuzz target (CI's short run, 2026-12-01): `ttft` added a worker's
/// queued prefill tokens to the request's uncached ones, and its active requests to 1, in
/// unchecked `u64` arithmetic, so counters near `u64::MAX` overflowed (a panic in debug builds, a
/// wrapped, tiny estimate in release). The sums now saturate, and such a worker is the slowest.
#[test]
fn ttft_takes_counters_near_the_integer_limit() {
    let policy = policy(r#"{"type": "ttft"}"#);
    let mut huge = row(1, 0, 0);
    huge.active_prefill_tokens = u64::MAX - 5;
    huge.active_requests = u64::MAX;
    let rows = [huge, row(2, 0, 3)];
    let mut selector = Selector::<8>::new();
    let mut explanations = [Explanation::default(); 2];
    for _ in 0..3 {
        let pick = policy.select(&mut selector, &REQ, &rows).unwrap();
        assert_eq!(pick.worker.worker_id, 2);
        let explained = policy
            .select_explained(&mut selector, &REQ, &rows, &mut explanations)
            .unwrap();
        assert_eq!(explained.worker.worker_id, 2);
    }
}

/// Every path of the pipeline names an invalid speed: the general one without filters (which
/// checks speeds in a second pass when a row carries one), the one with filters, and the
/// default policy's one-pass steps (which decline and let the general pipeline name it).
#[test]
fn an_invalid_speed_is_named_on_every_path() {
    let mut bad = row(2, 0, 0);
    bad.flags = RowFlags(bad.flags.0 | RowFlags::HAS_SPEED.0);
    bad.ms_per_prefill_token = f64::NAN;
    let mut good = row(1, 0, 0);
    good.flags = RowFlags(good.flags.0 | RowFlags::HAS_SPEED.0);
    let rows = [good, bad, row(3, 0, 0)];
    let mut selector = Selector::<8>::new();
    for json in [
        r#"{"type": "least_loaded"}"#,
        r#"{"type": "least_loaded", "filters": [{"type": "overload", "max_requests": 9}]}"#,
        r#"{"type": "default"}"#,
    ] {
        assert_eq!(
            policy(json).select(&mut selector, &REQ, &rows).unwrap_err(),
            SelectError::InvalidRow {
                row: 1,
                field: RowField::Speed
            },
            "{json}"
        );
    }
    // Valid speeds pass.
    let mut fine = rows;
    fine[1].ms_per_prefill_token = 0.5;
    assert!(
        policy(r#"{"type": "least_loaded"}"#)
            .select(&mut selector, &REQ, &fine)
            .is_ok()
    );
}

/// The speeds are checked a block of rows at a time: an invalid one is named wherever it lies in
/// a fleet whose other rows all carry valid speeds (first, inside or last of a block, in a later
/// block, the last row), by each of the three places that check them: the engine's admission
/// (`ttft` through the general pipeline, `least_loaded` through the catalog's one pass), the
/// catalog's two-mode pass over a tidy fleet (`dynamo_two_tier`) and the default cost's one pass
/// (`default`).
#[test]
fn an_invalid_speed_is_named_at_every_position() {
    let fleet: Vec<Row> = (1..=40)
        .map(|id| row(id, 0, id % 5).with_speed(Speed::default()))
        .collect();
    let mut selector = Selector::<64>::new();
    for json in [
        r#"{"type": "ttft"}"#,
        r#"{"type": "dynamo_two_tier"}"#,
        r#"{"type": "least_loaded"}"#,
        r#"{"type": "default"}"#,
    ] {
        let policy = policy(json);
        assert!(policy.select(&mut selector, &REQ, &fleet).is_ok(), "{json}");
        for at in [0, 1, 15, 16, 17, 31, 32, 39] {
            let mut rows = fleet.clone();
            rows[at].base_ms = f64::INFINITY;
            assert_eq!(
                policy.select(&mut selector, &REQ, &rows).unwrap_err(),
                SelectError::InvalidRow {
                    row: at,
                    field: RowField::Speed
                },
                "{json}, row {at}"
            );
        }
    }
}

#[test]
fn llm_d_scorers_read_zeros_where_a_row_or_the_view_lacks_their_group() {
    // Scorers called directly, as a host's own engine may: rows without a cache entry or a load
    // projection read as zeros, and so does every row when the view does not declare the group.
    let rows = [row(1, 4, 2), Row::new(WorkerKey::new(2, 0)), row(3, 8, 6)];
    let order = [0, 1, 2];
    let request = Request::new(160, 16); // 10 blocks
    let prefix = PrefixScore::default();
    let kv = KvUtilizationScore {
        capacity_blocks: 100,
    };
    let score = |scorer: &dyn Scorer, inputs: WorkerInputs| {
        let view = RequestView::new(&request, inputs);
        let mut out = [f64::NAN; 3];
        scorer
            .score(&view, &Candidates::new(view, &rows, &order), &mut out)
            .unwrap();
        out
    };
    assert_eq!(score(&prefix, WorkerInputs::CACHE), [-0.4, -0.0, -0.8]);
    assert_eq!(score(&kv, WorkerInputs::LOAD), [-0.8, -1.0, -0.4]);
    // Queue: min-max over 2, 0 (no projection) and 6.
    assert_eq!(
        score(&QueueScore, WorkerInputs::LOAD),
        [-(4.0 / 6.0), -1.0, -0.0]
    );
    assert_eq!(score(&prefix, WorkerInputs::LOAD), [-0.0; 3]);
    assert_eq!(score(&kv, WorkerInputs::CACHE), [-1.0; 3]);
    assert_eq!(score(&QueueScore, WorkerInputs::NONE), [-1.0; 3]);

    // Loads beyond 2^53, where a float cannot hold each load exactly: the headroom is still
    // subtracted as integers.
    let big = [1 << 60, (1 << 60) + 3, 5].map(|q: u64| {
        Row::new(WorkerKey::new(q, 0)).with_load(Load {
            available: true,
            active_requests: q,
            ..Load::default()
        })
    });
    let view = RequestView::new(&request, WorkerInputs::LOAD);
    let mut out = [f64::NAN; 3];
    QueueScore
        .score(&view, &Candidates::new(view, &big, &order), &mut out)
        .unwrap();
    let (hi, lo) = ((1u64 << 60) + 3, 5u64);
    let want = [1 << 60, (1 << 60) + 3, 5].map(|q: u64| -((hi - q) as f64 / (hi - lo) as f64));
    assert_eq!(out.map(f64::to_bits), want.map(f64::to_bits));
    assert_eq!(out[0], -(3.0 / (hi - lo) as f64));
}

/// A scorer whose cost of a row is its active requests times `scale`, plus `offset`, so
/// each scorer of a list writes another column.
struct Scaled {
    scale: f64,
    offset: f64,
}

impl Scorer for Scaled {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::LOAD
    }

    fn score(
        &self,
        _request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        for (cost, row) in costs.iter_mut().zip(candidates.iter()) {
            #[allow(clippy::cast_precision_loss, reason = "small counts")]
            let active = row.load().map_or(0, |l| l.active_requests) as f64;
            *cost = active * self.scale + self.offset;
        }
        Ok(())
    }
}

/// Every list of 1 to 8 scorers totals each candidate's costs as `(0 + c0) + c1 + ...`, in
/// scorer order, whichever pass sums them (one pass for 2 to 5 columns, one per column
/// beyond), and picks the least total.
#[test]
fn the_totals_sum_every_column_in_order() {
    let rows: Vec<Row> = (0..40u64)
        .map(|i| {
            Row::new(WorkerKey::new(i, 0)).with_load(Load {
                available: true,
                active_requests: (i * 7 + 3) % 40,
                ..Load::default()
            })
        })
        .collect();
    // Scales of both signs and offsets that do not round away, so a column left out or
    // added twice changes every total.
    let scorers: Vec<Scaled> = (0..8)
        .map(|s| Scaled {
            scale: [1.0, -0.25, 0.5, 3.0, -1.5, 0.125, 2.0, -0.75][s],
            offset: 0.1 * f64::from(u8::try_from(s).unwrap() + 1),
        })
        .collect();
    let request = Request::new(64, 16);
    let mut selector = Selector::<64>::new();
    let mut out = vec![Explanation::EMPTY; rows.len()];
    for count in 1..=8 {
        let list = &scorers[..count];
        let policy = Policy::new((), list, MinCostPicker).unwrap();
        let selection = policy
            .select_explained(&mut selector, &request, &rows, &mut out)
            .unwrap();
        let mut least = (f64::INFINITY, 0);
        for (e, row) in out.iter().zip(&rows) {
            assert_eq!(e.disposition, Disposition::Candidate);
            #[allow(clippy::cast_precision_loss, reason = "small counts")]
            let active = row.active_requests as f64;
            let total = list
                .iter()
                .fold(0.0_f64, |t, s| t + (active * s.scale + s.offset));
            assert_eq!(
                e.total.to_bits(),
                total.to_bits(),
                "{count} scorers, row {}",
                e.row
            );
            if total < least.0 {
                least = (total, e.row);
            }
        }
        assert_eq!(selection.row, least.1, "{count} scorers");
    }
}

/// A policy without scorers reports zero costs (the sum of no columns), also with a selector whose
/// last selection summed the columns of a policy with several scorers: its picker, its
/// `Selection::cost`, `last_costs` and explanations never see that selection's totals.
#[test]
fn a_policy_without_scorers_costs_zero_after_one_with_several() {
    let rows = [row(1, 0, 5), row(2, 3, 0), row(3, 1, 9)];
    let several = policy(r#"{"type": "llm_d"}"#);
    for json in [r#"{"type": "round_robin"}"#, r#"{"type": "random"}"#] {
        let none = policy(json);
        let mut selector = Selector::<8>::new();
        several.select(&mut selector, &REQ, &rows).unwrap();
        assert!(selector.last_costs().any(|(_, c)| c != 0.0), "{json}");
        let s = none.select(&mut selector, &REQ, &rows).unwrap();
        assert_eq!(s.cost.to_bits(), 0, "{json}");
        let last: Vec<(usize, f64)> = selector.last_costs().collect();
        assert_eq!(last, [(0, 0.0), (1, 0.0), (2, 0.0)], "{json}");
        let mut why = [Explanation::EMPTY; 3];
        several
            .select_explained(&mut selector, &REQ, &rows, &mut why)
            .unwrap();
        none.select_explained(&mut selector, &REQ, &rows, &mut why)
            .unwrap();
        assert!(
            why.iter().all(|e| e.total.to_bits() == 0),
            "{json}: {why:?}"
        );
    }
}
