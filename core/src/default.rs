//! The default policy: Dynamo's default cost function ([`DefaultCost`]) and picker
//! ([`DefaultPicker`]), reproduced exactly (`spec/default-policy.md` sections 2 to 4).

use crate::component::{ComponentError, Pick, PickInput, PickReason, Picker, Scorer};
use crate::inputs::{Candidates, RequestView, WorkerInputs, taint_multiplier};
use crate::policy::Policy;
use crate::rng::{self, RandomSource};
use crate::types::{Label, Leg, PreferredTaint, Role, Row, RowFlags, SharedHits};

/// The default policy's type: no filters, the default cost, the default picker.
pub type DefaultPolicy = Policy<(), (DefaultCost,), DefaultPicker>;

/// Dynamo's default cost: prefill blocks not covered by cache credit, plus decode load, plus an
/// optional per-request charge, times the preferred-taint multiplier.
///
/// Per request (once per selection): `RB = max(1, ceil(P/bs))`; `plain_decode` = decode role
/// without conditional disaggregation; `c_ovl` = 0 when plain decode and untracked, else
/// `overlap_score_credit`; decay is on when prefill is tracked and `overlap_score_credit_decay > 0`,
/// relative to the minimum `apt` among the candidates; the decode label subtracts credit from
/// decode blocks when prefill is untracked and `c_ovl > 0`.
///
/// Per candidate, in this order, all in f64:
///
/// ```text
/// device   = has_tier_matches ? dev : E_blocks
/// shared   = shared_cache_multiplier * hits_beyond(max(0, round(device)))
/// decay    = use_decay ? 1 / (1 + d * (((apt - min_apt) / bs) / RB)) : 1
/// credit   = c_ovl*decay*device + host_w*host + disk_w*disk + shared
/// req_cost = decode_active_request_weight * nreq
/// cost     = subtract_from_decode ? max(0, dcb - credit) + req_cost
///          : prefill_load_scale * max(0, raw_tokens/bs - credit) + dcb + req_cost
/// cost    *= m (the preferred-taint multiplier, when present)
/// ```
///
/// with `raw_tokens` = 0 untracked, `apt + max(P, E_tokens)` with a load projection, else `P`.
/// It declares `LOAD | PREFERRED_TAINT`, and `CACHE` only when it is not plain decode and the
/// credit is non-zero; without `CACHE` every credit term is 0.
///
/// # Examples
///
/// Worked number 1 of the spec: `P=64, bs=16, E_tokens=96, dev=6, apt=16, dcb=5`, scale 2.
///
/// ```
/// use libroute_core::*;
/// let cost = DefaultCost { prefill_load_scale: 2.0, ..DefaultCost::default() };
/// let policy = Policy::new((), (cost,), DefaultPicker::default()).unwrap();
/// let row = Row::new(WorkerKey::new(0, 0))
///     .with_cache(Cache { device_blocks: 6, effective_blocks: 6.0, effective_tokens: 96, ..Cache::default() })
///     .with_load(Load { active_prefill_tokens: 16, active_decode_blocks: 5, ..Load::default() });
/// let req = Request::new(64, 16).role(Role::Prefill).has_tier_matches(true);
/// let pick = policy.select(&mut Selector::<4>::new(), &req, &[row]).unwrap();
/// assert_eq!(pick.cost, 7.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DefaultCost {
    /// Credit per cached device block (`c_ovl` before the decode rule), default 1.0.
    pub overlap_score_credit: f64,
    /// `d`: how fast credit decays with excess prefill load, default 0 (off).
    pub overlap_score_credit_decay: f64,
    /// Weight of uncovered prefill blocks, default 1.0.
    pub prefill_load_scale: f64,
    /// Cost per active request, default 0.
    pub decode_active_request_weight: f64,
    /// Credit per host-memory block, default 0.75.
    pub host_cache_hit_weight: f64,
    /// Credit per disk block, default 0.25.
    pub disk_cache_hit_weight: f64,
    /// Credit per shared-cache hit beyond the device overlap, default 0.
    pub shared_cache_multiplier: f64,
}

impl Default for DefaultCost {
    fn default() -> Self {
        Self {
            overlap_score_credit: 1.0,
            overlap_score_credit_decay: 0.0,
            prefill_load_scale: 1.0,
            decode_active_request_weight: 0.0,
            host_cache_hit_weight: 0.75,
            disk_cache_hit_weight: 0.25,
            shared_cache_multiplier: 0.0,
        }
    }
}

