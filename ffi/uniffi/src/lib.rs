//! The uniffi facade of libroute: the Kotlin, Swift and Python bindings are generated from this
//! crate's library (`cargo xtask codegen`, uniffi's library mode).
//!
//! Every method here is a safe wrapper over the C ABI (`libroute-ffi`), called in-process: the
//! bindings make exactly the checks, decisions and errors that C and Go make, and the one place
//! that turns a `libroute_status` into a foreign exception is [`RouteError::from_status`].
//!
//! Objects are thread-safe: a [`Policy`] is immutable and shared freely; a [`Selector`] and a
//! [`Router`] serialize their calls with a mutex (give each thread its own selector to avoid
//! waiting). Records are plain values: rows are copied into a reused buffer per call.

// Why: every call goes through the C ABI's raw pointers; each use carries a SAFETY comment.
#![allow(unsafe_code, reason = "calls into the C ABI")]
#![deny(unsafe_op_in_unsafe_fn)]
// Why: uniffi hands foreign values over by ownership (`String`, `Vec`, `Arc`), whether or not a
// method consumes them.
#![allow(
    clippy::needless_pass_by_value,
    reason = "uniffi passes foreign arguments by value"
)]

use std::mem::size_of;
use std::ptr::{NonNull, null, null_mut};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use route::{
    LIBROUTE_ROW_HAS_CACHE, LIBROUTE_ROW_HAS_LOAD, LIBROUTE_ROW_HAS_SPEED, LIBROUTE_ROW_OVERLOADED,
    libroute_block_range, libroute_kv_event, libroute_ledger_event, libroute_policy,
    libroute_preferred_taint, libroute_reason, libroute_request, libroute_router,
    libroute_router_config, libroute_router_counters, libroute_row, libroute_selection,
    libroute_selector, libroute_status, libroute_worker,
};

/// Defines [`RouteError`] with one variant per failure status, and its mapping from the status.
macro_rules! route_error {
    ($($(#[$doc:meta])* $variant:ident,)*) => {
        /// Why a libroute call failed: one variant per C status (`libroute_status`), each with the
        /// detail message that names the knob, row or worker at fault.
        #[derive(Debug, Clone, PartialEq, Eq, uniffi::Error)]
        pub enum RouteError {
            $($(#[$doc])* $variant {
                /// What exactly was wrong. (Not `message`: that name belongs to the foreign
                /// exception classes.)
                detail: String,
            },)*
            /// The object was released (`release()`); it cannot be used any more.
            Closed {
                /// Which object.
                detail: String,
            },
        }

        impl RouteError {
            /// The one mapping from the C ABI's failures: the status and this thread's detail.
            /// The detail is one whole sentence that already says what the status says (and
            /// names the row, field, knob or worker), so it is the message on its own; the
            /// status's fixed text stands in only when a call left no detail.
            fn from_status(status: libroute_status) -> Self {
                let detail = last_error();
                let message = if detail.is_empty() {
                    status.message().to_owned()
                } else {
                    detail
                };
                match status {
                    $(libroute_status::$variant => Self::$variant { detail: message },)*
                    libroute_status::Ok => Self::Panic {
                        detail: "an error was reported for a successful call (a bug)".to_owned(),
                    },
                }
            }

            /// The detail message.
            #[must_use]
            pub fn message(&self) -> &str {
                match self {
                    $(Self::$variant { detail } => detail,)*
                    Self::Closed { detail } => detail,
                }
            }

            /// The `libroute_status` code of this error (as in `libroute.h`); `None` for
            /// [`RouteError::Closed`], which only this facade reports.
            #[must_use]
            pub fn code(&self) -> Option<u32> {
                match self {
                    $(Self::$variant { .. } => Some(libroute_status::$variant as u32),)*
                    Self::Closed { .. } => None,
                }
            }
        }
    };
}

route_error! {
    /// A required argument was missing.
    NullArgument,
    /// An argument is out of range (a zero capacity, a table size that is not a power of two).
    InvalidArgument,
    /// An output buffer is too small.
    BufferTooSmall,
    /// More rows than the selector's capacity, or a capacity above the largest supported.
    CapacityExceeded,
    /// The configuration is not valid JSON of the expected shape.
    InvalidJson,
    /// The configuration names a key no knob has.
    UnknownKey,
    /// A knob's value is out of range, or two knobs conflict.
    InvalidKnob,
    /// More components than a policy can hold.
    TooManyComponents,
    /// No rows, or no eligible row.
    NoEndpoints,
    /// Filters removed every eligible row.
    AllFiltered,
    /// Every eligible row was overloaded.
    AllOverloaded,
    /// The request is invalid.
    InvalidRequest,
    /// A row is invalid (a NaN, infinite or negative estimate).
    InvalidRow,
    /// Two rows name the same worker and rank.
    DuplicateWorker,
    /// The pinned worker is not among the rows.
    PinNotAllowed,
    /// The pinned worker is overloaded.
    PinOverloaded,
    /// The pinned worker is not eligible.
    PinIneligible,
    /// A scorer gave a row a non-finite cost.
    NonFiniteCost,
    /// A row's total cost overflowed.
    NonFiniteTotal,
    /// The picker returned a position outside the candidates.
    PickOutOfRange,
    /// A filter failed.
    FilterFailed,
    /// A scorer failed.
    ScorerFailed,
    /// The picker failed.
    PickerFailed,
    /// The request id is already booked.
    DuplicateRequest,
    /// No booked request has this id.
    UnknownRequest,
    /// The worker is not registered with the ledger.
    UnknownWorker,
    /// libroute panicked (a bug); the call had no effect.
    Panic,
}

impl std::fmt::Display for RouteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for RouteError {}

/// This thread's detail message of the last failed C call.
fn last_error() -> String {
    // Details are short; a longer one (a JSON error quoting its input) gets a bigger buffer.
    for size in [1 << 10, 1 << 16] {
        let mut buf = vec![0u8; size];
        let mut n = 0;
        // SAFETY: `buf` is valid for `buf.len()` writes and `n` for one.
        let status =
            unsafe { route::libroute_last_error(buf.as_mut_ptr().cast(), buf.len(), &raw mut n) };
        if status == libroute_status::Ok {
            buf.truncate(n);
            return String::from_utf8_lossy(&buf).into_owned();
        }
    }
    "(the detail message is longer than 64 KiB)".to_owned()
}

/// `Ok` or the error of `status`.
fn check(status: libroute_status) -> Result<(), RouteError> {
    if status == libroute_status::Ok {
        Ok(())
    } else {
        Err(RouteError::from_status(status))
    }
}

/// A worker and its data-parallel rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, uniffi::Record)]
pub struct Worker {
    /// The worker's id.
    pub worker_id: u64,
    /// The data-parallel rank (0 for a single-rank worker).
    #[uniffi(default = 0)]
    pub dp_rank: u32,
}

impl From<Worker> for libroute_worker {
    fn from(w: Worker) -> Self {
        libroute_worker {
            worker_id: w.worker_id,
            dp_rank: w.dp_rank,
        }
    }
}

impl From<libroute_worker> for Worker {
    fn from(w: libroute_worker) -> Self {
        Worker {
            worker_id: w.worker_id,
            dp_rank: w.dp_rank,
        }
    }
}

/// The role of the pool a selection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum Role {
    /// Prefill workers of disaggregated serving.
    Prefill,
    /// Decode workers of disaggregated serving.
    Decode,
    /// Workers that prefill and decode.
    Aggregated,
    /// Encoder workers.
    Encode,
}

impl Role {
    fn code(self) -> u32 {
        let role = match self {
            Role::Prefill => route::libroute_role::Prefill,
            Role::Decode => route::libroute_role::Decode,
            Role::Aggregated => route::libroute_role::Aggregated,
            Role::Encode => route::libroute_role::Encode,
        };
        role as u32
    }
}

/// A preferred taint: matching workers' costs are multiplied by `exp(-tanh(sum of weights))`.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct PreferredTaint {
    /// The taint index, 0 to 63.
    pub taint: u32,
    /// Positive attracts, negative repels; must be finite.
    pub weight: f64,
}

/// A half-open range `[start, end)` of block positions found in a shared cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct BlockRange {
    /// First block position.
    pub start: u64,
    /// One past the last block position.
    pub end: u64,
}

