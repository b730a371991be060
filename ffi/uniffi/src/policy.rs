//! [`Policy`]: an immutable policy, owned or shared with a [`crate::PolicySet`].

use std::sync::{Arc, PoisonError, RwLock};

use route::host;

use crate::error::{RouteError, closed};
use crate::vocab::{Inputs, Role};

/// An immutable routing policy, shared freely between threads.
#[derive(uniffi::Object)]
pub struct Policy {
    /// The safe layer's policy, shared with the set that built it (if any); `None` once
    /// released.
    pub(crate) inner: RwLock<Option<Arc<host::Policy>>>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Policy")
    }
}

impl Policy {
    /// A facade object over `policy`.
    pub(crate) fn wrap(policy: Arc<host::Policy>) -> Arc<Self> {
        Arc::new(Policy {
            inner: RwLock::new(Some(policy)),
        })
    }

    /// Runs `f` on the live policy; selections share the read lock, `release` takes the write.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`, or `f`'s error.
    pub fn with<R>(
        &self,
        f: impl FnOnce(&host::Policy) -> Result<R, RouteError>,
    ) -> Result<R, RouteError> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        match inner.as_deref() {
            Some(policy) => f(policy),
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
        Ok(Self::wrap(Arc::new(host::Policy::from_json(
            json.as_bytes(),
        )?)))
    }

    /// The input groups the policy reads for requests of `role`: a host may skip computing
    /// what is not read.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`.
    pub fn inputs(&self, role: Role, conditional_disagg: bool) -> Result<Inputs, RouteError> {
        let bits = self.with(|p| Ok(p.inputs(role.into(), conditional_disagg).bits()))?;
        Ok(Inputs {
            cache: bits & route::LIBROUTE_INPUT_CACHE != 0,
            load: bits & route::LIBROUTE_INPUT_LOAD != 0,
            preferred_taint: bits & route::LIBROUTE_INPUT_PREFERRED_TAINT != 0,
        })
    }

    /// Frees the native policy now (waiting for selections using it to finish); later calls
    /// fail with `Closed`. Idempotent. Without it, the policy is freed with its last reference.
    pub fn release(&self) {
        self.inner
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}
