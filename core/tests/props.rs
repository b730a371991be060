//! Property tests: invariants of selection over generated fleets, requests and knobs.

use std::cell::RefCell;

use libroute_core::*;
use proptest::prelude::*;

/// Wraps a picker and records the costs it was shown and what it picked.
struct Spy<P> {
    inner: P,
    seen: RefCell<Vec<(Vec<f64>, usize)>>,
}

impl<P: Picker> Picker for Spy<P> {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        self.inner.inputs(leg)
    }
    fn pick(
        &self,
        input: &PickInput<'_>,
        work: &mut [f64],
        rng: &mut dyn RandomSource,
    ) -> Result<Pick, ComponentError> {
        let pick = self.inner.pick(input, work, rng)?;
        self.seen
            .borrow_mut()
            .push((input.costs.to_vec(), pick.index));
        Ok(pick)
    }
}

prop_compose! {
    fn valid_row(id: u64)(dev in 0u32..64, host in 0u32..8, disk in 0u32..8, cached in any::<bool>(),
                        loaded in any::<bool>(), apt in 0u64..5000, dcb in 0u64..500, nreq in 0u64..40,
                        taints in 0u64..8, overloaded in proptest::bool::weighted(0.1)) -> Row {
        let mut row = Row::new(WorkerKey::new(id / 2, u32::try_from(id % 2).unwrap())).with_taints(TaintSet(taints));
        if cached {
            row = row.with_cache(Cache::from_tiers(dev, host, disk, 0.75, 0.25, 16));
        }
        if loaded {
            row = row.with_load(Load { available: true, active_prefill_tokens: apt, active_decode_blocks: dcb, active_requests: nreq });
        }
        row.overloaded(overloaded)
    }
}

fn fleet(max: usize) -> impl Strategy<Value = Vec<Row>> {
    (1..max).prop_flat_map(|n| (0..n as u64).map(valid_row).collect::<Vec<_>>())
}

fn knobs() -> impl Strategy<Value = DefaultCost> {
    (
        0.0..3.0f64,
        0.0..2.0f64,
        0.0..3.0f64,
        0.0..40.0f64,
        0.0..=1.0f64,
        0.0..=1.0f64,
        0.0..=1.0f64,
    )
        .prop_map(|(c, d, s, r, h, k, m)| DefaultCost {
            overlap_score_credit: c,
            overlap_score_credit_decay: d,
            prefill_load_scale: s,
            decode_active_request_weight: r,
            host_cache_hit_weight: h,
            disk_cache_hit_weight: k,
            shared_cache_multiplier: m,
        })
}

fn role() -> impl Strategy<Value = Role> {
    prop::sample::select(Role::ALL.to_vec())
}

