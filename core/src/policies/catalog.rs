//! The catalog of builtin components: what other routers do, as filters, scorers and pickers that
//! compose with each other and with the default cost.
//!
//! Every scorer here writes a *cost* (lower is better), so scores of score-based systems (llm-d)
//! are written negated, and their "max-score picker" is [`MinCostPicker`]. Every picker that
//! chooses among equals draws uniformly from the selector's random stream, so a burst of identical
//! requests spreads over tied workers instead of piling onto the first, and a seeded policy
//! replays exactly.
//!
//! Each component's documentation gives its formula, defaults and the system it comes from.

use crate::engine::rng::{self, RandomSource};
use crate::engine::{
    Admission, ComponentError, Filter, Filters, OnePass, Pick, PickInput, PickReason, Picker,
    Scorer, Scorers, Verdict,
};
use crate::engine::{LEFT_OUT, MAX_SCORERS, compact_left_out, mark_tidy, mark_unfiltered};
use crate::engine::{nan_left_out, refusal_among};

use crate::policies::{DefaultCost, DefaultPicker};
use crate::vocab::math::{EXACT_LIMIT, exact_f64};
use crate::vocab::{Candidates, RequestView, RowView, WorkerInputs, any_invalid_speed};
use crate::vocab::{Leg, Load, Row, RowFlags, RowRule, Speed, TaintSet, WorkerKey};
use crate::vocab::{for_each_odd_row, tidy_reference};

/// Which load figure a load-based component reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "std", derive(serde::Deserialize))]
#[cfg_attr(feature = "std", serde(rename_all = "snake_case"))]
pub enum LoadMetric {
    /// Outstanding prefill tokens (`active_prefill_tokens`).
    PrefillTokens,
    /// Active KV blocks (`active_decode_blocks`).
    ActiveBlocks,
    /// Active requests (`active_requests`), the default.
    #[default]
    ActiveRequests,
}

impl LoadMetric {
    /// The figure of `load`.
    #[must_use]
    pub const fn of(self, load: Load) -> u64 {
        match self {
            LoadMetric::PrefillTokens => load.active_prefill_tokens,
            LoadMetric::ActiveBlocks => load.active_decode_blocks,
            LoadMetric::ActiveRequests => load.active_requests,
        }
    }
}

#[allow(
    clippy::cast_precision_loss,
    reason = "load figures are far below 2^53; the cost only orders them"
)]
fn as_cost(x: u64) -> f64 {
    x as f64
}

fn load_of(row: &RowView<'_>, metric: LoadMetric) -> u64 {
    row.load().map_or(0, |l| metric.of(l))
}

fn device_blocks(row: &RowView<'_>) -> u64 {
    row.cache().map_or(0, |c| u64::from(c.device_blocks))
}

/// Least loaded: `cost = metric(load)`, by outstanding prefill tokens, active blocks or active
/// requests (the default). With [`MinCostPicker`] this is the classic least-loaded balancer
/// (Dynamo's, `SGLang`'s and most proxies' fallback); ties are drawn uniformly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeastLoaded {
    /// The load figure compared.
    pub metric: LoadMetric,
}

impl Scorer for LeastLoaded {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::LOAD
    }

    fn score(
        &self,
        _request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        for (cost, row) in costs.iter_mut().zip(candidates.iter()) {
            *cost = as_cost(load_of(&row, self.metric));
        }
        Ok(())
    }

    /// Admission and the load in one pass: the same costs as [`LeastLoaded::score`] over the
    /// admitted rows, in host order. The metric is matched once, outside the loop, so each
    /// row's cost is one field read under a mask, with no branch per row.
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

    /// A row's load figure is its own.
    fn costs_are_per_row(&self) -> bool {
        true
    }

    /// Its pass admits through `mark_unfiltered`, which applies the view's rule.
    fn applies_row_rules(&self) -> bool {
        true
    }
}

impl LeastLoaded {
    /// [`Scorer::score_all_rows`]'s pass; with `in_place`, as
    /// [`Scorer::score_all_rows_in_place`].
    fn one_pass(
        self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
        in_place: bool,
    ) -> Option<OnePass> {
        let (r, rows) = (request, rows);
        match self.metric {
            LoadMetric::PrefillTokens => least_load_pass(r, rows, order, costs, in_place, |row| {
                row.active_prefill_tokens
            }),
            LoadMetric::ActiveBlocks => least_load_pass(r, rows, order, costs, in_place, |row| {
                row.active_decode_blocks
            }),
            LoadMetric::ActiveRequests => {
                least_load_pass(r, rows, order, costs, in_place, |row| row.active_requests)
            }
        }
    }
}

/// [`LeastLoaded`]'s pass for one load figure, read by `figure` (a field of the row):
/// instantiated per metric, so the loop has no branch on the metric. A tidy fleet goes through
/// the engine's [`mark_tidy`], the figure read through its load masks and converted exactly
/// ([`exact_f64`]; `mark_tidy` checks it below 2^52); any other, or one that loop declines,
/// through the engine's admission row by row ([`one_pass`]).
fn least_load_pass(
    request: &RequestView<'_>,
    rows: &[Row],
    order: &mut [u32],
    costs: &mut [f64],
    in_place: bool,
    figure: impl Fn(&Row) -> u64 + Copy,
) -> Option<OnePass> {
    let n = rows.len();
    if costs.len() >= n && order.len() >= n {
        let (order, costs) = (&mut order[..n], &mut costs[..n]);
        let tidy = mark_tidy(
            rows,
            request.required_taints(),
            &request.row_rule(),
            order,
            costs,
            |row, load_mask| {
                let load = figure(row) & load_mask;
                (exact_f64(load), load)
            },
        );
        if let Some(marked) = tidy {
            return finish_pass(order, costs, marked.left_out, in_place);
        }
    }
    one_pass(request, rows, order, costs, in_place, |row, _| {
        as_cost(figure(row) & row.flags.load_mask())
    })
}

/// Steps 1 to 3 in one pass for a catalog scorer ([`Scorer::score_all_rows`]): the engine's
/// admission without filters, `cost(row, kept)` written for every row (`kept`: it is a
/// candidate), then the candidates' indices and costs moved to the front in host order, or,
/// `in_place`, left where they are with NaN for every row that is not a candidate
/// ([`Scorer::score_all_rows_in_place`]). `None` when a row is invalid or no row is a
/// candidate: the general steps then say which.
///
/// `cost` reads the row directly ([`Row::load`], [`Row::cache`]: zeros where the row carries
/// no group), which is what a [`RowView`] shows a scorer that declared the group.
fn one_pass(
    request: &RequestView<'_>,
    rows: &[Row],
    order: &mut [u32],
    costs: &mut [f64],
    in_place: bool,
    mut cost: impl FnMut(&Row, bool) -> f64,
) -> Option<OnePass> {
    let n = rows.len();
    if n > LEFT_OUT as usize || order.len() < n || costs.len() < n {
        return None;
    }
    let (order, costs) = (&mut order[..n], &mut costs[..n]);
    let rule = request.row_rule();
    let marked = mark_unfiltered(
        rows,
        request.required_taints(),
        &rule,
        order,
        |i, row, kept| {
            costs[i] = cost(row, kept);
        },
    );
    if marked.invalid {
        return None;
    }
    finish_pass(order, costs, marked.left_out, in_place)
}

/// The end of a one pass that marked `left_out` of the rows of `order` (and wrote their costs):
/// `None` when no row is a candidate; else the rows left out stay in place with a NaN cost
/// (`in_place`) or the candidates move to the front.
fn finish_pass(
    order: &mut [u32],
    costs: &mut [f64],
    left_out: usize,
    in_place: bool,
) -> Option<OnePass> {
    let n = order.len();
    if left_out == n {
        return None;
    }
    if left_out == 0 {
        return Some(OnePass::Compacted(n));
    }
    if in_place {
        // After the loop rather than in it: a select per row there made least loaded about 4%
        // slower over a fleet without a row left out.
        nan_left_out(order, costs);
        return Some(OnePass::InPlace(n - left_out));
    }
    Some(OnePass::Compacted(compact_left_out(order, costs)))
}

/// The largest and smallest load among the candidates.
fn load_range(candidates: &Candidates<'_>, metric: LoadMetric) -> (u64, u64) {
    candidates
        .iter()
        .map(|r| load_of(&r, metric))
        .fold((u64::MAX, 0), |(lo, hi), x| (lo.min(x), hi.max(x)))
}

/// A per-candidate formula in two passes: `gather` reads each candidate's row into `costs`, as
/// the candidate's view shows it (zeros where the row carries no group, and for every row when
/// `group` is not declared), then `finish` maps every value in place. Each cost is the same
/// expression on the same values as one pass would compute, bit for bit; the second pass walks
/// contiguous memory, so its division by a constant runs two rows per instruction instead of one
/// row per gathered load.
fn gather_then(
    candidates: &Candidates<'_>,
    group: WorkerInputs,
    costs: &mut [f64],
    gather: impl Fn(&Row) -> f64,
    finish: impl Fn(f64) -> f64,
) {
    let (rows, order) = candidates.raw();
    let costs = &mut costs[..order.len()];
    if candidates.request().inputs().contains(group) {
        for (cost, &i) in costs.iter_mut().zip(order) {
            *cost = gather(&rows[i as usize]);
        }
    } else {
        costs.fill(gather(&Row::new(WorkerKey::new(0, 0))));
    }
    for cost in costs.iter_mut() {
        *cost = finish(*cost);
    }
}

/// The decision Dynamo's two-tier rule and `SGLang`'s cache-aware policy share: by active
/// requests when they are imbalanced by `(spread, ratio)` or the best device overlap covers at
/// most `share` of the request, else toward that overlap.
fn two_mode(
    request: &RequestView<'_>,
    candidates: &Candidates<'_>,
    costs: &mut [f64],
    (spread, ratio): (u64, f64),
    share: f64,
) {
    let metric = LoadMetric::ActiveRequests;
    let (lo, hi) = load_range(candidates, metric);
    let (best, covers) = best_overlap(request, candidates, share);
    let by_load = imbalanced(lo, hi, spread, ratio) || !covers;
    decide(candidates, costs, metric, by_load, best);
}

