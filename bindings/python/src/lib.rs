//! libroute's Python extension module, `libroute._native` (PyO3, the stable ABI of CPython
//! 3.11 and later). The `libroute` package re-exports it with its exceptions (`_errors.py`)
//! and the NumPy row type (`_rows.py`).
//!
//! It is built on the safe Rust objects of `route_uniffi` (the facade the Kotlin and Swift
//! bindings are generated from), so Python makes exactly the decisions and reports exactly the
//! errors of every other language. Its own work is the boundary: the records as immutable Python
//! classes (`records`), rows from `Row` lists or read in place from buffers (`rows`), and one
//! module per object (`policy`, `selector`, `router`).

// Why: reading a Python buffer in place is a raw-pointer read; `rows` carries the SAFETY notes.
#![allow(unsafe_code, reason = "the buffer protocol")]
#![deny(unsafe_op_in_unsafe_fn)]
// Why: PyO3 hands arguments over by value (`Vec`, `Worker`), whether or not a method keeps them.
#![allow(
    clippy::needless_pass_by_value,
    reason = "PyO3 passes Python arguments by value"
)]
#![allow(
    clippy::unnecessary_wraps,
    reason = "PyO3 methods return PyResult by convention"
)]

use pyo3::prelude::*;

mod errors;
mod policy;
mod records;
mod router;
mod rows;
mod selector;

/// The library version, `MAJOR.MINOR.PATCH`.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<records::Worker>()?;
    m.add_class::<records::Role>()?;
    m.add_class::<records::PreferredTaint>()?;
    m.add_class::<records::BlockRange>()?;
    m.add_class::<records::Request>()?;
    m.add_class::<records::RowCache>()?;
    m.add_class::<records::RowLoad>()?;
    m.add_class::<records::RowSpeed>()?;
    m.add_class::<records::Row>()?;
    m.add_class::<records::PickReason>()?;
    m.add_class::<records::Selection>()?;
    m.add_class::<records::Candidate>()?;
    m.add_class::<records::Inputs>()?;
    m.add_class::<records::Disposition>()?;
    m.add_class::<records::RowExplanation>()?;
    m.add_class::<records::Explained>()?;
    m.add_class::<policy::Policy>()?;
    m.add_class::<policy::PolicySet>()?;
    m.add_class::<selector::Selector>()?;
    m.add_class::<router::RouterConfig>()?;
    m.add_class::<router::Tier>()?;
    m.add_class::<router::KvEvent>()?;
    m.add_class::<router::LedgerEvent>()?;
    m.add_class::<router::RouterCounters>()?;
    m.add_class::<router::KvBatchSummary>()?;
    m.add_class::<router::Routed>()?;
    m.add_class::<router::Router>()?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(router::block_hashes, m)?)?;
    m.add_function(wrap_pyfunction!(selector::pack_rows, m)?)?;
    m.add_function(wrap_pyfunction!(selector::unpack_rows, m)?)?;
    m.add("ROW_BYTES", rows::ROW_BYTES)?;
    // The exception classes of `_errors.py` are made from this list: name and status code.
    m.add(
        "ERROR_STATUSES",
        route_uniffi::RouteError::STATUSES.to_vec(),
    )?;
    Ok(())
}
