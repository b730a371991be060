//! The host's state through the C ABI: one `libroute_router` handle holding the prefix-overlap
//! index, the load ledger and (for approximate mode) the predictions, with KV and replica events
//! as arrays of `#[repr(C)]` structs, the strict ledger calls, the one-call route, and counters.

//! The router's logic is `host::Router`; these exports turn pointers into its arguments.

use libroute_core::{BatchSummary, KvEvent, LedgerEvent, Tier, WorkerKey};

use crate::handle::{Handle, slice, slice_arg, slice_arg_mut};
use crate::host::{Clock, Router};
use crate::policy::libroute_policy;
use crate::selector::{libroute_selector, selection_args};
use crate::status::{Failure, boundary, libroute_status};
use crate::vocab::{flag, libroute_request, libroute_row, libroute_selection, libroute_worker};

/// The largest table `libroute_router_new` allocates, in slots (2^26).
pub const LIBROUTE_MAX_TABLE_SLOTS: usize = 1 << 26;

/// Sizes and weights of a router; every table's slot count is a power of two (at least 8), and a
/// table holds at most half its slots.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct libroute_router_config {
    /// Slots of the block table (the index holds half as many blocks; beyond that it evicts a
    /// block not stored again since the clock's hand last passed it).
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
    type Target = Router;
    const NAME: &'static str = "router";
}

/// Creates a router from `config`. On success `*out` owns it: free it with
/// `libroute_router_free`. All memory is allocated here; nothing allocates afterwards.
///
/// Errors: `NULL_ARGUMENT`; `INVALID_ARGUMENT` (a slot count that is not a power of two of at
/// least 8, `max_workers` other than 64, 256 or 1024, weights outside [0, 1] or not finite);
/// `CAPACITY_EXCEEDED` (a table above `LIBROUTE_MAX_TABLE_SLOTS`, or larger than the system
/// will allocate). Tables of 2 MiB or more are 2 MiB-aligned and, on Linux, advised into
/// transparent huge pages (`MADV_HUGEPAGE`): a route reads the block table at random places.
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
            return Err(Failure::fixed(
                libroute_status::NullArgument,
                "config or out is NULL",
            ));
        }
        // SAFETY: non-NULL and valid by contract.
        let router = Box::new(Router::new(unsafe { &*config })?);
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(libroute_router::into_handle(router)) };
        Ok(())
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

/// Runs `f` on the router behind `router` inside the boundary.
///
/// # Safety
///
/// `router` must be NULL or a live handle not used concurrently.
unsafe fn with_router(
    router: *mut libroute_router,
    f: impl FnOnce(&mut Router) -> Result<(), Failure>,
) -> libroute_status {
    boundary(|| {
        // SAFETY: the exported caller's contract.
        f(unsafe { libroute_router::get_mut(router) }?)
    })
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
    // SAFETY: the caller's contract.
    unsafe { with_router(router, |r| r.add_worker(worker)) }
}

/// Forgets a worker: its cached blocks leave the index, its load the ledger, and its row the
/// router's fleet.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_remove_worker(
    router: *mut libroute_router,
    worker: libroute_worker,
) -> libroute_status {
    // SAFETY: the caller's contract.
    unsafe {
        with_router(router, |r| {
            r.remove_worker(worker);
            Ok(())
        })
    }
}

/// Adds `worker` to the router's fleet, the candidates `libroute_router_route_fleet` routes
/// over, with `taints` (bit `i` for taint index `i`), not overloaded. Register it with the ledger
/// too (`libroute_router_add_worker`), for it to be booked.
///
/// Errors: `NULL_ARGUMENT`, `DUPLICATE_WORKER` (in the fleet already), `CAPACITY_EXCEEDED`
/// (`max_workers` in it).
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_fleet_add(
    router: *mut libroute_router,
    worker: libroute_worker,
    taints: u64,
) -> libroute_status {
    // SAFETY: the caller's contract.
    unsafe { with_router(router, |r| r.fleet_add(worker, taints)) }
}

/// Takes `worker` out of the router's fleet; its cached blocks and load stay (see
/// `libroute_router_remove_worker`, which takes it out of the fleet too).
///
/// Errors: `NULL_ARGUMENT`, `UNKNOWN_WORKER` (not in the fleet).
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_fleet_remove(
    router: *mut libroute_router,
    worker: libroute_worker,
) -> libroute_status {
    // SAFETY: the caller's contract.
    unsafe { with_router(router, |r| r.fleet_remove(worker)) }
}