/// One request to route.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct Request {
    /// Prompt length in tokens.
    pub prompt_tokens: u64,
    /// KV block size in tokens; at least 1.
    pub block_size: u32,
    /// The pool's role.
    pub role: Role,
    /// Whether the request's prefill tokens are tracked (false on a disaggregated decode leg).
    #[uniffi(default = true)]
    pub track_prefill_tokens: bool,
    /// Whether conditional disaggregation is on.
    #[uniffi(default = false)]
    pub conditional_disagg: bool,
    /// Whether the request has any tier overlap entry, even for an ineligible worker.
    #[uniffi(default = false)]
    pub has_tier_matches: bool,
    /// Taints a worker must carry (bit `i` = taint `i`).
    #[uniffi(default = 0)]
    pub required_taints: u64,
    /// Preferred taints (at most 64).
    #[uniffi(default = [])]
    pub preferred_taints: Vec<PreferredTaint>,
    /// Sorted, disjoint block ranges found in a shared cache; `None` when not looked up.
    #[uniffi(default = None)]
    pub shared_hits: Option<Vec<BlockRange>>,
    /// The worker the request must go to.
    #[uniffi(default = None)]
    pub pin: Option<Worker>,
    /// The conversation or session it belongs to (for session affinity).
    #[uniffi(default = None)]
    pub session: Option<u64>,
}

/// A worker's cached prefix of the request, per tier.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct RowCache {
    /// Leading request blocks in device memory.
    pub device_blocks: u32,
    /// Leading request blocks in host memory.
    #[uniffi(default = 0)]
    pub host_blocks: u32,
    /// Leading request blocks on disk.
    #[uniffi(default = 0)]
    pub disk_blocks: u32,
    /// The accounting estimate in blocks; finite and at least 0.
    pub effective_blocks: f64,
    /// The accounting estimate in tokens.
    pub effective_tokens: u64,
}

/// A worker's projected load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct RowLoad {
    /// Prefill tokens queued or running.
    pub active_prefill_tokens: u64,
    /// Active decode blocks, including this request's new blocks.
    pub active_decode_blocks: u64,
    /// Active requests.
    pub active_requests: u64,
}

/// A worker's measured first-token speed (read by the `ttft` policy; a router learns it).
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct RowSpeed {
    /// Fixed part of a first token, ms; finite and at least 0.
    pub base_ms: f64,
    /// Per prefill token queued or computed there, ms; finite and at least 0.
    pub ms_per_prefill_token: f64,
    /// Per request active there, ms; finite and at least 0.
    pub ms_per_active_request: f64,
}

/// One candidate worker.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct Row {
    /// The worker and rank.
    pub worker: Worker,
    /// Its taints (bit `i` = taint `i`).
    #[uniffi(default = 0)]
    pub taints: u64,
    /// The host's busy mark: the row is removed as overloaded.
    #[uniffi(default = false)]
    pub overloaded: bool,
    /// Its cached prefix; `None` when it has none.
    #[uniffi(default = None)]
    pub cache: Option<RowCache>,
    /// Its load; `None` when unknown.
    #[uniffi(default = None)]
    pub load: Option<RowLoad>,
    /// Its measured speed; `None` when unknown.
    #[uniffi(default = None)]
    pub speed: Option<RowSpeed>,
}

impl From<&Row> for libroute_row {
    fn from(r: &Row) -> Self {
        let mut flags = 0;
        if r.overloaded {
            flags |= LIBROUTE_ROW_OVERLOADED;
        }
        let cache = r.cache.unwrap_or(RowCache {
            device_blocks: 0,
            host_blocks: 0,
            disk_blocks: 0,
            effective_blocks: 0.0,
            effective_tokens: 0,
        });
        if r.cache.is_some() {
            flags |= LIBROUTE_ROW_HAS_CACHE;
        }
        let load = r.load.unwrap_or(RowLoad {
            active_prefill_tokens: 0,
            active_decode_blocks: 0,
            active_requests: 0,
        });
        if r.load.is_some() {
            flags |= LIBROUTE_ROW_HAS_LOAD;
        }
        let speed = r.speed.unwrap_or(RowSpeed {
            base_ms: 0.0,
            ms_per_prefill_token: 0.0,
            ms_per_active_request: 0.0,
        });
        if r.speed.is_some() {
            flags |= LIBROUTE_ROW_HAS_SPEED;
        }
        libroute_row {
            worker: r.worker.into(),
            taints: r.taints,
            flags,
            device_blocks: cache.device_blocks,
            host_blocks: cache.host_blocks,
            disk_blocks: cache.disk_blocks,
            effective_blocks: cache.effective_blocks,
            effective_tokens: cache.effective_tokens,
            active_prefill_tokens: load.active_prefill_tokens,
            active_decode_blocks: load.active_decode_blocks,
            active_requests: load.active_requests,
            base_ms: speed.base_ms,
            ms_per_prefill_token: speed.ms_per_prefill_token,
            ms_per_active_request: speed.ms_per_active_request,
        }
    }
}

impl From<&libroute_row> for Row {
    fn from(r: &libroute_row) -> Self {
        Row {
            worker: r.worker.into(),
            taints: r.taints,
            overloaded: r.flags & LIBROUTE_ROW_OVERLOADED != 0,
            cache: (r.flags & LIBROUTE_ROW_HAS_CACHE != 0).then_some(RowCache {
                device_blocks: r.device_blocks,
                host_blocks: r.host_blocks,
                disk_blocks: r.disk_blocks,
                effective_blocks: r.effective_blocks,
                effective_tokens: r.effective_tokens,
            }),
            load: (r.flags & LIBROUTE_ROW_HAS_LOAD != 0).then_some(RowLoad {
                active_prefill_tokens: r.active_prefill_tokens,
                active_decode_blocks: r.active_decode_blocks,
                active_requests: r.active_requests,
            }),
            speed: (r.flags & LIBROUTE_ROW_HAS_SPEED != 0).then_some(RowSpeed {
                base_ms: r.base_ms,
                ms_per_prefill_token: r.ms_per_prefill_token,
                ms_per_active_request: r.ms_per_active_request,
            }),
        }
    }
}

/// Bytes per packed row: the C `libroute_row` layout, little-endian, 4 padding bytes after
/// `dp_rank`: `worker_id` u64 @0, `dp_rank` u32 @8, `taints` u64 @16, `flags` u32 @24
/// (1 cache, 2 load, 4 overloaded, 8 speed), `device_blocks` u32 @28, `host_blocks` u32 @32,
/// `disk_blocks` u32 @36, `effective_blocks` f64 @40, `effective_tokens` u64 @48,
/// `active_prefill_tokens` u64 @56, `active_decode_blocks` u64 @64, `active_requests` u64 @72,
/// `base_ms` f64 @80, `ms_per_prefill_token` f64 @88, `ms_per_active_request` f64 @96.
pub const PACKED_ROW_BYTES: u32 = 104;

/// [`PACKED_ROW_BYTES`] as a length.
const ROW: usize = PACKED_ROW_BYTES as usize;

// The packed row is the C row's layout (on a little-endian machine, the same bytes).
const _: () = assert!(ROW == size_of::<libroute_row>());

/// The size in bytes of one packed row ([`Selector::select_packed`]).
#[uniffi::export]
#[must_use]
pub fn packed_row_size() -> u32 {
    PACKED_ROW_BYTES
}

/// Decodes packed rows into `out`.
fn unpack_rows(bytes: &[u8], out: &mut Vec<libroute_row>) -> Result<(), RouteError> {
    if bytes.len() % ROW != 0 {
        return Err(RouteError::InvalidArgument {
            detail: format!(
                "{} bytes of packed rows is not a multiple of the row size {PACKED_ROW_BYTES}",
                bytes.len()
            ),
        });
    }
    out.extend(bytes.chunks_exact(ROW).map(|b| {
        let u64_at = |at: usize| {
            u64::from_le_bytes([
                b[at],
                b[at + 1],
                b[at + 2],
                b[at + 3],
                b[at + 4],
                b[at + 5],
                b[at + 6],
                b[at + 7],
            ])
        };
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        libroute_row {
            worker: libroute_worker {
                worker_id: u64_at(0),
                dp_rank: u32_at(8),
            },
            taints: u64_at(16),
            flags: u32_at(24),
            device_blocks: u32_at(28),
            host_blocks: u32_at(32),
            disk_blocks: u32_at(36),
            effective_blocks: f64::from_bits(u64_at(40)),
            effective_tokens: u64_at(48),
            active_prefill_tokens: u64_at(56),
            active_decode_blocks: u64_at(64),
            active_requests: u64_at(72),
            base_ms: f64::from_bits(u64_at(80)),
            ms_per_prefill_token: f64::from_bits(u64_at(88)),
            ms_per_active_request: f64::from_bits(u64_at(96)),
        }
    }));
    Ok(())
}

