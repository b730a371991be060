//! The vocabulary of one selection: worker identity, roles, taints, the request and the candidate
//! rows a host hands to a policy.
//!
//! [`Row`] is `#[repr(C)]` and made only of integers and floats, so every bit pattern is a valid
//! value: a C host can fill an array of rows in its own memory and libroute reads it in place.
//! What a bit pattern *means* is checked by the selector ([`Row::check`]), which names the row and
//! field of anything it rejects.

use core::fmt;

/// A worker and its data-parallel rank: the unit a policy selects.
///
/// Ordered by `(worker_id, dp_rank)`, the order seeded selection sorts candidates into.
///
/// # Examples
///
/// ```
/// use libroute_core::WorkerKey;
/// assert!(WorkerKey::new(1, 9) < WorkerKey::new(2, 0));
/// assert_eq!(WorkerKey::from(7), WorkerKey::new(7, 0));
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct WorkerKey {
    /// The worker's id, as the host's discovery names it.
    pub worker_id: u64,
    /// The data-parallel rank within the worker (0 when the worker has one rank).
    pub dp_rank: u32,
}

impl WorkerKey {
    /// A worker id with a data-parallel rank.
    #[must_use]
    pub const fn new(worker_id: u64, dp_rank: u32) -> Self {
        Self { worker_id, dp_rank }
    }
}

impl From<u64> for WorkerKey {
    fn from(worker_id: u64) -> Self {
        Self::new(worker_id, 0)
    }
}

impl fmt::Display for WorkerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.worker_id, self.dp_rank)
    }
}

/// The role of the worker pool a selection is for.
///
/// # Examples
///
/// ```
/// use libroute_core::{Label, Role};
/// assert_eq!(Role::Aggregated.label(), Label::Decode);
/// assert_eq!(Role::Prefill.label(), Label::Prefill);
/// ```
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[repr(u32)]
pub enum Role {
    /// Prefill-only workers of disaggregated serving.
    Prefill = 0,
    /// Decode-only workers of disaggregated serving.
    Decode = 1,
    /// Workers that do both prefill and decode.
    #[default]
    Aggregated = 2,
    /// Encoder workers (multimodal front halves).
    Encode = 3,
}

/// The cost-model label a role maps to: the default policy treats every pool that decodes like
/// the decode pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Label {
    /// The prefill pool.
    Prefill,
    /// Every pool that decodes: decode, aggregated and encode.
    Decode,
}

impl Role {
    /// Every role, in discriminant order.
    pub const ALL: [Role; 4] = [Role::Prefill, Role::Decode, Role::Aggregated, Role::Encode];

    /// The cost-model label of this role (spec section 2).
    #[must_use]
    pub const fn label(self) -> Label {
        match self {
            Role::Prefill => Label::Prefill,
            Role::Decode | Role::Aggregated | Role::Encode => Label::Decode,
        }
    }

    /// The role with this discriminant, or `None` for a value no role has (how hosts across an
    /// ABI are checked rather than transmuted).
    #[must_use]
    pub const fn from_u32(value: u32) -> Option<Self> {
        match value {
            0 => Some(Role::Prefill),
            1 => Some(Role::Decode),
            2 => Some(Role::Aggregated),
            3 => Some(Role::Encode),
            _ => None,
        }
    }
}

/// A taint: a label a worker carries (`gpu=h100`, `zone=b`), interned by the host into a small
/// index so a worker's taints fit one machine word.
///
/// # Examples
///
/// ```
/// use libroute_core::Taint;
/// assert!(Taint::new(63).is_some());
/// assert!(Taint::new(64).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Taint(u8);

impl Taint {
    /// How many distinct taints a deployment can use.
    pub const LIMIT: u32 = 64;

    /// The taint with this index, if it is below [`Taint::LIMIT`].
    #[must_use]
    pub const fn new(index: u32) -> Option<Self> {
        if index < Self::LIMIT {
            #[allow(clippy::cast_possible_truncation, reason = "checked above: index < 64")]
            Some(Self(index as u8))
        } else {
            None
        }
    }

