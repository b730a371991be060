//! `libroute_selector`: per-thread scratch and random stream; `libroute_select`, its explained
//! form and the last selection's costs.

use libroute_core::{Disposition, Explanation, Row, SelectError, Selection, Selector};

use crate::components::UNDEFINED_VERDICT;
use crate::handle::{Handle, slice};
use crate::policy::{AbiPolicy, libroute_policy};
use crate::status::{boundary, fail, libroute_status};
use crate::vocab::{
    LIBROUTE_MAX_CAPACITY, LIBROUTE_MAX_SCORERS, libroute_request, libroute_row,
    libroute_selection, libroute_worker, to_c, with_core_request,
};

/// Per-thread selection scratch: buffers of a fixed capacity and the random stream. Create with
/// `libroute_selector_new`; free with `libroute_selector_free`.
#[derive(Debug)]
pub struct libroute_selector {
    _private: [u8; 0],
}

impl Handle for libroute_selector {
    type Target = SelectorBox;
    const NAME: &'static str = "selector";
}

/// The selector's capacity tiers: a selector is a core `Selector<N>` for the smallest tier that
/// holds the requested capacity.
pub(crate) enum AnySelector {
    S16(Box<Selector<16>>),
    S64(Box<Selector<64>>),
    S256(Box<Selector<256>>),
    S1024(Box<Selector<1024>>),
    S4096(Box<Selector<4096>>),
}

macro_rules! with_selector {
    ($sel:expr, $s:ident => $body:expr) => {
        match $sel {
            AnySelector::S16($s) => $body,
            AnySelector::S64($s) => $body,
            AnySelector::S256($s) => $body,
            AnySelector::S1024($s) => $body,
            AnySelector::S4096($s) => $body,
        }
    };
}

/// The selector behind a handle, with the capacity the caller asked for.
pub(crate) struct SelectorBox {
    pub(crate) inner: AnySelector,
    pub(crate) capacity: usize,
    /// Explanations of `libroute_select_explained`, allocated on its first use (to the
    /// capacity) and reused after.
    pub(crate) explanations: Vec<Explanation>,
}

impl SelectorBox {
    /// Checks that `rows` rows fit the capacity the caller asked for.
    pub(crate) fn check_rows(&self, rows: usize) -> Result<(), libroute_status> {
        if rows > self.capacity {
            return Err(fail(
                libroute_status::CapacityExceeded,
                format_args!(
                    "{rows} rows exceed the selector's capacity of {}",
                    self.capacity
                ),
            ));
        }
        Ok(())
    }
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
        let inner = match capacity {
            0 => return fail(libroute_status::InvalidArgument, "capacity is 0"),
            1..=16 => AnySelector::S16(Box::new(Selector::with_entropy(entropy))),
            17..=64 => AnySelector::S64(Box::new(Selector::with_entropy(entropy))),
            65..=256 => AnySelector::S256(Box::new(Selector::with_entropy(entropy))),
            257..=1024 => AnySelector::S1024(Box::new(Selector::with_entropy(entropy))),
            1025..=LIBROUTE_MAX_CAPACITY => {
                AnySelector::S4096(Box::new(Selector::with_entropy(entropy)))
            }
            _ => {
                return fail(
                    libroute_status::CapacityExceeded,
                    format_args!(
                        "capacity {capacity} exceeds LIBROUTE_MAX_CAPACITY ({LIBROUTE_MAX_CAPACITY})"
                    ),
                );
            }
        };
        let selector = Box::new(SelectorBox {
            inner,
            capacity,
            explanations: Vec::new(),
        });
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(libroute_selector::into_handle(selector)) };
        libroute_status::Ok
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
        // SAFETY: NULL or a live, unshared `SelectorBox` by contract.
        let selector = match unsafe { libroute_selector::get_mut(selector) } {
            Ok(selector) => selector,
            Err(status) => return status,
        };
        with_selector!(&mut selector.inner, s => s.reset_seeded());
        libroute_status::Ok
    })
}

pub(crate) fn select_error(e: &SelectError) -> libroute_status {
    let status = libroute_status::from(e);
    match e {
        SelectError::FilterFailed { filter, error } if error.code == UNDEFINED_VERDICT => fail(
            status,
            format_args!("filter {filter} wrote a verdict that is not a libroute_verdict"),
        ),
        _ => fail(status, e),
    }
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
unsafe fn selection_args<'a>(
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
    rows: *const libroute_row,
    rows_len: usize,
) -> Result<
    (
        &'a AbiPolicy,
        &'a mut SelectorBox,
        &'a libroute_request,
        &'a [Row],
    ),
    libroute_status,