/// Replaces the taints of `worker`'s row in the router's fleet.
///
/// Errors: `NULL_ARGUMENT`, `UNKNOWN_WORKER` (not in the fleet).
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_fleet_set_taints(
    router: *mut libroute_router,
    worker: libroute_worker,
    taints: u64,
) -> libroute_status {
    // SAFETY: the caller's contract.
    unsafe { with_router(router, |r| r.fleet_set_taints(worker, taints)) }
}

/// Marks `worker`'s row in the router's fleet overloaded (`overloaded` 1: skipped with the
/// overload reason) or not (0).
///
/// Errors: `NULL_ARGUMENT`, `INVALID_ARGUMENT` (`overloaded` other than 0 or 1),
/// `UNKNOWN_WORKER` (not in the fleet).
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_fleet_set_overloaded(
    router: *mut libroute_router,
    worker: libroute_worker,
    overloaded: u8,
) -> libroute_status {
    // SAFETY: the caller's contract.
    unsafe {
        with_router(router, |r| {
            r.fleet_set_overloaded(worker, flag(overloaded, "overloaded")?)
        })
    }
}

/// Copies the router's fleet's rows (sorted by worker, with the inputs the last fleet route
/// read) to `out` and their number to `*written`. `BUFFER_TOO_SMALL` when `out_capacity` is
/// below it (`*written` says how many rows there are; `out` may then be NULL, and nothing is
/// copied).
///
/// # Safety
///
/// `router` must be a live handle not used concurrently; `out` must point to `out_capacity`
/// writable rows (or be NULL with `out_capacity` 0); `written` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_fleet_rows(
    router: *mut libroute_router,
    out: *mut libroute_row,
    out_capacity: usize,
    written: *mut usize,
) -> libroute_status {
    boundary(|| {
        non_null!(written, "written");
        // SAFETY: NULL or a live handle, by contract.
        let rows = unsafe { libroute_router::get(router) }?.fleet_rows();
        // SAFETY: non-NULL and valid for a write by contract.
        unsafe { written.write(rows.len()) };
        if out_capacity < rows.len() {
            return Err(Failure::new(
                libroute_status::BufferTooSmall,
                format_args!(
                    "the fleet has {} rows; out_capacity is {out_capacity}",
                    rows.len()
                ),
            ));
        }
        // SAFETY: `out` holds `out_capacity` writable rows by contract.
        let out = unsafe { slice_arg_mut(out, out_capacity, "out") }?;
        out[..rows.len()].copy_from_slice(rows);
        Ok(())
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
        // SAFETY: NULL or a live handle not used concurrently, by contract.
        let r = unsafe { libroute_router::get_mut(router) }?;
        // SAFETY: `events` holds `len` events by contract.
        let events = unsafe { slice_arg(events, len, "events") }?;
        for (i, e) in events.iter().enumerate() {
            if e.kind > libroute_kv_kind::WorkerRemoved as u32 {
                return Err(Failure::new(
                    libroute_status::InvalidArgument,
                    format_args!("event {i}: kind {} is not a libroute_kv_kind", e.kind),
                ));
            }
            if e.kind <= libroute_kv_kind::Removed as u32 && Tier::from_u32(e.tier).is_none() {
                return Err(Failure::new(
                    libroute_status::InvalidArgument,
                    format_args!("event {i}: tier {} is not 0, 1 or 2", e.tier),
                ));
            }
            if e.hashes.is_null() && e.hashes_len > 0 {
                return Err(Failure::new(
                    libroute_status::NullArgument,
                    format_args!("event {i}: hashes is NULL with a non-zero length"),
                ));
            }
        }
        for e in events {
            // SAFETY: checked non-NULL (or empty) above; valid for its length by contract.
            let hashes = unsafe { slice(e.hashes, e.hashes_len) }.unwrap_or(&[]);
            let worker = WorkerKey::new(e.worker.worker_id, e.worker.dp_rank);
            let tier = Tier::from_u32(e.tier).unwrap_or(Tier::Device);
            r.apply_kv_event(&match e.kind {
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
            });
        }
        Ok(())
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
        // SAFETY: NULL or a live handle not used concurrently, by contract.
        let r = unsafe { libroute_router::get_mut(router) }?;
        // SAFETY: `events` holds `len` events by contract.
        let events = unsafe { slice_arg(events, len, "events") }?;
        if let Some((i, e)) = events
            .iter()
            .enumerate()
            .find(|(_, e)| e.kind > libroute_ledger_kind::Freed as u32)
        {
            return Err(Failure::new(
                libroute_status::InvalidArgument,
                format_args!("event {i}: kind {} is not a libroute_ledger_kind", e.kind),
            ));
        }
        for e in events {
            r.apply_ledger_event(&match e.kind {
                0 => LedgerEvent::Booked {
                    id: e.id,
                    worker: WorkerKey::new(e.worker.worker_id, e.worker.dp_rank),
                    prefill_tokens: e.prefill_tokens,
                    blocks: e.blocks,
                },
                1 => LedgerEvent::PrefillComplete { id: e.id },
                _ => LedgerEvent::Freed { id: e.id },
            });
        }
        Ok(())
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
    // SAFETY: the caller's contract.
    unsafe { with_router(router, |r| r.book(id, worker, prefill_tokens, blocks, None)) }
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
    // SAFETY: the caller's contract.
    unsafe {
        with_router(router, |r| {
            r.book(id, worker, prefill_tokens, blocks, Some(now_ms))
        })
    }
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
    // SAFETY: the caller's contract.
    unsafe { with_router(router, |r| r.prefill_complete(id, Some(now_ms))) }
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
    // SAFETY: the caller's contract.
    unsafe { with_router(router, |r| r.prefill_complete(id, None)) }
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
    // SAFETY: the caller's contract.
    unsafe { with_router(router, |r| r.free_request(id)) }
}

/// Does it all for one request: fills `rows` (the candidates, in the caller's memory) with the
/// index's overlaps for `hashes` (the request's chained block hashes) and the ledger's loads,
/// selects with `policy`, and books request `id` on the chosen worker. In approximate mode (a
/// router with `prediction_slots`), predictions due at `now` expire first and the choice is
/// recorded as a prediction. Writes `*out` on success. The router remembers where each row's
/// worker was found in its tables, row by row (up to `max_workers` rows), and looks there first
/// next time: passing the same workers in the same order each call saves hashing them.
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
            Some((rows, rows_len)),
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
            Some((rows, rows_len)),
            id,
            Clock::Ms(now_ms),
            out,
        )
    }
}

