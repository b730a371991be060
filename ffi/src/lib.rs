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

// Why: this crate is the project's one audited home of unsafe code; every block says why it holds.
#![allow(
    unsafe_code,
    reason = "the C ABI needs raw pointers; each use carries a SAFETY comment"
)]
#![deny(unsafe_op_in_unsafe_fn)]
// Why: C names (`libroute_row`) are the contract; Rust naming would leak into the header.
#![allow(non_camel_case_types)]

mod status;

use std::ffi::{c_char, c_void};
use std::mem::{align_of, offset_of, size_of};

use libroute_core::catalog::CatalogPolicy;
use libroute_core::catalog_config::{self, CatalogError, PolicyConfig, PolicySetConfig};
use libroute_core::{
    BlockRange, Candidates, ComponentError, DefaultCost, DefaultPicker, DefaultPolicy,
    DefaultPolicyConfig, Disposition, Explanation, Filter, Filters, Leg, MAX_SCORERS, PickReason,
    Policy, PreferredTaint, Request, RequestView, Role, Row, RowView, Scorer, Scorers, SelectError,
    Selection, Selector, SharedHits, Taint, TaintSet, Verdict, WorkerInputs, WorkerKey,
};
pub use status::libroute_status;
use status::{boundary, fail, with_last_error};

/// The library version, `MAJOR.MINOR.PATCH`, equal to the Cargo package version.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// Bit of a `WorkerInputs` set: overlap per tier, the estimate, tier matches, shared hits.
pub const LIBROUTE_INPUT_CACHE: u8 = 1;
/// Bit of a `WorkerInputs` set: the load projection.
pub const LIBROUTE_INPUT_LOAD: u8 = 2;
/// Bit of a `WorkerInputs` set: the worker's taints and the preferred-taint multiplier.
pub const LIBROUTE_INPUT_PREFERRED_TAINT: u8 = 4;
/// Input group bit: the worker's measured speed (`LIBROUTE_ROW_HAS_SPEED` fields).
pub const LIBROUTE_INPUT_SPEED: u8 = 8;
/// Input group bit: cache overlaps that count the blocks of requests routed to a worker and not
/// yet computed there (a router records them: `libroute_router_route_at` with `pending_ttl_ms`).
pub const LIBROUTE_INPUT_PENDING: u8 = 16;

/// `libroute_row.flags` bit: the cache fields are meaningful (else they read as zeros).
pub const LIBROUTE_ROW_HAS_CACHE: u32 = 1;
/// `libroute_row.flags` bit: the load projection is available (else it reads as zeros).
pub const LIBROUTE_ROW_HAS_LOAD: u32 = 2;
/// `libroute_row.flags` bit: the host marks the worker overloaded; it is skipped.
pub const LIBROUTE_ROW_OVERLOADED: u32 = 4;
/// `libroute_row.flags` bit: the speed fields are meaningful (else the row has no speed).
pub const LIBROUTE_ROW_HAS_SPEED: u32 = 8;

/// The largest capacity `libroute_selector_new` accepts.
pub const LIBROUTE_MAX_CAPACITY: usize = 4096;

/// A worker and its data-parallel rank.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct libroute_worker {
    /// The worker's id.
    pub worker_id: u64,
    /// The data-parallel rank (0 for a single-rank worker).
    pub dp_rank: u32,
}

/// One candidate worker, filled by the host in its own memory and read in place.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_row {
    /// The worker and rank this row stands for.
    pub worker: libroute_worker,
    /// The worker's taints: bit `i` set for taint index `i` (0 to 63).
    pub taints: u64,
    /// `LIBROUTE_ROW_*` bits; any other bit is an error.
    pub flags: u32,
    /// Leading request blocks held in device memory (with `LIBROUTE_ROW_HAS_CACHE`).
    pub device_blocks: u32,
    /// Leading request blocks held in host memory.
    pub host_blocks: u32,
    /// Leading request blocks held on disk.
    pub disk_blocks: u32,
    /// The accounting estimate in blocks; finite and >= 0 when the row has a cache entry.
    pub effective_blocks: f64,
    /// The accounting estimate in tokens.
    pub effective_tokens: u64,
    /// Prefill tokens queued or running on the worker (with `LIBROUTE_ROW_HAS_LOAD`).
    pub active_prefill_tokens: u64,
    /// Active decode blocks, including this request's new blocks not already shared there.
    pub active_decode_blocks: u64,
    /// Active requests.
    pub active_requests: u64,
    /// With `LIBROUTE_ROW_HAS_SPEED`: the fixed part of the worker's first-token time, ms
    /// (finite, >= 0).
    pub base_ms: f64,
    /// With `LIBROUTE_ROW_HAS_SPEED`: first-token ms per prefill token queued or computed there.
    pub ms_per_prefill_token: f64,
    /// With `LIBROUTE_ROW_HAS_SPEED`: first-token ms per request active there.
    pub ms_per_active_request: f64,
}

// The C row is the core row, field for field: rows are passed to the core without copying.
const _: () = {
    assert!(size_of::<libroute_row>() == size_of::<Row>());
    assert!(align_of::<libroute_row>() == align_of::<Row>());
    assert!(offset_of!(libroute_row, worker) == offset_of!(Row, worker));
    assert!(offset_of!(libroute_worker, worker_id) == offset_of!(WorkerKey, worker_id));
    assert!(offset_of!(libroute_worker, dp_rank) == offset_of!(WorkerKey, dp_rank));
    assert!(size_of::<libroute_worker>() == size_of::<WorkerKey>());
    assert!(offset_of!(libroute_row, taints) == offset_of!(Row, taints));
    assert!(offset_of!(libroute_row, flags) == offset_of!(Row, flags));
    assert!(offset_of!(libroute_row, device_blocks) == offset_of!(Row, device_blocks));
    assert!(offset_of!(libroute_row, host_blocks) == offset_of!(Row, host_blocks));
    assert!(offset_of!(libroute_row, disk_blocks) == offset_of!(Row, disk_blocks));
    assert!(offset_of!(libroute_row, effective_blocks) == offset_of!(Row, effective_blocks));
    assert!(offset_of!(libroute_row, effective_tokens) == offset_of!(Row, effective_tokens));
    assert!(
        offset_of!(libroute_row, active_prefill_tokens) == offset_of!(Row, active_prefill_tokens)
    );
    assert!(
        offset_of!(libroute_row, active_decode_blocks) == offset_of!(Row, active_decode_blocks)
    );
    assert!(offset_of!(libroute_row, active_requests) == offset_of!(Row, active_requests));
    assert!(offset_of!(libroute_row, base_ms) == offset_of!(Row, base_ms));
    assert!(
        offset_of!(libroute_row, ms_per_prefill_token) == offset_of!(Row, ms_per_prefill_token)
    );
    assert!(
        offset_of!(libroute_row, ms_per_active_request) == offset_of!(Row, ms_per_active_request)
    );
    assert!(size_of::<libroute_block_range>() == size_of::<BlockRange>());
    assert!(offset_of!(libroute_block_range, end) == offset_of!(BlockRange, end));
};

/// A preferred taint: matching workers get the multiplier `exp(-tanh(sum of weights))`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_preferred_taint {
    /// The taint index, 0 to 63.
    pub taint: u32,
    /// Its weight: positive attracts, negative repels; must be finite.
    pub weight: f64,
}