/// [`two_mode`] in one pass ([`Scorer::score_all_rows`]; with `in_place`, as
/// [`Scorer::score_all_rows_in_place`]): the load range and the best overlap are gathered over
/// the candidates while the loads are written as costs; the costs are rewritten toward the
/// overlap only when the decision goes that way.
fn two_mode_one_pass(
    request: &RequestView<'_>,
    rows: &[Row],
    order: &mut [u32],
    costs: &mut [f64],
    (spread, ratio): (u64, f64),
    share: f64,
    in_place: bool,
) -> Option<OnePass> {
    let uniform = tidy_reference(rows)
        .filter(|_| request.required_taints() == TaintSet::EMPTY)
        .and_then(|reference| two_mode_uniform(rows, reference, order, costs));
    let (pass, lo, hi, best) = match uniform {
        Some((m, lo, hi, best)) => (OnePass::Compacted(m), lo, hi, best),
        None => two_mode_rows(request, rows, order, costs, in_place)?,
    };
    let covers = as_cost(best) / as_cost(request.request_blocks()) > share;
    // `two_mode`'s `by_load`, negated: toward the overlap. Rows left in place keep their NaN.
    if !imbalanced(lo, hi, spread, ratio) && covers {
        let entries = pass.entries(rows.len());
        for (cost, &i) in costs[..entries].iter_mut().zip(&order[..entries]) {
            if i & LEFT_OUT == 0 {
                *cost = as_cost(best - u64::from(rows[i as usize].cache().device_blocks));
            }
        }
    }
    Some(pass)
}

/// [`two_mode_one_pass`]'s admission, loads and figures for any fleet: each row through its own
/// masks, with the engine's admission ([`one_pass`]).
fn two_mode_rows(
    request: &RequestView<'_>,
    rows: &[Row],
    order: &mut [u32],
    costs: &mut [f64],
    in_place: bool,
) -> Option<(OnePass, u64, u64, u64)> {
    let metric = LoadMetric::ActiveRequests;
    let (mut lo, mut hi, mut best) = (u64::MAX, 0, 0);
    let pass = one_pass(request, rows, order, costs, in_place, |row, kept| {
        let load = metric.of(row.load());
        // The candidates' range and best overlap, with `kept` as a mask instead of a branch:
        // a row left out adds `u64::MAX` to the minimum and 0 to the maxima.
        let keep = 0u64.wrapping_sub(u64::from(kept));
        lo = lo.min(load | !keep);
        hi = hi.max(load & keep);
        best = best.max(u64::from(row.cache().device_blocks) & keep);
        as_cost(load)
    })?;
    Some((pass, lo, hi, best))
}

/// [`two_mode_one_pass`] over a tidy fleet ([`tidy_reference`]) for a request
/// that requires no taint: the rows with `reference`'s flags (not overloaded) are candidates,
/// read through the fleet's masks in a loop without per-row branches, whose minima and maxima
/// are floats (packed instructions; SSE2 has no 64-bit integer ones, and a float holds every
/// load below 2^53, checked, exactly). The few rows with other flags (odd) are found after it
/// ([`for_each_odd_row`]) and taken through their own groups and admission. Returns the candidates (compacted in `order` and `costs`), the load range and the
/// best device overlap; `None`, for the per-row loop to decide, when more than one row in 16 is
/// odd, a row is invalid, a load reaches 2^53, no row is a candidate, or the
/// fleet does not fit `order` and `costs`.
fn two_mode_uniform(
    rows: &[Row],
    reference: &Row,
    order: &mut [u32],
    costs: &mut [f64],
) -> Option<(usize, u64, u64, u64)> {
    let n = rows.len();
    let flags = reference.flags;
    if n > LEFT_OUT as usize || order.len() < n || costs.len() < n || reference.is_overloaded() {
        return None;
    }
    let (order, costs) = (&mut order[..n], &mut costs[..n]);
    let load_mask = flags.load_mask();
    let dev_mask = 0u32.wrapping_sub(u32::from(flags.contains(RowFlags::HAS_CACHE)));
    let (mut odd, mut invalid, mut high) = (0u32, false, 0u64);
    let (mut lo, mut hi, mut best) = (f64::INFINITY, 0.0_f64, 0u32);
    for (i, ((row, cost), slot)) in rows
        .iter()
        .zip(costs.iter_mut())
        .zip(order.iter_mut())
        .enumerate()
    {
        let other = row.flags.0 ^ flags.0;
        odd |= other;
        invalid |= row.has_invalid_estimate();
        // An odd row adds nothing here (infinity to the minimum, zero to the maxima). The load
        // is `LoadMetric::ActiveRequests`, as in `two_mode_rows`, read through the mask.
        let same = other == 0;
        let load = row.active_requests & load_mask;
        high |= load;
        let c = as_cost(load);
        let (low, top) = if same { (c, c) } else { (f64::INFINITY, 0.0) };
        lo = if low < lo { low } else { lo };
        hi = if top > hi { top } else { hi };
        best = best.max(row.device_blocks & dev_mask & 0u32.wrapping_sub(u32::from(same)));
        *cost = c;
        #[allow(clippy::cast_possible_truncation, reason = "n <= 2^31")]
        {
            *slot = i as u32;
        }
    }
    let (mut all_flags, mut left_out) = (flags.0, 0usize);
    if odd != 0 {
        // The few odd rows, each through its own groups and admission.
        for_each_odd_row(rows, flags, |i, row| {
            all_flags |= row.flags.0;
            if row.is_overloaded() {
                order[i] |= LEFT_OUT;
                left_out += 1;
                return;
            }
            let load = LoadMetric::ActiveRequests.of(row.load());
            high |= load;
            let c = as_cost(load);
            costs[i] = c;
            lo = if c < lo { c } else { lo };
            hi = if c > hi { c } else { hi };
            best = best.max(row.cache().device_blocks);
        })?;
    }
    if invalid
        || all_flags & !RowFlags::ALL.0 != 0
        || high >> 53 != 0
        || left_out == n
        || (all_flags & RowFlags::HAS_SPEED.0 != 0 && any_invalid_speed(rows))
    {
        return None;
    }
    let m = if left_out == 0 {
        n
    } else {
        compact_left_out(order, costs)
    };
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "whole numbers below 2^53: exact"
    )]
    Some((m, lo as u64, hi as u64, u64::from(best)))
}

/// Writes the cost of a two-mode decision: by load, or toward the largest device overlap.
fn decide(
    candidates: &Candidates<'_>,
    costs: &mut [f64],
    metric: LoadMetric,
    by_load: bool,
    best_overlap: u64,
) {
    for (cost, row) in costs.iter_mut().zip(candidates.iter()) {
        *cost = if by_load {
            as_cost(load_of(&row, metric))
        } else {
            as_cost(best_overlap - device_blocks(&row))
        };
    }
}

/// Dynamo's two-tier cost function (its "KV-aware with load override" routing):
///
/// 1. When the active-request spread is large, `max - min > spread` (32) **and**
///    `max > ratio * min` (1.1), route by load: `cost = active_requests`.
/// 2. Otherwise, when the largest device overlap covers more than `coverage` (0.5) of the
///    request's blocks, `max_dev / RB > coverage`, route to it: `cost = max_dev - dev`.
/// 3. Otherwise route by load.
///
/// Ties (several rows at the largest overlap, or at the least load) are drawn by the picker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DynamoTwoTier {
    /// Active-request spread above which load wins, default 32.
    pub spread: u64,
    /// Max-to-min ratio above which load wins, default 1.1.
    pub ratio: f64,
    /// Share of the request's blocks the best overlap must exceed, default 0.5.
    pub coverage: f64,
}

impl Default for DynamoTwoTier {
    fn default() -> Self {
        Self {
            spread: 32,
            ratio: 1.1,
            coverage: 0.5,
        }
    }
}

/// Whether loads `lo..=hi` are imbalanced: `hi - lo > abs` and `hi > rel * lo`.
fn imbalanced(lo: u64, hi: u64, abs: u64, rel: f64) -> bool {
    hi - lo > abs && as_cost(hi) > rel * as_cost(lo)
}

/// The largest device overlap and whether it covers more than `share` of the request.
fn best_overlap(request: &RequestView<'_>, candidates: &Candidates<'_>, share: f64) -> (u64, bool) {
    let best = candidates
        .iter()
        .map(|r| device_blocks(&r))
        .max()
        .unwrap_or(0);
    (
        best,
        as_cost(best) / as_cost(request.request_blocks()) > share,
    )
}

impl Scorer for DynamoTwoTier {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::LOAD | WorkerInputs::CACHE
    }

    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        two_mode(
            request,
            candidates,
            costs,
            (self.spread, self.ratio),
            self.coverage,
        );
        Ok(())
    }

    fn score_all_rows(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<usize> {
        let limits = (self.spread, self.ratio);
        two_mode_one_pass(request, rows, order, costs, limits, self.coverage, false)?.compacted()
    }

    /// The same pass, leaving the rows that are not candidates in place, marked and with a NaN
    /// cost, when there are some (over a tidy fleet, its few odd rows still move).
    fn score_all_rows_in_place(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<OnePass> {
        let limits = (self.spread, self.ratio);
        two_mode_one_pass(request, rows, order, costs, limits, self.coverage, true)
    }
}

/// `SGLang`'s cache-aware policy (its router's default):
///
/// 1. When load is imbalanced, `max - min > abs_threshold` (64) **and**
///    `max > rel_threshold * min` (1.5), route to the least loaded: `cost = active_requests`.
/// 2. Otherwise, when the longest prefix match covers more than `match_threshold` (0.3) of the
///    request, `max_dev / RB > match_threshold`, follow it: `cost = max_dev - dev`.
/// 3. Otherwise route to the least loaded.
///
/// `SGLang` measures the match in characters of its radix tree; here it is device blocks of the
/// request, the unit libroute's index reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SglangCacheAware {
    /// Load spread above which balance wins, default 64.
    pub abs_threshold: u64,
    /// Max-to-min ratio above which balance wins, default 1.5.
    pub rel_threshold: f64,
    /// Share of the request the longest match must exceed, default 0.3.
    pub match_threshold: f64,
}