/// `libroute_router_route` over the router's fleet (`libroute_router_fleet_add`) instead of rows
/// in the caller's memory: each worker is looked for where it was found last time, and only the
/// rows of workers whose load or index bit changed since the last fleet route are read again, so
/// a host that routes over one fleet pays less than for rows it passes each call. The
/// selection's `row` is a position in the fleet's rows (`libroute_router_fleet_rows`, sorted by
/// worker).
///
/// Errors: as `libroute_router_route` (`NO_ENDPOINTS` for an empty fleet). Nothing is booked on
/// any error.
///
/// # Safety
///
/// As `libroute_router_route`, without rows.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_route_fleet(
    router: *mut libroute_router,
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
    hashes: *const u64,
    hashes_len: usize,
    id: u64,
    now: u64,
    out: *mut libroute_selection,
) -> libroute_status {
    // SAFETY: the caller's contract is `route_call`'s, without rows.
    unsafe {
        route_call(
            router,
            policy,
            selector,
            request,
            hashes,
            hashes_len,
            None,
            id,
            Clock::Units(now),
            out,
        )
    }
}

/// `libroute_router_route_fleet` at `now_ms`, as `libroute_router_route_at` is
/// `libroute_router_route` at `now_ms`.
///
/// Errors: as `libroute_router_route_at`.
///
/// # Safety
///
/// As `libroute_router_route_fleet`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_route_fleet_at(
    router: *mut libroute_router,
    policy: *const libroute_policy,
    selector: *mut libroute_selector,
    request: *const libroute_request,
    hashes: *const u64,
    hashes_len: usize,
    id: u64,
    now_ms: f64,
    out: *mut libroute_selection,
) -> libroute_status {
    // SAFETY: the caller's contract is `route_call`'s, without rows.
    unsafe {
        route_call(
            router,
            policy,
            selector,
            request,
            hashes,
            hashes_len,
            None,
            id,
            Clock::Ms(now_ms),
            out,
        )
    }
}