/// A half-open range `[start, end)` of block positions found in a shared cache.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_block_range {
    /// First block position.
    pub start: u64,
    /// One past the last block position.
    pub end: u64,
}

/// The role of the pool a selection is for.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum libroute_role {
    /// Prefill workers of disaggregated serving.
    Prefill = 0,
    /// Decode workers of disaggregated serving.
    Decode = 1,
    /// Workers that prefill and decode.
    Aggregated = 2,
    /// Encoder workers.
    Encode = 3,
}

/// One request. Booleans are `uint8_t` and must be 0 or 1.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_request {
    /// Prompt length in tokens.
    pub prompt_tokens: u64,
    /// KV block size in tokens; at least 1.
    pub block_size: u32,
    /// A `libroute_role` value.
    pub role: u32,
    /// Whether the request's prefill tokens are tracked (0 on a disaggregated decode leg).
    pub track_prefill_tokens: u8,
    /// Whether conditional disaggregation is on.
    pub conditional_disagg: u8,
    /// Whether the request has any tier overlap entry, even for an ineligible worker.
    pub has_tier_matches: u8,
    /// Whether `pin` is set.
    pub has_pin: u8,
    /// Whether `shared_hits` is set (an empty list with this set means "none found").
    pub has_shared_hits: u8,
    /// The worker the request must go to, when `has_pin` is 1.
    pub pin: libroute_worker,
    /// Taints a worker must carry to be eligible (bit `i` = taint `i`).
    pub required_taints: u64,
    /// Preferred taints, `preferred_taints_len` of them (at most 64); may be NULL when 0.
    pub preferred_taints: *const libroute_preferred_taint,
    /// Number of preferred taints.
    pub preferred_taints_len: usize,
    /// Sorted, disjoint, non-empty block ranges; may be NULL when the length is 0.
    pub shared_hits: *const libroute_block_range,
    /// Number of shared-hit ranges.
    pub shared_hits_len: usize,
    /// Whether `session` is set.
    pub has_session: u8,
    /// The conversation or session the request belongs to, when `has_session` is 1 (read by
    /// the catalog's session-affinity scorer).
    pub session: u64,
}

/// Why the chosen row was chosen.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum libroute_reason {
    /// The request was pinned; no random draw was made.
    Pinned = 0,
    /// The minimum cost; `ties` rows shared it and one was drawn uniformly.
    MinCost = 1,
    /// Drawn by temperature sampling with `probability`.
    Sampled = 2,
    /// A custom picker's choice.
    Custom = 3,
}

/// The outcome of one selection.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct libroute_selection {
    /// Index of the chosen row in the caller's array.
    pub row: usize,
    /// The chosen worker and rank.
    pub worker: libroute_worker,
    /// Its total cost.
    pub cost: f64,
    /// How many candidates survived filtering.
    pub candidates: usize,
    /// How many scorers contributed (the length of the contributions).
    pub scorers: usize,
    /// A `libroute_reason` value.
    pub reason: u32,
    /// With `LIBROUTE_REASON_MIN_COST`: how many candidates had the minimum cost.
    pub ties: u32,
    /// With `LIBROUTE_REASON_SAMPLED`: the chosen row's probability.
    pub probability: f64,
    /// The request's size in blocks, at least 1.
    pub request_blocks: u64,
    /// The chosen row's cached-token estimate, 0 when the policy does not use cache.
    pub cached_tokens: u64,
}

/// What a filter callback says about one row.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum libroute_verdict {
    /// Keep the row.
    Keep = 0,
    /// Remove it.
    Reject = 1,
    /// Remove it as overloaded.
    Overloaded = 2,
}

/// The request fields every component may see, passed to callbacks.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_request_info {
    /// Prompt length in tokens.
    pub prompt_tokens: u64,
    /// Block size in tokens.
    pub block_size: u32,
    /// A `libroute_role` value.
    pub role: u32,
    /// Request size in blocks, at least 1.
    pub request_blocks: u64,
    /// 1 if prefill tokens are tracked.
    pub track_prefill_tokens: u8,
    /// 1 if the request is pinned.
    pub pinned: u8,
}

/// A filter callback: decide about `row` and write a `libroute_verdict` to `*verdict`. Return 0,
/// or a non-zero code to fail the selection with `LIBROUTE_STATUS_FILTER_FAILED`.
pub type libroute_filter_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        request: *const libroute_request_info,
        row: *const libroute_row,
        verdict: *mut u32,
    ) -> i32,
>;

/// A scorer callback: write `costs[k]` for candidate `k`, whose row is `rows[order[k]]`, for
/// `k < len`. `costs` arrives filled with NaN; an unwritten, NaN or infinite cost fails the
/// selection with `LIBROUTE_STATUS_NON_FINITE_COST`. Return 0, or a non-zero code to fail it with
/// `LIBROUTE_STATUS_SCORER_FAILED`.
pub type libroute_scorer_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        request: *const libroute_request_info,
        rows: *const libroute_row,
        order: *const u32,
        len: usize,
        costs: *mut f64,
    ) -> i32,
>;

/// A custom filter: a callback, its user data, and the `LIBROUTE_INPUT_*` bits it reads.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_filter {
    /// The callback; must not be NULL.
    pub callback: libroute_filter_fn,
    /// Passed to every call; libroute never dereferences it.
    pub user_data: *mut c_void,
    /// The input groups the callback reads.
    pub inputs: u8,
}

/// A custom scorer: a callback, its user data, and the `LIBROUTE_INPUT_*` bits it reads. Its costs
/// are added to the default cost.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_scorer {
    /// The callback; must not be NULL.
    pub callback: libroute_scorer_fn,
    /// Passed to every call; libroute never dereferences it.
    pub user_data: *mut c_void,
    /// The input groups the callback reads.
    pub inputs: u8,
}

fn info(request: &RequestView<'_>) -> libroute_request_info {
    libroute_request_info {
        prompt_tokens: request.prompt_tokens(),
        block_size: request.block_size(),
        role: request.role() as u32,
        request_blocks: request.request_blocks(),
        track_prefill_tokens: u8::from(request.track_prefill_tokens()),
        pinned: u8::from(request.is_pinned()),
    }
}

/// Code a filter failure carries when the callback wrote an undefined verdict.
const UNDEFINED_VERDICT: i32 = i32::MIN;

/// A C filter, callable from any thread the host allows.
struct CFilter {
    callback: unsafe extern "C" fn(
        *mut c_void,
        *const libroute_request_info,
        *const libroute_row,
        *mut u32,
    ) -> i32,
    user_data: *mut c_void,
    inputs: WorkerInputs,
}

// SAFETY: libroute never dereferences `user_data`; the header documents that sharing a policy with
// callbacks across threads requires thread-safe callbacks, which is the host's promise.
unsafe impl Send for CFilter {}
// SAFETY: as above.
unsafe impl Sync for CFilter {}

