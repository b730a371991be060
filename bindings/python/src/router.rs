//! `Router`: the index, the ledger and the predictions behind one object; its configuration,
//! KV and replica events, counters and the one-call route.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use route::libroute_row;
use route_uniffi as u;

use crate::errors::to_py;
use crate::policy::Policy;
use crate::records::{Request, Row, Selection, Worker};
use crate::rows::{with_rows, with_rows_mut};
use crate::selector::Selector;

/// Sizes and weights of a `Router`; every slot count is a power of two of at least 8.
#[pyclass(module = "libroute", frozen, eq, get_all, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RouterConfig {
    /// Slots of the block table (it holds half as many blocks).
    block_slots: u64,
    /// Slots of the ledger's request table (it books half as many requests).
    request_slots: u64,
    /// Most workers: 64, 256 or 1024.
    max_workers: u64,
    /// Tombstones kept for replica events that arrive before their booking.
    tombstones: u64,
    /// Approximate mode: slots of the prediction map (0: off).
    prediction_slots: u64,
    /// Approximate mode: how long a prediction lives, in the unit of `now`.
    prediction_ttl: u64,
    /// Credit weight of a host-memory block.
    host_weight: f64,
    /// Credit weight of a disk block.
    disk_weight: f64,
}

#[pymethods]
impl RouterConfig {
    #[new]
    #[pyo3(signature = (
        block_slots,
        request_slots,
        max_workers = 64,
        tombstones = 0,
        prediction_slots = 0,
        prediction_ttl = 0,
        host_weight = 0.0,
        disk_weight = 0.0,
    ))]
    #[allow(
        clippy::too_many_arguments,
        reason = "the configuration's fields, as keywords"
    )]
    fn new(
        block_slots: u64,
        request_slots: u64,
        max_workers: u64,
        tombstones: u64,
        prediction_slots: u64,
        prediction_ttl: u64,
        host_weight: f64,
        disk_weight: f64,
    ) -> Self {
        RouterConfig {
            block_slots,
            request_slots,
            max_workers,
            tombstones,
            prediction_slots,
            prediction_ttl,
            host_weight,
            disk_weight,
        }
    }

    fn __repr__(&self) -> String {
        format!("{self:?}")
            .replace(" {", "(")
            .replace(" }", ")")
            .replace(": ", "=")
    }
}

/// A cache tier.
#[pyclass(module = "libroute", frozen, eq, eq_int, hash, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Tier {
    /// GPU memory.
    #[pyo3(name = "DEVICE")]
    Device,
    /// Host memory.
    #[pyo3(name = "HOST")]
    Host,
    /// Disk.
    #[pyo3(name = "DISK")]
    Disk,
}

impl From<Tier> for u::Tier {
    fn from(t: Tier) -> Self {
        match t {
            Tier::Device => u::Tier::Device,
            Tier::Host => u::Tier::Host,
            Tier::Disk => u::Tier::Disk,
        }
    }
}

/// A KV-cache event from a worker.
#[pyclass(module = "libroute", frozen, eq, from_py_object)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KvEvent {
    /// The worker stored these chained block hashes in `tier`.
    #[pyo3(name = "STORED")]
    Stored {
        worker: Worker,
        tier: Tier,
        hashes: Vec<u64>,
    },
    /// The worker removed these block hashes from `tier`.
    #[pyo3(name = "REMOVED")]
    Removed {
        worker: Worker,
        tier: Tier,
        hashes: Vec<u64>,
    },
    /// The worker dropped everything it cached.
    #[pyo3(name = "CLEARED")]
    Cleared { worker: Worker },
    /// The worker left.
    #[pyo3(name = "WORKER_REMOVED")]
    WorkerRemoved { worker: Worker },
}

impl From<KvEvent> for u::KvEvent {
    fn from(e: KvEvent) -> Self {
        match e {
            KvEvent::Stored {
                worker,
                tier,
                hashes,
            } => u::KvEvent::Stored {
                worker: worker.into(),
                tier: tier.into(),
                hashes,
            },
            KvEvent::Removed {
                worker,
                tier,
                hashes,
            } => u::KvEvent::Removed {
                worker: worker.into(),
                tier: tier.into(),
                hashes,
            },
            KvEvent::Cleared { worker } => u::KvEvent::Cleared {
                worker: worker.into(),
            },
            KvEvent::WorkerRemoved { worker } => u::KvEvent::WorkerRemoved {
                worker: worker.into(),
            },
        }
    }
}