/// The body of `libroute_router_route` and `libroute_router_route_at` (over `rows`), and of
/// `libroute_router_route_fleet` and `_route_fleet_at` (over the fleet, `rows` `None`).
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
    rows: Option<(*mut libroute_row, usize)>,
    id: u64,
    now: Clock,
    out: *mut libroute_selection,
) -> libroute_status {
    boundary(|| {
        if out.is_null() || request.is_null() {
            return Err(Failure::fixed(
                libroute_status::NullArgument,
                "out or request is NULL",
            ));
        }
        // SAFETY: by contract.
        let r = unsafe { libroute_router::get_mut(router) }?;
        // SAFETY: forwarded under this function's contract.
        let (policy, selector, request) = unsafe { selection_args(policy, selector, request) }?;
        // SAFETY: `hashes` holds `hashes_len` values by contract.
        let hashes = unsafe { slice_arg(hashes, hashes_len, "hashes") }?;
        let selection = match rows {
            Some((rows, rows_len)) => {
                // SAFETY: `rows` holds `rows_len` rows the caller lets us write, by contract.
                let rows = unsafe { slice_arg_mut(rows, rows_len, "rows") }?;
                r.route(policy, selector, &request, hashes, rows, id, now)?
            }
            None => r.route_fleet(policy, selector, &request, hashes, id, now)?,
        };
        // SAFETY: `out` is non-NULL and valid for a write by contract.
        unsafe { out.write(selection) };
        Ok(())
    })
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
        non_null!(out, "out");
        // SAFETY: by contract.
        let counters = unsafe { libroute_router::get(router) }?.counters();
        // SAFETY: non-NULL and valid by contract.
        unsafe { out.write(counters) };
        Ok(())
    })
}

/// Writes the router's snapshot to `out` and its size in bytes to `*written`: its index (blocks
/// in their table's order, the workers holding each per tier, and the eviction clock's state) and its ledger
/// (bookings, loads, recent request ids, speeds), in libroute's versioned little-endian format
/// (`libroute_core::snapshot`); not approximate mode's predictions. A router given the bytes
/// with `libroute_router_restore` holds the same state, so a restarted host resumes where the
/// snapshot was taken. `BUFFER_TOO_SMALL` when `out_capacity` is below the size (`*written`
/// says how many bytes are needed; `out` may then be NULL); `INVALID_ARGUMENT` when the router
/// reads engines' KV batches (`libroute_router_read_kv_batches`): their map from engine to router
/// block hashes is not in a snapshot.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently; `out` must point to `out_capacity`
/// writable bytes (or be NULL with `out_capacity` 0); `written` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_snapshot(
    router: *mut libroute_router,
    out: *mut u8,
    out_capacity: usize,
    written: *mut usize,
) -> libroute_status {
    boundary(|| {
        non_null!(written, "written");
        // SAFETY: NULL or a live handle, by contract.
        let r = unsafe { libroute_router::get(router) }?;
        // SAFETY: `out` holds `out_capacity` writable bytes by contract.
        let out = unsafe { slice_arg_mut(out, out_capacity, "out") }?;
        let result = r.snapshot(out);
        let n = match &result {
            Ok(n) => *n,
            Err((needed, _)) => *needed,
        };
        // SAFETY: non-NULL and valid for a write by contract.
        unsafe { written.write(n) };
        result.map(drop).map_err(|(_, failure)| failure)
    })
}

/// Replaces the router's index and ledger with those in the snapshot `bytes[0..len]`
/// (`libroute_router_snapshot` of a router with the same `max_workers`), built in new tables of
/// this router's sizes; approximate mode's predictions are forgotten. Workers added since the
/// snapshot are not kept: add them again. A truncated or damaged snapshot, one of another format
/// version or `max_workers`, or one holding more than this router's tables do, is
/// `INVALID_ARGUMENT` with a detail naming the byte offset, and changes nothing; so is a router
/// that reads engines' KV batches. New tables the system will not allocate are
/// `CAPACITY_EXCEEDED`, and change nothing either.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently; `bytes` must point to `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_restore(
    router: *mut libroute_router,
    bytes: *const u8,
    len: usize,
) -> libroute_status {
    boundary(|| {
        // SAFETY: NULL or a live handle not used concurrently, by contract.
        let r = unsafe { libroute_router::get_mut(router) }?;
        // SAFETY: `bytes` holds `len` bytes by contract.
        let bytes = unsafe { slice_arg(bytes, len, "bytes") }?;
        r.restore(bytes)
    })
}

/// What one engine KV batch did (`libroute_router_apply_kv_batch`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct libroute_kv_batch_summary {
    /// The worker the events were applied to: the one given, with the data-parallel rank the
    /// batch names, if any.
    pub worker: libroute_worker,
    /// Events in the batch.
    pub events: usize,
    /// Blocks stored into the index.
    pub stored_blocks: usize,
    /// Blocks removed from the index.
    pub removed_blocks: usize,
    /// Stored blocks skipped because their parent block was never seen (their router hashes
    /// depend on the prefix before them).
    pub orphaned_blocks: usize,
    /// Removed blocks that were never stored, ignored.
    pub unknown_removals: usize,
    /// `AllBlocksCleared` events.
    pub clears: usize,
}

