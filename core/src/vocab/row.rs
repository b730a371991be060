//! The candidate rows a host hands to a policy: one per worker, with optional groups of inputs
//! (cache overlap per tier, load, speed) marked present by [`RowFlags`].
//!
//! [`Row`] is `#[repr(C)]` and made only of integers and floats, so every bit pattern is a valid
//! value: a C host can fill an array of rows in its own memory and libroute reads it in place.
//! What a bit pattern *means* is checked by the selector ([`Row::check`]), which names the row and
//! field of anything it rejects.

use core::fmt;

use super::math::{EXACT_LIMIT, exact_f64};
use super::worker::{TaintSet, WorkerKey};

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

    /// All ones when the flags carry a load projection ([`RowFlags::HAS_LOAD`]), else zero: a
    /// load counter `&` this mask reads as [`Row::load`] does, zero without a projection, with
    /// no branch.
    pub(crate) const fn load_mask(self) -> u64 {
        0u64.wrapping_sub(self.contains(RowFlags::HAS_LOAD) as u64)
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
        let tokens = u64::from(device) * u64::from(block_size);
        if host == 0
            && disk == 0
            && host_weight.is_finite()
            && disk_weight.is_finite()
            && tokens < 1 << 53
        {
            // Device blocks alone, the common case: the weighted terms are (signed) zeros that
            // change no sum, and the product is exact in `f64`, so its rounding is itself.
            return Self::in_device(device, block_size);
        }
        let blocks =
            f64::from(device) + host_weight * f64::from(host) + disk_weight * f64::from(disk);
        Self {
            device_blocks: device,
            host_blocks: host,
            disk_blocks: disk,
            effective_blocks: blocks,
            // Rounded half away from zero, negatives and NaN to 0, as the spec clamps.
            effective_tokens: crate::vocab::math::round_count(blocks * f64::from(block_size)),
        }
    }

    /// [`Cache::from_tiers`] of `device` blocks and none in host memory or on disk, when
    /// [`Cache::in_device_is_exact`] holds for the weights and the block size.
    #[inline]
    pub(crate) fn in_device(device: u32, block_size: u32) -> Self {
        Self {
            device_blocks: device,
            host_blocks: 0,
            disk_blocks: 0,
            effective_blocks: f64::from(device),
            effective_tokens: u64::from(device) * u64::from(block_size),
        }
    }

    /// Whether [`Cache::in_device`] is [`Cache::from_tiers`] for every device count with these
    /// weights and block size: finite weights (their terms are then zeros) and a block size of
    /// at most 2^21, so every product with a `u32` count is below 2^53, exact in `f64`.
    #[inline]
    pub(crate) fn in_device_is_exact(host_weight: f64, disk_weight: f64, block_size: u32) -> bool {
        host_weight.is_finite() && disk_weight.is_finite() && block_size <= 1 << 21
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
    pub const fn is_valid(&self) -> bool {
        non_negative_finite(self.base_ms)
            & non_negative_finite(self.ms_per_prefill_token)
            & non_negative_finite(self.ms_per_active_request)
    }
}

/// What a filter that decides by the row alone decides, as data: a row lacking one of
/// `required_taints` is rejected, and one with a load projection above a limit is overloaded.
/// A filter declares it through `Filter::row_rule`, and a scorer's one-pass admission that
/// applies it (`Scorer::applies_row_rules`) then leaves out the same rows the filter would,
/// while reading each row once. [`RowRule::NONE`] leaves out nothing.
///
/// # Examples
///
/// ```
/// use libroute_core::{Row, RowFlags, RowRule, TaintSet, WorkerKey};
///
/// let rule = RowRule::NONE.with_max_requests(11).and(RowRule::requiring(TaintSet(0b10)));
/// let mut row = Row::new(WorkerKey::new(1, 0));
/// row.flags = RowFlags::HAS_LOAD;
/// row.active_requests = 12;
/// assert!(row.exceeds(&rule));
/// assert_eq!(rule.required_taints, TaintSet(0b10));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RowRule {
    /// Taints a row must carry.
    pub required_taints: TaintSet,
    /// Most active KV blocks (`dcb`); `u64::MAX` for no limit.
    pub max_active_blocks: u64,
    /// Most outstanding prefill tokens (`apt`); `u64::MAX` for no limit.
    pub max_prefill_tokens: u64,
    /// Most active requests (`nreq`); `u64::MAX` for no limit.
    pub max_requests: u64,
}

