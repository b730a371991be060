//! `libroute_policy_set`: named catalog policies per role, from one JSON document.

use std::ffi::c_char;

use libroute_core::Role;
use libroute_core::catalog_config::PolicySetConfig;

use crate::handle::{Handle, slice};
use crate::policy::{AbiPolicy, catalog_status, libroute_policy, parse_json};
use crate::status::{boundary, fail, libroute_status};
use crate::text::write_text;
use crate::vocab::role;

/// Named policy instances assigned to roles, from one JSON configuration. Create with
/// `libroute_policy_set_new`; free with `libroute_policy_set_free`.
#[derive(Debug)]
pub struct libroute_policy_set {
    _private: [u8; 0],
}

impl Handle for libroute_policy_set {
    type Target = PolicySetBox;
    const NAME: &'static str = "set";
}

/// The policies of a set, one per role (in `libroute_role` order), and their instance names.
pub(crate) struct PolicySetBox {
    policies: [Box<AbiPolicy>; 4],
    names: [std::ffi::CString; 4],
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
            return fail(libroute_status::NullArgument, "json is NULL");
        };
        let config: PolicySetConfig = match parse_json(json) {
            Ok(config) => config,
            Err(status) => return status,
        };
        let set = match config.build() {
            Ok(set) => set,
            Err(e) => {
                return fail(catalog_status(&e), format_args!("policy set: {e}"));
            }
        };
        let roles = [Role::Prefill, Role::Decode, Role::Aggregated, Role::Encode];
        let policies = roles.map(|r| Box::new(AbiPolicy::Catalog(Box::new(set.policy(r).clone()))));
        let names = roles.map(|r| {
            // Instance names come from JSON strings, which may hold a NUL; cut there.
            let name = set.instance_name(r);
            let name = name.split('\0').next().unwrap_or_default();
            std::ffi::CString::new(name).unwrap_or_default()
        });
        let boxed = Box::new(PolicySetBox { policies, names });
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(libroute_policy_set::into_handle(boxed)) };
        libroute_status::Ok
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
        let set = match unsafe { libroute_policy_set::get(set) } {
            Ok(set) => set,
            Err(status) => return status,
        };
        // The set holds its policies in `libroute_role` order, so a valid role is the slot.
        if let Err(status) = self::role(role) {
            return status;
        }
        let slot = role as usize;
        if !name.is_null() {
            let text = set.names[slot].to_str().unwrap_or_default();
            let mut written = 0;
            // SAFETY: `name` is valid for `name_len` writes by contract.
            let status = unsafe { write_text(text, name, name_len, &raw mut written) };
            if status != libroute_status::Ok {
                return fail(
                    status,
                    format_args!("the instance name needs {} bytes", text.len() + 1),
                );
            }
        }
        let policy: &AbiPolicy = &set.policies[slot];
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(libroute_policy::borrowed(policy)) };
        libroute_status::Ok
    })
}