/// A booking event relayed from another router replica.
#[pyclass(module = "libroute", frozen, eq, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum LedgerEvent {
    /// Another replica booked request `id` on `worker`.
    #[pyo3(name = "BOOKED")]
    Booked {
        id: u64,
        worker: Worker,
        prefill_tokens: u64,
        blocks: u64,
    },
    /// Request `id` completed its prefill.
    #[pyo3(name = "PREFILL_COMPLETE")]
    PrefillComplete { id: u64 },
    /// Request `id` finished or was cancelled.
    #[pyo3(name = "FREED")]
    Freed { id: u64 },
}

impl From<LedgerEvent> for u::LedgerEvent {
    fn from(e: LedgerEvent) -> Self {
        match e {
            LedgerEvent::Booked {
                id,
                worker,
                prefill_tokens,
                blocks,
            } => u::LedgerEvent::Booked {
                id,
                worker: worker.into(),
                prefill_tokens,
                blocks,
            },
            LedgerEvent::PrefillComplete { id } => u::LedgerEvent::PrefillComplete { id },
            LedgerEvent::Freed { id } => u::LedgerEvent::Freed { id },
        }
    }
}

/// What a router has done, for hosts to export.
#[pyclass(module = "libroute", frozen, eq, get_all, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RouterCounters {
    blocks: u64,
    index_workers: u64,
    evictions: u64,
    rejected_kv_events: u64,
    ignored_kv_events: u64,
    active_requests: u64,
    ledger_workers: u64,
    duplicate_ledger_events: u64,
    late_ledger_events: u64,
    unknown_worker_ledger_events: u64,
    predictions: u64,
    forced_prediction_expiries: u64,
}

#[pymethods]
impl RouterCounters {
    fn __repr__(&self) -> String {
        format!("{self:?}")
            .replace(" {", "(")
            .replace(" }", ")")
            .replace(": ", "=")
    }
}

/// What one engine KV batch did (`Router.apply_kv_batch`).
#[pyclass(module = "libroute", frozen, eq, get_all, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KvBatchSummary {
    /// The worker the events were applied to (with the batch's data-parallel rank, if named).
    worker: Worker,
    /// Events in the batch.
    events: u64,
    /// Blocks stored into the index.
    stored_blocks: u64,
    /// Blocks removed from the index.
    removed_blocks: u64,
    /// Stored blocks skipped because their parent block was never seen.
    orphaned_blocks: u64,
    /// Removed blocks that were never stored, ignored.
    unknown_removals: u64,
    /// `AllBlocksCleared` events.
    clears: u64,
}

#[pymethods]
impl KvBatchSummary {
    fn __repr__(&self) -> String {
        format!("{self:?}")
            .replace(" {", "(")
            .replace(" }", ")")
            .replace(": ", "=")
    }
}

/// The chained block hashes of `tokens` (one per complete block of `block_size` tokens), as
/// NVIDIA Dynamo's router computes them, salted by the LoRA adapter's name: the hashes to route
/// with when engines' KV batches feed the router.
#[pyfunction]
#[pyo3(signature = (tokens, block_size, lora_name = None))]
pub(crate) fn block_hashes(
    tokens: Vec<u32>,
    block_size: u32,
    lora_name: Option<String>,
) -> PyResult<Vec<u64>> {
    u::block_hashes(&tokens, block_size, lora_name).map_err(to_py)
}

/// The outcome of `Router.route`: the selection and the rows as the router filled them.
#[pyclass(module = "libroute", frozen, get_all, from_py_object)]
#[derive(Debug, Clone)]
pub(crate) struct Routed {
    /// The selection (the request is now booked on its worker).
    selection: Selection,
    /// The candidates with the cache and load the router found for them.
    rows: Vec<Row>,
}

/// The host's routing state: the prefix-overlap index fed by KV events, the load ledger, and
/// (in approximate mode) the router's own predictions. Thread-safe (calls are serialized).
#[pyclass(module = "libroute", frozen)]
pub(crate) struct Router {
    inner: Arc<u::Router>,
}

impl Router {
    /// The body of `route` and `route_at`: the candidates copied, filled by the router and
    /// returned as rows.
    #[allow(clippy::too_many_arguments, reason = "the route's inputs, forwarded")]
    fn route_call(
        &self,
        policy: &Policy,
        selector: &Selector,
        request: &Request,
        hashes: &[u64],
        candidates: &Bound<'_, PyAny>,
        id: u64,
        now: u::RouteTime,
    ) -> PyResult<Routed> {
        let mut rows = with_rows(candidates, <[libroute_row]>::to_vec)?;
        let selection = self.route_rows(policy, selector, request, hashes, &mut rows, id, now)?;
        Ok(Routed {
            selection,
            // Through the record, as every binding returns them: what a row carries is its flags.
            rows: rows.iter().map(|r| Row::from(&u::Row::from(r))).collect(),
        })
    }

