//! The one ownership story of every handle, and the raw-pointer helpers every call shares.
//!
//! A C handle type (`libroute_policy`, `libroute_selector`, `libroute_policy_set`,
//! `libroute_router`) is an opaque, zero-sized struct that names the Rust value behind it through
//! [`Handle`], the way rustls-ffi's `Castable` does. A `_new` function boxes the value and hands
//! the caller [`Handle::into_handle`]; every call borrows it back with [`Handle::get`] or
//! [`Handle::get_mut`] (NULL is `LIBROUTE_STATUS_NULL_ARGUMENT`, named after the handle); the
//! `_free` function takes the box back once with [`Handle::free`]. No function casts a handle by
//! hand.

use crate::status::{boundary, fail, libroute_status};

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
    unsafe fn get<'a>(handle: *const Self) -> Result<&'a Self::Target, libroute_status> {
        // SAFETY: by contract a non-NULL handle points to a live `Self::Target`.
        unsafe { handle.cast::<Self::Target>().as_ref() }.ok_or_else(null::<Self>)
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
    unsafe fn get_mut<'a>(handle: *mut Self) -> Result<&'a mut Self::Target, libroute_status> {
        // SAFETY: by contract a non-NULL handle points to a live, unshared `Self::Target`.
        unsafe { handle.cast::<Self::Target>().as_mut() }.ok_or_else(null::<Self>)
    }

    /// Drops the value behind `handle` inside the panic boundary; NULL does nothing. Every
    /// `_free` function is this for its own type.
    ///
    /// # Safety
    ///
    /// `handle` must be NULL or come from [`Handle::into_handle`] for this type, not freed before
    /// and not in use elsewhere.
    unsafe fn free(handle: *mut Self) {
        let _ = boundary(|| {
            if !handle.is_null() {
                // SAFETY: by contract, a live `Box<Self::Target>` pointer freed once, here.
                drop(unsafe { Box::from_raw(handle.cast::<Self::Target>()) });
            }
            libroute_status::Ok
        });
    }
}

/// The error of a NULL handle of type `H`, its detail recorded.
fn null<H: Handle>() -> libroute_status {
    fail(
        libroute_status::NullArgument,
        format_args!("{} is NULL", H::NAME),
    )
}

/// Returns `$status` (with a detail message) if `$ptr` is NULL.
macro_rules! non_null {
    ($ptr:expr, $name:literal) => {
        if $ptr.is_null() {
            return $crate::status::fail(
                $crate::status::libroute_status::NullArgument,
                concat!($name, " is NULL"),
            );
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
