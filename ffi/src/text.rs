//! Text out of the library: status messages, the thread's last error detail, the version.

use std::ffi::c_char;

use crate::status::{guard, libroute_status, with_last_error};

/// The library version, `MAJOR.MINOR.PATCH`, equal to the Cargo package version.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// Copies `text` and a terminating NUL into `buf`, writing its length (without the NUL) to
/// `*out_n`.
///
/// # Safety
///
/// `buf` valid for `len` writes, `out_n` for one.
pub(crate) unsafe fn write_text(
    text: &str,
    buf: *mut c_char,
    len: usize,
    out_n: *mut usize,
) -> libroute_status {
    if buf.is_null() || out_n.is_null() {
        return libroute_status::NullArgument;
    }
    if text.len() + 1 > len {
        return libroute_status::BufferTooSmall;
    }
    // SAFETY: `buf` holds at least `text.len() + 1` bytes (checked) and cannot overlap `text`, a
    // Rust string; `out_n` is valid by contract.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        buf.add(text.len()).write(0);
        out_n.write(text.len());
    }
    libroute_status::Ok
}

/// Writes the message of status `code` (NUL-terminated) into `buf[0..len]` and its length to
/// `*out_n`. An unknown code is reported as `LIBROUTE_STATUS_INVALID_ARGUMENT` and nothing is
/// written.
///
/// # Safety
///
/// `buf` must be valid for `len` writes and `out_n` for one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_status_message(
    code: u32,
    buf: *mut c_char,
    len: usize,
    out_n: *mut usize,
) -> libroute_status {
    guard(|| {
        let status = libroute_status::from_u32(code);
        if status as u32 != code {
            return libroute_status::InvalidArgument;
        }
        // SAFETY: forwarded under this function's contract.
        unsafe { write_text(status.message(), buf, len, out_n) }
    })
}

/// Writes the detail of the calling thread's last failure (which knob, row or scorer),
/// NUL-terminated, into `buf[0..len]` and its length to `*out_n`. Empty before any failure.
///
/// # Safety
///
/// `buf` must be valid for `len` writes and `out_n` for one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_last_error(
    buf: *mut c_char,
    len: usize,
    out_n: *mut usize,
) -> libroute_status {
    // Not wrapped in `boundary`: a panic here would overwrite the message being read.
    // SAFETY: forwarded under this function's contract.
    with_last_error(|text| unsafe { write_text(text, buf, len, out_n) })
}

/// The library version as a NUL-terminated `"MAJOR.MINOR.PATCH"`, equal to `LIBROUTE_VERSION`
/// in a header of the same release. The string is static: do not free it.
#[unsafe(no_mangle)]
pub extern "C" fn libroute_version() -> *const c_char {
    VERSION.as_ptr().cast()
}
