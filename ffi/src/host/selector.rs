//! [`Selector`]: per-caller scratch and random stream; selection, its explained form and the last
//! selection's costs.

use libroute_core::{Explanation, Row, SelectError, Selection, Selector as CoreSelector};

use crate::host::Policy;
use crate::selector::libroute_explanation;
use crate::status::{Failure, libroute_status};
use crate::vocab::{
    LIBROUTE_MAX_CAPACITY, RequestArgs, core_rows, libroute_row, libroute_selection, to_c,
    with_core_request,
};

/// The core selector of the smallest capacity tier that holds the requested capacity.
pub(crate) enum AnySelector {
    S16(Box<CoreSelector<16>>),
    S64(Box<CoreSelector<64>>),
    S256(Box<CoreSelector<256>>),
    S1024(Box<CoreSelector<1024>>),
    S4096(Box<CoreSelector<4096>>),
}

/// Runs `$body` with `$s` bound to the core selector behind an [`AnySelector`].
macro_rules! with_selector {
    ($sel:expr, $s:ident => $body:expr) => {
        match $sel {
            $crate::host::selector::AnySelector::S16($s) => $body,
            $crate::host::selector::AnySelector::S64($s) => $body,
            $crate::host::selector::AnySelector::S256($s) => $body,
            $crate::host::selector::AnySelector::S1024($s) => $body,
            $crate::host::selector::AnySelector::S4096($s) => $body,
        }
    };
}
pub(crate) use with_selector;

/// Selection scratch of a fixed capacity and a random stream: the value behind a
/// `libroute_selector`. One caller at a time (`&mut self`); give each thread its own.
/// Selecting allocates nothing after construction (an explained selection allocates its buffer
/// on first use).
pub struct Selector {
    pub(crate) inner: AnySelector,
    capacity: usize,
    /// Explanations of [`Selector::select_explained`], allocated on its first use (to the
    /// capacity) and reused after.
    explanations: Vec<Explanation>,
}

