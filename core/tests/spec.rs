//! The contract of `spec/default-policy.md`: every worked number of section 5, the seeded
//! sequences of section 4, and every behaviour section 6 lists.

use std::cell::{Cell, RefCell};

use libroute_core::*;

fn selector() -> Box<Selector<64>> {
    Box::new(Selector::new())
}

fn policy(cost: DefaultCost) -> DefaultPolicy {
    Policy::new((), (cost,), DefaultPicker::default()).unwrap()
}

fn cache(dev: u32, e_blocks: f64, e_tokens: u64) -> Cache {
    Cache {
        device_blocks: dev,
        effective_blocks: e_blocks,
        effective_tokens: e_tokens,
        ..Cache::default()
    }
}

fn load(apt: u64, dcb: u64, nreq: u64) -> Load {
    Load {
        available: true,
        active_prefill_tokens: apt,
        active_decode_blocks: dcb,
        active_requests: nreq,
    }
}

fn w(id: u64) -> WorkerKey {
    WorkerKey::new(id, 0)
}

/// The cost of each row under `policy`, via single-row selections where the candidate set
/// does not matter, or the selection's own cost.
fn cost_of<F: Filters, S: Scorers, P: Picker>(
    p: &Policy<F, S, P>,
    req: &Request<'_>,
    row: Row,
) -> f64 {
    p.select(&mut selector(), req, &[row]).unwrap().cost
}

/// Costs of all rows scored together (request-wide values such as `min_apt` see them all),
/// through a probe picker that records them.
fn costs_together(cost: DefaultCost, req: &Request<'_>, rows: &[Row]) -> Vec<f64> {
    struct Record(RefCell<Vec<(usize, f64)>>);
    impl Picker for Record {
        fn inputs(&self, _: Leg) -> WorkerInputs {
            WorkerInputs::NONE
        }
        fn pick(
            &self,
            input: &PickInput<'_>,
            _: &mut [f64],
            _: &mut dyn RandomSource,
        ) -> Result<Pick, ComponentError> {
            let mut seen = self.0.borrow_mut();
            for (k, c) in input.costs.iter().enumerate() {
                seen.push((input.candidates.row_index(k), *c));
            }
            Ok(Pick {
                index: 0,
                reason: PickReason::Custom,
            })
        }
    }
    let record = Record(RefCell::new(Vec::new()));
    let p = Policy::new((), (cost,), &record).unwrap();
    p.select(&mut selector(), req, rows).unwrap();
    let mut seen = record.0.into_inner();
    seen.sort_by_key(|(i, _)| *i);
    seen.into_iter().map(|(_, c)| c).collect()
}

#[test]
fn worked_1_prefill_scale_applies_after_credit() {
    let p = policy(DefaultCost {
        prefill_load_scale: 2.0,
        ..DefaultCost::default()
    });
    let row = Row::new(w(0))
        .with_cache(cache(6, 6.0, 96))
        .with_load(load(16, 2 + 3, 0));
    let req = Request::new(64, 16)
        .role(Role::Prefill)
        .has_tier_matches(true);
    assert_eq!(cost_of(&p, &req, row), 7.0);
    assert_eq!(cost_of(&p, &req.track_prefill_tokens(false), row), 5.0);
}

#[test]
fn worked_2_empty_prompt_routes_by_load() {
    let row = Row::new(w(0)).with_load(load(0, 100, 4));
    let req = Request::new(0, 16);
    assert_eq!(req.request_blocks(), 1);
    assert_eq!(cost_of(&policy(DefaultCost::default()), &req, row), 100.0);
    let weighted = policy(DefaultCost {
        decode_active_request_weight: 32.0,
        ..DefaultCost::default()
    });
    assert_eq!(cost_of(&weighted, &req, row), 228.0);
    // And it picks the least loaded worker.
    let rows = [
        Row::new(w(1)).with_load(load(0, 100, 4)),
        Row::new(w(2)).with_load(load(0, 50, 4)),
    ];
    let pick = policy(DefaultCost::default())
        .select(&mut selector(), &req, &rows)
        .unwrap();
    assert_eq!(pick.worker, w(2));
}

#[test]
fn worked_3_decode_label_subtracts_credit_from_decode_blocks() {
    let p = policy(DefaultCost::default());
    let row = Row::new(w(0))
        .with_cache(cache(3, 3.0, 48))
        .with_load(load(0, 10, 0));
    for req in [
        Request::new(64, 16).role(Role::Aggregated),
        Request::new(64, 16).role(Role::Encode),
        Request::new(64, 16)
            .role(Role::Decode)
            .conditional_disagg(true),
    ] {
        let req = req.track_prefill_tokens(false).has_tier_matches(true);
        assert_eq!(cost_of(&p, &req, row), 7.0, "{:?}", req.leg());
    }
    // Plain decode (no conditional disaggregation) drops the credit: load only.
    let plain = Request::new(64, 16)
        .role(Role::Decode)
        .track_prefill_tokens(false)
        .has_tier_matches(true);
    assert_eq!(cost_of(&p, &plain, row), 10.0);
    assert!(!p.inputs(plain.leg()).contains(WorkerInputs::CACHE));
}

