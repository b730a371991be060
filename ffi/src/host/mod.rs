//! The safe layer: the value behind each handle, with every call's checks and failures, in safe
//! Rust. The C ABI (the modules beside this one) only turns pointers into these values and back;
//! the object facade (`libroute-uniffi`, and through it the Kotlin, Swift and Python bindings)
//! holds them directly. So a call fails the same way, with the same sentence, in every language.
//!
//! One module per handle, as in the C ABI: [`Policy`] (`libroute_policy`), [`Selector`]
//! (`libroute_selector`), [`PolicySet`] (`libroute_policy_set`), [`Router`] (`libroute_router`).
//! Every fallible call returns a [`Failure`](crate::Failure): a `libroute_status` and one
//! sentence naming the row, field, knob or worker at fault.
//!
//! The layer speaks the C vocabulary (`libroute_row`, [`RequestArgs`](crate::RequestArgs),
//! `libroute_selection`) so that rows in a host's memory are read in place by every binding.

// Why: this layer is the C ABI's logic without its pointers; nothing here may need unsafe.
#![forbid(unsafe_code)]

mod hashes;
mod policy;
mod policy_set;
mod router;
mod selector;

pub use hashes::block_hashes;
pub use policy::Policy;
pub use policy_set::PolicySet;
pub use router::{Clock, Router};
pub use selector::Selector;