impl std::fmt::Debug for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Selector")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl Selector {
    /// A selector for up to `capacity` rows (1 to `LIBROUTE_MAX_CAPACITY`); its unseeded random
    /// stream starts from `entropy`.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` for 0, `CAPACITY_EXCEEDED` above `LIBROUTE_MAX_CAPACITY`.
    pub fn new(capacity: usize, entropy: u64) -> Result<Self, Failure> {
        let inner = match capacity {
            0 => {
                return Err(Failure::fixed(
                    libroute_status::InvalidArgument,
                    "capacity is 0",
                ));
            }
            1..=16 => AnySelector::S16(Box::new(CoreSelector::with_entropy(entropy))),
            17..=64 => AnySelector::S64(Box::new(CoreSelector::with_entropy(entropy))),
            65..=256 => AnySelector::S256(Box::new(CoreSelector::with_entropy(entropy))),
            257..=1024 => AnySelector::S1024(Box::new(CoreSelector::with_entropy(entropy))),
            1025..=LIBROUTE_MAX_CAPACITY => {
                AnySelector::S4096(Box::new(CoreSelector::with_entropy(entropy)))
            }
            _ => {
                return Err(Failure::new(
                    libroute_status::CapacityExceeded,
                    format_args!(
                        "capacity {capacity} exceeds LIBROUTE_MAX_CAPACITY ({LIBROUTE_MAX_CAPACITY})"
                    ),
                ));
            }
        };
        Ok(Selector {
            inner,
            capacity,
            explanations: Vec::new(),
        })
    }

    /// The most rows one selection takes.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Checks that `rows` rows fit the capacity the caller asked for.
    pub(crate) fn check_rows(&self, rows: usize) -> Result<(), Failure> {
        if rows > self.capacity {
            return Err(Failure::new(
                libroute_status::CapacityExceeded,
                format_args!(
                    "{rows} rows exceed the selector's capacity of {}",
                    self.capacity
                ),
            ));
        }
        Ok(())
    }

    /// Selects one of `rows` for `request` with `policy`, and, when `contributions` is given,
    /// writes each scorer's contribution to the chosen row's cost into its first
    /// `selection.scorers` values.
    ///
    /// # Errors
    ///
    /// `BUFFER_TOO_SMALL` when `contributions` is shorter than the policy's scorer count and
    /// `CAPACITY_EXCEEDED` for more rows than the capacity (both checked before selecting); an
    /// invalid request field; the selection's failures (300-399), naming the row, scorer or
    /// worker.
    #[inline]
    pub fn select(
        &mut self,
        policy: &Policy,
        request: &RequestArgs<'_>,
        rows: &[libroute_row],
        contributions: Option<&mut [f64]>,
    ) -> Result<libroute_selection, Failure> {
        let scorers = policy.scorer_count();
        let room = contributions.as_ref().map_or(usize::MAX, |c| c.len());
        if room < scorers {
            return Err(Failure::new(
                libroute_status::BufferTooSmall,
                format_args!("contributions holds {room} values, the policy has {scorers} scorers"),
            ));
        }
        self.check_rows(rows.len())?;
        let rows = core_rows(rows);
        // The selection is converted where it is made, not returned through the closures
        // (it is about 150 bytes; the copies were a measurable part of the call).
        let write = |selection: Result<Selection, SelectError>| match selection {
            Ok(selection) => {
                if let Some(out) = contributions {
                    let parts = selection.contributions();
                    out[..parts.len()].copy_from_slice(parts);
                }
                Ok(to_c(&selection))
            }
            Err(e) => Err(Failure::select(e)),
        };
        with_core_request(
            request,
            |core_request| with_selector!(&mut self.inner, s => write(policy.select(s, core_request, rows))),
        )?
    }

    /// [`Selector::select`], and an explanation of every row into `explanations[..rows.len()]`:
    /// whether it was a candidate or which check removed it, and, for candidates of a successful
    /// selection, each scorer's contribution and the total. Rows are explained also when the
    /// selection fails (the failure says why).
    ///
    /// # Errors
    ///
    /// As [`Selector::select`], and `BUFFER_TOO_SMALL` when `explanations` is shorter than
    /// `rows` (checked first; nothing is written).
    pub fn select_explained(
        &mut self,
        policy: &Policy,
        request: &RequestArgs<'_>,
        rows: &[libroute_row],
        explanations: &mut [libroute_explanation],
    ) -> Result<libroute_selection, Failure> {
        if explanations.len() < rows.len() {
            return Err(Failure::new(
                libroute_status::BufferTooSmall,
                format_args!(
                    "explanations holds {} entries for {} rows",
                    explanations.len(),
                    rows.len()
                ),
            ));
        }
        self.check_rows(rows.len())?;
        if self.explanations.len() < self.capacity {
            self.explanations.resize(self.capacity, Explanation::EMPTY);
        }
        let rows: &[Row] = core_rows(rows);
        let scratch = &mut self.explanations[..rows.len()];
        let inner = &mut self.inner;
        let result = with_core_request(
            request,
            |core_request| with_selector!(inner, s => policy.select_explained(s, core_request, rows, scratch)),
        )?;
        // Rows are explained on success and on a selection failure alike.
        for (out, e) in explanations.iter_mut().zip(scratch.iter()) {
            *out = libroute_explanation::from(e);
        }
        result.map(|s| to_c(&s)).map_err(Failure::select)
    }

    /// How many candidates the last successful selection had (none after a failed one).
    #[must_use]
    pub fn candidates(&self) -> usize {
        with_selector!(&self.inner, s => s.last_costs().len())
    }

    /// Calls `f` with each candidate of the last successful selection, in the order the picker
    /// saw them: the row's index in the rows given and its total cost.
    pub fn for_each_cost(&self, mut f: impl FnMut(usize, f64)) {
        with_selector!(&self.inner, s => {
            for (row, cost) in s.last_costs() {
                f(row, cost);
            }
        });
    }

    /// Restarts the seeded stream: the next seeded selection draws as the first did.
    pub fn reset_seeded(&mut self) {
        with_selector!(&mut self.inner, s => s.reset_seeded());
    }
}
