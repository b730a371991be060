//! A policy (filters, summed scorers, a picker, an optional seed) and the selection pipeline that
//! runs it in a caller-owned [`Selector`].

use core::fmt;

use super::component::{
    Admission, ComponentError, Filters, Pick, PickInput, PickReason, Picker, Scorer, Scorers,
    Verdict,
};
use super::outcome::{Disposition, Explanation, SelectError, Selection};
use super::rng::{RandomSource, WyRand};
use super::selector::{Last, Scratch, Selector};
use crate::vocab::math::EXACT_LIMIT;
use crate::vocab::{
    Candidates, Leg, Request, RequestView, Row, RowField, RowFlags, RowLimits, RowRule, RowView,
    TaintSet, WorkerInputs, any_invalid_speed, for_each_odd_row, tidy_reference,
};

/// The most scorers one policy may sum (each needs a cost column in the [`Selector`]).
pub const MAX_SCORERS: usize = 8;

/// Filters, summed scorers and a picker, composed once and immutable afterwards.
///
/// A policy holds no per-call state, so one policy serves every thread (it is `Send + Sync`
/// whenever its components are). Per-call state (buffers, the random stream's position) lives in
/// the caller's [`Selector`].
///
/// # Examples
///
/// ```
/// use libroute_core::{DefaultCost, DefaultPicker, Policy, Request, Row, Selector, WorkerKey};
///
/// let policy = Policy::new((), (DefaultCost::default(),), DefaultPicker::default()).unwrap();
/// let rows = [Row::new(WorkerKey::new(1, 0)), Row::new(WorkerKey::new(2, 0))];
/// let mut selector = Selector::<8>::new();
/// let pick = policy.select(&mut selector, &Request::new(64, 16), &rows).unwrap();
/// assert!(pick.row < 2);
/// ```
#[derive(Debug, Clone)]
pub struct Policy<F, S, P> {
    filters: F,
    scorers: S,
    picker: P,
    seed: Option<u64>,
}

/// Why a policy could not be composed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyError {
    /// More than [`MAX_SCORERS`] scorers.
    TooManyScorers {
        /// How many were given.
        given: usize,
    },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::TooManyScorers { given } => {
                write!(
                    f,
                    "a policy sums at most {MAX_SCORERS} scorers, {given} were given"
                )
            }
        }
    }
}

impl core::error::Error for PolicyError {}

impl<F: Filters, S: Scorers, P: Picker> Policy<F, S, P> {
    /// Composes a policy.
    ///
    /// # Errors
    ///
    /// [`PolicyError::TooManyScorers`] for more than [`MAX_SCORERS`] scorers.
    pub fn new(filters: F, scorers: S, picker: P) -> Result<Self, PolicyError> {
        if scorers.len() > MAX_SCORERS {
            return Err(PolicyError::TooManyScorers {
                given: scorers.len(),
            });
        }
        Ok(Self::from_parts(filters, scorers, picker))
    }

    /// Composes a policy whose scorer count is known to be within [`MAX_SCORERS`].
    pub(crate) const fn from_parts(filters: F, scorers: S, picker: P) -> Self {
        Self {
            filters,
            scorers,
            picker,
            seed: None,
        }
    }

    /// This policy in seeded (replay) mode: candidates are ordered by `(worker_id, dp_rank)`
    /// before scoring and picks draw from a stream fixed by `seed`, so the same sequence of
    /// selections gives the same picks whatever order the host lists rows in.
    #[must_use]
    pub fn with_seed(mut self, seed: Option<u64>) -> Self {
        self.seed = seed;
        self
    }

    /// The seed, when the policy is in seeded mode.
    #[must_use]
    pub const fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// The filters.
    pub const fn filters(&self) -> &F {
        &self.filters
    }

    /// The scorers.
    pub const fn scorers(&self) -> &S {
        &self.scorers
    }

    /// The picker.
    pub const fn picker(&self) -> &P {
        &self.picker
    }

    /// The union of the inputs every component declares for `leg`. A host whose union lacks
    /// [`WorkerInputs::CACHE`] can skip overlap computation for this request.
    pub fn inputs(&self, leg: Leg) -> WorkerInputs {
        let mut all = self.picker.inputs(leg) | self.filter_inputs(leg);
        for i in 0..self.scorers.len() {
            if let Some(s) = self.scorers.get(i) {
                all |= s.inputs(leg);
            }
        }
        all
    }

    /// Selects one row for `request` among `rows`, drawing from the selector's stream (the seeded
    /// stream when the policy has a seed).
    ///
    /// # Errors
    ///
    /// Any [`SelectError`]; on error nothing was picked and the selector's buffers hold nothing
    /// a later selection reuses.
    pub fn select<const N: usize>(
        &self,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        rows: &[Row],
    ) -> Result<Selection, SelectError> {
        if let Some(seed) = self.seed {
            let mut stream = match selector.seeded.take() {
                Some((s, stream)) if s == seed => stream,
                _ => WyRand::with_seed(seed),
            };
            let result = self.run(&mut selector.view(), request, rows, &mut stream, true);
            selector.seeded = Some((seed, stream));
            result
        } else {
            let mut stream = selector.unseeded.clone();
            let result = self.run(&mut selector.view(), request, rows, &mut stream, false);
            selector.unseeded = stream;
            result
        }
    }

    /// [`Policy::select`], and an explanation of every row into `out[..rows.len()]`: whether it
    /// was a candidate or which check removed it (required taints, the host's overload mark, the
    /// first filter that said no), and for candidates of a successful selection each scorer's
    /// contribution and the total. Rows are explained even when the selection fails (a failed
    /// scorer leaves no contributions). Explaining re-runs the filters on removed rows; it
    /// allocates nothing.
    ///
    /// # Errors
    ///
    /// [`SelectError::ExplanationBufferTooSmall`] before selecting when `out` is shorter than
    /// `rows`; otherwise as [`Policy::select`].
    pub fn select_explained<const N: usize>(
        &self,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        rows: &[Row],
        out: &mut [Explanation],
    ) -> Result<Selection, SelectError> {
        if out.len() < rows.len() {
            return Err(SelectError::ExplanationBufferTooSmall {
                rows: rows.len(),
                given: out.len(),
            });
        }
        let result = self.select(selector, request, rows);
        self.explain(
            selector,
            request,
            rows,
            result.as_ref().ok(),
            &mut out[..rows.len()],
        );
        result
    }