    /// The taint's index.
    #[must_use]
    pub const fn index(self) -> u32 {
        self.0 as u32
    }
}

/// A set of taints as a 64-bit mask (bit `i` is taint `i`).
///
/// # Examples
///
/// ```
/// use libroute_core::{Taint, TaintSet};
/// let gpu = Taint::new(3).unwrap();
/// let set = TaintSet::EMPTY.with(gpu);
/// assert!(set.contains(gpu));
/// assert!(set.contains_all(TaintSet::EMPTY));
/// ```
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TaintSet(pub u64);

impl TaintSet {
    /// No taints.
    pub const EMPTY: TaintSet = TaintSet(0);

    /// This set with `taint` added.
    #[must_use]
    pub const fn with(self, taint: Taint) -> Self {
        Self(self.0 | (1 << taint.0))
    }

    /// Whether `taint` is in the set.
    #[must_use]
    pub const fn contains(self, taint: Taint) -> bool {
        self.0 & (1 << taint.0) != 0
    }

    /// Whether every taint of `other` is in this set.
    #[must_use]
    pub const fn contains_all(self, other: TaintSet) -> bool {
        self.0 & other.0 == other.0
    }
}

/// A preferred taint and its weight: matching workers are favoured (positive weight) or avoided
/// (negative weight) through the multiplier `exp(-tanh(sum of matching weights))`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PreferredTaint {
    /// The taint.
    pub taint: Taint,
    /// Its weight; must be finite.
    pub weight: f64,
}

/// A half-open range `[start, end)` of block positions found in an external shared cache.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockRange {
    /// First block position in the range.
    pub start: u64,
    /// One past the last block position.
    pub end: u64,
}

impl BlockRange {
    /// The range `[start, end)`.
    #[must_use]
    pub const fn new(start: u64, end: u64) -> Self {
        Self { start, end }
    }
}

/// Sorted, non-overlapping, non-empty half-open block ranges found in a shared cache.
///
/// Built with [`SharedHits::new`], which checks the shape once so scoring can trust it.
///
/// # Examples
///
/// ```
/// use libroute_core::{BlockRange, SharedHits};
/// let ranges = [BlockRange::new(0, 4), BlockRange::new(6, 8)];
/// let hits = SharedHits::new(&ranges).unwrap();
/// assert_eq!(hits.hits_beyond(2), 4);
/// assert!(SharedHits::new(&[BlockRange::new(3, 3)]).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedHits<'a> {
    ranges: &'a [BlockRange],
}

impl<'a> SharedHits<'a> {
    /// Checks that `ranges` are non-empty, sorted and disjoint.
    ///
    /// # Errors
    ///
    /// [`RequestError::SharedHits`] with the index of the first bad range.
    pub const fn new(ranges: &'a [BlockRange]) -> Result<Self, RequestError> {
        let mut i = 0;
        while i < ranges.len() {
            let r = ranges[i];
            if r.start >= r.end || (i > 0 && ranges[i - 1].end > r.start) {
                return Err(RequestError::SharedHits { range: i });
            }
            i += 1;
        }
        Ok(Self { ranges })
    }

    /// The ranges.
    #[must_use]
    pub const fn ranges(&self) -> &'a [BlockRange] {
        self.ranges
    }

    /// How many hit positions are `>= position`.
    #[must_use]
    pub fn hits_beyond(&self, position: u64) -> u64 {
        let mut total = 0u64;
        for r in self.ranges.iter().rev() {
            if r.end <= position {
                break;
            }
            let start = if r.start > position {
                r.start
            } else {
                position
            };
            total = total.saturating_add(r.end - start);
        }
        total
    }
}

/// Which leg of serving a selection is for: what a component needs to know to declare its
/// inputs before any row is seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Leg {
    /// The role of the pool being selected from.
    pub role: Role,
    /// Whether conditional disaggregation is on (a decode leg that may still use cache credit).
    pub conditional_disagg: bool,
}