/// Why the chosen row was chosen.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Enum)]
pub enum PickReason {
    /// The request was pinned.
    Pinned,
    /// The minimum cost; `ties` rows shared it and one was drawn uniformly.
    MinCost {
        /// How many rows had the minimum cost.
        ties: u32,
    },
    /// Drawn by temperature sampling.
    Sampled {
        /// The chosen row's probability.
        probability: f64,
    },
    /// A custom picker's choice.
    Custom,
}

/// The outcome of one selection.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct Selection {
    /// Index of the chosen row in the rows passed.
    pub row: u64,
    /// The chosen worker.
    pub worker: Worker,
    /// Its total cost.
    pub cost: f64,
    /// How many candidates survived filtering.
    pub candidates: u64,
    /// Why it was chosen.
    pub reason: PickReason,
    /// The request's size in blocks.
    pub request_blocks: u64,
    /// The chosen row's cached-token estimate.
    pub cached_tokens: u64,
    /// Each scorer's contribution to the chosen row's cost, the default cost first (empty for
    /// [`Router::route`]; use [`Selector::last_costs`] there).
    pub contributions: Vec<f64>,
}

impl Selection {
    fn from_c(s: &libroute_selection, contributions: Vec<f64>) -> Self {
        let reason = if s.reason == libroute_reason::Pinned as u32 {
            PickReason::Pinned
        } else if s.reason == libroute_reason::MinCost as u32 {
            PickReason::MinCost { ties: s.ties }
        } else if s.reason == libroute_reason::Sampled as u32 {
            PickReason::Sampled {
                probability: s.probability,
            }
        } else {
            PickReason::Custom
        };
        Selection {
            row: s.row as u64,
            worker: s.worker.into(),
            cost: s.cost,
            candidates: s.candidates as u64,
            reason,
            request_blocks: s.request_blocks,
            cached_tokens: s.cached_tokens,
            contributions,
        }
    }
}

/// One candidate of the last selection: its row index and total cost.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct Candidate {
    /// Index of the row in the rows passed.
    pub row: u64,
    /// Its total cost.
    pub cost: f64,
}

/// The input groups a policy reads for one kind of request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct Inputs {
    /// Cache overlaps (`Row.cache`).
    pub cache: bool,
    /// Loads (`Row.load`).
    pub load: bool,
    /// Preferred taints.
    pub preferred_taint: bool,
}

/// Converts a request record for the C ABI; the arrays it points into live in `self`.
struct CRequest {
    preferred: Vec<libroute_preferred_taint>,
    hits: Vec<libroute_block_range>,
    request: libroute_request,
}

impl CRequest {
    fn new(r: &Request) -> Self {
        let preferred: Vec<libroute_preferred_taint> = r
            .preferred_taints
            .iter()
            .map(|p| libroute_preferred_taint {
                taint: p.taint,
                weight: p.weight,
            })
            .collect();
        let hits: Vec<libroute_block_range> = r
            .shared_hits
            .iter()
            .flatten()
            .map(|h| libroute_block_range {
                start: h.start,
                end: h.end,
            })
            .collect();
        let request = libroute_request {
            prompt_tokens: r.prompt_tokens,
            block_size: r.block_size,
            role: r.role.code(),
            track_prefill_tokens: u8::from(r.track_prefill_tokens),
            conditional_disagg: u8::from(r.conditional_disagg),
            has_tier_matches: u8::from(r.has_tier_matches),
            has_pin: u8::from(r.pin.is_some()),
            has_shared_hits: u8::from(r.shared_hits.is_some()),
            pin: r.pin.map_or(
                libroute_worker {
                    worker_id: 0,
                    dp_rank: 0,
                },
                Into::into,
            ),
            required_taints: r.required_taints,
            preferred_taints: null(),
            preferred_taints_len: preferred.len(),
            shared_hits: null(),
            shared_hits_len: hits.len(),
            has_session: u8::from(r.session.is_some()),
            session: r.session.unwrap_or(0),
        };
        CRequest {
            preferred,
            hits,
            request,
        }
    }

    /// The C request, pointing into `self`'s arrays (valid while `self` is borrowed).
    fn c(&self) -> libroute_request {
        libroute_request {
            preferred_taints: self.preferred.as_ptr(),
            shared_hits: self.hits.as_ptr(),
            ..self.request
        }
    }
}

/// A policy handle, freed when dropped.
enum PolicyHandle {
    /// From `libroute_policy_new`, freed with the handle.
    Owned(NonNull<libroute_policy>),
    /// Lent by a policy set, which `_owner` keeps alive.
    Lent {
        policy: NonNull<libroute_policy>,
        _owner: Arc<SetHandle>,
    },
}

impl PolicyHandle {
    fn ptr(&self) -> *const libroute_policy {
        match self {
            PolicyHandle::Owned(p) | PolicyHandle::Lent { policy: p, .. } => p.as_ptr(),
        }
    }
}

// SAFETY: a policy without callbacks (the only kind this facade builds) is immutable after
// construction, and the C ABI documents concurrent use of one policy from any number of threads.
unsafe impl Send for PolicyHandle {}
// SAFETY: as for `Send`: the facade only reads the policy through the handle.
unsafe impl Sync for PolicyHandle {}

impl Drop for PolicyHandle {
    fn drop(&mut self) {
        if let PolicyHandle::Owned(p) = self {
            // SAFETY: the pointer came from `libroute_policy_new` and is freed once, here.
            unsafe { route::libroute_policy_free(p.as_ptr()) };
        }
    }
}

/// A policy set's C handle, freed when the last policy lent from it and the set are gone.
struct SetHandle(NonNull<route::libroute_policy_set>);

// SAFETY: a set is immutable after construction; its policies are used as any policy is.
unsafe impl Send for SetHandle {}
// SAFETY: as for `Send`.
unsafe impl Sync for SetHandle {}

impl Drop for SetHandle {
    fn drop(&mut self) {
        // SAFETY: from `libroute_policy_set_new`, freed once, after every lent policy is gone
        // (each holds an `Arc` of this handle).
        unsafe { route::libroute_policy_set_free(self.0.as_ptr()) };
    }
}

fn closed(what: &str) -> RouteError {
    RouteError::Closed {
        detail: format!("this {what} was released"),
    }
}

/// An immutable routing policy, shared freely between threads.
#[derive(uniffi::Object)]
pub struct Policy {
    handle: RwLock<Option<PolicyHandle>>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Policy")
    }
}

impl Policy {
    /// Runs `f` on the live handle; selections share the read lock, `release` takes the write.
    fn with<R>(
        &self,
        f: impl FnOnce(*const libroute_policy) -> Result<R, RouteError>,
    ) -> Result<R, RouteError> {
        let handle = self.handle.read().unwrap_or_else(PoisonError::into_inner);
        match handle.as_ref() {
            Some(h) => f(h.ptr()),
            None => Err(closed("policy")),
        }
    }
}

#[uniffi::export]
impl Policy {
    /// A policy from JSON: the default policy's knobs (`"{}"` for all defaults), or a catalog
    /// policy by type (`{"type": "least_loaded", ...}`).
    ///
    /// # Errors
    ///
    /// `InvalidJson`, `UnknownKey` or `InvalidKnob`, naming the key or knob.
    #[uniffi::constructor]
    pub fn new(json: String) -> Result<Arc<Self>, RouteError> {
        let mut raw = null_mut();
        // SAFETY: `json` is valid for `json.len()` bytes; `raw` is a valid out-pointer.
        check(unsafe {
            route::libroute_policy_new(json.as_ptr().cast(), json.len(), &raw mut raw)
        })?;
        let raw = NonNull::new(raw).ok_or_else(|| RouteError::Panic {
            detail: "libroute_policy_new returned no policy".to_owned(),
        })?;
        Ok(Arc::new(Policy {
            handle: RwLock::new(Some(PolicyHandle::Owned(raw))),
        }))
    }

    /// The input groups the policy reads for requests of `role`: a host may skip computing
    /// what is not read.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`.
    pub fn inputs(&self, role: Role, conditional_disagg: bool) -> Result<Inputs, RouteError> {
        let mut bits = 0u8;
        self.with(|raw| {
            // SAFETY: `raw` is live under the read lock; `bits` is a valid out-pointer.
            check(unsafe {
                route::libroute_policy_inputs(
                    raw,
                    role.code(),
                    u8::from(conditional_disagg),
                    &raw mut bits,
                )
            })
        })?;
        Ok(Inputs {
            cache: bits & route::LIBROUTE_INPUT_CACHE != 0,
            load: bits & route::LIBROUTE_INPUT_LOAD != 0,
            preferred_taint: bits & route::LIBROUTE_INPUT_PREFERRED_TAINT != 0,
        })
    }

