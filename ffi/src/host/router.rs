//! [`Router`]: the prefix-overlap index, the load ledger and (for approximate mode) the
//! predictions behind one value; KV and replica events, the ledger's calls, the one-call route
//! and counters.

use libroute_core::{
    BlockSlot, EngineSlot, Fleet, FleetPlace, KvEvent, KvIngest, Ledger, LedgerEvent, LoadSlot,
    Place, PredictionRecord, PredictionSlot, Predictions, PrefixIndex, RequestSlot, RouteError,
    Router as GenericRouter, Row, SnapshotError, SnapshotReader, TaintSet, WorkerKey, WorkerSlot,
};

use crate::host::policy::Kind;
use crate::host::selector::{AnySelector, with_selector};
use crate::host::{Policy, Selector};
use crate::pages::Pages;
use crate::router::{
    LIBROUTE_MAX_TABLE_SLOTS, libroute_kv_batch_summary, libroute_router_config,
    libroute_router_counters,
};
use crate::status::{Failure, libroute_status};
use crate::vocab::{
    RequestArgs, c_rows, core_rows_mut, libroute_row, libroute_selection, libroute_worker, to_c,
    with_core_request,
};

type CoreRouter<const W: usize> = GenericRouter<
    Pages<BlockSlot<W>>,
    Pages<WorkerSlot>,
    Pages<RequestSlot>,
    Pages<LoadSlot>,
    Pages<u64>,
    W,
>;
type CorePredictions = Predictions<Pages<PredictionSlot>, Pages<PredictionRecord>>;
type CoreIngest = KvIngest<Pages<EngineSlot>>;
type CoreFleet = Fleet<Pages<Row>, Pages<FleetPlace>>;

/// The core router of the worker width `max_workers` asked for.
enum AnyRouter {
    W1(Box<CoreRouter<1>>),
    W4(Box<CoreRouter<4>>),
    W16(Box<CoreRouter<16>>),
}

/// Runs `$body` with `$x` bound to the core router behind an [`AnyRouter`].
macro_rules! with_router {
    ($r:expr, $x:ident => $body:expr) => {
        match $r {
            AnyRouter::W1(boxed) => {
                let $x = &mut **boxed;
                $body
            }
            AnyRouter::W4(boxed) => {
                let $x = &mut **boxed;
                $body
            }
            AnyRouter::W16(boxed) => {
                let $x = &mut **boxed;
                $body
            }
        }
    };
}

/// The time a route or booking is made at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Clock {
    /// Untimed: `now` in the unit of the prediction lifetime (0 without predictions).
    Units(u64),
    /// Milliseconds on the host's clock: the booking is timed, so its prefill completion
    /// calibrates the worker's speed.
    Ms(f64),
}

/// The host's state behind a `libroute_router`: all memory is allocated by [`Router::new`]
/// (and by [`Router::read_kv_batches`], for its map, and [`Router::restore`], which builds new
/// tables before it drops the old); routing and events never allocate. One caller at a time
/// (`&mut self`).
#[allow(
    clippy::struct_field_names,
    reason = "`router` is the core's router, the one field every call goes through"
)]
pub struct Router {
    router: AnyRouter,
    predictions: Option<CorePredictions>,
    /// Engines' KV-event payloads: on once [`Router::read_kv_batches`] sized it.
    ingest: Option<CoreIngest>,
    /// Where the workers of the rows of the last route were found, row by row (`max_workers`
    /// of them): a host that routes over the same rows each time has each worker looked for
    /// there first instead of hashed (`libroute_core::Router::route_placed`).
    places: Box<[Place]>,
    /// The workers the router keeps as candidate rows between routes (`max_workers` of them at
    /// most), for [`Router::route_fleet`].
    fleet: CoreFleet,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}