impl From<BatchSummary> for libroute_kv_batch_summary {
    fn from(s: BatchSummary) -> Self {
        libroute_kv_batch_summary {
            worker: s.worker.into(),
            events: s.events,
            stored_blocks: s.stored_blocks,
            removed_blocks: s.removed_blocks,
            orphaned_blocks: s.orphaned_blocks,
            unknown_removals: s.unknown_removals,
            clears: s.clears,
        }
    }
}

/// Turns on `libroute_router_apply_kv_batch`: engines' stored blocks must have `block_size`
/// tokens (the size requests are hashed with, `libroute_block_hashes`), and the map from engine
/// block hashes to the router's holds `engine_hash_slots / 2` blocks (a power of two of at least
/// 8; size it like `block_slots`). Called again, it starts over with an empty map. Allocates the
/// map: `CAPACITY_EXCEEDED` above `LIBROUTE_MAX_TABLE_SLOTS` or when the system will not
/// allocate it.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_read_kv_batches(
    router: *mut libroute_router,
    block_size: u32,
    engine_hash_slots: usize,
) -> libroute_status {
    boundary(|| {
        // SAFETY: NULL or a live handle not used concurrently, by contract.
        let r = unsafe { libroute_router::get_mut(router) }?;
        r.read_kv_batches(block_size, engine_hash_slots)
    })
}

/// Applies one raw KV-event payload, as vLLM and SGLang publish it (the third frame of their ZMQ
/// messages: a msgpack `KVEventBatch`), to the index as `worker`'s events. The block hashes of
/// stored blocks are recomputed from their token ids (`libroute_block_hashes`), so they match the
/// hashes requests are routed with. The whole payload is checked first: a malformed, truncated
/// or unknown payload is `INVALID_ARGUMENT` with a detail naming the byte offset, and changes
/// nothing. `summary` may be NULL.
///
/// # Safety
///
/// `router` must be a live handle not used concurrently; `payload` must point to `len` bytes;
/// `summary`, when not NULL, valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_router_apply_kv_batch(
    router: *mut libroute_router,
    worker: libroute_worker,
    payload: *const u8,
    len: usize,
    summary: *mut libroute_kv_batch_summary,
) -> libroute_status {
    boundary(|| {
        // SAFETY: NULL or a live handle not used concurrently, by contract.
        let r = unsafe { libroute_router::get_mut(router) }?;
        // SAFETY: `payload` holds `len` bytes by contract.
        let payload = unsafe { slice_arg(payload, len, "payload") }?;
        let s = r.apply_kv_batch(worker, payload)?;
        if !summary.is_null() {
            // SAFETY: non-NULL and valid for a write by contract.
            unsafe { summary.write(s) };
        }
        Ok(())
    })
}

/// Writes the chained block hashes of `tokens[0..tokens_len]` to `out` (one per complete block of
/// `block_size` tokens; a trailing partial block is not hashed) and their count to `*written`:
/// NVIDIA Dynamo's router hashes (xxh3-64, seed 1337, salted by the LoRA adapter's name
/// `lora_name[0..lora_len]`; NULL or empty for the base model), the hashes the index is keyed by.
/// `BUFFER_TOO_SMALL` when `out_capacity` is below the block count (`*written` says how many
/// are needed; nothing else is written).
///
/// # Safety
///
/// `tokens` must point to `tokens_len` token ids, `lora_name` to `lora_len` bytes (or be NULL),
/// `out` to `out_capacity` writable hashes; `written` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn libroute_block_hashes(
    tokens: *const u32,
    tokens_len: usize,
    block_size: u32,
    lora_name: *const u8,
    lora_len: usize,
    out: *mut u64,
    out_capacity: usize,
    written: *mut usize,
) -> libroute_status {
    boundary(|| {
        non_null!(written, "written");
        // SAFETY: by contract.
        let tokens = unsafe { slice_arg(tokens, tokens_len, "tokens") }?;
        // SAFETY: by contract.
        let lora = unsafe { slice_arg(lora_name, lora_len, "lora_name") }?;
        // SAFETY: by contract.
        let out = unsafe { slice_arg_mut(out, out_capacity, "out") }?;
        let result = crate::host::block_hashes(tokens, block_size, lora, out);
        let n = match &result {
            Ok(n) => *n,
            Err((needed, _)) => *needed,
        };
        // SAFETY: non-NULL and valid for a write by contract.
        unsafe { written.write(n) };
        result.map(drop).map_err(|(_, failure)| failure)
    })
}