    /// Frees the native policy now (waiting for selections using it to finish); later calls
    /// fail with `Closed`. Idempotent. Without it, the policy is freed with its last reference.
    pub fn release(&self) {
        self.handle
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

/// A selector's handle and the buffers it reuses between calls.
struct SelectorState {
    raw: NonNull<libroute_selector>,
    capacity: usize,
    rows: Vec<libroute_row>,
}

// SAFETY: the handle is owned exclusively by this state, which the mutex of `Selector` guards; the
// C selector has no thread affinity, only a ban on concurrent use.
unsafe impl Send for SelectorState {}

impl Drop for SelectorState {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `libroute_selector_new` and is freed once, here.
        unsafe { route::libroute_selector_free(self.raw.as_ptr()) };
    }
}

/// Selection scratch of a fixed capacity and a random stream. Thread-safe (calls are serialized);
/// give each thread its own for throughput.
#[derive(uniffi::Object)]
pub struct Selector {
    state: Mutex<Option<SelectorState>>,
}

impl std::fmt::Debug for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Selector")
    }
}

/// The arguments `Selector::run_selection` hands to a selecting C call: the policy under its
/// read lock, the selector under its mutex, the converted request (its arrays alive for the
/// call), the filled rows (the router writes their cache and load), and the selection to write.
struct SelectionCall<'a> {
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
    rows: &'a mut [libroute_row],
    out: *mut libroute_selection,
}

impl Selector {
    /// Fills the reused row buffer with `fill` and selects.
    fn select_with(
        &self,
        policy: &Policy,
        request: &Request,
        fill: impl FnOnce(&mut Vec<libroute_row>) -> Result<(), RouteError>,
    ) -> Result<Selection, RouteError> {
        let mut contributions = vec![0.0; route::LIBROUTE_MAX_SCORERS];
        let out = self.run_selection(policy, request, fill, |c| {
            // SAFETY: `run_selection`'s pointers are valid for the call (see `SelectionCall`);
            // the contributions buffer holds its length.
            check(unsafe {
                route::libroute_select(
                    c.policy,
                    c.selector,
                    c.request,
                    c.rows.as_ptr(),
                    c.rows.len(),
                    c.out,
                    contributions.as_mut_ptr(),
                    contributions.len(),
                )
            })
        })?;
        contributions.truncate(out.scorers);
        Ok(Selection::from_c(&out, contributions))
    }

    /// The locking, request conversion and row buffer every selecting call shares: converts
    /// `request`, fills the rows with `fill`, holds the policy's read lock and the selector's
    /// mutex, and makes the C call `call`; returns the selection it wrote on success.
    fn run_selection(
        &self,
        policy: &Policy,
        request: &Request,
        fill: impl FnOnce(&mut Vec<libroute_row>) -> Result<(), RouteError>,
        call: impl FnOnce(SelectionCall<'_>) -> Result<(), RouteError>,
    ) -> Result<libroute_selection, RouteError> {
        let converted = CRequest::new(request);
        let c_request = converted.c();
        policy.with(|policy_raw| {
            self.with(|state| {
                state.rows.clear();
                fill(&mut state.rows)?;
                let mut out = std::mem::MaybeUninit::<libroute_selection>::uninit();
                call(SelectionCall {
                    policy: policy_raw,
                    selector: state.raw.as_ptr(),
                    request: &raw const c_request,
                    rows: &mut state.rows,
                    out: out.as_mut_ptr(),
                })?;
                // SAFETY: written by the successful call above.
                Ok(unsafe { out.assume_init() })
            })
        })
    }

    /// Runs `f` on the live state, holding the lock.
    fn with<R>(
        &self,
        f: impl FnOnce(&mut SelectorState) -> Result<R, RouteError>,
    ) -> Result<R, RouteError> {
        // A panic cannot leave the state half-updated: every call rewrites what it reads.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.as_mut() {
            Some(state) => f(state),
            None => Err(closed("selector")),
        }
    }
}

#[uniffi::export]
impl Selector {
    /// A selector for up to `capacity` rows (1 to 4,096); its unseeded random stream starts
    /// from `entropy`.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for 0, `CapacityExceeded` above 4,096.
    #[uniffi::constructor]
    pub fn new(capacity: u32, entropy: u64) -> Result<Arc<Self>, RouteError> {
        let mut raw = null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        check(unsafe { route::libroute_selector_new(capacity as usize, entropy, &raw mut raw) })?;
        let raw = NonNull::new(raw).ok_or_else(|| RouteError::Panic {
            detail: "libroute_selector_new returned no selector".to_owned(),
        })?;
        Ok(Arc::new(Selector {
            state: Mutex::new(Some(SelectorState {
                raw,
                capacity: capacity as usize,
                rows: Vec::new(),
            })),
        }))
    }

    /// Selects one of `rows` for `request` with `policy`, with each scorer's contribution.
    ///
    /// # Errors
    ///
    /// The selection's error, naming the row, worker or field at fault.
    pub fn select(
        &self,
        policy: Arc<Policy>,
        request: Request,
        rows: Vec<Row>,
    ) -> Result<Selection, RouteError> {
        self.select_with(&policy, &request, |buffer| {
            buffer.extend(rows.iter().map(libroute_row::from));
            Ok(())
        })
    }

    /// [`Selector::select`] for rows packed as bytes ([`PACKED_ROW_BYTES`] per row, see
    /// [`packed_row_size`]): one copy instead of a field-by-field conversion of each record,
    /// which is what dominates a selection from Python or the JVM.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` when the length is not a multiple of the row size; otherwise as
    /// [`Selector::select`].
    pub fn select_packed(
        &self,
        policy: Arc<Policy>,
        request: Request,
        rows: Vec<u8>,
    ) -> Result<Selection, RouteError> {
        self.select_with(&policy, &request, |buffer| unpack_rows(&rows, buffer))
    }

    /// Every candidate of the last successful selection, in the order the picker saw them.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`.
    pub fn last_costs(&self) -> Result<Vec<Candidate>, RouteError> {
        self.with(|state| {
            let capacity = state.capacity;
            let (mut rows, mut costs) = (vec![0usize; capacity], vec![0.0f64; capacity]);
            let mut n = 0;
            // SAFETY: the handle is live; both buffers hold `capacity` values; `n` is writable.
            check(unsafe {
                route::libroute_selector_last_costs(
                    state.raw.as_ptr(),
                    rows.as_mut_ptr(),
                    costs.as_mut_ptr(),
                    capacity,
                    &raw mut n,
                )
            })?;
            Ok(rows
                .into_iter()
                .zip(costs)
                .take(n)
                .map(|(row, cost)| Candidate {
                    row: row as u64,
                    cost,
                })
                .collect())
        })
    }

    /// Restarts the seeded stream: the next seeded selection draws as the first did.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`.
    pub fn reset_seeded(&self) -> Result<(), RouteError> {
        self.with(|state| {
            // SAFETY: the handle is live and the mutex makes this call exclusive.
            check(unsafe { route::libroute_selector_reset_seeded(state.raw.as_ptr()) })
        })
    }

