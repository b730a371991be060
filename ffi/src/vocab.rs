//! The C types a selection reads and writes (workers, rows, requests, selections, their flags
//! and enums), their layout checks, and their conversions to and from the core's types.

use std::mem::{align_of, offset_of, size_of};

use libroute_core::{
    BlockRange, PickReason, PreferredTaint, Request, Role, Row, Selection, SharedHits, Taint,
    TaintSet, WorkerKey,
};

use crate::handle::slice;
use crate::status::{Failure, libroute_status};

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

impl From<WorkerKey> for libroute_worker {
    fn from(w: WorkerKey) -> Self {
        libroute_worker {
            worker_id: w.worker_id,
            dp_rank: w.dp_rank,
        }
    }
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

#[inline]
pub(crate) fn role(value: u32) -> Result<Role, Failure> {
    Role::from_u32(value).ok_or_else(|| not_a_role(value))
}

#[cold]
#[inline(never)]
fn not_a_role(value: u32) -> Failure {
    Failure::new(
        libroute_status::InvalidArgument,
        format_args!("role {value} is not a libroute_role"),
    )
}

#[inline]
pub(crate) fn flag(value: u8, name: &str) -> Result<bool, Failure> {
    if value <= 1 {
        Ok(value == 1)
    } else {
        Err(not_a_flag(value, name))
    }
}

#[cold]
#[inline(never)]
fn not_a_flag(value: u8, name: &str) -> Failure {
    Failure::new(
        libroute_status::InvalidArgument,
        format_args!("{name} is {value}, not 0 or 1"),
    )
}

/// A request as the safe layer takes it: the C struct's fields (`head`, whose two array pointers
/// are not read) and its two arrays as slices. `None` stands for an array the caller gave as
/// NULL with a non-zero length, reported in the request's order of checks.
#[derive(Debug, Clone, Copy)]
pub struct RequestArgs<'a> {
    /// Every field but the arrays.
    pub head: &'a libroute_request,
    /// The preferred taints.
    pub preferred_taints: Option<&'a [libroute_preferred_taint]>,
    /// The shared-hit ranges.
    pub shared_hits: Option<&'a [libroute_block_range]>,
}

impl<'a> RequestArgs<'a> {
    /// The arguments of a C request, its arrays read where they are.
    ///
    /// # Safety
    ///
    /// The request's `preferred_taints` and `shared_hits` must be NULL or valid for their
    /// lengths, unchanged for `'a`.
    #[inline]
    #[must_use]
    pub unsafe fn from_c(request: &'a libroute_request) -> Self {
        // SAFETY: valid for their lengths by this function's contract.
        unsafe {
            RequestArgs {
                head: request,
                preferred_taints: slice(request.preferred_taints, request.preferred_taints_len),
                shared_hits: slice(request.shared_hits, request.shared_hits_len),
            }
        }
    }
}

/// Runs `f` on the core request converted from `request`, with the storage its preferred taints
/// need (filled only when the request has some, so a request without them costs nothing extra).
///
/// # Errors
///
/// The first invalid field; `f` does not run.
#[inline]
pub(crate) fn with_core_request<R>(
    request: &RequestArgs<'_>,
    f: impl FnOnce(&Request<'_>) -> R,
) -> Result<R, Failure> {
    let mut preferred = heapless::Vec::<PreferredTaint, MAX_PREFERRED>::new();
    let converted = core_request(request, &mut preferred)?;
    Ok(f(&converted))
}

/// The most preferred taints a request carries (one per taint index).
const MAX_PREFERRED: usize = 64;

/// Converts a C request into the core's, checking every field; the converted preferred taints
/// live in `preferred` (empty on entry).
#[allow(
    clippy::inline_always,
    reason = "built in place in the caller's frame: returned, the request was copied in chunks \
              that stalled on the narrower stores that wrote it (measured in the ABI benchmark)"
)]
#[inline(always)]
fn core_request<'a>(
    args: &RequestArgs<'a>,
    preferred: &'a mut heapless::Vec<PreferredTaint, MAX_PREFERRED>,
) -> Result<Request<'a>, Failure> {
    let request = args.head;
    let role = role(request.role)?;
    let track = flag(request.track_prefill_tokens, "track_prefill_tokens")?;
    let conditional = flag(request.conditional_disagg, "conditional_disagg")?;
    let tier_matches = flag(request.has_tier_matches, "has_tier_matches")?;
    let has_pin = flag(request.has_pin, "has_pin")?;
    let has_shared = flag(request.has_shared_hits, "has_shared_hits")?;
    let has_session = flag(request.has_session, "has_session")?;
    let (Some(c_preferred), Some(c_hits)) = (args.preferred_taints, args.shared_hits) else {
        return Err(Failure::fixed(
            libroute_status::NullArgument,
            "a request array is NULL with a non-zero length",
        ));
    };
    for p in c_preferred {
        let Some(taint) = Taint::new(p.taint) else {
            return Err(Failure::new(
                libroute_status::InvalidRequest,
                format_args!("preferred taint {} is not below 64", p.taint),
            ));
        };
        let converted = PreferredTaint {
            taint,
            weight: p.weight,
        };
        if preferred.push(converted).is_err() {
            return Err(Failure::new(
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
        let hits = SharedHits::new(block_ranges(c_hits))
            .map_err(|e| Failure::new(libroute_status::InvalidRequest, e))?;
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

/// The core's view of C block ranges, without copying.
fn block_ranges(ranges: &[libroute_block_range]) -> &[BlockRange] {
    // SAFETY: `libroute_block_range` has `BlockRange`'s layout (checked at compile time above)
    // and every bit pattern of two `u64` is a valid `BlockRange`; the lifetime is kept.
    unsafe { std::slice::from_raw_parts(ranges.as_ptr().cast::<BlockRange>(), ranges.len()) }
}

/// The core's view of C rows, without copying: `libroute_row` is `Row` field for field (checked
/// at compile time above).
#[inline]
pub(crate) fn core_rows(rows: &[libroute_row]) -> &[Row] {
    // SAFETY: same size, alignment and field offsets (checked above); every bit pattern of a
    // `libroute_row` is a valid `Row` (integers and floats only); the lifetime is kept.
    unsafe { std::slice::from_raw_parts(rows.as_ptr().cast::<Row>(), rows.len()) }
}

/// [`core_rows`] for writing: a route fills the rows' cache and load fields.
#[inline]
pub(crate) fn core_rows_mut(rows: &mut [libroute_row]) -> &mut [Row] {
    // SAFETY: as `core_rows`, and every bit pattern of a `Row` is a valid `libroute_row`; the
    // exclusive borrow is kept.
    unsafe { std::slice::from_raw_parts_mut(rows.as_mut_ptr().cast::<Row>(), rows.len()) }
}

/// Core rows as C rows, without copying (the other way of [`core_rows`]).
#[inline]
pub(crate) fn c_rows(rows: &[Row]) -> &[libroute_row] {
    // SAFETY: as `core_rows`: the same layout, and every bit pattern of a `Row` is a valid
    // `libroute_row`; the lifetime is kept.
    unsafe { std::slice::from_raw_parts(rows.as_ptr().cast::<libroute_row>(), rows.len()) }
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
        worker: s.worker.into(),
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
