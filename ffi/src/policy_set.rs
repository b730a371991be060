//! `libroute_policy_set`: named catalog policies per role, from one JSON document.

use std::ffi::c_char;

use crate::handle::{Handle, slice};
use crate::host::{Policy, PolicySet};
use crate::policy::libroute_policy;
use crate::status::{Failure, boundary, libroute_status};
use crate::text::write_text;
use crate::vocab::role;

/// Named policy instances assigned to roles, from one JSON configuration. Create with
/// `libroute_policy_set_new`; free with `libroute_policy_set_free`.
#[derive(Debug)]
pub struct libroute_policy_set {
    _private: [u8; 0],
}

impl Handle for libroute_policy_set {
    type Target = PolicySet;
    const NAME: &'static str = "set";
}

/// Creates a policy set from JSON: `{"instances": [{"name": ..., "policy": {"type": ...}}],
/// "roles": {"prefill": name, "decode": name, "aggregated": name, "encode": name}}`. Omitted roles
/// use the default policy. On success `*out` owns the set: free it with `libroute_policy_set_free`.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_JSON`; `UNKNOWN_KEY` (an unknown key or policy type, named);
/// `INVALID_KNOB` (an invalid parameter, a duplicate instance name, a role naming no instance;
/// the detail names the instance and the parameter).
///
/// # Safety
///
/// `json` must point to `json_len` readable bytes; `out` must be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_set_new(
    json: *const c_char,
    json_len: usize,
    out: *mut *mut libroute_policy_set,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        // SAFETY: `json` holds `json_len` bytes by contract.
        let Some(json) = (unsafe { slice(json.cast::<u8>(), json_len) }) else {
            return Err(Failure::null("json"));
        };
        let set = Box::new(PolicySet::from_json(json)?);
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(libroute_policy_set::into_handle(set)) };
        Ok(())
    })
}

/// Frees a policy set and every policy it lent out. `NULL` does nothing.
///
/// # Safety
///
/// `set` must be NULL or a live handle from `libroute_policy_set_new`, not in use elsewhere, and
/// no policy obtained from it may be used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_set_free(set: *mut libroute_policy_set) {
    // SAFETY: by contract the pointer is NULL or a live policy-set handle, freed once.
    unsafe { libroute_policy_set::free(set) };
}

/// Writes the policy serving `role` to `*out`: a policy the set owns, valid until the set is
/// freed, usable with every function that takes a `const libroute_policy *` (never pass it to
/// `libroute_policy_free`). Writes the instance's name (`"default"` for an unassigned role),
/// NUL-terminated, to `name[0..name_len]` when `name` is not NULL.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_ARGUMENT` (role), `BUFFER_TOO_SMALL` (name; nothing written).
///
/// # Safety
///
/// `set` must be a live handle; `out` valid for a pointer write; `name`, when not NULL, valid
/// for `name_len` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_set_get(
    set: *const libroute_policy_set,
    role: u32,
    out: *mut *const libroute_policy,
    name: *mut c_char,
    name_len: usize,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        // SAFETY: NULL or live by contract.
        let set = unsafe { libroute_policy_set::get(set) }?;
        let role = self::role(role)?;
        if !name.is_null() {
            let text = set.instance_name(role);
            let mut written = 0;
            // SAFETY: `name` is valid for `name_len` writes by contract.
            let status = unsafe { write_text(text, name, name_len, &raw mut written) };
            if status != libroute_status::Ok {
                return Err(Failure::new(
                    status,
                    format_args!("the instance name needs {} bytes", text.len() + 1),
                ));
            }
        }
        let policy: &Policy = set.policy(role);
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(libroute_policy::borrowed(policy)) };
        Ok(())
    })
}
