//! The host's state through the C ABI: one `libroute_router` handle holding the prefix-overlap
//! index, the load ledger and (for approximate mode) the predictions, with KV and replica events
//! as arrays of `#[repr(C)]` structs, the strict ledger calls, the one-call route, and counters.

use libroute_core::{
    BlockSlot, KvEvent, Ledger, LedgerError, LedgerEvent, LoadSlot, PredictionRecord,
    PredictionSlot, Predictions, PrefixIndex, RequestSlot, RouteError, Router, Row, Tier,
    WorkerKey, WorkerSlot,
};

use crate::handle::{Handle, slice};
use crate::policy::libroute_policy;
use crate::selector::{AnySelector, libroute_selector, select_error};
use crate::status::{boundary, fail, libroute_status};
use crate::vocab::{
    libroute_request, libroute_row, libroute_selection, libroute_worker, to_c, with_core_request,
};

/// The largest table `libroute_router_new` allocates, in slots (2^26).
pub const LIBROUTE_MAX_TABLE_SLOTS: usize = 1 << 26;

/// Sizes and weights of a router; every table's slot count is a power of two (at least 8), and a
/// table holds at most half its slots.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_router_config {
    /// Slots of the block table (the index holds half as many blocks; the least recently stored
    /// is evicted beyond that).
    pub block_slots: usize,
    /// Most workers: 64, 256 or 1024.
    pub max_workers: usize,
    /// Slots of the ledger's request table (it books half as many requests).
    pub request_slots: usize,
    /// Tombstones kept for replica events that arrive before their booking (0 for none).
    pub tombstones: usize,
    /// Approximate mode: slots of the prediction map (0 turns approximate mode off).
    pub prediction_slots: usize,
    /// Approximate mode: how long a prediction lives, in the unit of `now` arguments.
    pub prediction_ttl: u64,
    /// Credit weight of a host-memory block in the accounting estimate (the policy's
    /// `host_cache_hit_weight`).
    pub host_weight: f64,
    /// Credit weight of a disk block (the policy's `disk_cache_hit_weight`).
    pub disk_weight: f64,
}

/// Kinds of `libroute_kv_event`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum libroute_kv_kind {
    /// The worker stored `hashes` in `tier`.
    Stored = 0,
    /// The worker removed `hashes` from `tier`.
    Removed = 1,
    /// The worker dropped everything it cached.
    Cleared = 2,
    /// The worker left.
    WorkerRemoved = 3,
}

/// A KV-cache event from a worker.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_kv_event {
    /// A `libroute_kv_kind` value.
    pub kind: u32,
    /// The worker.
    pub worker: libroute_worker,
    /// A tier: 0 device, 1 host, 2 disk (ignored for `CLEARED` and `WORKER_REMOVED`).
    pub tier: u32,
    /// Chained block hashes (may be NULL when `hashes_len` is 0).
    pub hashes: *const u64,
    /// Number of hashes.
    pub hashes_len: usize,
}

/// Kinds of `libroute_ledger_event`.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum libroute_ledger_kind {
    /// Another replica booked request `id` on `worker`.
    Booked = 0,
    /// Request `id` completed its prefill.
    PrefillComplete = 1,
    /// Request `id` finished or was cancelled.
    Freed = 2,
}

/// A booking event relayed from another router replica.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_ledger_event {
    /// A `libroute_ledger_kind` value.
    pub kind: u32,
    /// The request id.
    pub id: u64,
    /// `BOOKED` only: the worker.
    pub worker: libroute_worker,
    /// `BOOKED` only: prefill tokens booked.
    pub prefill_tokens: u64,
    /// `BOOKED` only: blocks booked.
    pub blocks: u64,
}

/// What a router has done, for hosts to export.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct libroute_router_counters {
    /// Blocks in the index.
    pub blocks: usize,
    /// Workers the index knows.
    pub index_workers: usize,
    /// Blocks evicted to make room.
    pub evictions: u64,
    /// KV events refused (worker capacity).
    pub rejected_kv_events: u64,
    /// KV removals of unknown blocks or workers, ignored.
    pub ignored_kv_events: u64,
    /// Requests booked now.
    pub active_requests: usize,
    /// Workers the ledger knows.
    pub ledger_workers: usize,
    /// Replica events that repeated one already applied.
    pub duplicate_ledger_events: u64,
    /// Replica events that arrived after the event superseding them.
    pub late_ledger_events: u64,
    /// Replica events for unknown workers, ignored.
    pub unknown_worker_ledger_events: u64,
    /// Live predictions (approximate mode).
    pub predictions: usize,
    /// Predictions expired early because their storage was full.
    pub forced_prediction_expiries: u64,
}

