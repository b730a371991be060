//! [`Selector`]: per-caller scratch and random stream; select, explained select, last costs.

use std::ptr::{NonNull, null_mut};
use std::sync::{Arc, Mutex, PoisonError};

use route::{
    libroute_policy, libroute_request, libroute_row, libroute_selection, libroute_selector,
};

use crate::error::{RouteError, check, closed};
use crate::policy::Policy;
use crate::vocab::{
    CRequest, Candidate, Explained, Request, Row, RowExplanation, Selection, unpack_rows,
};

/// A selector's handle and the buffers it reuses between calls.
pub(crate) struct SelectorState {
    pub(crate) raw: NonNull<libroute_selector>,
    capacity: usize,
    rows: Vec<libroute_row>,
}

// SAFETY: the handle is owned exclusively by this state, which the mutex of `Selector` guards; the
// C selector has no thread affinity, only a ban on concurrent use.
unsafe impl Send for SelectorState {}

impl Drop for SelectorState {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `libroute_selector_new` and is freed once, here.
        unsafe { route::libroute_selector_free(self.raw.as_ptr()) };
    }
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

/// The arguments `Selector::run_selection` hands to a selecting C call: the policy under its
/// read lock, the selector under its mutex, the converted request (its arrays alive for the
/// call), the filled rows (the router writes their cache and load), and the selection to write.
pub(crate) struct SelectionCall<'a> {
    pub(crate) policy: *const libroute_policy,
    pub(crate) selector: *mut libroute_selector,
    pub(crate) request: *const libroute_request,
    pub(crate) rows: &'a mut [libroute_row],
    pub(crate) out: *mut libroute_selection,
}

impl Selector {
    /// Fills the reused row buffer with `fill` and selects.
    fn select_with(
        &self,
        policy: &Policy,
        request: &Request,
        fill: impl FnOnce(&mut Vec<libroute_row>) -> Result<(), RouteError>,
    ) -> Result<Selection, RouteError> {
        let mut contributions = vec![0.0; route::LIBROUTE_MAX_SCORERS];
        let out = self.run_selection(policy, request, fill, |c| {
            // SAFETY: `run_selection`'s pointers are valid for the call (see `SelectionCall`);
            // the contributions buffer holds its length.
            check(unsafe {
                route::libroute_select(
                    c.policy,
                    c.selector,
                    c.request,
                    c.rows.as_ptr(),
                    c.rows.len(),
                    c.out,
                    contributions.as_mut_ptr(),
                    contributions.len(),
                )
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
        let out = self.select_raw(policy, &converted.c(), rows, &mut contributions)?;
        contributions.truncate(out.scorers);
        Ok(Selection::from_c(&out, contributions))
    }

    /// One `libroute_select` over C values: the policy under its read lock, this selector
    /// under its mutex, each scorer's contribution to the chosen row written to
    /// `contributions` (`LIBROUTE_MAX_SCORERS` values hold every policy's). The JVM fast path
    /// (`crate::jni`) calls this with the request and rows in the host's buffers.
    ///
    /// # Errors
    ///
    /// As [`Selector::select`].
    pub fn select_raw(
        &self,
        policy: &Policy,
        request: &libroute_request,
        rows: &[libroute_row],
        contributions: &mut [f64],
    ) -> Result<libroute_selection, RouteError> {
        policy.with(|policy_raw| {
            self.with(|state| {
                let mut out = std::mem::MaybeUninit::<libroute_selection>::uninit();
                // SAFETY: the policy is live under its read lock, the selector exclusive under
                // its mutex; the request's arrays are valid by its contract; `rows` and the
                // contributions are valid for their lengths.
                check(unsafe {
                    route::libroute_select(
                        policy_raw,
                        state.raw.as_ptr(),
                        request,
                        rows.as_ptr(),
                        rows.len(),
                        out.as_mut_ptr(),
                        contributions.as_mut_ptr(),
                        contributions.len(),
                    )
                })?;
                // SAFETY: written by the successful call above.
                Ok(unsafe { out.assume_init() })
            })
        })
    }

    /// The locking, request conversion and row buffer every selecting call shares: converts
    /// `request`, fills the rows with `fill`, holds the policy's read lock and the selector's
    /// mutex, and makes the C call `call`; returns the selection it wrote on success.
    pub(crate) fn run_selection(
        &self,
        policy: &Policy,
        request: &Request,
        fill: impl FnOnce(&mut Vec<libroute_row>) -> Result<(), RouteError>,
        call: impl FnOnce(SelectionCall<'_>) -> Result<(), RouteError>,
    ) -> Result<libroute_selection, RouteError> {
        let converted = CRequest::new(request);
        let c_request = converted.c();
        policy.with(|policy_raw| {
            self.with(|state| {
                state.rows.clear();
                fill(&mut state.rows)?;
                let mut out = std::mem::MaybeUninit::<libroute_selection>::uninit();
                call(SelectionCall {
                    policy: policy_raw,
                    selector: state.raw.as_ptr(),
                    request: &raw const c_request,
                    rows: &mut state.rows,
                    out: out.as_mut_ptr(),
                })?;
                // SAFETY: written by the successful call above.
                Ok(unsafe { out.assume_init() })
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
        let mut raw = null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check(unsafe { route::libroute_selector_new(capacity as usize, entropy, &raw mut raw) })?;
        let raw = NonNull::new(raw).ok_or_else(|| RouteError::Panic {
            detail: "libroute_selector_new returned no selector".to_owned(),
        })?;
        Ok(Arc::new(Selector {
            state: Mutex::new(Some(SelectorState {
                raw,
                capacity: capacity as usize,
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
            let capacity = state.capacity;
            let (mut rows, mut costs) = (vec![0usize; capacity], vec![0.0f64; capacity]);
            let mut n = 0;
            // SAFETY: the handle is live; both buffers hold `capacity` values; `n` is writable.
            check(unsafe {
                route::libroute_selector_last_costs(
                    state.raw.as_ptr(),
                    rows.as_mut_ptr(),
                    costs.as_mut_ptr(),
                    capacity,
                    &raw mut n,
                )
            })?;
            Ok(rows
                .into_iter()
                .zip(costs)
                .take(n)
                .map(|(row, cost)| Candidate {
                    row: row as u64,
                    cost,
                })
                .collect())
        })
    }

    /// Restarts the seeded stream: the next seeded selection draws as the first did.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`.
    pub fn reset_seeded(&self) -> Result<(), RouteError> {
        self.with(|state| {
            // SAFETY: the handle is live and the mutex makes this call exclusive.
            check(unsafe { route::libroute_selector_reset_seeded(state.raw.as_ptr()) })
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
        let n = rows.len();
        let mut explanations: Vec<route::libroute_explanation> = Vec::with_capacity(n);
        let fill = |buffer: &mut Vec<libroute_row>| {
            buffer.extend(rows.iter().map(libroute_row::from));
            Ok(())
        };
        let out = self.run_selection(&policy, &request, fill, |c| {
            // SAFETY: `run_selection`'s pointers are valid for the call (see `SelectionCall`);
            // `explanations` has room for the `n` entries the call writes.
            check(unsafe {
                route::libroute_select_explained(
                    c.policy,
                    c.selector,
                    c.request,
                    c.rows.as_ptr(),
                    c.rows.len(),
                    c.out,
                    explanations.as_mut_ptr(),
                    explanations.capacity(),
                )
            })
        })?;
        // SAFETY: the successful call wrote an explanation for each of the `n` rows.
        unsafe { explanations.set_len(n) };
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
