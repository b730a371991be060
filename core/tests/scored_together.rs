//! Scorers scored together (`Scorers::score_together`, `Scorer::score_run`): the `ttft` type's
//! five parts in one pass, and runs of llm-d's scorers (prefix, KV utilization, queue: scorers
//! that declare different inputs) with one read of each row, give every selection, every
//! candidate's total and every scorer's contribution bit for bit as the same scorers scored one
//! at a time, and the same errors, on random fleets (rows with and without load, cache and
//! speed; counters near the integer limit; speeds large enough to overflow) and random
//! parameters.

use libroute_core::catalog::*;
use libroute_core::*;
use proptest::prelude::*;

/// A scorer that hides its type's `score_run`: the engine asks it alone.
struct Alone(WeightedScorer);

impl Scorer for Alone {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        self.0.inputs(leg)
    }

    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        self.0.score(request, candidates, costs)
    }
}

const PARTS: [FirstTokenPart; 5] = [
    FirstTokenPart::Queue,
    FirstTokenPart::Prefill,
    FirstTokenPart::Decode,
    FirstTokenPart::DelayToOthers,
    FirstTokenPart::Affinity,
];

fn counter() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..5_000u64,
        1 => Just(0u64),
        1 => (u64::MAX - 3)..=u64::MAX,
    ]
}

fn speed() -> impl Strategy<Value = Speed> {
    let ms = prop_oneof![6 => 0.0..50.0f64, 1 => Just(0.0), 1 => 1e300..1e308f64];
    (ms.clone(), ms.clone(), ms).prop_map(|(b, p, a)| Speed {
        base_ms: b,
        ms_per_prefill_token: p,
        ms_per_active_request: a,
    })
}

fn row() -> impl Strategy<Value = Row> {
    (
        any::<bool>(),
        (counter(), counter(), counter()),
        prop::option::of((0..200u32, counter())),
        prop::option::of(speed()),
    )
        .prop_map(|(has_load, (queued, blocks, active), cache, speed)| {
            let mut row = Row::new(WorkerKey::new(0, 0));
            if has_load {
                row = row.with_load(Load {
                    available: true,
                    active_prefill_tokens: queued,
                    active_decode_blocks: blocks,
                    active_requests: active,
                });
            }
            if let Some((blocks, tokens)) = cache {
                row = row.with_cache(Cache {
                    device_blocks: blocks,
                    effective_blocks: f64::from(blocks),
                    effective_tokens: tokens,
                    ..Cache::default()
                });
            }
            if let Some(speed) = speed {
                row = row.with_speed(speed);
            }
            row
        })
}

fn model() -> impl Strategy<Value = FirstToken> {
    (
        prop::option::of(speed()),
        prop_oneof![Just(1.0), 0.0..4.0f64],
        0.0..=1.0f64,
        prop_oneof![Just(0.5), 0.0..3.0f64],
        prop_oneof![Just(0u64), 1..5_000u64, Just(u64::MAX)],
    )
        .prop_map(|(speed, others, share, slack, capacity)| FirstToken {
            speed,
            others_weight: others,
            affinity_share: share,
            affinity_slack: slack,
            kv_capacity_blocks: capacity,
            ..FirstToken::new(FirstTokenPart::Queue)
        })
}

fn weighted(model: FirstToken, part: FirstTokenPart) -> WeightedScorer {
    WeightedScorer {
        scorer: BuiltinScorer::FirstToken(FirstToken { part, ..model }),
        weight: 1.0,
    }
}

/// What a selection gave: the pick, its cost and contributions (as bits), and every
/// candidate's total.
type Outcome = (usize, u64, Vec<u64>, Vec<(usize, u64)>);