impl RowRule {
    /// No required taint and no limit.
    pub const NONE: RowRule = RowRule {
        required_taints: TaintSet::EMPTY,
        max_active_blocks: u64::MAX,
        max_prefill_tokens: u64::MAX,
        max_requests: u64::MAX,
    };

    /// A rule requiring `taints`, without limits.
    #[must_use]
    pub const fn requiring(taints: TaintSet) -> Self {
        RowRule {
            required_taints: taints,
            ..RowRule::NONE
        }
    }

    /// This rule with at most `max` active KV blocks.
    #[must_use]
    pub const fn with_max_active_blocks(self, max: u64) -> Self {
        RowRule {
            max_active_blocks: max,
            ..self
        }
    }

    /// This rule with at most `max` outstanding prefill tokens.
    #[must_use]
    pub const fn with_max_prefill_tokens(self, max: u64) -> Self {
        RowRule {
            max_prefill_tokens: max,
            ..self
        }
    }

    /// This rule with at most `max` active requests.
    #[must_use]
    pub const fn with_max_requests(self, max: u64) -> Self {
        RowRule {
            max_requests: max,
            ..self
        }
    }

    /// Both rules: a row passes when it passes each (the taints' union, each limit's least).
    #[must_use]
    pub const fn and(self, other: RowRule) -> Self {
        const fn least(a: u64, b: u64) -> u64 {
            if a < b { a } else { b }
        }
        RowRule {
            required_taints: self.required_taints.union(other.required_taints),
            max_active_blocks: least(self.max_active_blocks, other.max_active_blocks),
            max_prefill_tokens: least(self.max_prefill_tokens, other.max_prefill_tokens),
            max_requests: least(self.max_requests, other.max_requests),
        }
    }

    /// Whether any limit is set.
    #[must_use]
    pub const fn has_limits(&self) -> bool {
        (self.max_active_blocks & self.max_prefill_tokens & self.max_requests) != u64::MAX
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

    /// Whether the row is a candidate for a request requiring `required`: it carries every
    /// required taint (else it is ineligible) and the host has not marked it overloaded. The one
    /// definition of admission before filters, computed without branches.
    ///
    /// # Examples
    ///
    /// ```
    /// use libroute_core::{Row, RowFlags, TaintSet, WorkerKey};
    /// let mut row = Row::new(WorkerKey::new(1, 0));
    /// row.taints = TaintSet(0b01);
    /// assert!(row.is_candidate(TaintSet(0b01)));
    /// assert!(!row.is_candidate(TaintSet(0b11)));
    /// row.flags = RowFlags::OVERLOADED;
    /// assert!(!row.is_candidate(TaintSet::EMPTY));
    /// ```
    #[must_use]
    #[inline]
    pub const fn is_candidate(&self, required: TaintSet) -> bool {
        self.taints.contains_all(required) & !self.is_overloaded()
    }

    /// Whether the row has a load projection above one of `rule`'s limits, computed without
    /// branches.
    #[must_use]
    #[inline]
    #[allow(
        clippy::needless_bitwise_bool,
        reason = "branch-free: admission loops call it for every row"
    )]
    pub const fn exceeds(&self, rule: &RowRule) -> bool {
        self.flags.contains(RowFlags::HAS_LOAD)
            & ((self.active_decode_blocks > rule.max_active_blocks)
                | (self.active_prefill_tokens > rule.max_prefill_tokens)
                | (self.active_requests > rule.max_requests))
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
        let (flags, estimate, speed) = self.invalid_fields();
        !(flags | estimate | speed)
    }

    /// Checks what the bits mean.
    ///
    /// # Errors
    ///
    /// The field that is invalid: unknown flag bits, an `effective_blocks` that is NaN, infinite
    /// or negative on a row with a cache entry, or a speed field that is on a row with a speed.
    #[inline]
    pub fn check(&self) -> Result<(), RowField> {
        match self.invalid_fields() {
            (true, _, _) => Err(RowField::Flags),
            (_, true, _) => Err(RowField::EffectiveBlocks),
            (_, _, true) => Err(RowField::Speed),
            _ => Ok(()),
        }
    }

    /// The one definition of a valid row, without branches: whether the flags, the estimate
    /// and the speed are invalid.
    #[inline]
    const fn invalid_fields(&self) -> (bool, bool, bool) {
        (
            self.has_unknown_flags(),
            self.has_invalid_estimate(),
            self.has_invalid_speed(),
        )
    }

    /// Whether [`Row::flags`] has bits no flag defines.
    #[inline]
    pub(crate) const fn has_unknown_flags(&self) -> bool {
        self.flags.0 & !RowFlags::ALL.0 != 0
    }

    /// Whether the row has a cache entry whose estimate is NaN, infinite or negative.
    #[inline]
    #[allow(
        clippy::needless_bitwise_bool,
        reason = "branch-free: it runs once per row in the selection's loop"
    )]
    pub(crate) const fn has_invalid_estimate(&self) -> bool {
        (self.flags.0 & RowFlags::HAS_CACHE.0 != 0) & !non_negative_finite(self.effective_blocks)
    }

    /// Whether the row has a speed with a field NaN, infinite or negative.
    #[inline]
    #[allow(
        clippy::needless_bitwise_bool,
        reason = "branch-free: it runs once per row in the selection's loop"
    )]
    pub(crate) const fn has_invalid_speed(&self) -> bool {
        let speed = Speed {
            base_ms: self.base_ms,
            ms_per_prefill_token: self.ms_per_prefill_token,
            ms_per_active_request: self.ms_per_active_request,
        };
        (self.flags.0 & RowFlags::HAS_SPEED.0 != 0) & !speed.is_valid()
    }
}