/// The host's routing state: index, ledger, predictions. Create with `libroute_router_new`, free
/// with `libroute_router_free`. Not thread-safe: use it from one thread at a time.
#[derive(Debug)]
pub struct libroute_router {
    _private: [u8; 0],
}

impl Handle for libroute_router {
    type Target = RouterBox;
    const NAME: &'static str = "router";
}

type Boxed<T> = Box<[T]>;
type CoreRouter<const W: usize> = Router<
    Boxed<BlockSlot<W>>,
    Boxed<WorkerSlot>,
    Boxed<RequestSlot>,
    Boxed<LoadSlot>,
    Boxed<u64>,
    W,
>;
type CorePredictions = Predictions<Boxed<PredictionSlot>, Boxed<PredictionRecord>>;

enum AnyRouter {
    W1(Box<CoreRouter<1>>),
    W4(Box<CoreRouter<4>>),
    W16(Box<CoreRouter<16>>),
}

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

pub(crate) struct RouterBox {
    router: AnyRouter,
    predictions: Option<CorePredictions>,
}

fn table<T: Clone>(slots: usize, empty: T, what: &str) -> Result<Boxed<T>, libroute_status> {
    if slots < 8 || !slots.is_power_of_two() {
        return Err(fail(
            libroute_status::InvalidArgument,
            format_args!("{what} is {slots}; it must be a power of two of at least 8"),
        ));
    }
    if slots > LIBROUTE_MAX_TABLE_SLOTS {
        return Err(fail(
            libroute_status::CapacityExceeded,
            format_args!(
                "{what} is {slots}; at most LIBROUTE_MAX_TABLE_SLOTS ({LIBROUTE_MAX_TABLE_SLOTS})"
            ),
        ));
    }
    Ok(vec![empty; slots].into_boxed_slice())
}

fn build<const W: usize>(c: &libroute_router_config) -> Result<CoreRouter<W>, libroute_status> {
    let storage = |e: libroute_core::StorageError| fail(libroute_status::InvalidArgument, e);
    let index = PrefixIndex::new(
        table(c.block_slots, BlockSlot::<W>::empty(), "block_slots")?,
        vec![WorkerSlot::empty(); 128 * W].into_boxed_slice(),
    )
    .map_err(storage)?;
    if c.tombstones > LIBROUTE_MAX_TABLE_SLOTS {
        return Err(fail(
            libroute_status::CapacityExceeded,
            "tombstones exceeds LIBROUTE_MAX_TABLE_SLOTS",
        ));
    }
    let ledger = Ledger::new(
        table(c.request_slots, RequestSlot::empty(), "request_slots")?,
        vec![LoadSlot::empty(); 128 * W].into_boxed_slice(),
        vec![0u64; c.tombstones].into_boxed_slice(),
    )
    .map_err(storage)?;
    Ok(Router::new(index, ledger, c.host_weight, c.disk_weight))
}

