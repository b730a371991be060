//! The three kinds of component a policy composes: filters, scorers and a picker.
//!
//! Each declares the [`WorkerInputs`] it reads for a [`Leg`] and sees only those through its
//! views. Filters decide per row; scorers write one cost per candidate, once per selection; the
//! picker returns one candidate. Components are immutable: anything that varies per call lives in
//! the caller's [`crate::Selector`].

use core::fmt;

use crate::engine::policy::LEFT_OUT;
use crate::engine::rng::RandomSource;
use crate::vocab::{Candidates, RequestView, RowView, WorkerInputs};
use crate::vocab::{Leg, Row, RowRule};

/// An error a component reports about itself (a host callback failing, say). The selector wraps
/// it with the component's kind and index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ComponentError {
    /// A component-defined code (a C callback's non-zero return value, for example).
    pub code: i32,
}

impl fmt::Display for ComponentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "component reported error code {}", self.code)
    }
}

impl core::error::Error for ComponentError {}

/// A filter's decision about one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The row stays a candidate.
    Keep,
    /// The row is removed ("filtered").
    Reject,
    /// The row is removed because the worker is overloaded; when every removal is of this kind
    /// the selection fails with [`crate::SelectError::AllOverloaded`].
    Overloaded,
}

/// Removes candidates, one row at a time, before scoring.
///
/// # Examples
///
/// ```
/// use libroute_core::{Admission, ComponentError, Filter, Leg, RequestView, RowView, Verdict, WorkerInputs};
///
/// /// Keeps workers with at most `max` active requests.
/// struct MaxRequests { max: u64 }
///
/// impl Filter for MaxRequests {
///     fn inputs(&self, _leg: Leg) -> WorkerInputs { WorkerInputs::LOAD }
///     fn check(&self, _req: &RequestView<'_>, row: &RowView<'_>) -> Result<Verdict, ComponentError> {
///         let load = row.load().unwrap_or_default(); // no load projection: keep
///         Ok(if load.active_requests > self.max { Verdict::Overloaded } else { Verdict::Keep })
///     }
///     // Optional: every row in one loop of this filter's own check (see `check_rows`).
///     fn check_rows(&self, req: &RequestView<'_>, admission: &mut Admission<'_>) -> Option<Result<(), ComponentError>> {
///         Some(admission.check_with(self, req))
///     }
/// }
/// ```
pub trait Filter {
    /// The groups this filter reads for requests of `leg`.
    fn inputs(&self, leg: Leg) -> WorkerInputs;

    /// Decides about one row.
    ///
    /// # Errors
    ///
    /// A [`ComponentError`] aborts the selection; nothing is picked.
    fn check(
        &self,
        request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Verdict, ComponentError>;

    /// A capability the engine asks for: [`Filter::check`] of every row `admission` still keeps,
    /// in one call, through [`Admission::check_with`] (one loop of this filter's own check,
    /// instead of a call through the policy's list per row). Return `None` (the default) not to
    /// offer it, and the engine asks row by row. An error, here or from any filter, makes the
    /// engine decide row by row instead, so the error a selection reports does not depend on it.
    fn check_rows(
        &self,
        request: &RequestView<'_>,
        admission: &mut Admission<'_>,
    ) -> Option<Result<(), ComponentError>> {
        let _ = (request, admission);
        None
    }

    /// A capability the engine asks for: the rule this filter's [`Filter::check`] decides by,
    /// when it decides by the row alone and cannot fail: for every row (whatever the request),
    /// [`Verdict::Reject`] when the row lacks one of the rule's required taints, else
    /// [`Verdict::Overloaded`] when [`Row::exceeds`] the rule, else [`Verdict::Keep`]. A
    /// scorer whose one pass applies such rules ([`Scorer::applies_row_rules`]) then leaves
    /// out the rows the filters would, as it admits them, instead of the filters asking about
    /// its candidates afterwards. The default, `None`, offers no rule.
    fn row_rule(&self) -> Option<RowRule> {
        None
    }
}

/// The rows a selection still keeps while its filters decide, for [`Filter::check_rows`]: each
/// row is asked only when every check before it kept the row (the host's overload mark, the
/// request's required taints and the filters before this one).
#[derive(Debug)]
pub struct Admission<'a> {
    /// The selection's rows.
    rows: &'a [Row],
    /// One entry per row still asked about: the row's index, marked [`LEFT_OUT`] when the row
    /// is no longer kept.
    order: &'a mut [u32],
    /// Rows a filter rejected.
    rejected: usize,
    /// Rows left out as overloaded (the host's mark or a filter's verdict).
    overloaded: usize,
}

