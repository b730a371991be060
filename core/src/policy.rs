//! A policy (filters, summed scorers, a picker, an optional seed) and the caller-owned
//! [`Selector`] that runs it over fixed-capacity buffers.

use core::fmt;

use crate::component::{
    ComponentError, Filters, Pick, PickInput, PickReason, Picker, Scorers, Verdict,
};
use crate::inputs::{Candidates, RequestView, RowView, WorkerInputs};
use crate::rng::{RandomSource, WyRand};
use crate::types::{Leg, Request, RequestError, Row, RowField, WorkerKey};

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

/// Why a selection failed. Nothing was picked, and the caller should book nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum SelectError {
    /// No row was given, or none was eligible (required taints).
    NoEndpoints,
    /// Filters removed every eligible row (at least one for a reason other than overload).
    AllFiltered,
    /// Every eligible row was removed as overloaded.
    AllOverloaded,
    /// More rows than the selector's capacity.
    CapacityExceeded {
        /// Rows given.
        rows: usize,
        /// The selector's capacity `N`.
        capacity: usize,
    },
    /// The request is invalid.
    InvalidRequest(RequestError),
    /// A row is invalid.
    InvalidRow {
        /// Host row index.
        row: usize,
        /// The invalid field.
        field: RowField,
    },
    /// Two rows name the same worker and rank (checked in seeded mode, where order matters).
    DuplicateWorker {
        /// Host row index of the second occurrence.
        row: usize,
        /// The repeated worker.
        worker: WorkerKey,
    },
    /// The pinned worker is not among the rows (outside the allow-list).
    PinNotAllowed(WorkerKey),
    /// The pinned worker is overloaded.
    PinOverloaded(WorkerKey),
    /// The pinned worker is among the rows but ineligible (required taints or a filter).
    PinIneligible(WorkerKey),
    /// A scorer's cost for a row is NaN (or unwritten) or infinite.
    NonFiniteCost {
        /// Index of the scorer in the policy.
        scorer: usize,
        /// Host row index.
        row: usize,
    },
    /// The sum of finite costs for a row overflowed to infinity.
    NonFiniteTotal {
        /// Host row index.
        row: usize,
    },
    /// The picker returned a position outside the candidates.
    PickOutOfRange {
        /// What the picker returned.
        index: usize,
        /// How many candidates there were.
        candidates: usize,
    },
    /// A filter reported an error.
    FilterFailed {
        /// Index of the filter in the policy.
        filter: usize,
        /// What it reported.
        error: ComponentError,
    },
    /// A scorer reported an error.
    ScorerFailed {
        /// Index of the scorer in the policy.
        scorer: usize,
        /// What it reported.
        error: ComponentError,
    },
    /// The picker reported an error.
    PickerFailed(ComponentError),
    /// The explanation buffer of [`Policy::select_explained`] holds fewer entries than rows.
    ExplanationBufferTooSmall {
        /// Rows given.
        rows: usize,
        /// Entries in the buffer.
        given: usize,
    },
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectError::NoEndpoints => {
                f.write_str("no endpoints: no eligible worker among the rows")
            }
            SelectError::AllFiltered => f.write_str("all eligible workers filtered"),
            SelectError::AllOverloaded => f.write_str("all eligible workers overloaded"),
            SelectError::CapacityExceeded { rows, capacity } => {
                write!(
                    f,
                    "{rows} rows exceed the selector's capacity of {capacity}"
                )
            }
            SelectError::InvalidRequest(e) => write!(f, "invalid request: {e}"),
            SelectError::InvalidRow { row, field } => write!(f, "invalid row {row}: {field}"),
            SelectError::DuplicateWorker { row, worker } => {
                write!(f, "row {row} repeats worker {worker}")
            }
            SelectError::PinNotAllowed(w) => write!(f, "pinned worker {w} is not among the rows"),
            SelectError::PinOverloaded(w) => write!(f, "pinned worker {w} is overloaded"),
            SelectError::PinIneligible(w) => write!(f, "pinned worker {w} is not eligible"),
            SelectError::NonFiniteCost { scorer, row } => {
                write!(
                    f,
                    "scorer {scorer} gave row {row} a non-finite or unwritten cost"
                )
            }
            SelectError::NonFiniteTotal { row } => {
                write!(f, "the total cost of row {row} overflowed")
            }
            SelectError::PickOutOfRange { index, candidates } => {
                write!(f, "picker returned {index} for {candidates} candidates")
            }
            SelectError::FilterFailed { filter, error } => {
                write!(f, "filter {filter} failed: {error}")
            }
            SelectError::ScorerFailed { scorer, error } => {
                write!(f, "scorer {scorer} failed: {error}")
            }
            SelectError::PickerFailed(error) => write!(f, "picker failed: {error}"),
            SelectError::ExplanationBufferTooSmall { rows, given } => write!(
                f,
                "{rows} rows need {rows} explanations, the buffer holds {given}"
            ),
        }
    }
}