    /// Fills `out` (one entry per row) after a selection over `rows` that left `selector`'s last
    /// state (candidates and cost columns) when it succeeded.
    fn explain<const N: usize>(
        &self,
        selector: &Selector<N>,
        request: &Request<'_>,
        rows: &[Row],
        chosen: Option<&Selection>,
        out: &mut [Explanation],
    ) {
        let request_ok = request.check().is_ok();
        let view = RequestView::new(request, self.filter_inputs(request.leg()));
        for (i, (row, e)) in rows.iter().zip(out.iter_mut()).enumerate() {
            *e = Explanation {
                row: i,
                worker: row.worker,
                ..Explanation::EMPTY
            };
            if !request_ok {
                continue;
            }
            e.disposition = if let Err(field) = row.check() {
                Disposition::Invalid(field)
            } else if request.pin.is_some_and(|pin| pin != row.worker) {
                Disposition::NotPinned
            } else if !row.taints.contains_all(request.required_taints) {
                Disposition::Ineligible
            } else if row.is_overloaded() {
                Disposition::Overloaded
            } else {
                self.first_refusal(&view, row)
            };
        }
        let Some(selection) = chosen else {
            return;
        };
        let scorers = self.scorers.len();
        for (k, &i) in selector.order[..selector.last.entries].iter().enumerate() {
            // Rows left in place that are not candidates are marked.
            if i & LEFT_OUT != 0 {
                continue;
            }
            let Some(e) = out.get_mut(i as usize) else {
                continue;
            };
            e.scorers = scorers;
            for s in 0..scorers {
                e.contributions[s] = selector.costs[s][k];
            }
            e.total = if selector.last.in_first_column {
                selector.costs[0][k]
            } else {
                selector.totals[k]
            };
            e.disposition = Disposition::Candidate;
        }
        if let Some(e) = out.get_mut(selection.row) {
            e.chosen = true;
        }
    }

    /// The union of the filters' declared inputs for `leg`.
    fn filter_inputs(&self, leg: Leg) -> WorkerInputs {
        let mut all = WorkerInputs::NONE;
        for i in 0..self.filters.len() {
            if let Some(f) = self.filters.get(i) {
                all |= f.inputs(leg);
            }
        }
        all
    }

    /// The first filter that does not keep `row`, or [`Disposition::Candidate`].
    fn first_refusal(&self, view: &RequestView<'_>, row: &Row) -> Disposition {
        match self.refusal(view, row) {
            Ok(None) => Disposition::Candidate,
            Ok(Some((filter, Verdict::Overloaded))) => Disposition::FilterOverloaded { filter },
            Ok(Some((filter, _))) => Disposition::Filtered { filter },
            Err((filter, _)) => Disposition::FilterFailed { filter },
        }
    }

    /// Runs the filters on `row` in order: the first that does not keep it and its verdict,
    /// `None` when all keep it, or the filter that failed and its error.
    fn refusal(
        &self,
        view: &RequestView<'_>,
        row: &Row,
    ) -> Result<Option<(usize, Verdict)>, (usize, ComponentError)> {
        self.filters.first_refusal(view, &RowView::new(view, row))
    }

    /// Selects with a generator the host brings (any `rand_core::Rng`). Rows are ordered by
    /// worker first when the policy has a seed, as in [`Policy::select`].
    ///
    /// # Errors
    ///
    /// As [`Policy::select`].
    pub fn select_with_rng<const N: usize>(
        &self,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        rows: &[Row],
        rng: &mut dyn RandomSource,
    ) -> Result<Selection, SelectError> {
        self.run(
            &mut selector.view(),
            request,
            rows,
            rng,
            self.seed.is_some(),
        )
    }

    /// One selection: the request and capacity checks, steps 1 to 3 (fused when the policy
    /// allows it, else [`Policy::admit_and_score`]), then the picker and the accounting values.
    fn run(
        &self,
        scratch: &mut Scratch<'_>,
        request: &Request<'_>,
        rows: &[Row],
        rng: &mut dyn RandomSource,
        sort: bool,
    ) -> Result<Selection, SelectError> {
        request.check().map_err(SelectError::InvalidRequest)?;
        if rows.is_empty() {
            return Err(SelectError::NoEndpoints);
        }
        if rows.len() > scratch.capacity {
            return Err(SelectError::CapacityExceeded {
                rows: rows.len(),
                capacity: scratch.capacity,
            });
        }
        let leg = request.leg();
        let scorers = self.scorers.len();
        if scorers > 1 {
            // This selection writes totals over the zeros a policy without scorers reads.
            *scratch.zeros = 0;
        }
        // The union of every component's inputs, gathered as each is asked (as `Policy::inputs`).
        // `entries` is how many entries of `order` the candidates are among: `m` when they were
        // moved to the front, every row's when the rows that are not were left in place.
        let ((entries, m), mut declared) = match self.fused(scratch, request, rows, sort) {
            Some(fused) => fused?,
            None => self.admit_and_score(scratch, request, rows, sort)?,
        };
        if scorers == 0 && *scratch.zeros < entries {
            // The sum of no columns, for the picker, the selection, `last_costs` and the
            // explanations; not the totals an earlier selection with this selector left.
            scratch.totals[..entries].fill(0.0);
            *scratch.zeros = entries;
        }
        let order: &[u32] = &scratch.order[..entries];
        let capacity = scratch.capacity;
        // With several scorers the candidates are at the front: `entries` is `m`.
        let totals: &[f64] = if scorers == 1 {
            &scratch.costs[..entries]
        } else {
            &scratch.totals[..entries]
        };

        // 4. The picker, unless the request is pinned (no draw for a pin).
        let picker_view = RequestView::new(request, self.picker.inputs(leg));
        declared |= picker_view.inputs();
        let pick = if request.pin.is_some() {
            Pick {
                index: 0,
                reason: PickReason::Pinned,
            }
        } else {
            let input = PickInput {
                candidates: Candidates::new(picker_view, rows, order),
                costs: totals,
                candidate_count: m,
                turn: *scratch.turn,
            };
            if self.picker.takes_turns() {
                *scratch.turn = scratch.turn.wrapping_add(1);
            }
            let pick = self
                .picker
                .pick(&input, &mut scratch.work[..entries], rng)
                .map_err(SelectError::PickerFailed)?;
            // A position past the candidates, or of a row left in place that is not one.
            if order.get(pick.index).is_none_or(|&i| i & LEFT_OUT != 0) {
                return Err(SelectError::PickOutOfRange {
                    index: pick.index,
                    candidates: m,
                });
            }
            pick
        };

        let row = order[pick.index] as usize;
        *scratch.last = Last {
            entries,
            candidates: m,
            in_first_column: scorers == 1,
        };
        let mut contributions = [0.0; MAX_SCORERS];
        for (s, c) in contributions.iter_mut().enumerate().take(scorers) {
            *c = scratch.costs[s * capacity + pick.index];
        }
        let cached_tokens = if declared.contains(WorkerInputs::CACHE) {
            rows[row].cache().effective_tokens
        } else {
            0
        };
        Ok(Selection {
            row,
            worker: rows[row].worker,
            cost: totals[pick.index],
            contributions,
            scorers,
            candidates: m,
            reason: pick.reason,
            request_blocks: request.request_blocks(),
            cached_tokens,
        })
    }

