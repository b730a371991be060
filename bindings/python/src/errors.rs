//! Errors: every failure of the safe facade (`route_uniffi::RouteError`) becomes the Python
//! exception class of the same name in `libroute._errors` (`RouteError.NoEndpoints`, ...), with
//! the C ABI's one-sentence detail as its message, the same text as in C, Go and Kotlin.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;
use route_uniffi::RouteError;

/// `libroute._errors`, imported on the first failure.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The Python exception of `e`: class `RouteError.<Variant>`, message the detail.
pub(crate) fn to_py(e: RouteError) -> PyErr {
    Python::attach(|py| match raise(py, &e) {
        Ok(err) | Err(err) => err,
    })
}

fn raise(py: Python<'_>, e: &RouteError) -> PyResult<PyErr> {
    let module = ERRORS.get_or_try_init(py, || {
        PyModule::import(py, "libroute._errors").map(Bound::unbind)
    })?;
    let class = module.bind(py).getattr("RouteError")?.getattr(e.name())?;
    Ok(PyErr::from_value(class.call1((e.message(),))?))
}