proptest! {
    #[test]
    fn at_zero_temperature_the_pick_has_the_minimum_cost(rows in fleet(40), cost in knobs(), role in role(),
                                                        prompt in 0u64..5000, track in any::<bool>(),
                                                        seed in proptest::option::of(any::<u64>())) {
        let spy = Spy { inner: DefaultPicker::default(), seen: RefCell::new(Vec::new()) };
        let policy = Policy::new((), (cost,), &spy).unwrap().with_seed(seed);
        let request = Request::new(prompt, 16).role(role).track_prefill_tokens(track).has_tier_matches(true);
        let mut selector = Box::new(Selector::<64>::new());
        match policy.select(&mut selector, &request, &rows) {
            Ok(selection) => {
                let seen = spy.seen.borrow();
                let (costs, index) = &seen[0];
                let min = costs.iter().copied().fold(f64::INFINITY, |a, b| if b < a { b } else { a });
                prop_assert_eq!(costs[*index], min);
                prop_assert_eq!(selection.cost, min);
                prop_assert!(!rows[selection.row].is_overloaded());
                let ties = costs.iter().filter(|c| **c == min).count();
                prop_assert_eq!(selection.reason, PickReason::MinCost { ties: u32::try_from(ties).unwrap() });
            }
            Err(e) => prop_assert_eq!(e, SelectError::AllOverloaded, "only overload can empty a valid fleet"),
        }
    }

    #[test]
    fn seeded_picks_do_not_depend_on_row_order(rows in fleet(24), cost in knobs(), seed in any::<u64>(),
                                              temperature in prop::sample::select(vec![0.0, 0.3, 0.7, 2.0]),
                                              shuffle_seed in any::<u64>()) {
        let knobs = DefaultKnobs { cost, temperature, seed: Some(seed) };
        let policy = knobs.build().unwrap();
        let mut shuffled = rows.clone();
        fastrand::Rng::with_seed(shuffle_seed).shuffle(&mut shuffled);
        let request = Request::new(300, 16).has_tier_matches(true);
        let (mut a, mut b) = (Box::new(Selector::<32>::new()), Box::new(Selector::<32>::new()));
        for _ in 0..8 {
            let x = policy.select(&mut a, &request, &rows).map(|s| (s.worker, s.cost.to_bits()));
            let y = policy.select(&mut b, &request, &shuffled).map(|s| (s.worker, s.cost.to_bits()));
            prop_assert_eq!(x, y);
        }
    }

    #[test]
    fn every_tied_row_is_picked_over_many_unseeded_draws(n in 2usize..7, entropy in any::<u64>(), load in 0u64..100) {
        let policy = DefaultKnobs::default().build().unwrap();
        let rows: Vec<Row> = (0..n as u64)
            .map(|id| Row::new(WorkerKey::new(id, 0)).with_load(Load { available: true, active_decode_blocks: load, ..Load::default() }))
            .collect();
        let mut selector = Box::new(Selector::<8>::with_entropy(entropy));
        let mut seen = vec![false; n];
        for _ in 0..600 {
            seen[policy.select(&mut selector, &Request::new(64, 16), &rows).unwrap().row] = true;
        }
        prop_assert!(seen.iter().all(|s| *s), "{:?}", seen);
    }

    #[test]
    fn is_valid_agrees_with_check(flags in any::<u32>(), bits in any::<u64>(), special in 0u8..6) {
        let estimate = match special {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            3 => -0.0,
            4 => f64::MAX,
            _ => f64::from_bits(bits),
        };
        // The same special values for one of the speed fields, chosen by the flag bits.
        let mut row = Row { flags: RowFlags(flags % 32), effective_blocks: estimate, ..Row::new(WorkerKey::new(1, 0)) };
        match (flags >> 5) % 4 {
            0 => row.base_ms = estimate,
            1 => row.ms_per_prefill_token = estimate,
            2 => row.ms_per_active_request = estimate,
            _ => {}
        }
        prop_assert_eq!(row.is_valid(), row.check().is_ok(), "{:?}", row);
    }

    #[test]
    fn no_input_makes_the_selector_panic(raw in prop::collection::vec(any::<[u64; 10]>(), 0..40),
                                        costs in prop::collection::vec(any::<f64>(), 7),
                                        temperature in any::<f64>(), prompt in any::<u64>(), block_size in any::<u32>(),
                                        role in role(), flags in any::<[bool; 3]>(), pin in any::<Option<(u64, u32)>>(),
                                        required in any::<u64>(), weights in prop::collection::vec((0u32..64, any::<f64>()), 0..4),
                                        ranges in prop::collection::vec((any::<u64>(), any::<u64>()), 0..4),
                                        seed in any::<Option<u64>>()) {
        // Rows from raw bits: any flag bits, NaN or negative estimates, huge counters.
        let rows: Vec<Row> = raw.iter().map(|r| {
            #[allow(clippy::cast_possible_truncation)]
            let narrow = |x: u64| x as u32;
            Row {
                worker: WorkerKey::new(r[0] % 16, narrow(r[1] % 3)),
                taints: TaintSet(r[2]),
                flags: RowFlags(narrow(r[3]) % 17),
                device_blocks: narrow(r[4]),
                host_blocks: narrow(r[4] >> 32),
                disk_blocks: narrow(r[5]),
                effective_blocks: f64::from_bits(r[6]),
                effective_tokens: r[7],
                active_prefill_tokens: r[8],
                active_decode_blocks: r[9],
                active_requests: r[5] >> 32,
                base_ms: f64::from_bits(r[1]),
                ms_per_prefill_token: f64::from_bits(r[2]),
                ms_per_active_request: f64::from_bits(r[3]),
            }
        }).collect();
        // Knobs straight into the scorer, bypassing validation: bad ones must fail as values.
        let cost = DefaultCost {
            overlap_score_credit: costs[0], overlap_score_credit_decay: costs[1], prefill_load_scale: costs[2],
            decode_active_request_weight: costs[3], host_cache_hit_weight: costs[4], disk_cache_hit_weight: costs[5],
            shared_cache_multiplier: costs[6],
        };
        let policy = Policy::new((), (cost,), DefaultPicker { temperature }).unwrap().with_seed(seed);
        let prefs: Vec<PreferredTaint> = weights.iter().map(|&(t, weight)| PreferredTaint { taint: Taint::new(t).unwrap(), weight }).collect();
        let ranges: Vec<BlockRange> = ranges.iter().map(|&(a, b)| BlockRange::new(a, b)).collect();
        let mut request = Request::new(prompt, block_size)
            .role(role)
            .track_prefill_tokens(flags[0])
            .conditional_disagg(flags[1])
            .has_tier_matches(flags[2])
            .required_taints(TaintSet(required & 0xF))
            .preferred_taints(&prefs);
        if let Ok(hits) = SharedHits::new(&ranges) {
            request = request.shared_hits(hits);
        }
        if let Some((id, rank)) = pin {
            request = request.pin(WorkerKey::new(id % 16, rank % 3));
        }
        let mut selector = Box::new(Selector::<32>::new());
        if let Ok(selection) = policy.select(&mut selector, &request, &rows) {
            prop_assert!(selection.row < rows.len());
            prop_assert!(selection.cost.is_finite());
            prop_assert_eq!(selection.worker, rows[selection.row].worker);
        }
    }
}