#[test]
fn worked_4_shared_cache_hits_beyond_device() {
    let ranges = [BlockRange::new(0, 4)];
    let req = Request::new(4, 1)
        .role(Role::Prefill)
        .has_tier_matches(true)
        .shared_hits(SharedHits::new(&ranges).unwrap());
    let rows = [Row::new(w(0)).with_cache(cache(2, 2.0, 2)), Row::new(w(1))];
    let costs = costs_together(
        DefaultCost {
            shared_cache_multiplier: 0.5,
            ..DefaultCost::default()
        },
        &req,
        &rows,
    );
    assert_eq!(costs, [1.0, 2.0]);
}

#[test]
fn worked_5_credit_decay_hands_the_request_to_the_cold_worker() {
    let req = Request::new(64, 16)
        .role(Role::Prefill)
        .has_tier_matches(true);
    let rows = [
        Row::new(w(0))
            .with_cache(cache(4, 4.0, 64))
            .with_load(load(48, 0, 0)),
        Row::new(w(1)),
    ];
    assert_eq!(
        costs_together(DefaultCost::default(), &req, &rows),
        [3.0, 4.0]
    );
    let decayed = costs_together(
        DefaultCost {
            overlap_score_credit_decay: 1.0,
            ..DefaultCost::default()
        },
        &req,
        &rows,
    );
    assert_eq!(decayed[0], 7.0 - 4.0 / 1.75);
    assert!((decayed[0] - 4.714).abs() < 1e-3);
    assert_eq!(decayed[1], 4.0);
    let p = policy(DefaultCost {
        overlap_score_credit_decay: 1.0,
        ..DefaultCost::default()
    });
    assert_eq!(p.select(&mut selector(), &req, &rows).unwrap().worker, w(1));
}

#[test]
fn worked_6_credit_above_one_keeps_the_warm_worker() {
    let req = Request::new(128, 16)
        .role(Role::Prefill)
        .has_tier_matches(true);
    let rows = [
        Row::new(w(0))
            .with_cache(cache(4, 4.0, 64))
            .with_load(load(0, 5, 0)),
        Row::new(w(1)),
    ];
    assert_eq!(
        costs_together(DefaultCost::default(), &req, &rows),
        [9.0, 8.0]
    );
    let strong = DefaultCost {
        overlap_score_credit: 1.5,
        ..DefaultCost::default()
    };
    assert_eq!(costs_together(strong, &req, &rows), [7.0, 8.0]);
    assert_eq!(
        policy(strong)
            .select(&mut selector(), &req, &rows)
            .unwrap()
            .worker,
        w(0)
    );
}

#[test]
fn worked_7_preferred_taint_multiplier() {
    let gpu = Taint::new(5).unwrap();
    for (weight, expected) in [(0.85, 0.501_040), (-0.25, 1.277_517)] {
        let prefs = [PreferredTaint { taint: gpu, weight }];
        let req = Request::new(16, 16).preferred_taints(&prefs);
        let row = Row::new(w(0))
            .with_taints(TaintSet::EMPTY.with(gpu))
            .with_load(load(0, 0, 0));
        // Base cost = 1 block of prefill; the multiplier scales it.
        let cost = cost_of(&policy(DefaultCost::default()), &req, row);
        assert!((cost - expected).abs() < 5e-7, "weight {weight}: {cost}");
        assert_eq!(cost, libm_like_multiplier(weight));
    }
}

fn libm_like_multiplier(weight: f64) -> f64 {
    (-(weight.tanh())).exp()
}

#[test]
fn worked_8_shared_hits_against_a_cold_worker() {
    let ranges = [BlockRange::new(0, 4)];
    let hits = SharedHits::new(&ranges).unwrap();
    let rows = [
        Row::new(w(0))
            .with_cache(cache(3, 3.0, 48))
            .with_load(load(0, 2, 0)),
        Row::new(w(1)),
    ];
    let req = Request::new(64, 16)
        .role(Role::Prefill)
        .has_tier_matches(true)
        .shared_hits(hits);
    assert_eq!(
        costs_together(DefaultCost::default(), &req, &rows),
        [3.0, 4.0]
    );
    let half = DefaultCost {
        shared_cache_multiplier: 0.5,
        ..DefaultCost::default()
    };
    assert_eq!(costs_together(half, &req, &rows), [2.5, 2.0]);
}