/// `max(0, x)`, with NaN giving 0 (as the spec's `max(x, 0)`).
#[inline]
fn non_negative(x: f64) -> f64 {
    if x > 0.0 { x } else { 0.0 }
}

/// Division by the block size: a multiplication by its reciprocal when it is a power of two,
/// which gives the identical result (scaling by `2^-k` is exact for these non-negative values,
/// which are never subnormal), and a true division otherwise.
#[derive(Clone, Copy)]
struct PerBlock {
    block_size: f64,
    reciprocal: Option<f64>,
}

impl PerBlock {
    fn new(block_size: u32) -> Self {
        let reciprocal = block_size
            .is_power_of_two()
            .then(|| 1.0 / f64::from(block_size));
        Self {
            block_size: f64::from(block_size),
            reciprocal,
        }
    }

    #[inline]
    fn of(self, x: f64) -> f64 {
        match self.reciprocal {
            Some(r) => x * r,
            None => x / self.block_size,
        }
    }
}

/// `(apt, dcb, nreq)` of a row, zeros without a (declared) load projection.
#[inline]
fn load_of(row: &Row, load_flag: u32) -> (u64, u64, u64) {
    if row.flags.0 & load_flag == load_flag {
        (
            row.active_prefill_tokens,
            row.active_decode_blocks,
            row.active_requests,
        )
    } else {
        (0, 0, 0)
    }
}

/// Everything the default cost needs per row, computed once per selection.
#[allow(
    clippy::struct_excessive_bools,
    reason = "the spec's request-wide switches, named as in the spec"
)]
struct RowContext<'a> {
    cost: &'a DefaultCost,
    prompt: u64,
    per_block: PerBlock,
    rb: f64,
    track: bool,
    c_ovl: f64,
    use_decay: bool,
    min_apt: u64,
    subtract_from_decode: bool,
    has_tier_matches: bool,
    shared_hits: Option<SharedHits<'a>>,
    load_flag: u32,
    cache_flag: u32,
    cache_declared: bool,
    preferred: &'a [PreferredTaint],
}

impl RowContext<'_> {
    /// The spec's per-candidate formula. `EXTRAS` enables decay, shared hits and the taint
    /// multiplier; without it they are known to be off (decay 1, shared 0, no multiplier).
    #[inline]
    fn row_cost<const EXTRAS: bool>(&self, row: &Row) -> f64 {
        let k = self.cost;
        let (apt, dcb, nreq) = load_of(row, self.load_flag);
        let loaded = row.flags.0 & self.load_flag == self.load_flag;
        let (credit, effective_tokens) = if self.cache_declared {
            // A row without a cache entry reads as zeros in every tier.
            let (dev, host, disk, estimate, tokens) =
                if row.flags.0 & self.cache_flag == self.cache_flag {
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
            let device = if self.has_tier_matches {
                f64::from(dev)
            } else {
                estimate
            };
            let shared = match self.shared_hits {
                Some(hits) if EXTRAS => {
                    k.shared_cache_multiplier * to_f64(hits.hits_beyond(block_position(device)))
                }
                _ => 0.0,
            };
            let decay = if EXTRAS && self.use_decay {
                let excess_blocks = self.per_block.of(to_f64(apt.saturating_sub(self.min_apt)));
                1.0 / (1.0 + k.overlap_score_credit_decay * (excess_blocks / self.rb))
            } else {
                1.0
            };
            let credit = self.c_ovl * decay * device
                + k.host_cache_hit_weight * f64::from(host)
                + k.disk_cache_hit_weight * f64::from(disk)
                + shared;
            (credit, tokens)
        } else {
            (0.0, 0)
        };
        let decode_blocks = to_f64(dcb);
        let request_cost = k.decode_active_request_weight * to_f64(nreq);
        let base = if self.subtract_from_decode {
            non_negative(decode_blocks - credit) + request_cost
        } else {
            let raw_tokens = if !self.track {
                0
            } else if loaded {
                let covered = if self.prompt > effective_tokens {
                    self.prompt
                } else {
                    effective_tokens
                };
                apt.saturating_add(covered)
            } else {
                self.prompt
            };
            k.prefill_load_scale * non_negative(self.per_block.of(to_f64(raw_tokens)) - credit)
                + decode_blocks
                + request_cost
        };
        if EXTRAS {
            if let Some(m) = taint_multiplier(self.preferred, row.taints) {
                return base * m;
            }
        }
        base
    }
}