> {
    if request.is_null() {
        return Err(fail(libroute_status::NullArgument, "request is NULL"));
    }
    // SAFETY: NULL or live by contract.
    let policy = unsafe { libroute_policy::get(policy) }?;
    // SAFETY: NULL or a live `SelectorBox` not used concurrently, by contract.
    let selector = unsafe { libroute_selector::get_mut(selector) }?;
    // SAFETY: non-NULL (checked) and valid by contract.
    let request = unsafe { &*request };
    // SAFETY: `rows` holds `rows_len` rows by contract; `libroute_row` has `Row`'s layout and every
    // bit pattern is a valid `Row`, so the cast reads the host's memory in place.
    let Some(rows) = (unsafe { slice(rows.cast::<Row>(), rows_len) }) else {
        return Err(fail(
            libroute_status::NullArgument,
            "rows is NULL with a non-zero length",
        ));
    };
    Ok((policy, selector, request, rows))
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
        let (policy, selector, request, rows) =
            match unsafe { selection_args(policy, selector, request, rows, rows_len) } {
                Ok(args) => args,
                Err(status) => return status,
            };
        let scorers = policy.scorer_count();
        if !contributions.is_null() && contributions_len < scorers {
            return fail(
                libroute_status::BufferTooSmall,
                format_args!(
                    "contributions holds {contributions_len} values, the policy has {scorers} scorers"
                ),
            );
        }
        if let Err(status) = selector.check_rows(rows.len()) {
            return status;
        }
        // The selection is written out where it is made, not returned through the closures
        // (it is about 150 bytes; the copies were a measurable part of the call).
        let write = |selection: &Result<Selection, SelectError>| match selection {
            Ok(selection) => {
                // SAFETY: `out` is non-NULL and valid for a write by contract.
                unsafe { out.write(to_c(selection)) };
                if !contributions.is_null() {
                    let parts = selection.contributions();
                    // SAFETY: `contributions` is valid for `contributions_len >= parts.len()`
                    // writes (checked above), and does not overlap our local `parts`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(parts.as_ptr(), contributions, parts.len());
                    };
                }
                libroute_status::Ok
            }
            Err(e) => select_error(e),
        };
        // SAFETY: the request's arrays are valid for their lengths by contract.
        let converted = unsafe {
            with_core_request(
                request,
                |core_request| with_selector!(&mut selector.inner, s => write(&policy.select(s, core_request, rows))),
            )
        };
        converted.unwrap_or_else(|status| status)
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
            worker: libroute_worker {
                worker_id: e.worker.worker_id,
                dp_rank: e.worker.dp_rank,
            },
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
            return fail(libroute_status::NullArgument, "explanations is NULL");
        }
        if explanations_len < rows_len {
            return fail(
                libroute_status::BufferTooSmall,
                format_args!("explanations holds {explanations_len} entries for {rows_len} rows"),
            );
        }
        // SAFETY: forwarded under this function's contract.
        let (policy, selector, request, rows) =
            match unsafe { selection_args(policy, selector, request, rows, rows_len) } {
                Ok(args) => args,
                Err(status) => return status,
            };
        if let Err(status) = selector.check_rows(rows.len()) {
            return status;
        }
        if selector.explanations.len() < selector.capacity {
            selector
                .explanations
                .resize(selector.capacity, Explanation::EMPTY);
        }
        let SelectorBox {
            inner,
            explanations: scratch,
            ..
        } = selector;
        let scratch = &mut scratch[..rows.len()];
        // SAFETY: the request's arrays are valid for their lengths by contract.
        let converted = unsafe {
            with_core_request(
                request,
                |core_request| with_selector!(inner, s => policy.select_explained(s, core_request, rows, scratch)),
            )
        };
        let result = match converted {
            Ok(result) => result,
            Err(status) => return status,
        };
        // Rows are explained on success and on a selection failure alike.
        for (k, e) in scratch.iter().enumerate() {
            // SAFETY: `k < rows_len <= explanations_len` (checked), valid for writes by contract.
            unsafe { explanations.add(k).write(libroute_explanation::from(e)) };
        }
        match result {
            Ok(selection) => {
                // SAFETY: `out` is non-NULL and valid for a write by contract.
                unsafe { out.write(to_c(&selection)) };
                libroute_status::Ok
            }
            Err(e) => select_error(&e),
        }
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
        let selector = match unsafe { libroute_selector::get(selector) } {
            Ok(selector) => selector,
            Err(status) => return status,
        };
        let n = with_selector!(&selector.inner, s => s.last_costs().len());
        if n > len {
            return fail(
                libroute_status::BufferTooSmall,
                format_args!("{n} candidates, buffers of {len}"),
            );
        }
        if n > 0 && (rows.is_null() || costs.is_null()) {
            return fail(libroute_status::NullArgument, "rows or costs is NULL");
        }
        with_selector!(&selector.inner, s => {
            for (k, (row, cost)) in s.last_costs().enumerate() {
                // SAFETY: `k < n <= len`, and both buffers are valid for `len` writes by contract.
                unsafe {
                    rows.add(k).write(row);
                    costs.add(k).write(cost);
                }
            }
        });
        // SAFETY: non-NULL and valid by contract.
        unsafe { out_n.write(n) };
        libroute_status::Ok
    })
}
