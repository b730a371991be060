//! The default policy: Dynamo's default cost function ([`DefaultCost`]) and picker
//! ([`DefaultPicker`]), reproduced exactly (`spec/default-policy.md` sections 2 to 4).

use crate::engine::rng::{self, RandomSource};
use crate::engine::{ComponentError, OnePass, Pick, PickInput, PickReason, Picker, Scorer};
use crate::engine::{LEFT_OUT, Policy, compact_left_out};
use crate::vocab::SharedHits;
use crate::vocab::TaintSet;
use crate::vocab::math::{EXACT_LIMIT, exact_f64};
use crate::vocab::{Candidates, RequestView, WorkerInputs, any_invalid_speed, taint_multiplier};
use crate::vocab::{Label, Leg, PreferredTaint, Role, Row, RowFlags, RowLimits, RowRule};
use crate::vocab::{for_each_odd_row, tidy_reference};

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
    /// The reciprocal, or NaN (unused: [`Mode::DIVIDE`] divides instead).
    inverse: f64,
}

impl PerBlock {
    fn new(block_size: u32) -> Self {
        let reciprocal = block_size
            .is_power_of_two()
            .then(|| 1.0 / f64::from(block_size));
        Self {
            block_size: f64::from(block_size),
            reciprocal,
            inverse: reciprocal.unwrap_or(f64::NAN),
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
    /// `HAS_LOAD`, or `u32::MAX` (no valid row has every flag) when LOAD is not declared.
    load_flag: u32,
    /// `HAS_CACHE`, or `u32::MAX` when CACHE is not declared.
    cache_flag: u32,
    cache_declared: bool,
    preferred: &'a [PreferredTaint],
}

impl RowContext<'_> {
    /// The request-wide switches as a [`Mode`]; `exact` and `requests` as the caller decides.
    fn mode(&self, exact: bool, requests: bool) -> u16 {
        let credit = if !self.cache_declared {
            Mode::CREDIT_NONE
        } else if self.has_tier_matches {
            Mode::CREDIT_TIERS
        } else {
            Mode::CREDIT_ESTIMATE
        };
        let formula = if self.subtract_from_decode {
            Mode::SUBTRACT_FROM_DECODE
        } else if self.track {
            Mode::TRACKED_PREFILL
        } else {
            Mode::UNTRACKED_PREFILL
        };
        // The general pipeline takes decay and shared hits with the multiplier; the one-pass
        // steps decline them and take the multiplier alone.
        let credit_extras = self.use_decay || self.shared_hits.is_some();
        let extras = credit_extras || !self.preferred.is_empty();
        credit
            | formula << 2
            | if requests { Mode::REQUESTS } else { 0 }
            | if extras { Mode::EXTRAS } else { 0 }
            | if credit_extras {
                Mode::CREDIT_EXTRAS
            } else {
                0
            }
            | if exact { Mode::EXACT } else { 0 }
            | if self.per_block.reciprocal.is_none() {
                Mode::DIVIDE
            } else {
                0
            }
    }
}

/// The request-wide switches of [`row_cost`], fixed per selection and passed as a const
/// generic, so each combination compiles to its own loop with no request-wide branch left:
/// `credit | formula << 2 | REQUESTS | EXTRAS | EXACT | DIVIDE | UNIFORM | CREDIT_EXTRAS`.
struct Mode;

impl Mode {
    /// No credit: CACHE is not declared.
    const CREDIT_NONE: u16 = 0;
    /// No tier matches: the estimate `E_blocks` is the device credit.
    const CREDIT_ESTIMATE: u16 = 1;
    /// Tier matches: device blocks.
    const CREDIT_TIERS: u16 = 2;
    /// Tier matches all in device memory ([`Request::device_matches_only`]), one-pass steps
    /// only: device blocks, with the host and disk blocks taken as 0 and collected into
    /// `tiers`. A row that holds some after all is costed again with them (see
    /// [`cost_tier_rows`]).
    const CREDIT_DEVICE: u16 = 3;
    /// `max(0, dcb - credit) + req_cost`.
    const SUBTRACT_FROM_DECODE: u16 = 0;
    /// The prefill formula with `raw_tokens` from the prompt and the load.
    const TRACKED_PREFILL: u16 = 1;
    /// The prefill formula with `raw_tokens = 0`.
    const UNTRACKED_PREFILL: u16 = 2;
    /// `req_cost` is charged. Without it the weight is 0 and the weights are bounded, so the
    /// term is `+ 0.0` to a non-negative sum, which changes nothing.
    const REQUESTS: u16 = 1 << 4;
    /// Preferred taints are in play (with [`Mode::CREDIT_EXTRAS`], decay and shared hits may be
    /// too); without it they are known to be off (no multiplier, decay 1, shared 0), whose terms
    /// change nothing.
    const EXTRAS: u16 = 1 << 5;
    /// Decay or shared hits are in play (general pipeline only; always with [`Mode::EXTRAS`]).
    const CREDIT_EXTRAS: u16 = 1 << 9;
    /// Counters convert through [`exact_f64`] (valid below 2^52, which the caller checks from
    /// the bits [`row_cost`] collects), else through [`to_f64`].
    const EXACT: u16 = 1 << 6;
    /// The block size is not a power of two: divide by it (a multiplication by the reciprocal
    /// is exact only for powers of two).
    const DIVIDE: u16 = 1 << 7;
    /// The request requires no taint and the first row is not overloaded: every row with the
    /// first row's flags is a candidate with the first row's presence masks, and the loop takes
    /// the few others again (one-pass steps only; see [`admit_and_cost_with`]).
    const UNIFORM: u16 = 1 << 8;
}

/// Calls `$f::<M>($args)` (or `$f::<M, G>($args)` for `$f::<_, G>`) for the runtime mode `$mode`
/// among the listed constants.
macro_rules! dispatch {
    ($mode:expr, $f:ident $args:tt, [$($m:literal)+], $otherwise:expr) => {
        match $mode {
            $($m => $f::<$m> $args,)+
            _ => $otherwise,
        }
    };
    ($mode:expr, $f:ident::<_, $g:ident> $args:tt, [$($m:literal)+], $otherwise:expr) => {
        match $mode {
            $($m => $f::<$m, $g> $args,)+
            _ => $otherwise,
        }
    };
}

/// The preferred-taint multipliers of one selection. The multiplier depends only on which of
/// the preferred taints a row carries, so each of those subsets is computed once by
/// [`taint_multiplier`] itself: all of them up front for up to 3 preferred taints
/// ([`EagerMultipliers`]: at most 8, so the per-row lookup has no branch), on first sight for up
/// to 6, per row beyond.
struct Multipliers<'a> {
    preferred: &'a [PreferredTaint],
    /// 1 to 3 preferred taints: every subset's multiplier.
    eager: Option<EagerMultipliers>,
    /// 4 to 6 preferred taints: the multipliers of the subsets in `known`.
    table: [f64; 64],
    known: u64,
}