/// `x as f64`, through the one-instruction signed conversion when the value allows it (the
/// result is identical: both round to nearest).
#[inline]
fn to_f64(x: u64) -> f64 {
    match i64::try_from(x) {
        Ok(signed) => signed as f64,
        Err(_) => x as f64,
    }
}

/// `round(x)` half away from zero, clamped at 0, as a block position.
#[inline]
fn block_position(x: f64) -> u64 {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "float-to-int `as` saturates; the value is clamped at 0 first"
    )]
    let position = non_negative(libm::round(x)) as u64;
    position
}

const fn plain_decode(leg: Leg) -> bool {
    matches!(leg.role, Role::Decode) && !leg.conditional_disagg
}

impl Scorer for DefaultCost {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        let base = WorkerInputs::LOAD | WorkerInputs::PREFERRED_TAINT;
        if !plain_decode(leg) && self.overlap_score_credit != 0.0 {
            base | WorkerInputs::CACHE
        } else {
            base
        }
    }

    #[allow(
        clippy::too_many_lines,
        reason = "the spec's formula, kept in the spec's order in one place"
    )]
    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        let prompt = request.prompt_tokens();
        let rb = request.request_blocks() as f64;
        let track = request.track_prefill_tokens();
        let leg = Leg {
            role: request.role(),
            conditional_disagg: request.conditional_disagg(),
        };
        let c_ovl = if plain_decode(leg) && !track {
            0.0
        } else {
            self.overlap_score_credit
        };
        let use_decay = track && self.overlap_score_credit_decay > 0.0;
        let subtract_from_decode = request.role().label() == Label::Decode && !track && c_ovl > 0.0;
        let has_tier_matches = request.has_tier_matches().unwrap_or(false);
        let shared_hits = request.shared_hits();
        // Declared-input checks, once per selection: a group this scorer did not declare (or the
        // row does not carry) reads as absent, exactly as through `RowView`.
        let inputs = request.inputs();
        let (rows, order) = candidates.raw();
        let load_flag = if inputs.contains(WorkerInputs::LOAD) {
            RowFlags::HAS_LOAD.0
        } else {
            u32::MAX
        };
        let min_apt = if use_decay {
            order
                .iter()
                .map(|&i| load_of(&rows[i as usize], load_flag).0)
                .min()
                .unwrap_or(0)
        } else {
            0
        };
        let ctx = RowContext {
            cost: self,
            prompt,
            per_block: PerBlock::new(request.block_size()),
            rb,
            track,
            c_ovl,
            use_decay,
            min_apt,
            subtract_from_decode,
            has_tier_matches,
            shared_hits,
            load_flag,
            cache_flag: if inputs.contains(WorkerInputs::CACHE) {
                RowFlags::HAS_CACHE.0
            } else {
                u32::MAX
            },
            cache_declared: inputs.contains(WorkerInputs::CACHE),
            preferred: request.multiplier_taints(),
        };
        // The common case (no decay, shared hits or preferred taints) gets its own loop, free of
        // the branches those need; both evaluate the same formula in the same order.
        if !use_decay && shared_hits.is_none() && ctx.preferred.is_empty() {
            for (cost, &i) in costs.iter_mut().zip(order) {
                *cost = ctx.row_cost::<false>(&rows[i as usize]);
            }
        } else {
            for (cost, &i) in costs.iter_mut().zip(order) {
                *cost = ctx.row_cost::<true>(&rows[i as usize]);
            }
        }
        Ok(())
    }
}

/// Dynamo's default picker: the minimum cost with uniform ties at temperature 0, softmax
/// sampling above it (spec section 4).
///
/// - `T == 0`: one pass; a strictly lower cost resets the tie count `k` to 1, an equal cost
///   increments it and takes the row when a draw in `[0, k)` is 0 (reservoir sampling: uniform
///   over the tied minima, one draw per tie, none without a tie).
/// - `T > 0`: costs are scaled to `[0, 1]` (by magnitude when their range overflows), weighted
///   `exp(-scaled / T)`, normalized, and one draw `u` in `[0, 1)` takes the first row whose
///   cumulative probability reaches `u` (the last row if rounding leaves `u` beyond them all).
///   `T = +inf` is uniform.
///
/// # Examples
///
/// ```
/// use libroute_core::*;
/// let policy = Policy::new((), (DefaultCost::default(),), DefaultPicker { temperature: 0.0 })
///     .unwrap()
///     .with_seed(Some(42));
/// let rows = [10, 20, 30].map(|id| Row::new(WorkerKey::new(id, 0)));
/// let mut selector = Selector::<4>::new();
/// let first = policy.select(&mut selector, &Request::new(16, 16), &rows).unwrap();
/// assert_eq!(first.worker.worker_id, 10);
/// assert_eq!(first.reason, PickReason::MinCost { ties: 3 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DefaultPicker {
    /// Sampling temperature; 0 picks a minimum.
    pub temperature: f64,
}