    /// Steps 1 to 3 of the pipeline: eligibility, overload and filters per row into
    /// `scratch.order`, the canonical order in seeded mode, then every scorer into its column and
    /// the totals (into `scratch.totals` when there is more than one scorer). Returns what
    /// [`Policy::fused`] does: how many entries of `order` the candidates are among, how many
    /// candidates there are, and the union of the filters' and scorers' inputs. The candidates
    /// move to the front, but where admission may leave the rows it does not admit in place
    /// ([`Policy::leaves_rows_in_place`]: no scorer, a picker that finds its candidates by
    /// position): after the marking pass, or the filters' passes, there is nothing to score.
    #[allow(
        clippy::too_many_lines,
        reason = "the pipeline's admission and scoring, kept in order"
    )]
    fn admit_and_score(
        &self,
        scratch: &mut Scratch<'_>,
        request: &Request<'_>,
        rows: &[Row],
        sort: bool,
    ) -> Result<Scored, SelectError> {
        let leg = request.leg();
        let filter_inputs = self.filter_inputs(leg);
        let filter_view = RequestView::new(request, filter_inputs);
        let mut declared = filter_inputs;

        // 1. Eligibility, overload and filters, in that order, per row.
        let m = if let Some(pin) = request.pin {
            let mut found = None;
            for (i, row) in rows.iter().enumerate() {
                row.check()
                    .map_err(|field| SelectError::InvalidRow { row: i, field })?;
                if row.worker == pin && found.is_none() {
                    found = Some(i);
                }
            }
            let i = found.ok_or(SelectError::PinNotAllowed(pin))?;
            match self.admit(&filter_view, &rows[i]) {
                Ok(Verdict::Keep) => {}
                Ok(Verdict::Overloaded) => return Err(SelectError::PinOverloaded(pin)),
                Ok(Verdict::Reject) | Err(SelectError::NoEndpoints) => {
                    return Err(SelectError::PinIneligible(pin));
                }
                Err(e) => return Err(e),
            }
            #[allow(
                clippy::cast_possible_truncation,
                reason = "rows.len() <= capacity <= 2^31"
            )]
            {
                scratch.order[0] = i as u32;
            }
            1
        } else if self.filters.is_empty() {
            // No filters: eligibility and the host's overload mark decide.
            let order = &mut scratch.order[..rows.len()];
            let marked = mark_rows(rows, request.required_taints, &RowRule::NONE, order);
            if marked.invalid {
                return Err(first_invalid(rows));
            }
            let (left_out, m) = (marked.left_out, rows.len() - marked.left_out);
            if m == 0 {
                // Every eligible row is left out by its overload mark.
                return Err(nothing_admitted(0, marked.eligible));
            }
            if left_out > 0 {
                if self.leaves_rows_in_place(rows, sort) {
                    return Ok(((rows.len(), m), declared));
                }
                compact_left_out(order, &mut []);
            }
            m
        } else if let Some((entries, m)) =
            self.admit_in_passes(&filter_view, request, rows, scratch, sort)?
        {
            if entries > m {
                return Ok(((entries, m), declared));
            }
            m
        } else {
            let mut m = 0;
            let (mut filtered, mut overloaded) = (0usize, 0usize);
            for (i, row) in rows.iter().enumerate() {
                row.check()
                    .map_err(|field| SelectError::InvalidRow { row: i, field })?;
                match self.admit(&filter_view, row) {
                    Ok(Verdict::Keep) => {
                        #[allow(
                            clippy::cast_possible_truncation,
                            reason = "rows.len() <= capacity <= 2^31"
                        )]
                        {
                            scratch.order[m] = i as u32;
                        }
                        m += 1;
                    }
                    Ok(Verdict::Reject) => filtered += 1,
                    Ok(Verdict::Overloaded) => overloaded += 1,
                    Err(SelectError::NoEndpoints) => {}
                    Err(e) => return Err(e),
                }
            }
            if m == 0 {
                return Err(nothing_admitted(filtered, overloaded));
            }
            m
        };
        let order = &mut scratch.order[..m];

        // 2. Seeded mode: a canonical order, so picks do not depend on how rows are listed.
        if sort && m > 1 {
            if !order.is_sorted_by_key(|&i| rows[i as usize].worker) {
                order.sort_unstable_by_key(|&i| rows[i as usize].worker);
            }
            for k in 1..m {
                let (a, b) = (order[k - 1] as usize, order[k] as usize);
                if rows[a].worker == rows[b].worker {
                    let row = if a > b { a } else { b };
                    return Err(SelectError::DuplicateWorker {
                        row,
                        worker: rows[row].worker,
                    });
                }
            }
        }
        let order: &[u32] = order;

        // 3. Scorers, each into its own NaN-filled column; then totals.
        let scorers = self.scorers.len();
        let capacity = scratch.capacity;
        if let Some(joint) = self.joint_inputs(leg) {
            // The list may score its scorers together (parts of one estimate, or scorers that
            // read the same rows), with the same columns and the same errors as one at a time.
            declared |= joint;
            let view = RequestView::new(request, joint);
            let columns = &mut scratch.costs[..scorers * capacity];
            let candidates = Candidates::new(view, rows, order);
            if let Some(scored) = self
                .scorers
                .score_together(&view, &candidates, columns, capacity)
            {
                if let Err((scorer, error)) = scored {
                    check_columns(columns, capacity, order, scorer)?;
                    return Err(SelectError::ScorerFailed { scorer, error });
                }
                // The columns are checked only when a total is not finite: a finite sum has
                // finite terms (a NaN or an infinity in a column makes its total non-finite).
                return self.total(
                    scratch.totals,
                    scratch.costs,
                    capacity,
                    order,
                    m,
                    declared,
                    false,
                );
            }
        }
        self.score_each(
            (request, rows, order),
            (scratch.costs, scratch.totals, capacity),
            declared,
            None,
        )
    }

    /// Step 3 over the candidates `order`: each scorer but `scored` (whose column is already
    /// written) into its own column ([`Policy::score_column`]), then the totals
    /// ([`Policy::total`]). The general steps score every scorer; the one pass, every scorer
    /// but the one whose pass admitted the candidates.
    fn score_each(
        &self,
        (request, rows, order): (&Request<'_>, &[Row], &[u32]),
        (costs, totals, capacity): (&mut [f64], &mut [f64], usize),
        mut declared: WorkerInputs,
        scored: Option<usize>,
    ) -> Result<Scored, SelectError> {
        let m = order.len();
        for s in (0..self.scorers.len()).filter(|&s| Some(s) != scored) {
            let column = &mut costs[s * capacity..s * capacity + m];
            declared |= self.score_column(s, request, rows, order, column)?;
        }
        self.total(totals, costs, capacity, order, m, declared, true)
    }

    /// Scorer `s`'s costs of the candidates `order` into `column` (filled with NaN first, then
    /// checked finite), returning the inputs it declares; a missing scorer writes nothing.
    fn score_column(
        &self,
        s: usize,
        request: &Request<'_>,
        rows: &[Row],
        order: &[u32],
        column: &mut [f64],
    ) -> Result<WorkerInputs, SelectError> {
        let Some(scorer) = self.scorers.get(s) else {
            return Ok(WorkerInputs::NONE);
        };
        let inputs = scorer.inputs(request.leg());
        let view = RequestView::new(request, inputs);
        column.fill(f64::NAN);
        scorer
            .score(&view, &Candidates::new(view, rows, order), column)
            .map_err(|error| SelectError::ScorerFailed { scorer: s, error })?;
        if let Some(k) = first_non_finite(column) {
            return Err(SelectError::NonFiniteCost {
                scorer: s,
                row: order[k] as usize,
            });
        }
        Ok(inputs)
    }

    /// The union of the inputs the scorers declare for `leg`, when there are several (what
    /// [`Scorers::score_together`] is asked under).
    fn joint_inputs(&self, leg: Leg) -> Option<WorkerInputs> {
        let scorers = self.scorers.len();
        if scorers < 2 {
            return None;
        }
        Some((0..scorers).fold(WorkerInputs::NONE, |all, s| {
            self.scorers.get(s).map_or(all, |x| all | x.inputs(leg))
        }))
    }

    /// The totals of the scorers' columns (into `scratch.totals`, with more than one scorer).
    /// Unless `checked`, a non-finite total first has its columns checked, so a non-finite
    /// cost is named by its scorer as when each column is checked as it is scored.
    #[allow(
        clippy::too_many_arguments,
        reason = "the scratch's parts, borrowed apart from the order"
    )]
    fn total(
        &self,
        totals: &mut [f64],
        costs: &[f64],
        capacity: usize,
        order: &[u32],
        m: usize,
        declared: WorkerInputs,
        checked: bool,
    ) -> Result<Scored, SelectError> {
        let scorers = self.scorers.len();
        if scorers > 1 {
            let totals = &mut totals[..m];
            // The columns summed in order onto zeros, `(0 + c0) + c1 + ...` (the same bits as
            // adding each to a zeroed total: `0 + c` is not always `c`, for `c = -0`), in one
            // pass for the usual scorer counts.
            match scorers {
                2 => sum_columns::<2>(totals, costs, capacity),
                3 => sum_columns::<3>(totals, costs, capacity),
                4 => sum_columns::<4>(totals, costs, capacity),
                5 => sum_columns::<5>(totals, costs, capacity),
                _ => {
                    sum_columns::<2>(totals, costs, capacity);
                    for s in 2..scorers {
                        let column = &costs[s * capacity..s * capacity + m];
                        for (t, c) in totals.iter_mut().zip(column) {
                            *t += *c;
                        }
                    }
                }
            }
            if let Some(k) = first_non_finite(totals) {
                if !checked {
                    check_columns(costs, capacity, &order[..m], scorers)?;
                }
                return Err(SelectError::NonFiniteTotal {
                    row: order[k] as usize,
                });
            }
        }
        Ok(((m, m), declared))
    }

    /// Step 1 with filters, a pass per filter ([`Filter::check_rows`]) after one branch-free
    /// pass of validity, eligibility and the host's overload marks ([`mark_unfiltered`]): the
    /// candidates into `scratch.order`, or `None` when some row is invalid or some filter does
    /// not offer the pass or fails, for the row-by-row loop to decide (and report what is
    /// wrong) as it always has. Every row gets the verdicts the row-by-row loop gives it: each
    /// filter is asked about the rows every check before it kept. Returns how many entries of
    /// `order` the candidates are among and how many there are: the candidates move to the
    /// front, unless the rows left out may stay in place ([`Policy::leaves_rows_in_place`]).
    ///
    /// [`Filter::check_rows`]: crate::engine::Filter::check_rows
    fn admit_in_passes(
        &self,
        view: &RequestView<'_>,
        request: &Request<'_>,
        rows: &[Row],
        scratch: &mut Scratch<'_>,
        sort: bool,
    ) -> Result<Option<(usize, usize)>, SelectError> {
        let order = &mut scratch.order[..rows.len()];
        // Filters that are rules on the row alone are applied as the rows are marked, each row
        // read once; when none is kept, the row-by-row loop says why.
        if let Some(rule) = self.filters.row_rule() {
            let marked = mark_rows(rows, request.required_taints, &rule, order);
            let m = rows.len() - marked.left_out;
            if marked.invalid || m == 0 {
                return Ok(None);
            }
            return Ok(Some(self.candidates_marked(rows, order, sort, m)));
        }
        let marked = mark_rows(rows, request.required_taints, &RowRule::NONE, order);
        if marked.invalid {
            return Ok(None);
        }
        // Rows with the required taints but left out: the host's overload marks.
        let host_overloaded = marked.eligible - (rows.len() - marked.left_out);
        let mut admission = Admission::new(rows, order, host_overloaded);
        if self.filters.check_rows(view, &mut admission).is_none() {
            return Ok(None);
        }
        let (order, rejected, overloaded) = admission.finish();
        // Every row is marked once: by the marking pass, or by the first filter that did not
        // keep it (counted as rejected or overloaded beyond the host's marks).
        let m = rows.len() - marked.left_out - rejected - (overloaded - host_overloaded);
        if m == 0 {
            return Err(nothing_admitted(rejected, overloaded));
        }
        Ok(Some(self.candidates_marked(rows, order, sort, m)))
    }

    /// How many entries of `order` the `m` candidates marked there are among, and how many
    /// there are, for [`Policy::admit_in_passes`]: every entry when the rows left out may stay
    /// in place ([`Policy::leaves_rows_in_place`]), else the candidates, moved to the front.
    fn candidates_marked(
        &self,
        rows: &[Row],
        order: &mut [u32],
        sort: bool,
        m: usize,
    ) -> (usize, usize) {
        if m < rows.len() && self.leaves_rows_in_place(rows, sort) {
            return (rows.len(), m);
        }
        let kept = compact_left_out(order, &mut []);
        debug_assert_eq!(kept, m, "the marks and the counts agree");
        (kept, kept)
    }

    /// Whether admission may leave the rows it does not admit in place, marked, instead of
    /// moving the candidates to the front: with no scorer there is nothing to score, the
    /// picker finds its candidates by position ([`Picker::picks_by_position`]), and in seeded
    /// mode the rows are already in canonical order (there is no sort to run).
    ///
    /// [`Picker::picks_by_position`]: crate::engine::Picker::picks_by_position
    fn leaves_rows_in_place(&self, rows: &[Row], sort: bool) -> bool {
        self.scorers.is_empty()
            && self.picker.picks_by_position()
            && (!sort || in_canonical_order(rows))
    }

    /// Steps 1 to 3 in one pass ([`Scorer::score_all_rows`]), for a request without a pin; in
    /// seeded mode only when the rows are already in canonical order. The pass is the only
    /// scorer's, in a policy without filters; otherwise that of the first scorer whose costs are
    /// per row ([`Scorer::costs_are_per_row`]), into its own column. The filters, when every one
    /// offers its pass ([`Filter::check_rows`]), are then asked about the pass's candidates, in
    /// row order as before scoring, and the candidates they keep move to the front with their
    /// costs; the other scorers then score those candidates into their columns, and the columns
    /// are summed, as in [`Policy::admit_and_score`]. A policy of one scorer asks for the pass in
    /// place ([`Scorer::score_all_rows_in_place`]) when its picker passes over NaN costs
    /// ([`Picker::picks_least_cost`]) or finds its candidates by position
    /// ([`Picker::picks_by_position`]), and the rows its filters leave out then stay in place
    /// too, marked, with a NaN cost, instead of the candidates moving to the front. Returns how
    /// many entries of `order` the
    /// candidates are among (all rows' when left in place), the candidate count and the union
    /// of the components' inputs, or `None` when the general steps must run instead (also when
    /// the filters keep no candidate, for them to say why); they then overwrite everything this
    /// wrote. An error of the other scorers is the selection's (no scorer is asked twice): the
    /// general steps would ask them about the same candidates in the same order, and report
    /// the same first error, since the pass's own scorer succeeds there too (its column is
    /// checked finite first; when it is not, the general steps decide and name it).
    ///
    /// [`Scorer::score_all_rows`]: crate::engine::Scorer::score_all_rows
    /// [`Scorer::score_all_rows_in_place`]: crate::engine::Scorer::score_all_rows_in_place
    /// [`Picker::picks_least_cost`]: crate::engine::Picker::picks_least_cost
    /// [`Picker::picks_by_position`]: crate::engine::Picker::picks_by_position
    /// [`Scorer::costs_are_per_row`]: crate::engine::Scorer::costs_are_per_row
    /// [`Filter::check_rows`]: crate::engine::Filter::check_rows
    fn fused(
        &self,
        scratch: &mut Scratch<'_>,
        request: &Request<'_>,
        rows: &[Row],
        sort: bool,
    ) -> Option<Result<Scored, SelectError>> {
        let scorers = self.scorers.len();
        let filtered = !self.filters.is_empty();
        if request.pin.is_some() || scorers == 0 {
            return None;
        }
        let first = if scorers == 1 && !filtered {
            0
        } else {
            (0..scorers).find(|&s| self.scorers.get(s).is_some_and(Scorer::costs_are_per_row))?
        };
        if sort && !in_canonical_order(rows) {
            return None;
        }
        let (leg, n, capacity) = (request.leg(), rows.len(), scratch.capacity);
        let scorer = self.scorers.get(first)?;
        let mut declared = scorer.inputs(leg);
        // Filters that are rules on the row alone go into the pass's admission when its scorer
        // applies them: each row is read once, and the filters are not asked afterwards.
        let rule = if filtered && scorer.applies_row_rules() {
            self.filters.row_rule()
        } else {
            None
        };
        let view = RequestView::new(request, declared).with_row_rule(rule.unwrap_or(RowRule::NONE));
        let column = first * capacity..first * capacity + n;
        let (order, costs) = (&mut scratch.order[..n], &mut scratch.costs[column.clone()]);
        // One scorer, and a picker that passes over NaN costs or finds its candidates by
        // position: the rows that are not candidates may stay where they are, those the
        // filters leave out too, marked, with a NaN cost. `entries` is how many entries of
        // `order` the candidates are among.
        let in_place =
            scorers == 1 && (self.picker.picks_least_cost() || self.picker.picks_by_position());
        let (mut entries, mut m) = if in_place {
            let pass = scorer.score_all_rows_in_place(&view, rows, order, costs)?;
            (pass.entries(n), pass.candidates())
        } else {
            let m = scorer.score_all_rows(&view, rows, order, costs)?;
            (m, m)
        };
        if m == 0 || m > n {
            return None;
        }
        let filter_inputs = self.filter_inputs(leg);
        declared |= filter_inputs;
        // Without a rule the filters are asked row by row, after the pass.
        if filtered && rule.is_none() {
            let mut admission = Admission::new(rows, &mut order[..entries], 0);
            self.filters
                .check_rows(&RequestView::new(request, filter_inputs), &mut admission)?;
            let (order, rejected, overloaded) = admission.finish();
            if in_place {
                m -= rejected + overloaded;
                nan_left_out(order, &mut costs[..entries]);
            } else {
                m = compact_left_out(order, &mut costs[..m]);
                entries = m;
            }
            if m == 0 {
                return None;
            }
        }
        if scorers == 1 {
            return Some(Ok(((entries, m), declared)));
        }
        let outcome = self.score_each(
            (request, rows, &scratch.order[..m]),
            (scratch.costs, scratch.totals, capacity),
            declared,
            Some(first),
        );
        match outcome {
            Err(_)
                if first_non_finite(&scratch.costs[column.start..column.start + m]).is_some() =>
            {
                None
            }
            outcome => Some(outcome),
        }
    }

    /// Eligibility (required taints), host overload marks, then filters in order. An ineligible
    /// row is reported as `Err(NoEndpoints)` so the caller can count it apart from filtering.
    #[inline]
    fn admit(&self, view: &RequestView<'_>, row: &Row) -> Result<Verdict, SelectError> {
        if !row.taints.contains_all(view.required_taints()) {
            return Err(SelectError::NoEndpoints);
        }
        if row.is_overloaded() {
            return Ok(Verdict::Overloaded);
        }
        match self.refusal(view, row) {
            Ok(None) => Ok(Verdict::Keep),
            Ok(Some((_, verdict))) => Ok(verdict),
            Err((filter, error)) => Err(SelectError::FilterFailed { filter, error }),
        }
    }
}

