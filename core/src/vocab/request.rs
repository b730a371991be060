//! What is being routed: the request, its role and leg, its preferred taints and the shared
//! cache's hits.

use core::fmt;

use super::worker::{Taint, TaintSet, WorkerKey};

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
#[allow(
    clippy::struct_excessive_bools,
    reason = "the spec's request-wide switches, named as in the spec, and one hint"
)]
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
    /// Whether every tier match is in device memory: no worker holds host or disk blocks of
    /// the request (a [`crate::Router`] knows this from its query and sets it). A hint for
    /// speed: the default cost's one pass then reads no row's host or disk blocks but checks
    /// them, and costs again the rows that hold some, so a wrong `true` changes no result.
    pub device_matches_only: bool,
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
            device_matches_only: false,
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

    /// This request with `device_matches_only` set.
    #[must_use]
    pub const fn device_matches_only(mut self, only: bool) -> Self {
        self.device_matches_only = only;
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

    /// This request in session `id` (see [`crate::policies::catalog::SessionAffinity`]).
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