/// One request, as the policy sees it. Request-wide values are derived from it once per selection.
///
/// # Examples
///
/// ```
/// use libroute_core::{Request, Role};
/// let req = Request::new(2048, 16).role(Role::Prefill);
/// assert_eq!(req.request_blocks(), 128);
/// assert_eq!(Request::new(0, 16).request_blocks(), 1, "an empty prompt counts as one block");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request<'a> {
    /// Prompt length in tokens (`P`).
    pub prompt_tokens: u64,
    /// KV-cache block size in tokens (`bs`); must be at least 1.
    pub block_size: u32,
    /// The role of the pool being selected from.
    pub role: Role,
    /// Whether this request's prefill tokens are tracked (false on the decode leg of
    /// disaggregated serving).
    pub track_prefill_tokens: bool,
    /// Whether conditional disaggregation is on.
    pub conditional_disagg: bool,
    /// Whether the request has any device/host/disk overlap entry, even for an ineligible worker.
    pub has_tier_matches: bool,
    /// A worker this request must go to; sampling is bypassed.
    pub pin: Option<WorkerKey>,
    /// Taints a worker must carry to be eligible.
    pub required_taints: TaintSet,
    /// Taints that bias the choice; empty for none.
    pub preferred_taints: &'a [PreferredTaint],
    /// Block ranges found in an external shared cache.
    pub shared_hits: Option<SharedHits<'a>>,
    /// The conversation or session this request belongs to, for session affinity.
    pub session: Option<u64>,
}

impl<'a> Request<'a> {
    /// A request of `prompt_tokens` tokens with `block_size`-token blocks, aggregated role,
    /// tracked prefill, no pin, taints or shared hits.
    #[must_use]
    pub const fn new(prompt_tokens: u64, block_size: u32) -> Self {
        Self {
            prompt_tokens,
            block_size,
            role: Role::Aggregated,
            track_prefill_tokens: true,
            conditional_disagg: false,
            has_tier_matches: false,
            pin: None,
            required_taints: TaintSet::EMPTY,
            preferred_taints: &[],
            shared_hits: None,
            session: None,
        }
    }

    /// This request with another role.
    #[must_use]
    pub const fn role(mut self, role: Role) -> Self {
        self.role = role;
        self
    }

    /// This request with prefill tracking on or off.
    #[must_use]
    pub const fn track_prefill_tokens(mut self, track: bool) -> Self {
        self.track_prefill_tokens = track;
        self
    }

    /// This request with conditional disaggregation on or off.
    #[must_use]
    pub const fn conditional_disagg(mut self, on: bool) -> Self {
        self.conditional_disagg = on;
        self
    }

    /// This request with `has_tier_matches` set.
    #[must_use]
    pub const fn has_tier_matches(mut self, has: bool) -> Self {
        self.has_tier_matches = has;
        self
    }

    /// This request pinned to `worker`.
    #[must_use]
    pub const fn pin(mut self, worker: WorkerKey) -> Self {
        self.pin = Some(worker);
        self
    }

    /// This request with required taints.
    #[must_use]
    pub const fn required_taints(mut self, taints: TaintSet) -> Self {
        self.required_taints = taints;
        self
    }

    /// This request with preferred taints.
    #[must_use]
    pub const fn preferred_taints(mut self, taints: &'a [PreferredTaint]) -> Self {
        self.preferred_taints = taints;
        self
    }

    /// This request with shared-cache hits.
    #[must_use]
    pub const fn shared_hits(mut self, hits: SharedHits<'a>) -> Self {
        self.shared_hits = Some(hits);
        self
    }

    /// This request in session `id` (see [`crate::catalog::SessionAffinity`]).
    #[must_use]
    pub const fn session(mut self, id: u64) -> Self {
        self.session = Some(id);
        self
    }

    /// The leg this request is for.
    #[must_use]
    pub const fn leg(&self) -> Leg {
        Leg {
            role: self.role,
            conditional_disagg: self.conditional_disagg,
        }
    }

    /// `RB = max(1, ceil(P / bs))`: the request's size in blocks (spec section 2, with the
    /// decision that an empty prompt counts as one block). Returns 0 only for `block_size == 0`,
    /// which [`Request::check`] rejects.
    #[must_use]
    pub const fn request_blocks(&self) -> u64 {
        if self.block_size == 0 {
            return 0;
        }
        let blocks = self.prompt_tokens.div_ceil(self.block_size as u64);
        if blocks == 0 { 1 } else { blocks }
    }

