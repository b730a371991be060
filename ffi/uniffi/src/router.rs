//! [`Router`]: the index, the ledger and the predictions behind one object; KV and replica
//! events, bookings and the one-call route.

use std::sync::{Arc, Mutex, PoisonError};

use libroute_core::{KvEvent as CoreKvEvent, LedgerEvent as CoreLedgerEvent, WorkerKey};
use route::{RequestArgs, host, libroute_router_config, libroute_row, libroute_selection};

use crate::error::{RouteError, closed};
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

impl From<Tier> for libroute_core::Tier {
    fn from(tier: Tier) -> Self {
        match tier {
            Tier::Device => libroute_core::Tier::Device,
            Tier::Host => libroute_core::Tier::Host,
            Tier::Disk => libroute_core::Tier::Disk,
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

/// What one engine KV batch did ([`Router::apply_kv_batch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct KvBatchSummary {
    /// The worker the events were applied to: the one given, with the data-parallel rank the
    /// batch names, if any.
    pub worker: Worker,
    /// Events in the batch.
    pub events: u64,
    /// Blocks stored into the index.
    pub stored_blocks: u64,
    /// Blocks removed from the index.
    pub removed_blocks: u64,
    /// Stored blocks skipped because their parent block was never seen.
    pub orphaned_blocks: u64,
    /// Removed blocks that were never stored, ignored.
    pub unknown_removals: u64,
    /// `AllBlocksCleared` events.
    pub clears: u64,
}

/// The chained block hashes of `tokens` (one per complete block of `block_size` tokens), as
/// NVIDIA Dynamo's router computes them, salted by the LoRA adapter's name: the hashes a
/// [`Router`] is keyed by and routes with.
///
/// # Errors
///
/// `InvalidArgument` for a block size of 0.
#[uniffi::export]
pub fn block_hashes(
    tokens: &[u32],
    block_size: u32,
    lora_name: Option<String>,
) -> Result<Vec<u64>, RouteError> {
    let lora = lora_name.as_deref().map_or(&[][..], str::as_bytes);
    let mut out = vec![0; tokens.len() / block_size.max(1) as usize];
    let n = host::block_hashes(tokens, block_size, lora, &mut out).map_err(|(_, e)| e)?;
    out.truncate(n);
    Ok(out)
}

/// The host's routing state: the prefix-overlap index fed by KV events, the load ledger, and
/// (in approximate mode) the router's own predictions. Thread-safe (calls are serialized).
#[derive(uniffi::Object)]
pub struct Router {
    state: Mutex<Option<host::Router>>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Router")
    }
}

/// When a route is made, for [`Router::route_raw`]: prediction units (an untimed booking, as
/// [`Router::route`]) or milliseconds (timed, as [`Router::route_at`]).
pub use route::host::Clock as RouteTime;

fn key(w: Worker) -> WorkerKey {
    WorkerKey::new(w.worker_id, w.dp_rank)
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
        let out = self.route_raw(
            policy,
            selector,
            &converted.args(),
            hashes,
            &mut rows,
            id,
            now,
        )?;
        Ok(Routed {
            selection: Selection::from_c(&out, Vec::new()),
            rows: rows.iter().map(Row::from).collect(),
        })
    }

    /// [`Router::route`] (`now` in prediction units) or [`Router::route_at`] (`now_ms`) over
    /// the C vocabulary: the request, the block hashes and the rows in the host's memory, the
    /// rows filled in place with the cache and load the router found. The JVM fast path and
    /// the Python extension call this.
    ///
    /// # Errors
    ///
    /// As [`Router::route`].
    #[allow(clippy::too_many_arguments, reason = "the route's inputs")]
    pub fn route_raw(
        &self,
        policy: &Policy,
        selector: &Selector,
        request: &RequestArgs<'_>,
        hashes: &[u64],
        rows: &mut [libroute_row],
        id: u64,
        now: RouteTime,
    ) -> Result<libroute_selection, RouteError> {
        policy.with(|policy| {
            selector.with(|state| {
                self.with(|r| {
                    Ok(r.route(policy, &mut state.inner, request, hashes, rows, id, now)?)
                })
            })
        })
    }

