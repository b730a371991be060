//! The one ownership story of every handle, and the raw-pointer helpers every call shares.
//!
//! A C handle type (`libroute_policy`, `libroute_selector`, `libroute_policy_set`,
//! `libroute_router`) is an opaque, zero-sized struct that names the Rust value behind it through
//! [`Handle`], the way rustls-ffi's `Castable` does. A `_new` function boxes the value and hands
//! the caller [`Handle::into_handle`]; every call borrows it back with [`Handle::get`] or
//! [`Handle::get_mut`] (NULL is `LIBROUTE_STATUS_NULL_ARGUMENT`, named after the handle); the
//! `_free` function takes the box back once with [`Handle::free`]. No function casts a handle by
//! hand.

use crate::status::{Failure, guard, libroute_status};

/// A C handle type and the Rust value its pointers point to.
pub(crate) trait Handle: Sized {
    /// The value a `_new` function boxed.
    type Target;

    /// The parameter name the API gives handles of this type, for the NULL error's detail.
    const NAME: &'static str;

    /// The pointer the caller owns from now on: `value` leaked, to be freed by [`Handle::free`].
    fn into_handle(value: Box<Self::Target>) -> *mut Self {
        Box::into_raw(value).cast()
    }

    /// A pointer to a value owned elsewhere (a policy inside a policy set), valid while its
    /// owner lives; the caller must not free it.
    fn borrowed(value: &Self::Target) -> *const Self {
        std::ptr::from_ref(value).cast()
    }

    /// Borrows the value behind `handle`.
    ///
    /// # Errors
    ///
    /// `NullArgument` ("`NAME` is NULL", recorded as the detail) for NULL.
    ///
    /// # Safety
    ///
    /// `handle` must be NULL or a live pointer made by [`Handle::into_handle`] or
    /// [`Handle::borrowed`] for this type, not mutably borrowed elsewhere for `'a`.
    unsafe fn get<'a>(handle: *const Self) -> Result<&'a Self::Target, Failure> {
        // SAFETY: by contract a non-NULL handle points to a live `Self::Target`.
        unsafe { handle.cast::<Self::Target>().as_ref() }.ok_or(Failure::null(Self::NAME))
    }

    /// Borrows the value behind `handle` mutably.
    ///
    /// # Errors
    ///
    /// As [`Handle::get`].
    ///
    /// # Safety
    ///
    /// `handle` must be NULL or a live pointer made by [`Handle::into_handle`] for this type, not
    /// borrowed elsewhere for `'a` (the API's rule: one thread uses a selector or router at once).
    unsafe fn get_mut<'a>(handle: *mut Self) -> Result<&'a mut Self::Target, Failure> {
        // SAFETY: by contract a non-NULL handle points to a live, unshared `Self::Target`.
        unsafe { handle.cast::<Self::Target>().as_mut() }.ok_or(Failure::null(Self::NAME))
    }

    /// Drops the value behind `handle` inside the panic boundary; NULL does nothing. Every
    /// `_free` function is this for its own type.
    ///
    /// # Safety
    ///
    /// `handle` must be NULL or come from [`Handle::into_handle`] for this type, not freed before
    /// and not in use elsewhere.
    unsafe fn free(handle: *mut Self) {
        let _ = guard(|| {
            if !handle.is_null() {
                // SAFETY: by contract, a live `Box<Self::Target>` pointer freed once, here.
                drop(unsafe { Box::from_raw(handle.cast::<Self::Target>()) });
            }
            libroute_status::Ok
        });
    }
}

/// Returns `Err(NULL_ARGUMENT)` ("`name` is NULL") if `$ptr` is NULL.
macro_rules! non_null {
    ($ptr:expr, $name:literal) => {
        if $ptr.is_null() {
            return Err($crate::status::Failure::null($name));
        }
    };
}

/// Reads a `(pointer, length)` buffer of `T`; NULL is allowed only with length 0.
///
/// # Safety
///
/// A non-NULL `ptr` must point to `len` initialized `T` that stay valid and unchanged for `'a`.
pub(crate) unsafe fn slice<'a, T>(ptr: *const T, len: usize) -> Option<&'a [T]> {
    if len == 0 {
        Some(&[])
    } else if ptr.is_null() {
        None
    } else {
        // SAFETY: non-NULL and, by this function's contract, valid for `len` reads.
        Some(unsafe { std::slice::from_raw_parts(ptr, len) })
    }
}

/// A `(pointer, length)` argument named `name` as a slice, read in place.
///
/// # Errors
///
/// `NULL_ARGUMENT` ("`name` is NULL with a non-zero length").
///
/// # Safety
///
/// As [`slice`].
pub(crate) unsafe fn slice_arg<'a, T>(
    ptr: *const T,
    len: usize,
    name: &'static str,
) -> Result<&'a [T], Failure> {
    // SAFETY: forwarded under this function's contract.
    unsafe { slice(ptr, len) }.ok_or_else(|| null_with_length(name))
}

/// [`slice_arg`] for a buffer the call writes.
///
/// # Errors
///
/// As [`slice_arg`].
///
/// # Safety
///
/// A non-NULL `ptr` must point to `len` initialized `T`, valid for reads and writes and not
/// accessed elsewhere for `'a`.
pub(crate) unsafe fn slice_arg_mut<'a, T>(
    ptr: *mut T,
    len: usize,
    name: &'static str,
) -> Result<&'a mut [T], Failure> {
    if len == 0 {
        Ok(&mut [])
    } else if ptr.is_null() {
        Err(null_with_length(name))
    } else {
        // SAFETY: non-NULL and, by this function's contract, valid and unshared for `len`.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
    }
}

#[cold]
fn null_with_length(name: &str) -> Failure {
    Failure::new(
        libroute_status::NullArgument,
        format_args!("{name} is NULL with a non-zero length"),
    )
}