impl<'a> Admission<'a> {
    /// Admission of `rows` over `order`: every row's entry, marked as
    /// [`crate::engine::mark_unfiltered`] marks it, or the indices of the candidates a one-pass
    /// scorer admitted; with `overloaded` rows already left out as overloaded.
    pub(crate) fn new(rows: &'a [Row], order: &'a mut [u32], overloaded: usize) -> Self {
        Self {
            rows,
            order,
            rejected: 0,
            overloaded,
        }
    }

    /// The entries, for the engine to compact, and how many rows were rejected and how many
    /// left out as overloaded.
    pub(crate) fn finish(self) -> (&'a mut [u32], usize, usize) {
        (self.order, self.rejected, self.overloaded)
    }

    /// Asks `filter`'s own [`Filter::check`] about every row still kept, through the same
    /// [`RowView`] the row-by-row loop gives it: what a filter that offers
    /// [`Filter::check_rows`] usually calls. The loop is this filter's alone, so its check can
    /// be inlined into it.
    ///
    /// # Errors
    ///
    /// The check's first error.
    #[inline]
    pub fn check_with<F: Filter + ?Sized>(
        &mut self,
        filter: &F,
        request: &RequestView<'_>,
    ) -> Result<(), ComponentError> {
        self.check_each(|row| filter.check(request, &RowView::new(request, row)))
    }

    /// Asks `check` about every row still kept, in row order, and leaves out each it does not
    /// keep. Stops at `check`'s first error and returns it.
    ///
    /// # Errors
    ///
    /// `check`'s first error.
    #[inline]
    pub fn check_each<E>(
        &mut self,
        mut check: impl FnMut(&Row) -> Result<Verdict, E>,
    ) -> Result<(), E> {
        for slot in self.order.iter_mut() {
            if *slot & LEFT_OUT != 0 {
                continue;
            }
            match check(&self.rows[*slot as usize])? {
                Verdict::Keep => {}
                Verdict::Reject => {
                    *slot |= LEFT_OUT;
                    self.rejected += 1;
                }
                Verdict::Overloaded => {
                    *slot |= LEFT_OUT;
                    self.overloaded += 1;
                }
            }
        }
        Ok(())
    }
}

