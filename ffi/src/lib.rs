//! The C ABI of libroute: `libroute.h`, for C and C++ inference servers.
//!
//! # API conventions
//!
//! - **Handles are opaque** (`libroute_policy`, `libroute_selector`) and come in `_new`/`_free`
//!   pairs. The caller owns what a `_new` function returns and frees it with the matching `_free`
//!   exactly once; `_free(NULL)` does nothing.
//! - **A policy is immutable** after construction and may be used from any number of threads at
//!   once. A selector holds per-call buffers and the random stream: use one per thread.
//! - **Every function returns a `libroute_status`**; `LIBROUTE_STATUS_OK` is 0. Out-parameters come
//!   last and are written only on success. On failure, `libroute_last_error` gives a detail
//!   message for the calling thread (which knob, which row).
//! - **Buffers are `(pointer, length)` pairs.** Rows live in the caller's memory and are read in
//!   place, never copied; libroute keeps no pointer after a call returns.
//! - **Nothing is trusted:** NULL pointers give `LIBROUTE_STATUS_NULL_ARGUMENT`, booleans must be 0
//!   or 1 and enum values must be defined (`LIBROUTE_STATUS_INVALID_ARGUMENT` otherwise, never a
//!   reinterpretation), NaN and infinite fields are errors naming the row.
//! - **Panics never cross the boundary:** a bug inside libroute returns `LIBROUTE_STATUS_PANIC`.
//!   The library is built with `panic = "unwind"` so that this boundary can catch it.
//! - **Callbacks** (custom filters and scorers) are called on the selecting thread, during
//!   `libroute_select` only, and must not unwind (C++ exceptions must be caught inside them). A
//!   policy holding callbacks is shared across threads only if the callbacks and their
//!   `user_data` are thread-safe.
//!
//! # Layout
//!
//! Two halves. `host` is the safe layer: the value behind each handle (`host::Policy`,
//! `host::Selector`, `host::PolicySet`, `host::Router`) with every call's checks, each failure a
//! [`Failure`] (a status and one sentence naming what was wrong); it has no unsafe code, and the
//! object facade (`libroute-uniffi`) holds its values directly. The C ABI is the other half, one
//! module per handle: `policy` (`libroute_policy`), `selector` (`libroute_selector`,
//! `libroute_select`), `policy_set` (`libroute_policy_set`) and `router` (`libroute_router`: the
//! index, the ledger and the predictions behind one handle), each export turning pointers into
//! the safe layer's arguments and its `Failure` into a status and the thread's detail. The C
//! types they share (rows, requests, selections, their conversions and [`RequestArgs`]) are in
//! `vocab`, C-written filters and scorers in `components`, statuses, [`Failure`] and the
//! boundary in `status`, text out in `text`, and `pages`, the memory of the router's tables
//! (large ones in huge pages), whose unsafe allocation the safe layer uses through a safe type.
//! Every handle follows one ownership story, `handle::Handle`: the value it points to is boxed by
//! `_new`, borrowed by each call and freed once by `_free`; no call casts a handle by hand. The
//! header `libroute.h` is generated from these items' doc comments by cbindgen (`cargo xtask
//! codegen`), so the header and the Rust docs are one text.

// Why: the C half turns raw pointers into the safe layer's arguments; every block says why it
// holds. (`host` forbids unsafe code in itself.)
#![allow(
    unsafe_code,
    reason = "the C ABI needs raw pointers; each use carries a SAFETY comment"
)]
#![deny(unsafe_op_in_unsafe_fn)]
// Why: C names (`libroute_row`) are the contract; Rust naming would leak into the header.
#![allow(non_camel_case_types)]

// One module per handle (policy, selector, policy set, router), with the types they share
// (`vocab`), C components, status and text; `handle` first for its trait and `non_null!`, and each
// module before those that use its macros.
#[macro_use]
mod handle;
mod components;
mod status;
mod vocab;
#[macro_use]
mod policy;
#[macro_use]
mod selector;
pub mod host;
mod pages;
mod policy_set;
mod router;
mod text;

pub use components::*;
pub use policy::*;
pub use policy_set::*;
pub use router::*;
pub use selector::*;
pub use status::{Failure, libroute_status};
pub use text::*;
pub use vocab::*;

#[cfg(test)]
mod tests;