#[test]
fn device_falls_back_to_the_estimate_without_tier_matches() {
    // Approximate mode: no tier maps, only the estimate.
    let req = Request::new(64, 16).role(Role::Prefill);
    let row = Row::new(w(0)).with_cache(Cache {
        device_blocks: 0,
        effective_blocks: 2.5,
        effective_tokens: 40,
        ..Cache::default()
    });
    assert_eq!(
        cost_of(&policy(DefaultCost::default()), &req, row),
        4.0 - 2.5
    );
}

fn tied(ids: &[u64]) -> Vec<Row> {
    ids.iter().map(|&id| Row::new(w(id))).collect()
}

#[test]
fn seed_42_sequences_match_dynamo_and_ignore_row_order() {
    let expected = [
        (
            0.0,
            [
                10, 30, 10, 10, 30, 20, 10, 10, 10, 20, 10, 20, 30, 10, 20, 20,
            ],
        ),
        (
            0.7,
            [
                30, 20, 30, 10, 20, 20, 30, 20, 30, 10, 10, 30, 30, 20, 30, 30,
            ],
        ),
    ];
    for (temperature, sequence) in expected {
        let knobs = DefaultKnobs {
            temperature,
            seed: Some(42),
            ..DefaultKnobs::default()
        };
        let p = knobs.build().unwrap();
        let req = Request::new(16, 16);
        let orders = [
            tied(&[30, 10, 20]),
            tied(&[20, 30, 10]),
            tied(&[10, 20, 30]),
        ];
        let runs: Vec<Vec<u64>> = orders
            .iter()
            .map(|rows| {
                let mut s = selector();
                (0..64)
                    .map(|_| p.select(&mut s, &req, rows).unwrap().worker.worker_id)
                    .collect()
            })
            .collect();
        assert_eq!(runs[0][..16], sequence, "T = {temperature}");
        assert_eq!(runs[0], runs[1]);
        assert_eq!(runs[0], runs[2]);
    }
}

#[test]
fn a_pin_does_not_advance_the_seeded_stream() {
    let p = DefaultKnobs {
        seed: Some(42),
        ..DefaultKnobs::default()
    }
    .build()
    .unwrap();
    let rows = tied(&[10, 20, 30]);
    let free = Request::new(16, 16);
    let pinned = free.pin(w(20));
    let mut plain = selector();
    let mut mixed = selector();
    for i in 0..16 {
        let a = p.select(&mut plain, &free, &rows).unwrap().worker;
        if i % 3 == 0 {
            let pin = p.select(&mut mixed, &pinned, &rows).unwrap();
            assert_eq!(pin.worker, w(20));
            assert_eq!(pin.reason, PickReason::Pinned);
        }
        assert_eq!(p.select(&mut mixed, &free, &rows).unwrap().worker, a);
    }
}

#[test]
fn unseeded_ties_pick_only_minima_and_each_of_them() {
    let p = policy(DefaultCost::default());
    let rows = [
        Row::new(w(1)).with_load(load(0, 5, 0)),
        Row::new(w(2)).with_load(load(0, 3, 0)),
        Row::new(w(3)).with_load(load(0, 3, 0)),
        Row::new(w(4)).with_load(load(0, 9, 0)),
        Row::new(w(5)).with_load(load(0, 3, 0)),
    ];
    let req = Request::new(16, 16);
    let mut s = selector();
    let mut seen = [0u32; 6];
    for _ in 0..3000 {
        let pick = p.select(&mut s, &req, &rows).unwrap();
        assert_eq!(pick.reason, PickReason::MinCost { ties: 3 });
        seen[usize::try_from(pick.worker.worker_id).unwrap()] += 1;
    }
    assert_eq!([seen[1], seen[4]], [0, 0]);
    for id in [2, 3, 5] {
        assert!(
            (800..1200).contains(&seen[id]),
            "worker {id} picked {} of 3000",
            seen[id]
        );
    }
}

#[test]
fn request_wide_values_are_recomputed_per_request() {
    let p = policy(DefaultCost {
        overlap_score_credit_decay: 0.5,
        ..DefaultCost::default()
    });
    let rows = [
        Row::new(w(0))
            .with_cache(cache(3, 3.0, 48))
            .with_load(load(40, 2, 1)),
        Row::new(w(1))
            .with_cache(cache(1, 1.0, 16))
            .with_load(load(8, 1, 0)),
    ];
    let mut shared = selector();
    for bs in [8, 16, 32, 17, 3] {
        let req = Request::new(100, bs)
            .role(Role::Prefill)
            .has_tier_matches(true);
        let reused = p.select(&mut shared, &req, &rows).unwrap();
        let fresh = policy(DefaultCost {
            overlap_score_credit_decay: 0.5,
            ..DefaultCost::default()
        })
        .select(&mut selector(), &req, &rows)
        .unwrap();
        assert_eq!(reused, fresh, "block size {bs}");
        assert_eq!(reused.request_blocks, 100u64.div_ceil(u64::from(bs)));
    }
}

