//! `libroute_selector`: per-thread scratch and random stream; `libroute_select`, its explained
//! form and the last selection's costs. The selector's logic is `host::Selector`; these exports
//! turn pointers into its arguments.

use libroute_core::{Disposition, Explanation};

use crate::handle::{Handle, slice_arg};
use crate::host::{Policy, Selector};
use crate::policy::libroute_policy;
use crate::status::{Failure, boundary, libroute_status};
use crate::vocab::{
    LIBROUTE_MAX_SCORERS, RequestArgs, libroute_request, libroute_row, libroute_selection,
    libroute_worker,
};

/// Per-thread selection scratch: buffers of a fixed capacity and the random stream. Create with
/// `libroute_selector_new`; free with `libroute_selector_free`.
#[derive(Debug)]
pub struct libroute_selector {
    _private: [u8; 0],
}

impl Handle for libroute_selector {
    type Target = Selector;
    const NAME: &'static str = "selector";
}

/// Creates a selector for up to `capacity` rows (1 to `LIBROUTE_MAX_CAPACITY`); its unseeded
/// random stream starts from `entropy` (give each thread its own). On success `*out` owns it:
/// free it with `libroute_selector_free`. Selecting allocates nothing afterwards.
///
/// # Safety
///
/// `out` must be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_selector_new(
    capacity: usize,
    entropy: u64,
    out: *mut *mut libroute_selector,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        let selector = Box::new(Selector::new(capacity, entropy)?);
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(libroute_selector::into_handle(selector)) };
        Ok(())
    })
}

/// Frees a selector. `NULL` does nothing.
///
/// # Safety
///
/// `selector` must be NULL or a live handle from `libroute_selector_new`, not in use elsewhere.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_selector_free(selector: *mut libroute_selector) {
    // SAFETY: by contract the pointer is NULL or a live selector handle, freed once.
    unsafe { libroute_selector::free(selector) };
}

/// Restarts the seeded stream: the next seeded selection draws as the first did.
///
/// # Safety
///
/// `selector` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_selector_reset_seeded(
    selector: *mut libroute_selector,
) -> libroute_status {
    boundary(|| {
        // SAFETY: NULL or a live, unshared selector by contract.
        unsafe { libroute_selector::get_mut(selector) }?.reset_seeded();
        Ok(())
    })
}

/// The handles and arrays every selecting function reads, checked for NULL.
///
/// # Errors
///
/// `NULL_ARGUMENT` naming the argument.
///
/// # Safety
///
/// As `libroute_select` for `policy`, `selector`, `request` and `rows`; the returned references
/// must not outlive the call that received the pointers.
pub(crate) unsafe fn selection_args<'a>(
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
) -> Result<(&'a Policy, &'a mut Selector, RequestArgs<'a>), Failure> {
    non_null!(request, "request");
    // SAFETY: NULL or live by contract.
    let policy = unsafe { libroute_policy::get(policy) }?;
    // SAFETY: NULL or a live selector not used concurrently, by contract.
    let selector = unsafe { libroute_selector::get_mut(selector) }?;
    // SAFETY: non-NULL (checked) and valid by contract, its arrays valid for their lengths.
    let request = unsafe { RequestArgs::from_c(&*request) };
    Ok((policy, selector, request))
}

/// Selects one row for `request` among `rows[0..rows_len]` (read in place). On success writes
/// `*out`, and, when `contributions` is not NULL, each scorer's contribution to the chosen row's
/// cost (the default cost first, then custom scorers) into `contributions[0..out->scorers]`.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` (role, booleans); `BUFFER_TOO_SMALL` when
/// `contributions_len` is below the policy's scorer count (checked before selecting);
/// `CAPACITY_EXCEEDED` for more rows than the selector's capacity; and the selection errors
/// (300-399), each with a detail naming the row, scorer or worker.
///
/// # Safety
///
/// `policy` and `selector` must be live handles, the selector not used concurrently; `request`
/// must point to a valid `libroute_request` whose arrays are valid for their lengths; `rows` must
/// point to `rows_len` rows (NULL allowed for 0); `out` must be valid for a write;
/// `contributions`, when not NULL, must be valid for `contributions_len` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_select(
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
    rows: *const libroute_row,
    rows_len: usize,
    out: *mut libroute_selection,
    contributions: *mut f64,
    contributions_len: usize,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        // SAFETY: forwarded under this function's contract.
        let (policy, selector, request) = unsafe { selection_args(policy, selector, request) }?;
        // SAFETY: `rows` holds `rows_len` rows by contract, read in place.
        let rows = unsafe { slice_arg(rows, rows_len, "rows") }?;
        let contributions = if contributions.is_null() {
            None
        } else {
            // SAFETY: valid for `contributions_len` writes by contract, and not aliased by
            // anything this call reads.
            Some(unsafe { std::slice::from_raw_parts_mut(contributions, contributions_len) })
        };
        let selection = selector.select(policy, &request, rows, contributions)?;
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(selection) };
        Ok(())
    })
}

/// What became of one row in a selection (`libroute_explanation.disposition`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum libroute_disposition {
    /// A candidate: every scorer scored it.
    Candidate = 0,
    /// The request was pinned to another worker.
    NotPinned = 1,
    /// The row is invalid.
    Invalid = 2,
    /// The worker lacks a taint the request requires.
    Ineligible = 3,
    /// The host marked the worker overloaded.
    Overloaded = 4,
    /// Filter `filter` removed it.
    Filtered = 5,
    /// Filter `filter` removed it as overloaded.
    FilterOverloaded = 6,
    /// Filter `filter` failed on it.
    FilterFailed = 7,
    /// Not examined: the selection stopped before this row (an invalid request, say).
    NotExamined = 8,
}