impl Default for SglangCacheAware {
    fn default() -> Self {
        Self {
            abs_threshold: 64,
            rel_threshold: 1.5,
            match_threshold: 0.3,
        }
    }
}

impl Scorer for SglangCacheAware {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::LOAD | WorkerInputs::CACHE
    }

    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        two_mode(
            request,
            candidates,
            costs,
            (self.abs_threshold, self.rel_threshold),
            self.match_threshold,
        );
        Ok(())
    }

    fn score_all_rows(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<usize> {
        let limits = (self.abs_threshold, self.rel_threshold);
        two_mode_one_pass(
            request,
            rows,
            order,
            costs,
            limits,
            self.match_threshold,
            false,
        )?
        .compacted()
    }

    /// The same pass, leaving the rows that are not candidates in place, marked and with a NaN
    /// cost, when there are some (over a tidy fleet, its few odd rows still move).
    fn score_all_rows_in_place(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<OnePass> {
        let limits = (self.abs_threshold, self.rel_threshold);
        two_mode_one_pass(
            request,
            rows,
            order,
            costs,
            limits,
            self.match_threshold,
            true,
        )
    }
}

/// llm-d's prefix scorer with tier weights: `score = clamp((dev + host * host_blocks +
/// disk * disk_blocks) / RB, 0, 1)`, written as `cost = -score`. Device blocks count 1.0, host
/// blocks `host` (0.8), disk blocks `disk` (0.5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefixScore {
    /// Credit of a host-memory block, default 0.8.
    pub host: f64,
    /// Credit of a disk block, default 0.5.
    pub disk: f64,
}

impl Default for PrefixScore {
    fn default() -> Self {
        Self {
            host: 0.8,
            disk: 0.5,
        }
    }
}

impl PrefixScore {
    /// A row's credit, `dev + host * host_blocks + disk * disk_blocks` (zeros without CACHE).
    #[inline]
    fn credit(&self, row: &Row) -> f64 {
        let c = row.cache();
        f64::from(c.device_blocks)
            + self.host * f64::from(c.host_blocks)
            + self.disk * f64::from(c.disk_blocks)
    }

    /// The cost of a credit for a request of `blocks` blocks.
    #[inline]
    fn cost(credit: f64, blocks: f64) -> f64 {
        -(credit / blocks).clamp(0.0, 1.0)
    }
}

impl Scorer for PrefixScore {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::CACHE
    }

    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        let blocks = as_cost(request.request_blocks());
        gather_then(
            candidates,
            WorkerInputs::CACHE,
            costs,
            |row| self.credit(row),
            |credit| Self::cost(credit, blocks),
        );
        Ok(())
    }
}

/// llm-d's KV-cache utilization scorer: `score = 1 - clamp(active_blocks / capacity_blocks, 0,
/// 1)`, written as `cost = -score`: emptier caches score higher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvUtilizationScore {
    /// Each worker's KV capacity in blocks (at least 1).
    pub capacity_blocks: u64,
}

impl KvUtilizationScore {
    /// A row's used blocks, `active_decode_blocks` (0 without LOAD).
    #[inline]
    fn used(row: &Row) -> f64 {
        as_cost(Self::blocks(row))
    }

    /// A row's used blocks (`active_decode_blocks`, 0 without LOAD).
    #[inline]
    fn blocks(row: &Row) -> u64 {
        LoadMetric::ActiveBlocks.of(row.load())
    }

    /// The capacity the used blocks are divided by.
    fn capacity(self) -> f64 {
        as_cost(self.capacity_blocks.max(1))
    }

    /// The cost of `used` blocks out of `capacity`.
    #[inline]
    fn cost(used: f64, capacity: f64) -> f64 {
        -(1.0 - (used / capacity).clamp(0.0, 1.0))
    }
}

impl Scorer for KvUtilizationScore {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::LOAD
    }

    fn score(
        &self,
        _request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        let capacity = self.capacity();
        gather_then(candidates, WorkerInputs::LOAD, costs, Self::used, |used| {
            Self::cost(used, capacity)
        });
        Ok(())
    }
}

/// llm-d's queue scorer, min-max normalized over the candidates: `score = (max - q) / (max -
/// min)` with `q = active_requests` (1 for every row when all are equal), as `cost = -score`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueScore;

impl Scorer for QueueScore {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::LOAD
    }

    fn score(
        &self,
        _request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        let (rows, order) = candidates.raw();
        let costs = &mut costs[..order.len()];
        if !candidates.request().inputs().contains(WorkerInputs::LOAD) {
            costs.fill(-1.0); // every row reads 0: all equal
            return Ok(());
        }
        // One pass over the rows: each load into its cost slot, and the range.
        let mut range = QueueRange::default();
        for (cost, &i) in costs.iter_mut().zip(order) {
            *cost = range.add(&rows[i as usize]);
        }
        range.finish(costs, rows, order);
        Ok(())
    }
}

/// The range of the candidates' queues, gathered as [`QueueScore`] reads them.
#[derive(Clone, Copy)]
struct QueueRange {
    lo: u64,
    hi: u64,
}

impl Default for QueueRange {
    fn default() -> Self {
        Self {
            lo: u64::MAX,
            hi: 0,
        }
    }
}

impl QueueRange {
    /// Takes `row`'s queue (`active_requests`, 0 without LOAD) into the range and returns it as
    /// a float, what [`QueueRange::finish`] expects in the row's cost slot.
    #[inline]
    fn add(&mut self, row: &Row) -> f64 {
        let load = QueueScore::queue(row);
        self.take(load);
        as_cost(load)
    }

    /// Takes a queue into the range.
    #[inline]
    fn take(&mut self, load: u64) {
        self.lo = self.lo.min(load);
        self.hi = self.hi.max(load);
    }

    /// Turns the queues [`QueueRange::add`] returned (in `costs`, for the rows `order` lists)
    /// into costs.
    fn finish(self, costs: &mut [f64], rows: &[Row], order: &[u32]) {
        const EXACT: u64 = 1 << 53;
        let Self { lo, hi } = self;
        // Every row equal (or no candidate: `lo` stays above `hi`).
        if hi <= lo {
            costs.fill(-1.0);
            return;
        }
        let spread = as_cost(hi - lo);
        if hi < EXACT {
            // Below 2^53 every load is exact as a float, so `hi - load` is the same float
            // whether subtracted as integers or as floats: the costs need no second row pass.
            let top = as_cost(hi);
            for cost in costs.iter_mut() {
                *cost = -((top - *cost) / spread);
            }
        } else {
            for (cost, &i) in costs.iter_mut().zip(order) {
                *cost = -(as_cost(hi - QueueScore::queue(&rows[i as usize])) / spread);
            }
        }
    }
}

impl QueueScore {
    /// A row's queue: `active_requests`, 0 without LOAD.
    #[inline]
    fn queue(row: &Row) -> u64 {
        LoadMetric::ActiveRequests.of(row.load())
    }
}

/// The candidates' rows read into scorers' columns (`stride` apart) by [`WeightedScorer`]'s
/// run of llm-d's scorers: one loop per set of figures, so each runs without a branch.
#[derive(Clone, Copy)]
struct Gather<'a> {
    rows: &'a [Row],
    order: &'a [u32],
    stride: usize,
}

impl Gather<'_> {
    /// `figure(row)` into column `s`.
    fn one(self, columns: &mut [f64], s: usize, mut figure: impl FnMut(&Row) -> f64) {
        let column = &mut columns[s * self.stride..][..self.order.len()];
        for (c, &i) in column.iter_mut().zip(self.order) {
            *c = figure(&self.rows[i as usize]);
        }
    }

    /// The prefix credit into column `p` and the queue into column `q`.
    fn two(
        self,
        columns: &mut [f64],
        (prefix, p): (PrefixScore, usize),
        q: usize,
        queues: &mut QueueRange,
    ) {
        let [to_p, to_q] = self.columns(columns, [p, q]);
        let mut range = *queues;
        for ((&i, cp), cq) in self.order.iter().zip(to_p).zip(to_q) {
            let row = &self.rows[i as usize];
            *cp = prefix.credit(row);
            *cq = range.add(row);
        }
        *queues = range;
    }

    /// The prefix credit into column `p`, the used blocks into `u` and the queue into `q`.
    fn three(
        self,
        columns: &mut [f64],
        (prefix, p): (PrefixScore, usize),
        u: usize,
        q: usize,
        queues: &mut QueueRange,
    ) {
        let [to_p, to_u, to_q] = self.columns(columns, [p, u, q]);
        let mut range = *queues;
        // The used blocks and the queue converted through `exact_f64` (an OR and a subtraction,
        // where `as f64` from 64 bits takes SSE2 six instructions), valid below `EXACT_LIMIT`:
        // `high` collects their bits, and a fleet with a larger counter converts again.
        let mut high = 0;
        for (((&i, cp), cu), cq) in self
            .order
            .iter()
            .zip(&mut *to_p)
            .zip(&mut *to_u)
            .zip(&mut *to_q)
        {
            let row = &self.rows[i as usize];
            *cp = prefix.credit(row);
            let (used, queue) = (KvUtilizationScore::blocks(row), QueueScore::queue(row));
            high |= used | queue;
            *cu = exact_f64(used);
            *cq = exact_f64(queue);
            range.take(queue);
        }
        if high >= EXACT_LIMIT {
            for ((&i, cu), cq) in self.order.iter().zip(to_u).zip(to_q) {
                let row = &self.rows[i as usize];
                *cu = KvUtilizationScore::used(row);
                *cq = as_cost(QueueScore::queue(row));
            }
        }
        *queues = range;
    }

    /// Columns `which` (distinct), each as long as the candidates, borrowed apart: a loop that
    /// writes several then needs no bounds check per write.
    fn columns<'c, const N: usize>(
        self,
        columns: &'c mut [f64],
        which: [usize; N],
    ) -> [&'c mut [f64]; N] {
        let n = self.order.len();
        let mut out: [Option<&'c mut [f64]>; N] = [const { None }; N];
        for (s, column) in columns.chunks_mut(self.stride).enumerate() {
            if let Some(j) = which.iter().position(|&w| w == s) {
                out[j] = column.get_mut(..n);
            }
        }
        out.map(|column| column.expect("columns hold the run"))
    }
}