/// What steps 1 to 3 scored ([`Policy::fused`], [`Policy::admit_and_score`]): how many entries
/// of `order` the candidates are among (`m` when they were moved to the front), how many
/// candidates there are (`m`), and the union of the components' inputs.
type Scored = ((usize, usize), WorkerInputs);

/// `totals[k] = (0 + c0[k]) + c1[k] + ... + c(S-1)[k]` for the first `S` columns of `costs`
/// (`capacity` apart), the candidates' costs summed in scorer order in one pass over them.
#[inline]
fn sum_columns<const S: usize>(totals: &mut [f64], costs: &[f64], capacity: usize) {
    let m = totals.len();
    let columns: [&[f64]; S] = core::array::from_fn(|s| &costs[s * capacity..][..m]);
    for (k, t) in totals.iter_mut().enumerate() {
        let mut sum = 0.0 + columns[0][k];
        for column in &columns[1..] {
            sum += column[k];
        }
        *t = sum;
    }
}

/// Why no row was admitted, from how many rows filters rejected and how many were left out as
/// overloaded (by the host's mark or a filter): a rejection names the filters, else an overload,
/// else no row carried the required taints.
fn nothing_admitted(rejected: usize, overloaded: usize) -> SelectError {
    if rejected > 0 {
        SelectError::AllFiltered
    } else if overloaded > 0 {
        SelectError::AllOverloaded
    } else {
        SelectError::NoEndpoints
    }
}

