//! The default policy: Dynamo's default cost function ([`DefaultCost`]) and picker
//! ([`DefaultPicker`]), reproduced exactly (`spec/default-policy.md` sections 2 to 4).

use crate::engine::Policy;
use crate::engine::rng::{self, RandomSource};
use crate::engine::{ComponentError, Pick, PickInput, PickReason, Picker, Scorer};
use crate::vocab::{Candidates, RequestView, WorkerInputs, taint_multiplier};
use crate::vocab::{Label, Leg, PreferredTaint, Role, Row, RowFlags, SharedHits, TaintSet};

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
    /// No decay, shared hits or preferred-taint multiplier: the formula without its extras.
    fn is_plain(&self) -> bool {
        !self.use_decay && self.shared_hits.is_none() && self.preferred.is_empty()
    }

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

    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        let (rows, order) = candidates.raw();
        let mut ctx = self.context(request);
        if ctx.use_decay {
            ctx.min_apt = order
                .iter()
                .map(|&i| load_of(&rows[i as usize], ctx.load_flag).0)
                .min()
                .unwrap_or(0);
        }
        // The common case (no decay, shared hits or preferred taints) gets its own loop, free of
        // the branches those need; both evaluate the same formula in the same order.
        if ctx.is_plain() {
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

    fn score_all_rows(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<usize> {
        if !self.score_all_candidates(request, request.required_taints(), rows, costs) {
            return None;
        }
        for (k, slot) in order.iter_mut().enumerate() {
            #[allow(
                clippy::cast_possible_truncation,
                reason = "rows.len() <= capacity <= u32::MAX"
            )]
            {
                *slot = k as u32;
            }
        }
        Some(rows.len())
    }
}

impl DefaultCost {
    /// The request-wide values of the formula, computed once per selection (`min_apt` is left 0:
    /// it depends on the candidates).
    fn context<'a>(&'a self, request: &RequestView<'a>) -> RowContext<'a> {
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
        // Declared-input checks, once per selection: a group this scorer did not declare (or the
        // row does not carry) reads as absent, exactly as through `RowView`.
        let inputs = request.inputs();
        RowContext {
            cost: self,
            prompt: request.prompt_tokens(),
            per_block: PerBlock::new(request.block_size()),
            rb: request.request_blocks() as f64,
            track,
            c_ovl,
            use_decay: track && self.overlap_score_credit_decay > 0.0,
            min_apt: 0,
            subtract_from_decode: request.role().label() == Label::Decode && !track && c_ovl > 0.0,
            has_tier_matches: request.has_tier_matches().unwrap_or(false),
            shared_hits: request.shared_hits(),
            load_flag: if inputs.contains(WorkerInputs::LOAD) {
                RowFlags::HAS_LOAD.0
            } else {
                u32::MAX
            },
            cache_flag: if inputs.contains(WorkerInputs::CACHE) {
                RowFlags::HAS_CACHE.0
            } else {
                u32::MAX
            },
            cache_declared: inputs.contains(WorkerInputs::CACHE),
            preferred: request.multiplier_taints(),
        }
    }