/// Writes one cost per candidate; the policy sums the scorers' costs.
///
/// `costs` arrives filled with NaN, one slot per candidate; a slot left unwritten, or written with
/// a non-finite value, fails the selection with [`crate::SelectError::NonFiniteCost`] naming this
/// scorer and the row.
///
/// # Examples
///
/// ```
/// use libroute_core::{Candidates, ComponentError, Leg, RequestView, Scorer, WorkerInputs};
///
/// /// Charges one unit per active request.
/// struct PerRequest;
///
/// impl Scorer for PerRequest {
///     fn inputs(&self, _leg: Leg) -> WorkerInputs { WorkerInputs::LOAD }
///     fn score(&self, _req: &RequestView<'_>, rows: &Candidates<'_>, costs: &mut [f64]) -> Result<(), ComponentError> {
///         for (cost, row) in costs.iter_mut().zip(rows.iter()) {
///             *cost = row.load().map_or(0, |l| l.active_requests) as f64;
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait Scorer {
    /// The groups this scorer reads for requests of `leg`.
    fn inputs(&self, leg: Leg) -> WorkerInputs;

    /// Writes `costs[k]` for every candidate `k`.
    ///
    /// # Errors
    ///
    /// A [`ComponentError`] aborts the selection; nothing is picked.
    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError>;

    /// A capability the engine asks for: steps 1 to 3 of a selection in one pass, for a request
    /// without a pin and a policy whose only component is this scorer, or, when this scorer's
    /// costs are [per row](Scorer::costs_are_per_row), a policy with filters or other scorers
    /// too, of which this is the first with costs per row.
    /// The pass admits every row that is valid ([`Row::is_valid`]) and a candidate
    /// ([`Row::is_candidate`]), writes their host indices to `order[..m]` in host order and their
    /// costs, exactly those [`Scorer::score`] would write, to `costs[..m]`, and returns `m`.
    ///
    /// Return `None` whenever the pass cannot vouch for that (an invalid row, no candidate, a case
    /// it does not cover): the engine then runs the general steps, which overwrite what was
    /// written here and report what is wrong. `order` and `costs` hold at least `rows.len()`
    /// entries. The default is `None`: the general steps always run.
    fn score_all_rows(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<usize> {
        let _ = (request, rows, order, costs);
        None
    }

    /// [`Scorer::score_all_rows`], asked instead of it when this scorer is the policy's only
    /// scorer and its picker [picks a least cost](Picker::picks_least_cost) or [picks by
    /// position](Picker::picks_by_position). Such a picker passes over NaN costs, or finds its
    /// candidates through [`PickInput::entry`], so the pass may leave every row where it is
    /// ([`OnePass::InPlace`]): `order[i]` is `i` for every row, with its top bit (`1 << 31`)
    /// set when row `i` is not a candidate, and `costs[i]` its cost, NaN when it is not a
    /// candidate. That spares moving the candidates to the front, a pass a fleet with
    /// overloaded or ineligible rows otherwise pays. The default is the pass of
    /// [`Scorer::score_all_rows`] ([`OnePass::Compacted`]).
    fn score_all_rows_in_place(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<OnePass> {
        self.score_all_rows(request, rows, order, costs)
            .map(OnePass::Compacted)
    }

    /// Whether the costs [`Scorer::score_all_rows`] writes, whenever it returns `Some`, depend
    /// only on the request and each cost's own row, not on which other rows are candidates (a
    /// scorer that compares a row with the others, such as a load spread, must say `false`). The
    /// costs of some of its candidates are then those [`Scorer::score`] writes for them alone,
    /// and the engine also takes the one pass for a policy with filters that offer
    /// [`Filter::check_rows`] (they are asked about its candidates after it, as they would be
    /// before scoring) or with other scorers (they score the candidates left, into their own
    /// columns). The default is `false`.
    fn costs_are_per_row(&self) -> bool {
        false
    }

    /// Whether [`Scorer::score_all_rows`] and [`Scorer::score_all_rows_in_place`] leave out
    /// the rows [`RequestView::row_rule`] leaves out (a row lacking one of its taints, or one
    /// that [`Row::exceeds`] it), as they leave out a row lacking the request's required
    /// taints. The engine then hands a policy's filters, when each offers a rule
    /// ([`Filter::row_rule`]), to the pass as one rule, and does not ask them afterwards. Only
    /// a scorer whose costs are per row ([`Scorer::costs_are_per_row`]) is asked. The default
    /// is `false`: the view's rule is then [`RowRule::NONE`].
    fn applies_row_rules(&self) -> bool {
        false
    }

    /// A capability the engine asks for (through [`Scorers::score_together`]): the costs of a
    /// run of scorers of this type, `run[s]`'s into `columns[s * stride..][..n]` for the `n`
    /// candidates, exactly what each one's [`Scorer::score`] writes, in fewer passes over the
    /// rows than asking each in turn (parts of one estimate that share their per-row terms and
    /// aggregates, or scorers that read the same rows). The engine asks when a policy has
    /// several scorers, with `request` and `candidates` under the union of their inputs; each
    /// column must still be what its scorer's `score` writes under its own inputs
    /// (`run[s].inputs(request.leg())`), so a run whose scorers declare different groups must
    /// read each group only for those that declared it. The columns hold what an earlier
    /// selection left: accepting the run means writing all `n` entries of each of its columns
    /// (NaN for a cost that cannot be given, which the engine reports as each scorer's).
    ///
    /// Return `None`, writing nothing, when the run is not one this type scores together: the
    /// engine then asks each scorer in turn. `Some(Err((s, error)))` is scorer `s`'s error (the
    /// columns before `s` written). The default is `None`.
    fn score_run(
        run: &[Self],
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        columns: &mut [f64],
        stride: usize,
    ) -> Option<Result<(), (usize, ComponentError)>>
    where
        Self: Sized,
    {
        let _ = (run, request, candidates, columns, stride);
        None
    }
}

/// What [`Scorer::score_all_rows_in_place`] wrote, with the number of candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnePass {
    /// As [`Scorer::score_all_rows`]: the candidates are `order[..m]`, their costs `costs[..m]`.
    Compacted(usize),
    /// Every row in its own place, those that are not candidates marked, with a NaN cost.
    InPlace(usize),
}

impl OnePass {
    /// The candidate count of a [`OnePass::Compacted`] pass, `None` for one left in place: what
    /// [`Scorer::score_all_rows`] returns when it shares its pass with
    /// [`Scorer::score_all_rows_in_place`].
    #[must_use]
    pub const fn compacted(self) -> Option<usize> {
        match self {
            OnePass::Compacted(m) => Some(m),
            OnePass::InPlace(_) => None,
        }
    }

    /// The number of candidates, moved to the front or left in place.
    pub(crate) const fn candidates(self) -> usize {
        match self {
            OnePass::Compacted(m) | OnePass::InPlace(m) => m,
        }
    }

    /// How many entries of `order` (and of the costs beside it) the candidates are among, for a
    /// pass over `rows` rows: the candidates alone when moved to the front, every row when left
    /// in place.
    pub(crate) const fn entries(self, rows: usize) -> usize {
        match self {
            OnePass::Compacted(m) => m,
            OnePass::InPlace(_) => rows,
        }
    }
}

/// Why a picker chose its row.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum PickReason {
    /// The request was pinned; no draw was made.
    Pinned,
    /// The row has the minimum cost; `ties` rows shared it and one was drawn uniformly.
    MinCost {
        /// How many candidates had the minimum cost.
        ties: u32,
    },
    /// Drawn by temperature sampling; `probability` is the chance this row had.
    Sampled {
        /// The probability the sampler gave this row.
        probability: f64,
    },
    /// A custom picker's choice.
    Custom,
}