/// [`SelectError::NonFiniteCost`] for the first non-finite cost of the first `scorers` columns
/// (each `order.len()` long, `stride` apart), in scorer order.
fn check_columns(
    columns: &[f64],
    stride: usize,
    order: &[u32],
    scorers: usize,
) -> Result<(), SelectError> {
    let m = order.len();
    for s in 0..scorers {
        if let Some(k) = first_non_finite(&columns[s * stride..s * stride + m]) {
            return Err(SelectError::NonFiniteCost {
                scorer: s,
                row: order[k] as usize,
            });
        }
    }
    Ok(())
}

/// The position of the first NaN or infinite value, if any. The common all-finite case is one
/// branch-free pass (which the compiler vectorizes); the search runs only when something is wrong.
#[inline]
fn first_non_finite(values: &[f64]) -> Option<usize> {
    let all_finite = values.iter().fold(true, |ok, v| ok & v.is_finite());
    if all_finite {
        None
    } else {
        values.iter().position(|v| !v.is_finite())
    }
}

/// Whether the rows' workers are strictly increasing (seeded mode's canonical order): first
/// whether their ids are, in a pass of packable integer operations, else by whole keys (ranks of
/// one id, or ids of 2^63 or more).
fn in_canonical_order(rows: &[Row]) -> bool {
    // Below 2^63 every difference of two ids fits in an `i64`, so `next > id` exactly when
    // `next - id - 1` is not negative: the ids increase when no id and no such difference has
    // its top bit set. OR-ing them keeps the loop free of branches and of 64-bit comparisons,
    // which SSE2 does not pack (its subtractions and ORs it does).
    let first = rows.first().map_or(0, |row| row.worker.worker_id);
    let top = rows.windows(2).fold(first, |top, pair| {
        let (id, next) = (pair[0].worker.worker_id, pair[1].worker.worker_id);
        top | next | next.wrapping_sub(id).wrapping_sub(1)
    });
    top >> 63 == 0 || rows.windows(2).all(|pair| pair[0].worker < pair[1].worker)
}

