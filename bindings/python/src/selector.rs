//! `Selector`: per-caller scratch and random stream; select (over `Row` objects or packed rows
//! read in place), the explained select, the last costs.

use std::sync::Arc;

use pyo3::prelude::*;
use route_uniffi as u;

use crate::errors::to_py;
use crate::policy::Policy;
use crate::records::{Candidate, Explained, Request, Row, Selection};
use crate::rows::with_rows;

/// Selection scratch of a fixed capacity (1 to 4,096 rows) and a random stream whose unseeded
/// draws start from `entropy`. Thread-safe (calls are serialized); give each thread its own.
#[pyclass(module = "libroute", frozen)]
pub(crate) struct Selector {
    pub(crate) inner: Arc<u::Selector>,
}

#[pymethods]
impl Selector {
    #[new]
    fn new(capacity: u32, entropy: u64) -> PyResult<Self> {
        Ok(Selector {
            inner: u::Selector::new(capacity, entropy).map_err(to_py)?,
        })
    }

    /// Selects one of `rows` for `request` with `policy`. `rows` is a list of `Row`, or a
    /// NumPy array of `ROW_DTYPE` (or any buffer of packed rows), read in place.
    fn select(
        &self,
        policy: PyRef<'_, Policy>,
        request: PyRef<'_, Request>,
        rows: &Bound<'_, PyAny>,
    ) -> PyResult<Selection> {
        with_rows(rows, |rows| {
            self.inner
                .select_c_rows(&policy.inner, &request.inner, rows)
        })?
        .map(Selection::from)
        .map_err(to_py)
    }

    /// `select` for packed rows (`bytes` from `pack_rows`, or any buffer of `ROW_DTYPE` rows).
    fn select_packed(
        &self,
        policy: PyRef<'_, Policy>,
        request: PyRef<'_, Request>,
        rows: &Bound<'_, PyAny>,
    ) -> PyResult<Selection> {
        self.select(policy, request, rows)
    }

    /// `select` with an explanation of every row: whether it was a candidate or which check
    /// removed it, and for candidates each scorer's contribution and the total.
    fn select_explained(
        &self,
        policy: PyRef<'_, Policy>,
        request: PyRef<'_, Request>,
        rows: &Bound<'_, PyAny>,
    ) -> PyResult<Explained> {
        let records: Vec<u::Row> = with_rows(rows, |rows| rows.iter().map(u::Row::from).collect())?;
        let e = self
            .inner
            .select_explained(policy.inner.clone(), request.inner.clone(), records)
            .map_err(to_py)?;
        Ok(Explained {
            selection: e.selection.into(),
            rows: e.rows.into_iter().map(Into::into).collect(),
        })
    }

    /// Every candidate of the last successful selection, in the order the picker saw them.
    fn last_costs(&self) -> PyResult<Vec<Candidate>> {
        Ok(self
            .inner
            .last_costs()
            .map_err(to_py)?
            .into_iter()
            .map(|c| Candidate {
                row: c.row,
                cost: c.cost,
            })
            .collect())
    }

    /// Restarts the seeded stream: the next seeded selection draws as the first did.
    fn reset_seeded(&self) -> PyResult<()> {
        self.inner.reset_seeded().map_err(to_py)
    }

    /// Frees the native selector now; later calls raise `RouteError.Closed`. Idempotent.
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

/// Packs `rows` (a list of `Row`) into `bytes` in the C row layout, for `select_packed` or
/// `numpy.frombuffer(..., dtype=ROW_DTYPE)`.
#[pyfunction]
pub(crate) fn pack_rows(rows: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    with_rows(rows, |rows| {
        let mut out = Vec::with_capacity(size_of_val(rows));
        for r in rows {
            out.extend(row_bytes(r));
        }
        out
    })
}

/// One row's bytes, little-endian, as `ROW_DTYPE` lays them out (padding zeroed).
fn row_bytes(r: &route::libroute_row) -> [u8; crate::rows::ROW_BYTES] {
    let mut b = [0u8; crate::rows::ROW_BYTES];
    let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &r.worker.worker_id.to_le_bytes());
    put(8, &r.worker.dp_rank.to_le_bytes());
    put(16, &r.taints.to_le_bytes());
    put(24, &r.flags.to_le_bytes());
    put(28, &r.device_blocks.to_le_bytes());
    put(32, &r.host_blocks.to_le_bytes());
    put(36, &r.disk_blocks.to_le_bytes());
    put(40, &r.effective_blocks.to_le_bytes());
    put(48, &r.effective_tokens.to_le_bytes());
    put(56, &r.active_prefill_tokens.to_le_bytes());
    put(64, &r.active_decode_blocks.to_le_bytes());
    put(72, &r.active_requests.to_le_bytes());
    put(80, &r.base_ms.to_le_bytes());
    put(88, &r.ms_per_prefill_token.to_le_bytes());
    put(96, &r.ms_per_active_request.to_le_bytes());
    b
}

/// The rows of packed bytes (or any buffer of `ROW_DTYPE` rows) as `Row` objects.
#[pyfunction]
pub(crate) fn unpack_rows(rows: &Bound<'_, PyAny>) -> PyResult<Vec<Row>> {
    with_rows(rows, |rows| rows.iter().map(|&raw| Row { raw }).collect())
}