/// A picker's answer: a position among the candidates and the reason.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pick {
    /// Position in the candidate list the picker was given (not the host's row index).
    pub index: usize,
    /// Why.
    pub reason: PickReason,
}

/// What a picker sees: the candidates and their summed costs, in the same order, and how many
/// picks the caller's selector has asked for before this one.
///
/// For a picker that [picks a least cost](Picker::picks_least_cost) or [picks by
/// position](Picker::picks_by_position), the engine may leave the rows that are not candidates
/// among them, with a NaN cost: `costs` and `candidates` then have an entry per row, and
/// [`PickInput::candidate_count`] says how many of those are candidates.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct PickInput<'a> {
    /// The candidates, under the picker's declaration.
    pub candidates: Candidates<'a>,
    /// Summed, finite cost per candidate (NaN for an entry that is not one, see above).
    pub costs: &'a [f64],
    /// How many candidates there are: `costs.len()`, unless rows that are not candidates were
    /// left among them.
    pub candidate_count: usize,
    /// Picks of turn-taking pickers ([`Picker::takes_turns`]) made with this
    /// [`crate::Selector`] before this one, since it was made or
    /// [`crate::Selector::reset_seeded`]: the position of such a picker, kept by the caller so
    /// that the picker stays an immutable value. Every turn-taking policy a selector runs shares
    /// the count; give each its own selector to keep their positions apart.
    pub turn: u64,
}

impl PickInput<'_> {
    /// The entry of `costs` (the index a [`Pick`] names) of the `k`-th candidate: `k` itself,
    /// unless rows that are not candidates were left among them; then the `k`-th unmarked entry,
    /// found by counting the marks a block of 16 entries at a time. `costs.len()`, out of
    /// range, for `k` at or past [`PickInput::candidate_count`].
    #[must_use]
    pub fn entry(&self, k: usize) -> usize {
        let (_, order) = self.candidates.raw();
        if self.candidate_count == order.len() {
            return k.min(order.len());
        }
        let mut left = k;
        for (b, block) in order.chunks(16).enumerate() {
            // The block's candidates: entries without the top bit.
            let here = block.iter().map(|&i| !i >> 31).sum::<u32>() as usize;
            if left < here {
                let mut unmarked = block
                    .iter()
                    .enumerate()
                    .filter(|&(_, &i)| i & LEFT_OUT == 0);
                return unmarked.nth(left).map_or(order.len(), |(j, _)| b * 16 + j);
            }
            left -= here;
        }
        order.len()
    }
}