    /// Frees the native selector now; later calls fail with `Closed`. Idempotent.
    pub fn release(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

/// Sizes and weights of a [`Router`]; every slot count is a power of two of at least 8.
#[derive(Debug, Clone, Copy, PartialEq, uniffi::Record)]
pub struct RouterConfig {
    /// Slots of the block table (it holds half as many blocks).
    pub block_slots: u64,
    /// Most workers: 64, 256 or 1024.
    #[uniffi(default = 64)]
    pub max_workers: u64,
    /// Slots of the ledger's request table (it books half as many requests).
    pub request_slots: u64,
    /// Tombstones kept for replica events that arrive before their booking.
    #[uniffi(default = 0)]
    pub tombstones: u64,
    /// Approximate mode: slots of the prediction map (0: off).
    #[uniffi(default = 0)]
    pub prediction_slots: u64,
    /// Approximate mode: how long a prediction lives, in the unit of `now`.
    #[uniffi(default = 0)]
    pub prediction_ttl: u64,
    /// Credit weight of a host-memory block (the policy's `host_cache_hit_weight`).
    #[uniffi(default = 0.0)]
    pub host_weight: f64,
    /// Credit weight of a disk block (the policy's `disk_cache_hit_weight`).
    #[uniffi(default = 0.0)]
    pub disk_weight: f64,
}

/// A cache tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum Tier {
    /// GPU memory.
    Device,
    /// Host memory.
    Host,
    /// Disk.
    Disk,
}

impl Tier {
    /// The C ABI's tier value (0 device, 1 host, 2 disk).
    fn code(self) -> u32 {
        match self {
            Tier::Device => 0,
            Tier::Host => 1,
            Tier::Disk => 2,
        }
    }
}

/// A KV-cache event from a worker.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Enum)]
pub enum KvEvent {
    /// The worker stored these chained block hashes in `tier`.
    Stored {
        /// The worker.
        worker: Worker,
        /// Where.
        tier: Tier,
        /// Chained block hashes.
        hashes: Vec<u64>,
    },
    /// The worker removed these block hashes from `tier`.
    Removed {
        /// The worker.
        worker: Worker,
        /// Where.
        tier: Tier,
        /// Block hashes.
        hashes: Vec<u64>,
    },
    /// The worker dropped everything it cached.
    Cleared {
        /// The worker.
        worker: Worker,
    },
    /// The worker left.
    WorkerRemoved {
        /// The worker.
        worker: Worker,
    },
}

/// A booking event relayed from another router replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum LedgerEvent {
    /// Another replica booked request `id` on `worker`.
    Booked {
        /// The request id.
        id: u64,
        /// The worker.
        worker: Worker,
        /// Prefill tokens booked.
        prefill_tokens: u64,
        /// Blocks booked.
        blocks: u64,
    },
    /// Request `id` completed its prefill.
    PrefillComplete {
        /// The request id.
        id: u64,
    },
    /// Request `id` finished or was cancelled.
    Freed {
        /// The request id.
        id: u64,
    },
}

/// What a router has done, for hosts to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct RouterCounters {
    /// Blocks in the index.
    pub blocks: u64,
    /// Workers the index knows.
    pub index_workers: u64,
    /// Blocks evicted to make room.
    pub evictions: u64,
    /// KV events refused (worker capacity).
    pub rejected_kv_events: u64,
    /// KV removals of unknown blocks or workers, ignored.
    pub ignored_kv_events: u64,
    /// Requests booked now.
    pub active_requests: u64,
    /// Workers the ledger knows.
    pub ledger_workers: u64,
    /// Replica events that repeated one already applied.
    pub duplicate_ledger_events: u64,
    /// Replica events that arrived after the event superseding them.
    pub late_ledger_events: u64,
    /// Replica events for unknown workers, ignored.
    pub unknown_worker_ledger_events: u64,
    /// Live predictions (approximate mode).
    pub predictions: u64,
    /// Predictions expired early because their storage was full.
    pub forced_prediction_expiries: u64,
}

/// The outcome of [`Router::route`]: the selection and the rows as the router filled them.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct Routed {
    /// The selection (request `id` is now booked on its worker).
    pub selection: Selection,
    /// The candidates with the cache and load the router found for them.
    pub rows: Vec<Row>,
}

struct RouterState {
    raw: NonNull<libroute_router>,
}

// SAFETY: the handle is owned exclusively by this state, which the mutex of `Router` guards; the C
// router has no thread affinity, only a ban on concurrent use.
unsafe impl Send for RouterState {}

impl Drop for RouterState {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `libroute_router_new` and is freed once, here.
        unsafe { route::libroute_router_free(self.raw.as_ptr()) };
    }
}

/// The host's routing state: the prefix-overlap index fed by KV events, the load ledger, and
/// (in approximate mode) the router's own predictions. Thread-safe (calls are serialized).
#[derive(uniffi::Object)]
pub struct Router {
    state: Mutex<Option<RouterState>>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Router")
    }
}

/// When a route is made: prediction units (an untimed booking) or milliseconds (timed).
#[derive(Clone, Copy)]
enum Now {
    Units(u64),
    Ms(f64),
}

impl Router {
    /// The body of [`Router::route`] and [`Router::route_at`].
    #[allow(clippy::too_many_arguments, reason = "the route's inputs, forwarded")]
    fn route_call(
        &self,
        policy: &Policy,
        selector: &Selector,
        request: &Request,
        hashes: &[u64],
        candidates: &[Row],
        id: u64,
        now: Now,
    ) -> Result<Routed, RouteError> {
        let mut filled = Vec::new();
        let fill = |buffer: &mut Vec<libroute_row>| {
            buffer.extend(candidates.iter().map(libroute_row::from));
            Ok(())
        };
        let out = selector.run_selection(policy, request, fill, |c| {
            self.with(|r| {
                // SAFETY: `run_selection`'s pointers are valid for the call (see
                // `SelectionCall`), the router exclusive under its mutex; `hashes` and the rows
                // are valid for their lengths.
                unsafe {
                    match now {
                        Now::Units(now) => route::libroute_router_route(
                            r,
                            c.policy,
                            c.selector,
                            c.request,
                            hashes.as_ptr(),
                            hashes.len(),
                            c.rows.as_mut_ptr(),
                            c.rows.len(),
                            id,
                            now,
                            c.out,
                        ),
                        Now::Ms(now_ms) => route::libroute_router_route_at(
                            r,
                            c.policy,
                            c.selector,
                            c.request,
                            hashes.as_ptr(),
                            hashes.len(),
                            c.rows.as_mut_ptr(),
                            c.rows.len(),
                            id,
                            now_ms,
                            c.out,
                        ),
                    }
                }
            })?;
            filled.extend(c.rows.iter().map(Row::from));
            Ok(())
        })?;
        Ok(Routed {
            selection: Selection::from_c(&out, Vec::new()),
            rows: filled,
        })
    }

    /// Runs the C call `f` on the live handle, holding the lock.
    fn with(
        &self,
        f: impl FnOnce(*mut libroute_router) -> libroute_status,
    ) -> Result<(), RouteError> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.as_ref() {
            Some(state) => check(f(state.raw.as_ptr())),
            None => Err(closed("router")),
        }
    }
}

fn size(value: u64, what: &str) -> Result<usize, RouteError> {
    usize::try_from(value).map_err(|_| RouteError::InvalidArgument {
        detail: format!("{what} {value} does not fit this platform's size type"),
    })
}

#[uniffi::export]
impl Router {
    /// Creates a router; all its memory is allocated here.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` naming the bad size or weight, `CapacityExceeded` for a table too large.
    #[uniffi::constructor]
    pub fn new(config: RouterConfig) -> Result<Arc<Self>, RouteError> {
        let c = libroute_router_config {
            block_slots: size(config.block_slots, "block_slots")?,
            max_workers: size(config.max_workers, "max_workers")?,
            request_slots: size(config.request_slots, "request_slots")?,
            tombstones: size(config.tombstones, "tombstones")?,
            prediction_slots: size(config.prediction_slots, "prediction_slots")?,
            prediction_ttl: config.prediction_ttl,
            host_weight: config.host_weight,
            disk_weight: config.disk_weight,
        };
        let mut raw = null_mut();
        // SAFETY: `c` is a valid config and `raw` a valid out-pointer.
        check(unsafe { route::libroute_router_new(&raw const c, &raw mut raw) })?;
        let raw = NonNull::new(raw).ok_or_else(|| RouteError::Panic {
            detail: "libroute_router_new returned no router".to_owned(),
        })?;
        Ok(Arc::new(Router {
            state: Mutex::new(Some(RouterState { raw })),
        }))
    }

    /// Registers a worker with the ledger.
    ///
    /// # Errors
    ///
    /// `CapacityExceeded` beyond `max_workers`.
    pub fn add_worker(&self, worker: Worker) -> Result<(), RouteError> {
        // SAFETY: the handle is live and the lock makes the call exclusive.
        self.with(|r| unsafe { route::libroute_router_add_worker(r, worker.into()) })
    }

    /// Forgets a worker: its blocks leave the index and its load the ledger.
    ///
    /// # Errors
    ///
    /// None in practice.
    pub fn remove_worker(&self, worker: Worker) -> Result<(), RouteError> {
        // SAFETY: the handle is live and the lock makes the call exclusive.
        self.with(|r| unsafe { route::libroute_router_remove_worker(r, worker.into()) })
    }

