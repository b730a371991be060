//! The values Python passes and receives: workers, requests, rows, selections, explanations and
//! the router's events. Each is an immutable Python class with keyword arguments and defaults as
//! in the other bindings, converted to the safe Rust facade's records (`route_uniffi`) at a call.
//!
//! A [`Row`] holds its C row (`libroute_row`) itself, so a selection over a list of rows copies
//! 104 bytes per row and converts nothing.

use pyo3::prelude::*;
use route::{
    LIBROUTE_ROW_HAS_CACHE, LIBROUTE_ROW_HAS_LOAD, LIBROUTE_ROW_HAS_SPEED, LIBROUTE_ROW_OVERLOADED,
    libroute_row,
};
use route_uniffi as u;

/// A worker and its data-parallel rank.
#[pyclass(module = "libroute", frozen, eq, hash, get_all, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Worker {
    /// The worker's id.
    pub(crate) worker_id: u64,
    /// The data-parallel rank (0 for a single-rank worker).
    pub(crate) dp_rank: u32,
}

#[pymethods]
impl Worker {
    #[new]
    #[pyo3(signature = (worker_id, dp_rank = 0))]
    fn new(worker_id: u64, dp_rank: u32) -> Self {
        Worker { worker_id, dp_rank }
    }

    fn __repr__(&self) -> String {
        format!(
            "Worker(worker_id={}, dp_rank={})",
            self.worker_id, self.dp_rank
        )
    }
}

impl From<Worker> for u::Worker {
    fn from(w: Worker) -> Self {
        u::Worker {
            worker_id: w.worker_id,
            dp_rank: w.dp_rank,
        }
    }
}

impl From<u::Worker> for Worker {
    fn from(w: u::Worker) -> Self {
        Worker {
            worker_id: w.worker_id,
            dp_rank: w.dp_rank,
        }
    }
}

/// The role of the pool a selection is for.
#[pyclass(module = "libroute", frozen, eq, eq_int, hash, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Role {
    /// Prefill workers of disaggregated serving.
    #[pyo3(name = "PREFILL")]
    Prefill,
    /// Decode workers of disaggregated serving.
    #[pyo3(name = "DECODE")]
    Decode,
    /// Workers that prefill and decode.
    #[pyo3(name = "AGGREGATED")]
    Aggregated,
    /// Encoder workers.
    #[pyo3(name = "ENCODE")]
    Encode,
}

impl From<Role> for u::Role {
    fn from(r: Role) -> Self {
        match r {
            Role::Prefill => u::Role::Prefill,
            Role::Decode => u::Role::Decode,
            Role::Aggregated => u::Role::Aggregated,
            Role::Encode => u::Role::Encode,
        }
    }
}

impl From<u::Role> for Role {
    fn from(r: u::Role) -> Self {
        match r {
            u::Role::Prefill => Role::Prefill,
            u::Role::Decode => Role::Decode,
            u::Role::Aggregated => Role::Aggregated,
            u::Role::Encode => Role::Encode,
        }
    }
}

/// A preferred taint: matching workers' costs are multiplied by `exp(-tanh(sum of weights))`.
#[pyclass(module = "libroute", frozen, eq, get_all, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PreferredTaint {
    /// The taint index, 0 to 63.
    pub(crate) taint: u32,
    /// Positive attracts, negative repels; must be finite.
    pub(crate) weight: f64,
}

#[pymethods]
impl PreferredTaint {
    #[new]
    fn new(taint: u32, weight: f64) -> Self {
        PreferredTaint { taint, weight }
    }

    fn __repr__(&self) -> String {
        format!(
            "PreferredTaint(taint={}, weight={})",
            self.taint,
            float(self.weight)
        )
    }
}

/// A half-open range `[start, end)` of block positions found in a shared cache.
#[pyclass(module = "libroute", frozen, eq, hash, get_all, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BlockRange {
    /// First block position.
    pub(crate) start: u64,
    /// One past the last block position.
    pub(crate) end: u64,
}

#[pymethods]
impl BlockRange {
    #[new]
    fn new(start: u64, end: u64) -> Self {
        BlockRange { start, end }
    }