/// Every subset's multiplier for 1 to 3 preferred taints, computed up front and only read, so
/// the one-pass loop that reads it may be vectorized.
#[derive(Clone, Copy)]
struct EagerMultipliers {
    table: [f64; 8],
    /// The bit of each preferred taint, 0 past the last, so the subset takes three fixed steps.
    bits: [u64; 3],
}

impl EagerMultipliers {
    /// The table for `preferred`, when it holds 1 to 3 taints.
    fn new(preferred: &[PreferredTaint]) -> Option<Self> {
        if preferred.is_empty() || preferred.len() > 3 {
            return None;
        }
        let mut table = [0.0; 8];
        for (subset, m) in table.iter_mut().enumerate().take(1 << preferred.len()) {
            let mut taints = TaintSet::EMPTY;
            for (j, p) in preferred.iter().enumerate() {
                if subset >> j & 1 == 1 {
                    taints = taints.with(p.taint);
                }
            }
            *m = taint_multiplier(preferred, taints).unwrap_or(1.0);
        }
        let mut bits = [0; 3];
        for (bit, p) in bits.iter_mut().zip(preferred) {
            *bit = TaintSet::EMPTY.with(p.taint).0;
        }
        Some(Self { table, bits })
    }

    #[allow(clippy::inline_always, reason = "inside each mode's loop")]
    #[inline(always)]
    fn lookup(&self, taints: TaintSet) -> f64 {
        let mut subset = 0usize;
        for (j, bit) in self.bits.iter().enumerate() {
            subset |= usize::from(taints.0 & bit != 0) << j;
        }
        self.table[subset]
    }
}

/// Where [`row_cost`] gets a row's preferred-taint multiplier: [`Multipliers`] in general, or
/// their [`EagerMultipliers`], which the one-pass loop reads without writing.
trait MultiplierOf {
    fn of(&mut self, taints: TaintSet) -> Option<f64>;
}

impl MultiplierOf for Multipliers<'_> {
    #[allow(clippy::inline_always, reason = "inside each mode's loop")]
    #[inline(always)]
    fn of(&mut self, taints: TaintSet) -> Option<f64> {
        Multipliers::of(self, taints)
    }
}

impl MultiplierOf for EagerMultipliers {
    #[allow(clippy::inline_always, reason = "inside each mode's loop")]
    #[inline(always)]
    fn of(&mut self, taints: TaintSet) -> Option<f64> {
        Some(self.lookup(taints))
    }
}

impl<'a> Multipliers<'a> {
    fn new(preferred: &'a [PreferredTaint]) -> Self {
        Self {
            preferred,
            eager: EagerMultipliers::new(preferred),
            table: [0.0; 64],
            known: 0,
        }
    }

    #[allow(clippy::inline_always, reason = "inside each mode's loop")]
    #[inline(always)]
    fn of(&mut self, taints: TaintSet) -> Option<f64> {
        if self.preferred.is_empty() {
            return None;
        }
        if let Some(eager) = &self.eager {
            return Some(eager.lookup(taints));
        }
        if self.preferred.len() > 6 {
            return taint_multiplier(self.preferred, taints);
        }
        let mut subset = 0usize;
        for (j, p) in self.preferred.iter().enumerate() {
            subset |= usize::from(taints.contains(p.taint)) << j;
        }
        if self.known >> subset & 1 == 0 {
            self.table[subset] = taint_multiplier(self.preferred, taints)?;
            self.known |= 1 << subset;
        }
        Some(self.table[subset])
    }
}