    /// Checks the request's own fields.
    ///
    /// # Errors
    ///
    /// The first problem found, as a [`RequestError`].
    pub fn check(&self) -> Result<(), RequestError> {
        if self.block_size == 0 {
            return Err(RequestError::BlockSize);
        }
        for (index, p) in self.preferred_taints.iter().enumerate() {
            if !p.weight.is_finite() {
                return Err(RequestError::PreferredTaintWeight { index });
            }
        }
        Ok(())
    }
}

/// What is wrong with a [`Request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// `block_size` is 0.
    BlockSize,
    /// A preferred taint's weight is NaN or infinite.
    PreferredTaintWeight {
        /// Index into `preferred_taints`.
        index: usize,
    },
    /// A shared-hit range is empty, unsorted or overlaps the one before it.
    SharedHits {
        /// Index of the first bad range.
        range: usize,
    },
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::BlockSize => f.write_str("block_size must be at least 1"),
            RequestError::PreferredTaintWeight { index } => {
                write!(f, "preferred taint {index} has a non-finite weight")
            }
            RequestError::SharedHits { range } => write!(
                f,
                "shared-cache hit range {range} is empty, unsorted or overlaps the previous one"
            ),
        }
    }
}

impl core::error::Error for RequestError {}

/// Bits of [`Row::flags`].
///
/// # Examples
///
/// ```
/// use libroute_core::RowFlags;
/// let f = RowFlags::HAS_CACHE.union(RowFlags::HAS_LOAD);
/// assert!(f.contains(RowFlags::HAS_LOAD));
/// assert!(!f.contains(RowFlags::OVERLOADED));
/// ```
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RowFlags(pub u32);

impl RowFlags {
    /// No flags: no cache entry, no load projection, not overloaded.
    pub const NONE: RowFlags = RowFlags(0);
    /// The row's cache fields are meaningful (otherwise they read as zeros).
    pub const HAS_CACHE: RowFlags = RowFlags(1);
    /// The row's load projection is available (otherwise it reads as zeros and `available` is
    /// false).
    pub const HAS_LOAD: RowFlags = RowFlags(2);
    /// The host marks the worker overloaded (busy); it is skipped with the overload reason.
    pub const OVERLOADED: RowFlags = RowFlags(4);
    /// The row's speed fields are meaningful (otherwise they read as absent).
    pub const HAS_SPEED: RowFlags = RowFlags(8);
    /// Every defined bit.
    pub const ALL: RowFlags = RowFlags(15);

    /// Both sets of flags.
    #[must_use]
    pub const fn union(self, other: RowFlags) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every bit of `other` is set.
    #[must_use]
    pub const fn contains(self, other: RowFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// The CACHE inputs of one candidate: overlap per tier and the accounting estimate.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Cache {
    /// Leading request blocks held in device memory.
    pub device_blocks: u32,
    /// Leading request blocks held in host memory.
    pub host_blocks: u32,
    /// Leading request blocks held on disk.
    pub disk_blocks: u32,
    /// `E_blocks`: the accounting estimate in blocks (finite, `>= 0`).
    pub effective_blocks: f64,
    /// `E_tokens`: the accounting estimate in tokens.
    pub effective_tokens: u64,
}

impl Cache {
    /// The estimate a host with tier overlaps computes (spec section 2):
    /// `E_blocks = dev + host_w*host + disk_w*disk` (left to right) and
    /// `E_tokens = round(E_blocks * bs)`, half away from zero, clamped at 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use libroute_core::Cache;
    /// let c = Cache::from_tiers(4, 2, 1, 0.75, 0.25, 16);
    /// assert_eq!(c.effective_blocks, 5.75);
    /// assert_eq!(c.effective_tokens, 92);
    /// ```
    #[must_use]
    pub fn from_tiers(
        device: u32,
        host: u32,
        disk: u32,
        host_weight: f64,
        disk_weight: f64,
        block_size: u32,
    ) -> Self {
        let effective_blocks =
            f64::from(device) + host_weight * f64::from(host) + disk_weight * f64::from(disk);
        let tokens = libm::round(effective_blocks * f64::from(block_size));
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "float-to-int `as` saturates; negatives and NaN become 0 as the spec clamps"
        )]
        let effective_tokens = tokens as u64;
        Self {
            device_blocks: device,
            host_blocks: host,
            disk_blocks: disk,
            effective_blocks,
            effective_tokens,
        }
    }
}