    /// Applies KV events in order (all or none when one is invalid).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` naming the invalid event; nothing is applied then.
    pub fn apply_kv_events(&self, events: Vec<KvEvent>) -> Result<(), RouteError> {
        let c: Vec<libroute_kv_event> = events
            .iter()
            .map(|e| {
                let (kind, worker, tier, hashes): (_, _, _, &[u64]) = match e {
                    KvEvent::Stored {
                        worker,
                        tier,
                        hashes,
                    } => (
                        route::libroute_kv_kind::Stored,
                        *worker,
                        tier.code(),
                        hashes,
                    ),
                    KvEvent::Removed {
                        worker,
                        tier,
                        hashes,
                    } => (
                        route::libroute_kv_kind::Removed,
                        *worker,
                        tier.code(),
                        hashes,
                    ),
                    KvEvent::Cleared { worker } => {
                        (route::libroute_kv_kind::Cleared, *worker, 0, &[])
                    }
                    KvEvent::WorkerRemoved { worker } => {
                        (route::libroute_kv_kind::WorkerRemoved, *worker, 0, &[])
                    }
                };
                libroute_kv_event {
                    kind: kind as u32,
                    worker: worker.into(),
                    tier,
                    hashes: hashes.as_ptr(),
                    hashes_len: hashes.len(),
                }
            })
            .collect();
        // SAFETY: the handle is live and exclusive; `c` holds `c.len()` events whose hashes point
        // into `events`, which outlives the call.
        self.with(|r| unsafe { route::libroute_router_apply_kv_events(r, c.as_ptr(), c.len()) })
    }

    /// Applies replica events (idempotent: repeats and late events are absorbed and counted).
    ///
    /// # Errors
    ///
    /// None in practice (the kinds are typed).
    pub fn apply_ledger_events(&self, events: Vec<LedgerEvent>) -> Result<(), RouteError> {
        let none = libroute_worker {
            worker_id: 0,
            dp_rank: 0,
        };
        let c: Vec<libroute_ledger_event> = events
            .iter()
            .map(|e| match *e {
                LedgerEvent::Booked {
                    id,
                    worker,
                    prefill_tokens,
                    blocks,
                } => libroute_ledger_event {
                    kind: route::libroute_ledger_kind::Booked as u32,
                    id,
                    worker: worker.into(),
                    prefill_tokens,
                    blocks,
                },
                LedgerEvent::PrefillComplete { id } => libroute_ledger_event {
                    kind: route::libroute_ledger_kind::PrefillComplete as u32,
                    id,
                    worker: none,
                    prefill_tokens: 0,
                    blocks: 0,
                },
                LedgerEvent::Freed { id } => libroute_ledger_event {
                    kind: route::libroute_ledger_kind::Freed as u32,
                    id,
                    worker: none,
                    prefill_tokens: 0,
                    blocks: 0,
                },
            })
            .collect();
        // SAFETY: the handle is live and exclusive; `c` holds `c.len()` events.
        self.with(|r| unsafe { route::libroute_router_apply_ledger_events(r, c.as_ptr(), c.len()) })
    }

    /// Books request `id` on `worker` (for hosts that select with a [`Selector`] themselves).
    ///
    /// # Errors
    ///
    /// `DuplicateRequest`, `UnknownWorker`, `CapacityExceeded`; nothing changes then.
    pub fn book(
        &self,
        id: u64,
        worker: Worker,
        prefill_tokens: u64,
        blocks: u64,
    ) -> Result<(), RouteError> {
        self.with(|r| {
            // SAFETY: the handle is live and the lock makes the call exclusive.
            unsafe { route::libroute_router_book(r, id, worker.into(), prefill_tokens, blocks) }
        })
    }

    /// Marks request `id`'s prefill complete.
    ///
    /// # Errors
    ///
    /// `UnknownRequest`.
    pub fn prefill_complete(&self, id: u64) -> Result<(), RouteError> {
        // SAFETY: the handle is live and the lock makes the call exclusive.
        self.with(|r| unsafe { route::libroute_router_prefill_complete(r, id) })
    }

    /// Frees request `id` (finished or cancelled).
    ///
    /// # Errors
    ///
    /// `UnknownRequest`.
    pub fn free_request(&self, id: u64) -> Result<(), RouteError> {
        // SAFETY: the handle is live and the lock makes the call exclusive.
        self.with(|r| unsafe { route::libroute_router_free_request(r, id) })
    }

    /// Routes one request: fills the candidates' cache and load (any given are replaced) from the
    /// index and ledger for
    /// `hashes` (the request's chained block hashes), selects with `policy`, and books `id` on
    /// the chosen worker. Nothing is booked on an error.
    ///
    /// # Errors
    ///
    /// As [`Selector::select`], plus `DuplicateRequest`, `UnknownWorker`, `CapacityExceeded`.
    #[allow(
        clippy::too_many_arguments,
        reason = "mirrors libroute_router_route; each argument is one input of the decision"
    )]
    pub fn route(
        &self,
        policy: Arc<Policy>,
        selector: Arc<Selector>,
        request: Request,
        hashes: Vec<u64>,
        candidates: Vec<Row>,
        id: u64,
        now: u64,
    ) -> Result<Routed, RouteError> {
        self.route_call(
            &policy,
            &selector,
            &request,
            &hashes,
            &candidates,
            id,
            Now::Units(now),
        )
    }

    /// [`Router::route`] at `now_ms` (milliseconds on the host's clock, the one it passes to
    /// [`Router::prefill_complete_at`]): the booking is timed, so its prefill completion
    /// calibrates the chosen worker's speed, which the rows carry when the policy reads it (the
    /// `ttft` policy). A router with `prediction_slots` records the choice as predicted blocks
    /// (approximate mode, or beside KV events the blocks routed and not yet computed, which the
    /// `ttft` policy credits).
    ///
    /// # Errors
    ///
    /// As [`Router::route`], and `InvalidArgument` for a time that is NaN, infinite or negative.
    #[allow(
        clippy::too_many_arguments,
        reason = "mirrors libroute_router_route_at; each argument is one input of the decision"
    )]
    pub fn route_at(
        &self,
        policy: Arc<Policy>,
        selector: Arc<Selector>,
        request: Request,
        hashes: Vec<u64>,
        candidates: Vec<Row>,
        id: u64,
        now_ms: f64,
    ) -> Result<Routed, RouteError> {
        self.route_call(
            &policy,
            &selector,
            &request,
            &hashes,
            &candidates,
            id,
            Now::Ms(now_ms),
        )
    }

    /// [`Router::book`] at `now_ms`: its prefill completion ([`Router::prefill_complete_at`])
    /// calibrates the worker's speed.
    ///
    /// # Errors
    ///
    /// As [`Router::book`], and `InvalidArgument` for a bad time.
    pub fn book_at(
        &self,
        id: u64,
        worker: Worker,
        prefill_tokens: u64,
        blocks: u64,
        now_ms: f64,
    ) -> Result<(), RouteError> {
        self.with(|r| {
            // SAFETY: the handle is live and the lock makes the call exclusive.
            unsafe {
                route::libroute_router_book_at(r, id, worker.into(), prefill_tokens, blocks, now_ms)
            }
        })
    }

    /// [`Router::prefill_complete`] at `now_ms`: a request booked at a time teaches its
    /// worker's speed how long its first token took.
    ///
    /// # Errors
    ///
    /// `UnknownRequest`, and `InvalidArgument` for a bad time.
    pub fn prefill_complete_at(&self, id: u64, now_ms: f64) -> Result<(), RouteError> {
        // SAFETY: the handle is live and the lock makes the call exclusive.
        self.with(|r| unsafe { route::libroute_router_prefill_complete_at(r, id, now_ms) })
    }

    /// The router's counters.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`.
    pub fn counters(&self) -> Result<RouterCounters, RouteError> {
        let mut c = libroute_router_counters::default();
        // SAFETY: the handle is live and exclusive; `c` is valid for a write.
        self.with(|r| unsafe { route::libroute_router_get_counters(r, &raw mut c) })?;
        Ok(RouterCounters {
            blocks: c.blocks as u64,
            index_workers: c.index_workers as u64,
            evictions: c.evictions,
            rejected_kv_events: c.rejected_kv_events,
            ignored_kv_events: c.ignored_kv_events,
            active_requests: c.active_requests as u64,
            ledger_workers: c.ledger_workers as u64,
            duplicate_ledger_events: c.duplicate_ledger_events,
            late_ledger_events: c.late_ledger_events,
            unknown_worker_ledger_events: c.unknown_worker_ledger_events,
            predictions: c.predictions as u64,
            forced_prediction_expiries: c.forced_prediction_expiries,
        })
    }

    /// Frees the router's memory now; later calls fail with `Closed`. Idempotent.
    pub fn release(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

/// Named policy instances assigned to roles, from one JSON configuration (see the catalog's
/// documentation): `{"instances": [{"name": ..., "policy": {"type": ...}}], "roles": {...}}`.
#[derive(uniffi::Object)]
pub struct PolicySet {
    handle: Arc<SetHandle>,
}

impl std::fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PolicySet")
    }
}

