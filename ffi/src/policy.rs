//! `libroute_policy`: an immutable policy, the default one configured by JSON, one of the
//! catalog's, or the default cost and picker with C components. Its logic is `host::Policy`.

use std::ffi::c_char;

use crate::components::{libroute_filter, libroute_scorer};
use crate::handle::{Handle, slice_arg};
use crate::host::Policy;
use crate::status::{boundary, libroute_status};
use crate::vocab::{flag, role};

/// An immutable policy: the default cost and picker configured by JSON, plus any custom filters
/// and scorers. Create with `libroute_policy_new` or `libroute_policy_new_default`; free with
/// `libroute_policy_free`.
#[derive(Debug)]
pub struct libroute_policy {
    _private: [u8; 0],
}

impl Handle for libroute_policy {
    type Target = Policy;
    const NAME: &'static str = "policy";
}

/// Creates the default policy from JSON configuration: an object of the default policy's knobs
/// (`overlap_score_credit`, `overlap_score_credit_decay`, `prefill_load_scale`,
/// `decode_active_request_weight`, `host_cache_hit_weight`, `disk_cache_hit_weight`,
/// `shared_cache_multiplier`, `temperature`, `seed`, and the legacy `overlap_score_weight`), as
/// UTF-8 bytes `json[0..json_len]` (no terminating NUL needed). An empty text means all defaults.
///
/// On success `*out` owns a new policy: free it with `libroute_policy_free`.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_JSON`, `UNKNOWN_KEY` (the detail names the key),
/// `INVALID_KNOB` (the detail names the knob and its range).
///
/// # Safety
///
/// `json` must point to `json_len` readable bytes (it may be NULL when `json_len` is 0); `out` must
/// be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_new(
    json: *const c_char,
    json_len: usize,
    out: *mut *mut libroute_policy,
) -> libroute_status {
    // SAFETY: forwarded under this function's own contract, with no components.
    unsafe {
        libroute_policy_new_with_components(
            json,
            json_len,
            std::ptr::null(),
            0,
            std::ptr::null(),
            0,
            out,
        )
    }
}

/// Creates the default policy with every knob at its default. On success `*out` owns a new
/// policy: free it with `libroute_policy_free`.
///
/// # Safety
///
/// `out` must be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_new_default(
    out: *mut *mut libroute_policy,
) -> libroute_status {
    // SAFETY: an empty configuration and no components; `out` under this function's contract.
    unsafe { libroute_policy_new(std::ptr::null(), 0, out) }
}

/// Creates a policy: the default cost and picker configured by `json` (as in
/// `libroute_policy_new`), the `filters` run in order before scoring, and the `scorers` whose
/// costs are added to the default cost (at most 7). The arrays are copied; the callbacks and
/// their `user_data` must stay valid until the policy is freed.
///
/// On success `*out` owns a new policy: free it with `libroute_policy_free`.
///
/// # Safety
///
/// `json` as in `libroute_policy_new`; `filters` and `scorers` must point to `filters_len` and
/// `scorers_len` elements (NULL allowed for length 0); `out` must be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_new_with_components(
    json: *const c_char,
    json_len: usize,
    filters: *const libroute_filter,
    filters_len: usize,
    scorers: *const libroute_scorer,
    scorers_len: usize,
    out: *mut *mut libroute_policy,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        // SAFETY: the caller's contract: each array holds its length (NULL allowed for 0).
        let (json, filters, scorers) = unsafe {
            (
                slice_arg(json.cast::<u8>(), json_len, "json")?,
                slice_arg(filters, filters_len, "filters")?,
                slice_arg(scorers, scorers_len, "scorers")?,
            )
        };
        let policy = Box::new(Policy::with_components(json, filters, scorers)?);
        // SAFETY: `out` is non-NULL and, by contract, valid for a write.
        unsafe { out.write(libroute_policy::into_handle(policy)) };
        Ok(())
    })
}

/// Frees a policy. `NULL` does nothing.
///
/// # Safety
///
/// `policy` must be NULL or a pointer returned by a `libroute_policy_new*` function that has not
/// been freed, and no other thread may be using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_free(policy: *mut libroute_policy) {
    // SAFETY: by contract the pointer is NULL or a live policy handle, freed once.
    unsafe { libroute_policy::free(policy) };
}

/// Writes the union of the input groups the policy's components read for a request of `role`
/// (and conditional disaggregation) as `LIBROUTE_INPUT_*` bits to `*out`. Without
/// `LIBROUTE_INPUT_CACHE` the host need not compute cache overlaps for such requests.
///
/// # Safety
///
/// `policy` must be a live policy; `out` valid for a byte write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_inputs(
    policy: *const libroute_policy,
    role: u32,
    conditional_disagg: u8,
    out: *mut u8,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        // SAFETY: by contract `policy` is NULL or live.
        let policy = unsafe { libroute_policy::get(policy) }?;
        let inputs = policy.inputs(
            self::role(role)?,
            flag(conditional_disagg, "conditional_disagg")?,
        );
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(inputs.bits()) };
        Ok(())
    })
}