/// The error for the first invalid row of `rows`.
#[cold]
fn first_invalid(rows: &[Row]) -> SelectError {
    rows.iter()
        .enumerate()
        .find_map(|(i, row)| {
            row.check()
                .err()
                .map(|field| SelectError::InvalidRow { row: i, field })
        })
        // `Row::is_valid` and `Row::check` agree (tested), so a row is always found; an empty
        // answer would still be an error value, never a panic.
        .unwrap_or(SelectError::InvalidRow {
            row: rows.len(),
            field: RowField::Flags,
        })
}

/// What [`mark_unfiltered`] found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Marked {
    /// Rows left out (ineligible or overloaded), marked with [`LEFT_OUT`].
    pub(crate) left_out: usize,
    /// Rows that carry the request's required taints, overloaded or not (the rule's taints and
    /// limits not asked).
    pub(crate) eligible: usize,
    /// Some row is invalid ([`Row::check`] says which), or, with limits, a row's load counter
    /// is too large to compare as `f64` ([`RowLimits`]).
    pub(crate) invalid: bool,
}

/// Admission without filters, or with filters given as one `rule` ([`RowRule::NONE`] for
/// none), for the pipeline and for scorers' one-pass steps ([`Scorer::score_all_rows`]):
/// writes every row's index to its own slot of `order`, marked with [`LEFT_OUT`] when the row
/// lacks a required taint (the request's or the rule's), is overloaded, or exceeds the rule's
/// limits ([`Row::exceeds`]), and calls
/// `each(i, row, kept)` for every row (a one-pass scorer writes its cost there; `kept` is
/// whether the row is a candidate). The loop has no
/// data-dependent index or branch; validity is folded as it goes (speeds, which few rows carry,
/// in a second pass when any does). `order` holds `rows.len()` entries, at most 2^31.
///
/// [`Scorer::score_all_rows`]: crate::engine::Scorer::score_all_rows
#[inline]
pub(crate) fn mark_unfiltered(
    rows: &[Row],
    required: TaintSet,
    rule: &RowRule,
    order: &mut [u32],
    each: impl FnMut(usize, &Row, bool),
) -> Marked {
    let taints = required.union(rule.required_taints) != TaintSet::EMPTY;
    match (rule.has_limits(), taints) {
        (true, true) => mark_with::<true, true>(rows, required, rule, order, each),
        (true, false) => mark_with::<true, false>(rows, required, rule, order, each),
        (false, true) => mark_with::<false, true>(rows, required, rule, order, each),
        (false, false) => mark_with::<false, false>(rows, required, rule, order, each),
    }
}

/// [`mark_unfiltered`] for admission alone, with nothing to do per row: a tidy fleet through
/// [`mark_tidy`], any other, or one that loop declines, row by row.
#[inline]
fn mark_rows(rows: &[Row], required: TaintSet, rule: &RowRule, order: &mut [u32]) -> Marked {
    // One unit per row for `mark_tidy` to write: units take no memory.
    let units = &mut [(); LEFT_OUT as usize];
    mark_tidy(rows, required, rule, order, units, |_, _| ((), 0))
        .unwrap_or_else(|| mark_unfiltered(rows, required, rule, order, |_, _, _| {}))
}