    /// [`Router::route_fleet`] (`now` in prediction units) or [`Router::route_fleet_at`]
    /// (`now_ms`) over the C vocabulary, for the JVM fast path and the Python extension.
    ///
    /// # Errors
    ///
    /// As [`Router::route_fleet`].
    pub fn route_fleet_raw(
        &self,
        policy: &Policy,
        selector: &Selector,
        request: &RequestArgs<'_>,
        hashes: &[u64],
        id: u64,
        now: RouteTime,
    ) -> Result<libroute_selection, RouteError> {
        policy.with(|policy| {
            selector.with(|state| {
                self.with(|r| {
                    Ok(r.route_fleet(policy, &mut state.inner, request, hashes, id, now)?)
                })
            })
        })
    }

    /// The body of [`Router::route_fleet`] and [`Router::route_fleet_at`].
    fn route_fleet_call(
        &self,
        policy: &Policy,
        selector: &Selector,
        request: &Request,
        hashes: &[u64],
        id: u64,
        now: RouteTime,
    ) -> Result<Selection, RouteError> {
        let converted = CRequest::new(request);
        let out = self.route_fleet_raw(policy, selector, &converted.args(), hashes, id, now)?;
        Ok(Selection::from_c(&out, Vec::new()))
    }

    /// Runs `f` on the live router, holding the lock.
    fn with<R>(
        &self,
        f: impl FnOnce(&mut host::Router) -> Result<R, RouteError>,
    ) -> Result<R, RouteError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.as_mut() {
            Some(router) => f(router),
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
        Ok(Arc::new(Router {
            state: Mutex::new(Some(host::Router::new(&c)?)),
        }))
    }

    /// Registers a worker with the ledger.
    ///
    /// # Errors
    ///
    /// `CapacityExceeded` beyond `max_workers`.
    pub fn add_worker(&self, worker: Worker) -> Result<(), RouteError> {
        self.with(|r| Ok(r.add_worker(worker.into())?))
    }

    /// Forgets a worker: its blocks leave the index, its load the ledger, and its row the fleet.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`.
    pub fn remove_worker(&self, worker: Worker) -> Result<(), RouteError> {
        self.with(|r| {
            r.remove_worker(worker.into());
            Ok(())
        })
    }

    /// Adds a worker to the router's fleet, the candidates [`Router::route_fleet`] routes over,
    /// with `taints` (bit `i` for taint `i`), not overloaded. Register it with
    /// [`Router::add_worker`] too, for it to be booked.
    ///
    /// # Errors
    ///
    /// `DuplicateWorker` (in the fleet already), `CapacityExceeded` (`max_workers` in it).
    pub fn fleet_add(&self, worker: Worker, taints: u64) -> Result<(), RouteError> {
        self.with(|r| Ok(r.fleet_add(worker.into(), taints)?))
    }

    /// Takes a worker out of the fleet (its blocks and load stay).
    ///
    /// # Errors
    ///
    /// `UnknownWorker` (not in the fleet).
    pub fn fleet_remove(&self, worker: Worker) -> Result<(), RouteError> {
        self.with(|r| Ok(r.fleet_remove(worker.into())?))
    }

    /// Replaces the taints of a worker's row in the fleet.
    ///
    /// # Errors
    ///
    /// `UnknownWorker` (not in the fleet).
    pub fn fleet_set_taints(&self, worker: Worker, taints: u64) -> Result<(), RouteError> {
        self.with(|r| Ok(r.fleet_set_taints(worker.into(), taints)?))
    }

    /// Marks a worker's row in the fleet overloaded (skipped with the overload reason) or not.
    ///
    /// # Errors
    ///
    /// `UnknownWorker` (not in the fleet).
    pub fn fleet_set_overloaded(&self, worker: Worker, overloaded: bool) -> Result<(), RouteError> {
        self.with(|r| Ok(r.fleet_set_overloaded(worker.into(), overloaded)?))
    }