impl PolicySet {
    /// The lent policy and instance name for `role`.
    /// The lent policy for `role`, and its instance name written into `name` (when not empty).
    fn get(&self, role: Role, name: &mut [u8]) -> Result<NonNull<libroute_policy>, RouteError> {
        let mut policy = null();
        let name_ptr = if name.is_empty() {
            null_mut()
        } else {
            name.as_mut_ptr().cast()
        };
        // SAFETY: the set is live; `policy` is valid for a write and `name_ptr` is NULL or valid
        // for `name.len()` writes.
        check(unsafe {
            route::libroute_policy_set_get(
                self.handle.0.as_ptr(),
                role.code(),
                &raw mut policy,
                name_ptr,
                name.len(),
            )
        })?;
        NonNull::new(policy.cast_mut()).ok_or_else(|| RouteError::Panic {
            detail: "libroute_policy_set_get returned no policy".to_owned(),
        })
    }
}

#[uniffi::export]
impl PolicySet {
    /// Builds every instance and assigns them to roles; omitted roles use the default policy.
    ///
    /// # Errors
    ///
    /// `InvalidJson`, `UnknownKey` (naming the key or type), `InvalidKnob` (naming the instance
    /// and the parameter, a duplicate name, or a role naming no instance).
    #[uniffi::constructor]
    pub fn new(json: String) -> Result<Arc<Self>, RouteError> {
        let mut raw = null_mut();
        // SAFETY: `json` is valid for its length; `raw` is a valid out-pointer.
        check(unsafe {
            route::libroute_policy_set_new(json.as_ptr().cast(), json.len(), &raw mut raw)
        })?;
        let raw = NonNull::new(raw).ok_or_else(|| RouteError::Panic {
            detail: "libroute_policy_set_new returned no set".to_owned(),
        })?;
        Ok(Arc::new(PolicySet {
            handle: Arc::new(SetHandle(raw)),
        }))
    }

    /// The policy serving `role` (it keeps the set's memory alive).
    ///
    /// # Errors
    ///
    /// None in practice.
    pub fn policy(&self, role: Role) -> Result<Arc<Policy>, RouteError> {
        let raw = self.get(role, &mut [])?;
        Ok(Arc::new(Policy {
            handle: RwLock::new(Some(PolicyHandle::Lent {
                policy: raw,
                _owner: Arc::clone(&self.handle),
            })),
        }))
    }

    /// The name of the instance serving `role` (`"default"` when none was assigned).
    ///
    /// # Errors
    ///
    /// None in practice.
    pub fn instance_name(&self, role: Role) -> Result<String, RouteError> {
        // Names are as long as the configuration made them: grow the buffer until one fits.
        let mut name = vec![0u8; 256];
        loop {
            match self.get(role, &mut name) {
                Ok(_) => {
                    let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                    return Ok(String::from_utf8_lossy(&name[..len]).into_owned());
                }
                Err(RouteError::BufferTooSmall { .. }) => name.resize(name.len() * 2, 0),
                Err(e) => return Err(e),
            }
        }
    }
}

/// What became of one row in a selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Enum)]
pub enum Disposition {
    /// A candidate: every scorer scored it.
    Candidate,
    /// The request was pinned to another worker.
    NotPinned,
    /// The row is invalid.
    Invalid,
    /// The worker lacks a taint the request requires.
    Ineligible,
    /// The host marked it overloaded.
    Overloaded,
    /// A filter removed it.
    Filtered {
        /// The filter's index in the policy.
        filter: u32,
    },
    /// A filter removed it as overloaded.
    FilterOverloaded {
        /// The filter's index in the policy.
        filter: u32,
    },
    /// A filter failed on it.
    FilterFailed {
        /// The filter's index in the policy.
        filter: u32,
    },
    /// Not examined (the selection stopped before it).
    NotExamined,
}

/// One row's part in a selection.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct RowExplanation {
    /// The row's index in the rows passed.
    pub row: u64,
    /// Its worker.
    pub worker: Worker,
    /// What became of it.
    pub disposition: Disposition,
    /// Each scorer's contribution (empty when the row was not scored).
    pub contributions: Vec<f64>,
    /// The summed cost; NaN when the row was not scored.
    pub total: f64,
    /// Whether it was chosen.
    pub chosen: bool,
}

impl From<&route::libroute_explanation> for RowExplanation {
    fn from(e: &route::libroute_explanation) -> Self {
        use route::libroute_disposition as D;
        let filter = e.filter;
        let disposition = match e.disposition {
            x if x == D::Candidate as u32 => Disposition::Candidate,
            x if x == D::NotPinned as u32 => Disposition::NotPinned,
            x if x == D::Invalid as u32 => Disposition::Invalid,
            x if x == D::Ineligible as u32 => Disposition::Ineligible,
            x if x == D::Overloaded as u32 => Disposition::Overloaded,
            x if x == D::Filtered as u32 => Disposition::Filtered { filter },
            x if x == D::FilterOverloaded as u32 => Disposition::FilterOverloaded { filter },
            x if x == D::FilterFailed as u32 => Disposition::FilterFailed { filter },
            _ => Disposition::NotExamined,
        };
        RowExplanation {
            row: e.row as u64,
            worker: e.worker.into(),
            disposition,
            contributions: e.contributions[..e.scorers.min(e.contributions.len())].to_vec(),
            total: e.total,
            chosen: e.chosen != 0,
        }
    }
}

/// A selection and the explanation of every row.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct Explained {
    /// The selection.
    pub selection: Selection,
    /// One per row, in row order.
    pub rows: Vec<RowExplanation>,
}

#[uniffi::export]
impl Selector {
    /// [`Selector::select`] with an explanation of every row: whether it was a candidate or which
    /// check removed it, and for candidates each scorer's contribution and the total.
    ///
    /// # Errors
    ///
    /// As [`Selector::select`] (a failed selection's explanations are not returned).
    pub fn select_explained(
        &self,
        policy: Arc<Policy>,
        request: Request,
        rows: Vec<Row>,
    ) -> Result<Explained, RouteError> {
        let n = rows.len();
        let mut explanations: Vec<route::libroute_explanation> = Vec::with_capacity(n);
        let fill = |buffer: &mut Vec<libroute_row>| {
            buffer.extend(rows.iter().map(libroute_row::from));
            Ok(())
        };
        let out = self.run_selection(&policy, &request, fill, |c| {
            // SAFETY: `run_selection`'s pointers are valid for the call (see `SelectionCall`);
            // `explanations` has room for the `n` entries the call writes.
            check(unsafe {
                route::libroute_select_explained(
                    c.policy,
                    c.selector,
                    c.request,
                    c.rows.as_ptr(),
                    c.rows.len(),
                    c.out,
                    explanations.as_mut_ptr(),
                    explanations.capacity(),
                )
            })
        })?;
        // SAFETY: the successful call wrote an explanation for each of the `n` rows.
        unsafe { explanations.set_len(n) };
        let rows: Vec<RowExplanation> = explanations.iter().map(RowExplanation::from).collect();
        let contributions = rows
            .iter()
            .find(|r| r.chosen)
            .map(|r| r.contributions.clone())
            .unwrap_or_default();
        Ok(Explained {
            selection: Selection::from_c(&out, contributions),
            rows,
        })
    }
}

uniffi::setup_scaffolding!("libroute");