/// `len` copies of `empty` in [`Pages`] (huge pages for a large table); `CAPACITY_EXCEEDED`
/// naming `what` and the bytes when the system cannot allocate them.
fn allocate<T: Copy>(len: usize, empty: T, what: &str) -> Result<Pages<T>, Failure> {
    Pages::filled(len, empty).ok_or_else(|| {
        Failure::new(
            libroute_status::CapacityExceeded,
            format_args!(
                "{what}: could not allocate {len} slots of {} bytes",
                size_of::<T>()
            ),
        )
    })
}

/// A hash table's storage of `slots` slots, checked: a power of two of at least 8, at most
/// `LIBROUTE_MAX_TABLE_SLOTS`.
fn table<T: Copy>(slots: usize, empty: T, what: &str) -> Result<Pages<T>, Failure> {
    if slots < 8 || !slots.is_power_of_two() {
        return Err(Failure::new(
            libroute_status::InvalidArgument,
            format_args!("{what} is {slots}; it must be a power of two of at least 8"),
        ));
    }
    if slots > LIBROUTE_MAX_TABLE_SLOTS {
        return Err(Failure::new(
            libroute_status::CapacityExceeded,
            format_args!(
                "{what} is {slots}; at most LIBROUTE_MAX_TABLE_SLOTS ({LIBROUTE_MAX_TABLE_SLOTS})"
            ),
        ));
    }
    allocate(slots, empty, what)
}

fn build<const W: usize>(c: &libroute_router_config) -> Result<CoreRouter<W>, Failure> {
    let storage =
        |e: libroute_core::StorageError| Failure::new(libroute_status::InvalidArgument, e);
    let index = PrefixIndex::new(
        table(c.block_slots, BlockSlot::<W>::empty(), "block_slots")?,
        allocate(128 * W, WorkerSlot::empty(), "the index's worker table")?,
    )
    .map_err(storage)?;
    if c.tombstones > LIBROUTE_MAX_TABLE_SLOTS {
        return Err(Failure::fixed(
            libroute_status::CapacityExceeded,
            "tombstones exceeds LIBROUTE_MAX_TABLE_SLOTS",
        ));
    }
    let ledger = Ledger::new(
        table(c.request_slots, RequestSlot::empty(), "request_slots")?,
        allocate(128 * W, LoadSlot::empty(), "the ledger's worker table")?,
        allocate(c.tombstones, 0u64, "tombstones")?,
    )
    .map_err(storage)?;
    Ok(GenericRouter::new(
        index,
        ledger,
        c.host_weight,
        c.disk_weight,
    ))
}

/// Why a router that reads engines' KV batches neither writes nor reads snapshots.
const READS_ENGINES: &str = "the router reads engines' KV batches (libroute_router_read_kv_batches), \
     whose map from engine to router block hashes is not in a snapshot";

/// `router` with the index and ledger of the snapshot in `bytes`, in tables of its sizes.
fn restore_into<const W: usize>(router: &mut CoreRouter<W>, bytes: &[u8]) -> Result<(), Failure> {
    let damaged = |e: SnapshotError| Failure::new(libroute_status::InvalidArgument, e);
    let (blocks, workers) = router.index.slot_counts();
    let (requests, loads, tombstones) = router.ledger.slot_counts();
    let mut reader = SnapshotReader::new(bytes);
    let index = PrefixIndex::from_snapshot(
        allocate(blocks, BlockSlot::<W>::empty(), "block_slots")?,
        allocate(workers, WorkerSlot::empty(), "the index's worker table")?,
        &mut reader,
    )
    .map_err(damaged)?;
    let ledger = Ledger::from_snapshot(
        allocate(requests, RequestSlot::empty(), "request_slots")?,
        allocate(loads, LoadSlot::empty(), "the ledger's worker table")?,
        allocate(tombstones, 0u64, "tombstones")?,
        &mut reader,
    )
    .map_err(damaged)?;
    reader.finish().map_err(damaged)?;
    let (host, disk) = router.cache_weights();
    *router = GenericRouter::new(index, ledger, host, disk);
    Ok(())
}

fn key(w: libroute_worker) -> WorkerKey {
    WorkerKey::new(w.worker_id, w.dp_rank)
}