/// The spec's per-candidate formula (see [`DefaultCost`]); the only place it is written. The
/// general pipeline ([`Scorer::score`]) and the one-pass steps ([`Scorer::score_all_rows`]) both
/// instantiate it. `M` fixes the request-wide switches ([`Mode`]); what varies per row, whether it
/// carries a cache entry or a load projection, is selected per row. With [`Mode::EXACT`] the
/// counters read are OR-ed into `high`, for the caller's check that they are below `2^52`; with
/// [`Mode::CREDIT_DEVICE`] the host and disk blocks (both in one word) into `tiers`.
#[allow(
    clippy::inline_always,
    reason = "inlined into each mode's loop, so every mode is its own branch-free loop"
)]
#[inline(always)]
fn row_cost<const M: u16>(
    ctx: &RowContext<'_>,
    multipliers: &mut impl MultiplierOf,
    row: &Row,
    (load_mask, cache_mask): (u64, u64),
    high: &mut u64,
    tiers: &mut u64,
) -> f64 {
    let (credit_mode, formula) = (M & 3, M >> 2 & 3);
    let (requests, extras, credit_extras) = (
        M & Mode::REQUESTS != 0,
        M & Mode::EXTRAS != 0,
        M & Mode::CREDIT_EXTRAS != 0,
    );
    let (exact, divide) = (M & Mode::EXACT != 0, M & Mode::DIVIDE != 0);
    let convert = |x: u64| if exact { exact_f64(x) } else { to_f64(x) };
    let per_block = |x: f64| {
        if divide {
            x / ctx.per_block.block_size
        } else {
            x * ctx.per_block.inverse
        }
    };
    let k = ctx.cost;
    // A group the row lacks (or the scorer did not declare) reads as zeros, selected by the
    // masks without a branch.
    let apt = row.active_prefill_tokens & load_mask;
    let dcb = row.active_decode_blocks & load_mask;
    let nreq = row.active_requests & load_mask;
    let (credit, effective_tokens) = if credit_mode == Mode::CREDIT_NONE {
        (0.0, 0)
    } else {
        #[allow(clippy::cast_possible_truncation, reason = "all ones or zero")]
        let narrow = cache_mask as u32;
        let device = if credit_mode == Mode::CREDIT_TIERS || credit_mode == Mode::CREDIT_DEVICE {
            f64::from(row.device_blocks & narrow)
        } else {
            f64::from_bits(row.effective_blocks.to_bits() & cache_mask)
        };
        let device_credit = if credit_extras && ctx.use_decay {
            let excess_blocks = ctx.per_block.of(to_f64(apt.saturating_sub(ctx.min_apt)));
            let decay = 1.0 / (1.0 + k.overlap_score_credit_decay * (excess_blocks / ctx.rb));
            ctx.c_ovl * decay * device
        } else {
            // `c_ovl * 1.0 * device`.
            ctx.c_ovl * device
        };
        let credit = if exact
            && (credit_mode == Mode::CREDIT_ESTIMATE || credit_mode == Mode::CREDIT_DEVICE)
        {
            // Without tier matches no worker holds host or disk blocks of the request (rows
            // carry the estimate), so both terms are `+ 0.0`, which changes no result (see
            // `shared` below). They are not read, only collected (one 64-bit load) to be
            // checked 0: into `high`, where any bit of the two sets the top bit (`w | -w` for
            // `w != 0`). With tier matches all in device memory the same holds for every row
            // that holds none; the word goes into `tiers`, and a row that holds some is
            // costed again after the pass.
            let held = (u64::from(row.host_blocks) | u64::from(row.disk_blocks) << 32) & cache_mask;
            if credit_mode == Mode::CREDIT_ESTIMATE {
                *high |= held | held.wrapping_neg();
            } else {
                *tiers |= held;
            }
            device_credit
        } else {
            device_credit
                + k.host_cache_hit_weight * f64::from(row.host_blocks & narrow)
                + k.disk_cache_hit_weight * f64::from(row.disk_blocks & narrow)
        };
        let credit = match ctx.shared_hits {
            Some(hits) if credit_extras => {
                credit
                    + k.shared_cache_multiplier * to_f64(hits.hits_beyond(block_position(device)))
            }
            // `+ 0.0`, which changes no credit: `-0.0 + 0.0` is `+0.0`, and the credit is only
            // ever subtracted from a value that is not `-0.0`.
            _ => credit,
        };
        (credit, row.effective_tokens & cache_mask)
    };
    if exact {
        *high |= apt | dcb | effective_tokens | if requests { nreq } else { 0 };
    }
    let decode_blocks = convert(dcb);
    let charged = |cost: f64| {
        if requests {
            cost + k.decode_active_request_weight * convert(nreq)
        } else {
            cost
        }
    };
    let base = if formula == Mode::SUBTRACT_FROM_DECODE {
        charged(non_negative(decode_blocks - credit))
    } else {
        // `apt + max(P, E_tokens)` with a load projection, `P` without: `apt` and the masked
        // `E_tokens` are 0 without one, so the one expression gives both.
        let covered = effective_tokens & load_mask;
        let raw_tokens = if formula == Mode::UNTRACKED_PREFILL {
            0.0
        } else if exact {
            // Both terms are integers below 2^52, so the sum is the exact integer the general
            // conversion gives.
            let (prompt, covered) = (exact_f64(ctx.prompt), exact_f64(covered));
            exact_f64(apt) + if prompt > covered { prompt } else { covered }
        } else {
            to_f64(apt.saturating_add(ctx.prompt.max(covered)))
        };
        charged(k.prefill_load_scale * non_negative(per_block(raw_tokens) - credit) + decode_blocks)
    };
    if extras {
        if let Some(m) = multipliers.of(row.taints) {
            return base * m;
        }
    }
    base
}

impl RowContext<'_> {
    /// All ones when `row` carries the (declared) load projection, resp. cache entry, else 0.
    #[inline]
    fn masks(&self, row: &Row) -> (u64, u64) {
        let flags = row.flags.0;
        (
            0u64.wrapping_sub(u64::from(flags & self.load_flag == self.load_flag)),
            0u64.wrapping_sub(u64::from(flags & self.cache_flag == self.cache_flag)),
        )
    }
}

/// The general pipeline's loop: the cost of each candidate of `order`.
#[allow(clippy::inline_always, reason = "one loop per mode")]
#[inline(always)]
fn cost_candidates<const M: u16>(
    ctx: &RowContext<'_>,
    rows: &[Row],
    order: &[u32],
    costs: &mut [f64],
) {
    let mut multipliers = Multipliers::new(ctx.preferred);
    let (mut high, mut tiers) = (0, 0);
    for (cost, &i) in costs.iter_mut().zip(order) {
        let row = &rows[i as usize];
        let masks = ctx.masks(row);
        *cost = row_cost::<M>(ctx, &mut multipliers, row, masks, &mut high, &mut tiers);
    }
}