    /// The fleet's rows, sorted by worker, with the inputs the last fleet route read: a fleet
    /// route's `row` is a position in them.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`.
    pub fn fleet_rows(&self) -> Result<Vec<Row>, RouteError> {
        self.with(|r| Ok(r.fleet_rows().iter().map(Row::from).collect()))
    }

    /// Applies KV events in order.
    ///
    /// # Errors
    ///
    /// `Closed` after `release` (the events are typed: none can be invalid).
    pub fn apply_kv_events(&self, events: Vec<KvEvent>) -> Result<(), RouteError> {
        self.with(|r| {
            for e in &events {
                r.apply_kv_event(&match e {
                    KvEvent::Stored {
                        worker,
                        tier,
                        hashes,
                    } => CoreKvEvent::Stored {
                        worker: key(*worker),
                        tier: (*tier).into(),
                        hashes,
                    },
                    KvEvent::Removed {
                        worker,
                        tier,
                        hashes,
                    } => CoreKvEvent::Removed {
                        worker: key(*worker),
                        tier: (*tier).into(),
                        hashes,
                    },
                    KvEvent::Cleared { worker } => CoreKvEvent::Cleared {
                        worker: key(*worker),
                    },
                    KvEvent::WorkerRemoved { worker } => CoreKvEvent::WorkerRemoved {
                        worker: key(*worker),
                    },
                });
            }
            Ok(())
        })
    }

    /// Turns on [`Router::apply_kv_batch`]: engines' stored blocks must have `block_size` tokens
    /// (the size requests are hashed with, [`block_hashes`]), and the map from engine block
    /// hashes to the router's holds `engine_hash_slots / 2` blocks (a power of two of at least
    /// 8; size it like `block_slots`). Called again, it starts over with an empty map.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` (a block size of 0, a bad slot count), `CapacityExceeded`.
    pub fn read_kv_batches(
        &self,
        block_size: u32,
        engine_hash_slots: u64,
    ) -> Result<(), RouteError> {
        let slots = size(engine_hash_slots, "engine_hash_slots")?;
        self.with(|r| Ok(r.read_kv_batches(block_size, slots)?))
    }

    /// Applies one raw KV-event payload, as vLLM and SGLang publish it on their ZMQ socket (the
    /// msgpack `KVEventBatch`), as `worker`'s events. Stored blocks are re-hashed from their
    /// token ids ([`block_hashes`]), so they match the hashes requests are routed with.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a malformed, truncated or unknown payload, naming the byte offset
    /// (nothing changes), or before [`Router::read_kv_batches`]; `CapacityExceeded` for a new
    /// worker beyond `max_workers`.
    pub fn apply_kv_batch(
        &self,
        worker: Worker,
        payload: &[u8],
    ) -> Result<KvBatchSummary, RouteError> {
        let s = self.with(|r| Ok(r.apply_kv_batch(worker.into(), payload)?))?;
        Ok(KvBatchSummary {
            worker: s.worker.into(),
            events: s.events as u64,
            stored_blocks: s.stored_blocks as u64,
            removed_blocks: s.removed_blocks as u64,
            orphaned_blocks: s.orphaned_blocks as u64,
            unknown_removals: s.unknown_removals as u64,
            clears: s.clears as u64,
        })
    }

    /// The router's state, its index and ledger (not approximate mode's predictions), in
    /// libroute's versioned snapshot format: a router of the same `max_workers` given it with
    /// [`Router::restore`] holds the same state, so a restarted host resumes where the snapshot
    /// was taken.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` when the router reads engines' KV batches ([`Router::read_kv_batches`]):
    /// their map from engine to router block hashes is not in a snapshot.
    pub fn snapshot(&self) -> Result<Vec<u8>, RouteError> {
        self.with(|r| Ok(r.snapshot_to_vec()?))
    }

    /// Replaces the router's index and ledger with those of a [`Router::snapshot`] (of a router
    /// with the same `max_workers`), in tables of this router's sizes; approximate mode's
    /// predictions are forgotten, and workers added since the snapshot must be added again.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` naming the byte offset for a truncated or damaged snapshot, one of
    /// another format version or `max_workers`, or one holding more than this router's tables
    /// do (nothing changes); also when the router reads engines' KV batches.
    pub fn restore(&self, snapshot: &[u8]) -> Result<(), RouteError> {
        self.with(|r| Ok(r.restore(snapshot)?))
    }