/// The LOAD inputs of one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Load {
    /// Whether the host has a load projection for this worker; when false every field reads 0.
    pub available: bool,
    /// `apt`: prefill tokens queued or running on the worker.
    pub active_prefill_tokens: u64,
    /// `dcb`: active decode blocks, including this request's new blocks not already shared there.
    pub active_decode_blocks: u64,
    /// `nreq`: active requests.
    pub active_requests: u64,
}

/// The SPEED inputs of one candidate: how long the worker takes to produce a request's first
/// token, as the host measured it (see [`crate::Ledger::book_at`]): `base_ms +
/// ms_per_prefill_token * (prefill tokens queued there, this request's uncached ones included) +
/// ms_per_active_request * (requests active there, this one included)`.
///
/// # Examples
///
/// ```
/// use libroute_core::{Row, Speed, WorkerKey};
/// let speed = Speed { base_ms: 20.0, ms_per_prefill_token: 0.02, ms_per_active_request: 0.5 };
/// let row = Row::new(WorkerKey::new(1, 0)).with_speed(speed);
/// assert_eq!(row.speed(), Some(speed));
/// assert_eq!(speed.first_token_ms(1000, 4), 20.0 + 20.0 + 2.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Speed {
    /// Fixed time of a request's first token, ms (finite, `>= 0`).
    pub base_ms: f64,
    /// Time per prefill token queued on the worker, ms (finite, `>= 0`).
    pub ms_per_prefill_token: f64,
    /// Time per request active on the worker: the decode work a prefill shares the worker's
    /// passes with, ms (finite, `>= 0`).
    pub ms_per_active_request: f64,
}

impl Speed {
    /// The estimated time to first token, ms, of a request that finds `prefill_tokens` to
    /// compute on the worker (queued ones and its own uncached ones) and `requests` active there
    /// (itself included).
    #[must_use]
    #[allow(
        clippy::cast_precision_loss,
        reason = "token and block counts far below 2^53"
    )]
    pub fn first_token_ms(&self, prefill_tokens: u64, requests: u64) -> f64 {
        self.base_ms
            + self.ms_per_prefill_token * prefill_tokens as f64
            + self.ms_per_active_request * requests as f64
    }

    /// Whether every field is finite and `>= 0`.
    #[must_use]
    #[allow(
        clippy::needless_bitwise_bool,
        clippy::manual_range_contains,
        reason = "branch-free: it runs once per row"
    )]
    pub fn is_valid(&self) -> bool {
        let ok = |x: f64| (x >= 0.0) & (x <= f64::MAX);
        ok(self.base_ms) & ok(self.ms_per_prefill_token) & ok(self.ms_per_active_request)
    }
}