impl Router {
    /// A router of the sizes and weights in `config`; all its memory is allocated here.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` (a slot count that is not a power of two of at least 8, `max_workers`
    /// other than 64, 256 or 1024, weights outside [0, 1] or not finite); `CAPACITY_EXCEEDED` (a
    /// table above `LIBROUTE_MAX_TABLE_SLOTS`, or larger than the system will allocate).
    pub fn new(config: &libroute_router_config) -> Result<Self, Failure> {
        let c = config;
        for (weight, name) in [
            (c.host_weight, "host_weight"),
            (c.disk_weight, "disk_weight"),
        ] {
            if !(0.0..=1.0).contains(&weight) {
                return Err(Failure::new(
                    libroute_status::InvalidArgument,
                    format_args!("{name} is {weight}; it must be within [0, 1]"),
                ));
            }
        }
        let router = match c.max_workers {
            64 => AnyRouter::W1(Box::new(build::<1>(c)?)),
            256 => AnyRouter::W4(Box::new(build::<4>(c)?)),
            1024 => AnyRouter::W16(Box::new(build::<16>(c)?)),
            other => {
                return Err(Failure::new(
                    libroute_status::InvalidArgument,
                    format_args!("max_workers is {other}; it must be 64, 256 or 1024"),
                ));
            }
        };
        let predictions = if c.prediction_slots == 0 {
            None
        } else {
            let map = table(
                c.prediction_slots,
                PredictionSlot::empty(),
                "prediction_slots",
            )?;
            let ring = allocate(
                c.prediction_slots / 2,
                PredictionRecord::default(),
                "the predictions' ring",
            )?;
            Some(
                Predictions::new(map, ring, c.prediction_ttl)
                    .map_err(|e| Failure::new(libroute_status::InvalidArgument, e))?,
            )
        };
        Ok(Router {
            router,
            predictions,
            ingest: None,
            places: vec![Place::empty(); c.max_workers].into_boxed_slice(),
            fleet: Fleet::new(
                allocate(c.max_workers, Row::default(), "the fleet's rows")?,
                allocate(c.max_workers, FleetPlace::empty(), "the fleet's places")?,
            )
            .map_err(Failure::fleet)?,
        })
    }

    /// Turns on [`Router::apply_kv_batch`]: engines' stored blocks must have `block_size` tokens
    /// (the size requests are hashed with), and the map from engine block hashes to the router's
    /// holds `engine_hash_slots / 2` blocks (size it like the index's `block_slots`). Called
    /// again, it starts over with an empty map. Allocates the map.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` (a block size of 0, a slot count that is not a power of two of at
    /// least 8); `CAPACITY_EXCEEDED` (above `LIBROUTE_MAX_TABLE_SLOTS`, or larger than the
    /// system will allocate).
    pub fn read_kv_batches(
        &mut self,
        block_size: u32,
        engine_hash_slots: usize,
    ) -> Result<(), Failure> {
        let slots = table(engine_hash_slots, EngineSlot::empty(), "engine_hash_slots")?;
        let ingest = KvIngest::new(slots, block_size)
            .map_err(|e| Failure::new(libroute_status::InvalidArgument, e))?;
        self.ingest = Some(ingest);
        Ok(())
    }

    /// Applies one raw `KVEventBatch` payload (vLLM's or SGLang's msgpack, as published on their
    /// ZMQ socket) to the index as `worker`'s events; the data-parallel rank the batch names
    /// replaces `worker`'s. The payload is checked whole first.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` for a malformed, truncated or unknown payload (the sentence names the
    /// byte offset), a block size other than the one given to [`Router::read_kv_batches`], or
    /// before that call; `CAPACITY_EXCEEDED` for a new worker when the index tracks
    /// `max_workers` already. Nothing changes on error.
    pub fn apply_kv_batch(
        &mut self,
        worker: libroute_worker,
        payload: &[u8],
    ) -> Result<libroute_kv_batch_summary, Failure> {
        let Some(ingest) = self.ingest.as_mut() else {
            return Err(Failure::fixed(
                libroute_status::InvalidArgument,
                "engine KV batches are off: size them with libroute_router_read_kv_batches first",
            ));
        };
        with_router!(&mut self.router, x => ingest.apply(&mut x.index, key(worker), payload))
            .map(libroute_kv_batch_summary::from)
            .map_err(Failure::ingest)
    }