/// Session affinity: a request with a session id goes to the same worker as its session's
/// earlier requests, by rendezvous hashing (`hash(session, worker)`, highest wins) over **all**
/// the rows the host listed, so the mapping only moves when that worker leaves the list. The
/// winner's cost is `-1` (times the scorer's weight) and every other row's 0; when the winner is
/// not a candidate (overloaded, filtered, ineligible) every row gets 0, and the rest of the
/// policy decides. Requests without a session id are not affected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionAffinity;

/// A 64-bit mix of a session id and a worker (splitmix64's finalizer over their combination).
#[must_use]
pub fn rendezvous_hash(session: u64, worker_id: u64, dp_rank: u32) -> u64 {
    let mut z = session
        ^ worker_id.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ u64::from(dp_rank).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Scorer for SessionAffinity {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }

    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        let (rows, order) = candidates.raw();
        let costs = &mut costs[..order.len()];
        let Some(session) = request.session() else {
            costs.fill(0.0);
            return Ok(());
        };
        // The owner: the largest (hash, worker) among the rows with the required taints, the
        // row it was found at, and how many rows list that worker (a host may list one twice).
        let required = request.required_taints();
        let mut owner: Option<((u64, WorkerKey), usize)> = None;
        let mut listed = 0usize;
        // The owner's hash (0 before the first): a row with a lower hash cannot be the owner
        // nor list it, so most rows cost the hash and one comparison.
        let mut owner_hash = 0;
        for (i, r) in rows.iter().enumerate() {
            let hash = rendezvous_hash(session, r.worker.worker_id, r.worker.dp_rank);
            if hash < owner_hash || !r.taints.contains_all(required) {
                continue;
            }
            let key = (hash, r.worker);
            match owner {
                Some((best, _)) if key < best => {}
                Some((best, _)) if key == best => listed += 1,
                _ => {
                    owner = Some((key, i));
                    owner_hash = hash;
                    listed = 1;
                }
            }
        }
        costs.fill(0.0);
        let Some(((_, worker), at)) = owner else {
            return Ok(());
        };
        if listed == 1 {
            // Its one row, among the candidates' indices: no second pass over the rows.
            #[allow(clippy::cast_possible_truncation, reason = "rows.len() <= 2^31")]
            if let Some(k) = order.iter().position(|&i| i == at as u32) {
                costs[k] = -1.0;
            }
        } else {
            // The worker is not one of the groups a view hides, so reading the row directly is
            // what the candidate's view shows.
            for (cost, &i) in costs.iter_mut().zip(order) {
                if rows[i as usize].worker == worker {
                    *cost = -1.0;
                }
            }
        }
        Ok(())
    }
}

/// The parts of libroute's own time-to-first-token policy ([`FirstToken`]); each is one scorer of
/// the policy, so an explanation shows the estimate's parts in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FirstTokenPart {
    /// `base_ms + ms_per_prefill_token * queued`: the wait for the prefill work already queued
    /// on the worker (`active_prefill_tokens`), plus the fixed part; with a KV capacity set
    /// ([`FirstToken::kv_capacity_blocks`]), plus `ms_per_prefill_token * kv_wait`, the wait
    /// for KV room (see [`FirstToken::kv_capacity_blocks`]).
    Queue,
    /// `ms_per_prefill_token * uncached`: this request's own prefill, of the prompt tokens the
    /// worker does not hold (cached tokens from the CACHE inputs, which count the blocks of
    /// requests routed there and not yet computed when the host records them: `PENDING`).
    Prefill,
    /// `ms_per_active_request * (active_requests + 1)`: the decode work the prefill shares the
    /// worker's passes with (the requests there, this one included).
    Decode,
    /// `others_weight * (behind * ms_per_prefill_token * uncached + ms_per_active_request *
    /// sharing)`: the delay this request adds to others.
    ///
    /// Its uncached prefill delays the requests that queue behind it before it ends: the fleet's
    /// arrival rate times how long it takes there, by Little's law `behind = crowd * estimate /
    /// mean estimate`, where `crowd`, the requests waiting per worker that the router cannot
    /// route around, is the least wait any candidate has (its queued prefill time, plus its wait
    /// for KV room when priced) over the candidates' mean own-prefill time for this request. It
    /// is 0 while some candidate has no wait: a fleet with slack sends new requests there, so no
    /// one queues behind this one. The mean wait would read the queues of workers the requests
    /// pile onto as pressure on the whole fleet, and make the cached prefix weigh more exactly
    /// when the fleet has room elsewhere, so that the pile grew. It grows with the shortest
    /// queue, so prefix reuse weighs more as the whole fleet fills up, and an idle worker's short
    /// estimate keeps it attractive.
    ///
    /// Its decode shares the worker's passes with the first tokens of the requests that start
    /// there during its life, each delayed by `ms_per_active_request`: about as many as are
    /// active there now (Little's law again), and more where more are active, since each added
    /// sequence slows the others' decoding so they stay longer and overlap more arrivals (the
    /// superlinear delay of a shared server): `sharing = active * (1 + active / (mean active +
    /// 1))`, twice the active requests on a worker at the candidates' mean.
    DelayToOthers,
    /// `affinity_slack * busy * best`, added to every candidate that holds less than
    /// `affinity_share` of the longest cached prefix any candidate holds, where `best` is the
    /// smallest estimate (queue + prefill + decode) among the candidates and `busy = crowd / (1 +
    /// crowd)` the share of time the fleet's prefill queues are busy (0 when idle, toward 1 when
    /// saturated; `crowd` as in [`FirstTokenPart::DelayToOthers`]): as the fleet fills up, a hot
    /// prefix stays where it is cached unless that worker's estimate exceeds the best by more
    /// than the slack, and an idle fleet follows the estimate alone.
    Affinity,
}

/// The speed [`FirstToken`] assumes for a row without one: costs in token-equivalents (1 ms per
/// prefill token, nothing else), which order workers as the measured speeds of a uniform fleet
/// would.
pub const UNIT_SPEED: Speed = Speed {
    base_ms: 0.0,
    ms_per_prefill_token: 1.0,
    ms_per_active_request: 0.0,
};

/// libroute's own policy: the estimated time until this request's first token on each candidate,
/// in milliseconds, plus the delay it would add to the requests behind it, with an
/// affinity gate that keeps hot prefixes where they are cached (the `ttft` catalog type; each
/// [`FirstTokenPart`] is one of its scorers).
///
/// The estimate is `base_ms + ms_per_prefill_token * (queued + uncached) + ms_per_active_request *
/// (active_requests + 1)` (plus the wait for KV room when [`FirstToken::kv_capacity_blocks`] is
/// set), with the worker's [`Speed`] as the host measured it (SPEED: a
/// [`crate::Router`] learns it from timed bookings and prefill completions, see
/// [`crate::calibrate`]); `speed` set in the configuration overrides every row's. A row without a
/// speed takes the mean speed of the candidates that have one, or [`UNIT_SPEED`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FirstToken {
    /// Which part of the estimate this scorer writes.
    pub part: FirstTokenPart,
    /// A speed that overrides every row's, when set.
    pub speed: Option<Speed>,
    /// Weight of [`FirstTokenPart::DelayToOthers`], default 1.
    pub others_weight: f64,
    /// Share of the longest cached prefix a candidate must hold to pass the affinity gate
    /// without a penalty, default 0.5.
    pub affinity_share: f64,
    /// The penalty of the affinity gate, as a share of the best estimate, default 0.5.
    pub affinity_slack: f64,
    /// The workers' KV cache capacity in blocks of the request's block size (vLLM's
    /// `num_gpu_blocks`, Dynamo's `kv_total_blocks`), or 0 when unknown (default: no price for
    /// KV occupancy).
    ///
    /// With a capacity `C`, a worker whose running requests hold `D` booked KV blocks
    /// (`active_decode_blocks`, this request's new blocks included) charges the queue part
    /// `kv_wait = D * D * (bs / C)` prefill tokens more: `bs * D` tokens of prefill times the
    /// utilization `D / C`. The reason: a new request cannot start its prefill until its blocks
    /// have room, and the blocks of running requests free only as those requests finish.
    /// Dynamo's cost counts each booked block as one block of prefill; that wait only happens
    /// when the cache is contended, and the utilization is the chance a block stands in the
    /// way. An idle cache costs about nothing, so prefix reuse decides there; a full one costs
    /// Dynamo's price, and past capacity (the engine preempts or queues) more than that.
    pub kv_capacity_blocks: u64,
}

impl FirstToken {
    /// The `part` scorer with the default parameters.
    #[must_use]
    pub const fn new(part: FirstTokenPart) -> Self {
        Self {
            part,
            speed: None,
            others_weight: 1.0,
            affinity_share: 0.5,
            affinity_slack: 0.5,
            kv_capacity_blocks: 0,
        }
    }
}

/// What [`FirstToken`] reads of one candidate's counters, straight from the row (it declares
/// CACHE, LOAD and SPEED, so the unmasked row shows nothing undeclared): queued prefill tokens,
/// cached prompt tokens (at most the prompt), active requests and booked KV blocks.
#[derive(Clone, Copy)]
struct FirstTokenRow {
    queued: u64,
    cached: u64,
    active: u64,
    blocks: u64,
}

impl FirstTokenRow {
    #[inline]
    fn read(row: &Row, prompt: u64) -> Self {
        use crate::vocab::RowFlags;
        let load = row.flags.contains(RowFlags::HAS_LOAD);
        let cached = if row.flags.contains(RowFlags::HAS_CACHE) {
            row.effective_tokens
        } else {
            0
        };
        Self {
            queued: if load { row.active_prefill_tokens } else { 0 },
            cached: if cached < prompt { cached } else { prompt },
            active: if load { row.active_requests } else { 0 },
            blocks: if load { row.active_decode_blocks } else { 0 },
        }
    }
}