/// Creates a router from `config`. On success `*out` owns it: free it with
/// `libroute_router_free`. All memory is allocated here; nothing allocates afterwards.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` (a slot count that is not a power of two of at
/// least 8, `max_workers` other than 64, 256 or 1024, weights outside [0, 1] or not finite);
/// `CAPACITY_EXCEEDED` (a table above `LIBROUTE_MAX_TABLE_SLOTS`).
///
/// # Safety
///
/// `config` must point to a valid config and `out` be valid for a pointer write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_new(
    config: *const libroute_router_config,
    out: *mut *mut libroute_router,
) -> libroute_status {
    boundary(|| {
        if config.is_null() || out.is_null() {
            return fail(libroute_status::NullArgument, "config or out is NULL");
        }
        // SAFETY: non-NULL and valid by contract.
        let c = unsafe { &*config };
        for (weight, name) in [
            (c.host_weight, "host_weight"),
            (c.disk_weight, "disk_weight"),
        ] {
            if !(0.0..=1.0).contains(&weight) {
                return fail(
                    libroute_status::InvalidArgument,
                    format_args!("{name} is {weight}; it must be within [0, 1]"),
                );
            }
        }
        let router = match c.max_workers {
            64 => build::<1>(c).map(|r| AnyRouter::W1(Box::new(r))),
            256 => build::<4>(c).map(|r| AnyRouter::W4(Box::new(r))),
            1024 => build::<16>(c).map(|r| AnyRouter::W16(Box::new(r))),
            other => Err(fail(
                libroute_status::InvalidArgument,
                format_args!("max_workers is {other}; it must be 64, 256 or 1024"),
            )),
        };
        let router = match router {
            Ok(r) => r,
            Err(s) => return s,
        };
        let predictions = if c.prediction_slots == 0 {
            None
        } else {
            let map = match table(
                c.prediction_slots,
                PredictionSlot::empty(),
                "prediction_slots",
            ) {
                Ok(m) => m,
                Err(s) => return s,
            };
            let ring = vec![PredictionRecord::default(); c.prediction_slots / 2].into_boxed_slice();
            match Predictions::new(map, ring, c.prediction_ttl) {
                Ok(p) => Some(p),
                Err(e) => return fail(libroute_status::InvalidArgument, e),
            }
        };
        let boxed = Box::new(RouterBox {
            router,
            predictions,
        });
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(libroute_router::into_handle(boxed)) };
        libroute_status::Ok
    })
}

/// Frees a router. `NULL` does nothing.
///
/// # Safety
///
/// `router` must be NULL or a live handle from `libroute_router_new`, not in use elsewhere.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_free(router: *mut libroute_router) {
    // SAFETY: by contract the pointer is NULL or a live router handle, freed once.
    unsafe { libroute_router::free(router) };
}

fn key(w: libroute_worker) -> WorkerKey {
    WorkerKey::new(w.worker_id, w.dp_rank)
}

fn ledger_error(e: LedgerError) -> libroute_status {
    let status = match e {
        LedgerError::DuplicateId(_) => libroute_status::DuplicateRequest,
        LedgerError::UnknownId(_) | LedgerError::PrefillAlreadyComplete(_) => {
            libroute_status::UnknownRequest
        }
        LedgerError::UnknownWorker(_) => libroute_status::UnknownWorker,
        LedgerError::InvalidTime => libroute_status::InvalidArgument,
        _ => libroute_status::CapacityExceeded,
    };
    fail(status, e)
}

/// Registers a worker with the ledger (the index learns workers from their KV events).
///
/// Errors: `NULL_ARGUMENT`, `CAPACITY_EXCEEDED` (more workers than `max_workers`).
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_add_worker(
    router: *mut libroute_router,
    worker: libroute_worker,
) -> libroute_status {
    boundary(|| {
        // SAFETY: by contract.
        let r = match unsafe { libroute_router::get_mut(router) } {
            Ok(r) => r,
            Err(s) => return s,
        };
        match with_router!(&mut r.router, x => x.ledger.add_worker(key(worker))) {
            Ok(()) => libroute_status::Ok,
            Err(e) => ledger_error(e),
        }
    })
}

/// Forgets a worker: its cached blocks leave the index and its load leaves the ledger.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_remove_worker(
    router: *mut libroute_router,
    worker: libroute_worker,
) -> libroute_status {
    boundary(|| {
        // SAFETY: by contract.
        let r = match unsafe { libroute_router::get_mut(router) } {
            Ok(r) => r,
            Err(s) => return s,
        };
        with_router!(&mut r.router, x => {
            let _ = x.index.apply(&KvEvent::WorkerRemoved { worker: key(worker) });
            x.ledger.remove_worker(key(worker));
        });
        libroute_status::Ok
    })
}