/// The general pipeline's cost of each candidate of `order`, in its mode (inexact conversions,
/// the request charge always read), for [`Scorer::score`] and for the rows the one pass costs
/// again ([`cost_tier_rows`]).
fn cost_in_general(ctx: &RowContext<'_>, rows: &[Row], order: &[u32], costs: &mut [f64]) {
    dispatch!(
        ctx.mode(false, true),
        cost_candidates(ctx, rows, order, costs),
        [16 17 18 20 21 22 24 25 26 48 49 50 52 53 54 56 57 58
         144 145 146 148 149 150 152 153 154 176 177 178 180 181 182 184 185 186
         560 561 562 564 565 566 568 569 570 688 689 690 692 693 694 696 697 698],
        unreachable!("every mode of the general pipeline is listed")
    );
}

/// The one-pass loop: validity (the checks of [`Row::is_valid`]), admission
/// ([`Row::is_candidate`], and with `LIMITS` the filters' limits, [`RowLimits::exceeded`]) and the
/// cost of every row, then the candidates compacted into
/// `order[..m]` and `costs[..m]`. The loop has no data-dependent branch or index, so the compiler
/// vectorizes it: it writes every row's cost (NaN when the row is left out) and its index, with
/// the top bit set when the row is left out; only a fleet with rows left out pays for the
/// compaction, a pass over those two arrays, and not even it `in_place` (for a picker that
/// passes over NaN costs: [`OnePass::InPlace`]). Speeds, which this cost does not read, are
/// validated in a second pass only when some row carries one. `None` when a row is invalid, a
/// counter too large for [`exact_f64`], no row a candidate or more than 2^31 rows: the general
/// pipeline then decides and reports. Every cost is finite without a check: see
/// [`DefaultCost::costs_are_bounded`].
#[allow(clippy::inline_always, reason = "one loop per mode")]
#[inline(always)]
fn admit_and_cost<const M: u16, const LIMITS: bool>(
    (ctx, limits): (&RowContext<'_>, &RowLimits),
    required: TaintSet,
    reference: &Row,
    rows: &[Row],
    out: (&mut [u32], &mut [f64]),
    in_place: bool,
) -> Option<OnePass> {
    let mut multipliers = Multipliers::new(ctx.preferred);
    match multipliers.eager {
        Some(mut eager) if M & Mode::EXTRAS != 0 => admit_and_cost_with::<M, LIMITS>(
            (ctx, limits),
            required,
            reference,
            rows,
            out,
            in_place,
            &mut eager,
        ),
        _ => {
            let multipliers = &mut multipliers;
            admit_and_cost_with::<M, LIMITS>(
                (ctx, limits),
                required,
                reference,
                rows,
                out,
                in_place,
                multipliers,
            )
        }
    }
}

/// [`admit_and_cost`] with the multipliers of `multipliers`.
///
/// With [`Mode::UNIFORM`] the loop reads every row through the masks of `reference` (a row of the
/// fleet, not overloaded, for a request that requires no taint) and admits it, and notes whether
/// any row's flags differ from the reference's (odd rows: overloaded, without
/// a load projection or a cache entry, unknown flags). When some do, a second step finds them,
/// a block of [`ODD_BLOCK`] rows' flags at a time, and computes each again through its own
/// masks, with its admission. A fleet's few odd rows so cost a few rows' work and a read of the
/// flags, not a second pass; with more than one row in [`ODD_SHARE`] odd it declines, for the
/// per-row masks' loop to take the whole fleet. Without [`Mode::UNIFORM`] every row takes its
/// own masks.
///
/// An odd row's fields read through the reference's masks in the first step may add to the
/// check of counters below 2^52 what its own masks hide (a group it does not carry holding a
/// counter of 2^52 or more): the step then declines and the general pipeline takes the fleet,
/// with the same result.
#[allow(clippy::inline_always, reason = "one loop per mode")]
#[inline(always)]
fn admit_and_cost_with<const M: u16, const LIMITS: bool>(
    (ctx, limits): (&RowContext<'_>, &RowLimits),
    required: TaintSet,
    reference: &Row,
    rows: &[Row],
    (order, costs): (&mut [u32], &mut [f64]),
    in_place: bool,
    multipliers: &mut impl MultiplierOf,
) -> Option<OnePass> {
    let uniform = M & Mode::UNIFORM != 0;
    if rows.is_empty() || rows.len() > LEFT_OUT as usize {
        return None;
    }
    let fleet_flags = reference.flags.0;
    // `flags` collects the rows' flags, for the unknown-flag and speed checks after the loop.
    let (mut invalid, mut flags, mut high, mut odd, mut left_out) =
        (false, 0u32, 0u64, 0u32, 0usize);
    let mut tiers = 0u64;
    let fleet_masks = ctx.masks(reference);
    let (order, costs) = (&mut order[..rows.len()], &mut costs[..rows.len()]);
    for (i, ((row, cost), slot)) in rows
        .iter()
        .zip(costs.iter_mut())
        .zip(order.iter_mut())
        .enumerate()
    {
        #[allow(clippy::cast_possible_truncation, reason = "rows.len() <= 2^31")]
        let index = i as u32;
        if uniform {
            odd |= row.flags.0 ^ fleet_flags;
            invalid |= row.has_invalid_estimate();
            let row_cost = row_cost::<M>(ctx, multipliers, row, fleet_masks, &mut high, &mut tiers);
            if LIMITS {
                let excluded = limits.exceeded::<LIMITS>(row, fleet_masks.0, &mut high);
                *cost = if excluded { f64::NAN } else { row_cost };
                *slot = index | (u32::from(excluded) * LEFT_OUT);
                left_out += usize::from(excluded);
            } else {
                *cost = row_cost;
                *slot = index;
            }
        } else {
            invalid |= row.has_invalid_estimate();
            flags |= row.flags.0;
            let masks = ctx.masks(row);
            let row_cost = row_cost::<M>(ctx, multipliers, row, masks, &mut high, &mut tiers);
            let excluded =
                !row.is_candidate(required) | limits.exceeded::<LIMITS>(row, masks.0, &mut high);
            *cost = if excluded { f64::NAN } else { row_cost };
            *slot = index | (u32::from(excluded) * LEFT_OUT);
            left_out += usize::from(excluded);
        }
    }
    if uniform {
        flags |= fleet_flags;
        if odd != 0 {
            for_each_odd_row(rows, reference.flags, |i, row| {
                flags |= row.flags.0;
                let masks = ctx.masks(row);
                let row_cost = row_cost::<M>(ctx, multipliers, row, masks, &mut high, &mut tiers);
                let excluded = !row.is_candidate(required)
                    | limits.exceeded::<LIMITS>(row, masks.0, &mut high);
                // The first step may have left the row out by the fleet's masks.
                let before = order[i] & LEFT_OUT != 0;
                costs[i] = if excluded { f64::NAN } else { row_cost };
                order[i] = (order[i] & !LEFT_OUT) | (u32::from(excluded) * LEFT_OUT);
                left_out = left_out + usize::from(excluded) - usize::from(before);
            })?;
        }
    }
    if invalid
        || flags & !RowFlags::ALL.0 != 0
        || high >= EXACT_LIMIT
        || left_out == rows.len()
        || (flags & RowFlags::HAS_SPEED.0 != 0 && any_invalid_speed(rows))
    {
        return None;
    }
    if M & 3 == Mode::CREDIT_DEVICE && tiers != 0 {
        cost_tier_rows(ctx, rows, order, costs);
    }
    if left_out == 0 {
        return Some(OnePass::Compacted(rows.len()));
    }
    if in_place {
        return Some(OnePass::InPlace(rows.len() - left_out));
    }
    Some(OnePass::Compacted(compact_left_out(order, costs)))
}

/// Costs again, with their host and disk blocks, the candidates of [`Mode::CREDIT_DEVICE`]'s
/// pass that hold some (`order` marks the rows left out, by position, and `costs` is by
/// position too), through the general pipeline's loop, which computes the same cost
/// as the one pass with tiers would, a few rows at a time. The request said that no row
/// holds any ([`Request::device_matches_only`]), so this is the price of a wrong hint.
#[inline(never)]
fn cost_tier_rows(ctx: &RowContext<'_>, rows: &[Row], order: &[u32], costs: &mut [f64]) {
    let mut batch = [0u32; TIER_BATCH];
    let mut batch_costs = [0.0; TIER_BATCH];
    let mut n = 0;
    let mut flush = |batch: &[u32], costs: &mut [f64]| {
        let batch_costs = &mut batch_costs[..batch.len()];
        cost_in_general(ctx, rows, batch, batch_costs);
        for (&i, &cost) in batch.iter().zip(batch_costs.iter()) {
            costs[i as usize] = cost;
        }
    };
    for (i, (row, &entry)) in rows.iter().zip(order).enumerate() {
        if entry & LEFT_OUT == 0 && holds_tiers(row, ctx.cache_flag) {
            #[allow(clippy::cast_possible_truncation, reason = "rows.len() <= 2^31")]
            let index = i as u32;
            batch[n] = index;
            n += 1;
            if n == TIER_BATCH {
                flush(&batch, costs);
                n = 0;
            }
        }
    }
    flush(&batch[..n], costs);
}

/// Rows [`cost_tier_rows`] costs at a time.
const TIER_BATCH: usize = 16;

/// Whether `row` carries a cache entry (`cache_flag`) with host or disk blocks.
#[inline]
fn holds_tiers(row: &Row, cache_flag: u32) -> bool {
    row.flags.0 & cache_flag == cache_flag && (row.host_blocks | row.disk_blocks) != 0
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
    crate::vocab::math::round_count(x)
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
        cost_in_general(&ctx, rows, order, costs);
        Ok(())
    }

    /// Validity, admission and this cost for every row in one pass (the same formula as
    /// [`Scorer::score`], with per-row masks for what rows carry), for mixed fleets too: rows
    /// with or without cache entries and load projections, overloaded or ineligible ones,
    /// preferred taints. It declines, for the general pipeline to decide with the same formula,
    /// decay, shared hits and a block size that is not a power of two, and what no sane host
    /// sends: an invalid row, counters of 2^52 or more, knobs outside their validated ranges,
    /// more rows than `order` holds, or no candidate.
    fn score_all_rows(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<usize> {
        self.one_pass(request, rows, order, costs, false)?
            .compacted()
    }

    /// The same pass, leaving the rows that are not candidates in place, marked and with a NaN
    /// cost, when there are some.
    fn score_all_rows_in_place(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<OnePass> {
        self.one_pass(request, rows, order, costs, true)
    }

    /// The formula reads the request and the row; the one term that compares candidates, the
    /// decay's least outstanding prefill, is declined by the one pass.
    fn costs_are_per_row(&self) -> bool {
        true
    }

    /// Its pass leaves out the rows the view's rule leaves out: the rule's taints are required
    /// with the request's, and its limits are compared in the same loop as the cost.
    fn applies_row_rules(&self) -> bool {
        true
    }
}

impl DefaultCost {
    /// [`Scorer::score_all_rows`]'s pass; with `in_place`, as [`Scorer::score_all_rows_in_place`].
    /// `order` and `costs` are parameters of their own: inside a tuple they lose the guarantee
    /// that nothing else points into them, and the loop was no longer vectorized (1,024
    /// candidates, uniform fleet: 2.3 -> 3.9 us).
    fn one_pass(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
        in_place: bool,
    ) -> Option<OnePass> {
        let rule = request.row_rule();
        if rule != RowRule::NONE {
            return self.one_pass_with_rule(&rule, request, rows, order, costs, in_place);
        }
        let (ctx, mode) = self.pass_mode(request, rows, order, costs)?;
        let pass = (mode, request.required_taints());
        passes::<false>(&ctx, &RowLimits::NONE, pass, rows, order, costs, in_place)
    }

    /// [`DefaultCost::one_pass`] with the filters' rule ([`Scorer::applies_row_rules`]): its
    /// taints are required with the request's, its limits compared in the loop (a rule without
    /// limits compares against `+inf`). A function of its own: inlined beside the loops
    /// without a rule, it made those slower (1,024 rows, no rule: 1.94 -> 2.14 us).
    #[inline(never)]
    fn one_pass_with_rule(
        &self,
        rule: &RowRule,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
        in_place: bool,
    ) -> Option<OnePass> {
        let (ctx, mode) = self.pass_mode(request, rows, order, costs)?;
        // The limits read the load projection as this cost declares it (`inputs` always
        // declares LOAD; else the general pipeline asks the filters).
        if ctx.load_flag != RowFlags::HAS_LOAD.0 {
            return None;
        }
        let pass = (mode, request.required_taints().union(rule.required_taints));
        passes::<true>(
            &ctx,
            &RowLimits::of(rule),
            pass,
            rows,
            order,
            costs,
            in_place,
        )
    }

    /// The formula's values and the pass's [`Mode`] for `request`, or `None` where the one pass
    /// declines (see [`Scorer::score_all_rows`]).
    #[allow(clippy::inline_always, reason = "the start of each one pass")]
    #[inline(always)]
    fn pass_mode<'a>(
        &'a self,
        request: &RequestView<'a>,
        rows: &[Row],
        order: &[u32],
        costs: &[f64],
    ) -> Option<(RowContext<'a>, u16)> {
        let ctx = self.context(request);
        if ctx.prompt >= EXACT_LIMIT
            || !self.costs_are_bounded()
            || order.len() < rows.len()
            || costs.len() < rows.len()
        {
            return None;
        }
        if ctx.per_block.reciprocal.is_none() || ctx.use_decay || ctx.shared_hits.is_some() {
            return None;
        }
        let requests = self.decode_active_request_weight != 0.0;
        let mut mode = ctx.mode(true, requests);
        // Tier matches all in device memory (a router's route, most of the time): no row's
        // host and disk blocks need converting and weighing.
        if mode & 3 == Mode::CREDIT_TIERS && request.device_matches_only() == Some(true) {
            mode |= Mode::CREDIT_DEVICE;
        }
        Some((ctx, mode))
    }

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

    /// Whether the one-pass steps may leave out the `req_cost` term and keep the sum's bounds:
    /// the credit weights finite and `>= 0` (so a credit is `>= 0`, NaN or `+inf`, and
    /// `max(0, x - credit)` lies in `[0, x]`), and the two weights that multiply unbounded terms
    /// in `[0, WEIGHT_LIMIT]`. Validated knobs always qualify; a policy composed from unvalidated
    /// ones may not, and then the general pipeline scores and checks every cost.
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

/// The one pass in `mode` for `required` taints, `limits` compared when `LIMITS`. A
/// fleet is tried as uniform when the request requires no taint and a sample of its rows shares
/// one row's flags, without an overload mark, but for at most one (a fleet with many odd rows
/// shows some there); the uniform loop declines more than a few odd rows after all, and the
/// per-row masks' loop then takes the fleet.
#[allow(
    clippy::inline_always,
    reason = "inlined into each one pass, which keeps its own loops"
)]
#[inline(always)]
fn passes<const LIMITS: bool>(
    ctx: &RowContext<'_>,
    limits: &RowLimits,
    (mode, required): (u16, TaintSet),
    rows: &[Row],
    order: &mut [u32],
    costs: &mut [f64],
    in_place: bool,
) -> Option<OnePass> {
    let reference = tidy_reference(rows).filter(|_| required == TaintSet::EMPTY);
    if let Some(reference) = reference {
        let taken = dispatch!(
            mode | Mode::UNIFORM,
            admit_and_cost::<_, LIMITS>((ctx, limits), required, reference, rows, (&mut *order, &mut *costs), in_place),
            [320 321 322 323 324 325 326 327 328 329 330 331 336 337 338 339 340 341 342 343
             344 345 346 347 352 353 354 355 356 357 358 359 360 361 362 363 368 369 370 371
             372 373 374 375 376 377 378 379],
            None
        );
        if taken.is_some() {
            return taken;
        }
    }
    dispatch!(
        mode,
        admit_and_cost::<_, LIMITS>((ctx, limits), required, rows.first()?, rows, (order, costs), in_place),
        [64 65 66 67 68 69 70 71 72 73 74 75 80 81 82 83 84 85 86 87 88 89 90 91
         96 97 98 99 100 101 102 103 104 105 106 107 112 113 114 115 116 117 118 119
         120 121 122 123],
        None
    )
}

/// The largest `prefill_load_scale` and `decode_active_request_weight` the one-pass steps take
/// (see [`DefaultCost::costs_are_bounded`]).
const WEIGHT_LIMIT: f64 = 1e270;

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
            let (index, ties) = min_cost_index(costs, rng);
            #[allow(clippy::cast_possible_truncation, reason = "ties <= rows <= u32::MAX")]
            return Ok(Pick {
                index,
                reason: PickReason::MinCost { ties: ties as u32 },
            });
        }
        let (index, probability) = softmax_index(costs, self.temperature, rng::unit_f64(rng), work);
        Ok(Pick {
            index,
            reason: PickReason::Sampled { probability },
        })
    }

    /// At temperature 0, whose least-cost scan passes over NaN costs.
    fn picks_least_cost(&self) -> bool {
        self.temperature == 0.0
    }
}

