//! [`PolicySet`]: named catalog policies per role, from one JSON document.

use std::ptr::{NonNull, null, null_mut};
use std::sync::{Arc, RwLock};

use route::libroute_policy;

use crate::error::{RouteError, check};
use crate::policy::{Policy, PolicyHandle};
use crate::vocab::Role;

/// A policy set's C handle, freed when the last policy lent from it and the set are gone.
pub(crate) struct SetHandle(NonNull<route::libroute_policy_set>);

// SAFETY: a set is immutable after construction; its policies are used as any policy is.
unsafe impl Send for SetHandle {}
// SAFETY: as for `Send`.
unsafe impl Sync for SetHandle {}

impl Drop for SetHandle {
    fn drop(&mut self) {
        // SAFETY: from `libroute_policy_set_new`, freed once, after every lent policy is gone
        // (each holds an `Arc` of this handle).
        unsafe { route::libroute_policy_set_free(self.0.as_ptr()) };
    }
}

/// Named policy instances assigned to roles, from one JSON configuration (see the catalog's
/// documentation): `{"instances": [{"name": ..., "policy": {"type": ...}}], "roles": {...}}`.
#[derive(uniffi::Object)]
pub struct PolicySet {
    handle: Arc<SetHandle>,
}

impl std::fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PolicySet")
    }
}

impl PolicySet {
    /// The lent policy and instance name for `role`.
    /// The lent policy for `role`, and its instance name written into `name` (when not empty).
    fn get(&self, role: Role, name: &mut [u8]) -> Result<NonNull<libroute_policy>, RouteError> {
        let mut policy = null();
        let name_ptr = if name.is_empty() {
            null_mut()
        } else {
            name.as_mut_ptr().cast()
        };
        // SAFETY: the set is live; `policy` is valid for a write and `name_ptr` is NULL or valid
        // for `name.len()` writes.
        check(unsafe {
            route::libroute_policy_set_get(
                self.handle.0.as_ptr(),
                role.code(),
                &raw mut policy,
                name_ptr,
                name.len(),
            )
        })?;
        NonNull::new(policy.cast_mut()).ok_or_else(|| RouteError::Panic {
            detail: "libroute_policy_set_get returned no policy".to_owned(),
        })
    }
}

#[uniffi::export]
impl PolicySet {
    /// Builds every instance and assigns them to roles; omitted roles use the default policy.
    ///
    /// # Errors
    ///
    /// `InvalidJson`, `UnknownKey` (naming the key or type), `InvalidKnob` (naming the instance
    /// and the parameter, a duplicate name, or a role naming no instance).
    #[uniffi::constructor]
    pub fn new(json: String) -> Result<Arc<Self>, RouteError> {
        let mut raw = null_mut();
        // SAFETY: `json` is valid for its length; `raw` is a valid out-pointer.
        check(unsafe {
            route::libroute_policy_set_new(json.as_ptr().cast(), json.len(), &raw mut raw)
        })?;
        let raw = NonNull::new(raw).ok_or_else(|| RouteError::Panic {
            detail: "libroute_policy_set_new returned no set".to_owned(),
        })?;
        Ok(Arc::new(PolicySet {
            handle: Arc::new(SetHandle(raw)),
        }))
    }

    /// The policy serving `role` (it keeps the set's memory alive).
    ///
    /// # Errors
    ///
    /// None in practice.
    pub fn policy(&self, role: Role) -> Result<Arc<Policy>, RouteError> {
        let raw = self.get(role, &mut [])?;
        Ok(Arc::new(Policy {
            handle: RwLock::new(Some(PolicyHandle::Lent {
                policy: raw,
                _owner: Arc::clone(&self.handle),
            })),
        }))
    }

    /// The name of the instance serving `role` (`"default"` when none was assigned).
    ///
    /// # Errors
    ///
    /// None in practice.
    pub fn instance_name(&self, role: Role) -> Result<String, RouteError> {
        // Names are as long as the configuration made them: grow the buffer until one fits.
        let mut name = vec![0u8; 256];
        loop {
            match self.get(role, &mut name) {
                Ok(_) => {
                    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                    return Ok(String::from_utf8_lossy(&name[..len]).into_owned());
                }
                Err(RouteError::BufferTooSmall { .. }) => name.resize(name.len() * 2, 0),
                Err(e) => return Err(e),
            }
        }
    }
}