/// One candidate worker for one request, laid out for zero-copy use from C.
///
/// Every field is an integer or a float, so any bit pattern is a value; [`Row::check`] says
/// whether it is a *valid* one. Build rows in Rust with [`Row::new`] and the `with_*` methods.
///
/// # Examples
///
/// ```
/// use libroute_core::{Cache, Load, Row, WorkerKey};
/// let row = Row::new(WorkerKey::new(7, 0))
///     .with_cache(Cache { device_blocks: 6, effective_blocks: 6.0, effective_tokens: 96, ..Cache::default() })
///     .with_load(Load { available: true, active_prefill_tokens: 16, active_decode_blocks: 5, active_requests: 0 });
/// assert_eq!(row.cache().device_blocks, 6);
/// assert!(row.load().available);
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Row {
    /// The worker and rank this row stands for.
    pub worker: WorkerKey,
    /// The worker's taints.
    pub taints: TaintSet,
    /// Which optional groups are present, and whether the host marks the worker overloaded.
    pub flags: RowFlags,
    /// Leading request blocks in device memory (CACHE).
    pub device_blocks: u32,
    /// Leading request blocks in host memory (CACHE).
    pub host_blocks: u32,
    /// Leading request blocks on disk (CACHE).
    pub disk_blocks: u32,
    /// `E_blocks` (CACHE); must be finite and `>= 0` when [`RowFlags::HAS_CACHE`] is set.
    pub effective_blocks: f64,
    /// `E_tokens` (CACHE).
    pub effective_tokens: u64,
    /// `apt` (LOAD).
    pub active_prefill_tokens: u64,
    /// `dcb` (LOAD).
    pub active_decode_blocks: u64,
    /// `nreq` (LOAD).
    pub active_requests: u64,
    /// [`Speed::base_ms`] (SPEED).
    pub base_ms: f64,
    /// [`Speed::ms_per_prefill_token`] (SPEED).
    pub ms_per_prefill_token: f64,
    /// [`Speed::ms_per_active_request`] (SPEED).
    pub ms_per_active_request: f64,
}

impl Row {
    /// A row with no cache entry, no load projection and no taints.
    #[must_use]
    pub const fn new(worker: WorkerKey) -> Self {
        Self {
            worker,
            taints: TaintSet::EMPTY,
            flags: RowFlags::NONE,
            device_blocks: 0,
            host_blocks: 0,
            disk_blocks: 0,
            effective_blocks: 0.0,
            effective_tokens: 0,
            active_prefill_tokens: 0,
            active_decode_blocks: 0,
            active_requests: 0,
            base_ms: 0.0,
            ms_per_prefill_token: 0.0,
            ms_per_active_request: 0.0,
        }
    }

    /// This row with a cache entry.
    #[must_use]
    pub const fn with_cache(mut self, cache: Cache) -> Self {
        self.flags = self.flags.union(RowFlags::HAS_CACHE);
        self.device_blocks = cache.device_blocks;
        self.host_blocks = cache.host_blocks;
        self.disk_blocks = cache.disk_blocks;
        self.effective_blocks = cache.effective_blocks;
        self.effective_tokens = cache.effective_tokens;
        self
    }

    /// This row with a load projection (`load.available` is ignored: the projection is there).
    #[must_use]
    pub const fn with_load(mut self, load: Load) -> Self {
        self.flags = self.flags.union(RowFlags::HAS_LOAD);
        self.active_prefill_tokens = load.active_prefill_tokens;
        self.active_decode_blocks = load.active_decode_blocks;
        self.active_requests = load.active_requests;
        self
    }

    /// This row with the worker's measured speed.
    #[must_use]
    pub const fn with_speed(mut self, speed: Speed) -> Self {
        self.flags = self.flags.union(RowFlags::HAS_SPEED);
        self.base_ms = speed.base_ms;
        self.ms_per_prefill_token = speed.ms_per_prefill_token;
        self.ms_per_active_request = speed.ms_per_active_request;
        self
    }

    /// This row with taints.
    #[must_use]
    pub const fn with_taints(mut self, taints: TaintSet) -> Self {
        self.taints = taints;
        self
    }

    /// This row marked overloaded (or not).
    #[must_use]
    pub const fn overloaded(mut self, overloaded: bool) -> Self {
        self.flags = if overloaded {
            self.flags.union(RowFlags::OVERLOADED)
        } else {
            RowFlags(self.flags.0 & !RowFlags::OVERLOADED.0)
        };
        self
    }

    /// The cache entry, zeros when the row has none.
    #[must_use]
    pub const fn cache(&self) -> Cache {
        if self.flags.contains(RowFlags::HAS_CACHE) {
            Cache {
                device_blocks: self.device_blocks,
                host_blocks: self.host_blocks,
                disk_blocks: self.disk_blocks,
                effective_blocks: self.effective_blocks,
                effective_tokens: self.effective_tokens,
            }
        } else {
            Cache {
                device_blocks: 0,
                host_blocks: 0,
                disk_blocks: 0,
                effective_blocks: 0.0,
                effective_tokens: 0,
            }
        }
    }