    /// Admission and this cost for every row of `rows` in one pass, for a policy with no filters,
    /// this cost as its only scorer and no pin, when every row is a candidate: valid, carrying
    /// `required`, not overloaded. Writes `costs[i]` for row `i` and returns `true` when that holds
    /// for every row; returns `false` otherwise, and then `costs` holds nothing the caller may
    /// use (the general pipeline decides, and reports what is wrong).
    ///
    /// The pass needs what makes one branch-free loop possible: every row with the same flags,
    /// no decay, shared hits or preferred taints, a power-of-two block size, counters below 2^52
    /// (converted to `f64` by one OR and one subtraction), weights within the bounds of
    /// [`DefaultCost::costs_are_bounded`] (so every cost is finite without a check), and,
    /// without tier matches, no host or disk blocks. (An estimate of -0.0 is valid but also left
    /// to the general path: the pass checks the estimates' sign and exponent bits.) Under those
    /// conditions it evaluates exactly the formula of [`DefaultCost`] in the same order, so the
    /// costs are identical bit for bit (the corpus and `tests/fused.rs` compare the two paths).
    ///
    /// Never inlined: every caller (Rust hosts, the C ABI) runs this one compiled copy, and its
    /// size buys nothing from inlining.
    #[inline(never)]
    pub(crate) fn score_all_candidates(
        &self,
        request: &RequestView<'_>,
        required: TaintSet,
        rows: &[Row],
        costs: &mut [f64],
    ) -> bool {
        let ctx = self.context(request);
        let Some(first) = rows.first() else {
            return false;
        };
        let flags = first.flags;
        if !ctx.is_plain()
            || ctx.prompt >= EXACT_LIMIT
            || !self.costs_are_bounded()
            || flags.0 & !RowFlags::ALL.0 != 0
            || flags.contains(RowFlags::OVERLOADED)
            || flags.contains(RowFlags::HAS_SPEED)
            || costs.len() < rows.len()
        {
            return false;
        }
        let Some(per_block) = ctx.per_block.reciprocal else {
            return false;
        };
        // Eligibility in its own pass, only when the request requires taints.
        if required != TaintSet::EMPTY && !rows.iter().all(|row| row.taints.contains_all(required))
        {
            return false;
        }
        let credit = if !(ctx.cache_declared && flags.contains(RowFlags::HAS_CACHE)) {
            Mode::CREDIT_NONE
        } else if ctx.has_tier_matches {
            Mode::CREDIT_TIERS
        } else {
            Mode::CREDIT_ESTIMATE
        };
        let load = if !flags.contains(RowFlags::HAS_LOAD) {
            Mode::LOAD_NONE
        } else if self.decode_active_request_weight == 0.0 {
            // `0 * nreq` is `+ 0.0`, which changes no sum of non-negative terms.
            Mode::LOAD_WITHOUT_REQUESTS
        } else {
            Mode::LOAD_WITH_REQUESTS
        };
        let formula = if ctx.subtract_from_decode {
            Mode::SUBTRACT_FROM_DECODE
        } else if ctx.track {
            Mode::TRACKED_PREFILL
        } else {
            Mode::UNTRACKED_PREFILL
        };
        let pass = FusedPass {
            ctx: &ctx,
            per_block,
            flags: flags.0,
            estimates: flags.contains(RowFlags::HAS_CACHE),
        };
        let costs = &mut costs[..rows.len()];
        // One loop per mode, so the loop body has no request-wide branch left.
        macro_rules! dispatch {
            ($($mode:literal)+) => {
                match credit * 9 + load * 3 + formula {
                    $($mode => pass.run::<$mode>(rows, costs),)+
                    _ => false,
                }
            };
        }
        dispatch!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26)
    }

    /// Whether every cost of the fused pass is finite without a check: the credit weights finite
    /// and `>= 0` (so a credit is `>= 0`, NaN or `+inf`, and `max(0, x - credit)` lies in
    /// `[0, x]`), and the two weights that multiply unbounded terms in `[0, WEIGHT_LIMIT]`. Every
    /// other factor is below 2^53 (counters below 2^52, `1/bs <= 1`), so each summed term is below
    /// 2^53 * 1e270 and the sum far below `f64::MAX`. Validated knobs always qualify; a policy
    /// composed from unvalidated ones may not, and then the general pipeline checks every cost.
    fn costs_are_bounded(&self) -> bool {
        let credit = |w: f64| w.is_finite() && w >= 0.0;
        let factor = |w: f64| (0.0..=WEIGHT_LIMIT).contains(&w);
        credit(self.overlap_score_credit)
            && credit(self.host_cache_hit_weight)
            && credit(self.disk_cache_hit_weight)
            && factor(self.prefill_load_scale)
            && factor(self.decode_active_request_weight)
    }
}