    /// Applies replica events (idempotent: repeats and late events are absorbed and counted).
    ///
    /// # Errors
    ///
    /// `Closed` after `release` (the kinds are typed).
    pub fn apply_ledger_events(&self, events: Vec<LedgerEvent>) -> Result<(), RouteError> {
        self.with(|r| {
            for e in &events {
                r.apply_ledger_event(&match *e {
                    LedgerEvent::Booked {
                        id,
                        worker,
                        prefill_tokens,
                        blocks,
                    } => CoreLedgerEvent::Booked {
                        id,
                        worker: key(worker),
                        prefill_tokens,
                        blocks,
                    },
                    LedgerEvent::PrefillComplete { id } => CoreLedgerEvent::PrefillComplete { id },
                    LedgerEvent::Freed { id } => CoreLedgerEvent::Freed { id },
                });
            }
            Ok(())
        })
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
        self.with(|r| Ok(r.book(id, worker.into(), prefill_tokens, blocks, None)?))
    }

    /// Marks request `id`'s prefill complete.
    ///
    /// # Errors
    ///
    /// `UnknownRequest`.
    pub fn prefill_complete(&self, id: u64) -> Result<(), RouteError> {
        self.with(|r| Ok(r.prefill_complete(id, None)?))
    }

    /// [`Router::route`] over the router's fleet ([`Router::fleet_add`]) instead of candidates
    /// passed each call: each worker is looked for where it was found last time, and only the
    /// rows of workers whose load or index bit changed since the last fleet route are read
    /// again. The selection's `row` is a position in [`Router::fleet_rows`].
    ///
    /// # Errors
    ///
    /// As [`Router::route`] (`NoEndpoints` for an empty fleet).
    pub fn route_fleet(
        &self,
        policy: Arc<Policy>,
        selector: Arc<Selector>,
        request: Request,
        hashes: Vec<u64>,
        id: u64,
        now: u64,
    ) -> Result<Selection, RouteError> {
        self.route_fleet_call(
            &policy,
            &selector,
            &request,
            &hashes,
            id,
            RouteTime::Units(now),
        )
    }

    /// [`Router::route_fleet`] at `now_ms`, as [`Router::route_at`] is [`Router::route`] at
    /// `now_ms`.
    ///
    /// # Errors
    ///
    /// As [`Router::route_at`].
    pub fn route_fleet_at(
        &self,
        policy: Arc<Policy>,
        selector: Arc<Selector>,
        request: Request,
        hashes: Vec<u64>,
        id: u64,
        now_ms: f64,
    ) -> Result<Selection, RouteError> {
        self.route_fleet_call(
            &policy,
            &selector,
            &request,
            &hashes,
            id,
            RouteTime::Ms(now_ms),
        )
    }

    /// Frees request `id` (finished or cancelled).
    ///
    /// # Errors
    ///
    /// `UnknownRequest`.
    pub fn free_request(&self, id: u64) -> Result<(), RouteError> {
        self.with(|r| Ok(r.free_request(id)?))
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
        self.with(|r| Ok(r.book(id, worker.into(), prefill_tokens, blocks, Some(now_ms))?))
    }

    /// [`Router::prefill_complete`] at `now_ms`: a request booked at a time teaches its
    /// worker's speed how long its first token took.
    ///
    /// # Errors
    ///
    /// `UnknownRequest`, and `InvalidArgument` for a bad time.
    pub fn prefill_complete_at(&self, id: u64, now_ms: f64) -> Result<(), RouteError> {
        self.with(|r| Ok(r.prefill_complete(id, Some(now_ms))?))
    }

    /// The router's counters.
    ///
    /// # Errors
    ///
    /// `Closed` after `release`.
    pub fn counters(&self) -> Result<RouterCounters, RouteError> {
        let c = self.with(|r| Ok(r.counters()))?;
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
