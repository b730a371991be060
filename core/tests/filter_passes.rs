//! Filters asked a pass at a time (`Filter::check_rows`) against the same filters asked row by
//! row: the same selections and the same errors, on generated fleets with invalid, overloaded
//! and ineligible rows, requests with required taints, and filters that fail. The scorer after
//! them scores in one pass and the filters then ask its candidates (its costs are per row), or
//! applies the filters' rules in that pass (least loaded and the default cost, when every
//! filter offers a `RowRule`), or scores the filters' candidates (the same scorers without their one
//! pass, and Dynamo's two-tier rule, which compares candidates); policies without scorers mark
//! the rows by the rules too.

use libroute_core::catalog::{
    AllowList, BuiltinFilter, DynamoTwoTier, LeastLoaded, LoadMetric, MinCostPicker,
    OverloadLimits, RandomPicker, RequireTaints,
};
use libroute_core::*;
use proptest::prelude::*;

mod general;
use general::General;

/// A filter asked row by row only: it does not offer `check_rows`.
#[derive(Debug, Clone)]
struct RowByRow<F>(F);

impl<F: Filter> Filter for RowByRow<F> {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        self.0.inputs(leg)
    }
    fn check(
        &self,
        request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Verdict, ComponentError> {
        self.0.check(request, row)
    }
}

/// A filter that fails on one worker id and keeps every other row, offering the pass.
#[derive(Debug, Clone, Copy)]
struct FailsOn(u64);

impl Filter for FailsOn {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }
    fn check(
        &self,
        _request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Verdict, ComponentError> {
        if row.raw().worker.worker_id == self.0 {
            Err(ComponentError { code: 7 })
        } else {
            Ok(Verdict::Keep)
        }
    }
    fn check_rows(
        &self,
        request: &RequestView<'_>,
        admission: &mut Admission<'_>,
    ) -> Option<Result<(), ComponentError>> {
        Some(admission.check_with(self, request))
    }
}

/// A builtin filter, or the failing one; a policy's list holds them as `&dyn Filter` (so the
/// pass is also reached through the engine's forwarding for references).
#[derive(Debug, Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "as the catalog's own list stores them, inline"
)]
enum TestFilter {
    Builtin(BuiltinFilter),
    Fails(FailsOn),
}

impl TestFilter {
    fn get(&self) -> &dyn Filter {
        match self {
            TestFilter::Builtin(f) => f,
            TestFilter::Fails(f) => f,
        }
    }
}

fn filter() -> impl Strategy<Value = TestFilter> {
    let limit = proptest::option::of(0u64..60);
    prop_oneof![
        3 => (0u64..4).prop_map(|t| TestFilter::Builtin(BuiltinFilter::RequireTaints(RequireTaints(TaintSet(t))))),
        3 => (limit.clone(), limit.clone(), limit).prop_map(|(b, p, r)| TestFilter::Builtin(BuiltinFilter::OverloadLimits(
            OverloadLimits { max_active_blocks: b, max_prefill_tokens: p.map(|p| p * 50), max_requests: r.map(|r| r / 4) },
        ))),
        2 => prop::collection::vec(0u64..12, 0..8).prop_map(|ids| TestFilter::Builtin(BuiltinFilter::AllowList(AllowList::new(&ids).unwrap()))),
        1 => (0u64..12).prop_map(|w| TestFilter::Fails(FailsOn(w))),
    ]
}

prop_compose! {
    fn row(id: u64)(loaded in any::<bool>(), apt in 0u64..3000, dcb in 0u64..60, nreq in 0u64..15,
                    taints in 0u64..8, overloaded in proptest::bool::weighted(0.15),
                    broken in proptest::bool::weighted(0.04), nan in proptest::bool::weighted(0.04),
                    cached in any::<bool>(), dev in 0u32..16) -> Row {
        let mut row = Row::new(WorkerKey::new(id / 2, u32::try_from(id % 2).unwrap())).with_taints(TaintSet(taints));
        if cached {
            row = row.with_cache(Cache { device_blocks: dev, effective_blocks: f64::from(dev), ..Cache::default() });
        }
        if loaded {
            row = row.with_load(Load { available: true, active_prefill_tokens: apt, active_decode_blocks: dcb, active_requests: nreq });
        }
        if nan {
            row = row.with_cache(Cache { effective_blocks: f64::NAN, ..Cache::default() });
        }
        if broken {
            row.flags = RowFlags(row.flags.0 | 1 << 30);
        }
        row.overloaded(overloaded)
    }
}