impl core::error::Error for SelectError {}

/// The outcome of one selection: which row, why, and the accounting values a host books.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Selection {
    /// Host row index of the chosen row.
    pub row: usize,
    /// The chosen worker and rank.
    pub worker: WorkerKey,
    /// The chosen row's total cost (the sum of the scorers' contributions).
    pub cost: f64,
    contributions: [f64; MAX_SCORERS],
    scorers: usize,
    /// How many candidates survived filtering.
    pub candidates: usize,
    /// Why the picker chose this row.
    pub reason: PickReason,
    /// `RB`, the request's size in blocks (at least 1).
    pub request_blocks: u64,
    /// The chosen row's cached-token estimate `E_tokens`, or 0 when no component declared CACHE.
    pub cached_tokens: u64,
}

impl Selection {
    /// Each scorer's contribution to [`Selection::cost`], in policy order.
    #[must_use]
    pub fn contributions(&self) -> &[f64] {
        &self.contributions[..self.scorers]
    }
}

/// What became of one row in a selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Disposition {
    /// A candidate: every scorer scored it.
    Candidate,
    /// The request was pinned to another worker.
    NotPinned,
    /// The row is invalid (this field).
    Invalid(RowField),
    /// The worker lacks a taint the request requires.
    Ineligible,
    /// The host marked the worker overloaded.
    Overloaded,
    /// Filter `filter` (its index in the policy) removed the row.
    Filtered {
        /// The filter's index.
        filter: usize,
    },
    /// Filter `filter` removed the row as overloaded.
    FilterOverloaded {
        /// The filter's index.
        filter: usize,
    },
    /// Filter `filter` failed on this row.
    FilterFailed {
        /// The filter's index.
        filter: usize,
    },
    /// Not examined: the selection stopped before reaching this row (an invalid request or
    /// row, a scorer that failed).
    NotExamined,
}

/// One row's part in a selection: whether it was a candidate (or which check removed it) and,
/// for candidates of a successful selection, each scorer's contribution and the total.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Explanation {
    /// The host row index.
    pub row: usize,
    /// The row's worker.
    pub worker: WorkerKey,
    /// What became of it.
    pub disposition: Disposition,
    contributions: [f64; MAX_SCORERS],
    scorers: usize,
    /// The summed cost; NaN when the row was not scored.
    pub total: f64,
    /// Whether the picker chose it.
    pub chosen: bool,
}

impl Explanation {
    /// An explanation of nothing yet, for sizing buffers.
    pub const EMPTY: Explanation = Explanation {
        row: 0,
        worker: WorkerKey::new(0, 0),
        disposition: Disposition::NotExamined,
        contributions: [f64::NAN; MAX_SCORERS],
        scorers: 0,
        total: f64::NAN,
        chosen: false,
    };

    /// Each scorer's contribution to [`Explanation::total`], in policy order (empty when the row
    /// was not scored).
    #[must_use]
    pub fn contributions(&self) -> &[f64] {
        &self.contributions[..self.scorers]
    }
}

impl Default for Explanation {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// Caller-owned scratch for selections: buffers of capacity `N` and the random stream.
///
/// One selector per thread; a policy is shared. Selecting over more than `N` rows is an error
/// ([`SelectError::CapacityExceeded`]), never a truncation. Its size is about
/// `N * (4 + 8 * (MAX_SCORERS + 2))` bytes, so large capacities belong in a `static` or a `Box`.
///
/// # Examples
///
/// ```
/// use libroute_core::Selector;
/// let selector = Selector::<64>::new();
/// assert_eq!(selector.capacity(), 64);
/// ```
#[derive(Clone)]
pub struct Selector<const N: usize> {
    order: [u32; N],
    costs: [[f64; N]; MAX_SCORERS],
    totals: [f64; N],
    work: [f64; N],
    unseeded: WyRand,
    seeded: Option<(u64, WyRand)>,
    last: Last,
    /// `order[..identity]` holds `0, 1, 2, ...` (left by fused selections, so the next one need
    /// not write it again).
    identity: usize,
}

/// Where the last successful selection left its per-candidate totals.
#[derive(Debug, Clone, Copy, Default)]
struct Last {
    candidates: usize,
    /// With exactly one scorer the totals are that scorer's column.
    in_first_column: bool,
}

impl<const N: usize> fmt::Debug for Selector<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Selector")
            .field("capacity", &N)
            .field("seeded", &self.seeded)
            .finish_non_exhaustive()
    }
}