/// [`mark_unfiltered`] over a tidy fleet ([`tidy_reference`]) for a request and a rule that
/// require no taint, which is most selections over a real fleet. The rows with the reference
/// row's flags (not overloaded) are candidates unless over the rule's limits, compared through
/// the fleet's load mask (as `f64`, [`RowLimits`], when the rule has limits), in a loop without
/// per-row flag checks; the few rows with other flags (odd) are then marked again through their
/// own flags and limits ([`for_each_odd_row`]).
///
/// `each(row, load_mask)` runs for every row in the loop with the fleet's load mask, and again
/// for each odd row with the row's own; its value goes to the row's slot of `out`. A one-pass
/// scorer computes its cost there, reading the load groups through the mask (zeros without a
/// load projection), and also returns the largest counter it read, checked below 2^52 with the
/// limits' counters.
///
/// `None`, for [`mark_unfiltered`] to mark row by row and say what is wrong: the fleet is not
/// tidy, a taint is required, more than one row in 16 is odd, a row is invalid, a counter read
/// reaches 2^52, or `order` or `out` is short.
#[inline]
pub(crate) fn mark_tidy<C>(
    rows: &[Row],
    required: TaintSet,
    rule: &RowRule,
    order: &mut [u32],
    out: &mut [C],
    each: impl Fn(&Row, u64) -> (C, u64),
) -> Option<Marked> {
    if required.union(rule.required_taints) != TaintSet::EMPTY {
        return None;
    }
    let fleet = tidy_reference(rows)?.flags;
    if rule.has_limits() {
        mark_tidy_with::<true, C>(rows, fleet, rule, (order, out), each)
    } else {
        mark_tidy_with::<false, C>(rows, fleet, rule, (order, out), each)
    }
}

/// [`mark_tidy`] over a fleet whose rows mostly have the flags `fleet`, the rule's limits
/// compared only when `LIMITS`.
fn mark_tidy_with<const LIMITS: bool, C>(
    rows: &[Row],
    fleet: RowFlags,
    rule: &RowRule,
    (order, out): (&mut [u32], &mut [C]),
    each: impl Fn(&Row, u64) -> (C, u64),
) -> Option<Marked> {
    let n = rows.len();
    if n > LEFT_OUT as usize
        || order.len() < n
        || out.len() < n
        || fleet.contains(RowFlags::OVERLOADED)
    {
        return None;
    }
    let (order, out) = (&mut order[..n], &mut out[..n]);
    let limits = RowLimits::of(rule);
    let load_mask = fleet.load_mask();
    let (mut odd, mut invalid, mut high, mut left_out) = (0u32, false, 0u64, 0usize);
    for (i, ((row, slot), value)) in rows
        .iter()
        .zip(order.iter_mut())
        .zip(out.iter_mut())
        .enumerate()
    {
        odd |= row.flags.0 ^ fleet.0;
        invalid |= row.has_invalid_estimate();
        let excluded = limits.exceeded::<LIMITS>(row, load_mask, &mut high);
        let read;
        (*value, read) = each(row, load_mask);
        high |= read;
        #[allow(clippy::cast_possible_truncation, reason = "n <= 2^31")]
        {
            *slot = i as u32 | (u32::from(excluded) * LEFT_OUT);
        }
        left_out += usize::from(excluded);
    }
    let mut all_flags = fleet.0;
    if odd != 0 {
        // The few odd rows, each through its own flags; the loop above counted each by the
        // fleet's.
        for_each_odd_row(rows, fleet, |i, row| {
            all_flags |= row.flags.0;
            let own = row.flags.load_mask();
            let excluded = row.is_overloaded() | limits.exceeded::<LIMITS>(row, own, &mut high);
            let read;
            (out[i], read) = each(row, own);
            high |= read;
            left_out -= usize::from(order[i] & LEFT_OUT != 0);
            left_out += usize::from(excluded);
            #[allow(clippy::cast_possible_truncation, reason = "n <= 2^31")]
            {
                order[i] = i as u32 | (u32::from(excluded) * LEFT_OUT);
            }
        })?;
    }
    if invalid
        || all_flags & !RowFlags::ALL.0 != 0
        || high >= EXACT_LIMIT
        || (all_flags & RowFlags::HAS_SPEED.0 != 0 && any_invalid_speed(rows))
    {
        return None;
    }
    // No taint is required, so every row is eligible.
    Some(Marked {
        left_out,
        eligible: n,
        invalid: false,
    })
}

/// [`mark_unfiltered`], the rule's limits compared only when `LIMITS` and the taints only when
/// `TAINTS` (some taint is required): one loop per case, so a rule without limits, or a request
/// and a rule without required taints (every row eligible), cost the loop nothing. The limits
/// are compared as `f64` ([`RowLimits`]), exact for counters below 2^52; a row with a load
/// projection and a counter at or above it makes the marking invalid, and the caller then
/// decides row by row.
#[inline]
fn mark_with<const LIMITS: bool, const TAINTS: bool>(
    rows: &[Row],
    required: TaintSet,
    rule: &RowRule,
    order: &mut [u32],
    mut each: impl FnMut(usize, &Row, bool),
) -> Marked {
    let all = required.union(rule.required_taints);
    let limits = RowLimits::of(rule);
    let (mut left_out, mut eligible, mut invalid, mut speeds) = (0usize, 0usize, false, 0);
    let mut high = 0u64;
    for (i, (row, slot)) in rows.iter().zip(order.iter_mut()).enumerate() {
        invalid |= row.has_unknown_flags() | row.has_invalid_estimate();
        speeds |= row.flags.0 & RowFlags::HAS_SPEED.0;
        let load_mask = row.flags.load_mask();
        let refused = if TAINTS {
            !row.is_candidate(all)
        } else {
            row.is_overloaded()
        };
        let excluded = refused | limits.exceeded::<LIMITS>(row, load_mask, &mut high);
        #[allow(
            clippy::cast_possible_truncation,
            reason = "rows.len() <= capacity <= 2^31"
        )]
        {
            *slot = i as u32 | (u32::from(excluded) * LEFT_OUT);
        }
        left_out += usize::from(excluded);
        if TAINTS {
            eligible += usize::from(row.taints.contains_all(required));
        }
        each(i, row, !excluded);
    }
    invalid |= high >= EXACT_LIMIT || (speeds != 0 && any_invalid_speed(rows));
    if !TAINTS {
        eligible = rows.len();
    }
    Marked {
        left_out,
        eligible,
        invalid,
    }
}

/// The mark of an `order` entry whose row is left out: its top bit, free because a selection
/// takes at most 2^31 rows. Admission loops write every row's index, marked or not, so they
/// have no data-dependent store; [`compact_left_out`] then removes the marked ones.
pub(crate) const LEFT_OUT: u32 = 1 << 31;

/// Writes NaN to the cost beside every marked entry of `order` (as many as `costs`), so a
/// picker of the least cost passes over the rows left out where they are
/// ([`OnePass::InPlace`]): one branch-free pass over the two arrays.
///
/// [`OnePass::InPlace`]: crate::engine::OnePass::InPlace
#[inline]
pub(crate) fn nan_left_out(order: &[u32], costs: &mut [f64]) {
    for (cost, &entry) in costs.iter_mut().zip(order) {
        *cost = if entry & LEFT_OUT == 0 {
            *cost
        } else {
            f64::NAN
        };
    }
}

