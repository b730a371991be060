//! The records the bindings pass by value (workers, requests, rows, selections, explanations)
//! and their conversions to and from the C ABI's structs, including packed rows.

use std::mem::size_of;
use std::ptr::null;

use route::{
    LIBROUTE_ROW_HAS_CACHE, LIBROUTE_ROW_HAS_LOAD, LIBROUTE_ROW_HAS_SPEED, LIBROUTE_ROW_OVERLOADED,
    RequestArgs, libroute_block_range, libroute_preferred_taint, libroute_reason, libroute_request,
    libroute_row, libroute_selection, libroute_worker,
};

use crate::error::RouteError;

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

impl From<Role> for libroute_core::Role {
    fn from(role: Role) -> Self {
        match role {
            Role::Prefill => libroute_core::Role::Prefill,
            Role::Decode => libroute_core::Role::Decode,
            Role::Aggregated => libroute_core::Role::Aggregated,
            Role::Encode => libroute_core::Role::Encode,
        }
    }
}

impl Role {
    pub(crate) fn code(self) -> u32 {
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

/// The size in bytes of one packed row (`Selector::select_packed`).
#[uniffi::export]
#[must_use]
pub fn packed_row_size() -> u32 {
    PACKED_ROW_BYTES
}

/// Decodes packed rows into `out`.
pub(crate) fn unpack_rows(bytes: &[u8], out: &mut Vec<libroute_row>) -> Result<(), RouteError> {
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
    /// `Router::route`; use `Selector::last_costs` there).
    pub contributions: Vec<f64>,
}

impl Selection {
    /// The record of a C selection, with the contributions the call wrote.
    #[must_use]
    pub fn from_c(s: &libroute_selection, contributions: Vec<f64>) -> Self {
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

/// A request record converted to the C vocabulary the safe layer reads ([`CRequest::args`]).
#[derive(Debug)]
pub struct CRequest {
    preferred: Vec<libroute_preferred_taint>,
    hits: Vec<libroute_block_range>,
    request: libroute_request,
}

impl CRequest {
    /// Converts `r`, copying its arrays.
    #[must_use]
    pub fn new(r: &Request) -> Self {
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

    /// The request as the safe layer takes it, its arrays borrowed from `self`.
    #[must_use]
    pub fn args(&self) -> RequestArgs<'_> {
        RequestArgs {
            head: &self.request,
            preferred_taints: Some(&self.preferred),
            shared_hits: Some(&self.hits),
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

#[cfg(test)]
mod packed {
    use super::*;
    use crate::{Policy, Selector};
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