    /// Registers a worker with the ledger (the index learns workers from their KV events).
    ///
    /// # Errors
    ///
    /// `CAPACITY_EXCEEDED` (more workers than `max_workers`).
    pub fn add_worker(&mut self, worker: libroute_worker) -> Result<(), Failure> {
        with_router!(&mut self.router, x => x.ledger.add_worker(key(worker)))
            .map_err(Failure::ledger)
    }

    /// Forgets a worker: its cached blocks leave the index, its load the ledger, and its row the
    /// fleet.
    pub fn remove_worker(&mut self, worker: libroute_worker) {
        let _ = self.fleet.remove(key(worker));
        with_router!(&mut self.router, x => {
            let _ = x.index.apply(&KvEvent::WorkerRemoved { worker: key(worker) });
            x.ledger.remove_worker(key(worker));
        });
        if let Some(ingest) = self.ingest.as_mut() {
            ingest.forget_worker(key(worker));
        }
    }

    /// Adds `worker` to the fleet, the candidates [`Router::route_fleet`] routes over, with
    /// `taints` (bit `i` for taint index `i`), not overloaded. Register it with the ledger too
    /// ([`Router::add_worker`]), for it to be booked.
    ///
    /// # Errors
    ///
    /// `DUPLICATE_WORKER` (in the fleet already), `CAPACITY_EXCEEDED` (`max_workers` in it).
    pub fn fleet_add(&mut self, worker: libroute_worker, taints: u64) -> Result<(), Failure> {
        self.fleet
            .add(key(worker), TaintSet(taints))
            .map_err(Failure::fleet)
    }

    /// Takes `worker` out of the fleet (its blocks and load stay: see [`Router::remove_worker`]).
    ///
    /// # Errors
    ///
    /// `UNKNOWN_WORKER` (not in the fleet).
    pub fn fleet_remove(&mut self, worker: libroute_worker) -> Result<(), Failure> {
        self.fleet.remove(key(worker)).map_err(Failure::fleet)
    }

    /// Replaces the taints of `worker`'s row in the fleet.
    ///
    /// # Errors
    ///
    /// `UNKNOWN_WORKER` (not in the fleet).
    pub fn fleet_set_taints(
        &mut self,
        worker: libroute_worker,
        taints: u64,
    ) -> Result<(), Failure> {
        self.fleet
            .set_taints(key(worker), TaintSet(taints))
            .map_err(Failure::fleet)
    }

    /// Marks `worker`'s row in the fleet overloaded (skipped with the overload reason) or not.
    ///
    /// # Errors
    ///
    /// `UNKNOWN_WORKER` (not in the fleet).
    pub fn fleet_set_overloaded(
        &mut self,
        worker: libroute_worker,
        overloaded: bool,
    ) -> Result<(), Failure> {
        self.fleet
            .set_overloaded(key(worker), overloaded)
            .map_err(Failure::fleet)
    }

    /// The fleet's rows, sorted by worker, with the inputs the last fleet route read.
    #[must_use]
    pub fn fleet_rows(&self) -> &[libroute_row] {
        c_rows(self.fleet.rows())
    }

    /// Applies one KV event to the index. A `Stored` event of a new worker when the index already
    /// tracks `max_workers` is refused and counted (`rejected_kv_events`), as are removals of
    /// unknown blocks (`ignored_kv_events`): a batch goes on past them.
    pub fn apply_kv_event(&mut self, event: &KvEvent<'_>) {
        let _ = with_router!(&mut self.router, x => x.index.apply(event));
    }

