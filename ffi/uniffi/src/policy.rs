//! [`Policy`]: an immutable policy, owned or borrowed from a [`crate::PolicySet`].

use std::ptr::{NonNull, null_mut};
use std::sync::{Arc, PoisonError, RwLock};

use route::libroute_policy;

use crate::error::{RouteError, check, closed};
use crate::policy_set::SetHandle;
use crate::vocab::{Inputs, Role};

/// A policy handle, freed when dropped.
pub(crate) enum PolicyHandle {
    /// From `libroute_policy_new`, freed with the handle.
    Owned(NonNull<libroute_policy>),
    /// Lent by a policy set, which `_owner` keeps alive.
    Lent {
        policy: NonNull<libroute_policy>,
        _owner: Arc<SetHandle>,
    },
}

impl PolicyHandle {
    fn ptr(&self) -> *const libroute_policy {
        match self {
            PolicyHandle::Owned(p) | PolicyHandle::Lent { policy: p, .. } => p.as_ptr(),
        }
    }
}

// SAFETY: a policy without callbacks (the only kind this facade builds) is immutable after
// construction, and the C ABI documents concurrent use of one policy from any number of threads.
unsafe impl Send for PolicyHandle {}
// SAFETY: as for `Send`: the facade only reads the policy through the handle.
unsafe impl Sync for PolicyHandle {}

impl Drop for PolicyHandle {
    fn drop(&mut self) {
        if let PolicyHandle::Owned(p) = self {
            // SAFETY: the pointer came from `libroute_policy_new` and is freed once, here.
            unsafe { route::libroute_policy_free(p.as_ptr()) };
        }
    }
}

/// An immutable routing policy, shared freely between threads.
#[derive(uniffi::Object)]
pub struct Policy {
    pub(crate) handle: RwLock<Option<PolicyHandle>>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Policy")
    }
}

impl Policy {
    /// Runs `f` on the live handle; selections share the read lock, `release` takes the write.
    pub(crate) fn with<R>(
        &self,
        f: impl FnOnce(*const libroute_policy) -> Result<R, RouteError>,
    ) -> Result<R, RouteError> {
        let handle = self.handle.read().unwrap_or_else(PoisonError::into_inner);
        match handle.as_ref() {
            Some(h) => f(h.ptr()),
            None => Err(closed("policy")),
        }
    }
}

#[uniffi::export]
impl Policy {
    /// A policy from JSON: the default policy's knobs (`"{}"` for all defaults), or a catalog
    /// policy by type (`{"type": "least_loaded", ...}`).
    ///
    /// # Errors
    ///
    /// `InvalidJson`, `UnknownKey` or `InvalidKnob`, naming the key or knob.
    #[uniffi::constructor]
    pub fn new(json: String) -> Result<Arc<Self>, RouteError> {
        let mut raw = null_mut();
        // SAFETY: `json` is valid for `json.len()` bytes; `raw` is a valid out-pointer.
        check(unsafe {
            route::libroute_policy_new(json.as_ptr().cast(), json.len(), &raw mut raw)
        })?;
        let raw = NonNull::new(raw).ok_or_else(|| RouteError::Panic {
            detail: "libroute_policy_new returned no policy".to_owned(),
        })?;
        Ok(Arc::new(Policy {
            handle: RwLock::new(Some(PolicyHandle::Owned(raw))),
        }))
    }

    /// The input groups the policy reads for requests of `role`: a host may skip computing
    /// what is not read.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`.
    pub fn inputs(&self, role: Role, conditional_disagg: bool) -> Result<Inputs, RouteError> {
        let mut bits = 0u8;
        self.with(|raw| {
            // SAFETY: `raw` is live under the read lock; `bits` is a valid out-pointer.
            check(unsafe {
                route::libroute_policy_inputs(
                    raw,
                    role.code(),
                    u8::from(conditional_disagg),
                    &raw mut bits,
                )
            })
        })?;
        Ok(Inputs {
            cache: bits & route::LIBROUTE_INPUT_CACHE != 0,
            load: bits & route::LIBROUTE_INPUT_LOAD != 0,
            preferred_taint: bits & route::LIBROUTE_INPUT_PREFERRED_TAINT != 0,
        })
    }

    /// Frees the native policy now (waiting for selections using it to finish); later calls
    /// fail with `Closed`. Idempotent. Without it, the policy is freed with its last reference.
    pub fn release(&self) {
        self.handle
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}
