//! `Policy` (an immutable routing policy) and `PolicySet` (named instances per role).

use std::sync::Arc;

use pyo3::prelude::*;
use route_uniffi as u;

use crate::errors::to_py;
use crate::records::{Inputs, Role};

/// An immutable routing policy built from JSON (see `docs/policies.md`); share one between
/// threads. `release()` frees it at once; it is also a context manager.
#[pyclass(module = "libroute", frozen)]
pub(crate) struct Policy {
    pub(crate) inner: Arc<u::Policy>,
}

#[pymethods]
impl Policy {
    #[new]
    fn new(json: &str) -> PyResult<Self> {
        Ok(Policy {
            inner: u::Policy::new(json.to_owned()).map_err(to_py)?,
        })
    }

    /// The input groups this policy reads for requests of `role`.
    #[pyo3(signature = (role, conditional_disagg = false))]
    fn inputs(&self, role: Role, conditional_disagg: bool) -> PyResult<Inputs> {
        let i = self
            .inner
            .inputs(role.into(), conditional_disagg)
            .map_err(to_py)?;
        Ok(Inputs {
            cache: i.cache,
            load: i.load,
            preferred_taint: i.preferred_taint,
        })
    }

    /// Frees the native policy now; later calls raise `RouteError.Closed`. Idempotent.
    fn release(&self) {
        self.inner.release();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.release();
        false
    }
}

/// Named policy instances and the instance each role uses, from JSON.
#[pyclass(module = "libroute", frozen)]
pub(crate) struct PolicySet {
    inner: Arc<u::PolicySet>,
}

#[pymethods]
impl PolicySet {
    #[new]
    fn new(json: &str) -> PyResult<Self> {
        Ok(PolicySet {
            inner: u::PolicySet::new(json.to_owned()).map_err(to_py)?,
        })
    }

    /// The policy for `role`; it keeps the set's memory alive.
    fn policy(&self, role: Role) -> PyResult<Policy> {
        Ok(Policy {
            inner: self.inner.policy(role.into()).map_err(to_py)?,
        })
    }

    /// The name of the instance `role` uses (`"default"` when the set names none).
    fn instance_name(&self, role: Role) -> PyResult<String> {
        self.inner.instance_name(role.into()).map_err(to_py)
    }
}