/// Applies `events[0..len]` to the index, in order. Every event is checked first (kind, tier,
/// NULL hashes); if one is invalid, none is applied. A `STORED` event of a new worker when the
/// index already tracks `max_workers` is refused and counted (`rejected_kv_events`); the others
/// are applied.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently; `events` must point to `len` events
/// whose `hashes` are valid for their lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_apply_kv_events(
    router: *mut libroute_router,
    events: *const libroute_kv_event,
    len: usize,
) -> libroute_status {
    boundary(|| {
        // SAFETY: by contract.
        let r = match unsafe { libroute_router::get_mut(router) } {
            Ok(r) => r,
            Err(s) => return s,
        };
        // SAFETY: `events` holds `len` events by contract.
        let Some(events) = (unsafe { slice(events, len) }) else {
            return fail(
                libroute_status::NullArgument,
                "events is NULL with a non-zero length",
            );
        };
        for (i, e) in events.iter().enumerate() {
            if e.kind > libroute_kv_kind::WorkerRemoved as u32 {
                return fail(
                    libroute_status::InvalidArgument,
                    format_args!("event {i}: kind {} is not a libroute_kv_kind", e.kind),
                );
            }
            if e.kind <= libroute_kv_kind::Removed as u32 && Tier::from_u32(e.tier).is_none() {
                return fail(
                    libroute_status::InvalidArgument,
                    format_args!("event {i}: tier {} is not 0, 1 or 2", e.tier),
                );
            }
            if e.hashes.is_null() && e.hashes_len > 0 {
                return fail(
                    libroute_status::NullArgument,
                    format_args!("event {i}: hashes is NULL with a non-zero length"),
                );
            }
        }
        for e in events {
            // SAFETY: checked non-NULL (or empty) above; valid for its length by contract.
            let hashes = unsafe { slice(e.hashes, e.hashes_len) }.unwrap_or(&[]);
            let worker = key(e.worker);
            let tier = Tier::from_u32(e.tier).unwrap_or(Tier::Device);
            let event = match e.kind {
                0 => KvEvent::Stored {
                    worker,
                    tier,
                    hashes,
                },
                1 => KvEvent::Removed {
                    worker,
                    tier,
                    hashes,
                },
                2 => KvEvent::Cleared { worker },
                _ => KvEvent::WorkerRemoved { worker },
            };
            // A refusal is counted by the index; the batch goes on.
            let _ = with_router!(&mut r.router, x => x.index.apply(&event));
        }
        libroute_status::Ok
    })
}

/// Applies replica events `events[0..len]` to the ledger. Idempotent: late, repeated and
/// reordered events are absorbed (and counted); events for unknown workers are ignored and
/// counted. Every event's kind is checked first; if one is invalid, none is applied.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently; `events` must point to `len` events.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_apply_ledger_events(
    router: *mut libroute_router,
    events: *const libroute_ledger_event,
    len: usize,
) -> libroute_status {
    boundary(|| {
        // SAFETY: by contract.
        let r = match unsafe { libroute_router::get_mut(router) } {
            Ok(r) => r,
            Err(s) => return s,
        };
        // SAFETY: `events` holds `len` events by contract.
        let Some(events) = (unsafe { slice(events, len) }) else {
            return fail(
                libroute_status::NullArgument,
                "events is NULL with a non-zero length",
            );
        };
        if let Some((i, e)) = events
            .iter()
            .enumerate()
            .find(|(_, e)| e.kind > libroute_ledger_kind::Freed as u32)
        {
            return fail(
                libroute_status::InvalidArgument,
                format_args!("event {i}: kind {} is not a libroute_ledger_kind", e.kind),
            );
        }
        for e in events {
            let event = match e.kind {
                0 => LedgerEvent::Booked {
                    id: e.id,
                    worker: key(e.worker),
                    prefill_tokens: e.prefill_tokens,
                    blocks: e.blocks,
                },
                1 => LedgerEvent::PrefillComplete { id: e.id },
                _ => LedgerEvent::Freed { id: e.id },
            };
            with_router!(&mut r.router, x => x.ledger.apply(&event));
        }
        libroute_status::Ok
    })
}

/// Books request `id` on `worker` (for hosts that select with `libroute_select` and book
/// themselves).
///
/// Errors: `DUPLICATE_REQUEST`, `UNKNOWN_WORKER`, `CAPACITY_EXCEEDED`; nothing changes.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_book(
    router: *mut libroute_router,
    id: u64,
    worker: libroute_worker,
    prefill_tokens: u64,
    blocks: u64,
) -> libroute_status {
    ledger_call(router, |l| {
        l.book_any(id, key(worker), prefill_tokens, blocks)
    })
}

/// `libroute_router_book` at `now_ms` (milliseconds on the host's clock, the one it passes to
/// `libroute_router_prefill_complete_at`): when the request's prefill completes, the time it took
/// calibrates the worker's speed (`LIBROUTE_ROW_HAS_SPEED`, read by the `ttft` policy).
///
/// Errors: as `libroute_router_book`, and `INVALID_ARGUMENT` for a time that is NaN, infinite or
/// negative; nothing changes.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_book_at(
    router: *mut libroute_router,
    id: u64,
    worker: libroute_worker,
    prefill_tokens: u64,
    blocks: u64,
    now_ms: f64,
) -> libroute_status {
    ledger_call(router, |l| {
        l.book_at_any(id, key(worker), prefill_tokens, blocks, now_ms)
    })
}

