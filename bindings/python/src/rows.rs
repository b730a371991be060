//! Rows from Python: a list (or tuple) of `Row` objects, or any object exporting a C-contiguous
//! buffer in the C row layout (`libroute.ROW_DTYPE`: a NumPy structured array, `bytes`,
//! `bytearray`, `memoryview`), which is read where it lies.

use std::mem::{align_of, size_of};
use std::ptr::NonNull;

use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyMemoryView, PyTuple};
use pyo3::{ffi, intern};
use route::libroute_row;

use crate::records::Row;

/// Bytes per row: the C `libroute_row` (`libroute.ROW_BYTES`).
pub(crate) const ROW_BYTES: usize = size_of::<libroute_row>();

/// `libroute._rows.ROW_DTYPE`, looked up the first time an object with a `dtype` arrives.
static ROW_DTYPE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Runs `f` over the rows of `rows`: a list or tuple of `Row`, or a buffer of packed rows.
pub(crate) fn with_rows<R>(
    rows: &Bound<'_, PyAny>,
    f: impl FnOnce(&[libroute_row]) -> R,
) -> PyResult<R> {
    if let Ok(list) = rows.cast::<PyList>() {
        let mut raw = Vec::with_capacity(list.len());
        for (i, item) in list.iter().enumerate() {
            raw.push(row_at(&item, i)?);
        }
        return Ok(f(&raw));
    }
    if let Ok(tuple) = rows.cast::<PyTuple>() {
        let mut raw = Vec::with_capacity(tuple.len());
        for (i, item) in tuple.iter().enumerate() {
            raw.push(row_at(&item, i)?);
        }
        return Ok(f(&raw));
    }
    let buffer = Exported::new(rows, false)?;
    let bytes = buffer.bytes();
    if bytes.len() % ROW_BYTES != 0 {
        return Err(PyValueError::new_err(format!(
            "{} bytes of packed rows is not a multiple of the row size {ROW_BYTES}",
            bytes.len()
        )));
    }
    let n = bytes.len() / ROW_BYTES;
    if bytes.as_ptr().align_offset(align_of::<libroute_row>()) == 0 {
        // SAFETY: the buffer holds `n` rows' bytes, aligned for `libroute_row` (checked above),
        // and stays exported (unmovable, alive) until `buffer` drops after `f`; every bit pattern
        // is a valid `libroute_row` (integers and floats only).
        #[allow(clippy::cast_ptr_alignment, reason = "the alignment is checked above")]
        let rows = unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<libroute_row>(), n) };
        Ok(f(rows))
    } else {
        // A misaligned view (a memoryview slice): read each row unaligned into an aligned copy.
        let copy: Vec<libroute_row> = (0..n)
            // SAFETY: row `i` lies within the buffer's `n * ROW_BYTES` bytes; read unaligned.
            .map(|i| unsafe {
                bytes
                    .as_ptr()
                    .add(i * ROW_BYTES)
                    .cast::<libroute_row>()
                    .read_unaligned()
            })
            .collect();
        Ok(f(&copy))
    }
}

/// Runs `f` over the rows of a writable buffer of packed rows (a NumPy array of `ROW_DTYPE`,
/// a `bytearray`), which `f` may change in place.
pub(crate) fn with_rows_mut<R>(
    rows: &Bound<'_, PyAny>,
    f: impl FnOnce(&mut [libroute_row]) -> R,
) -> PyResult<R> {
    let buffer = Exported::new(rows, true)?;
    let (start, len) = buffer.raw();
    if len % ROW_BYTES != 0 {
        return Err(PyValueError::new_err(format!(
            "{len} bytes of packed rows is not a multiple of the row size {ROW_BYTES}"
        )));
    }
    let n = len / ROW_BYTES;
    if start.align_offset(align_of::<libroute_row>()) == 0 {
        // SAFETY: the writable buffer holds `n` aligned rows and stays exported until `buffer`
        // drops after `f`; we hold the GIL, so no Python code touches it meanwhile; every bit
        // pattern is a valid row.
        #[allow(clippy::cast_ptr_alignment, reason = "the alignment is checked above")]
        let rows = unsafe { std::slice::from_raw_parts_mut(start.cast::<libroute_row>(), n) };
        Ok(f(rows))
    } else {
        // A misaligned view: an aligned copy, written back after `f`.
        // SAFETY: row `i` lies within the buffer's `n * ROW_BYTES` bytes; read unaligned.
        let mut copy: Vec<libroute_row> = (0..n)
            .map(|i| unsafe {
                start
                    .add(i * ROW_BYTES)
                    .cast::<libroute_row>()
                    .read_unaligned()
            })
            .collect();
        let result = f(&mut copy);
        for (i, row) in copy.iter().enumerate() {
            // SAFETY: as above, and the buffer is writable.
            unsafe {
                start
                    .add(i * ROW_BYTES)
                    .cast::<libroute_row>()
                    .write_unaligned(*row);
            }
        }
        Ok(result)
    }
}