/// Loops over a tidy fleet (the default cost's uniform mode, the catalog's, the engine's
/// admission) take a fleet with at most one row in this many odd.
const ODD_SHARE: usize = 16;

/// Rows per block of [`for_each_odd_row`]'s search.
const ODD_BLOCK: usize = 16;

/// Calls `each(i, row)` for every row of `rows` whose flags are not `fleet` (the odd rows of a
/// tidy fleet, after a loop that read every row through the fleet's masks), found a block of
/// [`ODD_BLOCK`] rows' flags at a time, so a tidy fleet costs a read of its flags. `None`, with
/// some odd rows visited, as soon as more than one row in [`ODD_SHARE`] is odd: the caller
/// declines to its per-row loop.
#[inline]
pub(crate) fn for_each_odd_row(
    rows: &[Row],
    fleet: RowFlags,
    mut each: impl FnMut(usize, &Row),
) -> Option<()> {
    let (mut odd_rows, most) = (0, rows.len() / ODD_SHARE);
    for (b, block) in rows.chunks(ODD_BLOCK).enumerate() {
        if block
            .iter()
            .fold(0, |odd, row| odd | (row.flags.0 ^ fleet.0))
            == 0
        {
            continue;
        }
        for (j, row) in block.iter().enumerate() {
            if row.flags == fleet {
                continue;
            }
            odd_rows += 1;
            if odd_rows > most {
                return None;
            }
            each(b * ODD_BLOCK + j, row);
        }
    }
    Some(())
}

/// The row whose flags a loop over a tidy fleet (the default cost's uniform mode, the catalog's,
/// the engine's admission) takes as the fleet's: among [`TIDY_SAMPLE`] rows spread over `rows` (the first and last among
/// them), the first or second sampled row when all the others but at most one have its flags
/// and it is not overloaded. `None` for a fleet that shows many odd rows there.
pub(crate) fn tidy_reference(rows: &[Row]) -> Option<&Row> {
    // Odd, so rows of a period of 2 or 10 (every other worker, one in ten) are not all missed.
    let stride = (rows.len() / TIDY_SAMPLE).max(1) | 1;
    let sample = || rows.iter().step_by(stride).chain(rows.last());
    let mut candidates = rows.iter().step_by(stride).take(2);
    candidates.find(|reference| {
        // At most one other: the search stops at a second, so a mixed fleet declines early.
        !reference.is_overloaded()
            && sample()
                .filter(|row| row.flags != reference.flags)
                .nth(1)
                .is_none()
    })
}

/// Rows [`tidy_reference`] looks at: a fleet with one row in [`ODD_SHARE`] odd has some of
/// them among 16 with probability `1 - (15/16)^16`, about 64%, and the more it has the likelier.
const TIDY_SAMPLE: usize = 16;

/// Whether some row of `rows` has an invalid speed ([`Row::has_invalid_speed`]): the rows'
/// checks are combined a block at a time, so a fleet of valid speeds (what every selection over
/// measured speeds meets) costs one branch per block, not one per row.
#[inline]
pub(crate) fn any_invalid_speed(rows: &[Row]) -> bool {
    rows.chunks(SPEED_BLOCK).any(|block| {
        block
            .iter()
            .fold(false, |bad, row| bad | row.has_invalid_speed())
    })
}

/// Rows per block of [`any_invalid_speed`].
const SPEED_BLOCK: usize = 16;