    /// The body of `route_into` and `route_into_at`: the candidates filled in place.
    #[allow(clippy::too_many_arguments, reason = "the route's inputs, forwarded")]
    fn route_into_call(
        &self,
        policy: &Policy,
        selector: &Selector,
        request: &Request,
        hashes: &[u64],
        candidates: &Bound<'_, PyAny>,
        id: u64,
        now: u::RouteTime,
    ) -> PyResult<Selection> {
        with_rows_mut(candidates, |rows| {
            self.route_rows(policy, selector, request, hashes, rows, id, now)
        })?
    }

    /// The body of `route_fleet` and `route_fleet_at`.
    fn route_fleet_call(
        &self,
        policy: &Policy,
        selector: &Selector,
        request: &Request,
        hashes: &[u64],
        id: u64,
        now: u::RouteTime,
    ) -> PyResult<Selection> {
        let converted = u::CRequest::new(&request.inner);
        let selection = self
            .inner
            .route_fleet_raw(
                &policy.inner,
                &selector.inner,
                &converted.args(),
                hashes,
                id,
                now,
            )
            .map_err(to_py)?;
        Ok(u::Selection::from_c(&selection, Vec::new()).into())
    }

    /// One route over C rows, which the router fills with the cache and load it finds.
    #[allow(clippy::too_many_arguments, reason = "the route's inputs, forwarded")]
    fn route_rows(
        &self,
        policy: &Policy,
        selector: &Selector,
        request: &Request,
        hashes: &[u64],
        rows: &mut [libroute_row],
        id: u64,
        now: u::RouteTime,
    ) -> PyResult<Selection> {
        let converted = u::CRequest::new(&request.inner);
        let selection = self
            .inner
            .route_raw(
                &policy.inner,
                &selector.inner,
                &converted.args(),
                hashes,
                rows,
                id,
                now,
            )
            .map_err(to_py)?;
        Ok(u::Selection::from_c(&selection, Vec::new()).into())
    }
}

#[pymethods]
impl Router {
    #[new]
    fn new(config: RouterConfig) -> PyResult<Self> {
        let c = u::RouterConfig {
            block_slots: config.block_slots,
            max_workers: config.max_workers,
            request_slots: config.request_slots,
            tombstones: config.tombstones,
            prediction_slots: config.prediction_slots,
            prediction_ttl: config.prediction_ttl,
            host_weight: config.host_weight,
            disk_weight: config.disk_weight,
        };
        Ok(Router {
            inner: u::Router::new(c).map_err(to_py)?,
        })
    }

    /// Registers a worker with the ledger.
    fn add_worker(&self, worker: Worker) -> PyResult<()> {
        self.inner.add_worker(worker.into()).map_err(to_py)
    }

    /// Forgets a worker: its blocks leave the index, its load the ledger, and its row the fleet.
    fn remove_worker(&self, worker: Worker) -> PyResult<()> {
        self.inner.remove_worker(worker.into()).map_err(to_py)
    }

    /// Adds a worker to the router's fleet, the candidates `route_fleet` routes over, with
    /// `taints` (bit `i` for taint `i`), not overloaded. Register it with `add_worker` too.
    #[pyo3(signature = (worker, taints = 0))]
    fn fleet_add(&self, worker: Worker, taints: u64) -> PyResult<()> {
        self.inner.fleet_add(worker.into(), taints).map_err(to_py)
    }

    /// Takes a worker out of the fleet (its blocks and load stay).
    fn fleet_remove(&self, worker: Worker) -> PyResult<()> {
        self.inner.fleet_remove(worker.into()).map_err(to_py)
    }

    /// Replaces the taints of a worker's row in the fleet.
    fn fleet_set_taints(&self, worker: Worker, taints: u64) -> PyResult<()> {
        self.inner
            .fleet_set_taints(worker.into(), taints)
            .map_err(to_py)
    }

    /// Marks a worker's row in the fleet overloaded or not.
    fn fleet_set_overloaded(&self, worker: Worker, overloaded: bool) -> PyResult<()> {
        self.inner
            .fleet_set_overloaded(worker.into(), overloaded)
            .map_err(to_py)
    }