    /// Applies one replica event to the ledger. Idempotent: late, repeated and reordered events
    /// are absorbed (and counted); events for unknown workers are ignored and counted.
    pub fn apply_ledger_event(&mut self, event: &LedgerEvent) {
        with_router!(&mut self.router, x => x.ledger.apply(event));
    }

    /// Books request `id` on `worker` (for hosts that select and book themselves); at a time,
    /// the booking is timed (see [`Clock::Ms`]).
    ///
    /// # Errors
    ///
    /// `DUPLICATE_REQUEST`, `UNKNOWN_WORKER`, `CAPACITY_EXCEEDED`, `INVALID_ARGUMENT` (a time that
    /// is NaN, infinite or negative); nothing changes.
    pub fn book(
        &mut self,
        id: u64,
        worker: libroute_worker,
        prefill_tokens: u64,
        blocks: u64,
        at: Option<f64>,
    ) -> Result<(), Failure> {
        let worker = key(worker);
        with_router!(&mut self.router, x => match at {
            None => x.ledger.book(id, worker, prefill_tokens, blocks),
            Some(now_ms) => x.ledger.book_at(id, worker, prefill_tokens, blocks, now_ms),
        })
        .map_err(Failure::ledger)
    }

    /// Marks request `id`'s prefill complete; at a time (milliseconds), a timed booking teaches
    /// its worker's speed how long its first token took.
    ///
    /// # Errors
    ///
    /// `UNKNOWN_REQUEST` (not booked, freed, or already completed), `INVALID_ARGUMENT` (a time
    /// that is NaN, infinite or negative); nothing changes.
    pub fn prefill_complete(&mut self, id: u64, at: Option<f64>) -> Result<(), Failure> {
        with_router!(&mut self.router, x => match at {
            None => x.ledger.prefill_complete(id),
            Some(now_ms) => x.ledger.prefill_complete_at(id, now_ms),
        })
        .map_err(Failure::ledger)
    }

    /// Frees request `id` (finished or cancelled).
    ///
    /// # Errors
    ///
    /// `UNKNOWN_REQUEST` (not booked, or already freed); nothing changes.
    pub fn free_request(&mut self, id: u64) -> Result<(), Failure> {
        with_router!(&mut self.router, x => x.ledger.free(id)).map_err(Failure::ledger)
    }

    /// Does it all for one request: fills `rows` (the candidates) with the index's overlaps for
    /// `hashes` (the request's chained block hashes) and the ledger's loads, selects with
    /// `policy`, and books request `id` on the chosen worker. With predictions, those due at
    /// `now` expire first and the choice is recorded as a prediction.
    ///
    /// # Errors
    ///
    /// As [`Selector::select`], plus `DUPLICATE_REQUEST` (checked before anything else),
    /// `UNKNOWN_WORKER` (the chosen worker is not registered), `CAPACITY_EXCEEDED` (the ledger
    /// is full) and `INVALID_ARGUMENT` (a time that is NaN, infinite or negative). Nothing is
    /// booked on any error.
    #[allow(clippy::too_many_arguments, reason = "the route's inputs")]
    pub fn route(
        &mut self,
        policy: &Policy,
        selector: &mut Selector,
        request: &RequestArgs<'_>,
        hashes: &[u64],
        rows: &mut [libroute_row],
        id: u64,
        now: Clock,
    ) -> Result<libroute_selection, Failure> {
        selector.check_rows(rows.len())?;
        let rows = core_rows_mut(rows);
        let Router {
            router,
            predictions,
            places,
            ..
        } = self;
        let result = with_core_request(request, |core_request| {
            with_router!(router, x => route_any(
                x,
                predictions.as_mut(),
                policy,
                &mut selector.inner,
                core_request,
                hashes,
                Candidates::Rows(rows, places),
                id,
                now,
            ))
        })?;
        routed(result)
    }