/// A component that records what its views expose, for the 8x8x8 mask test.
#[derive(Default)]
struct Probe {
    declared: WorkerInputs,
    saw: Cell<WorkerInputs>,
    rows_seen: RefCell<Vec<WorkerKey>>,
}

impl Probe {
    fn new(declared: WorkerInputs) -> Self {
        Self {
            declared,
            ..Self::default()
        }
    }
    fn note(&self, req: &RequestView<'_>, row: &RowView<'_>) {
        let mut saw = self.saw.get();
        if row.cache().is_some() && req.has_tier_matches().is_some() {
            saw |= WorkerInputs::CACHE;
        }
        if row.load().is_some() {
            saw |= WorkerInputs::LOAD;
        }
        if row.taints().is_some()
            && row.taint_multiplier().is_some()
            && req.preferred_taints().is_some()
        {
            saw |= WorkerInputs::PREFERRED_TAINT;
        }
        // Nothing undeclared may leak through any accessor.
        assert_eq!(
            row.cache().is_some(),
            self.declared.contains(WorkerInputs::CACHE)
        );
        assert_eq!(
            req.shared_hits().is_some(),
            self.declared.contains(WorkerInputs::CACHE)
        );
        assert_eq!(
            row.load().is_some(),
            self.declared.contains(WorkerInputs::LOAD)
        );
        assert_eq!(
            row.taints().is_some(),
            self.declared.contains(WorkerInputs::PREFERRED_TAINT)
        );
        self.saw.set(saw);
        self.rows_seen.borrow_mut().push(row.worker());
    }
}

impl Filter for Probe {
    fn inputs(&self, _: Leg) -> WorkerInputs {
        self.declared
    }
    fn check(&self, req: &RequestView<'_>, row: &RowView<'_>) -> Result<Verdict, ComponentError> {
        self.note(req, row);
        Ok(if row.worker().worker_id == 99 {
            Verdict::Reject
        } else {
            Verdict::Keep
        })
    }
}

impl Scorer for Probe {
    fn inputs(&self, _: Leg) -> WorkerInputs {
        self.declared
    }
    fn score(
        &self,
        req: &RequestView<'_>,
        rows: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        for (c, row) in costs.iter_mut().zip(rows.iter()) {
            self.note(req, &row);
            *c = row.worker().worker_id as f64;
        }
        Ok(())
    }
}

impl Picker for Probe {
    fn inputs(&self, _: Leg) -> WorkerInputs {
        self.declared
    }
    fn pick(
        &self,
        input: &PickInput<'_>,
        _: &mut [f64],
        _: &mut dyn RandomSource,
    ) -> Result<Pick, ComponentError> {
        for row in input.candidates.iter() {
            self.note(input.candidates.request(), &row);
        }
        Ok(Pick {
            index: 0,
            reason: PickReason::Custom,
        })
    }
}

#[test]
fn each_component_reads_only_its_declared_inputs_for_all_8x8x8_masks() {
    let t = Taint::new(1).unwrap();
    let prefs = [PreferredTaint {
        taint: t,
        weight: 0.5,
    }];
    let ranges = [BlockRange::new(0, 2)];
    let req = Request::new(32, 16)
        .has_tier_matches(true)
        .preferred_taints(&prefs)
        .shared_hits(SharedHits::new(&ranges).unwrap());
    let rows = [
        Row::new(w(1))
            .with_cache(cache(1, 1.0, 16))
            .with_load(load(1, 1, 1))
            .with_taints(TaintSet::EMPTY.with(t)),
        Row::new(w(99))
            .with_cache(cache(2, 2.0, 32))
            .with_load(load(2, 2, 2)),
        Row::new(w(3)).with_load(load(3, 3, 3)),
    ];
    let masks: Vec<WorkerInputs> = (0..8)
        .map(|b| WorkerInputs::from_bits(b).unwrap())
        .collect();
    for &fm in &masks {
        for &sm in &masks {
            for &pm in &masks {
                let (f, s, p) = (Probe::new(fm), Probe::new(sm), Probe::new(pm));
                let policy = Policy::new((&f,), (&s,), &p).unwrap();
                assert_eq!(policy.inputs(req.leg()), fm | sm | pm);
                let pick = policy.select(&mut selector(), &req, &rows).unwrap();
                assert_eq!(pick.candidates, 2);
                assert_eq!((f.saw.get(), s.saw.get(), p.saw.get()), (fm, sm, pm));
                // Rejected candidates never reach scorers or the picker.
                assert_eq!(*f.rows_seen.borrow(), [w(1), w(99), w(3)]);
                assert_eq!(*s.rows_seen.borrow(), [w(1), w(3)]);
                assert_eq!(*p.rows_seen.borrow(), [w(1), w(3)]);
            }
        }
    }
}

