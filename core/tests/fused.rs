//! The one-pass steps (validity, admission and the cost in one loop, `Scorer::score_all_rows`)
//! of the default cost and of the catalog's least-loaded and two-mode scorers, alone or as the
//! first per-row scorer of a composed policy, against the general pipeline:
//! the same selections, costs, errors and random streams, bit for bit, on uniform and mixed
//! fleets.
//!
//! The general path is forced by wrapping the scorer in one that does not offer the one-pass
//! capability.

use libroute_core::catalog::{
    self, AllowList, BuiltinFilter, BuiltinPicker, BuiltinScorer, DynamoTwoTier, LeastLoaded,
    LoadMetric, MinCostPicker, OverloadLimits, PowerOfChoices, QueueScore, RandomPicker,
    RoundRobinPicker, SessionAffinity, SglangCacheAware, WeightedScorer,
};
use libroute_core::*;
use proptest::prelude::*;

mod general;
use general::General;

/// Fleets a host sends: a flag combination for the fleet, per row a few percent without the
/// cache entry or the load projection the others carry, overloaded rows, small counters, valid
/// estimates, host and disk blocks in half the fleets; and, with small probabilities, what the
/// one-pass steps decline (a counter of 2^52 or more, an invalid estimate, no candidate).
fn fleet() -> impl Strategy<Value = Vec<Row>> {
    let row = (
        (0u32..64, 0u32..8, 0u32..8, 0u32..200),
        (0u64..5000, 0u64..500, 0u64..40, 0u64..3000),
        (0u64..128, 0u32..600),
    );
    (
        1usize..48,
        (any::<bool>(), any::<bool>(), any::<bool>()),
        proptest::collection::vec(row, 48),
        any::<bool>(),
    )
        .prop_map(|(n, (cached, loaded, host_and_disk), fields, sorted)| {
            let mut rows: Vec<Row> = fields[..n]
                .iter()
                .enumerate()
                .map(
                    |(i, &((dev, host, disk, half), (apt, dcb, nreq, tokens), (taints, odd)))| {
                        let id = i as u64 / 2;
                        let mut row = Row::new(WorkerKey::new(id, u32::from(i % 2 == 1)))
                            .with_taints(TaintSet(taints));
                        let estimate = f64::from(half) * 0.5;
                        // Without host and disk blocks, as rows of a request without tier
                        // matches are.
                        let (host, disk) = if host_and_disk { (host, disk) } else { (0, 0) };
                        if cached {
                            row = row.with_cache(Cache {
                                device_blocks: dev,
                                host_blocks: host,
                                disk_blocks: disk,
                                effective_blocks: estimate,
                                effective_tokens: tokens,
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
                        match odd {
                            0 => row.overloaded(true),
                            1 => Row {
                                active_prefill_tokens: apt + (1 << 52),
                                ..row.with_load(Load::default())
                            },
                            2 => Row {
                                effective_tokens: u64::MAX - tokens,
                                ..row
                            },
                            3 => row.with_cache(Cache {
                                effective_blocks: f64::NAN,
                                ..Cache::default()
                            }),
                            4 => row.with_cache(Cache {
                                effective_blocks: -1.0,
                                ..Cache::default()
                            }),
                            6 => row.with_cache(Cache {
                                effective_blocks: f64::INFINITY,
                                ..Cache::default()
                            }),
                            7..=40 => Row {
                                flags: RowFlags(row.flags.0 ^ RowFlags::HAS_CACHE.0),
                                ..row
                            },
                            5 | 41..=80 => Row {
                                flags: RowFlags(row.flags.0 ^ RowFlags::HAS_LOAD.0),
                                ..row
                            },
                            _ => row,
                        }
                    },
                )
                .collect();
            if !sorted {
                rows.reverse();
            }
            rows
        })
}

/// A knob as hosts validate it (mostly), or any of the values validation rejects, which a
/// policy composed directly from a `DefaultCost` still accepts.
fn unvalidated(valid: impl Strategy<Value = f64> + 'static) -> impl Strategy<Value = f64> {
    prop_oneof![
        8 => valid,
        1 => prop::sample::select(vec![f64::NAN, -1.0, -1e300, f64::INFINITY, f64::NEG_INFINITY, 1e300]),
    ]
}

fn knobs() -> impl Strategy<Value = DefaultCost> {
    (
        unvalidated(prop::sample::select(vec![0.0, 1.0, 1.5])),
        unvalidated(prop::sample::select(vec![0.0, 0.0, 0.0, 1.0])),
        unvalidated(prop_oneof![Just(1.0), Just(1e308), 0.0..3.0f64]),
        unvalidated(prop_oneof![Just(0.0), 0.0..40.0f64]),
        unvalidated((0.0..=1.0f64).boxed()),
        unvalidated((0.0..=1.0f64).boxed()),
        unvalidated(prop::sample::select(vec![0.0, 0.0, 0.5])),
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

/// A selection, its contributions as bits and the selector's last costs (host row, cost bits).
type Outcome = (Selection, Vec<u64>, Vec<(usize, u64)>);

/// What a selection returned, with costs as bits so that "equal" means bit for bit.
fn outcome<const N: usize>(
    result: Result<Selection, SelectError>,
    selector: &Selector<N>,
) -> Result<Outcome, SelectError> {
    result.map(|s| {
        let contributions = s.contributions().iter().map(|c| c.to_bits()).collect();
        let last = selector
            .last_costs()
            .map(|(i, c)| (i, c.to_bits()))
            .collect();
        (s, contributions, last)
    })
}

/// Picker `i` of the catalog tests: the default at T = 0 and 0.7, the least cost, two choices.
fn picker_of(i: u32) -> BuiltinPicker {
    match i {
        0 => BuiltinPicker::Default(DefaultPicker { temperature: 0.0 }),
        1 => BuiltinPicker::Default(DefaultPicker { temperature: 0.7 }),
        2 => BuiltinPicker::MinCost(MinCostPicker),
        _ => BuiltinPicker::PowerOfChoices(PowerOfChoices { k: 2 }),
    }
}

/// One of the two-mode rules with the same thresholds: `SGLang`'s cache-aware policy, or Dynamo's
/// two-tier rule (`spread` and `ratio` of active requests, `share` of the request covered).
fn two_mode_rule(sglang: bool, spread: u64, ratio: f64, share: f64) -> BuiltinScorer {
    if sglang {
        BuiltinScorer::SglangCacheAware(SglangCacheAware {
            abs_threshold: spread,
            rel_threshold: ratio,
            match_threshold: share,
        })
    } else {
        BuiltinScorer::DynamoTwoTier(DynamoTwoTier {
            spread,
            ratio,
            coverage: share,
        })
    }
}

/// The outcomes of one selection in one pass and of the same through the general pipeline.
type Pair = (Result<Outcome, SelectError>, Result<Outcome, SelectError>);

/// `rounds` selections of one scorer (the default cost, or one of the catalog's) in one pass and
/// through the general pipeline, on two selectors with the same entropy: each pair of outcomes,
/// to be equal bit for bit.
fn one_pass_and_general<const N: usize, S: Scorer + Copy, P: Picker + Clone>(
    scorer: S,
    picker: P,
    (request, rows): (&Request<'_>, &[Row]),
    (seed, entropy): (Option<u64>, u64),
    rounds: usize,
) -> Vec<Pair> {
    let fused = Policy::new((), (scorer,), picker.clone())
        .unwrap()
        .with_seed(seed);
    let general = Policy::new((), (General(scorer),), picker)
        .unwrap()
        .with_seed(seed);
    let mut a = Box::new(Selector::<N>::with_entropy(entropy));
    let mut b = Box::new(Selector::<N>::with_entropy(entropy));
    (0..rounds)
        .map(|_| {
            let x = outcome(fused.select(&mut a, request, rows), &a);
            let y = outcome(general.select(&mut b, request, rows), &b);
            (x, y)
        })
        .collect()
}

/// Each pair's outcomes equal, and the selection's cost equal bit for bit too.
fn same_outcomes(pairs: Vec<Pair>) -> Result<(), TestCaseError> {
    for (x, y) in pairs {
        prop_assert_eq!(&x, &y);
        if let (Ok((selection, _, _)), Ok((other, _, _))) = (&x, &y) {
            prop_assert_eq!(selection.cost.to_bits(), other.cost.to_bits());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn the_fused_pass_selects_exactly_as_the_general_pipeline(
        rows in fleet(), cost in knobs(),
        role in prop::sample::select(Role::ALL.to_vec()), disagg in any::<bool>(),
        prompt in prop::sample::select(vec![0u64, 1, 17, 127, 2048, 1 << 52]),
        block_size in prop::sample::select(vec![16u32, 16, 1, 64, 17, 3]),
        track in any::<bool>(), tiers in any::<bool>(), device_only in any::<bool>(),
        required in prop::sample::select(vec![0u64, 0, 0, 1, 2]),
        shared in proptest::bool::weighted(0.15), preferred in proptest::bool::weighted(0.3),
        how_many in prop::sample::select(vec![1u32, 2, 3, 5, 7]),
        temperature in prop::sample::select(vec![0.0, 0.0, 0.7]),
        seed in proptest::option::of(any::<u64>()), entropy in any::<u64>(),
    ) {
        let hits = [BlockRange::new(0, 3)];
        // Up to 3 preferred taints take the eager table, up to 6 the lazy one, more are
        // computed per row: every way must give the general pipeline's multipliers.
        let taints: Vec<PreferredTaint> = (0..how_many)
            .map(|j| PreferredTaint { taint: Taint::new(j).unwrap(), weight: 0.5 - 0.3 * f64::from(j) })
            .collect();
        let mut request = Request::new(prompt, block_size)
            .role(role)
            .conditional_disagg(disagg)
            .track_prefill_tokens(track)
            .has_tier_matches(tiers)
            .device_matches_only(device_only)
            .required_taints(TaintSet(required));
        if shared {
            request = request.shared_hits(SharedHits::new(&hits).unwrap());
        }
        if preferred {
            request = request.preferred_taints(&taints);
        }
        let picker = DefaultPicker { temperature };
        let fused = Policy::new((), (cost,), picker).unwrap().with_seed(seed);
        let general = Policy::new((), (General(cost),), picker).unwrap().with_seed(seed);
        let mut a = Box::new(Selector::<64>::with_entropy(entropy));
        let mut b = Box::new(Selector::<64>::with_entropy(entropy));
        // Several selections in a row: the random streams must stay in step too.
        for _ in 0..4 {
            let x = fused.select(&mut a, &request, &rows);
            let x = outcome(x, &a);
            let y = general.select(&mut b, &request, &rows);
            let y = outcome(y, &b);
            prop_assert_eq!(&x, &y);
            if let Ok((selection, _, _)) = &x {
                prop_assert_eq!(selection.cost.to_bits(), y.as_ref().unwrap().0.cost.to_bits());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn catalog_scorers_in_one_pass_select_exactly_as_the_general_pipeline(
        rows in fleet(),
        scorer in prop::sample::select(vec![0u32, 1, 2, 3, 4, 5, 6]),
        spread in prop::sample::select(vec![0u64, 2, 32]),
        ratio in prop::sample::select(vec![1.0, 1.1, 1.5]),
        share in prop::sample::select(vec![0.0, 0.3, 0.5, 1.0]),
        prompt in prop::sample::select(vec![0u64, 64, 256, 1024, 2048]),
        picker in prop::sample::select(vec![0u32, 1, 2, 3]),
        required in prop::sample::select(vec![0u64, 0, 0, 1, 2]),
        seed in proptest::option::of(any::<u64>()), entropy in any::<u64>(),
    ) {
        // Thresholds around the fleet's figures, so both of the two-mode rules' branches run.
        let scorer = match scorer {
            0 => BuiltinScorer::LeastLoaded(LeastLoaded { metric: LoadMetric::ActiveRequests }),
            1 => BuiltinScorer::LeastLoaded(LeastLoaded { metric: LoadMetric::ActiveBlocks }),
            2 => BuiltinScorer::LeastLoaded(LeastLoaded { metric: LoadMetric::PrefillTokens }),
            3 => BuiltinScorer::DynamoTwoTier(DynamoTwoTier::default()),
            4 => two_mode_rule(false, spread, ratio, share),
            5 => BuiltinScorer::SglangCacheAware(SglangCacheAware::default()),
            _ => two_mode_rule(true, spread, ratio, share),
        };
        let scorer = WeightedScorer { scorer, weight: 1.0 };
        let request = Request::new(prompt, 16).required_taints(TaintSet(required));
        let pairs = one_pass_and_general::<64, _, _>(
            scorer, picker_of(picker), (&request, &rows), (seed, entropy), 4,
        );
        for (x, y) in pairs {
            prop_assert_eq!(x, y);
        }
    }
}

/// Scorer `i` of a composed policy: least loaded (weights 1 and 3), the default cost, session
/// affinity, Dynamo's two-tier rule and llm-d's queue scorer. Least loaded and the default cost
/// have costs per row (their one pass runs at weight 1 only, so least loaded at weight 3 first
/// makes the one pass decline); the others do not.
fn composed_part(i: u32) -> WeightedScorer {
    let (scorer, weight) = match i {
        0 => (
            BuiltinScorer::LeastLoaded(LeastLoaded {
                metric: LoadMetric::ActiveRequests,
            }),
            1.0,
        ),
        1 => (
            BuiltinScorer::LeastLoaded(LeastLoaded {
                metric: LoadMetric::ActiveBlocks,
            }),
            3.0,
        ),
        2 => (BuiltinScorer::Default(DefaultCost::default()), 1.0),
        3 => (BuiltinScorer::SessionAffinity(SessionAffinity), 10.0),
        4 => (BuiltinScorer::DynamoTwoTier(DynamoTwoTier::default()), 1.0),
        _ => (BuiltinScorer::Queue(QueueScore), 1.0),
    };
    WeightedScorer { scorer, weight }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// A policy of several scorers takes the one pass of its first scorer with costs per row
    /// and scores the others over that pass's candidates: the same selections, columns and
    /// totals, bit for bit, as every scorer through the general pipeline.
    #[test]
    fn composed_policies_in_one_pass_select_exactly_as_the_general_pipeline(
        rows in fleet(),
        parts in prop::collection::vec(0u32..6, 2..4),
        picker in prop::sample::select(vec![0u32, 1, 2, 3]),
        required in prop::sample::select(vec![0u64, 0, 0, 1, 2]),
        session in proptest::option::of(0u64..8),
        seed in proptest::option::of(any::<u64>()), entropy in any::<u64>(),
    ) {
        let fast: Vec<WeightedScorer> = parts.iter().map(|&i| composed_part(i)).collect();
        let slow: Vec<General<WeightedScorer>> = fast.iter().map(|&s| General(s)).collect();
        let picker = picker_of(picker);
        let fused = Policy::new((), &fast[..], picker.clone()).unwrap().with_seed(seed);
        let general = Policy::new((), &slow[..], picker).unwrap().with_seed(seed);
        let mut request = Request::new(256, 16).required_taints(TaintSet(required));
        if let Some(session) = session {
            request = request.session(session);
        }
        let mut a = Box::new(Selector::<64>::with_entropy(entropy));
        let mut b = Box::new(Selector::<64>::with_entropy(entropy));
        for _ in 0..3 {
            let x = outcome(fused.select(&mut a, &request, &rows), &a);
            let y = outcome(general.select(&mut b, &request, &rows), &b);
            prop_assert_eq!(x, y);
        }
    }
}

#[test]
fn fused_and_general_selections_can_alternate_on_one_selector() {
    let rows: Vec<Row> = (0..8u64)
        .map(|id| {
            Row::new(WorkerKey::new(id, 0)).with_load(Load {
                active_decode_blocks: 40 - id,
                ..Load::default()
            })
        })
        .collect();
    let mut overloaded = rows.clone();
    overloaded[0] = overloaded[0].overloaded(true);
    let fused = DefaultKnobs::default().build().unwrap();
    let general = Policy::new(
        (),
        (General(DefaultCost::default()),),
        DefaultPicker::default(),
    )
    .unwrap();
    let (mut a, mut b) = (Selector::<16>::new(), Selector::<16>::new());
    // Fused, general (a row removed, so the candidate order is no longer the host's), a shorter
    // fused selection, and the full one again: each must see its own candidates.
    for fleet in [&rows[..], &overloaded[..], &rows[..3], &rows[..]] {
        let x = fused.select(&mut a, &Request::new(64, 16), fleet).unwrap();
        let y = general
            .select(&mut b, &Request::new(64, 16), fleet)
            .unwrap();
        assert_eq!(x, y);
        assert_eq!(
            a.last_costs().collect::<Vec<_>>(),
            b.last_costs().collect::<Vec<_>>()
        );
    }
    assert_eq!(
        a.last_costs().map(|(row, _)| row).collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>()
    );
}

/// What one odd row of [`few_odd_fleet`] is.
const ODD_KINDS: u8 = 12;

/// Fleets of 16 to 400 rows that are uniform but for up to 40 odd rows (often fewer than 4)
/// anywhere (often the first): overloaded, without a load projection (one hiding a counter of 2^52 or more in
/// it), without a cache entry, with the other flag combination, an invalid estimate, an unknown
/// flag, a speed (valid or not), without the taint a request may require, or holding host and
/// disk blocks (the fleet's flags, but blocks that a request with tier matches credits, which
/// the pass that takes them as 0 must cost again when its sample of the fleet missed them;
/// half of those overloaded too). The one-pass step
/// takes the few odd rows of a tidy fleet apart from the rest, and declines to the per-row loop
/// when there are many.
fn few_odd_fleet() -> impl Strategy<Value = Vec<Row>> {
    (
        16usize..400,
        prop_oneof![
            proptest::collection::vec((0usize..400, 0u8..ODD_KINDS), 0..4),
            proptest::collection::vec((0usize..400, 0u8..ODD_KINDS), 0..40),
        ],
        (proptest::bool::weighted(0.3), 0u8..ODD_KINDS),
        (any::<bool>(), any::<bool>()),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(
            |(n, mut odd, (odd_first, first_kind), (cached, loaded), seed, sorted)| {
                if odd_first {
                    odd.push((0, first_kind));
                }
                let mut state = seed | 1;
                let mut next = move |m: u64| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state % m
                };
                let mut rows: Vec<Row> = (0..n as u64)
                    .map(|i| {
                        let mut row = Row::new(WorkerKey::new(i / 2, (i % 2) as u32))
                            .with_taints(TaintSet(1 | next(8) << 1));
                        if cached {
                            let half = next(200);
                            row = row.with_cache(Cache {
                                device_blocks: u32::try_from(next(64)).unwrap(),
                                effective_blocks: half as f64 * 0.5,
                                effective_tokens: half * 8,
                                ..Cache::default()
                            });
                        }
                        if loaded {
                            row = row.with_load(Load {
                                available: true,
                                active_prefill_tokens: next(5000),
                                active_decode_blocks: next(500),
                                active_requests: next(40),
                            });
                        }
                        row
                    })
                    .collect();
                for (at, kind) in odd {
                    let Some(row) = rows.get_mut(at) else {
                        continue;
                    };
                    *row = odd_row(*row, kind, &mut next);
                }
                if !sorted {
                    rows.reverse();
                }
                rows
            },
        )
}

/// `row` made odd in the way `kind` of [`ODD_KINDS`] names (see [`few_odd_fleet`]), with
/// `next(m)` drawing below `m`.
fn odd_row(row: Row, kind: u8, next: &mut impl FnMut(u64) -> u64) -> Row {
    let speed = |base_ms| Speed {
        base_ms,
        ms_per_prefill_token: 0.01,
        ms_per_active_request: 1.0,
    };
    match kind {
        0 => row.overloaded(true),
        1 => Row {
            flags: RowFlags(row.flags.0 & !RowFlags::HAS_LOAD.0),
            ..row
        },
        2 => Row {
            flags: RowFlags(row.flags.0 & !RowFlags::HAS_LOAD.0),
            active_decode_blocks: 1 << 53,
            ..row
        },
        3 => Row {
            flags: RowFlags(row.flags.0 & !RowFlags::HAS_CACHE.0),
            ..row
        },
        4 => Row {
            flags: RowFlags(row.flags.0 ^ RowFlags::HAS_CACHE.0 ^ RowFlags::HAS_LOAD.0),
            ..row
        },
        5 => row.with_cache(Cache {
            effective_blocks: f64::NAN,
            ..Cache::default()
        }),
        6 => Row {
            flags: RowFlags(row.flags.0 | 64),
            ..row
        },
        7 => row.with_speed(speed(5.0)),
        8 => row.with_speed(speed(f64::NAN)),
        // Half of them overloaded too: left out, so never costed again.
        10 => Row {
            host_blocks: u32::try_from(1 + next(40)).unwrap(),
            disk_blocks: u32::try_from(next(3)).unwrap(),
            ..row
        }
        .overloaded(next(2) == 0),
        _ => row.with_taints(TaintSet(row.taints.0 & !1)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn a_fleet_with_a_few_odd_rows_selects_exactly_as_the_general_pipeline(
        rows in few_odd_fleet(), cost in knobs(),
        role in prop::sample::select(Role::ALL.to_vec()),
        track in any::<bool>(), tiers in any::<bool>(), device_only in any::<bool>(),
        required in prop::sample::select(vec![0u64, 0, 0, 1]),
        preferred in any::<bool>(),
        temperature in prop::sample::select(vec![0.0, 0.0, 0.7]),
        seed in proptest::option::of(any::<u64>()), entropy in any::<u64>(),
    ) {
        let taints = [
            PreferredTaint { taint: Taint::new(1).unwrap(), weight: 0.5 },
            PreferredTaint { taint: Taint::new(2).unwrap(), weight: -0.25 },
        ];
        let mut request = Request::new(2048, 16)
            .role(role)
            .track_prefill_tokens(track)
            .has_tier_matches(tiers)
            .device_matches_only(device_only)
            .required_taints(TaintSet(required));
        if preferred {
            request = request.preferred_taints(&taints);
        }
        let picker = DefaultPicker { temperature };
        let pairs = one_pass_and_general::<512, _, _>(
            cost, picker, (&request, &rows), (seed, entropy), 2,
        );
        same_outcomes(pairs)?;
    }
}

/// Fleets of 32 to 400 rows with a cache entry and a load projection, of which 1 to 8 at any
/// position hold host and disk blocks (up to 400: their credit often makes them the
/// cheapest), half of those overloaded. A request with tier matches that says they are all in
/// device memory (wrongly, here) is costed in a pass that takes every row's host and disk
/// blocks as 0, and then costs again the rows that hold some.
fn fleet_holding_tiers() -> impl Strategy<Value = Vec<Row>> {
    (
        32u64..400,
        proptest::collection::vec((0usize..400, 1u32..400, any::<bool>()), 1..8),
        any::<u64>(),
    )
        .prop_map(|(n, holding, seed)| {
            let mut state = seed | 1;
            let mut next = move |m: u64| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state % m
            };
            let mut rows: Vec<Row> = (0..n)
                .map(|i| {
                    let device = next(64);
                    Row::new(WorkerKey::new(i, 0))
                        .with_cache(Cache {
                            device_blocks: u32::try_from(device).unwrap(),
                            effective_blocks: device as f64,
                            effective_tokens: device * 16,
                            ..Cache::default()
                        })
                        .with_load(Load {
                            available: true,
                            active_prefill_tokens: next(5000),
                            active_decode_blocks: next(500),
                            active_requests: next(40),
                        })
                })
                .collect();
            for (at, host, overloaded) in holding {
                if let Some(row) = rows.get_mut(at) {
                    row.host_blocks = host;
                    row.disk_blocks = host / 3;
                    *row = row.overloaded(overloaded);
                }
            }
            rows
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    /// Rows that hold host or disk blocks of a request with tier matches are credited for them
    /// (and those left out stay left out) when the request says no row holds any.
    #[test]
    fn rows_holding_host_or_disk_blocks_are_credited_for_them(
        rows in fleet_holding_tiers(), cost in knobs(),
        role in prop::sample::select(Role::ALL.to_vec()), track in any::<bool>(),
        temperature in prop::sample::select(vec![0.0, 0.0, 0.7]),
        seed in proptest::option::of(any::<u64>()), entropy in any::<u64>(),
        device_only in proptest::bool::weighted(0.8),
    ) {
        let request = Request::new(2048, 16)
            .role(role)
            .track_prefill_tokens(track)
            .has_tier_matches(true)
            .device_matches_only(device_only);
        let picker = DefaultPicker { temperature };
        let pairs = one_pass_and_general::<512, _, _>(
            cost, picker, (&request, &rows), (seed, entropy), 2,
        );
        same_outcomes(pairs)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// The two-mode rules' loop over a tidy fleet (the few odd rows taken apart, declining when
    /// there are many or a load reaches 2^53) selects as the general pipeline does.
    #[test]
    fn two_mode_rules_over_a_fleet_with_a_few_odd_rows_select_exactly_as_the_general_pipeline(
        mut rows in few_odd_fleet(),
        huge in proptest::option::of((0usize..400, 0u64..3)),
        extreme in any::<bool>(),
        sglang in any::<bool>(),
        spread in prop::sample::select(vec![0u64, 2, 32, 64]),
        ratio in prop::sample::select(vec![1.0, 1.1, 1.5]),
        share in prop::sample::select(vec![0.0, 0.3, 0.5, 1.0]),
        prompt in prop::sample::select(vec![0u64, 64, 256, 1024, 2048]),
        picker in prop::sample::select(vec![0u32, 1, 2]),
        required in prop::sample::select(vec![0u64, 0, 0, 1]),
        seed in proptest::option::of(any::<u64>()), entropy in any::<u64>(),
    ) {
        // The odd rows (flags other than the middle row's) at the extremes: the most active
        // requests and device blocks, and (when they carry no load projection) the least load,
        // so a range or overlap that missed them would decide differently.
        if extreme {
            let middle = rows[rows.len() / 2].flags;
            for row in &mut rows {
                if row.flags == middle {
                    row.active_requests += 1;
                } else {
                    row.active_requests = 1000;
                    row.device_blocks = 100;
                }
            }
        }
        // A load at or just below 2^53, where floats stop holding every integer.
        if let Some((at, k)) = huge {
            let n = rows.len();
            rows[at % n].active_requests = (1 << 53) - 1 + k;
        }
        let rule = two_mode_rule(sglang, spread, ratio, share);
        let scorer = WeightedScorer { scorer: rule, weight: 1.0 };
        let request = Request::new(prompt, 16).required_taints(TaintSet(required));
        let pairs = one_pass_and_general::<512, _, _>(
            scorer, picker_of(picker), (&request, &rows), (seed, entropy), 2,
        );
        for (x, y) in pairs {
            prop_assert_eq!(x, y);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// Least loaded's loop over a tidy fleet (the few odd rows taken again through their own
    /// masks and admission, declining when there are many or a counter reaches 2^52), with and
    /// without the overload filter's limits in its pass, selects as the general pipeline does.
    #[test]
    fn least_loaded_over_a_fleet_with_a_few_odd_rows_selects_exactly_as_the_general_pipeline(
        mut rows in few_odd_fleet(),
        metric in prop::sample::select(vec![
            LoadMetric::ActiveRequests, LoadMetric::ActiveBlocks, LoadMetric::PrefillTokens,
        ]),
        limits in proptest::option::of((
            prop::sample::select(vec![None, Some(0u64), Some(20), Some(39)]),
            prop::sample::select(vec![None, Some(250u64), Some(1 << 52)]),
            prop::sample::select(vec![None, Some(2500u64), Some((1 << 52) - 1)]),
        )),
        huge in proptest::option::of((0usize..400, 0u64..3, 0u32..3)),
        required in prop::sample::select(vec![0u64, 0, 0, 1]),
        picker in prop::sample::select(vec![0u32, 1, 2, 3]),
        seed in proptest::option::of(any::<u64>()), entropy in any::<u64>(),
    ) {
        // A counter at or just below 2^52, where the pass's exact conversion ends.
        if let Some((at, k, which)) = huge {
            let n = rows.len();
            let row = &mut rows[at % n];
            let value = (1 << 52) - 1 + k;
            match which {
                0 => row.active_requests = value,
                1 => row.active_decode_blocks = value,
                _ => row.active_prefill_tokens = value,
            }
        }
        let mut filters = catalog::List::<BuiltinFilter, 1>::new();
        if let Some((max_requests, max_active_blocks, max_prefill_tokens)) = limits {
            let limits = OverloadLimits { max_requests, max_active_blocks, max_prefill_tokens };
            filters.push(BuiltinFilter::OverloadLimits(limits)).unwrap();
        }
        let scorer = LeastLoaded { metric };
        let request = Request::new(2048, 16).required_taints(TaintSet(required));
        let fused = Policy::new(filters.clone(), (scorer,), picker_of(picker)).unwrap();
        let general = Policy::new(filters, (General(scorer),), picker_of(picker)).unwrap();
        let (fused, general) = (fused.with_seed(seed), general.with_seed(seed));
        let mut a = Box::new(Selector::<512>::with_entropy(entropy));
        let mut b = Box::new(Selector::<512>::with_entropy(entropy));
        for _ in 0..2 {
            let x = outcome(fused.select(&mut a, &request, &rows), &a);
            let y = outcome(general.select(&mut b, &request, &rows), &b);
            prop_assert_eq!(x, y);
        }
    }
}

/// Loads beyond 2^53, where floats round: 2^53 + 1 rounds down to 2^53 and 2^53 + 35 up to
/// 2^53 + 36, so a range read from floats would be 36 where it is 34, and the two-mode rules
/// (spread 34) would route by load where they route toward the overlap. The tidy fleet's loop
/// declines such loads and the per-row loop decides, as the general pipeline does.
#[test]
fn two_mode_rules_take_loads_beyond_2_pow_53_exactly() {
    let rows: Vec<Row> = (0..64u64)
        .map(|i| {
            Row::new(WorkerKey::new(i, 0))
                .with_cache(Cache {
                    device_blocks: u32::try_from(i % 8).unwrap(),
                    ..Cache::default()
                })
                .with_load(Load {
                    available: true,
                    active_requests: (1 << 53) + [1, 35, 10][(i % 3) as usize],
                    ..Load::default()
                })
        })
        .collect();
    let request = Request::new(128, 16);
    for sglang in [false, true] {
        let scorer = WeightedScorer {
            scorer: two_mode_rule(sglang, 34, 1.0, 0.5),
            weight: 1.0,
        };
        let pairs =
            one_pass_and_general::<64, _, _>(scorer, picker_of(2), (&request, &rows), (None, 1), 1);
        let (x, y) = pairs.into_iter().next().unwrap();
        assert_eq!(x, y);
        // Toward the overlap: the rows holding 7 blocks cost 0.
        assert_eq!(x.unwrap().0.cost, 0.0);
    }
}

/// A tidy fleet's odd row counts through its own masks only: row 5 carries no load projection
/// (its stale count of 1,000 is not a load), so the loads span 0 to 20, within the spread of
/// 64, and the two-mode rules route toward the overlap.
#[test]
fn two_mode_rules_read_an_odd_row_through_its_own_masks() {
    let mut rows: Vec<Row> = (0..64u64)
        .map(|i| {
            Row::new(WorkerKey::new(i, 0))
                .with_cache(Cache {
                    device_blocks: u32::try_from(i % 8).unwrap(),
                    ..Cache::default()
                })
                .with_load(Load {
                    available: true,
                    active_requests: 1 + i % 20,
                    ..Load::default()
                })
        })
        .collect();
    rows[5].flags = RowFlags(rows[5].flags.0 & !RowFlags::HAS_LOAD.0);
    rows[5].active_requests = 1000;
    let request = Request::new(128, 16);
    let scorer = WeightedScorer {
        scorer: two_mode_rule(false, 64, 1.1, 0.5),
        weight: 1.0,
    };
    let pairs =
        one_pass_and_general::<64, _, _>(scorer, picker_of(2), (&request, &rows), (None, 1), 1);
    let (x, y) = pairs.into_iter().next().unwrap();
    assert_eq!(x, y);
    assert_eq!(x.unwrap().0.cost, 0.0);
}

/// What [`Counted`] writes: fails with code 42, writes NaN for its first candidate, or costs 0.
#[derive(Clone, Copy, PartialEq)]
enum Behaviour {
    Fails,
    WritesNan,
    Scores,
}

/// A scorer (reading nothing) that counts how often it is asked, as a host's callback can.
struct Counted {
    behaviour: Behaviour,
    calls: std::sync::atomic::AtomicUsize,
}

impl Counted {
    fn new(behaviour: Behaviour) -> Self {
        Counted {
            behaviour,
            calls: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn take_calls(&self) -> usize {
        self.calls.swap(0, std::sync::atomic::Ordering::Relaxed)
    }
}

impl Scorer for Counted {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }
    fn score(
        &self,
        _request: &RequestView<'_>,
        _candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self.behaviour {
            Behaviour::Fails => return Err(ComponentError { code: 42 }),
            Behaviour::WritesNan => costs.fill(f64::NAN),
            Behaviour::Scores => costs.fill(0.0),
        }
        Ok(())
    }
}

/// Least loaded whose one pass writes NaN for its first candidate (as its `score` would not):
/// a per-row scorer whose own column is not finite.
struct NanPass;

impl Scorer for NanPass {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }
    fn score(
        &self,
        _request: &RequestView<'_>,
        _candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        costs.fill(f64::NAN);
        Ok(())
    }
    fn score_all_rows(
        &self,
        _request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<usize> {
        for (i, (o, c)) in order.iter_mut().zip(costs.iter_mut()).enumerate() {
            *o = u32::try_from(i).ok()?;
            *c = f64::NAN;
        }
        Some(rows.len())
    }
    fn costs_are_per_row(&self) -> bool {
        true
    }
}

/// A composed policy's other scorers are asked once per selection even when one fails or
/// writes a non-finite cost: the one pass reports their error, the one the general steps
/// report, instead of handing the selection to the general steps to ask them again. When the
/// pass's own column is not finite, the general steps decide, and name that scorer.
#[test]
fn a_composed_policys_failing_scorer_is_asked_once_and_named_as_in_the_general_steps() {
    let rows: Vec<Row> = (0..16u64)
        .map(|i| {
            Row::new(WorkerKey::new(i, 0)).with_load(Load {
                available: true,
                active_requests: i % 5,
                ..Load::default()
            })
        })
        .collect();
    let request = Request::new(64, 16);
    let least_loaded = LeastLoaded {
        metric: LoadMetric::ActiveRequests,
    };
    for behaviour in [Behaviour::Fails, Behaviour::WritesNan, Behaviour::Scores] {
        let counted = Counted::new(behaviour);
        let fused = Policy::new((), (least_loaded, &counted), MinCostPicker).unwrap();
        let general = Policy::new((), (General(least_loaded), &counted), MinCostPicker).unwrap();
        let (mut a, mut b) = (Selector::<16>::new(), Selector::<16>::new());
        let x = fused.select(&mut a, &request, &rows);
        assert_eq!(counted.take_calls(), 1, "asked once in the one pass");
        let y = general.select(&mut b, &request, &rows);
        assert_eq!(counted.take_calls(), 1, "asked once in the general steps");
        assert_eq!(x, y);
        match behaviour {
            Behaviour::Fails => assert!(matches!(
                x,
                Err(SelectError::ScorerFailed { scorer: 1, .. })
            )),
            Behaviour::WritesNan => assert!(matches!(
                x,
                Err(SelectError::NonFiniteCost { scorer: 1, row: 0 })
            )),
            Behaviour::Scores => assert!(x.is_ok()),
        }

        // The pass's own column is not finite: the general steps name scorer 0, as they do
        // without the pass.
        let fused = Policy::new((), (NanPass, &counted), MinCostPicker).unwrap();
        let general = Policy::new((), (General(NanPass), &counted), MinCostPicker).unwrap();
        let x = fused.select(&mut a, &request, &rows);
        let _ = counted.take_calls();
        let y = general.select(&mut b, &request, &rows);
        assert_eq!(
            counted.take_calls(),
            0,
            "scorer 0 fails first in the general steps"
        );
        assert_eq!(x, y);
        assert!(matches!(
            x,
            Err(SelectError::NonFiniteCost { scorer: 0, row: 0 })
        ));
    }
}

/// A builtin picker without its capability to pass over NaN costs (`Picker::picks_least_cost`)
/// or to find its candidates by position (`Picker::picks_by_position`): the one pass then moves
/// the candidates to the front.
#[derive(Clone)]
struct Compacting(BuiltinPicker);

impl Picker for Compacting {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        self.0.inputs(leg)
    }

    fn pick(
        &self,
        input: &PickInput<'_>,
        work: &mut [f64],
        rng: &mut dyn RandomSource,
    ) -> Result<Pick, ComponentError> {
        self.0.pick(input, work, rng)
    }

    fn takes_turns(&self) -> bool {
        self.0.takes_turns()
    }
}

/// The pickers that draw by position, for `n` from 1: random, round robin, then power of 1, 3
/// and 9 choices (9: more draws than it takes in place).
fn by_position(n: u32) -> BuiltinPicker {
    match n {
        1 => BuiltinPicker::Random(RandomPicker),
        2 => BuiltinPicker::RoundRobin(RoundRobinPicker),
        k => BuiltinPicker::PowerOfChoices(PowerOfChoices { k: 3u32.pow(k - 3) }),
    }
}

/// An overload limit on active requests and an allow list, each when given.
fn overload_and_allow_list(
    overload: Option<u64>,
    allowed: Option<&[u64]>,
) -> catalog::List<BuiltinFilter, 2> {
    let mut filters = catalog::List::new();
    if let Some(max_requests) = overload {
        let limits = OverloadLimits {
            max_requests: Some(max_requests),
            ..OverloadLimits::default()
        };
        filters.push(BuiltinFilter::OverloadLimits(limits)).unwrap();
    }
    if let Some(ids) = allowed {
        filters
            .push(BuiltinFilter::AllowList(AllowList::new(ids).unwrap()))
            .unwrap();
    }
    filters
}

/// Every explanation field, costs included, as text: NaN totals compare equal that way.
fn explained(out: &[Explanation]) -> Vec<String> {
    out.iter().map(|e| format!("{e:?}")).collect()
}

/// A policy, its selector and its explanation buffer.
type Side<'a, F, S, P> = (
    &'a Policy<F, S, P>,
    &'a mut Selector<64>,
    &'a mut [Explanation],
);

/// Selects with both sides, explained in odd rounds.
fn select_both<F1: Filters, S1: Scorers, P1: Picker, F2: Filters, S2: Scorers, P2: Picker>(
    round: u32,
    (p, a, why_a): Side<'_, F1, S1, P1>,
    (q, b, why_b): Side<'_, F2, S2, P2>,
    request: &Request<'_>,
    rows: &[Row],
) -> (
    Result<Selection, SelectError>,
    Result<Selection, SelectError>,
) {
    if round % 2 == 0 {
        (p.select(a, request, rows), q.select(b, request, rows))
    } else {
        (
            p.select_explained(a, request, rows, why_a),
            q.select_explained(b, request, rows, why_b),
        )
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// The one pass leaves the rows that are not candidates in place for a picker of the least
    /// cost or one that finds its candidates by position (`Scorer::score_all_rows_in_place`),
    /// and so do the filters after it: the same
    /// selections, random streams, candidate counts, last costs and explanations as with the
    /// candidates moved to the front. The scorer is the default cost, least loaded or one of the
    /// two-mode rules, each of which leaves rows in place (the two-mode rules only without
    /// filters: their costs compare candidates, so filters send them to the general steps).
    #[test]
    fn rows_left_in_place_select_and_explain_as_rows_moved_to_the_front(
        rows in fleet(), cost in knobs(), scorer in prop::sample::select(vec![0u32, 0, 1, 2, 3]),
        (spread, ratio, share) in (0u64..40, prop::sample::select(vec![1.0, 1.5]), prop::sample::select(vec![0.0, 0.3])),
        required in prop::sample::select(vec![0u64, 0, 1, 2, 3]),
        preferred in any::<bool>(),
        overload in proptest::option::of(0u64..40),
        allowed in proptest::option::of(proptest::collection::vec(0u64..24, 0..12)),
        seed in proptest::option::of(any::<u64>()), entropy in any::<u64>(),
        picker in prop::sample::select(vec![0u32, 0, 1, 2, 3, 4, 5]),
    ) {
        let picker = match picker {
            0 => BuiltinPicker::Default(DefaultPicker { temperature: 0.0 }),
            n => by_position(n),
        };
        let taints = [PreferredTaint { taint: Taint::new(1).unwrap(), weight: 0.3 }];
        let mut request = Request::new(2048, 16).required_taints(TaintSet(required));
        if preferred {
            request = request.preferred_taints(&taints);
        }
        let filters = overload_and_allow_list(overload, allowed.as_deref());
        let scorer = WeightedScorer {
            scorer: match scorer {
                0 => BuiltinScorer::Default(cost),
                1 => BuiltinScorer::LeastLoaded(LeastLoaded { metric: LoadMetric::ActiveRequests }),
                _ => two_mode_rule(scorer == 3, spread, ratio, share),
            },
            weight: 1.0,
        };
        let moved = Policy::new(filters.clone(), (scorer,), Compacting(picker.clone()));
        let moved = moved.unwrap().with_seed(seed);
        let in_place = Policy::new(filters, (scorer,), picker).unwrap().with_seed(seed);
        let mut a = Box::new(Selector::<64>::with_entropy(entropy));
        let mut b = Box::new(Selector::<64>::with_entropy(entropy));
        let (mut why_a, mut why_b) = ([Explanation::EMPTY; 48], [Explanation::EMPTY; 48]);
        for round in 0..4 {
            let (x, y) = select_both(
                round,
                (&in_place, &mut a, &mut why_a),
                (&moved, &mut b, &mut why_b),
                &request,
                &rows,
            );
            if let Ok(s) = &x {
                prop_assert_eq!(a.last_costs().len(), s.candidates);
                prop_assert_eq!(a.last_costs().count(), s.candidates);
            }
            prop_assert_eq!(outcome(x, &a), outcome(y, &b));
            prop_assert_eq!(explained(&why_a[..rows.len()]), explained(&why_b[..rows.len()]));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// A policy without scorers whose picker finds its candidates by position leaves the rows
    /// it does not admit in place too, with filters or without: the same selections, random
    /// streams, turns, zero costs and explanations as with the candidates moved to the front,
    /// seeded or not, also after a selection with several scorers on the same selector. A
    /// least-cost picker over such a policy is drawn too: the rows must move to the front for
    /// it.
    #[test]
    fn rows_left_in_place_for_a_policy_without_scorers(
        rows in fleet(),
        required in prop::sample::select(vec![0u64, 0, 1, 2, 3]),
        overload in proptest::option::of(0u64..40),
        allowed in proptest::option::of(proptest::collection::vec(0u64..24, 0..12)),
        picker in 0u32..6,
        seed in proptest::option::of(any::<u64>()), entropy in any::<u64>(),
    ) {
        // A least-cost picker must not be given rows left in place here: their zero costs are
        // not the NaN it passes over.
        let picker = match picker {
            0 => BuiltinPicker::MinCost(MinCostPicker),
            n => by_position(n),
        };
        let request = Request::new(2048, 16).required_taints(TaintSet(required));
        let filters = overload_and_allow_list(overload, allowed.as_deref());
        let in_place = Policy::new(filters.clone(), (), picker.clone()).unwrap().with_seed(seed);
        let moved = Policy::new(filters, (), Compacting(picker)).unwrap().with_seed(seed);
        let scorers = (DefaultCost::default(), LeastLoaded { metric: LoadMetric::ActiveRequests });
        let several = Policy::new((), scorers, MinCostPicker).unwrap();
        let mut a = Box::new(Selector::<64>::with_entropy(entropy));
        let mut b = Box::new(Selector::<64>::with_entropy(entropy));
        let (mut why_a, mut why_b) = ([Explanation::EMPTY; 48], [Explanation::EMPTY; 48]);
        for round in 0..4 {
            if round == 2 {
                // Without the required taints: more candidates, so more totals written.
                let plain = Request::new(2048, 16);
                let (x, y) = (several.select(&mut a, &plain, &rows), several.select(&mut b, &plain, &rows));
                prop_assert_eq!(outcome(x, &a), outcome(y, &b));
            }
            let (x, y) = select_both(
                round,
                (&in_place, &mut a, &mut why_a),
                (&moved, &mut b, &mut why_b),
                &request,
                &rows,
            );
            // Both sides leaving rows in place for a picker that cannot pass over them would
            // agree; it then picks rows that are not candidates.
            prop_assert!(!matches!(x, Err(SelectError::PickOutOfRange { .. })), "{:?}", x);
            if let Ok(s) = &x {
                prop_assert_eq!(s.cost.to_bits(), 0);
                prop_assert_eq!(a.last_costs().len(), s.candidates);
                prop_assert!(a.last_costs().all(|(_, c)| c.to_bits() == 0));
            }
            prop_assert_eq!(outcome(x, &a), outcome(y, &b));
            prop_assert_eq!(explained(&why_a[..rows.len()]), explained(&why_b[..rows.len()]));
        }
    }
}

/// A picker that claims the least-cost capability and answers the position of a row left in
/// place (its cost NaN): an error naming the position, not that row.
#[test]
fn a_pick_of_a_row_left_in_place_is_out_of_range() {
    struct LastPosition;
    impl Picker for LastPosition {
        fn inputs(&self, _leg: Leg) -> WorkerInputs {
            WorkerInputs::NONE
        }
        fn pick(
            &self,
            input: &PickInput<'_>,
            _work: &mut [f64],
            _rng: &mut dyn RandomSource,
        ) -> Result<Pick, ComponentError> {
            Ok(Pick {
                index: input.costs.len() - 1,
                reason: PickReason::Custom,
            })
        }
        fn picks_least_cost(&self) -> bool {
            true
        }
    }
    let load = Load {
        available: true,
        ..Load::default()
    };
    let rows: Vec<Row> = (0..20)
        .map(|i| Row::new(WorkerKey::new(i, 0)).with_load(load))
        .collect();
    let mut last_overloaded = rows.clone();
    last_overloaded[19] = last_overloaded[19].overloaded(true);
    let policy = Policy::new((), (DefaultCost::default(),), LastPosition).unwrap();
    let mut selector = Selector::<32>::new();
    let s = policy
        .select(&mut selector, &Request::new(64, 16), &rows)
        .unwrap();
    assert_eq!((s.row, s.candidates), (19, 20));
    assert_eq!(
        policy.select(&mut selector, &Request::new(64, 16), &last_overloaded),
        Err(SelectError::PickOutOfRange {
            index: 19,
            candidates: 19
        })
    );
    assert_eq!(
        selector.last_costs().len(),
        0,
        "nothing kept from a failed selection"
    );
}