/// The minimum-cost pick: the first least cost (NaN ignored), each later cost equal to the
/// least so far replacing it with probability `1 / ties` (one draw per tie, as it comes:
/// uniform over the ties). With the tie count.
///
/// A block of [`TIE_BLOCK`] costs is read after a branch-free min: above the best so far, it
/// changes nothing and draws nothing; equal to it, its costs can only tie, and they are found
/// through a bit mask rather than a branch per cost (integer load figures tie often: a
/// least-loaded fleet has many idle workers, and that branch is taken at random); below it,
/// the block is read a chunk of [`PICK_CHUNK`] at a time, each skipped the same way when its
/// min is above the best so far, and otherwise read cost by cost.
fn min_cost_index(costs: &[f64], rng: &mut dyn RandomSource) -> (usize, u64) {
    let mut best = 0;
    let mut best_cost = f64::INFINITY;
    let mut ties: u64 = 0;
    for (b, block) in costs.chunks(TIE_BLOCK).enumerate() {
        let low = chunk_min(block);
        if low > best_cost {
            continue;
        }
        if low == best_cost {
            let mut equal = 0u64;
            for (j, &cost) in block.iter().enumerate() {
                equal |= u64::from(cost == best_cost) << j;
            }
            while equal != 0 {
                let j = equal.trailing_zeros() as usize;
                equal &= equal - 1;
                ties += 1;
                if rng::index(rng, ties) == 0 {
                    best = b * TIE_BLOCK + j;
                }
            }
            continue;
        }
        for (c, chunk) in block.chunks(PICK_CHUNK).enumerate() {
            if chunk_min(chunk) > best_cost {
                continue;
            }
            for (j, &cost) in chunk.iter().enumerate() {
                let i = b * TIE_BLOCK + c * PICK_CHUNK + j;
                if cost < best_cost {
                    best = i;
                    best_cost = cost;
                    ties = 1;
                } else if cost == best_cost {
                    ties += 1;
                    if rng::index(rng, ties) == 0 {
                        best = i;
                    }
                }
            }
        }
    }
    (best, ties)
}

