//! Custom filters and scorers written in C: the callback types and the core components that
//! call them.

use std::ffi::c_void;

use libroute_core::{
    Candidates, ComponentError, DefaultCost, Filter, Filters, Leg, OnePass, RequestView, Row,
    RowView, Scorer, Scorers, Verdict, WorkerInputs,
};

use crate::vocab::{libroute_request_info, libroute_row};

/// A filter callback: decide about `row` and write a `libroute_verdict` to `*verdict`. Return 0,
/// or a non-zero code to fail the selection with `LIBROUTE_STATUS_FILTER_FAILED`.
pub type libroute_filter_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        request: *const libroute_request_info,
        row: *const libroute_row,
        verdict: *mut u32,
    ) -> i32,
>;

/// A scorer callback: write `costs[k]` for candidate `k`, whose row is `rows[order[k]]`, for
/// `k < len`. `costs` arrives filled with NaN; an unwritten, NaN or infinite cost fails the
/// selection with `LIBROUTE_STATUS_NON_FINITE_COST`. Return 0, or a non-zero code to fail it with
/// `LIBROUTE_STATUS_SCORER_FAILED`. Called at most once per selection, with the candidates every
/// filter kept.
pub type libroute_scorer_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        request: *const libroute_request_info,
        rows: *const libroute_row,
        order: *const u32,
        len: usize,
        costs: *mut f64,
    ) -> i32,
>;

/// A custom filter: a callback, its user data, and the `LIBROUTE_INPUT_*` bits it reads.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_filter {
    /// The callback; must not be NULL.
    pub callback: libroute_filter_fn,
    /// Passed to every call; libroute never dereferences it.
    pub user_data: *mut c_void,
    /// The input groups the callback reads.
    pub inputs: u8,
}

/// A custom scorer: a callback, its user data, and the `LIBROUTE_INPUT_*` bits it reads. Its costs
/// are added to the default cost.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_scorer {
    /// The callback; must not be NULL.
    pub callback: libroute_scorer_fn,
    /// Passed to every call; libroute never dereferences it.
    pub user_data: *mut c_void,
    /// The input groups the callback reads.
    pub inputs: u8,
}

fn info(request: &RequestView<'_>) -> libroute_request_info {
    libroute_request_info {
        prompt_tokens: request.prompt_tokens(),
        block_size: request.block_size(),
        role: request.role() as u32,
        request_blocks: request.request_blocks(),
        track_prefill_tokens: u8::from(request.track_prefill_tokens()),
        pinned: u8::from(request.is_pinned()),
    }
}

/// Code a filter failure carries when the callback wrote an undefined verdict.
pub(crate) const UNDEFINED_VERDICT: i32 = i32::MIN;

/// A C filter, callable from any thread the host allows.
pub(crate) struct CFilter {
    pub(crate) callback: unsafe extern "C" fn(
        *mut c_void,
        *const libroute_request_info,
        *const libroute_row,
        *mut u32,
    ) -> i32,
    pub(crate) user_data: *mut c_void,
    pub(crate) inputs: WorkerInputs,
}

// SAFETY: libroute never dereferences `user_data`; the header documents that sharing a policy with
// callbacks across threads requires thread-safe callbacks, which is the host's promise.
unsafe impl Send for CFilter {}
// SAFETY: as above.
unsafe impl Sync for CFilter {}

impl Filter for CFilter {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        self.inputs
    }

    fn check(
        &self,
        request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Verdict, ComponentError> {
        let info = info(request);
        let mut verdict = u32::MAX;
        let row: *const Row = row.raw();
        // SAFETY: the callback was non-NULL at construction; the pointers are valid for the call
        // (a local, a row of the caller's own array with the same layout, a local out-parameter).
        let code = unsafe {
            (self.callback)(
                self.user_data,
                &raw const info,
                row.cast(),
                &raw mut verdict,
            )
        };
        if code != 0 {
            return Err(ComponentError { code });
        }
        match verdict {
            0 => Ok(Verdict::Keep),
            1 => Ok(Verdict::Reject),
            2 => Ok(Verdict::Overloaded),
            _ => Err(ComponentError {
                code: UNDEFINED_VERDICT,
            }),
        }
    }
}

/// A C scorer.
pub(crate) struct CScorer {
    pub(crate) callback: unsafe extern "C" fn(
        *mut c_void,
        *const libroute_request_info,
        *const libroute_row,
        *const u32,
        usize,
        *mut f64,
    ) -> i32,
    pub(crate) user_data: *mut c_void,
    pub(crate) inputs: WorkerInputs,
}

// SAFETY: as for `CFilter`.
unsafe impl Send for CScorer {}
// SAFETY: as for `CFilter`.
unsafe impl Sync for CScorer {}

/// The scorers an ABI policy sums: the default cost, then any C scorers.
pub(crate) enum AnyScorer {
    Default(DefaultCost),
    C(CScorer),
}

impl Scorer for AnyScorer {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        match self {
            AnyScorer::Default(d) => d.inputs(leg),
            AnyScorer::C(c) => c.inputs,
        }
    }

    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        match self {
            AnyScorer::Default(d) => d.score(request, candidates, costs),
            AnyScorer::C(c) => {
                let info = info(request);
                let (rows, order) = candidates.raw();
                // SAFETY: the callback was non-NULL at construction; `rows` and `order` are valid
                // for `rows.len()` and `costs.len()` (== order.len()) elements during the call, and
                // `libroute_row` has `Row`'s layout (checked at compile time above).
                let code = unsafe {
                    (c.callback)(
                        c.user_data,
                        &raw const info,
                        rows.as_ptr().cast(),
                        order.as_ptr(),
                        costs.len(),
                        costs.as_mut_ptr(),
                    )
                };
                if code == 0 {
                    Ok(())
                } else {
                    Err(ComponentError { code })
                }
            }
        }
    }

    /// The default cost's one pass: a policy of it and C scorers then admits and prices every
    /// row in one loop, and asks the C scorers about its candidates (a C scorer has no pass).
    fn score_all_rows(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<usize> {
        match self {
            AnyScorer::Default(d) => d.score_all_rows(request, rows, order, costs),
            AnyScorer::C(_) => None,
        }
    }

    fn score_all_rows_in_place(
        &self,
        request: &RequestView<'_>,
        rows: &[Row],
        order: &mut [u32],
        costs: &mut [f64],
    ) -> Option<OnePass> {
        match self {
            AnyScorer::Default(d) => d.score_all_rows_in_place(request, rows, order, costs),
            AnyScorer::C(_) => None,
        }
    }

    fn costs_are_per_row(&self) -> bool {
        match self {
            AnyScorer::Default(d) => d.costs_are_per_row(),
            AnyScorer::C(_) => false,
        }
    }
}

pub(crate) struct AbiFilters(pub(crate) Vec<CFilter>);
pub(crate) struct AbiScorers(pub(crate) Vec<AnyScorer>);

impl Filters for AbiFilters {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn get(&self, i: usize) -> Option<&dyn Filter> {
        self.0.get(i).map(|f| f as &dyn Filter)
    }
}

impl Scorers for AbiScorers {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn get(&self, i: usize) -> Option<&dyn Scorer> {
        self.0.get(i).map(|s| s as &dyn Scorer)
    }
}