/// The fused loop's modes: `credit * 9 + load * 3 + formula`, fixed per selection.
struct Mode;

impl Mode {
    /// No credit: CACHE is not read (not declared, or rows without a cache entry).
    const CREDIT_NONE: u8 = 0;
    /// No tier matches: the estimate is the device credit; host and disk blocks must be 0.
    const CREDIT_ESTIMATE: u8 = 1;
    /// Tier matches: device, host and disk blocks.
    const CREDIT_TIERS: u8 = 2;
    /// Rows without a load projection.
    const LOAD_NONE: u8 = 0;
    /// A load projection, and `decode_active_request_weight` 0 (`nreq` is not read).
    const LOAD_WITHOUT_REQUESTS: u8 = 1;
    /// A load projection with `nreq` charged.
    const LOAD_WITH_REQUESTS: u8 = 2;
    /// `max(0, dcb - credit) + req_cost`.
    const SUBTRACT_FROM_DECODE: u8 = 0;
    /// The prefill formula with `raw_tokens` from the prompt and the load.
    const TRACKED_PREFILL: u8 = 1;
    /// The prefill formula with `raw_tokens = 0`.
    const UNTRACKED_PREFILL: u8 = 2;
}

/// The largest `prefill_load_scale` and `decode_active_request_weight` the fused pass takes
/// (see [`DefaultCost::costs_are_bounded`]).
const WEIGHT_LIMIT: f64 = 1e270;

/// Integers below this convert to `f64` exactly through [`exact_f64`].
const EXACT_LIMIT: u64 = 1 << 52;

/// `x as f64` for `x < 2^52`: `x` placed in the mantissa of `2^52`, minus `2^52`. Exact, and
/// cheaper than the general conversion (an OR and a subtraction, no range branch).
#[inline(always)]
fn exact_f64(x: u64) -> f64 {
    const TWO_52: f64 = 4_503_599_627_370_496.0;
    f64::from_bits(x | TWO_52.to_bits()) - TWO_52
}

/// The fused admission + cost pass of [`DefaultCost::score_all_candidates`].
struct FusedPass<'a> {
    ctx: &'a RowContext<'a>,
    /// `1 / block_size`, exact for a power-of-two block size.
    per_block: f64,
    /// The flags every row must carry.
    flags: u32,
    /// Whether rows carry an estimate to validate.
    estimates: bool,
}

