//! What a selection returns: the [`Selection`], why it failed ([`SelectError`]), and the
//! per-row [`Explanation`] of `select_explained`.

use core::fmt;

use super::component::{ComponentError, PickReason};
use super::policy::MAX_SCORERS;
use crate::vocab::{RequestError, RowField, WorkerKey};

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
    /// The explanation buffer of [`Policy::select_explained`](super::Policy::select_explained) holds fewer entries than rows.
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
    pub(super) contributions: [f64; MAX_SCORERS],
    pub(super) scorers: usize,
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
    pub(super) contributions: [f64; MAX_SCORERS],
    pub(super) scorers: usize,
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