    fn __repr__(&self) -> String {
        format!("BlockRange(start={}, end={})", self.start, self.end)
    }
}

/// One request to route.
#[pyclass(module = "libroute", frozen, eq, from_py_object)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Request {
    pub(crate) inner: u::Request,
}

#[pymethods]
impl Request {
    #[new]
    #[pyo3(signature = (
        prompt_tokens,
        block_size,
        role,
        track_prefill_tokens = true,
        conditional_disagg = false,
        has_tier_matches = false,
        required_taints = 0,
        preferred_taints = Vec::new(),
        shared_hits = None,
        pin = None,
        session = None,
    ))]
    #[allow(
        clippy::too_many_arguments,
        clippy::fn_params_excessive_bools,
        reason = "the request's fields, as keyword arguments"
    )]
    fn new(
        prompt_tokens: u64,
        block_size: u32,
        role: Role,
        track_prefill_tokens: bool,
        conditional_disagg: bool,
        has_tier_matches: bool,
        required_taints: u64,
        preferred_taints: Vec<PreferredTaint>,
        shared_hits: Option<Vec<BlockRange>>,
        pin: Option<Worker>,
        session: Option<u64>,
    ) -> Self {
        Request {
            inner: u::Request {
                prompt_tokens,
                block_size,
                role: role.into(),
                track_prefill_tokens,
                conditional_disagg,
                has_tier_matches,
                required_taints,
                preferred_taints: preferred_taints
                    .into_iter()
                    .map(|p| u::PreferredTaint {
                        taint: p.taint,
                        weight: p.weight,
                    })
                    .collect(),
                shared_hits: shared_hits.map(|hits| {
                    hits.into_iter()
                        .map(|h| u::BlockRange {
                            start: h.start,
                            end: h.end,
                        })
                        .collect()
                }),
                pin: pin.map(Into::into),
                session,
            },
        }
    }

    /// Prompt length in tokens.
    #[getter]
    fn prompt_tokens(&self) -> u64 {
        self.inner.prompt_tokens
    }

    /// KV block size in tokens.
    #[getter]
    fn block_size(&self) -> u32 {
        self.inner.block_size
    }

    /// The pool's role.
    #[getter]
    fn role(&self) -> Role {
        self.inner.role.into()
    }

    /// Whether the request's prefill tokens are tracked.
    #[getter]
    fn track_prefill_tokens(&self) -> bool {
        self.inner.track_prefill_tokens
    }

    /// Whether conditional disaggregation is on.
    #[getter]
    fn conditional_disagg(&self) -> bool {
        self.inner.conditional_disagg
    }

    /// Whether the request has any tier overlap entry.
    #[getter]
    fn has_tier_matches(&self) -> bool {
        self.inner.has_tier_matches
    }

    /// Taints a worker must carry (bit `i` = taint `i`).
    #[getter]
    fn required_taints(&self) -> u64 {
        self.inner.required_taints
    }

    /// Preferred taints.
    #[getter]
    fn preferred_taints(&self) -> Vec<PreferredTaint> {
        self.inner
            .preferred_taints
            .iter()
            .map(|p| PreferredTaint {
                taint: p.taint,
                weight: p.weight,
            })
            .collect()
    }

    /// Block ranges found in a shared cache; `None` when not looked up.
    #[getter]
    fn shared_hits(&self) -> Option<Vec<BlockRange>> {
        self.inner.shared_hits.as_ref().map(|hits| {
            hits.iter()
                .map(|h| BlockRange {
                    start: h.start,
                    end: h.end,
                })
                .collect()
        })
    }

    /// The worker the request must go to.
    #[getter]
    fn pin(&self) -> Option<Worker> {
        self.inner.pin.map(Into::into)
    }

    /// The conversation or session it belongs to.
    #[getter]
    fn session(&self) -> Option<u64> {
        self.inner.session
    }

    fn __repr__(&self) -> String {
        let r = &self.inner;
        format!(
            "Request(prompt_tokens={}, block_size={}, role={}, track_prefill_tokens={}, \
             conditional_disagg={}, has_tier_matches={}, required_taints={}, \
             preferred_taints={}, shared_hits={}, pin={}, session={})",
            r.prompt_tokens,
            r.block_size,
            role_repr(r.role.into()),
            py_bool(r.track_prefill_tokens),
            py_bool(r.conditional_disagg),
            py_bool(r.has_tier_matches),
            r.required_taints,
            list(self.preferred_taints().iter().map(PreferredTaint::__repr__)),
            self.shared_hits().map_or_else(
                || "None".to_owned(),
                |h| list(h.iter().map(BlockRange::__repr__))
            ),
            self.pin()
                .map_or_else(|| "None".to_owned(), |w| w.__repr__()),
            r.session
                .map_or_else(|| "None".to_owned(), |s| s.to_string()),
        )
    }
}

