//! Scorers scored together (`Scorers::score_together`, `Scorer::score_run`): the `ttft` type's
//! five parts in one pass give every selection, every candidate's total and every part's
//! contribution bit for bit as the same parts scored one at a time, and the same errors, on
//! random fleets (rows with and without load, cache and speed; counters near the integer
//! limit; speeds large enough to overflow) and random parameters.

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
    )
        .prop_map(|(speed, others, share, slack)| FirstToken {
            speed,
            others_weight: others,
            affinity_share: share,
            affinity_slack: slack,
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
