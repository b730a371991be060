//! [`Router`]: the index, the ledger and the predictions behind one object; KV and replica
//! events, bookings and the one-call route.

use std::ptr::{NonNull, null_mut};
use std::sync::{Arc, Mutex, PoisonError};

use route::{
    libroute_kv_event, libroute_ledger_event, libroute_request, libroute_router,
    libroute_router_config, libroute_router_counters, libroute_row, libroute_selection,
    libroute_status, libroute_worker,
};

use crate::error::{RouteError, check, closed};
use crate::policy::Policy;
use crate::selector::Selector;
use crate::vocab::{CRequest, Request, Row, Selection, Worker};

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
    pub(crate) fn code(self) -> u32 {
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

/// When a route is made, for [`Router::route_raw`]: prediction units (an untimed booking, as
/// [`Router::route`]) or milliseconds (timed, as [`Router::route_at`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RouteTime {
    /// Prediction units.
    Units(u64),
    /// Milliseconds.
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
        now: RouteTime,
    ) -> Result<Routed, RouteError> {
        let converted = CRequest::new(request);
        let mut rows: Vec<libroute_row> = candidates.iter().map(libroute_row::from).collect();
        let out = self.route_raw(policy, selector, &converted.c(), hashes, &mut rows, id, now)?;
        Ok(Routed {
            selection: Selection::from_c(&out, Vec::new()),
            rows: rows.iter().map(Row::from).collect(),
        })
    }

    /// [`Router::route`] (`now` in prediction units) or [`Router::route_at`] (`now_ms`) over
    /// C values: the request, the block hashes and the rows in the host's memory, the rows
    /// filled in place with the cache and load the router found. The JVM fast path
    /// (`crate::jni`) calls this.
    ///
    /// # Errors
    ///
    /// As [`Router::route`].
    #[allow(clippy::too_many_arguments, reason = "the route's inputs")]
    pub fn route_raw(
        &self,
        policy: &Policy,
        selector: &Selector,
        request: &libroute_request,
        hashes: &[u64],
        rows: &mut [libroute_row],
        id: u64,
        now: RouteTime,
    ) -> Result<libroute_selection, RouteError> {
        let mut out = std::mem::MaybeUninit::<libroute_selection>::uninit();
        policy.with(|policy_raw| {
            selector.with(|state| {
                self.with(|r| {
                    // SAFETY: the router is exclusive under its mutex, the policy live under its
                    // read lock, the selector exclusive under its mutex; the request's arrays are
                    // valid by its contract; `hashes` and `rows` are valid for their lengths.
                    unsafe {
                        match now {
                            RouteTime::Units(now) => route::libroute_router_route(
                                r,
                                policy_raw,
                                state.raw.as_ptr(),
                                request,
                                hashes.as_ptr(),
                                hashes.len(),
                                rows.as_mut_ptr(),
                                rows.len(),
                                id,
                                now,
                                out.as_mut_ptr(),
                            ),
                            RouteTime::Ms(now_ms) => route::libroute_router_route_at(
                                r,
                                policy_raw,
                                state.raw.as_ptr(),
                                request,
                                hashes.as_ptr(),
                                hashes.len(),
                                rows.as_mut_ptr(),
                                rows.len(),
                                id,
                                now_ms,
                                out.as_mut_ptr(),
                            ),
                        }
                    }
                })
            })
        })?;
        // SAFETY: written by the successful call above.
        Ok(unsafe { out.assume_init() })
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
            RouteTime::Units(now),
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
            RouteTime::Ms(now_ms),
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