#[test]
fn the_default_policy_reports_its_union() {
    let p = policy(DefaultCost::default());
    let agg = Leg {
        role: Role::Aggregated,
        conditional_disagg: false,
    };
    assert_eq!(
        p.inputs(agg),
        WorkerInputs::CACHE | WorkerInputs::LOAD | WorkerInputs::PREFERRED_TAINT
    );
    let plain_decode = Leg {
        role: Role::Decode,
        conditional_disagg: false,
    };
    assert_eq!(
        p.inputs(plain_decode),
        WorkerInputs::LOAD | WorkerInputs::PREFERRED_TAINT
    );
    let no_credit = policy(DefaultCost {
        overlap_score_credit: 0.0,
        ..DefaultCost::default()
    });
    assert!(!no_credit.inputs(agg).contains(WorkerInputs::CACHE));
    // Without CACHE the policy is load-only: host, disk and shared credit drop too.
    let row = Row::new(w(0))
        .with_cache(Cache {
            host_blocks: 4,
            ..cache(2, 2.0, 32)
        })
        .with_load(load(0, 1, 0));
    let sel = no_credit
        .select(
            &mut selector(),
            &Request::new(64, 16).has_tier_matches(true),
            &[row],
        )
        .unwrap();
    assert_eq!(sel.cost, 4.0 + 1.0);
    assert_eq!(sel.cached_tokens, 0);
}

/// A scorer that writes `value` for rows whose worker id is in `ids`, and leaves others unwritten.
struct Partial {
    ids: Vec<u64>,
    value: f64,
}

impl Scorer for Partial {
    fn inputs(&self, _: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }
    fn score(
        &self,
        _: &RequestView<'_>,
        rows: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        for (c, row) in costs.iter_mut().zip(rows.iter()) {
            if self.ids.contains(&row.worker().worker_id) {
                *c = self.value;
            }
        }
        Ok(())
    }
}

#[test]
fn non_finite_and_unwritten_costs_are_rejected_naming_scorer_and_row() {
    let rows = tied(&[1, 2, 3]);
    let req = Request::new(16, 16);
    let mut s = selector();
    let good = Partial {
        ids: vec![1, 2, 3],
        value: 1.0,
    };
    for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let bad = Partial {
            ids: vec![3],
            value,
        };
        let p = Policy::new((), (&good, &bad), DefaultPicker::default()).unwrap();
        // Rows 0 and 1 are unwritten by scorer 1, so row 0 is reported first.
        assert_eq!(
            p.select(&mut s, &req, &rows),
            Err(SelectError::NonFiniteCost { scorer: 1, row: 0 })
        );
    }
    // A scorer that writes everything once, then nothing: the old costs are never reused.
    let p = Policy::new((), (&good,), DefaultPicker::default()).unwrap();
    p.select(&mut s, &req, &rows).unwrap();
    let silent = Partial {
        ids: vec![],
        value: 0.0,
    };
    let p = Policy::new((), (&silent,), DefaultPicker::default()).unwrap();
    assert_eq!(
        p.select(&mut s, &req, &rows),
        Err(SelectError::NonFiniteCost { scorer: 0, row: 0 })
    );
    // MAX + MAX overflows the total.
    let max = Partial {
        ids: vec![1, 2, 3],
        value: f64::MAX,
    };
    let p = Policy::new((), (&max, &max), DefaultPicker::default()).unwrap();
    assert_eq!(
        p.select(&mut s, &req, &rows),
        Err(SelectError::NonFiniteTotal { row: 0 })
    );
}

#[test]
fn a_scoring_error_books_nothing_and_a_retry_succeeds() {
    struct FailOnce(Cell<bool>);
    impl Scorer for FailOnce {
        fn inputs(&self, _: Leg) -> WorkerInputs {
            WorkerInputs::NONE
        }
        fn score(
            &self,
            _: &RequestView<'_>,
            _: &Candidates<'_>,
            costs: &mut [f64],
        ) -> Result<(), ComponentError> {
            if self.0.replace(false) {
                return Err(ComponentError { code: 7 });
            }
            costs.fill(1.0);
            Ok(())
        }
    }
    let scorer = FailOnce(Cell::new(true));
    let p = Policy::new((), (&scorer,), DefaultPicker::default())
        .unwrap()
        .with_seed(Some(42));
    let rows = tied(&[10, 20, 30]);
    let req = Request::new(16, 16);
    let mut s = selector();
    assert_eq!(
        p.select(&mut s, &req, &rows),
        Err(SelectError::ScorerFailed {
            scorer: 0,
            error: ComponentError { code: 7 }
        })
    );
    // The failed attempt drew nothing: the retry is the first pick of the seed-42 sequence.
    assert_eq!(p.select(&mut s, &req, &rows).unwrap().worker, w(10));
}