impl Filter for CFilter {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        self.inputs
    }

    fn check(
        &self,
        request: &RequestView<'_>,
        row: &RowView<'_>,
    ) -> Result<Verdict, ComponentError> {
        let info = info(request);
        let mut verdict = u32::MAX;
        let row: *const Row = row.raw();
        // SAFETY: the callback was non-NULL at construction; the pointers are valid for the call
        // (a local, a row of the caller's own array with the same layout, a local out-parameter).
        let code = unsafe {
            (self.callback)(
                self.user_data,
                &raw const info,
                row.cast(),
                &raw mut verdict,
            )
        };
        if code != 0 {
            return Err(ComponentError { code });
        }
        match verdict {
            0 => Ok(Verdict::Keep),
            1 => Ok(Verdict::Reject),
            2 => Ok(Verdict::Overloaded),
            _ => Err(ComponentError {
                code: UNDEFINED_VERDICT,
            }),
        }
    }
}

/// A C scorer.
struct CScorer {
    callback: unsafe extern "C" fn(
        *mut c_void,
        *const libroute_request_info,
        *const libroute_row,
        *const u32,
        usize,
        *mut f64,
    ) -> i32,
    user_data: *mut c_void,
    inputs: WorkerInputs,
}

// SAFETY: as for `CFilter`.
unsafe impl Send for CScorer {}
// SAFETY: as for `CFilter`.
unsafe impl Sync for CScorer {}

/// The scorers an ABI policy sums: the default cost, then any C scorers.
enum AnyScorer {
    Default(DefaultCost),
    C(CScorer),
}

impl Scorer for AnyScorer {
    fn inputs(&self, leg: Leg) -> WorkerInputs {
        match self {
            AnyScorer::Default(d) => d.inputs(leg),
            AnyScorer::C(c) => c.inputs,
        }
    }

    fn score(
        &self,
        request: &RequestView<'_>,
        candidates: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        match self {
            AnyScorer::Default(d) => d.score(request, candidates, costs),
            AnyScorer::C(c) => {
                let info = info(request);
                let (rows, order) = candidates.raw();
                // SAFETY: the callback was non-NULL at construction; `rows` and `order` are valid
                // for `rows.len()` and `costs.len()` (== order.len()) elements during the call, and
                // `libroute_row` has `Row`'s layout (checked at compile time above).
                let code = unsafe {
                    (c.callback)(
                        c.user_data,
                        &raw const info,
                        rows.as_ptr().cast(),
                        order.as_ptr(),
                        costs.len(),
                        costs.as_mut_ptr(),
                    )
                };
                if code == 0 {
                    Ok(())
                } else {
                    Err(ComponentError { code })
                }
            }
        }
    }
}

struct AbiFilters(Vec<CFilter>);
struct AbiScorers(Vec<AnyScorer>);

impl Filters for AbiFilters {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn get(&self, i: usize) -> Option<&dyn Filter> {
        self.0.get(i).map(|f| f as &dyn Filter)
    }
}

impl Scorers for AbiScorers {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn get(&self, i: usize) -> Option<&dyn Scorer> {
        self.0.get(i).map(|s| s as &dyn Scorer)
    }
}

/// A policy with custom C components.
type ComposedPolicy = Policy<AbiFilters, AbiScorers, DefaultPicker>;

/// The policy behind a handle: the plain default policy keeps the core's monomorphized type (the
/// same machine code as a Rust caller's), a policy with callbacks is composed dynamically.
pub(crate) enum AbiPolicy {
    Default(DefaultPolicy),
    Composed(ComposedPolicy),
    /// A policy of the catalog, configured by type (`{"type": ...}`); boxed because its fixed
    /// component storage is some 5 KB.
    Catalog(Box<CatalogPolicy>),
}

/// Runs `$body` with `$p` bound to the concrete policy behind an [`AbiPolicy`].
macro_rules! with_policy {
    ($policy:expr, $p:ident => $body:expr) => {
        match $policy {
            AbiPolicy::Default($p) => $body,
            AbiPolicy::Composed($p) => $body,
            AbiPolicy::Catalog($p) => $body,
        }
    };
}

impl AbiPolicy {
    fn scorer_count(&self) -> usize {
        with_policy!(self, p => p.scorers().len())
    }

    fn inputs(&self, leg: Leg) -> WorkerInputs {
        with_policy!(self, p => p.inputs(leg))
    }

    fn select<const N: usize>(
        &self,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        rows: &[Row],
    ) -> Result<Selection, SelectError> {
        with_policy!(self, p => p.select(selector, request, rows))
    }

    fn select_explained<const N: usize>(
        &self,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        rows: &[Row],
        out: &mut [Explanation],
    ) -> Result<Selection, SelectError> {
        with_policy!(self, p => p.select_explained(selector, request, rows, out))
    }
}

/// An immutable policy: the default cost and picker configured by JSON, plus any custom filters
/// and scorers. Create with `libroute_policy_new` or `libroute_policy_new_default`; free with
/// `libroute_policy_free`.
#[derive(Debug)]
pub struct libroute_policy {
    _private: [u8; 0],
}

/// Per-thread selection scratch: buffers of a fixed capacity and the random stream. Create with
/// `libroute_selector_new`; free with `libroute_selector_free`.
#[derive(Debug)]
pub struct libroute_selector {
    _private: [u8; 0],
}

/// The selector's capacity tiers: a selector is a core `Selector<N>` for the smallest tier that
/// holds the requested capacity.
pub(crate) enum AnySelector {
    S16(Box<Selector<16>>),
    S64(Box<Selector<64>>),
    S256(Box<Selector<256>>),
    S1024(Box<Selector<1024>>),
    S4096(Box<Selector<4096>>),
}

macro_rules! with_selector {
    ($sel:expr, $s:ident => $body:expr) => {
        match $sel {
            AnySelector::S16($s) => $body,
            AnySelector::S64($s) => $body,
            AnySelector::S256($s) => $body,
            AnySelector::S1024($s) => $body,
            AnySelector::S4096($s) => $body,
        }
    };
}

/// The selector behind a handle, with the capacity the caller asked for.
pub(crate) struct SelectorBox {
    pub(crate) inner: AnySelector,
    pub(crate) capacity: usize,
    /// Explanations of `libroute_select_explained`, allocated on its first use (to the
    /// capacity) and reused after.
    pub(crate) explanations: Vec<Explanation>,
}

impl SelectorBox {
    /// Checks that `rows` rows fit the capacity the caller asked for.
    pub(crate) fn check_rows(&self, rows: usize) -> Result<(), libroute_status> {
        if rows > self.capacity {
            return Err(fail(
                libroute_status::CapacityExceeded,
                format_args!(
                    "{rows} rows exceed the selector's capacity of {}",
                    self.capacity
                ),
            ));
        }
        Ok(())
    }
}

/// Returns `$status` (with a detail message) if `$ptr` is NULL.
macro_rules! non_null {
    ($ptr:expr, $name:literal) => {
        if $ptr.is_null() {
            return fail(libroute_status::NullArgument, concat!($name, " is NULL"));
        }
    };
}

/// Parses the knobs JSON of a default policy; errors are recorded with their detail.
fn parse_config(json: &[u8]) -> Result<DefaultPolicyConfig, libroute_status> {
    parse_json(json)
}