impl<const N: usize> Default for Selector<N> {
    fn default() -> Self {
        Self::new()
    }
}

/// The default state of the unseeded stream when the host gives no entropy.
const DEFAULT_ENTROPY: u64 = 0x6c69_6272_6f75_7465; // "libroute"

impl<const N: usize> Selector<N> {
    /// An empty selector whose unseeded stream starts from a fixed state. Use
    /// [`Selector::with_entropy`] to give each thread its own stream.
    #[must_use]
    pub const fn new() -> Self {
        Self::with_entropy(DEFAULT_ENTROPY)
    }

    /// An empty selector whose unseeded stream starts from `entropy` (from the host's OS RNG, a
    /// clock, a thread id: the core reads none of these itself).
    #[must_use]
    pub const fn with_entropy(entropy: u64) -> Self {
        const {
            assert!(N > 0, "Selector capacity N must be at least 1");
            assert!(
                N <= u32::MAX as usize,
                "Selector capacity N must fit in u32 row indices"
            );
        }
        Self {
            order: [0; N],
            costs: [[0.0; N]; MAX_SCORERS],
            totals: [0.0; N],
            work: [0.0; N],
            unseeded: WyRand::with_seed(entropy),
            seeded: None,
            last: Last {
                candidates: 0,
                in_first_column: false,
            },
            identity: 0,
        }
    }

    /// The capacity `N`.
    #[must_use]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Restarts the seeded stream: the next seeded selection draws as if it were the first.
    pub fn reset_seeded(&mut self) {
        self.seeded = None;
    }

    /// Every candidate of the last successful selection, in the order the picker saw them: the
    /// host row index and its total cost. Empty after a failed selection.
    ///
    /// # Examples
    ///
    /// ```
    /// use libroute_core::{DefaultKnobs, Load, Request, Row, Selector, WorkerKey};
    /// let policy = DefaultKnobs::default().build().unwrap();
    /// let rows = [1, 2].map(|id| Row::new(WorkerKey::new(id, 0)).with_load(Load { active_decode_blocks: id, ..Load::default() }));
    /// let mut selector = Selector::<4>::new();
    /// policy.select(&mut selector, &Request::new(32, 16), &rows).unwrap();
    /// assert_eq!(selector.last_costs().collect::<Vec<_>>(), [(0, 3.0), (1, 4.0)]);
    /// ```
    #[must_use = "iterators are lazy"]
    pub fn last_costs(&self) -> impl ExactSizeIterator<Item = (usize, f64)> + '_ {
        let m = self.last.candidates;
        let totals = if self.last.in_first_column {
            &self.costs[0][..m]
        } else {
            &self.totals[..m]
        };
        self.order[..m]
            .iter()
            .zip(totals)
            .map(|(&i, &c)| (i as usize, c))
    }

    fn view(&mut self) -> Scratch<'_> {
        self.last = Last::default();
        Scratch {
            order: &mut self.order,
            costs: self.costs.as_flattened_mut(),
            capacity: N,
            totals: &mut self.totals,
            work: &mut self.work,
            last: &mut self.last,
            identity: &mut self.identity,
        }
    }
}