#[test]
fn overloaded_workers_are_skipped_and_all_overloaded_is_its_own_error() {
    let p = policy(DefaultCost::default());
    let req = Request::new(64, 16).has_tier_matches(true);
    let rows = [
        Row::new(w(0))
            .with_cache(cache(4, 4.0, 64))
            .overloaded(true),
        Row::new(w(1)),
    ];
    assert_eq!(p.select(&mut selector(), &req, &rows).unwrap().worker, w(1));
    let all = [rows[0], rows[1].overloaded(true)];
    assert_eq!(
        p.select(&mut selector(), &req, &all),
        Err(SelectError::AllOverloaded)
    );
}

#[test]
fn empty_sets_have_three_distinct_errors() {
    struct RejectAll;
    impl Filter for RejectAll {
        fn inputs(&self, _: Leg) -> WorkerInputs {
            WorkerInputs::NONE
        }
        fn check(&self, _: &RequestView<'_>, _: &RowView<'_>) -> Result<Verdict, ComponentError> {
            Ok(Verdict::Reject)
        }
    }
    let req = Request::new(16, 16);
    let p = Policy::new(
        (RejectAll,),
        (DefaultCost::default(),),
        DefaultPicker::default(),
    )
    .unwrap();
    assert_eq!(
        p.select(&mut selector(), &req, &[]),
        Err(SelectError::NoEndpoints)
    );
    assert_eq!(
        p.select(&mut selector(), &req, &tied(&[1, 2])),
        Err(SelectError::AllFiltered)
    );
    // Filtered and overloaded together: the filter removed some, so "all filtered".
    let mixed = [Row::new(w(1)).overloaded(true), Row::new(w(2))];
    assert_eq!(
        p.select(&mut selector(), &req, &mixed),
        Err(SelectError::AllFiltered)
    );
}

#[test]
fn required_taints_filter_and_return_no_endpoints_when_none_match() {
    let gpu = Taint::new(0).unwrap();
    let zone = Taint::new(9).unwrap();
    let p = policy(DefaultCost::default());
    let rows = [
        Row::new(w(1)).with_taints(TaintSet::EMPTY.with(zone)),
        Row::new(w(2))
            .with_taints(TaintSet::EMPTY.with(gpu).with(zone))
            .with_load(load(0, 50, 0)),
    ];
    let req = Request::new(16, 16).required_taints(TaintSet::EMPTY.with(gpu));
    let pick = p.select(&mut selector(), &req, &rows).unwrap();
    assert_eq!((pick.worker, pick.candidates), (w(2), 1));
    let none = Request::new(16, 16).required_taints(TaintSet::EMPTY.with(Taint::new(3).unwrap()));
    assert_eq!(
        p.select(&mut selector(), &none, &rows),
        Err(SelectError::NoEndpoints)
    );
}

#[test]
fn preferred_taints_attract_and_negative_weights_repel() {
    let fast = Taint::new(2).unwrap();
    let p = policy(DefaultCost::default());
    let rows = [
        Row::new(w(1)),
        Row::new(w(2)).with_taints(TaintSet::EMPTY.with(fast)),
    ];
    let attract = [PreferredTaint {
        taint: fast,
        weight: 1.0,
    }];
    let repel = [PreferredTaint {
        taint: fast,
        weight: -1.0,
    }];
    let req = Request::new(64, 16);
    assert_eq!(
        p.select(&mut selector(), &req.preferred_taints(&attract), &rows)
            .unwrap()
            .worker,
        w(2)
    );
    assert_eq!(
        p.select(&mut selector(), &req.preferred_taints(&repel), &rows)
            .unwrap()
            .worker,
        w(1)
    );
}