/// Costs per block of [`min_cost_index`] whose ties are found through one bit mask.
const TIE_BLOCK: usize = 64;

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

/// The temperature sampler: the row `sample` falls in and the probability it had. `weights`
/// (as long as `costs`) is scratch for the unnormalized weights.
///
/// The arithmetic follows Dynamo's evaluation order exactly: with `mag` 1 for a finite range
/// (else the larger magnitude), `scale = -1 / ((hi/mag - lo/mag) * T)`, each weight is
/// `exp(c/mag * scale - (lo/mag) * scale)`, the weights are summed in row order, each
/// probability is `weight / sum`, and the first row whose running sum of probabilities reaches
/// `sample` is taken. Three things make it cheaper without changing a bit: `c / 1` is `c`, so a
/// finite range skips the division; the sum runs in the loop that calls `exp`, where its chain
/// of additions overlaps the calls; and probabilities are divided out only up to the row taken,
/// since no later row changes which one that is.
fn softmax_index(
    costs: &[f64],
    temperature: f64,
    sample: f64,
    weights: &mut [f64],
) -> (usize, f64) {
    let weights = &mut weights[..costs.len()];
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
    let sum = if lo == hi {
        let uniform = 1.0 / costs.len() as f64;
        weigh(weights, costs, |_| uniform)
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
        let exp = crate::vocab::math::exp;
        if magnitude == 1.0 {
            weigh(weights, costs, |c| exp(c * scale - offset))
        } else {
            weigh(weights, costs, |c| exp(c / magnitude * scale - offset))
        }
    };
    let mut cumulative = 0.0;
    for (k, &w) in weights.iter().enumerate() {
        let probability = w / sum;
        cumulative += probability;
        if sample <= cumulative {
            return (k, probability);
        }
    }
    let last = costs.len() - 1;
    (last, weights[last] / sum)
}