/// The selector's buffers with `N` erased, so the hot code is compiled once.
struct Scratch<'a> {
    order: &'a mut [u32],
    costs: &'a mut [f64],
    capacity: usize,
    totals: &'a mut [f64],
    work: &'a mut [f64],
    last: &'a mut Last,
    /// `order[..*identity]` holds `0, 1, 2, ...`.
    identity: &'a mut usize,
}

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
        let m = selector.last.candidates;
        for (k, &i) in selector.order[..m].iter().enumerate() {
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
        let row_view = RowView::new(view, row);
        for i in 0..self.filters.len() {
            let Some(filter) = self.filters.get(i) else {
                continue;
            };
            match filter.check(view, &row_view) {
                Ok(Verdict::Keep) => {}
                Ok(verdict) => return Ok(Some((i, verdict))),
                Err(error) => return Err((i, error)),
            }
        }
        Ok(None)
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
        // The union of every component's inputs, gathered as each is asked (as `Policy::inputs`).
        let (m, mut declared) = match self.fused(scratch, request, rows, sort) {
            Some(declared) => (rows.len(), declared),
            None => self.admit_and_score(scratch, request, rows, sort)?,
        };
        let order: &[u32] = &scratch.order[..m];
        let scorers = self.scorers.len();
        let capacity = scratch.capacity;
        let totals: &[f64] = if scorers == 1 {
            &scratch.costs[..m]
        } else {
            &scratch.totals[..m]
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
            };
            let pick = self
                .picker
                .pick(&input, &mut scratch.work[..m], rng)
                .map_err(SelectError::PickerFailed)?;
            if pick.index >= m {
                return Err(SelectError::PickOutOfRange {
                    index: pick.index,
                    candidates: m,
                });
            }
            pick
        };

        let row = order[pick.index] as usize;
        *scratch.last = Last {
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
    /// the totals (into `scratch.totals` when there is more than one scorer). Returns how many
    /// candidates there are and the union of the filters' and scorers' inputs.
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
    ) -> Result<(usize, WorkerInputs), SelectError> {
        let leg = request.leg();
        let filter_inputs = self.filter_inputs(leg);
        let filter_view = RequestView::new(request, filter_inputs);
        let mut declared = filter_inputs;
        // This writes `order`.
        *scratch.identity = 0;

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
                reason = "rows.len() <= capacity <= u32::MAX"
            )]
            {
                scratch.order[0] = i as u32;
            }
            1
        } else if self.filters.is_empty() {
            // No filters: eligibility and the host's overload mark decide, branch-free per row.
            let required = request.required_taints;
            let order = &mut scratch.order[..rows.len()];
            let (mut m, mut eligible, mut valid) = (0usize, 0usize, true);
            for (i, row) in rows.iter().enumerate() {
                // Validity is folded without branching; the bad row is found below, only if any.
                valid &= row.is_valid();
                let is_eligible = row.taints.contains_all(required);
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "rows.len() <= capacity <= u32::MAX"
                )]
                {
                    order[m] = i as u32;
                }
                m += usize::from(is_eligible & !row.is_overloaded());
                eligible += usize::from(is_eligible);
            }
            if !valid {
                return Err(first_invalid(rows));
            }
            if m == 0 {
                return Err(if eligible > 0 {
                    SelectError::AllOverloaded
                } else {
                    SelectError::NoEndpoints
                });
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
                            reason = "rows.len() <= capacity <= u32::MAX"
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
                return Err(if filtered > 0 {
                    SelectError::AllFiltered
                } else if overloaded > 0 {
                    SelectError::AllOverloaded
                } else {
                    SelectError::NoEndpoints
                });
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
        for s in 0..scorers {
            let Some(scorer) = self.scorers.get(s) else {
                continue;
            };
            let inputs = scorer.inputs(leg);
            declared |= inputs;
            let view = RequestView::new(request, inputs);
            let column = &mut scratch.costs[s * capacity..s * capacity + m];
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
        }
        if scorers > 1 {
            let totals = &mut scratch.totals[..m];
            totals.fill(0.0);
            for s in 0..scorers {
                let column = &scratch.costs[s * capacity..s * capacity + m];
                for (t, c) in totals.iter_mut().zip(column) {
                    *t += *c;
                }
            }
            if let Some(k) = first_non_finite(totals) {
                return Err(SelectError::NonFiniteTotal {
                    row: order[k] as usize,
                });
            }
        }
        Ok((m, declared))
    }

    /// Steps 1 to 3 fused, for a policy that is exactly Dynamo's default cost with no filters
    /// and a request without a pin, when every row is a candidate (see
    /// [`DefaultCost::score_all_candidates`]); in seeded mode only when the rows are already in
    /// canonical order. Returns the scorer's inputs (the only component's so far), or `None` when
    /// the general steps must run instead; they then overwrite everything this wrote.
    fn fused(
        &self,
        scratch: &mut Scratch<'_>,
        request: &Request<'_>,
        rows: &[Row],
        sort: bool,
    ) -> Option<WorkerInputs> {
        if request.pin.is_some() || !self.filters.is_empty() || self.scorers.len() != 1 {
            return None;
        }
        let scorer = self.scorers.get(0)?;
        let cost = scorer.as_default_cost()?;
        if sort && !rows.windows(2).all(|pair| pair[0].worker < pair[1].worker) {
            return None;
        }
        let inputs = scorer.inputs(request.leg());
        let view = RequestView::new(request, inputs);
        if !cost.score_all_candidates(&view, request.required_taints, rows, scratch.costs) {
            return None;
        }
        // Every row is a candidate, in host order; the order left by the last fused selection
        // is reused as far as it goes.
        let known = *scratch.identity;
        if rows.len() > known {
            for (k, slot) in scratch.order[..rows.len()]
                .iter_mut()
                .enumerate()
                .skip(known)
            {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "rows.len() <= capacity <= u32::MAX"
                )]
                {
                    *slot = k as u32;
                }
            }
            *scratch.identity = rows.len();
        }
        Some(inputs)
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