/// A worker's cached prefix of the request, per tier.
#[pyclass(module = "libroute", frozen, eq, get_all, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RowCache {
    /// Leading request blocks in device memory.
    pub(crate) device_blocks: u32,
    /// Leading request blocks in host memory.
    pub(crate) host_blocks: u32,
    /// Leading request blocks on disk.
    pub(crate) disk_blocks: u32,
    /// The accounting estimate in blocks; finite and at least 0.
    pub(crate) effective_blocks: f64,
    /// The accounting estimate in tokens.
    pub(crate) effective_tokens: u64,
}

#[pymethods]
impl RowCache {
    #[new]
    #[pyo3(signature = (device_blocks, effective_blocks, effective_tokens, host_blocks = 0, disk_blocks = 0))]
    fn new(
        device_blocks: u32,
        effective_blocks: f64,
        effective_tokens: u64,
        host_blocks: u32,
        disk_blocks: u32,
    ) -> Self {
        RowCache {
            device_blocks,
            host_blocks,
            disk_blocks,
            effective_blocks,
            effective_tokens,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "RowCache(device_blocks={}, host_blocks={}, disk_blocks={}, effective_blocks={}, \
             effective_tokens={})",
            self.device_blocks,
            self.host_blocks,
            self.disk_blocks,
            float(self.effective_blocks),
            self.effective_tokens
        )
    }
}

/// A worker's projected load.
#[pyclass(module = "libroute", frozen, eq, hash, get_all, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(
    clippy::struct_field_names,
    reason = "the names of every other binding's fields"
)]
pub(crate) struct RowLoad {
    /// Prefill tokens queued or running.
    pub(crate) active_prefill_tokens: u64,
    /// Active decode blocks, including this request's new blocks.
    pub(crate) active_decode_blocks: u64,
    /// Active requests.
    pub(crate) active_requests: u64,
}

#[pymethods]
impl RowLoad {
    #[new]
    fn new(active_prefill_tokens: u64, active_decode_blocks: u64, active_requests: u64) -> Self {
        RowLoad {
            active_prefill_tokens,
            active_decode_blocks,
            active_requests,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "RowLoad(active_prefill_tokens={}, active_decode_blocks={}, active_requests={})",
            self.active_prefill_tokens, self.active_decode_blocks, self.active_requests
        )
    }
}

/// A worker's measured first-token speed (read by the `ttft` policy; a router learns it).
#[pyclass(module = "libroute", frozen, eq, get_all, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RowSpeed {
    /// Fixed part of a first token, ms.
    pub(crate) base_ms: f64,
    /// Per prefill token queued or computed there, ms.
    pub(crate) ms_per_prefill_token: f64,
    /// Per request active there, ms.
    pub(crate) ms_per_active_request: f64,
}

#[pymethods]
impl RowSpeed {
    #[new]
    fn new(base_ms: f64, ms_per_prefill_token: f64, ms_per_active_request: f64) -> Self {
        RowSpeed {
            base_ms,
            ms_per_prefill_token,
            ms_per_active_request,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "RowSpeed(base_ms={}, ms_per_prefill_token={}, ms_per_active_request={})",
            float(self.base_ms),
            float(self.ms_per_prefill_token),
            float(self.ms_per_active_request)
        )
    }
}

/// One candidate worker, held as the C row (`libroute_row`) a selection reads.
#[pyclass(module = "libroute", frozen, from_py_object)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    pub(crate) raw: libroute_row,
}