/// The row of list item `i`.
fn row_at(item: &Bound<'_, PyAny>, i: usize) -> PyResult<libroute_row> {
    match item.cast::<Row>() {
        Ok(row) => Ok(row.get().raw),
        Err(_) => Err(PyTypeError::new_err(format!(
            "rows[{i}] is a {}, not a libroute.Row",
            item.get_type().name()?
        ))),
    }
}

/// Checks that a NumPy array's `dtype` is `libroute.ROW_DTYPE`: a byte count alone cannot tell
/// rows from 13 floats.
fn check_dtype(dtype: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = dtype.py();
    let expected = ROW_DTYPE.get_or_try_init(py, || {
        py.import("libroute._rows")?
            .getattr("ROW_DTYPE")
            .map(Bound::unbind)
    })?;
    // An array made with `ROW_DTYPE` holds that very object: skip NumPy's field-by-field compare.
    if dtype.is(expected.bind(py)) || dtype.eq(expected.bind(py))? {
        Ok(())
    } else {
        Err(PyTypeError::new_err(format!(
            "rows has dtype {}, not libroute.ROW_DTYPE",
            dtype.repr()?
        )))
    }
}

/// A buffer exported by a Python object, released when dropped.
struct Exported {
    /// Boxed: the exporter may keep pointers into the view until it is released.
    view: Box<ffi::Py_buffer>,
}

impl Exported {
    /// Exports `obj`'s bytes, C-contiguous (and `writable`, when asked). A NumPy array must have
    /// `libroute.ROW_DTYPE`.
    fn new(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Self> {
        let py = obj.py();
        // Plain byte containers carry no row type; anything else may (a NumPy array does).
        let untyped = obj.is_instance_of::<PyBytes>()
            || obj.is_instance_of::<PyByteArray>()
            || obj.is_instance_of::<PyMemoryView>();
        if !untyped {
            if let Ok(dtype) = obj.getattr(intern!(py, "dtype")) {
                check_dtype(&dtype)?;
            }
        }
        // SAFETY: an all-zero `Py_buffer` is the empty view `PyObject_GetBuffer` fills.
        let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `obj` is a live object (we hold the GIL through `py`), `view` is writable.
        // PyBUF_SIMPLE asks for one contiguous run of bytes, as the rows need.
        let flags = if writable {
            ffi::PyBUF_SIMPLE | ffi::PyBUF_WRITABLE
        } else {
            ffi::PyBUF_SIMPLE
        };
        // SAFETY: as above.
        let status = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &raw mut *view, flags) };
        if status != 0 {
            let cause = PyErr::fetch(py);
            let err = PyTypeError::new_err(if writable {
                format!(
                    "rows must be a writable C-contiguous buffer of packed rows (a NumPy array \
                     of libroute.ROW_DTYPE), not this {}",
                    obj.get_type().name()?
                )
            } else {
                format!(
                    "rows must be a list of libroute.Row or a C-contiguous buffer of packed rows \
                     (libroute.ROW_DTYPE), not a {}",
                    obj.get_type().name()?
                )
            });
            err.set_cause(py, Some(cause));
            return Err(err);
        }
        let exported = Exported { view };
        if exported.view.len < 0 || (exported.view.buf.is_null() && exported.view.len > 0) {
            return Err(PyBufferError::new_err("the rows' buffer reports no memory"));
        }
        Ok(exported)
    }

    /// The exported memory's start and length, for writing.
    fn raw(&self) -> (*mut u8, usize) {
        let len = usize::try_from(self.view.len).unwrap_or(0);
        match NonNull::new(self.view.buf.cast::<u8>()) {
            Some(buf) => (buf.as_ptr(), len),
            None => (NonNull::<libroute_row>::dangling().as_ptr().cast(), 0),
        }
    }

    /// The exported bytes.
    fn bytes(&self) -> &[u8] {
        let (start, len) = self.raw();
        // SAFETY: the exporter guarantees `len` readable bytes at `start` while exported (`raw`
        // gives a dangling, aligned pointer with 0 bytes for no memory).
        unsafe { std::slice::from_raw_parts(start, len) }
    }
}

impl Drop for Exported {
    fn drop(&mut self) {
        // SAFETY: the view was filled by a successful `PyObject_GetBuffer` and is released once;
        // objects are only dropped while the GIL is held (every `Exported` lives inside a call).
        unsafe { ffi::PyBuffer_Release(&raw mut *self.view) };
    }
}