/// A scorer that gives every candidate the same cost.
struct Constant(f64);

impl Scorer for Constant {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }
    fn score(
        &self,
        _request: &RequestView<'_>,
        _rows: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        costs.fill(self.0);
        Ok(())
    }
}

#[test]
fn totals_are_summed_onto_zeros_in_the_scorers_order() {
    // Adding onto a zeroed total is not the bare sum of the columns: 0 + (-0) is +0. Totals keep
    // that sign, and sum in the scorers' order (the rounding shows it).
    let rows = [Row::new(WorkerKey::new(1, 0))];
    let request = Request::new(64, 16);
    let mut selector = Selector::<4>::new();
    let zeros = Policy::new(
        (),
        (Constant(-0.0), Constant(-0.0)),
        DefaultPicker::default(),
    )
    .unwrap();
    let cost = zeros.select(&mut selector, &request, &rows).unwrap().cost;
    assert_eq!(cost.to_bits(), 0.0f64.to_bits());
    let one = Policy::new((), (Constant(-0.0),), DefaultPicker::default()).unwrap();
    let cost = one.select(&mut selector, &request, &rows).unwrap().cost;
    assert_eq!(cost.to_bits(), (-0.0f64).to_bits());
    let ordered = Policy::new(
        (),
        (Constant(1e16), Constant(1.0), Constant(1.0)),
        DefaultPicker::default(),
    )
    .unwrap();
    let cost = ordered.select(&mut selector, &request, &rows).unwrap().cost;
    assert_eq!(cost, (1e16 + 1.0) + 1.0);
    assert_ne!(cost, 1e16 + (1.0 + 1.0));
}