/// Parses a configuration; errors are recorded with their detail (an unknown key or type gives
/// `UNKNOWN_KEY`, anything else `INVALID_JSON`), classified by the error's kind, not its text.
fn parse_json<T: serde::de::DeserializeOwned>(json: &[u8]) -> Result<T, libroute_status> {
    let text = std::str::from_utf8(json).map_err(|e| {
        fail(
            libroute_status::InvalidJson,
            format_args!("configuration is not UTF-8: {e}"),
        )
    })?;
    catalog_config::parse::<T>(text).map_err(|e| {
        let status = if e.is_unknown_name() {
            libroute_status::UnknownKey
        } else {
            libroute_status::InvalidJson
        };
        fail(status, format_args!("configuration: {e}"))
    })
}

/// The status of a catalog configuration that parsed but does not build: too many components,
/// or a value out of range.
fn catalog_status(e: &CatalogError) -> libroute_status {
    match e.innermost() {
        CatalogError::TooMany { .. } => libroute_status::TooManyComponents,
        _ => libroute_status::InvalidKnob,
    }
}

/// Whether `json` is a catalog policy: an object with a `"type"` key (the default policy's knobs
/// have none).
fn is_catalog(json: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(json)
        .is_ok_and(|object| object.contains_key("type"))
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

/// Builds a catalog policy from its JSON (`{"type": ...}`).
fn catalog_policy(json: &[u8]) -> Result<Box<AbiPolicy>, libroute_status> {
    let config: PolicyConfig = parse_json(json)?;
    let policy = config
        .build()
        .map_err(|e| fail(catalog_status(&e), format_args!("policy: {e}")))?;
    Ok(Box::new(AbiPolicy::Catalog(Box::new(policy))))
}

/// Builds the policy: the default knobs from `json` plus C components.
///
/// # Safety
///
/// Pointer arguments as documented on `libroute_policy_new_with_components`.
unsafe fn build_policy(
    json: *const c_char,
    json_len: usize,
    filters: *const libroute_filter,
    filters_len: usize,
    scorers: *const libroute_scorer,
    scorers_len: usize,
) -> Result<Box<AbiPolicy>, libroute_status> {
    // SAFETY: the caller's contract: `json` holds `json_len` bytes when non-NULL.
    let json = unsafe { slice(json.cast::<u8>(), json_len) }.ok_or_else(|| {
        fail(
            libroute_status::NullArgument,
            "json is NULL with a non-zero length",
        )
    })?;
    if is_catalog(json) {
        if filters_len != 0 || scorers_len != 0 {
            return Err(fail(
                libroute_status::InvalidArgument,
                "custom components compose with the default policy's knobs, not with a catalog \
                 policy (a JSON object with \"type\")",
            ));
        }
        return catalog_policy(json);
    }
    let config = if json.is_empty() {
        DefaultPolicyConfig::default()
    } else {
        parse_config(json)?
    };
    let knobs = config.knobs().map_err(|e| fail((&e).into(), e))?;
    // SAFETY: the caller's contract for both arrays.
    let (filters, scorers) = unsafe { (slice(filters, filters_len), slice(scorers, scorers_len)) };
    let filters = filters.ok_or_else(|| {
        fail(
            libroute_status::NullArgument,
            "filters is NULL with a non-zero length",
        )
    })?;
    let scorers = scorers.ok_or_else(|| {
        fail(
            libroute_status::NullArgument,
            "scorers is NULL with a non-zero length",
        )
    })?;
    if filters.is_empty() && scorers.is_empty() {
        return knobs
            .build()
            .map(|p| Box::new(AbiPolicy::Default(p)))
            .map_err(|e| fail((&e).into(), e));
    }
    if 1 + scorers.len() > MAX_SCORERS {
        return Err(fail(
            libroute_status::TooManyComponents,
            format_args!(
                "{} custom scorers: a policy sums at most {} with the default cost",
                scorers.len(),
                MAX_SCORERS - 1
            ),
        ));
    }
    let inputs = |bits: u8, what: &str, i: usize| {
        WorkerInputs::from_bits(bits).ok_or_else(|| {
            fail(
                libroute_status::InvalidArgument,
                format_args!("{what} {i} declares undefined input bits {bits:#x}"),
            )
        })
    };
    let mut c_filters = Vec::with_capacity(filters.len());
    for (i, f) in filters.iter().enumerate() {
        let callback = f.callback.ok_or_else(|| {
            fail(
                libroute_status::NullArgument,
                format_args!("filter {i} has a NULL callback"),
            )
        })?;
        c_filters.push(CFilter {
            callback,
            user_data: f.user_data,
            inputs: inputs(f.inputs, "filter", i)?,
        });
    }
    let mut all_scorers = vec![AnyScorer::Default(knobs.cost)];
    for (i, s) in scorers.iter().enumerate() {
        let callback = s.callback.ok_or_else(|| {
            fail(
                libroute_status::NullArgument,
                format_args!("scorer {i} has a NULL callback"),
            )
        })?;
        all_scorers.push(AnyScorer::C(CScorer {
            callback,
            user_data: s.user_data,
            inputs: inputs(s.inputs, "scorer", i)?,
        }));
    }
    let policy = Policy::new(
        AbiFilters(c_filters),
        AbiScorers(all_scorers),
        DefaultPicker {
            temperature: knobs.temperature,
        },
    )
    .map_err(|e| fail(libroute_status::TooManyComponents, e))?
    .with_seed(knobs.seed);
    Ok(Box::new(AbiPolicy::Composed(policy)))
}

/// Creates the default policy from JSON configuration: an object of the default policy's knobs
/// (`overlap_score_credit`, `overlap_score_credit_decay`, `prefill_load_scale`,
/// `decode_active_request_weight`, `host_cache_hit_weight`, `disk_cache_hit_weight`,
/// `shared_cache_multiplier`, `temperature`, `seed`, and the legacy `overlap_score_weight`), as
/// UTF-8 bytes `json[0..json_len]` (no terminating NUL needed). An empty text means all defaults.
///
/// On success `*out` owns a new policy: free it with `libroute_policy_free`.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_JSON`, `UNKNOWN_KEY` (the detail names the key),
/// `INVALID_KNOB` (the detail names the knob and its range).
///
/// # Safety
///
/// `json` must point to `json_len` readable bytes (it may be NULL when `json_len` is 0); `out` must
/// be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_new(
    json: *const c_char,
    json_len: usize,
    out: *mut *mut libroute_policy,
) -> libroute_status {
    // SAFETY: forwarded under this function's own contract, with no components.
    unsafe {
        libroute_policy_new_with_components(
            json,
            json_len,
            std::ptr::null(),
            0,
            std::ptr::null(),
            0,
            out,
        )
    }
}

/// Creates the default policy with every knob at its default. On success `*out` owns a new
/// policy: free it with `libroute_policy_free`.
///
/// # Safety
///
/// `out` must be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_new_default(
    out: *mut *mut libroute_policy,
) -> libroute_status {
    // SAFETY: an empty configuration and no components; `out` under this function's contract.
    unsafe { libroute_policy_new(std::ptr::null(), 0, out) }
}