    /// The fleet's rows, sorted by worker, with the inputs the last fleet route read.
    fn fleet_rows(&self) -> PyResult<Vec<Row>> {
        let rows = self.inner.fleet_rows().map_err(to_py)?;
        Ok(rows.iter().map(Row::from).collect())
    }

    /// `route` over the router's fleet instead of candidates passed each call: each worker is
    /// looked for where it was found last time, and only rows whose load or index bit changed
    /// are read again. The selection's `row` is a position in `fleet_rows()`.
    fn route_fleet(
        &self,
        policy: PyRef<'_, Policy>,
        selector: PyRef<'_, Selector>,
        request: PyRef<'_, Request>,
        hashes: Vec<u64>,
        id: u64,
        now: u64,
    ) -> PyResult<Selection> {
        self.route_fleet_call(
            &policy,
            &selector,
            &request,
            &hashes,
            id,
            u::RouteTime::Units(now),
        )
    }

    /// `route_fleet` with the time in ms.
    fn route_fleet_at(
        &self,
        policy: PyRef<'_, Policy>,
        selector: PyRef<'_, Selector>,
        request: PyRef<'_, Request>,
        hashes: Vec<u64>,
        id: u64,
        now_ms: f64,
    ) -> PyResult<Selection> {
        self.route_fleet_call(
            &policy,
            &selector,
            &request,
            &hashes,
            id,
            u::RouteTime::Ms(now_ms),
        )
    }

    /// Applies KV events in order (all or none when one is invalid).
    fn apply_kv_events(&self, events: Vec<KvEvent>) -> PyResult<()> {
        self.inner
            .apply_kv_events(events.into_iter().map(Into::into).collect())
            .map_err(to_py)
    }

    /// Turns on `apply_kv_batch`: engines' blocks have `block_size` tokens, and the map from engine
    /// block hashes to the router's holds `engine_hash_slots / 2` blocks.
    fn read_kv_batches(&self, block_size: u32, engine_hash_slots: u64) -> PyResult<()> {
        self.inner
            .read_kv_batches(block_size, engine_hash_slots)
            .map_err(to_py)
    }

    /// Applies one raw KV-event payload as vLLM or SGLang publish it (the msgpack frame of their
    /// ZMQ messages) as `worker`'s events; a bad payload raises naming the byte offset and
    /// changes nothing.
    fn apply_kv_batch(&self, worker: Worker, payload: &[u8]) -> PyResult<KvBatchSummary> {
        let s = self
            .inner
            .apply_kv_batch(worker.into(), payload)
            .map_err(to_py)?;
        Ok(KvBatchSummary {
            worker: s.worker.into(),
            events: s.events,
            stored_blocks: s.stored_blocks,
            removed_blocks: s.removed_blocks,
            orphaned_blocks: s.orphaned_blocks,
            unknown_removals: s.unknown_removals,
            clears: s.clears,
        })
    }

    /// The router's state, its index and ledger (not approximate mode's predictions), as bytes
    /// in libroute's versioned snapshot format: a router of the same `max_workers` given them
    /// with `restore` holds the same state. A router that reads engines' KV batches has none
    /// (`RouteError.InvalidArgument`).
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self.inner.snapshot().map_err(to_py)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Replaces the router's index and ledger with those of a `snapshot` (of a router with the
    /// same `max_workers`); approximate mode's predictions are forgotten, and workers added since
    /// must be added again. A truncated or damaged snapshot raises `RouteError.InvalidArgument`
    /// naming the byte offset, and changes nothing.
    fn restore(&self, snapshot: &[u8]) -> PyResult<()> {
        self.inner.restore(snapshot).map_err(to_py)
    }

    /// Applies booking events from other replicas; repeats and late arrivals are counted, not
    /// applied twice.
    fn apply_ledger_events(&self, events: Vec<LedgerEvent>) -> PyResult<()> {
        self.inner
            .apply_ledger_events(events.into_iter().map(Into::into).collect())
            .map_err(to_py)
    }

    /// Books request `id` on `worker` (routed elsewhere, or replayed).
    fn book(&self, id: u64, worker: Worker, prefill_tokens: u64, blocks: u64) -> PyResult<()> {
        self.inner
            .book(id, worker.into(), prefill_tokens, blocks)
            .map_err(to_py)
    }

    /// Books with the time in ms, so the router learns each worker's first-token speed.
    fn book_at(
        &self,
        id: u64,
        worker: Worker,
        prefill_tokens: u64,
        blocks: u64,
        now_ms: f64,
    ) -> PyResult<()> {
        self.inner
            .book_at(id, worker.into(), prefill_tokens, blocks, now_ms)
            .map_err(to_py)
    }