/// A selection's [`Outcome`], or its error.
fn outcome<S: Scorers>(
    policy: &Policy<(), S, MinCostPicker>,
    request: &Request<'_>,
    rows: &[Row],
) -> Result<Outcome, SelectError> {
    let mut selector = Selector::<64>::new();
    let s = policy.select(&mut selector, request, rows)?;
    Ok((
        s.row,
        s.cost.to_bits(),
        s.contributions().iter().map(|c| c.to_bits()).collect(),
        selector
            .last_costs()
            .map(|(i, c)| (i, c.to_bits()))
            .collect(),
    ))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn the_ttft_parts_scored_together_are_those_scored_alone(
        rows in prop::collection::vec(row(), 1..40),
        model in model(),
        prompt in prop_oneof![1..5_000u64, Just(u64::MAX / 2)],
    ) {
        let rows: Vec<Row> = rows
            .into_iter()
            .enumerate()
            .map(|(i, r)| Row { worker: WorkerKey::new(i as u64, 0), ..r })
            .collect();
        let request = Request::new(prompt, 16);
        let together = Policy::new((), PARTS.map(|p| weighted(model, p)), MinCostPicker).unwrap();
        let alone = Policy::new((), PARTS.map(|p| Alone(weighted(model, p))), MinCostPicker).unwrap();
        prop_assert_eq!(
            outcome(&together, &request, &rows),
            outcome(&alone, &request, &rows)
        );
        // Another order of the parts (the general loop of `score_parts`), and a run with
        // another scorer in it (scored one at a time).
        let shuffled = [PARTS[3], PARTS[0], PARTS[4], PARTS[2], PARTS[1]];
        let together = Policy::new((), shuffled.map(|p| weighted(model, p)), MinCostPicker).unwrap();
        let alone = Policy::new((), shuffled.map(|p| Alone(weighted(model, p))), MinCostPicker).unwrap();
        prop_assert_eq!(
            outcome(&together, &request, &rows),
            outcome(&alone, &request, &rows)
        );
    }
}

/// One of llm-d's scorers at a weight: 1 most often (the catalog's defaults are 1, 1 and 1),
/// else any, including 0 and a negative one.
fn llm_d_scorer() -> impl Strategy<Value = WeightedScorer> {
    let credit =
        prop_oneof![2 => 0.0..1.0f64, 1 => Just(0.0), 1 => Just(1.0), 1 => 1e300..1e308f64];
    let scorer = prop_oneof![
        (credit.clone(), credit)
            .prop_map(|(host, disk)| BuiltinScorer::Prefix(PrefixScore { host, disk })),
        prop_oneof![Just(1u64), 1..10_000u64, Just(u64::MAX)].prop_map(|capacity_blocks| {
            BuiltinScorer::KvUtilization(KvUtilizationScore { capacity_blocks })
        }),
        Just(BuiltinScorer::Queue(QueueScore)),
    ];
    let weight = prop_oneof![3 => Just(1.0), 1 => -3.0..3.0f64, 1 => Just(0.0)];
    (scorer, weight).prop_map(|(scorer, weight)| WeightedScorer { scorer, weight })
}