impl Row {
    /// The record of the safe facade (for the calls that take records).
    pub(crate) fn record(&self) -> u::Row {
        u::Row::from(&self.raw)
    }
}

impl From<&u::Row> for Row {
    fn from(r: &u::Row) -> Self {
        Row {
            raw: libroute_row::from(r),
        }
    }
}

#[pymethods]
impl Row {
    #[new]
    #[pyo3(signature = (worker, taints = 0, overloaded = false, cache = None, load = None, speed = None))]
    fn new(
        worker: Worker,
        taints: u64,
        overloaded: bool,
        cache: Option<RowCache>,
        load: Option<RowLoad>,
        speed: Option<RowSpeed>,
    ) -> Self {
        let record = u::Row {
            worker: worker.into(),
            taints,
            overloaded,
            cache: cache.map(|c| u::RowCache {
                device_blocks: c.device_blocks,
                host_blocks: c.host_blocks,
                disk_blocks: c.disk_blocks,
                effective_blocks: c.effective_blocks,
                effective_tokens: c.effective_tokens,
            }),
            load: load.map(|l| u::RowLoad {
                active_prefill_tokens: l.active_prefill_tokens,
                active_decode_blocks: l.active_decode_blocks,
                active_requests: l.active_requests,
            }),
            speed: speed.map(|s| u::RowSpeed {
                base_ms: s.base_ms,
                ms_per_prefill_token: s.ms_per_prefill_token,
                ms_per_active_request: s.ms_per_active_request,
            }),
        };
        Row::from(&record)
    }

    /// The worker and rank.
    #[getter]
    fn worker(&self) -> Worker {
        Worker {
            worker_id: self.raw.worker.worker_id,
            dp_rank: self.raw.worker.dp_rank,
        }
    }

    /// Its taints (bit `i` = taint `i`).
    #[getter]
    fn taints(&self) -> u64 {
        self.raw.taints
    }

    /// The host's busy mark.
    #[getter]
    fn overloaded(&self) -> bool {
        self.raw.flags & LIBROUTE_ROW_OVERLOADED != 0
    }

    /// Its cached prefix; `None` when it has none.
    #[getter]
    fn cache(&self) -> Option<RowCache> {
        let r = &self.raw;
        (r.flags & LIBROUTE_ROW_HAS_CACHE != 0).then_some(RowCache {
            device_blocks: r.device_blocks,
            host_blocks: r.host_blocks,
            disk_blocks: r.disk_blocks,
            effective_blocks: r.effective_blocks,
            effective_tokens: r.effective_tokens,
        })
    }

    /// Its load; `None` when unknown.
    #[getter]
    fn load(&self) -> Option<RowLoad> {
        let r = &self.raw;
        (r.flags & LIBROUTE_ROW_HAS_LOAD != 0).then_some(RowLoad {
            active_prefill_tokens: r.active_prefill_tokens,
            active_decode_blocks: r.active_decode_blocks,
            active_requests: r.active_requests,
        })
    }

    /// Its measured speed; `None` when unknown.
    #[getter]
    fn speed(&self) -> Option<RowSpeed> {
        let r = &self.raw;
        (r.flags & LIBROUTE_ROW_HAS_SPEED != 0).then_some(RowSpeed {
            base_ms: r.base_ms,
            ms_per_prefill_token: r.ms_per_prefill_token,
            ms_per_active_request: r.ms_per_active_request,
        })
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Row>()
            .is_ok_and(|o| o.get().record() == self.record())
    }

    fn __repr__(&self) -> String {
        let none = || "None".to_owned();
        format!(
            "Row(worker={}, taints={}, overloaded={}, cache={}, load={}, speed={})",
            self.worker().__repr__(),
            self.raw.taints,
            py_bool(self.overloaded()),
            self.cache().map_or_else(none, |c| c.__repr__()),
            self.load().map_or_else(none, |l| l.__repr__()),
            self.speed().map_or_else(none, |s| s.__repr__()),
        )
    }
}

