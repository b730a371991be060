//! libroute-core: the worker-selection brain of an LLM inference router, without allocation.
//!
//! A router host hands a [`Policy`] a snapshot of candidate workers for one request (one [`Row`]
//! each: cache overlap per tier, load, taints); the policy filters them, sums its scorers' costs,
//! picks one and says why, in a [`Selection`]. The builtin default policy reproduces NVIDIA
//! Dynamo's default worker selection exactly.
//!
//! # Contents
//!
//! - [Should I use this?](#should-i-use-this)
//! - [Example](#example)
//! - [API themes](#api-themes)
//! - [Crate features](#crate-features)
//!
//! # Should I use this?
//!
//! Use it when you route requests to GPU workers and want KV-cache-aware, load-aware selection
//! that is fast (nanoseconds per candidate), reproducible when seeded, and embeddable anywhere:
//! this crate is `#![no_std]`, never allocates and has no `unsafe`. A C ABI and language bindings
//! are shells around it. If you only need round-robin, you do not need this crate.
//!
//! # Example
//!
//! ```
//! use libroute_core::{Cache, DefaultPolicyConfig, Load, Request, Role, Row, Selector, WorkerKey};
//!
//! let config: DefaultPolicyConfig = serde_json::from_str(r#"{"temperature": 0.0}"#).unwrap();
//! let policy = config.build().unwrap();
//!
//! // Worker 1 holds 6 of the request's 8 blocks; worker 2 holds none but is idle.
//! let rows = [
//!     Row::new(WorkerKey::new(1, 0))
//!         .with_cache(Cache { device_blocks: 6, effective_blocks: 6.0, effective_tokens: 96, ..Cache::default() })
//!         .with_load(Load { active_decode_blocks: 4, ..Load::default() }),
//!     Row::new(WorkerKey::new(2, 0)).with_load(Load::default()),
//! ];
//! let request = Request::new(128, 16).role(Role::Aggregated).has_tier_matches(true);
//! let mut selector = Selector::<64>::new();
//! let selection = policy.select(&mut selector, &request, &rows).unwrap();
//! assert_eq!(selection.worker, WorkerKey::new(1, 0)); // 8 - 6 + 4 = 6 < 8
//! assert_eq!(selection.cost, 6.0);
//! ```
//!
//! # API themes
//!
//! - **Immutable policy, caller-owned scratch.** A [`Policy`] never changes after construction
//!   and is shared across threads; each thread owns a [`Selector`] holding buffers and the random
//!   stream. Selection has the shape `policy.select(&mut selector, &request, &rows)`.
//! - **Capacity errors, never truncation.** A [`Selector<N>`] has capacity `N`, checked at
//!   compile time to be usable; more than `N` rows is [`SelectError::CapacityExceeded`].
//! - **Declared inputs.** Each component declares the [`WorkerInputs`] it reads and sees only
//!   those; [`Policy::inputs`] tells a host whether it needs cache overlaps at all.
//! - **Determinism.** Costs are validated finite, ties are exact, randomness comes only from the
//!   selector's stream or a generator the caller passes. A seeded policy orders candidates by
//!   `(worker_id, dp_rank)` first, so picks replay whatever order rows are listed in.
//! - **Errors are values.** Every failure is a small `#[non_exhaustive]` enum implementing
//!   [`core::error::Error`] that names what was wrong: the row and field, the scorer and row, the
//!   knob.
//!
//! # Crate features
//!
//! - `std` (default): `exp` and `tanh` come from the platform's math library (glibc on Linux),
//!   the functions Dynamo's selector calls, so preferred-taint multipliers and temperature
//!   sampling match it bit for bit. Nothing else changes: the crate stays `#![no_std]` in its
//!   API and never allocates.
//!
//! Without `std` (`default-features = false`) the crate runs on bare metal and takes `exp` and
//! `tanh` from `libm`, which differ from glibc's in the last bits on some inputs (measured on
//! 10^6 inputs: `exp` on 6.9% of `[-1000, 0]`, `tanh` on 3.9% of `[-10, 10]`, by at most 3 ulp).
//! Costs without preferred taints are plain arithmetic and identical in both builds.
//!
//! The crate depends on `serde` (derive only, no `std`), `libm` and `rand_core` (so hosts can
//! bring their own generator).

// Why: the core must run inside any host, including bare-metal and kernel-adjacent ones.
#![no_std]
// Why: all unsafe code of the project lives in the ffi crate, where it is audited.
#![forbid(unsafe_code)]
// Why: every public item is part of a contract other languages mirror.
#![deny(missing_docs)]
// Why: hosts log libroute values; every type should print.
#![warn(missing_debug_implementations)]

// Why: with `std`, exp and tanh come from the platform, as in Dynamo (see `math`).
#[cfg(any(test, feature = "std"))]
extern crate std;

// The four layers, each using only those before it (ARCHITECTURE.md; `tests/layers.rs` checks).
mod engine;
mod host;
mod policies;
mod vocab;

pub use engine::rng;
pub use host::calibrate;
pub use host::snapshot;
pub use policies::catalog;
#[cfg(feature = "std")]
pub use policies::catalog_config;

pub use engine::{
    Admission, ComponentError, Disposition, Explanation, Filter, Filters, MAX_SCORERS, OnePass,
    Pick, PickInput, PickReason, Picker, Policy, PolicyError, RandomSource, Scorer, Scorers,
    SelectError, Selection, Selector, Verdict, WyRand,
};
pub use host::{
    BatchSummary, EngineBlock, EngineSlot, Events, IngestCounters, IngestError, KvBatch, KvIngest,
    Lora, MappedBlock, RemovedBlocks, SequenceCheck, SequenceStep, StoredBlocks, WireError,
    WireEvent, WireProblem,
};
pub use host::{
    BlockEntry, BlockHasher, BlockSlot, Fleet, FleetError, FleetPlace, HashError, IndexCounters,
    IndexError, KvEvent, Ledger, LedgerCounters, LedgerError, LedgerEvent, LoadSlot, Overlaps,
    Place, PredictionKey, PredictionRecord, PredictionSlot, Predictions, PrefixIndex, RequestEntry,
    RequestSlot, RouteError, Router, Slot, SnapshotError, SnapshotProblem, SnapshotReader,
    StorageError, TableKey, Tier, WorkerLoad, WorkerSlot, WorkerState,
};
pub use policies::{
    ConfigError, DefaultCost, DefaultKnobs, DefaultPicker, DefaultPolicy, DefaultPolicyConfig,
    Knob, Problem,
};
pub use vocab::{
    BlockRange, Cache, Candidates, Label, Leg, Load, PreferredTaint, Request, RequestError,
    RequestView, Role, Row, RowField, RowFlags, RowRule, RowView, SharedHits, Speed, Taint,
    TaintSet, WorkerInputs, WorkerKey,
};