    /// The load projection, zeros with `available == false` when the row has none.
    #[must_use]
    pub const fn load(&self) -> Load {
        if self.flags.contains(RowFlags::HAS_LOAD) {
            Load {
                available: true,
                active_prefill_tokens: self.active_prefill_tokens,
                active_decode_blocks: self.active_decode_blocks,
                active_requests: self.active_requests,
            }
        } else {
            Load {
                available: false,
                active_prefill_tokens: 0,
                active_decode_blocks: 0,
                active_requests: 0,
            }
        }
    }

    /// The measured speed, `None` when the row has none.
    #[must_use]
    pub const fn speed(&self) -> Option<Speed> {
        if self.flags.contains(RowFlags::HAS_SPEED) {
            Some(Speed {
                base_ms: self.base_ms,
                ms_per_prefill_token: self.ms_per_prefill_token,
                ms_per_active_request: self.ms_per_active_request,
            })
        } else {
            None
        }
    }

    /// Whether the host marks this worker overloaded.
    #[must_use]
    pub const fn is_overloaded(&self) -> bool {
        self.flags.contains(RowFlags::OVERLOADED)
    }

    /// Whether [`Row::check`] would pass, computed without branches.
    ///
    /// # Examples
    ///
    /// ```
    /// use libroute_core::{Row, WorkerKey};
    /// let mut row = Row::new(WorkerKey::new(1, 0));
    /// assert!(row.is_valid());
    /// row.flags.0 = 64;
    /// assert!(!row.is_valid());
    /// ```
    #[inline]
    #[must_use]
    #[allow(
        clippy::needless_bitwise_bool,
        reason = "branch-free on purpose: it runs once per row"
    )]
    pub fn is_valid(&self) -> bool {
        let known_flags = self.flags.0 & !RowFlags::ALL.0 == 0;
        let no_cache = self.flags.0 & RowFlags::HAS_CACHE.0 == 0;
        let estimate_ok = (self.effective_blocks >= 0.0) & (self.effective_blocks <= f64::MAX);
        let no_speed = self.flags.0 & RowFlags::HAS_SPEED.0 == 0;
        let speed_ok = Speed {
            base_ms: self.base_ms,
            ms_per_prefill_token: self.ms_per_prefill_token,
            ms_per_active_request: self.ms_per_active_request,
        }
        .is_valid();
        known_flags & (no_cache | estimate_ok) & (no_speed | speed_ok)
    }

    /// Checks what the bits mean.
    ///
    /// # Errors
    ///
    /// The field that is invalid: unknown flag bits, an `effective_blocks` that is NaN, infinite
    /// or negative on a row with a cache entry, or a speed field that is on a row with a speed.
    #[inline]
    pub fn check(&self) -> Result<(), RowField> {
        if self.flags.0 & !RowFlags::ALL.0 != 0 {
            return Err(RowField::Flags);
        }
        if self.flags.contains(RowFlags::HAS_CACHE)
            && !(self.effective_blocks.is_finite() && self.effective_blocks >= 0.0)
        {
            return Err(RowField::EffectiveBlocks);
        }
        if let Some(speed) = self.speed() {
            if !speed.is_valid() {
                return Err(RowField::Speed);
            }
        }
        Ok(())
    }
}

/// A field of a [`Row`], named in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RowField {
    /// [`Row::flags`] has bits no flag defines.
    Flags,
    /// [`Row::effective_blocks`] is NaN, infinite or negative.
    EffectiveBlocks,
    /// A speed field ([`Row::base_ms`], [`Row::ms_per_prefill_token`] or
    /// [`Row::ms_per_active_request`]) is NaN, infinite or negative.
    Speed,
}

impl fmt::Display for RowField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RowField::Flags => "flags has undefined bits",
            RowField::EffectiveBlocks => "effective_blocks is NaN, infinite or negative",
            RowField::Speed => "a speed field is NaN, infinite or negative",
        })
    }
}