/// The library version, `MAJOR.MINOR.PATCH`.
#[uniffi::export]
#[must_use]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            prompt_tokens: 64,
            block_size: 16,
            role: Role::Aggregated,
            track_prefill_tokens: true,
            conditional_disagg: false,
            has_tier_matches: false,
            required_taints: 0,
            preferred_taints: Vec::new(),
            shared_hits: None,
            pin: None,
            session: None,
        }
    }

    fn row(worker_id: u64, device_blocks: u32) -> Row {
        Row {
            worker: Worker {
                worker_id,
                dp_rank: 0,
            },
            taints: 0,
            overloaded: false,
            cache: Some(RowCache {
                device_blocks,
                host_blocks: 0,
                disk_blocks: 0,
                effective_blocks: f64::from(device_blocks),
                effective_tokens: u64::from(device_blocks) * 16,
            }),
            load: None,
            speed: None,
        }
    }

    #[test]
    fn selects_the_cached_worker_with_its_breakdown() {
        let policy = Policy::new("{}".to_owned()).unwrap();
        let selector = Selector::new(16, 1).unwrap();
        let s = selector
            .select(policy, request(), vec![row(1, 0), row(2, 3)])
            .unwrap();
        // 4 blocks; worker 2 holds 3: cost 4 - 3 = 1 against 4.
        assert_eq!(s.worker.worker_id, 2);
        assert_eq!(s.cost, 1.0);
        assert_eq!(s.contributions, vec![1.0]);
        assert_eq!(s.reason, PickReason::MinCost { ties: 1 });
        let costs = selector.last_costs().unwrap();
        assert_eq!(
            costs,
            vec![
                Candidate { row: 0, cost: 4.0 },
                Candidate { row: 1, cost: 1.0 }
            ]
        );
    }

    #[test]
    fn errors_name_what_was_wrong() {
        let err = Policy::new(r#"{"temperature": -1}"#.to_owned()).unwrap_err();
        assert!(matches!(err, RouteError::InvalidKnob { .. }), "{err:?}");
        assert!(err.message().contains("temperature"), "{err}");
        assert_eq!(err.code(), Some(202));
        let err = Policy::new(r#"{"temprature": 0}"#.to_owned()).unwrap_err();
        assert!(matches!(err, RouteError::UnknownKey { .. }), "{err:?}");
        let policy = Policy::new(String::new()).unwrap();
        let selector = Selector::new(1, 1).unwrap();
        let err = selector
            .select(policy.clone(), request(), vec![row(1, 0), row(2, 0)])
            .unwrap_err();
        assert!(
            matches!(err, RouteError::CapacityExceeded { .. }),
            "{err:?}"
        );
        let mut nan = row(1, 1);
        nan.cache.as_mut().unwrap().effective_blocks = f64::NAN;
        let err = selector.select(policy, request(), vec![nan]).unwrap_err();
        assert!(matches!(err, RouteError::InvalidRow { .. }), "{err:?}");
        assert!(Selector::new(0, 0).is_err());
    }

    #[test]
    fn released_objects_fail_with_closed() {
        let policy = Policy::new(String::new()).unwrap();
        let selector = Selector::new(4, 1).unwrap();
        policy.release();
        policy.release();
        let err = selector
            .select(policy.clone(), request(), vec![row(1, 0)])
            .unwrap_err();
        assert!(matches!(err, RouteError::Closed { .. }), "{err:?}");
        assert_eq!(err.code(), None);
        selector.release();
        assert!(matches!(
            selector.last_costs(),
            Err(RouteError::Closed { .. })
        ));
        assert!(matches!(
            policy.inputs(Role::Decode, false),
            Err(RouteError::Closed { .. })
        ));
    }

    #[test]
    fn the_router_routes_to_the_worker_holding_the_prefix_and_books_it() {
        let router = Router::new(RouterConfig {
            block_slots: 64,
            max_workers: 64,
            request_slots: 64,
            tombstones: 0,
            prediction_slots: 0,
            prediction_ttl: 0,
            host_weight: 0.0,
            disk_weight: 0.0,
        })
        .unwrap();
        let (a, b) = (
            Worker {
                worker_id: 1,
                dp_rank: 0,
            },
            Worker {
                worker_id: 2,
                dp_rank: 0,
            },
        );
        router.add_worker(a).unwrap();
        router.add_worker(b).unwrap();
        router
            .apply_kv_events(vec![KvEvent::Stored {
                worker: b,
                tier: Tier::Device,
                hashes: vec![11, 12, 13],
            }])
            .unwrap();
        let policy = Policy::new(String::new()).unwrap();
        let selector = Selector::new(16, 1).unwrap();
        let candidates = vec![row(1, 0), row(2, 0)];
        let outcome = router
            .route(
                policy.clone(),
                selector.clone(),
                request(),
                vec![11, 12, 13, 14],
                candidates.clone(),
                7,
                0,
            )
            .unwrap();
        assert_eq!(outcome.selection.worker, b);
        assert_eq!(outcome.rows[1].cache.unwrap().device_blocks, 3);
        assert_eq!(router.counters().unwrap().active_requests, 1);
        let err = router
            .route(policy, selector, request(), vec![], candidates, 7, 0)
            .unwrap_err();
        assert!(
            matches!(err, RouteError::DuplicateRequest { .. }),
            "{err:?}"
        );
        router.free_request(7).unwrap();
        assert!(matches!(
            router.free_request(7),
            Err(RouteError::UnknownRequest { .. })
        ));
        router.release();
        assert!(matches!(router.counters(), Err(RouteError::Closed { .. })));
    }
}

#[cfg(test)]
mod packed {
    use super::*;
    use std::mem::offset_of;

    /// A row packed by hand, byte by byte as the documentation of `PACKED_ROW_BYTES` says.
    fn pack(r: &libroute_row) -> Vec<u8> {
        let mut b = Vec::with_capacity(ROW);
        b.extend(r.worker.worker_id.to_le_bytes());
        b.extend(r.worker.dp_rank.to_le_bytes());
        b.extend([0; 4]);
        b.extend(r.taints.to_le_bytes());
        for v in [r.flags, r.device_blocks, r.host_blocks, r.disk_blocks] {
            b.extend(v.to_le_bytes());
        }
        b.extend(r.effective_blocks.to_bits().to_le_bytes());
        for v in [
            r.effective_tokens,
            r.active_prefill_tokens,
            r.active_decode_blocks,
            r.active_requests,
        ] {
            b.extend(v.to_le_bytes());
        }
        for v in [r.base_ms, r.ms_per_prefill_token, r.ms_per_active_request] {
            b.extend(v.to_bits().to_le_bytes());
        }
        b
    }

    #[test]
    fn the_documented_offsets_are_the_c_rows() {
        assert_eq!(offset_of!(libroute_row, taints), 16);
        assert_eq!(offset_of!(libroute_row, flags), 24);
        assert_eq!(offset_of!(libroute_row, effective_blocks), 40);
        assert_eq!(offset_of!(libroute_row, active_requests), 72);
        assert_eq!(offset_of!(libroute_row, base_ms), 80);
        assert_eq!(offset_of!(libroute_row, ms_per_active_request), 96);
    }

    #[test]
    fn packed_rows_select_as_records_do() {
        let rows: Vec<Row> = (0..64u64)
            .map(|i| Row {
                worker: Worker {
                    worker_id: i,
                    dp_rank: (i % 3) as u32,
                },
                taints: i * 7,
                overloaded: i % 17 == 5,
                cache: (i % 4 != 0).then_some(RowCache {
                    device_blocks: (i % 9) as u32,
                    host_blocks: (i % 5) as u32,
                    disk_blocks: 1,
                    effective_blocks: (i % 9) as f64 * 0.75,
                    effective_tokens: i * 12,
                }),
                load: (i % 5 != 0).then_some(RowLoad {
                    active_prefill_tokens: i * 131 % 4096,
                    active_decode_blocks: i * 17 % 509,
                    active_requests: i % 13,
                }),
                speed: (i % 3 == 0).then_some(RowSpeed {
                    base_ms: i as f64,
                    ms_per_prefill_token: 0.01 * (i % 4) as f64,
                    ms_per_active_request: 0.5,
                }),
            })
            .collect();
        let bytes: Vec<u8> = rows
            .iter()
            .flat_map(|r| pack(&libroute_row::from(r)))
            .collect();
        let mut decoded = Vec::new();
        unpack_rows(&bytes, &mut decoded).unwrap();
        let roundtrip: Vec<Row> = decoded.iter().map(Row::from).collect();
        assert_eq!(roundtrip, rows);
        let policy = Policy::new(r#"{"temperature": 0.5, "seed": 9}"#.to_owned()).unwrap();
        let request = Request {
            prompt_tokens: 512,
            block_size: 16,
            role: Role::Aggregated,
            track_prefill_tokens: true,
            conditional_disagg: false,
            has_tier_matches: true,
            required_taints: 0,
            preferred_taints: Vec::new(),
            shared_hits: None,
            pin: None,
            session: None,
        };
        let (a, b) = (Selector::new(64, 1).unwrap(), Selector::new(64, 1).unwrap());
        for _ in 0..20 {
            let x = a
                .select(policy.clone(), request.clone(), rows.clone())
                .unwrap();
            let y = b
                .select_packed(policy.clone(), request.clone(), bytes.clone())
                .unwrap();
            assert_eq!(x, y);
        }
        let err = a
            .select_packed(policy, request, bytes[..79].to_vec())
            .unwrap_err();
        assert!(matches!(err, RouteError::InvalidArgument { .. }), "{err}");
    }
}