    /// Request `id` finished its prefill.
    fn prefill_complete(&self, id: u64) -> PyResult<()> {
        self.inner.prefill_complete(id).map_err(to_py)
    }

    /// Request `id` finished its prefill at `now_ms`.
    fn prefill_complete_at(&self, id: u64, now_ms: f64) -> PyResult<()> {
        self.inner.prefill_complete_at(id, now_ms).map_err(to_py)
    }

    /// Request `id` finished or was cancelled: its load leaves the ledger.
    fn free_request(&self, id: u64) -> PyResult<()> {
        self.inner.free_request(id).map_err(to_py)
    }

    /// Looks up `hashes` in the index, projects the ledger's load onto `candidates` (a list of
    /// `Row` or packed rows), selects, and books request `id` on the chosen worker.
    #[allow(clippy::too_many_arguments, reason = "the route's inputs")]
    fn route(
        &self,
        policy: PyRef<'_, Policy>,
        selector: PyRef<'_, Selector>,
        request: PyRef<'_, Request>,
        hashes: Vec<u64>,
        candidates: &Bound<'_, PyAny>,
        id: u64,
        now: u64,
    ) -> PyResult<Routed> {
        self.route_call(
            &policy,
            &selector,
            &request,
            &hashes,
            candidates,
            id,
            u::RouteTime::Units(now),
        )
    }

    /// `route` with the time in ms (timed bookings; the `ttft` policy's speeds).
    #[allow(clippy::too_many_arguments, reason = "the route's inputs")]
    fn route_at(
        &self,
        policy: PyRef<'_, Policy>,
        selector: PyRef<'_, Selector>,
        request: PyRef<'_, Request>,
        hashes: Vec<u64>,
        candidates: &Bound<'_, PyAny>,
        id: u64,
        now_ms: f64,
    ) -> PyResult<Routed> {
        self.route_call(
            &policy,
            &selector,
            &request,
            &hashes,
            candidates,
            id,
            u::RouteTime::Ms(now_ms),
        )
    }

    /// `route` for candidates in a writable NumPy array of `ROW_DTYPE` (or a `bytearray` of
    /// packed rows): the router writes the cache and load it finds into the rows in place, and
    /// the call returns only the selection (no `Row` objects are made).
    #[allow(clippy::too_many_arguments, reason = "the route's inputs")]
    fn route_into(
        &self,
        policy: PyRef<'_, Policy>,
        selector: PyRef<'_, Selector>,
        request: PyRef<'_, Request>,
        hashes: Vec<u64>,
        candidates: &Bound<'_, PyAny>,
        id: u64,
        now: u64,
    ) -> PyResult<Selection> {
        self.route_into_call(
            &policy,
            &selector,
            &request,
            &hashes,
            candidates,
            id,
            u::RouteTime::Units(now),
        )
    }

    /// `route_into` with the time in ms, as `route_at`.
    #[allow(clippy::too_many_arguments, reason = "the route's inputs")]
    fn route_into_at(
        &self,
        policy: PyRef<'_, Policy>,
        selector: PyRef<'_, Selector>,
        request: PyRef<'_, Request>,
        hashes: Vec<u64>,
        candidates: &Bound<'_, PyAny>,
        id: u64,
        now_ms: f64,
    ) -> PyResult<Selection> {
        self.route_into_call(
            &policy,
            &selector,
            &request,
            &hashes,
            candidates,
            id,
            u::RouteTime::Ms(now_ms),
        )
    }

    /// The router's counters.
    fn counters(&self) -> PyResult<RouterCounters> {
        let c = self.inner.counters().map_err(to_py)?;
        Ok(RouterCounters {
            blocks: c.blocks,
            index_workers: c.index_workers,
            evictions: c.evictions,
            rejected_kv_events: c.rejected_kv_events,
            ignored_kv_events: c.ignored_kv_events,
            active_requests: c.active_requests,
            ledger_workers: c.ledger_workers,
            duplicate_ledger_events: c.duplicate_ledger_events,
            late_ledger_events: c.late_ledger_events,
            unknown_worker_ledger_events: c.unknown_worker_ledger_events,
            predictions: c.predictions,
            forced_prediction_expiries: c.forced_prediction_expiries,
        })
    }

    /// Frees the native router now; later calls raise `RouteError.Closed`. Idempotent.
    fn release(&self) {
        self.inner.release();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.release();
        false
    }
}