/// Chooses one candidate.
///
/// A picker draws randomness only from `rng`, so a seeded selection replays exactly. `work` is a
/// scratch slice at least as long as the candidate list (the softmax probabilities, say).
pub trait Picker {
    /// The groups this picker reads for requests of `leg`.
    fn inputs(&self, leg: Leg) -> WorkerInputs;

    /// Picks a candidate.
    ///
    /// # Errors
    ///
    /// A [`ComponentError`] aborts the selection. An index outside the candidates is reported by
    /// the selector as [`crate::SelectError::PickOutOfRange`].
    fn pick(
        &self,
        input: &PickInput<'_>,
        work: &mut [f64],
        rng: &mut dyn RandomSource,
    ) -> Result<Pick, ComponentError>;

    /// Whether this picker takes turns ([`PickInput::turn`]): only such picks advance the
    /// selector's turn count, so a selector that also runs other policies does not skip a
    /// turn-taking one's positions. The default is `false`.
    fn takes_turns(&self) -> bool {
        false
    }

    /// A capability the engine asks for: whether every pick is a least-cost one, reading
    /// nothing but the costs: the first candidate with the least cost, each later candidate
    /// with the same cost taking its place with probability `1 / ties` (one draw from `rng`
    /// per such candidate), NaN costs passed over, reported as [`PickReason::MinCost`]. The
    /// engine may then leave rows that are not candidates among the costs, as NaN (see
    /// [`Scorer::score_all_rows_in_place`]); `input.candidates` then lists them too, so such a
    /// picker must not read it. The default is `false`.
    fn picks_least_cost(&self) -> bool {
        false
    }

    /// A capability the engine asks for: whether every pick reads, of the candidates, only how
    /// many there are ([`PickInput::candidate_count`]) and the costs of those it draws, each
    /// found by its position through [`PickInput::entry`], which also gives the index it picks.
    /// The engine may then leave rows that are not candidates in place, as for
    /// [`Picker::picks_least_cost`]; such a picker must not read `input.candidates`, nor take
    /// `input.costs.len()` for the candidate count. The default is `false`.
    fn picks_by_position(&self) -> bool {
        false
    }
}

impl<T: Filter + ?Sized> Filter for &T {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        (**self).inputs(leg)
    }
    fn check(
        &self,
        request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Verdict, ComponentError> {
        (**self).check(request, row)
    }
    fn check_rows(
        &self,
        request: &RequestView<'_>,
        admission: &mut Admission<'_>,
    ) -> Option<Result<(), ComponentError>> {
        (**self).check_rows(request, admission)
    }
    fn row_rule(&self) -> Option<RowRule> {
        (**self).row_rule()
    }
}

impl<T: Scorer + ?Sized> Scorer for &T {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        (**self).inputs(leg)
    }
    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        (**self).score(request, candidates, costs)
    }
    fn score_all_rows(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<usize> {
        (**self).score_all_rows(request, rows, order, costs)
    }
    fn score_all_rows_in_place(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<OnePass> {
        (**self).score_all_rows_in_place(request, rows, order, costs)
    }
    fn costs_are_per_row(&self) -> bool {
        (**self).costs_are_per_row()
    }
    fn applies_row_rules(&self) -> bool {
        (**self).applies_row_rules()
    }
}

impl<T: Picker + ?Sized> Picker for &T {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        (**self).inputs(leg)
    }
    fn pick(
        &self,
        input: &PickInput<'_>,
        work: &mut [f64],
        rng: &mut dyn RandomSource,
    ) -> Result<Pick, ComponentError> {
        (**self).pick(input, work, rng)
    }
    fn takes_turns(&self) -> bool {
        (**self).takes_turns()
    }
    fn picks_least_cost(&self) -> bool {
        (**self).picks_least_cost()
    }
    fn picks_by_position(&self) -> bool {
        (**self).picks_by_position()
    }
}

/// An ordered list of filters: `()`, a tuple of up to six filters, an array or a slice.
pub trait Filters {
    /// How many filters.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Filter `i`, for `i < len()`.
    fn get(&self, i: usize) -> Option<&dyn Filter>;