    /// [`Router::route`] over the fleet's rows instead of the caller's: each worker is looked for
    /// where it was found last time, and only the rows of workers whose load or index bit
    /// changed since the last fleet route are read again (`libroute_core::Router::route_fleet`).
    /// The selection's `row` is a position in [`Router::fleet_rows`].
    ///
    /// # Errors
    ///
    /// As [`Router::route`] (`NO_ENDPOINTS` when the fleet is empty). Nothing is booked on any
    /// error.
    pub fn route_fleet(
        &mut self,
        policy: &Policy,
        selector: &mut Selector,
        request: &RequestArgs<'_>,
        hashes: &[u64],
        id: u64,
        now: Clock,
    ) -> Result<libroute_selection, Failure> {
        selector.check_rows(self.fleet.len())?;
        let Router {
            router,
            predictions,
            fleet,
            ..
        } = self;
        let result = with_core_request(request, |core_request| {
            with_router!(router, x => route_any(
                x,
                predictions.as_mut(),
                policy,
                &mut selector.inner,
                core_request,
                hashes,
                Candidates::Fleet(fleet),
                id,
                now,
            ))
        })?;
        routed(result)
    }

    /// Writes the router's snapshot (its index and ledger, as `libroute_core::Router::
    /// write_snapshot` writes them) into `out` and returns its size in bytes.
    ///
    /// # Errors
    ///
    /// `(size, BUFFER_TOO_SMALL)` when `out` holds fewer than `size` bytes (nothing written);
    /// `INVALID_ARGUMENT` when the router reads engines' KV batches: their map from engine to
    /// router block hashes is not in a snapshot, and a router restored without it would drop the
    /// blocks engines store on top of the ones it holds.
    pub fn snapshot(&self, out: &mut [u8]) -> Result<usize, (usize, Failure)> {
        self.snapshots_allowed().map_err(|failure| (0, failure))?;
        let mut size = 0;
        self.write_snapshot(&mut |bytes| size += bytes.len());
        if out.len() < size {
            return Err((
                size,
                Failure::new(
                    libroute_status::BufferTooSmall,
                    format_args!(
                        "the snapshot takes {size} bytes; out_capacity is {}",
                        out.len()
                    ),
                ),
            ));
        }
        let mut at = 0;
        self.write_snapshot(&mut |bytes| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        });
        Ok(size)
    }

    /// [`Router::snapshot`] into a vector of its size.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` when the router reads engines' KV batches.
    pub fn snapshot_to_vec(&self) -> Result<Vec<u8>, Failure> {
        self.snapshots_allowed()?;
        let mut bytes = Vec::new();
        self.write_snapshot(&mut |b| bytes.extend_from_slice(b));
        Ok(bytes)
    }

    /// Refuses snapshots when the router reads engines' KV batches (see [`Router::snapshot`]).
    fn snapshots_allowed(&self) -> Result<(), Failure> {
        match self.ingest {
            Some(_) => Err(Failure::fixed(
                libroute_status::InvalidArgument,
                READS_ENGINES,
            )),
            None => Ok(()),
        }
    }

    fn write_snapshot(&self, out: &mut impl FnMut(&[u8])) {
        match &self.router {
            AnyRouter::W1(x) => x.write_snapshot(out),
            AnyRouter::W4(x) => x.write_snapshot(out),
            AnyRouter::W16(x) => x.write_snapshot(out),
        }
    }

    /// Replaces the router's index and ledger with those of the snapshot in `bytes` (one this
    /// router's `max_workers` wrote), built in new tables of this router's sizes; approximate
    /// mode's predictions are forgotten (a snapshot holds none). On error nothing changes.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` naming the byte offset and what is wrong there (a truncated or damaged
    /// snapshot, another format version, another `max_workers`, more blocks, requests or workers
    /// than this router's tables hold), or when the router reads engines' KV batches (see
    /// [`Router::snapshot`]).
    pub fn restore(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.snapshots_allowed()?;
        match &mut self.router {
            AnyRouter::W1(x) => restore_into(x, bytes)?,
            AnyRouter::W4(x) => restore_into(x, bytes)?,
            AnyRouter::W16(x) => restore_into(x, bytes)?,
        }
        if let Some(predictions) = &mut self.predictions {
            predictions.forget_all();
        }
        Ok(())
    }

    /// What the router has done, for hosts to export.
    #[must_use]
    pub fn counters(&self) -> libroute_router_counters {
        let (i, l) = match &self.router {
            AnyRouter::W1(x) => (x.index.counters(), x.ledger.counters()),
            AnyRouter::W4(x) => (x.index.counters(), x.ledger.counters()),
            AnyRouter::W16(x) => (x.index.counters(), x.ledger.counters()),
        };
        libroute_router_counters {
            blocks: i.blocks,
            index_workers: i.workers,
            evictions: i.evictions,
            rejected_kv_events: i.rejected_events,
            ignored_kv_events: i.ignored_events,
            active_requests: l.active_requests,
            ledger_workers: l.workers,
            duplicate_ledger_events: l.duplicate_events,
            late_ledger_events: l.late_events,
            unknown_worker_ledger_events: l.unknown_worker_events,
            predictions: self.predictions.as_ref().map_or(0, Predictions::len),
            forced_prediction_expiries: self
                .predictions
                .as_ref()
                .map_or(0, Predictions::forced_expiries),
        }
    }
}