/// Creates a policy: the default cost and picker configured by `json` (as in
/// `libroute_policy_new`), the `filters` run in order before scoring, and the `scorers` whose
/// costs are added to the default cost (at most 7). The arrays are copied; the callbacks and
/// their `user_data` must stay valid until the policy is freed.
///
/// On success `*out` owns a new policy: free it with `libroute_policy_free`.
///
/// # Safety
///
/// `json` as in `libroute_policy_new`; `filters` and `scorers` must point to `filters_len` and
/// `scorers_len` elements (NULL allowed for length 0); `out` must be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_new_with_components(
    json: *const c_char,
    json_len: usize,
    filters: *const libroute_filter,
    filters_len: usize,
    scorers: *const libroute_scorer,
    scorers_len: usize,
    out: *mut *mut libroute_policy,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        // SAFETY: forwarded under this function's contract.
        match unsafe { build_policy(json, json_len, filters, filters_len, scorers, scorers_len) } {
            Ok(policy) => {
                // SAFETY: `out` is non-NULL and, by contract, valid for a write.
                unsafe { out.write(Box::into_raw(policy).cast()) };
                libroute_status::Ok
            }
            Err(status) => status,
        }
    })
}

/// Frees a policy. `NULL` does nothing.
///
/// # Safety
///
/// `policy` must be NULL or a pointer returned by a `libroute_policy_new*` function that has not
/// been freed, and no other thread may be using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_free(policy: *mut libroute_policy) {
    // SAFETY: by contract the pointer is NULL or came from `Box::into_raw` of an `AbiPolicy`.
    unsafe { free_handle(policy.cast::<AbiPolicy>()) };
}

/// Frees a handle made by `Box::into_raw` of a `T`, inside the panic boundary; NULL does
/// nothing. Every `_free` function is this for its own type.
///
/// # Safety
///
/// `handle` must be NULL or come from `Box::into_raw` of a `Box<T>`, not freed before and not in
/// use elsewhere.
pub(crate) unsafe fn free_handle<T>(handle: *mut T) {
    let _ = boundary(|| {
        if !handle.is_null() {
            // SAFETY: by this function's contract, a live `Box<T>` pointer freed once, here.
            drop(unsafe { Box::from_raw(handle) });
        }
        libroute_status::Ok
    });
}

/// # Safety
///
/// `policy` must be NULL or a live handle from `libroute_policy_new*`.
pub(crate) unsafe fn policy_ref<'a>(policy: *const libroute_policy) -> Option<&'a AbiPolicy> {
    // SAFETY: a live handle points to an `AbiPolicy` (it was created as one).
    unsafe { policy.cast::<AbiPolicy>().as_ref() }
}

#[inline]
fn role(value: u32) -> Result<Role, libroute_status> {
    Role::from_u32(value).ok_or_else(|| not_a_role(value))
}

#[cold]
#[inline(never)]
fn not_a_role(value: u32) -> libroute_status {
    fail(
        libroute_status::InvalidArgument,
        format_args!("role {value} is not a libroute_role"),
    )
}

#[inline]
fn flag(value: u8, name: &str) -> Result<bool, libroute_status> {
    if value <= 1 {
        Ok(value == 1)
    } else {
        Err(not_a_flag(value, name))
    }
}

#[cold]
#[inline(never)]
fn not_a_flag(value: u8, name: &str) -> libroute_status {
    fail(
        libroute_status::InvalidArgument,
        format_args!("{name} is {value}, not 0 or 1"),
    )
}

/// Writes the union of the input groups the policy's components read for a request of `role`
/// (and conditional disaggregation) as `LIBROUTE_INPUT_*` bits to `*out`. Without
/// `LIBROUTE_INPUT_CACHE` the host need not compute cache overlaps for such requests.
///
/// # Safety
///
/// `policy` must be a live policy; `out` valid for a byte write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_inputs(
    policy: *const libroute_policy,
    role: u32,
    conditional_disagg: u8,
    out: *mut u8,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        // SAFETY: by contract `policy` is NULL or live.
        let Some(policy) = (unsafe { policy_ref(policy) }) else {
            return fail(libroute_status::NullArgument, "policy is NULL");
        };
        let leg = match (
            self::role(role),
            flag(conditional_disagg, "conditional_disagg"),
        ) {
            (Ok(role), Ok(conditional_disagg)) => Leg {
                role,
                conditional_disagg,
            },
            (Err(s), _) | (_, Err(s)) => return s,
        };
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(policy.inputs(leg).bits()) };
        libroute_status::Ok
    })
}

/// Creates a selector for up to `capacity` rows (1 to `LIBROUTE_MAX_CAPACITY`); its unseeded
/// random stream starts from `entropy` (give each thread its own). On success `*out` owns it:
/// free it with `libroute_selector_free`. Selecting allocates nothing afterwards.
///
/// # Safety
///
/// `out` must be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_selector_new(
    capacity: usize,
    entropy: u64,
    out: *mut *mut libroute_selector,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        let inner = match capacity {
            0 => return fail(libroute_status::InvalidArgument, "capacity is 0"),
            1..=16 => AnySelector::S16(Box::new(Selector::with_entropy(entropy))),
            17..=64 => AnySelector::S64(Box::new(Selector::with_entropy(entropy))),
            65..=256 => AnySelector::S256(Box::new(Selector::with_entropy(entropy))),
            257..=1024 => AnySelector::S1024(Box::new(Selector::with_entropy(entropy))),
            1025..=LIBROUTE_MAX_CAPACITY => {
                AnySelector::S4096(Box::new(Selector::with_entropy(entropy)))
            }
            _ => {
                return fail(
                    libroute_status::CapacityExceeded,
                    format_args!(
                        "capacity {capacity} exceeds LIBROUTE_MAX_CAPACITY ({LIBROUTE_MAX_CAPACITY})"
                    ),
                );
            }
        };
        let selector = Box::new(SelectorBox {
            inner,
            capacity,
            explanations: Vec::new(),
        });
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(Box::into_raw(selector).cast()) };
        libroute_status::Ok
    })
}

/// Frees a selector. `NULL` does nothing.
///
/// # Safety
///
/// `selector` must be NULL or a live handle from `libroute_selector_new`, not in use elsewhere.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_selector_free(selector: *mut libroute_selector) {
    // SAFETY: by contract the pointer is NULL or came from `Box::into_raw` of a `SelectorBox`.
    unsafe { free_handle(selector.cast::<SelectorBox>()) };
}

/// Restarts the seeded stream: the next seeded selection draws as the first did.
///
/// # Safety
///
/// `selector` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_selector_reset_seeded(
    selector: *mut libroute_selector,
) -> libroute_status {
    boundary(|| {
        // SAFETY: NULL or a live, unshared `SelectorBox` by contract.
        let Some(selector) = (unsafe { selector.cast::<SelectorBox>().as_mut() }) else {
            return fail(libroute_status::NullArgument, "selector is NULL");
        };
        with_selector!(&mut selector.inner, s => s.reset_seeded());
        libroute_status::Ok
    })
}

pub(crate) fn select_error(e: &SelectError) -> libroute_status {
    let status = libroute_status::from(e);
    match e {
        SelectError::FilterFailed { filter, error } if error.code == UNDEFINED_VERDICT => fail(
            status,
            format_args!("filter {filter} wrote a verdict that is not a libroute_verdict"),
        ),
        _ => fail(status, e),
    }
}