/// A scorer pass over the candidates' [`FirstTokenRow`]s and their speeds: the override, the
/// row's, or the candidates' mean; `PRICED` when the wait for KV room is (a capacity is known),
/// so an unpriced pass does not carry the term.
struct FirstTokenRows<'a, const PRICED: bool> {
    rows: &'a [Row],
    order: &'a [u32],
    prompt: u64,
    /// [`RowFlags::HAS_SPEED`] when a row's own speed is used, 0 when the override is set.
    own_speed: u32,
    /// The override, or the speed of a candidate without one.
    fallback: Speed,
    kv: KvRoom,
}

impl<'a, const PRICED: bool> FirstTokenRows<'a, PRICED> {
    fn new(model: &FirstToken, request: &RequestView<'_>, candidates: &'a Candidates<'_>) -> Self {
        let prompt = request.prompt_tokens();
        let (rows, order) = candidates.raw();
        // Only a candidate without a speed takes the mean, so it is not computed without one.
        let fallback = match model.speed {
            Some(fixed) => fixed,
            None if order.iter().all(|&i| rows[i as usize].speed().is_some()) => UNIT_SPEED,
            None => mean_speed(order.iter().filter_map(|&i| rows[i as usize].speed())),
        };
        Self {
            rows,
            order,
            prompt,
            own_speed: if model.speed.is_some() {
                0
            } else {
                RowFlags::HAS_SPEED.0
            },
            fallback,
            kv: KvRoom::new(model.kv_capacity_blocks, request.block_size()),
        }
    }

    /// Every candidate, in order, with its speed: the override, its own, or the fallback, chosen
    /// by one test of the row's flags (the speed's fields are read either way).
    fn iter(&self) -> impl Iterator<Item = (FirstTokenRow, Speed)> + '_ {
        self.order.iter().map(|&i| {
            let row = &self.rows[i as usize];
            let own = row.flags.0 & self.own_speed != 0;
            let pick = |row: f64, fallback: f64| if own { row } else { fallback };
            let f = &self.fallback;
            let speed = Speed {
                base_ms: pick(row.base_ms, f.base_ms),
                ms_per_prefill_token: pick(row.ms_per_prefill_token, f.ms_per_prefill_token),
                ms_per_active_request: pick(row.ms_per_active_request, f.ms_per_active_request),
            };
            (FirstTokenRow::read(row, self.prompt), speed)
        })
    }

    /// The wait for KV room of a candidate, prefill tokens (0 when not priced).
    #[inline]
    fn kv_wait(&self, r: &FirstTokenRow) -> f64 {
        if PRICED { self.kv.wait(r.blocks) } else { 0.0 }
    }

    /// The estimated time to first token of this request on a candidate whose wait for KV room
    /// is `kv_wait` ([`FirstTokenRows::kv_wait`]).
    fn estimate(&self, r: &FirstTokenRow, s: &Speed, kv_wait: f64) -> f64 {
        let ms = s.first_token_ms(
            r.queued.saturating_add(self.prompt - r.cached),
            r.active.saturating_add(1),
        );
        with_kv_wait::<PRICED>(ms, s, kv_wait)
    }

    /// The candidates' aggregates, in one pass.
    fn summary(&self) -> FirstTokenSummary {
        let mut sum = FirstTokenSums::new();
        for (r, s) in self.iter() {
            let t = FirstTokenTerms::of(&r, self);
            sum.add::<PRICED>(&t, &s, self.estimate(&r, &s, t.kv_wait));
        }
        sum.finish(self.order.len())
    }
}

/// [`FirstTokenSummary`] as it is gathered, a candidate at a time and in order, by the summary
/// pass and by the `ttft` type's pass that writes its first three parts.
struct FirstTokenSums {
    own_ms: f64,
    estimates: f64,
    active: f64,
    longest: u64,
    best: f64,
    least_wait: f64,
}

impl FirstTokenSums {
    const fn new() -> Self {
        Self {
            own_ms: 0.0,
            estimates: 0.0,
            active: 0.0,
            longest: 0,
            best: f64::INFINITY,
            least_wait: f64::INFINITY,
        }
    }

    /// Adds the next candidate: its terms, its speed and its estimate.
    #[inline]
    fn add<const PRICED: bool>(&mut self, t: &FirstTokenTerms, s: &Speed, estimate: f64) {
        let wait = with_kv_wait::<PRICED>(s.ms_per_prefill_token * t.queued, s, t.kv_wait);
        if wait < self.least_wait {
            self.least_wait = wait;
        }
        self.own_ms += s.ms_per_prefill_token * t.uncached;
        self.estimates += estimate;
        self.active += t.active;
        if t.cached > self.longest {
            self.longest = t.cached;
        }
        if estimate < self.best {
            self.best = estimate;
        }
    }

    /// The summary of the `n` candidates added.
    fn finish(self, n: usize) -> FirstTokenSummary {
        let n = as_cost(n as u64);
        FirstTokenSummary {
            crowd: if self.own_ms > 0.0 {
                n * self.least_wait / self.own_ms
            } else {
                0.0
            },
            mean_estimate: self.estimates / n,
            mean_active: self.active / n,
            longest: self.longest,
            best: self.best,
        }
    }
}

/// What the delay to others and the affinity gate need of all the candidates.
struct FirstTokenSummary {
    /// How many requests wait per worker that the router cannot route around: the least wait
    /// (queued prefill, and KV room when priced) over the candidates' mean time to prefill this
    /// request.
    crowd: f64,
    /// The candidates' mean estimate.
    mean_estimate: f64,
    /// Their mean active requests.
    mean_active: f64,
    /// The longest cached prefix, tokens.
    longest: u64,
    /// The smallest estimate.
    best: f64,
}

/// The wait for KV room ([`FirstToken::kv_capacity_blocks`]) per booked block squared.
#[derive(Clone, Copy)]
struct KvRoom {
    /// `bs / C`: the wait in prefill tokens is `D * D` times this (0 without a capacity).
    per_block: f64,
}

impl KvRoom {
    fn new(capacity_blocks: u64, block_size: u32) -> Self {
        Self {
            // One division per selection, not one per row.
            per_block: if capacity_blocks > 0 {
                f64::from(block_size) / as_cost(capacity_blocks)
            } else {
                0.0
            },
        }
    }

    /// `kv_wait = D * D * (bs / C)` prefill tokens for `D = blocks` booked: `bs * D` tokens of
    /// prefill times the utilization `D / C`.
    #[inline]
    fn wait(self, blocks: u64) -> f64 {
        let d = as_cost(blocks);
        d * d * self.per_block
    }
}

/// `ms` plus the time of a `wait` for KV room (prefill tokens) at speed `s` when `PRICED`; `ms`
/// itself, bit for bit, when not.
#[inline]
fn with_kv_wait<const PRICED: bool>(ms: f64, s: &Speed, wait: f64) -> f64 {
    if PRICED {
        ms + s.ms_per_prefill_token * wait
    } else {
        ms
    }
}

/// The mean of `speeds`, [`UNIT_SPEED`] when there are none.
fn mean_speed(speeds: impl Iterator<Item = Speed>) -> Speed {
    let mut sum = Speed::default();
    let mut n = 0u32;
    for s in speeds {
        sum.base_ms += s.base_ms;
        sum.ms_per_prefill_token += s.ms_per_prefill_token;
        sum.ms_per_active_request += s.ms_per_active_request;
        n += 1;
    }
    if n == 0 {
        return UNIT_SPEED;
    }
    let n = f64::from(n);
    Speed {
        base_ms: sum.base_ms / n,
        ms_per_prefill_token: sum.ms_per_prefill_token / n,
        ms_per_active_request: sum.ms_per_active_request / n,
    }
}

/// One candidate's terms of the estimate, each converted once: what every part's cost is made of.
#[derive(Clone, Copy)]
struct FirstTokenTerms {
    queued: f64,
    uncached: f64,
    active: f64,
    /// `active + 1`, saturating.
    decode: f64,
    cached: u64,
    /// `kv_wait`, prefill tokens (0 when not priced).
    kv_wait: f64,
}

impl FirstTokenTerms {
    #[inline]
    fn of<const PRICED: bool>(r: &FirstTokenRow, rows: &FirstTokenRows<'_, PRICED>) -> Self {
        Self {
            queued: as_cost(r.queued),
            uncached: as_cost(rows.prompt - r.cached),
            active: as_cost(r.active),
            decode: as_cost(r.active.saturating_add(1)),
            cached: r.cached,
            kv_wait: rows.kv_wait(r),
        }
    }
}

/// What the parts that compare a candidate with the others take from all of them: the delay to
/// others' `crowd`, mean estimate and mean active requests, and the affinity gate's threshold and
/// penalty (zeros when no part needs them).
#[derive(Clone, Copy, Default)]
struct FirstTokenShared {
    crowd: f64,
    mean: f64,
    mean_active: f64,
    longest: u64,
    threshold: f64,
    penalty: f64,
}

impl FirstToken {
    fn shared(&self, summary: &FirstTokenSummary) -> FirstTokenShared {
        let busy = summary.crowd / (1.0 + summary.crowd);
        FirstTokenShared {
            crowd: summary.crowd,
            mean: summary.mean_estimate,
            mean_active: summary.mean_active,
            longest: summary.longest,
            threshold: self.affinity_share * as_cost(summary.longest),
            penalty: self.affinity_slack * busy * summary.best,
        }
    }

    /// Part `part`'s cost of one candidate: its terms `t`, its speed `s`, and, for the parts that
    /// need them, its estimate and what all candidates share. The one definition of each part's
    /// formula, for one part at a time and for the parts together.
    #[inline]
    fn part_cost<const PRICED: bool>(
        &self,
        part: FirstTokenPart,
        t: &FirstTokenTerms,
        s: &Speed,
        estimate: impl FnOnce() -> f64,
        all: &FirstTokenShared,
    ) -> f64 {
        match part {
            FirstTokenPart::Queue => {
                with_kv_wait::<PRICED>(s.base_ms + s.ms_per_prefill_token * t.queued, s, t.kv_wait)
            }
            FirstTokenPart::Prefill => s.ms_per_prefill_token * t.uncached,
            FirstTokenPart::Decode => s.ms_per_active_request * t.decode,
            FirstTokenPart::DelayToOthers => {
                // Requests that queue behind this one before its prefill ends there: the
                // fleet's crowd, in proportion to how long that takes on this worker.
                let behind = if all.mean > 0.0 {
                    all.crowd * estimate() / all.mean
                } else {
                    0.0
                };
                // First tokens that share passes with its decode: as many as are active
                // there, more on a worker busier than the fleet's mean.
                let sharing = t.active * (1.0 + t.active / (all.mean_active + 1.0));
                self.others_weight
                    * (behind * s.ms_per_prefill_token * t.uncached
                        + s.ms_per_active_request * sharing)
            }
            FirstTokenPart::Affinity => {
                if all.longest > 0 && as_cost(t.cached) < all.threshold {
                    all.penalty
                } else {
                    0.0
                }
            }
        }
    }