/// `libroute_router_prefill_complete` at `now_ms`: a request booked at a time (with
/// `libroute_router_book_at` or `libroute_router_route_at`) teaches its worker's speed how long
/// its first token took.
///
/// Errors: as `libroute_router_prefill_complete`, and `INVALID_ARGUMENT` for a time that is NaN,
/// infinite or negative; nothing changes.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_prefill_complete_at(
    router: *mut libroute_router,
    id: u64,
    now_ms: f64,
) -> libroute_status {
    ledger_call(router, |l| l.prefill_complete_at_any(id, now_ms))
}

/// Marks request `id`'s prefill complete.
///
/// Errors: `UNKNOWN_REQUEST` (not booked, freed, or already completed); nothing changes.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_prefill_complete(
    router: *mut libroute_router,
    id: u64,
) -> libroute_status {
    ledger_call(router, |l| l.prefill_complete_any(id))
}

/// Frees request `id` (finished or cancelled).
///
/// Errors: `UNKNOWN_REQUEST` (not booked, or already freed); nothing changes.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_free_request(
    router: *mut libroute_router,
    id: u64,
) -> libroute_status {
    ledger_call(router, |l| l.free_any(id))
}

/// The ledger calls, over any router width.
trait AnyLedger {
    fn book_any(
        &mut self,
        id: u64,
        worker: WorkerKey,
        prefill: u64,
        blocks: u64,
    ) -> Result<(), LedgerError>;
    fn prefill_complete_any(&mut self, id: u64) -> Result<(), LedgerError>;
    fn free_any(&mut self, id: u64) -> Result<(), LedgerError>;
    fn book_at_any(
        &mut self,
        id: u64,
        worker: WorkerKey,
        prefill: u64,
        blocks: u64,
        now_ms: f64,
    ) -> Result<(), LedgerError>;
    fn prefill_complete_at_any(&mut self, id: u64, now_ms: f64) -> Result<(), LedgerError>;
}

impl<const W: usize> AnyLedger for CoreRouter<W> {
    fn book_any(
        &mut self,
        id: u64,
        worker: WorkerKey,
        prefill: u64,
        blocks: u64,
    ) -> Result<(), LedgerError> {
        self.ledger.book(id, worker, prefill, blocks)
    }
    fn prefill_complete_any(&mut self, id: u64) -> Result<(), LedgerError> {
        self.ledger.prefill_complete(id)
    }
    fn free_any(&mut self, id: u64) -> Result<(), LedgerError> {
        self.ledger.free(id)
    }
    fn book_at_any(
        &mut self,
        id: u64,
        worker: WorkerKey,
        prefill: u64,
        blocks: u64,
        now_ms: f64,
    ) -> Result<(), LedgerError> {
        self.ledger.book_at(id, worker, prefill, blocks, now_ms)
    }
    fn prefill_complete_at_any(&mut self, id: u64, now_ms: f64) -> Result<(), LedgerError> {
        self.ledger.prefill_complete_at(id, now_ms)
    }
}

fn ledger_call(
    router: *mut libroute_router,
    f: impl FnOnce(&mut dyn AnyLedger) -> Result<(), LedgerError>,
) -> libroute_status {
    boundary(|| {
        // SAFETY: the exported caller's contract: a live handle not used concurrently.
        let r = match unsafe { libroute_router::get_mut(router) } {
            Ok(r) => r,
            Err(s) => return s,
        };
        let result = with_router!(&mut r.router, x => f(x));
        match result {
            Ok(()) => libroute_status::Ok,
            Err(e) => ledger_error(e),
        }
    })
}