/// Writes `weight(c)` for every cost and returns the weights' sum, added in row order.
#[inline]
fn weigh(weights: &mut [f64], costs: &[f64], weight: impl Fn(f64) -> f64) -> f64 {
    let mut sum = 0.0;
    for (w, &c) in weights.iter_mut().zip(costs) {
        *w = weight(c);
        sum += *w;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::DefaultCost;
    use super::softmax_index;
    use crate::engine::Scorer;
    use std::vec::Vec;

    use crate::vocab::{
        Cache, Candidates, Load, PreferredTaint, Request, RequestView, Row, RowFlags, TaintSet,
        WorkerKey,
    };

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

    /// What the one-pass steps write for `request` over `rows`: the candidates and their costs,
    /// checked against the general pipeline's costs for the same candidates.
    fn one_pass(request: &Request<'_>, rows: &[Row]) -> Option<Vec<(u32, f64)>> {
        let cost = DefaultCost::default();
        let view = RequestView::new(request, cost.inputs(request.leg()));
        let (mut order, mut costs) = ([u32::MAX; 5], [f64::NAN; 5]);
        let m = cost.score_all_rows(&view, rows, &mut order, &mut costs)?;
        let mut general = [f64::NAN; 5];
        cost.score(
            &view,
            &Candidates::new(view, rows, &order[..m]),
            &mut general[..m],
        )
        .unwrap();
        for k in 0..m {
            assert_eq!(costs[k].to_bits(), general[k].to_bits(), "candidate {k}");
        }
        Some(
            order[..m]
                .iter()
                .copied()
                .zip(costs[..m].iter().copied())
                .collect(),
        )
    }

    #[test]
    fn the_one_pass_steps_take_any_sane_fleet_and_decline_the_rest() {
        let request = Request::new(64, 16);
        let all = one_pass(&request, &fleet()).unwrap();
        assert_eq!(all.len(), 5);
        // Row 2: raw = 200 + max(64, 48) = 264 tokens = 16.5 blocks, credit 3: 13.5 + 14.
        assert_eq!(all[2], (2, 27.5));

        let with = |edit: fn(&mut Row)| {
            let mut rows = fleet();
            edit(&mut rows[3]);
            one_pass(&request, &rows)
        };
        // Mixed fleets run the same pass: an overloaded row is left out, rows without a load
        // projection or a cache entry read as zeros, and the costs are the general pipeline's.
        let taken = with(|r| *r = r.overloaded(true)).unwrap();
        assert_eq!(taken.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 1, 2, 4]);
        assert!(with(|r| r.flags = RowFlags(r.flags.0 & !RowFlags::HAS_LOAD.0)).is_some());
        assert!(with(|r| r.flags = RowFlags(r.flags.0 & !RowFlags::HAS_CACHE.0)).is_some());
        assert!(
            with(|r| r.effective_blocks = -0.0).is_some(),
            "-0.0 is valid"
        );
        let tiers = Request::new(64, 16).has_tier_matches(true);
        assert!(one_pass(&tiers, &fleet()).is_some(), "tier matches");
        let required = Request::new(64, 16).required_taints(TaintSet(1));
        let mut rows = fleet();
        rows[1] = rows[1].with_taints(TaintSet(1));
        assert_eq!(one_pass(&required, &rows).unwrap(), [(1, all[1].1)]);
        let preferred = [PreferredTaint {
            taint: crate::vocab::Taint::new(0).unwrap(),
            weight: 0.5,
        }];
        assert!(one_pass(&request.preferred_taints(&preferred), &rows).is_some());
        // Declined, for the general pipeline to report or to compute with wider integers.
        assert!(
            with(|r| r.flags = RowFlags(r.flags.0 | 1 << 20)).is_none(),
            "unknown flag bits"
        );
        assert!(
            with(|r| r.active_decode_blocks = 1 << 52).is_none(),
            "a counter of 2^52"
        );
        assert!(
            with(|r| r.effective_blocks = f64::NAN).is_none(),
            "a NaN estimate"
        );
        assert!(
            with(|r| r.effective_blocks = -0.5).is_none(),
            "a negative estimate"
        );
        assert!(
            with(|r| r.active_prefill_tokens = u64::MAX).is_none(),
            "a saturating sum"
        );
        assert!(one_pass(&required, &fleet()).is_none(), "no candidate");
        assert!(
            with(|r| r.host_blocks = 1).is_none(),
            "host blocks without tier matches (the rows of an estimate have none)"
        );
        assert!(
            one_pass(&Request::new(64, 17), &fleet()).is_none(),
            "a block size that is no power of two"
        );
        let hits = [crate::vocab::BlockRange::new(0, 2)];
        let shared = request.shared_hits(crate::vocab::SharedHits::new(&hits).unwrap());
        assert!(one_pass(&shared, &fleet()).is_none(), "shared hits");
    }

    #[test]
    fn extreme_finite_costs_are_ordered() {
        // Spec section 4: costs (-MAX, +MAX), T = 1, u = 0.6 must return row 0.
        let mut w = [0.0; 2];
        let (index, probability) = softmax_index(&[-f64::MAX, f64::MAX], 1.0, 0.6, &mut w);
        assert_eq!(index, 0);
        assert!((probability - 1.0 / (1.0 + (-1.0f64).exp())).abs() < 1e-15);
    }

    #[test]
    fn infinite_temperature_is_uniform() {
        let mut w = [0.0; 3];
        for (sample, row) in [(0.0, 0), (0.5, 1), (0.9, 2)] {
            let picked = softmax_index(&[0.0, 5.0, 100.0], f64::INFINITY, sample, &mut w);
            assert_eq!(picked, (row, 1.0 / 3.0));
        }
    }

    #[test]
    fn equal_costs_are_uniform_and_rounding_falls_back_to_the_last_row() {
        let mut w = [0.0; 3];
        assert_eq!(softmax_index(&[2.0; 3], 0.7, 0.0, &mut w).0, 0);
        assert_eq!(
            softmax_index(&[2.0; 3], 0.7, 0.999_999_999_999_999_9, &mut w),
            (2, 1.0 / 3.0)
        );
        assert_eq!(softmax_index(&[2.0; 3], 0.7, 0.5, &mut w).0, 1);
    }

    /// The minimum-cost pick written plainly: one branch per cost.
    fn min_cost_scan(costs: &[f64], rng: &mut dyn crate::engine::RandomSource) -> (usize, u64) {
        let (mut best, mut best_cost, mut ties) = (0, f64::INFINITY, 0);
        for (j, &cost) in costs.iter().enumerate() {
            if cost < best_cost {
                (best, best_cost, ties) = (j, cost, 1);
            } else if cost == best_cost {
                ties += 1;
                if crate::engine::rng::index(rng, ties) == 0 {
                    best = j;
                }
            }
        }
        (best, ties)
    }

    /// The minimum-cost pick is the plain scan: the same index, tie count and draws (the
    /// generator's next value after each pick agrees), over costs drawn from a few values so
    /// ties are many, with NaN, infinities, signed zeros, and the minimum first, late or absent.
    #[test]
    fn the_minimum_cost_pick_is_the_scan() {
        use super::min_cost_index;
        use crate::engine::RandomSource;
        use crate::engine::WyRand;
        let values = [
            3.0,
            1.0,
            2.0,
            0.0,
            -0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        let mut draw = WyRand::with_seed(7);
        #[allow(clippy::cast_possible_truncation, reason = "below n, a small usize")]
        let mut below = |n: usize| (draw.next_u64() % n as u64) as usize;
        for case in 0..4000u64 {
            let n = below(300);
            // Each case draws from a few of the values, so ties and the minimum's position vary.
            let kinds = 1 + below(values.len());
            let offset = below(values.len());
            let costs: Vec<f64> = (0..n)
                .map(|_| values[(offset + below(kinds)) % values.len()])
                .collect();
            let (mut a, mut b) = (WyRand::with_seed(case), WyRand::with_seed(case));
            let fast = min_cost_index(&costs, &mut a);
            let scan = min_cost_scan(&costs, &mut b);
            assert_eq!(fast, scan, "case {case}: {costs:?}");
            assert_eq!(a.next_u64(), b.next_u64(), "case {case}: the draws differ");
        }
    }
}