    /// What `parts` share of all candidates: a summary pass when some part needs it.
    fn shared_for<const PRICED: bool>(
        &self,
        rows: &FirstTokenRows<'_, PRICED>,
        mut parts: impl Iterator<Item = FirstTokenPart>,
    ) -> FirstTokenShared {
        if parts.any(|p| matches!(p, FirstTokenPart::DelayToOthers | FirstTokenPart::Affinity)) {
            self.shared(&rows.summary())
        } else {
            FirstTokenShared::default()
        }
    }
}

impl Scorer for FirstToken {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::CACHE | WorkerInputs::LOAD | WorkerInputs::SPEED | WorkerInputs::PENDING
    }

    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        if self.kv_capacity_blocks > 0 {
            self.score_priced::<true>(request, candidates, costs);
        } else {
            self.score_priced::<false>(request, candidates, costs);
        }
        Ok(())
    }
}

impl FirstToken {
    /// [`Scorer::score`] with the wait for KV room priced or not.
    fn score_priced<const PRICED: bool>(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) {
        let rows = FirstTokenRows::<PRICED>::new(self, request, candidates);
        let all = self.shared_for(&rows, core::iter::once(self.part));
        for (cost, (r, s)) in costs.iter_mut().zip(rows.iter()) {
            let t = FirstTokenTerms::of(&r, &rows);
            *cost = self.part_cost::<PRICED>(
                self.part,
                &t,
                &s,
                || rows.estimate(&r, &s, t.kv_wait),
                &all,
            );
        }
    }

    /// [`Scorer::score_run`] for parts of one estimate (the `ttft` type's five): the speeds'
    /// fallback and the summary computed once, and each candidate's row read and its terms
    /// converted once for all the parts of a pass, through the same [`FirstToken::part_cost`].
    /// The `ttft` type's parts take two passes: the summary is gathered in the first, beside
    /// the parts that do not need it, so no pass is the summary's alone.
    fn score_parts(
        &self,
        parts: &[FirstTokenPart],
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        columns: &mut [f64],
        stride: usize,
    ) {
        if self.kv_capacity_blocks > 0 {
            self.score_parts_priced::<true>(parts, request, candidates, columns, stride);
        } else {
            self.score_parts_priced::<false>(parts, request, candidates, columns, stride);
        }
    }

    /// [`FirstToken::score_parts`] with the wait for KV room priced or not.
    fn score_parts_priced<const PRICED: bool>(
        &self,
        parts: &[FirstTokenPart],
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        columns: &mut [f64],
        stride: usize,
    ) {
        use FirstTokenPart::{Affinity, Decode, DelayToOthers, Prefill, Queue};
        let rows = FirstTokenRows::<PRICED>::new(self, request, candidates);
        if parts == [Queue, Prefill, Decode, DelayToOthers, Affinity] && columns.len() >= 5 * stride
        {
            // The `ttft` type's parts, in its order: a pass writing the first three parts, each
            // candidate's estimate (kept in the delay's column) and the summary, then a pass
            // writing the two parts that compare a candidate with the others.
            let (queue, rest) = columns.split_at_mut(stride);
            let (prefill, rest) = rest.split_at_mut(stride);
            let (decode, rest) = rest.split_at_mut(stride);
            let (others, affinity) = rest.split_at_mut(stride);
            let own = queue
                .iter_mut()
                .zip(prefill.iter_mut())
                .zip(decode.iter_mut())
                .zip(others.iter_mut());
            let (mut sum, none) = (FirstTokenSums::new(), FirstTokenShared::default());
            for ((((q, p), d), e), (r, s)) in own.zip(rows.iter()) {
                let t = FirstTokenTerms::of(&r, &rows);
                let estimate = rows.estimate(&r, &s, t.kv_wait);
                *q = self.part_cost::<PRICED>(Queue, &t, &s, || 0.0, &none);
                *p = self.part_cost::<PRICED>(Prefill, &t, &s, || 0.0, &none);
                *d = self.part_cost::<PRICED>(Decode, &t, &s, || 0.0, &none);
                *e = estimate;
                sum.add::<PRICED>(&t, &s, estimate);
            }
            let all = self.shared(&sum.finish(rows.order.len()));
            let compared = others.iter_mut().zip(affinity.iter_mut());
            for ((o, a), (r, s)) in compared.zip(rows.iter()) {
                let t = FirstTokenTerms::of(&r, &rows);
                let estimate = *o;
                *o = self.part_cost::<PRICED>(DelayToOthers, &t, &s, || estimate, &all);
                *a = self.part_cost::<PRICED>(Affinity, &t, &s, || 0.0, &all);
            }
            return;
        }
        let all = self.shared_for(&rows, parts.iter().copied());
        for (k, (r, s)) in rows.iter().enumerate() {
            let t = FirstTokenTerms::of(&r, &rows);
            for (p, &part) in parts.iter().enumerate() {
                columns[p * stride + k] = self.part_cost::<PRICED>(
                    part,
                    &t,
                    &s,
                    || rows.estimate(&r, &s, t.kv_wait),
                    &all,
                );
            }
        }
    }
}

/// Removes workers that lack any of `taints` (on top of the request's own required taints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequireTaints(pub TaintSet);

impl Filter for RequireTaints {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }

    fn check(
        &self,
        _request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Verdict, ComponentError> {
        Ok(if row.raw().taints.contains_all(self.0) {
            Verdict::Keep
        } else {
            Verdict::Reject
        })
    }

    fn check_rows(
        &self,
        request: &RequestView<'_>,
        admission: &mut Admission<'_>,
    ) -> Option<Result<(), ComponentError>> {
        if self.0 == TaintSet::EMPTY {
            // Requiring no taint keeps every row: no pass over them.
            return Some(Ok(()));
        }
        Some(admission.check_with(self, request))
    }

    fn row_rule(&self) -> Option<RowRule> {
        Some(RowRule::requiring(self.0))
    }
}

/// Removes workers above a load limit as overloaded (a row without a load projection passes).
/// Each limit is optional; a row is overloaded when it exceeds any that is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OverloadLimits {
    /// Most active KV blocks.
    pub max_active_blocks: Option<u64>,
    /// Most outstanding prefill tokens.
    pub max_prefill_tokens: Option<u64>,
    /// Most active requests.
    pub max_requests: Option<u64>,
}

impl Filter for OverloadLimits {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::LOAD
    }

    fn check(
        &self,
        _request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Verdict, ComponentError> {
        let Some(load) = row.load().filter(|l| l.available) else {
            return Ok(Verdict::Keep);
        };
        let over = |limit: Option<u64>, value: u64| limit.is_some_and(|max| value > max);
        Ok(
            if over(self.max_active_blocks, load.active_decode_blocks)
                || over(self.max_prefill_tokens, load.active_prefill_tokens)
                || over(self.max_requests, load.active_requests)
            {
                Verdict::Overloaded
            } else {
                Verdict::Keep
            },
        )
    }

    fn check_rows(
        &self,
        request: &RequestView<'_>,
        admission: &mut Admission<'_>,
    ) -> Option<Result<(), ComponentError>> {
        Some(admission.check_with(self, request))
    }

    fn row_rule(&self) -> Option<RowRule> {
        let limit = |limit: Option<u64>| limit.unwrap_or(u64::MAX);
        Some(
            RowRule::NONE
                .with_max_active_blocks(limit(self.max_active_blocks))
                .with_max_prefill_tokens(limit(self.max_prefill_tokens))
                .with_max_requests(limit(self.max_requests)),
        )
    }
}

/// The most worker ids an [`AllowList`] holds.
pub const MAX_ALLOWED: usize = 64;

/// Keeps only the listed worker ids (every rank of each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowList {
    ids: heapless::Vec<u64, MAX_ALLOWED>,
}

impl AllowList {
    /// An allow-list of `ids`, or `None` when there are more than [`MAX_ALLOWED`].
    #[must_use]
    pub fn new(ids: &[u64]) -> Option<Self> {
        Some(AllowList {
            ids: heapless::Vec::from_slice(ids).ok()?,
        })
    }

    /// The listed ids.
    #[must_use]
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }
}

impl Filter for AllowList {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }

    fn check(
        &self,
        _request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Verdict, ComponentError> {
        Ok(if self.ids().contains(&row.worker().worker_id) {
            Verdict::Keep
        } else {
            Verdict::Reject
        })
    }

    fn check_rows(
        &self,
        request: &RequestView<'_>,
        admission: &mut Admission<'_>,
    ) -> Option<Result<(), ComponentError>> {
        Some(admission.check_with(self, request))
    }
}

/// The minimum cost, ties drawn uniformly from the selector's stream: the default picker at
/// temperature 0, and what score-based systems call a max-score picker (costs here are negated
/// scores). Unlike a first-index max-score picker, a burst of identical requests at tied costs
/// spreads over the tied workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MinCostPicker;

impl Picker for MinCostPicker {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }

    fn pick(
        &self,
        input: &PickInput<'_>,
        work: &mut [f64],
        rng: &mut dyn RandomSource,
    ) -> Result<Pick, ComponentError> {
        DefaultPicker { temperature: 0.0 }.pick(input, work, rng)
    }

    fn picks_least_cost(&self) -> bool {
        true
    }
}

/// A uniformly random candidate, ignoring costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RandomPicker;

