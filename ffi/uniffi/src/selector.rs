//! [`Selector`]: per-caller scratch and random stream; select, explained select, last costs.

use std::sync::{Arc, Mutex, PoisonError};

use route::{RequestArgs, host, libroute_row, libroute_selection};

use crate::error::{RouteError, closed};
use crate::policy::Policy;
use crate::vocab::{
    CRequest, Candidate, Explained, Request, Row, RowExplanation, Selection, unpack_rows,
};

/// A selector of the safe layer and the row buffer it reuses between calls.
pub(crate) struct SelectorState {
    pub(crate) inner: host::Selector,
    rows: Vec<libroute_row>,
}

/// Selection scratch of a fixed capacity and a random stream. Thread-safe (calls are serialized);
/// give each thread its own for throughput.
#[derive(uniffi::Object)]
pub struct Selector {
    state: Mutex<Option<SelectorState>>,
}

impl std::fmt::Debug for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Selector")
    }
}

impl Selector {
    /// Fills the reused row buffer with `fill` and selects, with each scorer's contribution.
    fn select_with(
        &self,
        policy: &Policy,
        request: &Request,
        fill: impl FnOnce(&mut Vec<libroute_row>) -> Result<(), RouteError>,
    ) -> Result<Selection, RouteError> {
        let converted = CRequest::new(request);
        let mut contributions = vec![0.0; route::LIBROUTE_MAX_SCORERS];
        let out = policy.with(|policy| {
            self.with(|state| {
                state.rows.clear();
                fill(&mut state.rows)?;
                Ok(state.inner.select(
                    policy,
                    &converted.args(),
                    &state.rows,
                    Some(&mut contributions),
                )?)
            })
        })?;
        contributions.truncate(out.scorers);
        Ok(Selection::from_c(&out, contributions))
    }

    /// [`Selector::select`] over rows already in the C layout, read where they are (no copy):
    /// the path of hosts that keep their rows packed, such as the Python extension reading a
    /// NumPy array in place.
    ///
    /// # Errors
    ///
    /// As [`Selector::select`].
    pub fn select_c_rows(
        &self,
        policy: &Policy,
        request: &Request,
        rows: &[libroute_row],
    ) -> Result<Selection, RouteError> {
        let mut contributions = vec![0.0; route::LIBROUTE_MAX_SCORERS];
        let converted = CRequest::new(request);
        let out = self.select_raw(policy, &converted.args(), rows, &mut contributions)?;
        contributions.truncate(out.scorers);
        Ok(Selection::from_c(&out, contributions))
    }

    /// One selection over the C vocabulary: the policy under its read lock, this selector
    /// under its mutex, each scorer's contribution to the chosen row written to
    /// `contributions` (`LIBROUTE_MAX_SCORERS` values hold every policy's). The JVM fast path
    /// calls this with the request and rows in the host's buffers.
    ///
    /// # Errors
    ///
    /// As [`Selector::select`].
    pub fn select_raw(
        &self,
        policy: &Policy,
        request: &RequestArgs<'_>,
        rows: &[libroute_row],
        contributions: &mut [f64],
    ) -> Result<libroute_selection, RouteError> {
        policy.with(|policy| {
            self.with(|state| {
                Ok(state
                    .inner
                    .select(policy, request, rows, Some(contributions))?)
            })
        })
    }

    /// Runs `f` on the live state, holding the lock.
    pub(crate) fn with<R>(
        &self,
        f: impl FnOnce(&mut SelectorState) -> Result<R, RouteError>,
    ) -> Result<R, RouteError> {
        // A panic cannot leave the state half-updated: every call rewrites what it reads.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.as_mut() {
            Some(state) => f(state),
            None => Err(closed("selector")),
        }
    }
}

#[uniffi::export]
impl Selector {
    /// A selector for up to `capacity` rows (1 to 4,096); its unseeded random stream starts
    /// from `entropy`.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for 0, `CapacityExceeded` above 4,096.
    #[uniffi::constructor]
    pub fn new(capacity: u32, entropy: u64) -> Result<Arc<Self>, RouteError> {
        Ok(Arc::new(Selector {
            state: Mutex::new(Some(SelectorState {
                inner: host::Selector::new(capacity as usize, entropy)?,
                rows: Vec::new(),
            })),
        }))
    }

    /// Selects one of `rows` for `request` with `policy`, with each scorer's contribution.
    ///
    /// # Errors
    ///
    /// The selection's error, naming the row, worker or field at fault.
    pub fn select(
        &self,
        policy: Arc<Policy>,
        request: Request,
        rows: Vec<Row>,
    ) -> Result<Selection, RouteError> {
        self.select_with(&policy, &request, |buffer| {
            buffer.extend(rows.iter().map(libroute_row::from));
            Ok(())
        })
    }

    /// [`Selector::select`] for rows packed as bytes (`PACKED_ROW_BYTES` per row, see
    /// `packed_row_size`): one copy instead of a field-by-field conversion of each record,
    /// which is what dominates a selection from Python or the JVM.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` when the length is not a multiple of the row size; otherwise as
    /// [`Selector::select`].
    pub fn select_packed(
        &self,
        policy: Arc<Policy>,
        request: Request,
        rows: Vec<u8>,
    ) -> Result<Selection, RouteError> {
        self.select_with(&policy, &request, |buffer| unpack_rows(&rows, buffer))
    }

    /// Every candidate of the last successful selection, in the order the picker saw them.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`.
    pub fn last_costs(&self) -> Result<Vec<Candidate>, RouteError> {
        self.with(|state| {
            let mut costs = Vec::with_capacity(state.inner.candidates());
            state.inner.for_each_cost(|row, cost| {
                costs.push(Candidate {
                    row: row as u64,
                    cost,
                });
            });
            Ok(costs)
        })
    }

    /// Restarts the seeded stream: the next seeded selection draws as the first did.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`.
    pub fn reset_seeded(&self) -> Result<(), RouteError> {
        self.with(|state| {
            state.inner.reset_seeded();
            Ok(())
        })
    }

    /// Frees the native selector now; later calls fail with `Closed`. Idempotent.
    pub fn release(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

#[uniffi::export]
impl Selector {
    /// [`Selector::select`] with an explanation of every row: whether it was a candidate or which
    /// check removed it, and for candidates each scorer's contribution and the total.
    ///
    /// # Errors
    ///
    /// As [`Selector::select`] (a failed selection's explanations are not returned).
    pub fn select_explained(
        &self,
        policy: Arc<Policy>,
        request: Request,
        rows: Vec<Row>,
    ) -> Result<Explained, RouteError> {
        let converted = CRequest::new(&request);
        let rows: Vec<libroute_row> = rows.iter().map(libroute_row::from).collect();
        let blank = route::libroute_explanation::from(&libroute_core::Explanation::EMPTY);
        let mut explanations = vec![blank; rows.len()];
        let out = policy.with(|policy| {
            self.with(|state| {
                Ok(state.inner.select_explained(
                    policy,
                    &converted.args(),
                    &rows,
                    &mut explanations,
                )?)
            })
        })?;
        let rows: Vec<RowExplanation> = explanations.iter().map(RowExplanation::from).collect();
        let contributions = rows
            .iter()
            .find(|r| r.chosen)
            .map(|r| r.contributions.clone())
            .unwrap_or_default();
        Ok(Explained {
            selection: Selection::from_c(&out, contributions),
            rows,
        })
    }
}