#[test]
fn pins_bypass_sampling_and_their_failures_are_distinct() {
    let gpu = Taint::new(0).unwrap();
    let p = DefaultKnobs {
        temperature: 1.0,
        ..DefaultKnobs::default()
    }
    .build()
    .unwrap();
    let rows = [
        Row::new(w(1)).with_taints(TaintSet::EMPTY.with(gpu)),
        Row::new(w(2))
            .with_taints(TaintSet::EMPTY.with(gpu))
            .overloaded(true),
        Row::new(w(3))
            .with_load(load(0, 1000, 0))
            .with_taints(TaintSet::EMPTY.with(gpu)),
        Row::new(w(4)),
    ];
    let req = Request::new(16, 16).required_taints(TaintSet::EMPTY.with(gpu));
    let pinned = p.select(&mut selector(), &req.pin(w(3)), &rows).unwrap();
    assert_eq!(
        (pinned.row, pinned.reason, pinned.cost, pinned.candidates),
        (2, PickReason::Pinned, 1001.0, 1)
    );
    assert_eq!(
        p.select(&mut selector(), &req.pin(w(7)), &rows),
        Err(SelectError::PinNotAllowed(w(7)))
    );
    assert_eq!(
        p.select(&mut selector(), &req.pin(w(2)), &rows),
        Err(SelectError::PinOverloaded(w(2)))
    );
    assert_eq!(
        p.select(&mut selector(), &req.pin(w(4)), &rows),
        Err(SelectError::PinIneligible(w(4)))
    );
}

#[test]
fn bad_input_is_an_error_value_naming_what_was_wrong() {
    let p = policy(DefaultCost::default());
    let mut small = Box::new(Selector::<2>::new());
    assert_eq!(
        p.select(&mut small, &Request::new(16, 16), &tied(&[1, 2, 3])),
        Err(SelectError::CapacityExceeded {
            rows: 3,
            capacity: 2
        })
    );
    assert_eq!(
        p.select(&mut selector(), &Request::new(16, 0), &tied(&[1])),
        Err(SelectError::InvalidRequest(RequestError::BlockSize))
    );
    let mut nan = Row::new(w(2)).with_cache(cache(1, 1.0, 16));
    nan.effective_blocks = f64::NAN;
    assert_eq!(
        p.select(
            &mut selector(),
            &Request::new(16, 16),
            &[Row::new(w(1)), nan]
        ),
        Err(SelectError::InvalidRow {
            row: 1,
            field: RowField::EffectiveBlocks
        })
    );
    let mut flags = Row::new(w(1));
    flags.flags = RowFlags(32);
    assert_eq!(
        p.select(&mut selector(), &Request::new(16, 16), &[flags]),
        Err(SelectError::InvalidRow {
            row: 0,
            field: RowField::Flags
        })
    );
    let prefs = [PreferredTaint {
        taint: Taint::new(1).unwrap(),
        weight: f64::NAN,
    }];
    assert_eq!(
        p.select(
            &mut selector(),
            &Request::new(16, 16).preferred_taints(&prefs),
            &tied(&[1])
        ),
        Err(SelectError::InvalidRequest(
            RequestError::PreferredTaintWeight { index: 0 }
        ))
    );
    let seeded = p.clone().with_seed(Some(1));
    assert_eq!(
        seeded.select(&mut selector(), &Request::new(16, 16), &tied(&[5, 1, 5])),
        Err(SelectError::DuplicateWorker {
            row: 2,
            worker: w(5)
        })
    );
    // A duplicate in otherwise canonical order (the one pass checks the order as it reads),
    // and two ranks of one worker, which are not duplicates.
    assert_eq!(
        seeded.select(&mut selector(), &Request::new(16, 16), &tied(&[1, 5, 5])),
        Err(SelectError::DuplicateWorker {
            row: 2,
            worker: w(5)
        })
    );
    let ranks = [
        Row::new(WorkerKey::new(5, 0)),
        Row::new(WorkerKey::new(5, 1)),
    ];
    assert!(
        seeded
            .select(&mut selector(), &Request::new(16, 16), &ranks)
            .is_ok()
    );
    assert!(
        SelectError::NonFiniteCost { scorer: 2, row: 9 }
            .to_string()
            .contains("scorer 2")
    );
}

#[test]
fn selection_reports_contributions_and_accounting() {
    let extra = Partial {
        ids: vec![1, 2],
        value: 0.5,
    };
    let p = Policy::new(
        (),
        (DefaultCost::default(), &extra),
        DefaultPicker::default(),
    )
    .unwrap();
    let rows = [
        Row::new(w(1))
            .with_cache(cache(2, 2.0, 32))
            .with_load(load(0, 1, 0)),
        Row::new(w(2)),
    ];
    let req = Request::new(100, 16).has_tier_matches(true);
    let sel = p.select(&mut selector(), &req, &rows).unwrap();
    // Worker 1: raw 0 + max(100, 32) = 100 tokens = 6.25 blocks, minus 2, plus 1 decode block.
    assert_eq!(sel.worker, w(1));
    assert_eq!(sel.contributions(), [5.25, 0.5]);
    assert_eq!(sel.cost, 5.75);
    assert_eq!(
        (sel.request_blocks, sel.cached_tokens, sel.candidates),
        (7, 32, 2)
    );
}

