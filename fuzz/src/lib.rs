//! The fuzz targets' bodies, one module per target, each with a `run(data)` that the target's
//! binary (`fuzz_targets/<name>.rs`) hands libFuzzer's input to. They live in a library so the
//! regression tests (`tests/regressions.rs`) replay a finding's minimized input through exactly
//! the code that found it, on stable and without libFuzzer.

pub mod abi;
pub mod catalog;
pub mod config;
pub mod index;
pub mod kv_batch;
pub mod ledger;
pub mod router;
pub mod select;
pub mod snapshot;
pub mod zmtp;

#[path = "../../core/tests/common/mod.rs"]
mod common;
