//! [`PolicySet`]: named catalog policies per role, from one JSON document.

use std::sync::Arc;

use route::host;

use crate::error::RouteError;
use crate::policy::Policy;
use crate::vocab::Role;

/// Named policy instances assigned to roles, from one JSON configuration (see the catalog's
/// documentation): `{"instances": [{"name": ..., "policy": {"type": ...}}], "roles": {...}}`.
#[derive(uniffi::Object)]
pub struct PolicySet {
    inner: host::PolicySet,
}

impl std::fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PolicySet")
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
        Ok(Arc::new(PolicySet {
            inner: host::PolicySet::from_json(json.as_bytes())?,
        }))
    }

    /// The policy serving `role` (shared with the set: releasing one releases only itself).
    ///
    /// # Errors
    ///
    /// None: the `Result` keeps the bindings' signature of earlier releases.
    pub fn policy(&self, role: Role) -> Result<Arc<Policy>, RouteError> {
        Ok(Policy::wrap(Arc::clone(self.inner.policy(role.into()))))
    }

    /// The name of the instance serving `role` (`"default"` when none was assigned).
    ///
    /// # Errors
    ///
    /// None: the `Result` keeps the bindings' signature of earlier releases.
    pub fn instance_name(&self, role: Role) -> Result<String, RouteError> {
        Ok(self.inner.instance_name(role.into()).to_owned())
    }
}