/// One row's part in a selection.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct libroute_explanation {
    /// The row's index in the caller's array.
    pub row: usize,
    /// The row's worker.
    pub worker: libroute_worker,
    /// A `libroute_disposition` value.
    pub disposition: u32,
    /// With `FILTERED`, `FILTER_OVERLOADED` or `FILTER_FAILED`: the filter's index (custom
    /// filters in the order given; a catalog policy's filters in its configuration's order).
    pub filter: u32,
    /// 1 for the chosen row, else 0.
    pub chosen: u8,
    /// How many of `contributions` are set (0 for a row that was not scored).
    pub scorers: usize,
    /// The summed cost; NaN when the row was not scored.
    pub total: f64,
    /// Each scorer's contribution to `total`, in policy order.
    pub contributions: [f64; LIBROUTE_MAX_SCORERS],
}

impl From<&Explanation> for libroute_explanation {
    fn from(e: &Explanation) -> Self {
        let (disposition, filter) = match e.disposition {
            Disposition::Candidate => (libroute_disposition::Candidate, 0),
            Disposition::NotPinned => (libroute_disposition::NotPinned, 0),
            Disposition::Invalid(_) => (libroute_disposition::Invalid, 0),
            Disposition::Ineligible => (libroute_disposition::Ineligible, 0),
            Disposition::Overloaded => (libroute_disposition::Overloaded, 0),
            Disposition::Filtered { filter } => (libroute_disposition::Filtered, filter),
            Disposition::FilterOverloaded { filter } => {
                (libroute_disposition::FilterOverloaded, filter)
            }
            Disposition::FilterFailed { filter } => (libroute_disposition::FilterFailed, filter),
            _ => (libroute_disposition::NotExamined, 0),
        };
        let parts = e.contributions();
        let mut contributions = [f64::NAN; LIBROUTE_MAX_SCORERS];
        contributions[..parts.len()].copy_from_slice(parts);
        libroute_explanation {
            row: e.row,
            worker: e.worker.into(),
            disposition: disposition as u32,
            filter: u32::try_from(filter).unwrap_or(u32::MAX),
            chosen: u8::from(e.chosen),
            scorers: parts.len(),
            total: e.total,
            contributions,
        }
    }
}

/// `libroute_select`, and an explanation of every row into `explanations[0..rows_len]`: whether
/// it was a candidate or which check removed it (a required taint, the host's overload flag, the
/// first filter that refused it) and, for candidates of a successful selection, each scorer's
/// contribution and the total. Rows are explained also when the selection fails (the status says
/// why), so a host can log why every worker was passed over. The first call on a selector
/// allocates its explanation buffer (to the selector's capacity); later calls allocate nothing.
///
/// Errors: as `libroute_select`, plus `BUFFER_TOO_SMALL` when `explanations_len < rows_len`
/// (checked before selecting; nothing is written).
///
/// # Safety
///
/// As `libroute_select`; `explanations` must be valid for `explanations_len` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_select_explained(
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
    rows: *const libroute_row,
    rows_len: usize,
    out: *mut libroute_selection,
    explanations: *mut libroute_explanation,
    explanations_len: usize,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        if explanations.is_null() && rows_len > 0 {
            return Err(Failure::null("explanations"));
        }
        // SAFETY: forwarded under this function's contract.
        let (policy, selector, request) = unsafe { selection_args(policy, selector, request) }?;
        // SAFETY: `rows` holds `rows_len` rows by contract, read in place.
        let rows = unsafe { slice_arg(rows, rows_len, "rows") }?;
        let explanations: &mut [libroute_explanation] = if explanations.is_null() {
            &mut []
        } else {
            // SAFETY: valid for `explanations_len` writes by contract; `libroute_explanation`
            // is plain data, so the slice is written before it is read.
            unsafe { std::slice::from_raw_parts_mut(explanations, explanations_len) }
        };
        let selection = selector.select_explained(policy, &request, rows, explanations)?;
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(selection) };
        Ok(())
    })
}

/// Writes every candidate of the selector's last successful selection: `rows[k]` is the index of
/// a row in the caller's array and `costs[k]` its total cost, for `k < *out_n`, in the order the
/// picker saw them. After a failed selection there are none.
///
/// Errors: `NULL_ARGUMENT`, `BUFFER_TOO_SMALL` (when `len` is below the number of candidates).
///
/// # Safety
///
/// `selector` must be a live handle; `rows` and `costs` valid for `len` writes (NULL allowed when
/// `len` is 0); `out_n` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_selector_last_costs(
    selector: *const libroute_selector,
    rows: *mut usize,
    costs: *mut f64,
    len: usize,
    out_n: *mut usize,
) -> libroute_status {
    boundary(|| {
        non_null!(out_n, "out_n");
        // SAFETY: NULL or live by contract.
        let selector = unsafe { libroute_selector::get(selector) }?;
        let n = selector.candidates();
        if n > len {
            return Err(Failure::new(
                libroute_status::BufferTooSmall,
                format_args!("{n} candidates, buffers of {len}"),
            ));
        }
        if n > 0 && (rows.is_null() || costs.is_null()) {
            return Err(Failure::fixed(
                libroute_status::NullArgument,
                "rows or costs is NULL",
            ));
        }
        let mut k = 0;
        selector.for_each_cost(|row, cost| {
            // SAFETY: `k < n <= len`, and both buffers are valid for `len` writes by contract.
            unsafe {
                rows.add(k).write(row);
                costs.add(k).write(cost);
            }
            k += 1;
        });
        // SAFETY: non-NULL and valid by contract.
        unsafe { out_n.write(n) };
        Ok(())
    })
}