/// Why the chosen row was chosen.
#[pyclass(module = "libroute", frozen, eq, from_py_object)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PickReason {
    /// The request was pinned.
    #[pyo3(name = "PINNED")]
    Pinned {},
    /// The minimum cost; `ties` rows shared it and one was drawn uniformly.
    #[pyo3(name = "MIN_COST")]
    MinCost { ties: u32 },
    /// Drawn by temperature sampling with the chosen row's probability.
    #[pyo3(name = "SAMPLED")]
    Sampled { probability: f64 },
    /// A custom picker's choice.
    #[pyo3(name = "CUSTOM")]
    Custom {},
}

impl From<u::PickReason> for PickReason {
    fn from(r: u::PickReason) -> Self {
        match r {
            u::PickReason::Pinned => PickReason::Pinned {},
            u::PickReason::MinCost { ties } => PickReason::MinCost { ties },
            u::PickReason::Sampled { probability } => PickReason::Sampled { probability },
            u::PickReason::Custom => PickReason::Custom {},
        }
    }
}

/// The outcome of one selection.
#[pyclass(module = "libroute", frozen, eq, get_all, from_py_object)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Selection {
    /// Index of the chosen row in the rows passed.
    pub(crate) row: u64,
    /// The chosen worker.
    pub(crate) worker: Worker,
    /// Its total cost.
    pub(crate) cost: f64,
    /// How many candidates survived filtering.
    pub(crate) candidates: u64,
    /// Why it was chosen.
    pub(crate) reason: PickReason,
    /// The request's size in blocks.
    pub(crate) request_blocks: u64,
    /// The chosen row's cached-token estimate.
    pub(crate) cached_tokens: u64,
    /// Each scorer's contribution to the chosen row's cost, the default cost first (empty for
    /// `Router.route`; use `Selector.last_costs` there).
    pub(crate) contributions: Vec<f64>,
}

impl From<u::Selection> for Selection {
    fn from(s: u::Selection) -> Self {
        Selection {
            row: s.row,
            worker: s.worker.into(),
            cost: s.cost,
            candidates: s.candidates,
            reason: s.reason.into(),
            request_blocks: s.request_blocks,
            cached_tokens: s.cached_tokens,
            contributions: s.contributions,
        }
    }
}

#[pymethods]
impl Selection {
    fn __repr__(&self) -> String {
        format!(
            "Selection(row={}, worker={}, cost={}, candidates={}, reason={:?}, \
             request_blocks={}, cached_tokens={}, contributions={})",
            self.row,
            self.worker.__repr__(),
            float(self.cost),
            self.candidates,
            self.reason,
            self.request_blocks,
            self.cached_tokens,
            list(self.contributions.iter().map(|c| float(*c))),
        )
    }
}

/// One candidate of the last selection: its row index and total cost.
#[pyclass(module = "libroute", frozen, eq, get_all, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Candidate {
    /// Index of the row in the rows passed.
    pub(crate) row: u64,
    /// Its total cost.
    pub(crate) cost: f64,
}

#[pymethods]
impl Candidate {
    fn __repr__(&self) -> String {
        format!("Candidate(row={}, cost={})", self.row, float(self.cost))
    }
}

/// The input groups a policy reads for one kind of request.
#[pyclass(module = "libroute", frozen, eq, hash, get_all, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Inputs {
    /// Cache overlaps (`Row.cache`).
    pub(crate) cache: bool,
    /// Loads (`Row.load`).
    pub(crate) load: bool,
    /// Preferred taints.
    pub(crate) preferred_taint: bool,
}

#[pymethods]
impl Inputs {
    #[allow(clippy::trivially_copy_pass_by_ref, reason = "PyO3 methods take &self")]
    fn __repr__(&self) -> String {
        format!(
            "Inputs(cache={}, load={}, preferred_taint={})",
            py_bool(self.cache),
            py_bool(self.load),
            py_bool(self.preferred_taint)
        )
    }
}