/// The handles and arrays every selecting function reads, checked for NULL.
///
/// # Errors
///
/// `NULL_ARGUMENT` naming the argument.
///
/// # Safety
///
/// As `libroute_select` for `policy`, `selector`, `request` and `rows`; the returned references
/// must not outlive the call that received the pointers.
unsafe fn selection_args<'a>(
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
    rows: *const libroute_row,
    rows_len: usize,
) -> Result<
    (
        &'a AbiPolicy,
        &'a mut SelectorBox,
        &'a libroute_request,
        &'a [Row],
    ),
    libroute_status,
> {
    if request.is_null() {
        return Err(fail(libroute_status::NullArgument, "request is NULL"));
    }
    // SAFETY: NULL or live by contract.
    let Some(policy) = (unsafe { policy_ref(policy) }) else {
        return Err(fail(libroute_status::NullArgument, "policy is NULL"));
    };
    // SAFETY: NULL or a live `SelectorBox` not used concurrently, by contract.
    let Some(selector) = (unsafe { selector.cast::<SelectorBox>().as_mut() }) else {
        return Err(fail(libroute_status::NullArgument, "selector is NULL"));
    };
    // SAFETY: non-NULL (checked) and valid by contract.
    let request = unsafe { &*request };
    // SAFETY: `rows` holds `rows_len` rows by contract; `libroute_row` has `Row`'s layout and every
    // bit pattern is a valid `Row`, so the cast reads the host's memory in place.
    let Some(rows) = (unsafe { slice(rows.cast::<Row>(), rows_len) }) else {
        return Err(fail(
            libroute_status::NullArgument,
            "rows is NULL with a non-zero length",
        ));
    };
    Ok((policy, selector, request, rows))
}

/// Selects one row for `request` among `rows[0..rows_len]` (read in place). On success writes
/// `*out`, and, when `contributions` is not NULL, each scorer's contribution to the chosen row's
/// cost (the default cost first, then custom scorers) into `contributions[0..out->scorers]`.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` (role, booleans); `BUFFER_TOO_SMALL` when
/// `contributions_len` is below the policy's scorer count (checked before selecting);
/// `CAPACITY_EXCEEDED` for more rows than the selector's capacity; and the selection errors
/// (300-399), each with a detail naming the row, scorer or worker.
///
/// # Safety
///
/// `policy` and `selector` must be live handles, the selector not used concurrently; `request`
/// must point to a valid `libroute_request` whose arrays are valid for their lengths; `rows` must
/// point to `rows_len` rows (NULL allowed for 0); `out` must be valid for a write;
/// `contributions`, when not NULL, must be valid for `contributions_len` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_select(
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
    rows: *const libroute_row,
    rows_len: usize,
    out: *mut libroute_selection,
    contributions: *mut f64,
    contributions_len: usize,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        // SAFETY: forwarded under this function's contract.
        let (policy, selector, request, rows) =
            match unsafe { selection_args(policy, selector, request, rows, rows_len) } {
                Ok(args) => args,
                Err(status) => return status,
            };
        let scorers = policy.scorer_count();
        if !contributions.is_null() && contributions_len < scorers {
            return fail(
                libroute_status::BufferTooSmall,
                format_args!(
                    "contributions holds {contributions_len} values, the policy has {scorers} scorers"
                ),
            );
        }
        if let Err(status) = selector.check_rows(rows.len()) {
            return status;
        }
        // The selection is written out where it is made, not returned through the closures
        // (it is about 150 bytes; the copies were a measurable part of the call).
        let write = |selection: &Result<Selection, SelectError>| match selection {
            Ok(selection) => {
                // SAFETY: `out` is non-NULL and valid for a write by contract.
                unsafe { out.write(to_c(selection)) };
                if !contributions.is_null() {
                    let parts = selection.contributions();
                    // SAFETY: `contributions` is valid for `contributions_len >= parts.len()`
                    // writes (checked above), and does not overlap our local `parts`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(parts.as_ptr(), contributions, parts.len());
                    };
                }
                libroute_status::Ok
            }
            Err(e) => select_error(e),
        };
        // SAFETY: the request's arrays are valid for their lengths by contract.
        let converted = unsafe {
            with_core_request(
                request,
                |core_request| with_selector!(&mut selector.inner, s => write(&policy.select(s, core_request, rows))),
            )
        };
        converted.unwrap_or_else(|status| status)
    })
}

/// Runs `f` on the core request converted from `request`, with the storage its preferred taints
/// need (filled only when the request has some, so a request without them costs nothing extra).
///
/// # Errors
///
/// The status of the first invalid field, with its detail recorded; `f` does not run.
///
/// # Safety
///
/// The request's `preferred_taints` and `shared_hits` must be valid for their lengths.
pub(crate) unsafe fn with_core_request<R>(
    request: &libroute_request,
    f: impl FnOnce(&Request<'_>) -> R,
) -> Result<R, libroute_status> {
    let mut preferred = heapless::Vec::<PreferredTaint, MAX_PREFERRED>::new();
    // SAFETY: forwarded under this function's contract.
    let converted = unsafe { core_request(request, &mut preferred) }?;
    Ok(f(&converted))
}

/// The most preferred taints a request carries (one per taint index).
const MAX_PREFERRED: usize = 64;

/// Converts a C request into the core's, checking every field; the converted preferred taints
/// live in `preferred` (empty on entry).
///
/// # Safety
///
/// The request's `preferred_taints` and `shared_hits` must be valid for their lengths.
#[allow(
    clippy::inline_always,
    reason = "built in place in the caller's frame: returned, the request was copied in chunks \
              that stalled on the narrower stores that wrote it (measured in the ABI benchmark)"
)]
#[inline(always)]
unsafe fn core_request<'a>(
    request: &'a libroute_request,
    preferred: &'a mut heapless::Vec<PreferredTaint, MAX_PREFERRED>,
) -> Result<Request<'a>, libroute_status> {
    let role = role(request.role)?;
    let track = flag(request.track_prefill_tokens, "track_prefill_tokens")?;
    let conditional = flag(request.conditional_disagg, "conditional_disagg")?;
    let tier_matches = flag(request.has_tier_matches, "has_tier_matches")?;
    let has_pin = flag(request.has_pin, "has_pin")?;
    let has_shared = flag(request.has_shared_hits, "has_shared_hits")?;
    let has_session = flag(request.has_session, "has_session")?;
    // SAFETY: valid for their lengths by this function's contract; `libroute_block_range` has
    // `BlockRange`'s layout (checked at compile time).
    let (c_preferred, c_hits) = unsafe {
        (
            slice(request.preferred_taints, request.preferred_taints_len),
            slice(
                request.shared_hits.cast::<BlockRange>(),
                request.shared_hits_len,
            ),
        )
    };
    let (Some(c_preferred), Some(c_hits)) = (c_preferred, c_hits) else {
        return Err(fail(
            libroute_status::NullArgument,
            "a request array is NULL with a non-zero length",
        ));
    };
    for p in c_preferred {
        let Some(taint) = Taint::new(p.taint) else {
            return Err(fail(
                libroute_status::InvalidRequest,
                format_args!("preferred taint {} is not below 64", p.taint),
            ));
        };
        let converted = PreferredTaint {
            taint,
            weight: p.weight,
        };
        if preferred.push(converted).is_err() {
            return Err(fail(
                libroute_status::InvalidRequest,
                format_args!(
                    "{} preferred taints; at most {MAX_PREFERRED}",
                    c_preferred.len()
                ),
            ));
        }
    }
    let mut core = Request::new(request.prompt_tokens, request.block_size)
        .role(role)
        .track_prefill_tokens(track)
        .conditional_disagg(conditional)
        .has_tier_matches(tier_matches)
        .required_taints(TaintSet(request.required_taints))
        .preferred_taints(preferred);
    if has_shared {
        let hits = SharedHits::new(c_hits).map_err(|e| fail(libroute_status::InvalidRequest, e))?;
        core = core.shared_hits(hits);
    }
    if has_pin {
        core = core.pin(WorkerKey::new(request.pin.worker_id, request.pin.dp_rank));
    }
    if has_session {
        core = core.session(request.session);
    }
    Ok(core)
}