impl Picker for DefaultPicker {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }

    fn pick(
        &self,
        input: &PickInput<'_>,
        work: &mut [f64],
        rng: &mut dyn RandomSource,
    ) -> Result<Pick, ComponentError> {
        let costs = input.costs;
        if self.temperature == 0.0 {
            let mut best = 0;
            let mut best_cost = f64::INFINITY;
            let mut ties: u64 = 0;
            for (k, &cost) in costs.iter().enumerate() {
                if cost < best_cost {
                    best = k;
                    best_cost = cost;
                    ties = 1;
                } else if cost == best_cost {
                    ties += 1;
                    if rng::index(rng, ties) == 0 {
                        best = k;
                    }
                }
            }
            #[allow(clippy::cast_possible_truncation, reason = "ties <= rows <= u32::MAX")]
            return Ok(Pick {
                index: best,
                reason: PickReason::MinCost { ties: ties as u32 },
            });
        }
        let probabilities = &mut work[..costs.len()];
        let index = softmax_index(costs, self.temperature, rng::unit_f64(rng), probabilities);
        Ok(Pick {
            index,
            reason: PickReason::Sampled {
                probability: probabilities[index],
            },
        })
    }
}

/// The temperature sampler: fills `probabilities` and returns the row `sample` falls in.
///
/// The arithmetic follows Dynamo's evaluation order exactly: with `mag` 1 for a finite range
/// (else the larger magnitude), `scale = -1 / ((hi/mag - lo/mag) * T)`, and each weight is
/// `exp(c/mag * scale - (lo/mag) * scale)`.
fn softmax_index(costs: &[f64], temperature: f64, sample: f64, probabilities: &mut [f64]) -> usize {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for &c in costs {
        if c < lo {
            lo = c;
        }
        if c > hi {
            hi = c;
        }
    }
    if lo == hi {
        probabilities.fill(1.0 / costs.len() as f64);
    } else {
        let range = hi - lo;
        let magnitude = if range.is_finite() {
            1.0
        } else {
            let (a, b) = (libm::fabs(lo), libm::fabs(hi));
            if a > b { a } else { b }
        };
        let lo_normalized = lo / magnitude;
        let scale = -1.0 / ((hi / magnitude - lo_normalized) * temperature);
        let offset = lo_normalized * scale;
        for (p, &c) in probabilities.iter_mut().zip(costs) {
            *p = crate::math::exp(c / magnitude * scale - offset);
        }
    }
    let mut sum = 0.0;
    for p in probabilities.iter() {
        sum += *p;
    }
    for p in probabilities.iter_mut() {
        *p /= sum;
    }
    let mut cumulative = 0.0;
    for (k, p) in probabilities.iter().enumerate() {
        cumulative += *p;
        if sample <= cumulative {
            return k;
        }
    }
    costs.len() - 1
}

#[cfg(test)]
mod tests {
    use super::softmax_index;

    #[test]
    fn extreme_finite_costs_are_ordered() {
        // Spec section 4: costs (-MAX, +MAX), T = 1, u = 0.6 must return row 0.
        let mut p = [0.0; 2];
        assert_eq!(softmax_index(&[-f64::MAX, f64::MAX], 1.0, 0.6, &mut p), 0);
        assert!((p[0] - 1.0 / (1.0 + (-1.0f64).exp())).abs() < 1e-15);
    }

    #[test]
    fn infinite_temperature_is_uniform() {
        let mut p = [0.0; 3];
        softmax_index(&[0.0, 5.0, 100.0], f64::INFINITY, 0.5, &mut p);
        assert_eq!(p, [1.0 / 3.0; 3]);
    }

    #[test]
    fn equal_costs_are_uniform_and_rounding_falls_back_to_the_last_row() {
        let mut p = [0.0; 3];
        assert_eq!(softmax_index(&[2.0; 3], 0.7, 0.0, &mut p), 0);
        assert_eq!(
            softmax_index(&[2.0; 3], 0.7, 0.999_999_999_999_999_9, &mut p),
            2
        );
        assert_eq!(softmax_index(&[2.0; 3], 0.7, 0.5, &mut p), 1);
    }
}