/// Whether `x` is finite and `>= 0` (`-0.0` included), without branches: the one definition
/// of a valid non-negative value.
#[inline]
#[allow(
    clippy::manual_range_contains,
    clippy::needless_bitwise_bool,
    reason = "two comparisons and an AND, no branch"
)]
const fn non_negative_finite(x: f64) -> bool {
    (x >= 0.0) & (x <= f64::MAX)
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

/// A [`RowRule`]'s three limits as `f64`, for admission loops to compare load counters
/// converted through [`exact_f64`]: a limit below 2^52 converts exactly, one at or above it
/// becomes `+inf`. For a counter below 2^52 (the loop collects the counters into `high` and
/// declines when one is not), `counter > limit` in `f64` is then the `u64` comparison's answer,
/// one `cmppd` per two rows where the baseline x86-64 target has no 64-bit integer compare.
#[derive(Clone, Copy)]
pub(crate) struct RowLimits {
    active_blocks: f64,
    prefill_tokens: f64,
    requests: f64,
}

impl RowLimits {
    /// No limit.
    pub(crate) const NONE: RowLimits = RowLimits {
        active_blocks: f64::INFINITY,
        prefill_tokens: f64::INFINITY,
        requests: f64::INFINITY,
    };

    pub(crate) fn of(rule: &RowRule) -> Self {
        let limit = |max: u64| {
            if max < EXACT_LIMIT {
                exact_f64(max)
            } else {
                f64::INFINITY
            }
        };
        Self {
            active_blocks: limit(rule.max_active_blocks),
            prefill_tokens: limit(rule.max_prefill_tokens),
            requests: limit(rule.max_requests),
        }
    }

    /// Whether `row`, read through `load_mask` (all ones when it carries a load projection,
    /// else 0; a tidy fleet's loop may pass the fleet's), exceeds a limit ([`Row::exceeds`])
    /// when `LIMITS`; `false` otherwise. The counters compared go into `high`, for the caller's
    /// check that they are below 2^52.
    #[allow(clippy::inline_always, reason = "inside each mode's loop")]
    #[allow(
        clippy::needless_bitwise_bool,
        reason = "branch-free: the loop runs it for every row"
    )]
    #[inline(always)]
    pub(crate) fn exceeded<const LIMITS: bool>(
        &self,
        row: &Row,
        load_mask: u64,
        high: &mut u64,
    ) -> bool {
        if !LIMITS {
            return false;
        }
        let (apt, dcb, nreq) = (
            row.active_prefill_tokens & load_mask,
            row.active_decode_blocks & load_mask,
            row.active_requests & load_mask,
        );
        *high |= apt | dcb | nreq;
        (exact_f64(dcb) > self.active_blocks)
            | (exact_f64(apt) > self.prefill_tokens)
            | (exact_f64(nreq) > self.requests)
    }
}

#[cfg(test)]
mod tests {
    use super::Cache;

    /// The spec's estimate written out plainly, as `from_tiers` computed it before its fast path.
    fn plain(device: u32, host: u32, disk: u32, hw: f64, dw: f64, bs: u32) -> (u64, u64) {
        let blocks = f64::from(device) + hw * f64::from(host) + dw * f64::from(disk);
        let tokens = libm::round(blocks * f64::from(bs));
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let tokens = if tokens > 0.0 { tokens as u64 } else { 0 };
        (blocks.to_bits(), tokens)
    }

    #[test]
    fn from_tiers_is_the_plain_formula_bit_for_bit() {
        let weights = [
            0.75,
            0.25,
            0.0,
            -0.0,
            -1.5,
            1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
        ];
        let counts = [0, 1, 2, 7, 1 << 20, u32::MAX - 1, u32::MAX];
        let sizes = [1, 16, 17, 64, 1 << 21, 1 << 22, u32::MAX];
        for &device in &counts {
            for &(host, disk) in &[(0, 0), (1, 0), (0, 3), (5, 9), (u32::MAX, u32::MAX)] {
                for &hw in &weights {
                    for &dw in &weights {
                        for &bs in &sizes {
                            let c = Cache::from_tiers(device, host, disk, hw, dw, bs);
                            let got = (c.effective_blocks.to_bits(), c.effective_tokens);
                            assert_eq!(
                                got,
                                plain(device, host, disk, hw, dw, bs),
                                "{device} {host} {disk} {hw} {dw} {bs}"
                            );
                            // Where the router's loop may take the device count alone, it is
                            // the same estimate, every field.
                            if host == 0 && disk == 0 && Cache::in_device_is_exact(hw, dw, bs) {
                                assert_eq!(
                                    Cache::in_device(device, bs),
                                    c,
                                    "{device} {hw} {dw} {bs}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