/// A route's outcome in the C vocabulary.
fn routed(
    result: Result<libroute_core::Selection, RouteError>,
) -> Result<libroute_selection, Failure> {
    match result {
        Ok(selection) => Ok(to_c(&selection)),
        Err(RouteError::Select(e)) => Err(Failure::select(e)),
        Err(RouteError::Ledger(e)) => Err(Failure::ledger(e)),
        Err(e) => Err(Failure::new(libroute_status::InvalidArgument, e)),
    }
}

/// Where a route finds its candidates: the caller's rows (with the places the router keeps for
/// them) or the router's fleet.
enum Candidates<'a> {
    Rows(&'a mut [Row], &'a mut [Place]),
    Fleet(&'a mut CoreFleet),
}

/// The core router's call for the candidates, the clock, the predictions and the policy's kind.
#[allow(clippy::too_many_arguments, reason = "the route's inputs, forwarded")]
fn route_any<const W: usize>(
    router: &mut CoreRouter<W>,
    predictions: Option<&mut CorePredictions>,
    policy: &Policy,
    selector: &mut AnySelector,
    request: &libroute_core::Request<'_>,
    hashes: &[u64],
    candidates: Candidates<'_>,
    id: u64,
    now: Clock,
) -> Result<libroute_core::Selection, RouteError> {
    macro_rules! go {
        ($s:expr, $p:expr) => {
            match (candidates, now, predictions) {
                (Candidates::Rows(rows, places), Clock::Ms(now_ms), predictions) => router
                    .route_placed_at(
                        predictions,
                        $p,
                        $s,
                        request,
                        hashes,
                        rows,
                        places,
                        id,
                        now_ms,
                    ),
                (Candidates::Rows(rows, places), Clock::Units(now), Some(pr)) => router
                    .route_predicting_placed(pr, $p, $s, request, hashes, rows, places, id, now),
                (Candidates::Rows(rows, places), Clock::Units(_), None) => {
                    router.route_placed($p, $s, request, hashes, rows, places, id)
                }
                (Candidates::Fleet(fleet), Clock::Ms(now_ms), predictions) => {
                    router.route_fleet_at(predictions, fleet, $p, $s, request, hashes, id, now_ms)
                }
                (Candidates::Fleet(fleet), Clock::Units(now), Some(pr)) => {
                    router.route_fleet_predicting(pr, fleet, $p, $s, request, hashes, id, now)
                }
                (Candidates::Fleet(fleet), Clock::Units(_), None) => {
                    router.route_fleet(fleet, $p, $s, request, hashes, id)
                }
            }
        };
    }
    with_selector!(selector, s => match &policy.kind {
        Kind::Default(p) => go!(s, p),
        Kind::Composed(p) => go!(s, p),
        Kind::Catalog(p) => go!(s, p),
    })
}
