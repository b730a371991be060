//! The default cost against an independent, straightforward implementation of the spec's
//! formula (`spec/default-policy.md` section 3, as documented on `DefaultCost`), written here
//! per candidate with no modes, masks or tables: every candidate's cost the selector reports
//! (`Selector::last_costs`) must equal it bit for bit, on mixed fleets (rows without a load
//! projection or a cache entry, overloaded and ineligible rows), with preferred taints, decay,
//! shared hits and any block size. The fast loop and the general pipeline both instantiate one
//! formula; this is the check that the formula is the spec's.

use libroute_core::*;
use proptest::prelude::*;

/// The spec's `max(x, 0)` (NaN gives 0).
fn max0(x: f64) -> f64 {
    if x > 0.0 { x } else { 0.0 }
}

/// The spec's per-candidate cost, written out from its text.
#[allow(
    clippy::too_many_lines,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss,
    reason = "the formula, in the spec's order, with its conversions"
)]
fn spec_cost(k: &DefaultCost, request: &Request<'_>, candidates: &[&Row], row: &Row) -> f64 {
    let p = request.prompt_tokens;
    let bs = f64::from(request.block_size);
    let rb = request.request_blocks() as f64;
    let plain_decode = request.role == Role::Decode && !request.conditional_disagg;
    let track = request.track_prefill_tokens;
    let c_ovl = if plain_decode && !track {
        0.0
    } else {
        k.overlap_score_credit
    };
    // CACHE is declared unless plain decode or a zero credit; undeclared, every tier reads 0.
    let cache_declared = !plain_decode && k.overlap_score_credit != 0.0;
    let cached = cache_declared && row.flags.contains(RowFlags::HAS_CACHE);
    let loaded = row.flags.contains(RowFlags::HAS_LOAD);
    let load = |r: &Row| {
        if r.flags.contains(RowFlags::HAS_LOAD) {
            (
                r.active_prefill_tokens,
                r.active_decode_blocks,
                r.active_requests,
            )
        } else {
            (0, 0, 0)
        }
    };
    let (apt, dcb, nreq) = load(row);
    let (dev, host, disk, e_blocks, e_tokens) = if cached {
        (
            row.device_blocks,
            row.host_blocks,
            row.disk_blocks,
            row.effective_blocks,
            row.effective_tokens,
        )
    } else {
        (0, 0, 0, 0.0, 0)
    };
    let device = if request.has_tier_matches {
        f64::from(dev)
    } else {
        e_blocks
    };
    let shared = match request.shared_hits {
        Some(hits) => {
            let position = max0(device.round()) as u64;
            k.shared_cache_multiplier * hits.hits_beyond(position) as f64
        }
        None => 0.0,
    };
    let use_decay = track && k.overlap_score_credit_decay > 0.0;
    let decay = if use_decay {
        let min_apt = candidates.iter().map(|r| load(r).0).min().unwrap_or(0);
        let excess = (apt - min_apt) as f64 / bs;
        1.0 / (1.0 + k.overlap_score_credit_decay * (excess / rb))
    } else {
        1.0
    };
    // Without CACHE declared every credit term is 0, shared hits included.
    let credit = if cache_declared {
        c_ovl * decay * device
            + k.host_cache_hit_weight * f64::from(host)
            + k.disk_cache_hit_weight * f64::from(disk)
            + shared
    } else {
        0.0
    };
    let req_cost = k.decode_active_request_weight * nreq as f64;
    let subtract_from_decode = request.role.label() == Label::Decode && !track && c_ovl > 0.0;
    let cost = if subtract_from_decode {
        max0(dcb as f64 - credit) + req_cost
    } else {
        let raw_tokens = if !track {
            0
        } else if loaded {
            apt.saturating_add(p.max(e_tokens))
        } else {
            p
        };
        k.prefill_load_scale * max0(raw_tokens as f64 / bs - credit) + dcb as f64 + req_cost
    };
    if request.preferred_taints.is_empty() {
        return cost;
    }
    let sum: f64 = request
        .preferred_taints
        .iter()
        .filter(|t| row.taints.contains(t.taint))
        .map(|t| t.weight)
        .sum();
    cost * (-sum.tanh()).exp()
}