#[test]
fn config_rejects_unknown_keys_and_names_invalid_knobs() {
    let parse = |s: &str| serde_json::from_str::<DefaultPolicyConfig>(s);
    let err = parse(r#"{"overlap_score_credit": 1, "bogus": 2}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `bogus`"), "{err}");
    for (json, knob, message) in [
        (
            r#"{"overlap_score_credit": -1}"#,
            Knob::OverlapScoreCredit,
            "invalid overlap_score_credit = -1: must be >= 0",
        ),
        (
            r#"{"overlap_score_credit_decay": -0.5}"#,
            Knob::OverlapScoreCreditDecay,
            "must be >= 0",
        ),
        (
            r#"{"prefill_load_scale": -2}"#,
            Knob::PrefillLoadScale,
            "must be >= 0",
        ),
        (
            r#"{"decode_active_request_weight": -1}"#,
            Knob::DecodeActiveRequestWeight,
            "must be >= 0",
        ),
        (
            r#"{"host_cache_hit_weight": 1.5}"#,
            Knob::HostCacheHitWeight,
            "must be within [0, 1]",
        ),
        (
            r#"{"disk_cache_hit_weight": 2}"#,
            Knob::DiskCacheHitWeight,
            "must be within [0, 1]",
        ),
        (
            r#"{"shared_cache_multiplier": -0.1}"#,
            Knob::SharedCacheMultiplier,
            "must be >= 0",
        ),
        (r#"{"temperature": -1}"#, Knob::Temperature, "must be >= 0"),
        (
            r#"{"overlap_score_weight": -1}"#,
            Knob::OverlapScoreWeight,
            "must be >= 0",
        ),
        (
            r#"{"overlap_score_weight": 2, "prefill_load_scale": 1}"#,
            Knob::OverlapScoreWeight,
            "conflicts with prefill_load_scale",
        ),
        (
            r#"{"overlap_score_weight": 0, "overlap_score_credit": 1}"#,
            Knob::OverlapScoreWeight,
            "conflicts with overlap_score_credit",
        ),
    ] {
        let err = parse(json).unwrap().knobs().unwrap_err();
        assert_eq!(err.knob, knob, "{json}");
        assert!(err.to_string().contains(message), "{json}: {err}");
        assert!(err.to_string().contains(knob.name()), "{json}: {err}");
    }
    // Non-finite values from the Rust API are named too; +inf temperature is allowed.
    let inf = DefaultKnobs {
        cost: DefaultCost {
            prefill_load_scale: f64::INFINITY,
            ..DefaultCost::default()
        },
        ..DefaultKnobs::default()
    };
    assert_eq!(inf.validate().unwrap_err().problem, Problem::NotFinite);
    assert!(
        DefaultKnobs {
            temperature: f64::INFINITY,
            ..DefaultKnobs::default()
        }
        .validate()
        .is_ok()
    );
    assert_eq!(
        DefaultKnobs {
            temperature: f64::NAN,
            ..DefaultKnobs::default()
        }
        .validate()
        .unwrap_err()
        .knob,
        Knob::Temperature
    );
    assert!(parse(r#"{"seed": -1}"#).is_err());
}

#[test]
fn legacy_overlap_score_weight_sets_the_scale_and_zero_drops_the_credit() {
    let parse = |s: &str| {
        serde_json::from_str::<DefaultPolicyConfig>(s)
            .unwrap()
            .knobs()
            .unwrap()
    };
    let k = parse(r#"{"overlap_score_weight": 2.5}"#);
    assert_eq!(
        (k.cost.prefill_load_scale, k.cost.overlap_score_credit),
        (2.5, 1.0)
    );
    let k = parse(r#"{"overlap_score_weight": 0}"#);
    assert_eq!(
        (k.cost.prefill_load_scale, k.cost.overlap_score_credit),
        (0.0, 0.0)
    );
    let all = parse(
        r#"{"overlap_score_credit": 1.5, "overlap_score_credit_decay": 0.5, "prefill_load_scale": 2,
            "decode_active_request_weight": 3, "host_cache_hit_weight": 0.5, "disk_cache_hit_weight": 0.1,
            "shared_cache_multiplier": 0.2, "temperature": 0.7, "seed": 18446744073709551615}"#,
    );
    assert_eq!(all.seed, Some(u64::MAX));
    assert_eq!(all.cost.disk_cache_hit_weight, 0.1);
    // Round trip: serialize the config back and parse it again.
    let config: DefaultPolicyConfig =
        serde_json::from_str(r#"{"temperature": 0.7, "seed": 3}"#).unwrap();
    let back: DefaultPolicyConfig =
        serde_json::from_str(&serde_json::to_string(&config).unwrap()).unwrap();
    assert_eq!(config, back);
}
