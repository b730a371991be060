//! libroute's router inside NVIDIA's engine simulator: routing quality measured with an engine
//! model nobody in this project wrote.
//!
//! [aisimulate-core](https://crates.io/crates/aisimulate-core) is the core of Dynamo's mocker
//! and offline replayer: simulated vLLM and SGLang schedulers with continuous batching under a
//! token budget, chunked prefill, a block-level KV cache with LRU eviction and prefix caching,
//! and KV events. Its replayer takes the placement policy from outside; [`bridge`] supplies
//! libroute's [`Router`](libroute_core::Router) (prefix index, load ledger, any catalog
//! policy), and [`run`] lowers a workload, runs a replay and summarizes it in the terms of
//! `cargo replay`.
//!
//! This crate is its own workspace (see `Cargo.toml`), so aisimulate-core's dependency tree never
//! enters the library's build or lock file. Users run it as `cargo replay --engine aisimulate`.

pub mod bridge;
pub mod run;