/// What became of one row in a selection.
#[pyclass(module = "libroute", frozen, eq, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Disposition {
    /// A candidate: every scorer scored it.
    #[pyo3(name = "CANDIDATE")]
    Candidate {},
    /// The request was pinned to another worker.
    #[pyo3(name = "NOT_PINNED")]
    NotPinned {},
    /// The row is invalid.
    #[pyo3(name = "INVALID")]
    Invalid {},
    /// The worker lacks a taint the request requires.
    #[pyo3(name = "INELIGIBLE")]
    Ineligible {},
    /// The host marked it overloaded.
    #[pyo3(name = "OVERLOADED")]
    Overloaded {},
    /// Filter number `filter` of the policy removed it.
    #[pyo3(name = "FILTERED")]
    Filtered { filter: u32 },
    /// Filter number `filter` removed it as overloaded.
    #[pyo3(name = "FILTER_OVERLOADED")]
    FilterOverloaded { filter: u32 },
    /// Filter number `filter` failed on it.
    #[pyo3(name = "FILTER_FAILED")]
    FilterFailed { filter: u32 },
    /// Not examined (the selection stopped before it).
    #[pyo3(name = "NOT_EXAMINED")]
    NotExamined {},
}

impl From<u::Disposition> for Disposition {
    fn from(d: u::Disposition) -> Self {
        use u::Disposition as D;
        match d {
            D::Candidate => Disposition::Candidate {},
            D::NotPinned => Disposition::NotPinned {},
            D::Invalid => Disposition::Invalid {},
            D::Ineligible => Disposition::Ineligible {},
            D::Overloaded => Disposition::Overloaded {},
            D::Filtered { filter } => Disposition::Filtered { filter },
            D::FilterOverloaded { filter } => Disposition::FilterOverloaded { filter },
            D::FilterFailed { filter } => Disposition::FilterFailed { filter },
            D::NotExamined => Disposition::NotExamined {},
        }
    }
}

/// One row's part in a selection.
#[pyclass(module = "libroute", frozen, eq, get_all, from_py_object)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RowExplanation {
    /// The row's index in the rows passed.
    pub(crate) row: u64,
    /// Its worker.
    pub(crate) worker: Worker,
    /// What became of it.
    pub(crate) disposition: Disposition,
    /// Each scorer's contribution (empty when the row was not scored).
    pub(crate) contributions: Vec<f64>,
    /// The summed cost; NaN when the row was not scored.
    pub(crate) total: f64,
    /// Whether it was chosen.
    pub(crate) chosen: bool,
}

impl From<u::RowExplanation> for RowExplanation {
    fn from(e: u::RowExplanation) -> Self {
        RowExplanation {
            row: e.row,
            worker: e.worker.into(),
            disposition: e.disposition.into(),
            contributions: e.contributions,
            total: e.total,
            chosen: e.chosen,
        }
    }
}

#[pymethods]
impl RowExplanation {
    fn __repr__(&self) -> String {
        format!(
            "RowExplanation(row={}, worker={}, disposition={:?}, contributions={}, total={}, \
             chosen={})",
            self.row,
            self.worker.__repr__(),
            self.disposition,
            list(self.contributions.iter().map(|c| float(*c))),
            float(self.total),
            py_bool(self.chosen)
        )
    }
}

/// A selection and the explanation of every row.
#[pyclass(module = "libroute", frozen, eq, get_all, from_py_object)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Explained {
    /// The selection.
    pub(crate) selection: Selection,
    /// One per row, in row order.
    pub(crate) rows: Vec<RowExplanation>,
}

#[pymethods]
impl Explained {
    fn __repr__(&self) -> String {
        format!(
            "Explained(selection={}, rows={})",
            self.selection.__repr__(),
            list(self.rows.iter().map(RowExplanation::__repr__))
        )
    }
}

/// A Python float's text (`1.0`, `nan`, `inf`), not Rust's (`1`, `NaN`).
fn float(x: f64) -> String {
    if x.is_nan() {
        "nan".to_owned()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else if x == x.trunc() && x.abs() < 1e16 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

fn list(items: impl Iterator<Item = String>) -> String {
    format!("[{}]", items.collect::<Vec<_>>().join(", "))
}

fn role_repr(r: Role) -> &'static str {
    match r {
        Role::Prefill => "Role.PREFILL",
        Role::Decode => "Role.DECODE",
        Role::Aggregated => "Role.AGGREGATED",
        Role::Encode => "Role.ENCODE",
    }
}