pub(crate) fn to_c(s: &Selection) -> libroute_selection {
    let (reason, ties, probability) = match s.reason {
        PickReason::Pinned => (libroute_reason::Pinned, 0, 1.0),
        PickReason::MinCost { ties } => (libroute_reason::MinCost, ties, 0.0),
        PickReason::Sampled { probability } => (libroute_reason::Sampled, 0, probability),
        _ => (libroute_reason::Custom, 0, 0.0),
    };
    libroute_selection {
        row: s.row,
        worker: libroute_worker {
            worker_id: s.worker.worker_id,
            dp_rank: s.worker.dp_rank,
        },
        cost: s.cost,
        candidates: s.candidates,
        scorers: s.contributions().len(),
        reason: reason as u32,
        ties,
        probability,
        request_blocks: s.request_blocks,
        cached_tokens: s.cached_tokens,
    }
}

/// The most scorers a policy sums (the length of `libroute_explanation.contributions`).
pub const LIBROUTE_MAX_SCORERS: usize = 8;

/// What became of one row in a selection (`libroute_explanation.disposition`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum libroute_disposition {
    /// A candidate: every scorer scored it.
    Candidate = 0,
    /// The request was pinned to another worker.
    NotPinned = 1,
    /// The row is invalid.
    Invalid = 2,
    /// The worker lacks a taint the request requires.
    Ineligible = 3,
    /// The host marked the worker overloaded.
    Overloaded = 4,
    /// Filter `filter` removed it.
    Filtered = 5,
    /// Filter `filter` removed it as overloaded.
    FilterOverloaded = 6,
    /// Filter `filter` failed on it.
    FilterFailed = 7,
    /// Not examined: the selection stopped before this row (an invalid request, say).
    NotExamined = 8,
}

/// One row's part in a selection.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct libroute_explanation {
    /// The row's index in the caller's array.
    pub row: usize,
    /// The row's worker.
    pub worker: libroute_worker,
    /// A `libroute_disposition` value.
    pub disposition: u32,
    /// With `FILTERED`, `FILTER_OVERLOADED` or `FILTER_FAILED`: the filter's index (custom
    /// filters in the order given; a catalog policy's filters in its configuration's order).
    pub filter: u32,
    /// 1 for the chosen row, else 0.
    pub chosen: u8,
    /// How many of `contributions` are set (0 for a row that was not scored).
    pub scorers: usize,
    /// The summed cost; NaN when the row was not scored.
    pub total: f64,
    /// Each scorer's contribution to `total`, in policy order.
    pub contributions: [f64; LIBROUTE_MAX_SCORERS],
}

impl From<&Explanation> for libroute_explanation {
    fn from(e: &Explanation) -> Self {
        let (disposition, filter) = match e.disposition {
            Disposition::Candidate => (libroute_disposition::Candidate, 0),
            Disposition::NotPinned => (libroute_disposition::NotPinned, 0),
            Disposition::Invalid(_) => (libroute_disposition::Invalid, 0),
            Disposition::Ineligible => (libroute_disposition::Ineligible, 0),
            Disposition::Overloaded => (libroute_disposition::Overloaded, 0),
            Disposition::Filtered { filter } => (libroute_disposition::Filtered, filter),
            Disposition::FilterOverloaded { filter } => {
                (libroute_disposition::FilterOverloaded, filter)
            }
            Disposition::FilterFailed { filter } => (libroute_disposition::FilterFailed, filter),
            _ => (libroute_disposition::NotExamined, 0),
        };
        let parts = e.contributions();
        let mut contributions = [f64::NAN; LIBROUTE_MAX_SCORERS];
        contributions[..parts.len()].copy_from_slice(parts);
        libroute_explanation {
            row: e.row,
            worker: libroute_worker {
                worker_id: e.worker.worker_id,
                dp_rank: e.worker.dp_rank,
            },
            disposition: disposition as u32,
            filter: u32::try_from(filter).unwrap_or(u32::MAX),
            chosen: u8::from(e.chosen),
            scorers: parts.len(),
            total: e.total,
            contributions,
        }
    }
}

/// `libroute_select`, and an explanation of every row into `explanations[0..rows_len]`: whether
/// it was a candidate or which check removed it (a required taint, the host's overload flag, the
/// first filter that refused it) and, for candidates of a successful selection, each scorer's
/// contribution and the total. Rows are explained also when the selection fails (the status says
/// why), so a host can log why every worker was passed over. The first call on a selector
/// allocates its explanation buffer (to the selector's capacity); later calls allocate nothing.
///
/// Errors: as `libroute_select`, plus `BUFFER_TOO_SMALL` when `explanations_len < rows_len`
/// (checked before selecting; nothing is written).
///
/// # Safety
///
/// As `libroute_select`; `explanations` must be valid for `explanations_len` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_select_explained(
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
    rows: *const libroute_row,
    rows_len: usize,
    out: *mut libroute_selection,
    explanations: *mut libroute_explanation,
    explanations_len: usize,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        if explanations.is_null() && rows_len > 0 {
            return fail(libroute_status::NullArgument, "explanations is NULL");
        }
        if explanations_len < rows_len {
            return fail(
                libroute_status::BufferTooSmall,
                format_args!("explanations holds {explanations_len} entries for {rows_len} rows"),
            );
        }
        // SAFETY: forwarded under this function's contract.
        let (policy, selector, request, rows) =
            match unsafe { selection_args(policy, selector, request, rows, rows_len) } {
                Ok(args) => args,
                Err(status) => return status,
            };
        if let Err(status) = selector.check_rows(rows.len()) {
            return status;
        }
        if selector.explanations.len() < selector.capacity {
            selector
                .explanations
                .resize(selector.capacity, Explanation::EMPTY);
        }
        let SelectorBox {
            inner,
            explanations: scratch,
            ..
        } = selector;
        let scratch = &mut scratch[..rows.len()];
        // SAFETY: the request's arrays are valid for their lengths by contract.
        let converted = unsafe {
            with_core_request(
                request,
                |core_request| with_selector!(inner, s => policy.select_explained(s, core_request, rows, scratch)),
            )
        };
        let result = match converted {
            Ok(result) => result,
            Err(status) => return status,
        };
        // Rows are explained on success and on a selection failure alike.
        for (k, e) in scratch.iter().enumerate() {
            // SAFETY: `k < rows_len <= explanations_len` (checked), valid for writes by contract.
            unsafe { explanations.add(k).write(libroute_explanation::from(e)) };
        }
        match result {
            Ok(selection) => {
                // SAFETY: `out` is non-NULL and valid for a write by contract.
                unsafe { out.write(to_c(&selection)) };
                libroute_status::Ok
            }
            Err(e) => select_error(&e),
        }
    })
}