impl FusedPass<'_> {
    /// The loop of one [`Mode`] (`MODE = credit * 9 + load * 3 + formula`).
    #[allow(
        clippy::inline_always,
        reason = "inlined into each dispatch arm, so every mode gets its own branch-free loop"
    )]
    #[allow(
        clippy::needless_bitwise_bool,
        clippy::manual_range_contains,
        reason = "branch-free folds keep the loop free of branches and vectorizable"
    )]
    #[inline(always)]
    fn run<const MODE: u8>(&self, rows: &[Row], costs: &mut [f64]) -> bool {
        let (credit_mode, load_mode, formula) = (MODE / 9, MODE / 3 % 3, MODE % 3);
        let ctx = self.ctx;
        let k = ctx.cost;
        let prompt = exact_f64(ctx.prompt);
        // Each fold collects, without branching, something that sends the selection back to the
        // general pipeline: a row that is not a plain candidate, a counter too large for
        // `exact_f64`, an invalid estimate, host or disk blocks without tier matches.
        let (mut odd, mut high, mut signs, mut tiers) = (0u32, 0u64, 0u64, 0u64);
        for (row, cost) in rows.iter().zip(costs.iter_mut()) {
            odd |= row.flags.0 ^ self.flags;
            let estimate = row.effective_blocks;
            // `0 <= estimate <= MAX` from the bits: the sign bit is clear and the exponent is not
            // all ones (adding 1 to it carries into the sign bit). -0.0 counts as invalid here
            // and goes to the general path, which accepts it.
            let bits = estimate.to_bits();
            signs |= bits | bits.wrapping_add(1 << 52);
            // `c_ovl * decay * device` with decay 1, and no shared term: `+ 0.0` to a sum of
            // non-negative terms changes nothing.
            let (credit, effective_tokens) = if credit_mode == Mode::CREDIT_TIERS {
                high |= row.effective_tokens;
                let credit = ctx.c_ovl * f64::from(row.device_blocks)
                    + k.host_cache_hit_weight * f64::from(row.host_blocks)
                    + k.disk_cache_hit_weight * f64::from(row.disk_blocks);
                (credit, exact_f64(row.effective_tokens))
            } else if credit_mode == Mode::CREDIT_ESTIMATE {
                // Without tier matches no worker has host or disk blocks of this request (rows
                // carry the estimate), so both terms are `+ 0.0`. A row that has some anyway
                // goes to the general path.
                high |= row.effective_tokens;
                tiers |= u64::from(row.host_blocks) | (u64::from(row.disk_blocks) << 32);
                (ctx.c_ovl * estimate, exact_f64(row.effective_tokens))
            } else {
                (0.0, 0.0)
            };
            let (prefill, decode_blocks, request_cost) = if load_mode == Mode::LOAD_NONE {
                (0.0, 0.0, 0.0)
            } else {
                high |= row.active_prefill_tokens | row.active_decode_blocks;
                let request_cost = if load_mode == Mode::LOAD_WITH_REQUESTS {
                    high |= row.active_requests;
                    k.decode_active_request_weight * exact_f64(row.active_requests)
                } else {
                    0.0
                };
                (
                    exact_f64(row.active_prefill_tokens),
                    exact_f64(row.active_decode_blocks),
                    request_cost,
                )
            };
            // `+ request_cost` is skipped when it is `+ 0.0` (no change to the non-negative sum).
            let charged = |cost: f64| {
                if load_mode == Mode::LOAD_WITH_REQUESTS {
                    cost + request_cost
                } else {
                    cost
                }
            };
            *cost = if formula == Mode::SUBTRACT_FROM_DECODE {
                charged(non_negative(decode_blocks - credit))
            } else {
                // Both terms are integers below 2^52, so the sum is the exact integer the general
                // path converts: `apt + max(P, E_tokens)`.
                let raw_tokens = if formula == Mode::UNTRACKED_PREFILL {
                    0.0
                } else if load_mode == Mode::LOAD_NONE {
                    prompt
                } else {
                    prefill
                        + if prompt > effective_tokens {
                            prompt
                        } else {
                            effective_tokens
                        }
                };
                charged(
                    k.prefill_load_scale * non_negative(raw_tokens * self.per_block - credit)
                        + decode_blocks,
                )
            };
        }
        // Rows without a cache entry need no valid estimate.
        let estimates_ok = signs >> 63 == 0;
        odd == 0 && tiers == 0 && high < EXACT_LIMIT && (estimates_ok || !self.estimates)
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
            for (c, chunk) in costs.chunks(PICK_CHUNK).enumerate() {
                // A chunk whose every cost exceeds the best so far can neither lower it nor tie
                // it, so it changes nothing and draws nothing: skip it after a branch-free min.
                if chunk_min(chunk) > best_cost {
                    continue;
                }
                for (j, &cost) in chunk.iter().enumerate() {
                    if cost < best_cost {
                        best = c * PICK_CHUNK + j;
                        best_cost = cost;
                        ties = 1;
                    } else if cost == best_cost {
                        ties += 1;
                        if rng::index(rng, ties) == 0 {
                            best = c * PICK_CHUNK + j;
                        }
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

/// Costs per chunk of the minimum-cost scan.
const PICK_CHUNK: usize = 16;

/// The least value of `chunk` (NaN ignored, `+inf` when empty), in four independent lanes so
/// the comparisons do not wait on each other.
#[inline]
fn chunk_min(chunk: &[f64]) -> f64 {
    let min = |a: f64, b: f64| if b < a { b } else { a };
    let mut lanes = [f64::INFINITY; 4];
    let quads = chunk.chunks_exact(4);
    let rest = quads.remainder();
    for quad in quads {
        for (lane, &x) in lanes.iter_mut().zip(quad) {
            *lane = min(*lane, x);
        }
    }
    let low = min(min(lanes[0], lanes[1]), min(lanes[2], lanes[3]));
    rest.iter().fold(low, |low, &x| min(low, x))
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
            *p = crate::vocab::math::exp(c / magnitude * scale - offset);
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
    use super::DefaultCost;
    use super::softmax_index;
    use crate::engine::Scorer;
    use crate::vocab::{Cache, Load, Request, RequestView, Row, RowFlags, TaintSet, WorkerKey};

    fn fleet() -> [Row; 5] {
        core::array::from_fn(|i| {
            let i = i as u64;
            Row::new(WorkerKey::new(i, 0))
                .with_cache(Cache {
                    device_blocks: 2,
                    effective_blocks: 1.5 * i as f64,
                    effective_tokens: 24 * i,
                    ..Cache::default()
                })
                .with_load(Load {
                    active_prefill_tokens: 100 * i,
                    active_decode_blocks: 7 * i,
                    active_requests: i,
                    ..Load::default()
                })
        })
    }

    /// Whether the fused pass takes `rows` for `request`, and the costs it wrote.
    fn fused(request: &Request<'_>, rows: &[Row]) -> (bool, [f64; 5]) {
        let cost = DefaultCost::default();
        let view = RequestView::new(request, cost.inputs(request.leg()));
        let mut costs = [f64::NAN; 5];
        let taken = cost.score_all_candidates(&view, request.required_taints, rows, &mut costs);
        (taken, costs)
    }

    #[test]
    fn the_fused_pass_takes_plain_fleets_and_returns_the_rest() {
        let request = Request::new(64, 16);
        let (taken, costs) = fused(&request, &fleet());
        assert!(taken);
        // Row 2: raw = 200 + max(64, 48) = 264 tokens = 16.5 blocks, credit 3: 13.5 + 14.
        assert_eq!(costs[2], 27.5);

        let with = |edit: fn(&mut Row)| {
            let mut rows = fleet();
            edit(&mut rows[3]);
            fused(&request, &rows).0
        };
        assert!(!with(|r| *r = r.overloaded(true)), "an overloaded row");
        assert!(
            !with(|r| r.flags = RowFlags(r.flags.0 & !RowFlags::HAS_LOAD.0)),
            "mixed flags"
        );
        assert!(
            !with(|r| r.flags = RowFlags(r.flags.0 | 1 << 20)),
            "unknown flag bits"
        );
        assert!(
            !with(|r| r.active_decode_blocks = 1 << 52),
            "a counter of 2^52"
        );
        assert!(!with(|r| r.effective_blocks = f64::NAN), "a NaN estimate");
        assert!(!with(|r| r.effective_blocks = -0.5), "a negative estimate");
        assert!(
            !with(|r| r.active_prefill_tokens = u64::MAX),
            "a saturating sum"
        );
        assert!(
            !with(|r| r.effective_blocks = -0.0),
            "-0.0 (valid, left to the general path)"
        );
        assert!(
            !with(|r| r.host_blocks = 1),
            "host blocks without tier matches"
        );
        let mut rows = fleet();
        rows[3].disk_blocks = 1;
        let tiers = Request::new(64, 16).has_tier_matches(true);
        assert!(fused(&tiers, &rows).0, "disk blocks with tier matches");
        assert!(
            !fused(&Request::new(64, 17), &fleet()).0,
            "a block size that is no power of two"
        );
        let required = Request::new(64, 16).required_taints(TaintSet(1));
        assert!(
            !fused(&required, &fleet()).0,
            "a required taint the rows lack"
        );
        let rows = fleet().map(|r| r.with_taints(TaintSet(3)));
        assert!(fused(&required, &rows).0, "a required taint every row has");
    }

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