impl Picker for RandomPicker {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }

    fn pick(
        &self,
        input: &PickInput<'_>,
        _work: &mut [f64],
        rng: &mut dyn RandomSource,
    ) -> Result<Pick, ComponentError> {
        let m = input.candidate_count as u64;
        #[allow(clippy::cast_possible_truncation, reason = "index < m <= usize::MAX")]
        Ok(Pick {
            index: input.entry(rng::index(rng, m) as usize),
            reason: PickReason::Custom,
        })
    }

    fn picks_by_position(&self) -> bool {
        true
    }
}

/// Round-robin over the candidates in the order the picker sees them (sorted by worker when the
/// policy is seeded): the `n`-th round-robin pick made with a [`crate::Selector`] takes
/// candidate `n mod m` ([`PickInput::turn`]). The position is the caller's: each selector (each
/// thread) takes its own turns, and the picker itself is an immutable value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoundRobinPicker;

impl Picker for RoundRobinPicker {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }

    fn pick(
        &self,
        input: &PickInput<'_>,
        _work: &mut [f64],
        _rng: &mut dyn RandomSource,
    ) -> Result<Pick, ComponentError> {
        let m = input.candidate_count as u64;
        #[allow(clippy::cast_possible_truncation, reason = "index < m <= usize::MAX")]
        Ok(Pick {
            index: input.entry((input.turn % m) as usize),
            reason: PickReason::Custom,
        })
    }

    fn takes_turns(&self) -> bool {
        true
    }

    fn picks_by_position(&self) -> bool {
        true
    }
}

/// Power of `k` choices (two by default): draws `k` distinct candidates uniformly and takes the
/// one of least cost (the first drawn among equals). With [`LeastLoaded`] this is the classic
/// power-of-two-choices balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerOfChoices {
    /// Candidates drawn, at least 1; all of them when there are fewer.
    pub k: u32,
}

impl Default for PowerOfChoices {
    fn default() -> Self {
        Self { k: 2 }
    }
}

impl Picker for PowerOfChoices {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::NONE
    }

    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_precision_loss,
        clippy::cast_sign_loss,
        reason = "candidate positions are below 2^32, exact in f64"
    )]
    fn pick(
        &self,
        input: &PickInput<'_>,
        work: &mut [f64],
        rng: &mut dyn RandomSource,
    ) -> Result<Pick, ComponentError> {
        let (costs, m) = (input.costs, input.candidate_count);
        let draws = (self.k.max(1) as usize).min(m);
        // The entry of the least cost drawn so far, the first drawn among equals.
        let mut best: Option<usize> = None;
        // An entry out of range (none is, from the engine) reads as the largest cost, and the
        // engine reports a pick of it.
        let cost = |entry: usize| costs.get(entry).copied().unwrap_or(f64::INFINITY);
        let mut consider = |k: usize| {
            let entry = input.entry(k);
            if best.is_none_or(|b| cost(entry) < cost(b)) {
                best = Some(entry);
            }
        };
        // A partial Fisher-Yates shuffle of the positions: draw `i` swaps position `i` with a
        // random `j >= i` and takes what lands at `i`.
        if draws <= FEW_DRAWS {
            // Only the positions a draw moved differ from their index, so those are kept, not all
            // `m`. Draw `i` reads positions `i` and `j`, and no later draw reads position `i`,
            // so only `j` needs what was at `i`.
            let mut moved = Moved::default();
            for i in 0..draws {
                let j = i + rng::index(rng, (m - i) as u64) as usize;
                let (at_i, at_j) = (moved.at(i), moved.at(j));
                moved.set(j, at_i);
                consider(at_j);
            }
        } else {
            // The positions in the f64 scratch (exact below 2^53).
            let positions = &mut work[..m];
            for (k, p) in positions.iter_mut().enumerate() {
                *p = k as f64;
            }
            for i in 0..draws {
                let j = i + rng::index(rng, (m - i) as u64) as usize;
                positions.swap(i, j);
                consider(positions[i] as usize);
            }
        }
        Ok(Pick {
            index: best.unwrap_or(0),
            reason: PickReason::Custom,
        })
    }

    /// Up to 8 draws (`FEW_DRAWS`): each draw finds its candidate through [`PickInput::entry`],
    /// a pass over the entries' marks when rows were left in place, so many draws would cost
    /// many passes; more draws take the candidates moved to the front.
    fn picks_by_position(&self) -> bool {
        self.k as usize <= FEW_DRAWS
    }
}

/// [`PowerOfChoices`] keeps the positions its draws moved, rather than all of them, for at most
/// this many draws.
const FEW_DRAWS: usize = 8;

/// The positions of a partial shuffle that differ from their index, as `(position, what is
/// there)`: at most one per draw.
#[derive(Default)]
struct Moved {
    entries: [(usize, usize); FEW_DRAWS],
    len: usize,
}

impl Moved {
    /// What is at `position`.
    fn at(&self, position: usize) -> usize {
        self.entries[..self.len]
            .iter()
            .find(|&&(p, _)| p == position)
            .map_or(position, |&(_, k)| k)
    }

    /// Puts `k` at `position`.
    fn set(&mut self, position: usize, k: usize) {
        if let Some(entry) = self.entries[..self.len]
            .iter_mut()
            .find(|(p, _)| *p == position)
        {
            entry.1 = k;
        } else {
            self.entries[self.len] = (position, k);
            self.len += 1;
        }
    }
}

/// Any builtin filter.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "no allocation: the allow-list is stored inline, once per policy"
)]
pub enum BuiltinFilter {
    /// [`RequireTaints`].
    RequireTaints(RequireTaints),
    /// [`OverloadLimits`].
    OverloadLimits(OverloadLimits),
    /// [`AllowList`].
    AllowList(AllowList),
}

impl BuiltinFilter {
    fn get(&self) -> &dyn Filter {
        match self {
            BuiltinFilter::RequireTaints(f) => f,
            BuiltinFilter::OverloadLimits(f) => f,
            BuiltinFilter::AllowList(f) => f,
        }
    }
}

impl Filter for BuiltinFilter {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        self.get().inputs(leg)
    }

    /// Each variant's check called directly (not through `BuiltinFilter::get`'s `dyn`), so a
    /// list of builtin filters inlines into the selection's loop.
    #[inline]
    fn check(
        &self,
        request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Verdict, ComponentError> {
        match self {
            BuiltinFilter::RequireTaints(f) => f.check(request, row),
            BuiltinFilter::OverloadLimits(f) => f.check(request, row),
            BuiltinFilter::AllowList(f) => f.check(request, row),
        }
    }

    fn check_rows(
        &self,
        request: &RequestView<'_>,
        admission: &mut Admission<'_>,
    ) -> Option<Result<(), ComponentError>> {
        match self {
            BuiltinFilter::RequireTaints(f) => f.check_rows(request, admission),
            BuiltinFilter::OverloadLimits(f) => f.check_rows(request, admission),
            BuiltinFilter::AllowList(f) => f.check_rows(request, admission),
        }
    }

    fn row_rule(&self) -> Option<RowRule> {
        self.get().row_rule()
    }
}

/// Any builtin scorer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BuiltinScorer {
    /// Dynamo's default cost ([`DefaultCost`]).
    Default(DefaultCost),
    /// [`LeastLoaded`].
    LeastLoaded(LeastLoaded),
    /// [`DynamoTwoTier`].
    DynamoTwoTier(DynamoTwoTier),
    /// [`SglangCacheAware`].
    SglangCacheAware(SglangCacheAware),
    /// [`PrefixScore`].
    Prefix(PrefixScore),
    /// [`KvUtilizationScore`].
    KvUtilization(KvUtilizationScore),
    /// [`QueueScore`].
    Queue(QueueScore),
    /// [`SessionAffinity`].
    SessionAffinity(SessionAffinity),
    /// A part of [`FirstToken`].
    FirstToken(FirstToken),
}

impl BuiltinScorer {
    fn get(&self) -> &dyn Scorer {
        match self {
            BuiltinScorer::Default(s) => s,
            BuiltinScorer::LeastLoaded(s) => s,
            BuiltinScorer::DynamoTwoTier(s) => s,
            BuiltinScorer::SglangCacheAware(s) => s,
            BuiltinScorer::Prefix(s) => s,
            BuiltinScorer::KvUtilization(s) => s,
            BuiltinScorer::Queue(s) => s,
            BuiltinScorer::SessionAffinity(s) => s,
            BuiltinScorer::FirstToken(s) => s,
        }
    }
}

/// A builtin scorer and its weight: the scorer's costs are multiplied by `weight` (skipped when
/// it is 1, so the default cost stays bit-exact).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeightedScorer {
    /// The scorer.
    pub scorer: BuiltinScorer,
    /// Its weight; finite.
    pub weight: f64,
}