/// Does it all for one request: fills `rows` (the candidates, in the caller's memory) with the
/// index's overlaps for `hashes` (the request's chained block hashes) and the ledger's loads,
/// selects with `policy`, and books request `id` on the chosen worker. In approximate mode (a
/// router with `prediction_slots`), predictions due at `now` expire first and the choice is
/// recorded as a prediction. Writes `*out` on success.
///
/// Errors: as `libroute_select`, plus `DUPLICATE_REQUEST` (checked before anything else),
/// `UNKNOWN_WORKER` (the chosen worker is not registered) and `CAPACITY_EXCEEDED` (the ledger is
/// full). Nothing is booked on any error.
///
/// # Safety
///
/// As `libroute_select` for `policy`, `selector`, `request`, `rows` and `out`; `router` must be a
/// live handle not used concurrently; `hashes` must point to `hashes_len` values (NULL allowed
/// for 0); `rows` is written (the CACHE and LOAD fields).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_route(
    router: *mut libroute_router,
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
    hashes: *const u64,
    hashes_len: usize,
    rows: *mut libroute_row,
    rows_len: usize,
    id: u64,
    now: u64,
    out: *mut libroute_selection,
) -> libroute_status {
    // SAFETY: the caller's contract is `route_call`'s.
    unsafe {
        route_call(
            router,
            policy,
            selector,
            request,
            hashes,
            hashes_len,
            rows,
            rows_len,
            id,
            Clock::Units(now),
            out,
        )
    }
}

/// `libroute_router_route` at `now_ms` (milliseconds on the host's clock, the one it passes to
/// `libroute_router_prefill_complete_at`): the booking is timed, so its prefill completion
/// calibrates the chosen worker's speed, and the rows get that speed (`LIBROUTE_ROW_HAS_SPEED`)
/// when the policy reads it (the `ttft` catalog type). A router with `prediction_slots` records
/// the choice as predicted blocks expiring `prediction_ttl` whole milliseconds later: approximate
/// mode without KV events, or, beside KV events, the blocks of requests routed and not yet
/// computed, which policies that read `LIBROUTE_INPUT_PENDING` credit.
///
/// Errors: as `libroute_router_route`, and `INVALID_ARGUMENT` for a time that is NaN, infinite
/// or negative. Nothing is booked on any error.
///
/// # Safety
///
/// As `libroute_router_route`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_route_at(
    router: *mut libroute_router,
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
    hashes: *const u64,
    hashes_len: usize,
    rows: *mut libroute_row,
    rows_len: usize,
    id: u64,
    now_ms: f64,
    out: *mut libroute_selection,
) -> libroute_status {
    // SAFETY: the caller's contract is `route_call`'s.
    unsafe {
        route_call(
            router,
            policy,
            selector,
            request,
            hashes,
            hashes_len,
            rows,
            rows_len,
            id,
            Clock::Ms(now_ms),
            out,
        )
    }
}

/// The time a route is made at: prediction units (untimed booking) or milliseconds (timed).
#[derive(Clone, Copy)]
enum Clock {
    Units(u64),
    Ms(f64),
}

/// The body of `libroute_router_route` and `libroute_router_route_at`.
///
/// # Safety
///
/// As `libroute_router_route`.
#[allow(clippy::too_many_arguments, reason = "the route's inputs, forwarded")]
unsafe fn route_call(
    router: *mut libroute_router,
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
    hashes: *const u64,
    hashes_len: usize,
    rows: *mut libroute_row,
    rows_len: usize,
    id: u64,
    now: Clock,
    out: *mut libroute_selection,
) -> libroute_status {
    boundary(|| {
        if out.is_null() || request.is_null() {
            return fail(libroute_status::NullArgument, "out or request is NULL");
        }
        // SAFETY: by contract.
        let r = match unsafe { libroute_router::get_mut(router) } {
            Ok(r) => r,
            Err(s) => return s,
        };
        // SAFETY: NULL or live by contract.
        let policy = match unsafe { libroute_policy::get(policy) } {
            Ok(policy) => policy,
            Err(status) => return status,
        };
        // SAFETY: NULL or a live `SelectorBox` not used concurrently, by contract.
        let selector = match unsafe { libroute_selector::get_mut(selector) } {
            Ok(selector) => selector,
            Err(status) => return status,
        };
        // SAFETY: `hashes` holds `hashes_len` values by contract.
        let Some(hashes) = (unsafe { slice(hashes, hashes_len) }) else {
            return fail(
                libroute_status::NullArgument,
                "hashes is NULL with a non-zero length",
            );
        };
        let rows: &mut [Row] = if rows_len == 0 {
            &mut []
        } else if rows.is_null() {
            return fail(
                libroute_status::NullArgument,
                "rows is NULL with a non-zero length",
            );
        } else {
            // SAFETY: `rows` holds `rows_len` rows the caller lets us write; `libroute_row` has
            // `Row`'s layout and every bit pattern is a `Row`.
            unsafe { std::slice::from_raw_parts_mut(rows.cast::<Row>(), rows_len) }
        };
        if let Err(status) = selector.check_rows(rows.len()) {
            return status;
        }
        // SAFETY: non-NULL and valid by contract.
        let request = unsafe { &*request };
        let RouterBox {
            router,
            predictions,
        } = r;
        // SAFETY: the request's arrays are valid for their lengths by contract.
        let converted = unsafe {
            with_core_request(
                request,
                |core_request| with_router!(router, x => route_any(x, predictions.as_mut(), policy, &mut selector.inner, core_request, hashes, rows, id, now)),
            )
        };
        let result = match converted {
            Ok(result) => result,
            Err(status) => return status,
        };
        match result {
            Ok(selection) => {
                // SAFETY: `out` is non-NULL and valid for a write by contract.
                unsafe { out.write(to_c(&selection)) };
                libroute_status::Ok
            }
            Err(RouteError::Select(e)) => select_error(&e),
            Err(RouteError::Ledger(e)) => ledger_error(e),
            Err(e) => fail(libroute_status::InvalidArgument, e),
        }
    })
}