/// Moves the unmarked entries of `order` to its front, in order, and returns how many there
/// are; `beside` (empty, or as long as `order`: the costs kept beside it) moves the same way.
/// What `order` and `beside` hold past the returned count is unspecified.
///
/// Blocks of [`COMPACT_BLOCK`] entries without a mark move whole (and not at all before the
/// first mark). A block with marks is read whole first, then each of its entries is written to
/// the next free position, which advances only when the entry is kept: no data-dependent
/// branch. The free positions are within a block's length of the first one (`kept` is at most
/// the block's start, so they end by the block's end: positions already read), so they are
/// addressed as a fixed window of one block, without a bounds check per entry. The last,
/// partial block goes entry by entry.
#[inline]
pub(crate) fn compact_left_out(order: &mut [u32], beside: &mut [f64]) -> usize {
    let carry = !beside.is_empty();
    debug_assert!(!carry || beside.len() == order.len());
    let n = order.len();
    let (mut kept, mut start) = (0, 0);
    while start + COMPACT_BLOCK <= n {
        let end = start + COMPACT_BLOCK;
        let block: [u32; COMPACT_BLOCK] = order[start..end].try_into().expect("a whole block");
        if block.iter().fold(0, |marks, &e| marks | e) & LEFT_OUT == 0 {
            if kept != start {
                order.copy_within(start..end, kept);
                if carry {
                    beside.copy_within(start..end, kept);
                }
            }
            kept += COMPACT_BLOCK;
        } else {
            let window = kept..kept + COMPACT_BLOCK;
            let to: &mut [u32; COMPACT_BLOCK] = (&mut order[window.clone()])
                .try_into()
                .expect("a whole block");
            let mut k = 0;
            if carry {
                let costs: [f64; COMPACT_BLOCK] =
                    beside[start..end].try_into().expect("a whole block");
                let to_costs: &mut [f64; COMPACT_BLOCK] =
                    (&mut beside[window]).try_into().expect("a whole block");
                for (&entry, &cost) in block.iter().zip(&costs) {
                    to[k % COMPACT_BLOCK] = entry & !LEFT_OUT;
                    to_costs[k % COMPACT_BLOCK] = cost;
                    k += 1 - (entry >> 31) as usize;
                }
            } else {
                for &entry in &block {
                    to[k % COMPACT_BLOCK] = entry & !LEFT_OUT;
                    k += 1 - (entry >> 31) as usize;
                }
            }
            kept += k;
        }
        start = end;
    }
    for i in start..n {
        let entry = order[i];
        order[kept] = entry & !LEFT_OUT;
        if carry {
            beside[kept] = beside[i];
        }
        kept += 1 - (entry >> 31) as usize;
    }
    kept
}

/// Entries per block of [`compact_left_out`].
const COMPACT_BLOCK: usize = 16;

#[cfg(test)]
mod tests {
    use super::{LEFT_OUT, compact_left_out, in_canonical_order};
    use crate::engine::{RandomSource, WyRand};
    use crate::vocab::{Row, WorkerKey};
    use std::vec::Vec;

    /// The compaction keeps the unmarked entries and their costs in order, and counts them, as a
    /// plain filter does: lengths across several blocks and a partial one, marks from none to
    /// all, in runs and alone, with and without costs beside.
    #[test]
    fn the_compaction_is_the_filter() {
        let mut draw = WyRand::with_seed(11);
        #[allow(clippy::cast_possible_truncation, reason = "below n, a small usize")]
        let mut below = |n: usize| (draw.next_u64() % n as u64) as usize;
        for case in 0..3000 {
            let n = below(200);
            // One in `every` entries marked, on average: none, a few, most, all.
            let every = [0, 1, 2, 5, 17, 64][below(6)];
            #[allow(clippy::cast_possible_truncation, reason = "n < 200")]
            let order: Vec<u32> = (0..n as u32)
                .map(|i| {
                    let marked = every != 0 && below(every) == 0;
                    i | (u32::from(marked) * LEFT_OUT)
                })
                .collect();
            let costs: Vec<f64> = (0..n)
                .map(|i| f64::from(u32::try_from(i).unwrap()) * 0.5)
                .collect();
            let expected: Vec<(u32, f64)> = order
                .iter()
                .zip(&costs)
                .filter(|&(&e, _)| e & LEFT_OUT == 0)
                .map(|(&e, &c)| (e, c))
                .collect();
            let (mut o, mut c) = (order.clone(), costs.clone());
            let m = compact_left_out(&mut o, &mut c);
            let got: Vec<(u32, f64)> = o[..m].iter().copied().zip(c[..m].iter().copied()).collect();
            assert_eq!(got, expected, "case {case}: {order:?}");
            let mut o = order.clone();
            let m = compact_left_out(&mut o, &mut []);
            let kept: Vec<u32> = expected.iter().map(|&(e, _)| e).collect();
            assert_eq!(&o[..m], &kept[..], "case {case}, no costs: {order:?}");
        }
    }

    /// The order check is the plain definition, strictly increasing `(worker_id, dp_rank)`:
    /// ids drawn near 0 and near 2^63 and 2^64 (where the packed check's differences would
    /// wrap), repeated ids with ranks in and out of order, and ids anywhere (differences of 2^63
    /// and more); lengths 0 to 40.
    #[test]
    fn the_canonical_order_check_is_the_plain_one() {
        let mut draw = WyRand::with_seed(5);
        let edges = [0, 1 << 62, (1 << 63) - 3, 1 << 63, u64::MAX - 3];
        for case in 0..20_000 {
            let n = usize::try_from(draw.next_u64() % 41).unwrap();
            let base = edges[case % edges.len()];
            // Sorted in most cases, so the whole-key path and the ids' pass are both reached.
            let mut keys: Vec<WorkerKey> = (0..n)
                .map(|_| {
                    let near = base.wrapping_add(draw.next_u64() % 6);
                    let id = if case % 7 == 6 { draw.next_u64() } else { near };
                    WorkerKey::new(id, u32::try_from(draw.next_u64() % 3).unwrap())
                })
                .collect();
            if case % 4 != 0 {
                keys.sort_unstable();
                if case % 8 == 1 {
                    keys.dedup();
                }
            }
            let rows: Vec<Row> = keys.iter().map(|&k| Row::new(k)).collect();
            let plain = keys.windows(2).all(|pair| pair[0] < pair[1]);
            assert_eq!(in_canonical_order(&rows), plain, "{keys:?}");
        }
    }
}