fn fleet() -> impl Strategy<Value = Vec<Row>> {
    (1usize..24).prop_flat_map(|n| (0..n as u64).map(row).collect::<Vec<_>>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn passes_select_and_fail_as_row_by_row(rows in fleet(), filters in prop::collection::vec(filter(), 1..4),
                                            required in 0u64..4, seed in proptest::option::of(any::<u64>()),
                                            entropy in any::<u64>(), which in 0usize..5) {
        let least = LeastLoaded { metric: LoadMetric::ActiveRequests };
        let (general_least, default, general_default) = (General(least), DefaultCost::default(), General(DefaultCost::default()));
        let two_tier = DynamoTwoTier::default();
        let scorers: [&dyn Scorer; 5] = [&least, &general_least, &default, &general_default, &two_tier];
        let scorer = (scorers[which],);
        let picker = DefaultPicker { temperature: 0.0 };
        let passes: Vec<&dyn Filter> = filters.iter().map(TestFilter::get).collect();
        let by_row: Vec<RowByRow<&dyn Filter>> = passes.iter().copied().map(RowByRow).collect();
        let fast = Policy::new(&passes[..], scorer, picker).unwrap().with_seed(seed);
        let slow = Policy::new(&by_row[..], scorer, picker).unwrap().with_seed(seed);
        let request = Request::new(256, 16).required_taints(TaintSet(required));
        let (mut a, mut b) = (Box::new(Selector::<32>::with_entropy(entropy)), Box::new(Selector::<32>::with_entropy(entropy)));
        for _ in 0..3 {
            let x = fast.select(&mut a, &request, &rows);
            let y = slow.select(&mut b, &request, &rows);
            prop_assert_eq!(x, y);
        }
        // Without scorers: a picker by position (rows left in place) and one of the least cost
        // (candidates moved to the front), with the same filters.
        let by_position = Policy::new(&passes[..], (), RandomPicker).unwrap().with_seed(seed);
        let by_position_slow = Policy::new(&by_row[..], (), RandomPicker).unwrap().with_seed(seed);
        let least_cost = Policy::new(&passes[..], (), MinCostPicker).unwrap().with_seed(seed);
        let least_cost_slow = Policy::new(&by_row[..], (), MinCostPicker).unwrap().with_seed(seed);
        for _ in 0..2 {
            let x = by_position.select(&mut a, &request, &rows);
            let y = by_position_slow.select(&mut b, &request, &rows);
            prop_assert_eq!(x, y);
            let x = least_cost.select(&mut a, &request, &rows);
            let y = least_cost_slow.select(&mut b, &request, &rows);
            prop_assert_eq!(x, y);
        }
    }
}

/// Fleets of 16 to 300 rows with one flag combination (cache entry and load projection, each
/// or not) and taint 1, but for a few odd rows (0 to 3, or up to 30: then more than one in 16,
/// and the tidy loops decline): overloaded, without a load projection but with stale counters
/// (some at 2^52), without a cache entry, with an unknown flag, an invalid estimate, without
/// taint 1, or with a speed (valid or not); or not odd but with a counter beyond 2^52.
fn tidy_fleet() -> impl Strategy<Value = Vec<Row>> {
    let odd = (0usize..300, 0u8..9);
    (
        16usize..300,
        prop_oneof![
            proptest::collection::vec(odd.clone(), 0..4),
            proptest::collection::vec(odd, 0..30)
        ],
        (any::<bool>(), any::<bool>()),
        proptest::collection::vec((0u64..5000, 0u64..500, 0u64..40), 300),
    )
        .prop_map(|(n, odd, (cached, loaded), loads)| {
            let mut rows: Vec<Row> = loads[..n]
                .iter()
                .enumerate()
                .map(|(i, &(apt, dcb, nreq))| {
                    let mut row = Row::new(WorkerKey::new(i as u64, 0))
                        .with_taints(TaintSet(1 | (i as u64 % 4) << 1));
                    if cached {
                        row = row.with_cache(Cache {
                            device_blocks: u32::try_from(i % 7).unwrap(),
                            effective_blocks: f64::from(u32::try_from(i % 7).unwrap()),
                            ..Cache::default()
                        });
                    }
                    if loaded {
                        row = row.with_load(Load {
                            available: true,
                            active_prefill_tokens: apt,
                            active_decode_blocks: dcb,
                            active_requests: nreq,
                        });
                    }
                    row
                })
                .collect();
            for (at, kind) in odd {
                let Some(row) = rows.get_mut(at) else {
                    continue;
                };
                *row = match kind {
                    0 => row.overloaded(true),
                    1 => {
                        let mut stale = Row::new(row.worker).with_taints(row.taints);
                        stale.flags = RowFlags(row.flags.0 & !RowFlags::HAS_LOAD.0);
                        stale.active_requests = 1000 + at as u64;
                        stale.active_decode_blocks = if at % 5 == 0 { 1 << 52 } else { 7000 };
                        stale.active_prefill_tokens = 100_000 + at as u64;
                        stale
                    }
                    // The fleet's flags (not odd), a counter beyond 2^52.
                    8 => Row {
                        active_decode_blocks: (1 << 52) + 1 + at as u64,
                        ..*row
                    },
                    2 => Row {
                        flags: RowFlags(row.flags.0 & !RowFlags::HAS_CACHE.0),
                        ..*row
                    },
                    3 => Row {
                        flags: RowFlags(row.flags.0 | 1 << 30),
                        ..*row
                    },
                    4 => row.with_cache(Cache {
                        effective_blocks: f64::NAN,
                        ..Cache::default()
                    }),
                    5 => row.with_taints(TaintSet(row.taints.0 & !1)),
                    6 => row.with_speed(Speed {
                        base_ms: 5.0,
                        ms_per_prefill_token: 0.01,
                        ms_per_active_request: 1.0,
                    }),
                    _ => row.with_speed(Speed {
                        base_ms: f64::NAN,
                        ms_per_prefill_token: 0.01,
                        ms_per_active_request: 1.0,
                    }),
                };
            }
            rows
        })
}

/// The filters of [`tidy_rows_are_marked_as_row_by_row`]: a rule on the row alone (no taint or
/// taint 1 required, limits around the fleet's counters and at 2^52), or an allow list, which
/// is no rule.
fn tidy_filter() -> impl Strategy<Value = TestFilter> {
    let limit = |values: Vec<u64>| proptest::option::of(prop::sample::select(values));
    prop_oneof![
        2 => prop::sample::select(vec![0u64, 0, 1]).prop_map(|t| TestFilter::Builtin(BuiltinFilter::RequireTaints(RequireTaints(TaintSet(t))))),
        4 => (limit(vec![0, 250, 499, 1 << 52]), limit(vec![0, 2500, (1 << 52) - 1]), limit(vec![0, 5, 20, 39]))
            .prop_map(|(b, p, r)| TestFilter::Builtin(BuiltinFilter::OverloadLimits(
                OverloadLimits { max_active_blocks: b, max_prefill_tokens: p, max_requests: r },
            ))),
        1 => prop::collection::vec(0u64..300, 0..64).prop_map(|ids| TestFilter::Builtin(BuiltinFilter::AllowList(AllowList::new(&ids).unwrap()))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// The engine's marking over a tidy fleet (policies without scorers, and admission before
    /// filters asked in a pass: the few odd rows marked again through their own flags, declining
    /// when there are many) selects and fails as the same filters asked row by row; with no
    /// filter, as a filter that keeps every row asked row by row.
    #[test]
    fn tidy_rows_are_marked_as_row_by_row(
        rows in tidy_fleet(), filters in prop::collection::vec(tidy_filter(), 0..3),
        required in prop::sample::select(vec![0u64, 0, 0, 1]),
        seed in proptest::option::of(any::<u64>()), entropy in any::<u64>(),
    ) {
        let keep_all = TestFilter::Builtin(BuiltinFilter::OverloadLimits(OverloadLimits::default()));
        let slow_filters = if filters.is_empty() { vec![keep_all] } else { filters.clone() };
        let passes: Vec<&dyn Filter> = filters.iter().map(TestFilter::get).collect();
        let by_row: Vec<RowByRow<&dyn Filter>> = slow_filters.iter().map(|f| RowByRow(f.get())).collect();
        let request = Request::new(256, 16).required_taints(TaintSet(required));
        let (mut a, mut b) = (Box::new(Selector::<512>::with_entropy(entropy)), Box::new(Selector::<512>::with_entropy(entropy)));
        let by_position = Policy::new(&passes[..], (), RandomPicker).unwrap().with_seed(seed);
        let by_position_slow = Policy::new(&by_row[..], (), RandomPicker).unwrap().with_seed(seed);
        let least_cost = Policy::new(&passes[..], (), MinCostPicker).unwrap().with_seed(seed);
        let least_cost_slow = Policy::new(&by_row[..], (), MinCostPicker).unwrap().with_seed(seed);
        for _ in 0..2 {
            let x = by_position.select(&mut a, &request, &rows);
            let y = by_position_slow.select(&mut b, &request, &rows);
            prop_assert_eq!(x, y);
            let x = least_cost.select(&mut a, &request, &rows);
            let y = least_cost_slow.select(&mut b, &request, &rows);
            prop_assert_eq!(x, y);
        }
    }
}

#[test]
fn a_failing_filter_reports_the_row_by_row_error() {
    // Worker 3's row is rejected by the first filter, worker 1's fails the second: asked row
    // by row, the selection fails on worker 1 (row 1) before it reaches row 3; a pass per filter
    // would have failed nowhere else, and the error names the second filter.
    let rows: Vec<Row> = (0..4)
        .map(|w| Row::new(WorkerKey::new(w, 0)).with_taints(TaintSet(u64::from(w != 3))))
        .collect();
    let filters = [
        TestFilter::Builtin(BuiltinFilter::RequireTaints(RequireTaints(TaintSet(1)))),
        TestFilter::Fails(FailsOn(1)),
    ];
    let filters: Vec<&dyn Filter> = filters.iter().map(TestFilter::get).collect();
    let policy = Policy::new(
        &filters[..],
        (LeastLoaded {
            metric: LoadMetric::ActiveRequests,
        },),
        DefaultPicker::default(),
    )
    .unwrap();
    let error = policy
        .select(&mut Selector::<8>::new(), &Request::new(64, 16), &rows)
        .unwrap_err();
    assert_eq!(
        error,
        SelectError::FilterFailed {
            filter: 1,
            error: ComponentError { code: 7 }
        }
    );
}

#[test]
fn a_row_over_a_limit_is_left_out_at_the_least_cost() {
    // Worker 0 has the least cost for both scorers (the default cost reads no active-request
    // count, least loaded here reads prefill tokens) but more active requests than the limit.
    // Both scorers' passes apply the filters' rule; the row must be left out where a picker
    // of the least cost passes over rows in place (a NaN beside its mark), not only moved out
    // of the front.
    // The property test's fleets rarely give an overloaded row the least cost.
    let rows: Vec<Row> = (0..6u64)
        .map(|w| {
            Row::new(WorkerKey::new(w, 0)).with_load(Load {
                available: true,
                active_prefill_tokens: 10 * w,
                active_decode_blocks: 10 + w,
                active_requests: if w == 0 { 5 } else { 0 },
            })
        })
        .collect();
    let limits = [OverloadLimits {
        max_requests: Some(2),
        ..OverloadLimits::default()
    }];
    let filters: Vec<&dyn Filter> = limits.iter().map(|f| f as &dyn Filter).collect();
    let least = LeastLoaded {
        metric: LoadMetric::PrefillTokens,
    };
    let scorers: [&dyn Scorer; 2] = [&DefaultCost::default(), &least];
    let request = Request::new(256, 16);
    for scorer in scorers {
        let default_picker = Policy::new(&filters[..], (scorer,), DefaultPicker::default());
        let picked = default_picker
            .unwrap()
            .select(&mut Selector::<8>::new(), &request, &rows);
        assert_eq!(picked.unwrap().worker.worker_id, 1);
        let least_cost = Policy::new(&filters[..], (scorer,), MinCostPicker).unwrap();
        let picked = least_cost.select(&mut Selector::<8>::new(), &request, &rows);
        assert_eq!(picked.unwrap().worker.worker_id, 1);
    }
}

#[test]
fn odd_rows_of_a_tidy_fleet_are_left_out_once_by_their_own_flags() {
    // A fleet of 32 rows with load and cache entries, at most at the limits (some exactly at
    // each), but for two odd rows: row 5 has no cache entry and more active requests than the
    // limit; row 9 has no load projection but stale counters above every limit. The default cost's pass reads a tidy fleet
    // through the first rows' flags and then takes its odd rows again by their own: row 5 is
    // left out once, not twice, and row 9, whose counters the first step read, is a candidate.
    let mut rows: Vec<Row> = (0..32u64)
        .map(|w| {
            Row::new(WorkerKey::new(w, 0))
                .with_cache(Cache {
                    device_blocks: u32::try_from(w % 3).unwrap(),
                    effective_blocks: (w % 3) as f64,
                    ..Cache::default()
                })
                .with_load(Load {
                    available: true,
                    active_prefill_tokens: 16 * (w % 7),
                    active_decode_blocks: 4 + w % 5,
                    active_requests: w % 3,
                })
        })
        .collect();
    rows[5] = Row::new(WorkerKey::new(5, 0)).with_load(Load {
        available: true,
        active_prefill_tokens: 0,
        active_decode_blocks: 1,
        active_requests: 9,
    });
    rows[9] = Row::new(WorkerKey::new(9, 0));
    rows[9].active_requests = 9;
    rows[9].active_decode_blocks = 100;
    rows[9].active_prefill_tokens = 1000;
    let limits = [TestFilter::Builtin(BuiltinFilter::OverloadLimits(
        OverloadLimits {
            max_requests: Some(2),
            max_active_blocks: Some(8),
            max_prefill_tokens: Some(96),
        },
    ))];
    let passes: Vec<&dyn Filter> = limits.iter().map(TestFilter::get).collect();
    let by_row: Vec<RowByRow<&dyn Filter>> = passes.iter().copied().map(RowByRow).collect();
    let scorer = (DefaultCost::default(),);
    let request = Request::new(256, 16);
    let default_picker = Policy::new(&passes[..], scorer, DefaultPicker::default()).unwrap();
    let least_cost = Policy::new(&passes[..], scorer, MinCostPicker).unwrap();
    let check = |rows: &[Row]| {
        for seed in [1, 2, 3] {
            let fast = Policy::new(&passes[..], scorer, RandomPicker).unwrap();
            let slow = Policy::new(&by_row[..], scorer, RandomPicker).unwrap();
            let x = fast
                .with_seed(Some(seed))
                .select(&mut Selector::<32>::new(), &request, rows);
            let y = slow
                .with_seed(Some(seed))
                .select(&mut Selector::<32>::new(), &request, rows);
            assert_eq!(x, y);
            assert_eq!(x.unwrap().candidates, 31);
        }
        for picked in [
            default_picker.select(&mut Selector::<32>::new(), &request, rows),
            least_cost.select(&mut Selector::<32>::new(), &request, rows),
        ] {
            let picked = picked.unwrap();
            assert_eq!((picked.candidates, picked.worker.worker_id), (31, 9));
        }
    };
    check(&rows);
    // The same rows with every other one's cache entry gone: no longer tidy, the pass reads
    // each row through its own flags.
    for row in rows.iter_mut().step_by(2) {
        row.flags = RowFlags(row.flags.0 & !RowFlags::HAS_CACHE.0);
    }
    check(&rows);
}

#[test]
fn counters_and_limits_at_2_52_and_beyond_are_compared_exactly() {
    // Passes compare the limits as `f64`, exact below 2^52: a limit at 2^52 or more, and a
    // row's counter there, must still give the `u64` comparison's answer. Row 0 is one request
    // over the limit of 2^52, row 1 exactly at it, row 2 at `u64::MAX`; the others are light.
    const LIMIT: u64 = 1 << 52;
    let rows: Vec<Row> = (0..8u64)
        .map(|w| {
            let requests = match w {
                0 => LIMIT + 1,
                1 => LIMIT,
                2 => u64::MAX,
                _ => w,
            };
            Row::new(WorkerKey::new(w, 0)).with_load(Load {
                available: true,
                active_prefill_tokens: 8 - w,
                active_decode_blocks: 1,
                active_requests: requests,
            })
        })
        .collect();
    let least = LeastLoaded {
        metric: LoadMetric::PrefillTokens,
    };
    let default = DefaultCost::default();
    let request = Request::new(256, 16);
    for (limit, candidates) in [(LIMIT, 6), (LIMIT - 1, 5), (u64::MAX - 1, 7)] {
        let limits = [TestFilter::Builtin(BuiltinFilter::OverloadLimits(
            OverloadLimits {
                max_requests: Some(limit),
                ..OverloadLimits::default()
            },
        ))];
        let passes: Vec<&dyn Filter> = limits.iter().map(TestFilter::get).collect();
        let by_row: Vec<RowByRow<&dyn Filter>> = passes.iter().copied().map(RowByRow).collect();
        for scorer in [&least as &dyn Scorer, &default] {
            for seed in [1, 2] {
                let fast = Policy::new(&passes[..], (scorer,), RandomPicker).unwrap();
                let slow = Policy::new(&by_row[..], (scorer,), RandomPicker).unwrap();
                let mut selector = Selector::<8>::new();
                let x = fast
                    .with_seed(Some(seed))
                    .select(&mut selector, &request, &rows);
                let y =
                    slow.with_seed(Some(seed))
                        .select(&mut Selector::<8>::new(), &request, &rows);
                assert_eq!(x, y);
                assert_eq!(x.unwrap().candidates, candidates);
            }
        }
        let unscored = Policy::new(&passes[..], (), RandomPicker).unwrap();
        let picked = unscored.select(&mut Selector::<8>::new(), &request, &rows);
        assert_eq!(picked.unwrap().candidates, candidates);
    }
}