    /// The first filter, in order, that does not keep `row`: its index and verdict, or its
    /// index and error when it failed; `None` when every filter keeps the row. The default asks
    /// each filter through [`Filters::get`]; a list of one concrete filter type calls them
    /// directly instead, so the selection's loop can inline them.
    ///
    /// # Errors
    ///
    /// The index and error of the first filter that failed.
    fn first_refusal(
        &self,
        request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Option<(usize, Verdict)>, (usize, ComponentError)> {
        first_refusal_of(
            (0..self.len()).filter_map(|i| self.get(i).map(|f| (i, f))),
            request,
            row,
        )
    }

    /// Every filter's [`Filter::check_rows`], in order; `None` as soon as one does not offer it
    /// or fails (the engine then asks row by row, from the start).
    fn check_rows(&self, request: &RequestView<'_>, admission: &mut Admission<'_>) -> Option<()> {
        for i in 0..self.len() {
            self.get(i)?.check_rows(request, admission)?.ok()?;
        }
        Some(())
    }

    /// Every filter's [`Filter::row_rule`] as one rule ([`RowRule::and`]): the rows it leaves
    /// out are those some filter does not keep. `None` as soon as one offers no rule.
    fn row_rule(&self) -> Option<RowRule> {
        (0..self.len()).try_fold(RowRule::NONE, |rule, i| {
            Some(rule.and(self.get(i)?.row_rule()?))
        })
    }
}

/// [`Filters::first_refusal`] over filters of one type, called without dynamic dispatch.
///
/// # Errors
///
/// As [`Filters::first_refusal`].
#[inline]
pub(crate) fn refusal_among<T: Filter>(
    filters: &[T],
    request: &RequestView<'_>,
    row: &RowView<'_>,
) -> Result<Option<(usize, Verdict)>, (usize, ComponentError)> {
    first_refusal_of(filters.iter().enumerate(), request, row)
}

/// The one loop of [`Filters::first_refusal`], over `(index, filter)` pairs in order.
#[inline]
fn first_refusal_of<'f, T: Filter + ?Sized + 'f>(
    filters: impl Iterator<Item = (usize, &'f T)>,
    request: &RequestView<'_>,
    row: &RowView<'_>,
) -> Result<Option<(usize, Verdict)>, (usize, ComponentError)> {
    for (i, filter) in filters {
        match filter.check(request, row) {
            Ok(Verdict::Keep) => {}
            Ok(verdict) => return Ok(Some((i, verdict))),
            Err(error) => return Err((i, error)),
        }
    }
    Ok(None)
}

/// An ordered list of scorers whose costs are summed: `()`, a tuple of up to six scorers, an
/// array or a slice.
pub trait Scorers {
    /// How many scorers.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Scorer `i`, for `i < len()`.
    fn get(&self, i: usize) -> Option<&dyn Scorer>;

    /// A capability the engine asks for: every scorer's costs at once, scorer `s`'s into
    /// `columns[s * stride..][..n]`, as [`Scorer::score_run`] describes. Lists of one scorer
    /// type (slices, arrays, the catalog's) ask that type; the default is `None`.
    fn score_together(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        columns: &mut [f64],
        stride: usize,
    ) -> Option<Result<(), (usize, ComponentError)>> {
        let _ = (request, candidates, columns, stride);
        None
    }
}

impl Filters for () {
    fn len(&self) -> usize {
        0
    }
    fn get(&self, _i: usize) -> Option<&dyn Filter> {
        None
    }
}

impl Scorers for () {
    fn len(&self) -> usize {
        0
    }
    fn get(&self, _i: usize) -> Option<&dyn Scorer> {
        None
    }
}

impl<T: Filter> Filters for [T] {
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    fn get(&self, i: usize) -> Option<&dyn Filter> {
        <[T]>::get(self, i).map(|f| f as &dyn Filter)
    }
    fn first_refusal(
        &self,
        request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Option<(usize, Verdict)>, (usize, ComponentError)> {
        refusal_among(self, request, row)
    }
}

impl<T: Scorer> Scorers for [T] {
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
    fn get(&self, i: usize) -> Option<&dyn Scorer> {
        <[T]>::get(self, i).map(|s| s as &dyn Scorer)
    }
    fn score_together(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        columns: &mut [f64],
        stride: usize,
    ) -> Option<Result<(), (usize, ComponentError)>> {
        T::score_run(self, request, candidates, columns, stride)
    }
}

impl<T: Filter, const K: usize> Filters for [T; K] {
    fn len(&self) -> usize {
        K
    }
    fn get(&self, i: usize) -> Option<&dyn Filter> {
        self.as_slice().get(i).map(|f| f as &dyn Filter)
    }
    fn first_refusal(
        &self,
        request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Option<(usize, Verdict)>, (usize, ComponentError)> {
        refusal_among(self, request, row)
    }
}

impl<T: Scorer, const K: usize> Scorers for [T; K] {
    fn len(&self) -> usize {
        K
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
        T::score_run(self, request, candidates, columns, stride)
    }
}

impl<L: Filters + ?Sized> Filters for &L {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn get(&self, i: usize) -> Option<&dyn Filter> {
        (**self).get(i)
    }
    fn first_refusal(
        &self,
        request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Option<(usize, Verdict)>, (usize, ComponentError)> {
        (**self).first_refusal(request, row)
    }
    fn check_rows(&self, request: &RequestView<'_>, admission: &mut Admission<'_>) -> Option<()> {
        (**self).check_rows(request, admission)
    }
    fn row_rule(&self) -> Option<RowRule> {
        (**self).row_rule()
    }
}

impl<L: Scorers + ?Sized> Scorers for &L {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn get(&self, i: usize) -> Option<&dyn Scorer> {
        (**self).get(i)
    }
    fn score_together(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        columns: &mut [f64],
        stride: usize,
    ) -> Option<Result<(), (usize, ComponentError)>> {
        (**self).score_together(request, candidates, columns, stride)
    }
}

macro_rules! tuple_lists {
    ($len:expr; $($name:ident $idx:tt),+) => {
        impl<$($name: Filter),+> Filters for ($($name,)+) {
            fn len(&self) -> usize { $len }
            fn get(&self, i: usize) -> Option<&dyn Filter> {
                match i { $($idx => Some(&self.$idx),)+ _ => None }
            }
        }
        impl<$($name: Scorer),+> Scorers for ($($name,)+) {
            fn len(&self) -> usize { $len }
            fn get(&self, i: usize) -> Option<&dyn Scorer> {
                match i { $($idx => Some(&self.$idx),)+ _ => None }
            }
        }
    };
}

tuple_lists!(1; A 0);
tuple_lists!(2; A 0, B 1);
tuple_lists!(3; A 0, B 1, C 2);
tuple_lists!(4; A 0, B 1, C 2, D 3);
tuple_lists!(5; A 0, B 1, C 2, D 3, E 4);
tuple_lists!(6; A 0, B 1, C 2, D 3, E 4, F 5);

#[cfg(test)]
mod tests {
    use super::{LEFT_OUT, PickInput};
    use crate::vocab::{Candidates, Request, RequestView, WorkerInputs};
    use std::vec::Vec;

    #[test]
    fn entry_is_the_position_of_the_kth_unmarked_entry() {
        let request = Request::new(64, 16);
        let view = RequestView::new(&request, WorkerInputs::NONE);
        let mut state = 7u64;
        for n in 1..80u32 {
            for marks in 0..6 {
                // Marks on some entries: none, every `marks + 1`-th, or pseudo-random ones.
                let order: Vec<u32> = (0..n)
                    .map(|i| {
                        state = state
                            .wrapping_mul(6_364_136_223_846_793_005)
                            .wrapping_add(1);
                        let marked = match marks {
                            0 => false,
                            1..=3 => i % (marks + 1) == 0,
                            _ => state >> 62 == 0,
                        };
                        i | (u32::from(marked) * LEFT_OUT)
                    })
                    .collect();
                let unmarked: Vec<usize> = (0..order.len())
                    .filter(|&e| order[e] & LEFT_OUT == 0)
                    .collect();
                let costs = std::vec![0.0; order.len()];
                let input = PickInput {
                    candidates: Candidates::new(view, &[], &order),
                    costs: &costs,
                    candidate_count: unmarked.len(),
                    turn: 0,
                };
                for k in 0..=unmarked.len() {
                    let expected = unmarked.get(k).copied().unwrap_or(order.len());
                    assert_eq!(input.entry(k), expected, "n {n} marks {marks} k {k}");
                }
                assert_eq!(input.entry(usize::MAX), order.len());
            }
        }
    }
}