/// Named policy instances assigned to roles, from one JSON configuration. Create with
/// `libroute_policy_set_new`; free with `libroute_policy_set_free`.
#[derive(Debug)]
pub struct libroute_policy_set {
    _private: [u8; 0],
}

/// The policies of a set, one per role (in `libroute_role` order), and their instance names.
struct PolicySetBox {
    policies: [Box<AbiPolicy>; 4],
    names: [std::ffi::CString; 4],
}

/// Creates a policy set from JSON: `{"instances": [{"name": ..., "policy": {"type": ...}}],
/// "roles": {"prefill": name, "decode": name, "aggregated": name, "encode": name}}`. Omitted roles
/// use the default policy. On success `*out` owns the set: free it with `libroute_policy_set_free`.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_JSON`; `UNKNOWN_KEY` (an unknown key or policy type, named);
/// `INVALID_KNOB` (an invalid parameter, a duplicate instance name, a role naming no instance;
/// the detail names the instance and the parameter).
///
/// # Safety
///
/// `json` must point to `json_len` readable bytes; `out` must be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_set_new(
    json: *const c_char,
    json_len: usize,
    out: *mut *mut libroute_policy_set,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        // SAFETY: `json` holds `json_len` bytes by contract.
        let Some(json) = (unsafe { slice(json.cast::<u8>(), json_len) }) else {
            return fail(libroute_status::NullArgument, "json is NULL");
        };
        let config: PolicySetConfig = match parse_json(json) {
            Ok(config) => config,
            Err(status) => return status,
        };
        let set = match config.build() {
            Ok(set) => set,
            Err(e) => {
                return fail(catalog_status(&e), format_args!("policy set: {e}"));
            }
        };
        let roles = [Role::Prefill, Role::Decode, Role::Aggregated, Role::Encode];
        let policies = roles.map(|r| Box::new(AbiPolicy::Catalog(Box::new(set.policy(r).clone()))));
        let names = roles.map(|r| {
            // Instance names come from JSON strings, which may hold a NUL; cut there.
            let name = set.instance_name(r);
            let name = name.split('\0').next().unwrap_or_default();
            std::ffi::CString::new(name).unwrap_or_default()
        });
        let boxed = Box::new(PolicySetBox { policies, names });
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(Box::into_raw(boxed).cast()) };
        libroute_status::Ok
    })
}

/// Frees a policy set and every policy it lent out. `NULL` does nothing.
///
/// # Safety
///
/// `set` must be NULL or a live handle from `libroute_policy_set_new`, not in use elsewhere, and
/// no policy obtained from it may be used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_set_free(set: *mut libroute_policy_set) {
    // SAFETY: by contract the pointer is NULL or came from `Box::into_raw` of a `PolicySetBox`.
    unsafe { free_handle(set.cast::<PolicySetBox>()) };
}

/// Writes the policy serving `role` to `*out`: a policy the set owns, valid until the set is
/// freed, usable with every function that takes a `const libroute_policy *` (never pass it to
/// `libroute_policy_free`). Writes the instance's name (`"default"` for an unassigned role),
/// NUL-terminated, to `name[0..name_len]` when `name` is not NULL.
///
/// Errors: `NULL_ARGUMENT`, `INVALID_ARGUMENT` (role), `BUFFER_TOO_SMALL` (name; nothing written).
///
/// # Safety
///
/// `set` must be a live handle; `out` valid for a pointer write; `name`, when not NULL, valid
/// for `name_len` writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_policy_set_get(
    set: *const libroute_policy_set,
    role: u32,
    out: *mut *const libroute_policy,
    name: *mut c_char,
    name_len: usize,
) -> libroute_status {
    boundary(|| {
        non_null!(out, "out");
        // SAFETY: NULL or live by contract.
        let Some(set) = (unsafe { set.cast::<PolicySetBox>().as_ref() }) else {
            return fail(libroute_status::NullArgument, "set is NULL");
        };
        // The set holds its policies in `libroute_role` order, so a valid role is the slot.
        if let Err(status) = self::role(role) {
            return status;
        }
        let slot = role as usize;
        if !name.is_null() {
            let text = set.names[slot].to_str().unwrap_or_default();
            let mut written = 0;
            // SAFETY: `name` is valid for `name_len` writes by contract.
            let status = unsafe { write_text(text, name, name_len, &raw mut written) };
            if status != libroute_status::Ok {
                return fail(
                    status,
                    format_args!("the instance name needs {} bytes", text.len() + 1),
                );
            }
        }
        let policy: &AbiPolicy = &set.policies[slot];
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(std::ptr::from_ref(policy).cast()) };
        libroute_status::Ok
    })
}

/// Writes every candidate of the selector's last successful selection: `rows[k]` is the index of
/// a row in the caller's array and `costs[k]` its total cost, for `k < *out_n`, in the order the
/// picker saw them. After a failed selection there are none.
///
/// Errors: `NULL_ARGUMENT`, `BUFFER_TOO_SMALL` (when `len` is below the number of candidates).
///
/// # Safety
///
/// `selector` must be a live handle; `rows` and `costs` valid for `len` writes (NULL allowed when
/// `len` is 0); `out_n` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_selector_last_costs(
    selector: *const libroute_selector,
    rows: *mut usize,
    costs: *mut f64,
    len: usize,
    out_n: *mut usize,
) -> libroute_status {
    boundary(|| {
        non_null!(out_n, "out_n");
        // SAFETY: NULL or live by contract.
        let Some(selector) = (unsafe { selector.cast::<SelectorBox>().as_ref() }) else {
            return fail(libroute_status::NullArgument, "selector is NULL");
        };
        let n = with_selector!(&selector.inner, s => s.last_costs().len());
        if n > len {
            return fail(
                libroute_status::BufferTooSmall,
                format_args!("{n} candidates, buffers of {len}"),
            );
        }
        if n > 0 && (rows.is_null() || costs.is_null()) {
            return fail(libroute_status::NullArgument, "rows or costs is NULL");
        }
        with_selector!(&selector.inner, s => {
            for (k, (row, cost)) in s.last_costs().enumerate() {
                // SAFETY: `k < n <= len`, and both buffers are valid for `len` writes by contract.
                unsafe {
                    rows.add(k).write(row);
                    costs.add(k).write(cost);
                }
            }
        });
        // SAFETY: non-NULL and valid by contract.
        unsafe { out_n.write(n) };
        libroute_status::Ok
    })
}

/// Copies `text` and a terminating NUL into `buf`, writing its length (without the NUL) to
/// `*out_n`.
///
/// # Safety
///
/// `buf` valid for `len` writes, `out_n` for one.
unsafe fn write_text(
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
    boundary(|| {
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

// After the macros above, which it uses.
mod host;
pub use host::*;

#[cfg(test)]
mod tests;