#[allow(clippy::too_many_arguments, reason = "the route's inputs, forwarded")]
fn route_any<const W: usize>(
    router: &mut CoreRouter<W>,
    predictions: Option<&mut CorePredictions>,
    policy: &crate::AbiPolicy,
    selector: &mut AnySelector,
    request: &libroute_core::Request<'_>,
    hashes: &[u64],
    rows: &mut [Row],
    id: u64,
    now: Clock,
) -> Result<libroute_core::Selection, RouteError> {
    let now = match now {
        Clock::Units(now) => now,
        Clock::Ms(now_ms) => {
            return with_selector!(selector, s => match policy {
                crate::AbiPolicy::Default(p) => {
                    router.route_at(predictions, p, s, request, hashes, rows, id, now_ms)
                }
                crate::AbiPolicy::Composed(p) => {
                    router.route_at(predictions, p, s, request, hashes, rows, id, now_ms)
                }
                crate::AbiPolicy::Catalog(p) => {
                    router.route_at(predictions, p, s, request, hashes, rows, id, now_ms)
                }
            });
        }
    };
    macro_rules! go {
        ($s:expr) => {
            match (policy, predictions) {
                (crate::AbiPolicy::Default(p), Some(pr)) => {
                    router.route_predicting(pr, p, $s, request, hashes, rows, id, now)
                }
                (crate::AbiPolicy::Default(p), None) => {
                    router.route(p, $s, request, hashes, rows, id)
                }
                (crate::AbiPolicy::Composed(p), Some(pr)) => {
                    router.route_predicting(pr, p, $s, request, hashes, rows, id, now)
                }
                (crate::AbiPolicy::Composed(p), None) => {
                    router.route(p, $s, request, hashes, rows, id)
                }
                (crate::AbiPolicy::Catalog(p), Some(pr)) => {
                    router.route_predicting(pr, p, $s, request, hashes, rows, id, now)
                }
                (crate::AbiPolicy::Catalog(p), None) => {
                    router.route(p, $s, request, hashes, rows, id)
                }
            }
        };
    }
    with_selector!(selector, s => go!(s))
}

/// Writes the router's counters to `*out`.
///
/// # Safety
///
/// `router` must be a live handle; `out` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_get_counters(
    router: *mut libroute_router,
    out: *mut libroute_router_counters,
) -> libroute_status {
    boundary(|| {
        if out.is_null() {
            return fail(libroute_status::NullArgument, "out is NULL");
        }
        // SAFETY: by contract.
        let r = match unsafe { libroute_router::get_mut(router) } {
            Ok(r) => r,
            Err(s) => return s,
        };
        let (i, l) = with_router!(&mut r.router, x => (x.index.counters(), x.ledger.counters()));
        let c = libroute_router_counters {
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
            predictions: r.predictions.as_ref().map_or(0, Predictions::len),
            forced_prediction_expiries: r
                .predictions
                .as_ref()
                .map_or(0, Predictions::forced_expiries),
        };
        // SAFETY: non-NULL and valid by contract.
        unsafe { out.write(c) };
        libroute_status::Ok
    })
}