/// Rows whose cache entries may hold host and disk blocks, which the prefix scorer credits.
fn tiered_row() -> impl Strategy<Value = Row> {
    (row(), 0..50u32, 0..50u32, any::<bool>()).prop_map(|(mut row, host, disk, tiers)| {
        if tiers && row.flags.contains(RowFlags::HAS_CACHE) {
            row.host_blocks = host;
            row.disk_blocks = disk;
        }
        row
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn llm_d_scorers_scored_together_are_those_scored_alone(
        rows in prop::collection::vec(tiered_row(), 1..40),
        run in prop::collection::vec(llm_d_scorer(), 2..=4),
        prompt in prop_oneof![1..5_000u64, Just(u64::MAX / 2)],
    ) {
        let rows: Vec<Row> = rows
            .into_iter()
            .enumerate()
            .map(|(i, r)| Row { worker: WorkerKey::new(i as u64, 0), ..r })
            .collect();
        let request = Request::new(prompt, 16);
        let together = Policy::new((), run.as_slice(), MinCostPicker).unwrap();
        let alone: Vec<Alone> = run.iter().map(|&w| Alone(w)).collect();
        let alone = Policy::new((), alone.as_slice(), MinCostPicker).unwrap();
        prop_assert_eq!(
            outcome(&together, &request, &rows),
            outcome(&alone, &request, &rows)
        );
    }
}

/// The catalog's `llm_d` type, with and without its KV utilization scorer, scores its scorers
/// together and picks and totals as they do alone.
#[test]
fn the_catalog_llm_d_type_matches_its_scorers_alone() {
    let rows: Vec<Row> = (0..300u64)
        .map(|i| {
            Row::new(WorkerKey::new(i, 0))
                .with_load(Load {
                    available: true,
                    active_prefill_tokens: (i * 37) % 900,
                    active_decode_blocks: (i * 13) % 5_000,
                    active_requests: i % 7,
                })
                .with_cache(Cache::from_tiers(
                    (i % 11) as u32,
                    (i % 5) as u32,
                    (i % 3) as u32,
                    0.75,
                    0.25,
                    16,
                ))
        })
        .collect();
    let request = Request::new(2048, 16);
    for json in [
        r#"{"type": "llm_d", "kv_capacity_blocks": 4096}"#,
        r#"{"type": "llm_d", "queue_weight": 2.5, "host_credit": 0.3}"#,
    ] {
        let catalog = serde_json::from_str::<catalog_config::PolicyConfig>(json)
            .unwrap()
            .build()
            .unwrap();
        let alone: Vec<Alone> = catalog.scorers().iter().map(|&w| Alone(w)).collect();
        assert!(alone.len() >= 2, "{json}");
        let alone = Policy::new((), alone.as_slice(), MinCostPicker).unwrap();
        let mut a = Selector::<512>::new();
        let mut b = Selector::<512>::new();
        let x = catalog.select(&mut a, &request, &rows).unwrap();
        let y = alone.select(&mut b, &request, &rows).unwrap();
        assert_eq!(
            (x.row, x.cost.to_bits()),
            (y.row, y.cost.to_bits()),
            "{json}"
        );
        assert_eq!(x.contributions(), y.contributions(), "{json}");
        assert!(a.last_costs().eq(b.last_costs()), "{json}");
    }
}

/// The catalog's `ttft` type scores its parts together, and a selection over the benchmark
/// fleet picks and totals as the parts scored alone.
#[test]
fn the_catalog_ttft_type_matches_its_parts_alone() {
    let catalog = serde_json::from_str::<catalog_config::PolicyConfig>(r#"{"type": "ttft"}"#)
        .unwrap()
        .build()
        .unwrap();
    let model = FirstToken::new(FirstTokenPart::Queue);
    let alone = Policy::new((), PARTS.map(|p| Alone(weighted(model, p))), MinCostPicker).unwrap();
    let mut rows: Vec<Row> = (0..300u64)
        .map(|i| {
            Row::new(WorkerKey::new(i, 0))
                .with_load(Load {
                    available: true,
                    active_prefill_tokens: (i * 37) % 900,
                    active_decode_blocks: i % 50,
                    active_requests: i % 7,
                })
                .with_cache(Cache {
                    device_blocks: (i % 11) as u32,
                    effective_blocks: (i % 11) as f64,
                    effective_tokens: (i % 11) * 16,
                    ..Cache::default()
                })
        })
        .collect();
    for (i, r) in rows.iter_mut().enumerate().step_by(3) {
        *r = r.with_speed(Speed {
            base_ms: 4.0 + i as f64 / 100.0,
            ms_per_prefill_token: 0.02,
            ms_per_active_request: 1.5,
        });
    }
    let request = Request::new(2048, 16);
    let mut a = Selector::<512>::new();
    let mut b = Selector::<512>::new();
    let x = catalog.select(&mut a, &request, &rows).unwrap();
    let y = alone.select(&mut b, &request, &rows).unwrap();
    assert_eq!((x.row, x.cost.to_bits()), (y.row, y.cost.to_bits()));
    assert_eq!(x.contributions(), y.contributions());
    assert!(a.last_costs().eq(b.last_costs()));
}

/// `score_run` called by hand with columns not laid out as the engine lays them out (closer
/// than the candidates, or too short for the run) declines, writing nothing, instead of
/// panicking or scoring into overlapping columns.
#[test]
fn a_run_over_columns_the_engine_would_not_pass_declines() {
    let catalog = serde_json::from_str::<catalog_config::PolicyConfig>(r#"{"type": "llm_d"}"#)
        .unwrap()
        .build()
        .unwrap();
    let run = catalog.scorers();
    let rows: Vec<Row> = (0..4u64)
        .map(|i| {
            Row::new(WorkerKey::new(i, 0)).with_load(Load {
                available: true,
                active_requests: i,
                ..Load::default()
            })
        })
        .collect();
    let request = Request::new(64, 16);
    let view = RequestView::new(&request, WorkerInputs::CACHE | WorkerInputs::LOAD);
    let order = [0u32, 1, 2, 3];
    let candidates = Candidates::new(view, &rows, &order);
    let needed = (run.len() - 1) * 4 + 4;
    for (stride, len) in [(0, needed), (3, needed), (4, needed - 1), (4, 0)] {
        let mut columns = vec![7.0; len];
        let scored = WeightedScorer::score_run(run, &view, &candidates, &mut columns, stride);
        assert!(scored.is_none(), "stride {stride}, {len} values");
        assert!(columns.iter().all(|&c| c == 7.0), "nothing written");
    }
    let mut columns = vec![7.0; needed];
    let scored = WeightedScorer::score_run(run, &view, &candidates, &mut columns, 4);
    assert!(matches!(scored, Some(Ok(()))), "{} scorers", run.len());
    // No candidate and a stride of 0: nothing to score, and no layout to split.
    let none = Candidates::new(view, &rows, &[]);
    let scored = WeightedScorer::score_run(run, &view, &none, &mut [], 0);
    assert!(scored.is_none());
}