impl Scorer for WeightedScorer {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        self.scorer.get().inputs(leg)
    }

    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        self.scorer.get().score(request, candidates, costs)?;
        self.weigh(costs);
        Ok(())
    }

    /// Scores together a run of [`FirstToken`] parts of one model at weight 1 (the `ttft`
    /// type), or a run of llm-d's scorers ([`PrefixScore`], [`KvUtilizationScore`],
    /// [`QueueScore`], the `llm_d` type), up to [`MAX_SCORERS`] of them; any other run, one at
    /// a time.
    fn score_run(
        run: &[Self],
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        columns: &mut [f64],
        stride: usize,
    ) -> Option<Result<(), (usize, ComponentError)>> {
        // The columns as the engine passes them: apart (at least one value apart), each as
        // long as the candidates.
        let n = candidates.len();
        if run.len() > MAX_SCORERS
            || stride < n.max(1)
            || columns.len() < run.len().saturating_sub(1) * stride + n
            || !run
                .iter()
                .all(|w| request.inputs().contains(w.inputs(request.leg())))
        {
            return None;
        }
        match run.first()?.scorer {
            BuiltinScorer::FirstToken(model) => {
                Self::first_token_run(model, run, request, candidates, columns, stride)
            }
            BuiltinScorer::Prefix(_)
            | BuiltinScorer::KvUtilization(_)
            | BuiltinScorer::Queue(_) => Self::llm_d_run(run, request, candidates, columns, stride),
            _ => None,
        }
    }

    fn score_all_rows(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<usize> {
        // At weight 1 the costs are the scorer's own, so its one-pass steps apply.
        if self.weight == 1.0 {
            self.scorer
                .get()
                .score_all_rows(request, rows, order, costs)
        } else {
            None
        }
    }

    fn score_all_rows_in_place(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<OnePass> {
        if self.weight == 1.0 {
            self.scorer
                .get()
                .score_all_rows_in_place(request, rows, order, costs)
        } else {
            None
        }
    }

    fn costs_are_per_row(&self) -> bool {
        self.scorer.get().costs_are_per_row()
    }

    /// At weight 1, whether the scorer's pass applies rules (at other weights there is no
    /// pass).
    fn applies_row_rules(&self) -> bool {
        self.weight == 1.0 && self.scorer.get().applies_row_rules()
    }
}

impl WeightedScorer {
    /// Multiplies `costs` by the weight (nothing at weight 1).
    #[inline]
    fn weigh(&self, costs: &mut [f64]) {
        if self.weight != 1.0 {
            for c in costs.iter_mut() {
                *c *= self.weight;
            }
        }
    }

    /// The `ttft` type's parts of `model` together, when every scorer of `run` is one at
    /// weight 1.
    fn first_token_run(
        model: FirstToken,
        run: &[Self],
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        columns: &mut [f64],
        stride: usize,
    ) -> Option<Result<(), (usize, ComponentError)>> {
        let mut parts = [FirstTokenPart::Queue; MAX_SCORERS];
        for (part, w) in parts.iter_mut().zip(run) {
            match w.scorer {
                BuiltinScorer::FirstToken(m)
                    if w.weight == 1.0
                        && FirstToken {
                            part: model.part,
                            ..m
                        } == model =>
                {
                    *part = m.part;
                }
                _ => return None,
            }
        }
        model.score_parts(&parts[..run.len()], request, candidates, columns, stride);
        Some(Ok(()))
    }

    /// A run of llm-d's scorers (any of [`PrefixScore`], [`KvUtilizationScore`] and
    /// [`QueueScore`], at any weights, in any order): every row read once for the first
    /// scorer of each kind, each one's per-row figure into its column (the queues' range as
    /// they go; a second scorer of a kind reads its own), then each column turned into costs
    /// where it lies, with the same formulas as each one's `score`.
    fn llm_d_run(
        run: &[Self],
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        columns: &mut [f64],
        stride: usize,
    ) -> Option<Result<(), (usize, ComponentError)>> {
        // The first scorer of each kind (the prefix scorer with its tier credits) and its column.
        let (mut prefix, mut used, mut queue) = (None, None, None);
        for (s, w) in run.iter().enumerate() {
            match w.scorer {
                BuiltinScorer::Prefix(p) => {
                    prefix.get_or_insert((p, s));
                }
                BuiltinScorer::KvUtilization(_) => {
                    used.get_or_insert(s);
                }
                BuiltinScorer::Queue(_) => {
                    queue.get_or_insert(s);
                }
                _ => return None,
            }
        }
        let (rows, order) = candidates.raw();
        let n = order.len();
        let mut queues = QueueRange::default();
        let gather = Gather {
            rows,
            order,
            stride,
        };
        match (prefix, used, queue) {
            (Some(p), Some(u), Some(q)) => gather.three(columns, p, u, q, &mut queues),
            (Some(p), None, Some(q)) => gather.two(columns, p, q, &mut queues),
            _ => {
                if let Some((p, s)) = prefix {
                    gather.one(columns, s, |row| p.credit(row));
                }
                if let Some(s) = used {
                    gather.one(columns, s, KvUtilizationScore::used);
                }
                if let Some(s) = queue {
                    gather.one(columns, s, |row| queues.add(row));
                }
            }
        }
        // A second scorer of a kind (another weight, other tier credits) reads its own.
        for (s, w) in run.iter().enumerate() {
            match w.scorer {
                BuiltinScorer::Prefix(p) if prefix.map(|(_, first)| first) != Some(s) => {
                    gather.one(columns, s, |row| p.credit(row));
                }
                BuiltinScorer::KvUtilization(_) if used != Some(s) => {
                    gather.one(columns, s, KvUtilizationScore::used);
                }
                BuiltinScorer::Queue(_) if queue != Some(s) => {
                    gather.one(columns, s, |row| queues.add(row));
                }
                _ => {}
            }
        }
        let blocks = as_cost(request.request_blocks());
        for (s, w) in run.iter().enumerate() {
            let column = &mut columns[s * stride..][..n];
            match w.scorer {
                BuiltinScorer::Prefix(_) => {
                    for c in column.iter_mut() {
                        *c = PrefixScore::cost(*c, blocks);
                    }
                }
                BuiltinScorer::KvUtilization(u) => {
                    let capacity = u.capacity();
                    for c in column.iter_mut() {
                        *c = KvUtilizationScore::cost(*c, capacity);
                    }
                }
                _ => queues.finish(column, rows, order),
            }
            w.weigh(column);
        }
        Some(Ok(()))
    }
}

/// Any builtin picker.
#[derive(Debug, Clone, PartialEq)]
pub enum BuiltinPicker {
    /// The default picker (temperature sampling, or the minimum with uniform ties at 0).
    Default(DefaultPicker),
    /// [`MinCostPicker`] (also "max score").
    MinCost(MinCostPicker),
    /// [`RandomPicker`].
    Random(RandomPicker),
    /// [`RoundRobinPicker`].
    RoundRobin(RoundRobinPicker),
    /// [`PowerOfChoices`].
    PowerOfChoices(PowerOfChoices),
}

impl BuiltinPicker {
    fn get(&self) -> &dyn Picker {
        match self {
            BuiltinPicker::Default(p) => p,
            BuiltinPicker::MinCost(p) => p,
            BuiltinPicker::Random(p) => p,
            BuiltinPicker::RoundRobin(p) => p,
            BuiltinPicker::PowerOfChoices(p) => p,
        }
    }
}

impl Picker for BuiltinPicker {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        self.get().inputs(leg)
    }

    fn pick(
        &self,
        input: &PickInput<'_>,
        work: &mut [f64],
        rng: &mut dyn RandomSource,
    ) -> Result<Pick, ComponentError> {
        self.get().pick(input, work, rng)
    }

    fn takes_turns(&self) -> bool {
        self.get().takes_turns()
    }

    fn picks_by_position(&self) -> bool {
        self.get().picks_by_position()
    }

    fn picks_least_cost(&self) -> bool {
        self.get().picks_least_cost()
    }
}

/// A list of at most `N` components in fixed storage (no allocation): the filters and scorers of
/// a policy assembled at run time. `push` hands the item back when the list is full.
pub type List<T, const N: usize> = heapless::Vec<T, N>;

impl<T: Filter, const N: usize> Filters for List<T, N> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn get(&self, i: usize) -> Option<&dyn Filter> {
        self.as_slice().get(i).map(|f| f as &dyn Filter)
    }

    fn first_refusal(
        &self,
        request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Option<(usize, Verdict)>, (usize, ComponentError)> {
        refusal_among(self.as_slice(), request, row)
    }
}

impl<T: Scorer, const N: usize> Scorers for List<T, N> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }

    fn get(&self, i: usize) -> Option<&dyn Scorer> {
        self.as_slice().get(i).map(|s| s as &dyn Scorer)
    }

    fn score_together(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        columns: &mut [f64],
        stride: usize,
    ) -> Option<Result<(), (usize, ComponentError)>> {
        T::score_run(self.as_slice(), request, candidates, columns, stride)
    }
}

/// The most filters a catalog policy holds.
pub const MAX_FILTERS: usize = 8;

/// A policy assembled from the catalog at run time: builtin filters, weighted builtin scorers
/// and a builtin picker, in fixed storage.
pub type CatalogPolicy = crate::engine::Policy<
    List<BuiltinFilter, MAX_FILTERS>,
    List<WeightedScorer, MAX_SCORERS>,
    BuiltinPicker,
>;

#[cfg(test)]
mod tests {
    use super::PowerOfChoices;
    use crate::engine::{PickInput, Picker, RandomSource, WyRand, rng};
    use crate::vocab::{Candidates, Request, RequestView, WorkerInputs};
    use std::vec::Vec;

    /// The shuffle written plainly: every position in a vector.
    fn power_of_choices(costs: &[f64], k: u32, rng: &mut WyRand) -> usize {
        let m = costs.len();
        let mut positions: Vec<usize> = (0..m).collect();
        let mut best: Option<usize> = None;
        for i in 0..(k.max(1) as usize).min(m) {
            let j = i + usize::try_from(rng::index(rng, (m - i) as u64)).unwrap();
            positions.swap(i, j);
            let k = positions[i];
            if best.is_none_or(|b| costs[k] < costs[b]) {
                best = Some(k);
            }
        }
        best.unwrap()
    }

    #[test]
    fn power_of_choices_draws_as_a_shuffle_of_every_position() {
        let request = Request::new(64, 16);
        let view = RequestView::new(&request, WorkerInputs::NONE);
        let mut costs_rng = WyRand::with_seed(3);
        let mut work = [0.0; 40];
        for m in 1..=40u32 {
            // Few distinct costs, so draws tie.
            let costs: Vec<f64> = (0..m)
                .map(|_| f64::from(u32::try_from(rng::index(&mut costs_rng, 5)).unwrap()))
                .collect();
            let order: Vec<u32> = (0..m).collect();
            let input = PickInput {
                candidates: Candidates::new(view, &[], &order),
                costs: &costs,
                candidate_count: costs.len(),
                turn: 0,
            };
            // Both sides of `FEW_DRAWS`, and more draws than candidates.
            for k in 1..=12 {
                for seed in 0..50 {
                    let (mut a, mut b) = (WyRand::with_seed(seed), WyRand::with_seed(seed));
                    let pick = PowerOfChoices { k }
                        .pick(&input, &mut work, &mut a)
                        .unwrap();
                    assert_eq!(
                        pick.index,
                        power_of_choices(&costs, k, &mut b),
                        "m {m} k {k}"
                    );
                    // The same draws, so the stream goes on alike.
                    assert_eq!(a.next_u64(), b.next_u64());
                }
            }
        }
    }
}