fn fleet() -> impl Strategy<Value = Vec<Row>> {
    let row = (
        (0u32..16, 0u32..4, 0u32..4, 0u32..40),
        (0u64..5000, 0u64..500, 0u64..40, 0u64..600),
        (0u64..64, 0u32..20),
    );
    (
        1usize..40,
        any::<bool>(),
        proptest::collection::vec(row, 40),
    )
        .prop_map(|(n, tiers, fields)| {
            fields[..n]
                .iter()
                .enumerate()
                .map(
                    |(i, &((dev, host, disk, half), (apt, dcb, nreq, tokens), (taints, odd)))| {
                        let (host, disk) = if tiers { (host, disk) } else { (0, 0) };
                        let row = Row::new(WorkerKey::new(i as u64, 0))
                            .with_taints(TaintSet(taints))
                            .with_cache(Cache {
                                device_blocks: dev,
                                host_blocks: host,
                                disk_blocks: disk,
                                effective_blocks: f64::from(half) * 0.5,
                                effective_tokens: tokens,
                            })
                            .with_load(Load {
                                available: true,
                                active_prefill_tokens: apt,
                                active_decode_blocks: dcb,
                                active_requests: nreq,
                            });
                        match odd {
                            0 => row.overloaded(true),
                            1 => Row {
                                flags: RowFlags(row.flags.0 & !RowFlags::HAS_LOAD.0),
                                ..row
                            },
                            2 => Row {
                                flags: RowFlags(row.flags.0 & !RowFlags::HAS_CACHE.0),
                                ..row
                            },
                            _ => row,
                        }
                    },
                )
                .collect()
        })
}

fn knobs() -> impl Strategy<Value = DefaultCost> {
    (
        prop::sample::select(vec![0.0, 1.0, 1.5]),
        prop::sample::select(vec![0.0, 0.0, 0.5, 2.0]),
        prop_oneof![Just(1.0), 0.0..3.0f64],
        prop_oneof![Just(0.0), 0.0..4.0f64],
        0.0..=1.0f64,
        0.0..=1.0f64,
        prop::sample::select(vec![0.0, 0.5, 1.0]),
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn every_candidate_costs_what_the_spec_says(
        rows in fleet(), cost in knobs(),
        role in prop::sample::select(Role::ALL.to_vec()), disagg in any::<bool>(),
        prompt in prop::sample::select(vec![0u64, 1, 17, 500, 2048]),
        block_size in prop::sample::select(vec![16u32, 1, 64, 17, 3]),
        track in any::<bool>(), tiers in any::<bool>(),
        required in prop::sample::select(vec![0u64, 0, 1, 6]),
        shared in proptest::bool::weighted(0.2),
        preferred in prop::collection::vec((0u32..6, -2.0..2.0f64), 0..8),
    ) {
        let hits = [BlockRange::new(1, 4), BlockRange::new(6, 9)];
        let preferred: Vec<PreferredTaint> = preferred
            .iter()
            .map(|&(t, weight)| PreferredTaint { taint: Taint::new(t).unwrap(), weight })
            .collect();
        let mut request = Request::new(prompt, block_size)
            .role(role)
            .conditional_disagg(disagg)
            .track_prefill_tokens(track)
            .has_tier_matches(tiers)
            .required_taints(TaintSet(required))
            .preferred_taints(&preferred);
        if shared {
            request = request.shared_hits(SharedHits::new(&hits).unwrap());
        }
        let policy = Policy::new((), (cost,), DefaultPicker::default()).unwrap();
        let mut selector = Box::new(Selector::<64>::new());
        let Ok(selection) = policy.select(&mut selector, &request, &rows) else {
            // No candidate: every row overloaded or ineligible.
            prop_assert!(rows.iter().all(|r| !r.is_candidate(request.required_taints)));
            return Ok(());
        };
        let costs: Vec<(usize, f64)> = selector.last_costs().collect();
        let candidates: Vec<&Row> = costs.iter().map(|&(i, _)| &rows[i]).collect();
        prop_assert_eq!(
            costs.len(),
            rows.iter().filter(|r| r.is_candidate(request.required_taints)).count()
        );
        for &(i, c) in &costs {
            let expected = spec_cost(&cost, &request, &candidates, &rows[i]);
            prop_assert_eq!(c.to_bits(), expected.to_bits(), "row {}: {} against the spec's {}", i, c, expected);
        }
        prop_assert_eq!(selection.cost.to_bits(), costs.iter().map(|c| c.1).fold(f64::INFINITY, |a, b| if b < a { b } else { a }).to_bits());
    }
}
