//! The load ledger: which requests are booked on which worker, and each worker's active prefill
//! tokens, decode blocks and requests (the LOAD inputs of spec section 2).
//!
//! Two ways in:
//!
//! - **The router's own calls** ([`Ledger::book`], [`Ledger::prefill_complete`], [`Ledger::free`],
//!   [`Ledger::cancel`]) are strict: a duplicate id, an unknown id, a second prefill completion
//!   or a double free is an error that changes nothing.
//! - **Events relayed from other router replicas** ([`Ledger::apply`]) may arrive late, twice or
//!   out of order; applying them is idempotent. A completion or free that arrives before its
//!   booking is remembered (as a bounded tombstone), so the late booking is applied as already
//!   completed or not at all. Events for workers this ledger does not know are ignored and
//!   counted.
//!
//! Storage is given at construction, as for the index: requests and workers in power-of-two
//! slot tables (half of each usable), tombstones in a ring. When the tombstone ring is full the oldest
//! tombstone is forgotten (counted); a booking that arrives after its tombstone was forgotten
//! would be applied.

use core::fmt;

use crate::host::calibrate::{FLEET_WINDOW, Fit, FleetSpeed, Pace, WINDOW, worker_speed};
use crate::host::snapshot::{SnapshotError, SnapshotProblem, SnapshotReader, SnapshotWriter};
use crate::host::table::{Slot, StorageError, Table};
use crate::host::version::{Version, new_instance};
use crate::vocab::{Load, Row, RowFlags, Speed, WorkerKey};

/// How many of the latest load changes a ledger remembers by worker, for a
/// [`Fleet`](crate::Fleet) to refresh only those rows; a fleet further behind reads every load.
pub(crate) const CHANGE_LOG: usize = 64;

const BOOKED: u8 = 1;
const PREFILL_DONE: u8 = 2;
const FREED: u8 = 4;

/// A request the ledger holds: booked, or a tombstone of an event that came first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestEntry {
    worker: WorkerKey,
    prefill_tokens: u64,
    blocks: u64,
    state: u8,
    /// When it was booked, ms, as `f64` bits; 0 (the bits of `+0.0`) when the [`TIMED`] bit is
    /// unset.
    booked_at: u64,
    /// Prefill tokens on its worker right after booking (the queued ones and its own).
    work: u64,
    /// Active requests on its worker right after booking (itself included).
    decode: u64,
}

/// A state bit: the booking has a time, so its prefill completion can calibrate the worker.
const TIMED: u8 = 8;

/// A worker's active load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkerLoad {
    /// Prefill tokens of booked requests whose prefill has not completed.
    pub active_prefill_tokens: u64,
    /// Blocks of booked requests.
    pub active_decode_blocks: u64,
    /// Booked requests.
    pub active_requests: u64,
}

/// What the ledger keeps per worker: its load, and its first-token pace against the fleet's
/// ([`crate::calibrate`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WorkerState {
    load: WorkerLoad,
    pace: Pace,
}

/// A slot of the request table's storage.
pub type RequestSlot = Slot<u64, RequestEntry>;
/// A slot of the worker table's storage.
pub type LoadSlot = Slot<WorkerKey, WorkerState>;

/// What the ledger has done, for hosts to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LedgerCounters {
    /// Requests booked now.
    pub active_requests: usize,
    /// Workers known now.
    pub workers: usize,
    /// Replica events that repeated one already applied, ignored.
    pub duplicate_events: u64,
    /// Replica events that arrived after the event that supersedes them (a booking after its free).
    pub late_events: u64,
    /// Replica events for workers this ledger does not know, ignored.
    pub unknown_worker_events: u64,
    /// Tombstones forgotten because the ring was full.
    pub forgotten_tombstones: u64,
    /// Replica events dropped because the request table was full.
    pub dropped_events: u64,
}

/// Why the ledger refused a call; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LedgerError {
    /// The request id is already booked (or remembered).
    DuplicateId(u64),
    /// No booked request has this id (never booked, or already freed).
    UnknownId(u64),
    /// The request's prefill was already completed.
    PrefillAlreadyComplete(u64),
    /// The worker is not registered with [`Ledger::add_worker`].
    UnknownWorker(WorkerKey),
    /// A time that is NaN, infinite or negative.
    InvalidTime,
    /// The request table is full.
    RequestsFull {
        /// How many requests it holds.
        capacity: usize,
    },
    /// The worker table is full.
    WorkersFull {
        /// How many workers it holds.
        capacity: usize,
    },
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerError::DuplicateId(id) => write!(f, "request {id} is already booked"),
            LedgerError::UnknownId(id) => write!(
                f,
                "request {id} is not booked (never booked, or already freed)"
            ),
            LedgerError::PrefillAlreadyComplete(id) => {
                write!(f, "request {id} already completed its prefill")
            }
            LedgerError::UnknownWorker(w) => write!(f, "worker {w} is not registered"),
            LedgerError::InvalidTime => f.write_str("a time must be finite and >= 0 (ms)"),
            LedgerError::RequestsFull { capacity } => {
                write!(f, "the ledger holds at most {capacity} requests")
            }
            LedgerError::WorkersFull { capacity } => {
                write!(f, "the ledger holds at most {capacity} workers")
            }
        }
    }
}

impl core::error::Error for LedgerError {}

/// An event relayed from another router replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerEvent {
    /// A replica booked a request.
    Booked {
        /// Globally unique request id.
        id: u64,
        /// Where.
        worker: WorkerKey,
        /// Prefill tokens it books.
        prefill_tokens: u64,
        /// Blocks it books.
        blocks: u64,
    },
    /// The request's prefill completed.
    PrefillComplete {
        /// The request.
        id: u64,
    },
    /// The request finished or was cancelled.
    Freed {
        /// The request.
        id: u64,
    },
}

/// The load ledger over caller storage: `R` request slots, `L` worker slots, `T` tombstone ring.
///
/// # Examples
///
/// ```
/// use libroute_core::{Ledger, LedgerError, LoadSlot, RequestSlot, Row, WorkerKey};
///
/// let mut ledger = Ledger::new([RequestSlot::empty(); 64], [LoadSlot::empty(); 16], [0u64; 16]).unwrap();
/// let w = WorkerKey::new(3, 0);
/// ledger.add_worker(w).unwrap();
/// ledger.book(7, w, 512, 40).unwrap();
/// assert_eq!(ledger.book(7, w, 1, 1), Err(LedgerError::DuplicateId(7)));
/// assert_eq!(ledger.load(w).unwrap().active_prefill_tokens, 512);
/// ledger.prefill_complete(7).unwrap();
/// ledger.free(7).unwrap();
/// assert_eq!(ledger.free(7), Err(LedgerError::UnknownId(7)));
/// assert_eq!(ledger.load(w).unwrap().active_requests, 0);
/// ```
pub struct Ledger<R, L, T> {
    requests: Table<u64, RequestEntry, R>,
    workers: Table<WorkerKey, WorkerState, L>,
    tombstones: T,
    tomb_head: usize,
    tomb_len: usize,
    /// Requests whose reservation is on a worker's load now.
    active: usize,
    counters: LedgerCounters,
    /// The first-token fit of every worker together.
    fleet: Fit,
    /// Every worker's observations against the fleet's predictions together.
    fleet_pace: Pace,
    /// This ledger's instance number (see [`crate::host::version`]).
    instance: usize,
    /// How many times a worker's load changed, or a worker came or went.
    changes: u64,
    /// The workers of the latest [`CHANGE_LOG`] changes, change `c` at `c % CHANGE_LOG`.
    changed: [WorkerKey; CHANGE_LOG],
}

impl<R, L, T> fmt::Debug for Ledger<R, L, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ledger")
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl<R, L, T> Ledger<R, L, T>
where
    R: AsRef<[RequestSlot]> + AsMut<[RequestSlot]>,
    L: AsRef<[LoadSlot]> + AsMut<[LoadSlot]>,
    T: AsRef<[u64]> + AsMut<[u64]>,
{
    /// An empty ledger over `requests` and `workers` (power-of-two slot counts of at least 8;
    /// half usable) and a ring of `tombstones` (any length; 0 disables tombstones).
    ///
    /// # Errors
    ///
    /// [`StorageError`] for a slot count that does not fit.
    pub fn new(requests: R, workers: L, tombstones: T) -> Result<Self, StorageError> {
        Ok(Self {
            requests: Table::new(requests)?,
            workers: Table::new(workers)?,
            tombstones,
            tomb_head: 0,
            tomb_len: 0,
            active: 0,
            counters: LedgerCounters::default(),
            fleet: Fit::default(),
            fleet_pace: Pace::default(),
            instance: new_instance(),
            changes: 0,
            changed: [WorkerKey::default(); CHANGE_LOG],
        })
    }

    /// This ledger's state, for a fleet to tell later what changed since.
    pub(crate) fn version(&self) -> Version {
        Version {
            instance: self.instance,
            changes: self.changes,
        }
    }

    /// The workers whose load changed (or that came or went) since state `seen`, the oldest
    /// first and possibly repeated; `None` when `seen` is another ledger's or further back than
    /// the ledger remembers.
    pub(crate) fn changed_since(&self, seen: Version) -> Option<impl Iterator<Item = WorkerKey>> {
        let behind = self.changes.checked_sub(seen.changes);
        if !seen.same_instance(self.version()) || behind.is_none_or(|n| n > CHANGE_LOG as u64) {
            return None;
        }
        #[allow(
            clippy::cast_possible_truncation,
            reason = "reduced modulo CHANGE_LOG, a small constant"
        )]
        Some((seen.changes..self.changes).map(|c| self.changed[(c % CHANGE_LOG as u64) as usize]))
    }

    /// Records that `worker`'s load changed, or that it came or went.
    fn note(&mut self, worker: WorkerKey) {
        #[allow(
            clippy::cast_possible_truncation,
            reason = "reduced modulo CHANGE_LOG, a small constant"
        )]
        let at = (self.changes % CHANGE_LOG as u64) as usize;
        self.changed[at] = worker;
        self.changes += 1;
    }

    /// The counters, with the current request and worker counts.
    #[must_use]
    pub fn counters(&self) -> LedgerCounters {
        LedgerCounters {
            active_requests: self.active,
            workers: self.workers.len(),
            ..self.counters
        }
    }

    /// Registers a worker (no-op if known).
    ///
    /// # Errors
    ///
    /// [`LedgerError::WorkersFull`].
    pub fn add_worker(&mut self, worker: WorkerKey) -> Result<(), LedgerError> {
        if self.workers.find(worker).is_none() {
            self.workers
                .insert(worker, WorkerState::default())
                .map_err(|_| LedgerError::WorkersFull {
                    capacity: self.workers.capacity(),
                })?;
            self.note(worker);
        }
        Ok(())
    }

    /// Forgets a worker and its load; its booked requests stay until freed (freeing them then
    /// changes no load). Unknown workers are ignored.
    pub fn remove_worker(&mut self, worker: WorkerKey) {
        if let Some(i) = self.workers.find(worker) {
            self.workers.remove_at(i);
            self.note(worker);
        }
    }

    /// The load of `worker`, `None` if unknown.
    #[must_use]
    pub fn load(&self, worker: WorkerKey) -> Option<WorkerLoad> {
        self.workers
            .find(worker)
            .map(|i| self.workers.value(i).load)
    }

    /// The first-token speed of `worker` learned from timed bookings ([`Ledger::book_at`],
    /// [`Ledger::prefill_complete_at`]): the fleet's fit times the worker's pace (see
    /// [`crate::calibrate`]). `None` for an unknown worker, and until the fleet has
    /// [`crate::host::calibrate::MIN_OBSERVATIONS`].
    ///
    /// # Examples
    ///
    /// ```
    /// use libroute_core::{Ledger, LoadSlot, RequestSlot, WorkerKey};
    ///
    /// let mut ledger = Ledger::new(vec![RequestSlot::empty(); 64], vec![LoadSlot::empty(); 16], vec![0u64; 8]).unwrap();
    /// let w = WorkerKey::new(1, 0);
    /// ledger.add_worker(w).unwrap();
    /// // Ten requests, one at a time: each takes 10 ms plus 0.05 ms per prompt token.
    /// for id in 0..10u64 {
    ///     let tokens = 1000 + 100 * id;
    ///     let t0 = 1000.0 * id as f64;
    ///     ledger.book_at(id, w, tokens, 8, t0).unwrap();
    ///     ledger.prefill_complete_at(id, t0 + 10.0 + 0.05 * tokens as f64).unwrap();
    ///     ledger.free(id).unwrap();
    /// }
    /// // It predicts a 2,000-token prompt on the idle worker to take 10 + 0.05 * 2000 ms.
    /// let predicted = ledger.speed(w).unwrap().first_token_ms(2000, 1);
    /// assert!((predicted - 110.0).abs() < 1.0, "{predicted}");
    /// ```
    #[must_use]
    pub fn speed(&self, worker: WorkerKey) -> Option<Speed> {
        let i = self.workers.find(worker)?;
        worker_speed(&self.fleet, &self.fleet_pace, &self.workers.value(i).pace)
    }

    /// Whether `id` is booked or remembered (a duplicate for [`Ledger::book`]).
    #[must_use]
    pub fn contains(&self, id: u64) -> bool {
        self.requests.find(id).is_some()
    }

    /// The booking of `id` as the [`LedgerEvent::Booked`] another replica applies to hold the
    /// same reservation; `None` when `id` is not booked now (unknown, freed, or only a
    /// tombstone). A host relaying its bookings reads it right after [`Ledger::book`].
    #[must_use]
    pub fn booking(&self, id: u64) -> Option<LedgerEvent> {
        let e = self.requests.value(self.requests.find(id)?);
        (e.state & BOOKED != 0 && e.state & FREED == 0).then_some(LedgerEvent::Booked {
            id,
            worker: e.worker,
            prefill_tokens: e.prefill_tokens,
            blocks: e.blocks,
        })
    }

    /// Writes each row's LOAD inputs from the ledger; rows of unknown workers get no projection.
    pub fn fill_rows(&self, rows: &mut [Row]) {
        for row in rows {
            self.fill_row(row);
        }
    }

    /// [`Ledger::fill_rows`] for one row.
    #[inline]
    pub(crate) fn fill_row(&self, row: &mut Row) {
        self.write_load(self.workers.find(row.worker), row);
    }

    /// [`Ledger::fill_row`] with the worker's slot tried first at `*hint`, if any, which is
    /// updated (see `Table::find_hinted`); returns the slot, for [`Ledger::fill_speed_at`].
    #[allow(
        clippy::inline_always,
        reason = "called from the placed and the fleet loops, plain inline left it a call in both: 0.9 us slower at 1,024 rows"
    )]
    #[inline(always)]
    pub(crate) fn fill_row_hinted(&self, row: &mut Row, hint: Option<&mut u32>) -> Option<usize> {
        let slot = self.workers.find_hinted(row.worker, hint);
        self.write_load(slot, row);
        slot
    }

    /// What every worker's speed shares, for a pass of [`Ledger::fill_speed_at`]: `None` while
    /// the fleet has no calibration.
    pub(crate) fn fleet_speed(&self) -> Option<FleetSpeed> {
        FleetSpeed::new(&self.fleet, &self.fleet_pace)
    }

    /// Writes `row`'s SPEED inputs from the worker at `slot` and the fleet's part `fleet`
    /// ([`Ledger::fleet_speed`]; none, and zeros, when either is `None`).
    pub(crate) fn fill_speed_at(
        &self,
        fleet: Option<&FleetSpeed>,
        slot: Option<usize>,
        row: &mut Row,
    ) {
        let speed = fleet
            .zip(slot)
            .and_then(|(fleet, i)| fleet.worker(&self.workers.value(i).pace));
        let (flags, speed) = match speed {
            Some(speed) => (row.flags.0 | RowFlags::HAS_SPEED.0, speed),
            None => (row.flags.0 & !RowFlags::HAS_SPEED.0, Speed::default()),
        };
        *row = Row {
            flags: RowFlags(flags),
            ..row.with_speed(speed)
        };
    }

    #[inline]
    fn write_load(&self, slot: Option<usize>, row: &mut Row) {
        match slot.map(|i| self.workers.value(i).load) {
            Some(load) => {
                *row = row.with_load(Load {
                    available: true,
                    active_prefill_tokens: load.active_prefill_tokens,
                    active_decode_blocks: load.active_decode_blocks,
                    active_requests: load.active_requests,
                });
            }
            None => row.flags = RowFlags(row.flags.0 & !RowFlags::HAS_LOAD.0),
        }
    }

    /// Writes each row's SPEED inputs from the ledger's calibration ([`Ledger::speed`]); rows
    /// of workers without one get none.
    pub fn fill_speeds(&self, rows: &mut [Row]) {
        let fleet = self.fleet_speed();
        for row in rows {
            self.fill_speed_at(fleet.as_ref(), self.workers.find(row.worker), row);
        }
    }

    fn adjust(&mut self, worker: WorkerKey, entry: &RequestEntry, sign: Sign) {
        match sign {
            Sign::Add => self.active += 1,
            Sign::Sub => self.active = self.active.saturating_sub(1),
        }
        let Some(i) = self.workers.find(worker) else {
            return;
        };
        self.note(worker);
        let load = &mut self.workers.value_mut(i).load;
        let prefill = if entry.state & PREFILL_DONE == 0 {
            entry.prefill_tokens
        } else {
            0
        };
        match sign {
            Sign::Add => {
                load.active_prefill_tokens = load.active_prefill_tokens.saturating_add(prefill);
                load.active_decode_blocks = load.active_decode_blocks.saturating_add(entry.blocks);
                load.active_requests += 1;
            }
            Sign::Sub => {
                load.active_prefill_tokens = load.active_prefill_tokens.saturating_sub(prefill);
                load.active_decode_blocks = load.active_decode_blocks.saturating_sub(entry.blocks);
                load.active_requests = load.active_requests.saturating_sub(1);
            }
        }
    }

    /// Books request `id` on `worker`.
    ///
    /// # Errors
    ///
    /// [`LedgerError::DuplicateId`], [`LedgerError::UnknownWorker`], [`LedgerError::RequestsFull`];
    /// nothing changes.
    pub fn book(
        &mut self,
        id: u64,
        worker: WorkerKey,
        prefill_tokens: u64,
        blocks: u64,
    ) -> Result<(), LedgerError> {
        self.book_entry(
            id,
            RequestEntry {
                worker,
                prefill_tokens,
                blocks,
                state: BOOKED,
                ..RequestEntry::default()
            },
        )
    }

    /// [`Ledger::book`] at `now_ms` (milliseconds on any clock the host keeps, the same for
    /// [`Ledger::prefill_complete_at`]): when the request's prefill completes, the time it took
    /// calibrates the worker's [`Speed`].
    ///
    /// # Errors
    ///
    /// As [`Ledger::book`], and [`LedgerError::InvalidTime`]; nothing changes.
    pub fn book_at(
        &mut self,
        id: u64,
        worker: WorkerKey,
        prefill_tokens: u64,
        blocks: u64,
        now_ms: f64,
    ) -> Result<(), LedgerError> {
        if !(now_ms.is_finite() && now_ms >= 0.0) {
            return Err(LedgerError::InvalidTime);
        }
        let before = self.load(worker).unwrap_or_default();
        self.book_entry(
            id,
            RequestEntry {
                worker,
                prefill_tokens,
                blocks,
                state: BOOKED | TIMED,
                booked_at: now_ms.to_bits(),
                work: before.active_prefill_tokens.saturating_add(prefill_tokens),
                decode: before.active_requests + 1,
            },
        )
    }

    fn book_entry(&mut self, id: u64, entry: RequestEntry) -> Result<(), LedgerError> {
        if self.requests.find(id).is_some() {
            return Err(LedgerError::DuplicateId(id));
        }
        if self.workers.find(entry.worker).is_none() {
            return Err(LedgerError::UnknownWorker(entry.worker));
        }
        self.requests
            .insert(id, entry)
            .map_err(|_| LedgerError::RequestsFull {
                capacity: self.requests.capacity(),
            })?;
        self.adjust(entry.worker, &entry, Sign::Add);
        Ok(())
    }

    fn booked(&self, id: u64) -> Result<(usize, RequestEntry), LedgerError> {
        match self.requests.find(id) {
            Some(i) if self.requests.value(i).state & (BOOKED | FREED) == BOOKED => {
                Ok((i, *self.requests.value(i)))
            }
            _ => Err(LedgerError::UnknownId(id)),
        }
    }

    /// Marks request `id`'s prefill complete: its prefill tokens leave the worker's load.
    ///
    /// # Errors
    ///
    /// [`LedgerError::UnknownId`], [`LedgerError::PrefillAlreadyComplete`]; nothing changes.
    pub fn prefill_complete(&mut self, id: u64) -> Result<(), LedgerError> {
        self.complete(id, None)
    }

    /// [`Ledger::prefill_complete`] at `now_ms`: a request booked with [`Ledger::book_at`]
    /// teaches its worker's (and the fleet's) first-token fit how long it took.
    ///
    /// # Errors
    ///
    /// As [`Ledger::prefill_complete`], and [`LedgerError::InvalidTime`]; nothing changes.
    pub fn prefill_complete_at(&mut self, id: u64, now_ms: f64) -> Result<(), LedgerError> {
        if !(now_ms.is_finite() && now_ms >= 0.0) {
            return Err(LedgerError::InvalidTime);
        }
        self.complete(id, Some(now_ms))
    }

    fn complete(&mut self, id: u64, now_ms: Option<f64>) -> Result<(), LedgerError> {
        let (i, entry) = self.booked(id)?;
        if entry.state & PREFILL_DONE != 0 {
            return Err(LedgerError::PrefillAlreadyComplete(id));
        }
        let took = now_ms
            .filter(|_| entry.state & TIMED != 0)
            .map(|now| now - f64::from_bits(entry.booked_at))
            .filter(|took| *took >= 0.0);
        if let Some(w) = self.workers.find(entry.worker) {
            self.note(entry.worker);
            let state = self.workers.value_mut(w);
            state.load.active_prefill_tokens = state
                .load
                .active_prefill_tokens
                .saturating_sub(entry.prefill_tokens);
            if let Some(took) = took {
                if let Some(fleet) = self.fleet.speed() {
                    let predicted = fleet.first_token_ms(entry.work, entry.decode);
                    state.pace.observe(took, predicted, WINDOW);
                    self.fleet_pace.observe(took, predicted, FLEET_WINDOW);
                }
                self.fleet
                    .observe(entry.work, entry.decode, took, FLEET_WINDOW);
            }
        }
        self.requests.value_mut(i).state |= PREFILL_DONE;
        Ok(())
    }

    /// Frees request `id`: its whole reservation leaves the worker's load.
    ///
    /// # Errors
    ///
    /// [`LedgerError::UnknownId`] (including a second free); nothing changes.
    pub fn free(&mut self, id: u64) -> Result<(), LedgerError> {
        let (i, entry) = self.booked(id)?;
        self.adjust(entry.worker, &entry, Sign::Sub);
        self.requests.remove_at(i);
        Ok(())
    }

    /// Cancels request `id`: the same as [`Ledger::free`].
    ///
    /// # Errors
    ///
    /// As [`Ledger::free`].
    pub fn cancel(&mut self, id: u64) -> Result<(), LedgerError> {
        self.free(id)
    }

    /// Remembers `id` in state `state` as a tombstone, forgetting the oldest if the ring is full.
    fn tombstone(&mut self, id: u64, entry: RequestEntry) {
        let ring = self.tombstones.as_ref().len();
        if ring == 0 {
            return;
        }
        if self.tomb_len == ring {
            let oldest = self.tombstones.as_ref()[self.tomb_head];
            if let Some(i) = self.requests.find(oldest) {
                if self.requests.value(i).state & BOOKED == 0
                    || self.requests.value(i).state & FREED != 0
                {
                    self.requests.remove_at(i);
                }
            }
            self.tomb_head = (self.tomb_head + 1) % ring;
            self.tomb_len -= 1;
            self.counters.forgotten_tombstones += 1;
        }
        let stored = match self.requests.find(id) {
            Some(i) => {
                *self.requests.value_mut(i) = entry;
                true
            }
            None => self.requests.insert(id, entry).is_ok(),
        };
        if stored {
            let tail = (self.tomb_head + self.tomb_len) % ring;
            self.tombstones.as_mut()[tail] = id;
            self.tomb_len += 1;
        } else {
            self.counters.dropped_events += 1;
        }
    }

    /// Applies an event relayed from another replica. Idempotent: a repeated event changes
    /// nothing; a completion or free that arrives before its booking is remembered.
    pub fn apply(&mut self, event: &LedgerEvent) {
        match *event {
            LedgerEvent::Booked {
                id,
                worker,
                prefill_tokens,
                blocks,
            } => {
                if self.workers.find(worker).is_none() {
                    self.counters.unknown_worker_events += 1;
                    return;
                }
                match self.requests.find(id).map(|i| (i, *self.requests.value(i))) {
                    None => {
                        let entry = RequestEntry {
                            worker,
                            prefill_tokens,
                            blocks,
                            state: BOOKED,
                            ..RequestEntry::default()
                        };
                        if self.requests.insert(id, entry).is_ok() {
                            self.adjust(worker, &entry, Sign::Add);
                        } else {
                            self.counters.dropped_events += 1;
                        }
                    }
                    Some((_, e)) if e.state & FREED != 0 => self.counters.late_events += 1,
                    Some((_, e)) if e.state & BOOKED != 0 => self.counters.duplicate_events += 1,
                    Some((i, e)) => {
                        // A completion arrived first: book with the prefill already done.
                        let entry = RequestEntry {
                            worker,
                            prefill_tokens,
                            blocks,
                            state: BOOKED | (e.state & PREFILL_DONE),
                            ..RequestEntry::default()
                        };
                        *self.requests.value_mut(i) = entry;
                        self.adjust(worker, &entry, Sign::Add);
                        self.counters.late_events += 1;
                    }
                }
            }
            LedgerEvent::PrefillComplete { id } => {
                match self.requests.find(id).map(|i| (i, *self.requests.value(i))) {
                    None => self.tombstone(
                        id,
                        RequestEntry {
                            state: PREFILL_DONE,
                            ..RequestEntry::default()
                        },
                    ),
                    Some((_, e)) if e.state & (PREFILL_DONE | FREED) != 0 => {
                        self.counters.duplicate_events += 1;
                    }
                    Some(_) => {
                        let _ = self.prefill_complete(id);
                    }
                }
            }
            LedgerEvent::Freed { id } => {
                match self.requests.find(id).map(|i| (i, *self.requests.value(i))) {
                    Some((_, e)) if e.state & FREED != 0 => self.counters.duplicate_events += 1,
                    Some((_, e)) if e.state & BOOKED != 0 => {
                        self.adjust(e.worker, &e, Sign::Sub);
                        self.tombstone(id, RequestEntry { state: FREED, ..e });
                    }
                    _ => self.tombstone(
                        id,
                        RequestEntry {
                            state: FREED | PREFILL_DONE,
                            ..RequestEntry::default()
                        },
                    ),
                }
            }
        }
    }
}

/// The tag and format version of a ledger's snapshot section (2: a pace's three sums are of the
/// log of observed over predicted and its square, where 1 summed the times).
const SNAPSHOT_TAG: [u8; 4] = *b"LRLG";
const SNAPSHOT_VERSION: u16 = 2;

impl<R, L, T> Ledger<R, L, T>
where
    R: AsRef<[RequestSlot]> + AsMut<[RequestSlot]>,
    L: AsRef<[LoadSlot]> + AsMut<[LoadSlot]>,
    T: AsRef<[u64]> + AsMut<[u64]>,
{
    /// The sizes of the storage it was given: request slots, worker slots and the tombstone
    /// ring (to size the storage of a ledger read from its snapshot, [`Ledger::from_snapshot`]).
    #[must_use]
    pub fn slot_counts(&self) -> (usize, usize, usize) {
        (
            self.requests.slot_count(),
            self.workers.slot_count(),
            self.tombstones.as_ref().len(),
        )
    }

    /// The workers registered, in no particular order.
    pub fn workers(&self) -> impl Iterator<Item = WorkerKey> + '_ {
        (0..self.workers.slot_count())
            .filter(|&i| self.workers.is_used(i))
            .map(|i| self.workers.key(i))
    }

    /// Writes the ledger's state to `out` as a snapshot section ([`crate::snapshot`]):
    /// its counters and first-token calibration, its workers with their loads and paces, its
    /// requests (booked, and the tombstones of events that came first) and its tombstone ring,
    /// the oldest first. What a [`crate::Fleet`] uses to tell changes apart is not written: a
    /// ledger read back is a new ledger to every fleet.
    pub fn write_snapshot(&self, out: &mut impl FnMut(&[u8])) {
        let mut w = SnapshotWriter { out };
        w.section(SNAPSHOT_TAG, SNAPSHOT_VERSION);
        let c = &self.counters;
        for v in [
            c.duplicate_events,
            c.late_events,
            c.unknown_worker_events,
            c.forgotten_tombstones,
            c.dropped_events,
        ] {
            w.u64(v);
        }
        let (seen, sums) = self.fleet.parts();
        w.u64(seen);
        for v in sums.into_iter().chain(self.fleet_pace.parts()) {
            w.f64(v);
        }
        w.count(self.workers.len());
        for i in 0..self.workers.slot_count() {
            if self.workers.is_used(i) {
                let state = self.workers.value(i);
                w.worker(self.workers.key(i));
                w.u64(state.load.active_prefill_tokens);
                w.u64(state.load.active_decode_blocks);
                w.u64(state.load.active_requests);
                for v in state.pace.parts() {
                    w.f64(v);
                }
            }
        }
        w.count(self.requests.len());
        for i in 0..self.requests.slot_count() {
            if self.requests.is_used(i) {
                let e = self.requests.value(i);
                w.u64(self.requests.key(i));
                w.worker(e.worker);
                w.u64(e.prefill_tokens);
                w.u64(e.blocks);
                w.u8(e.state);
                w.u64(e.booked_at);
                w.u64(e.work);
                w.u64(e.decode);
            }
        }
        let ring = self.tombstones.as_ref();
        w.count(self.tomb_len);
        for k in 0..self.tomb_len {
            w.u64(ring[(self.tomb_head + k) % ring.len()]);
        }
    }

    /// A ledger over fresh storage (as [`Ledger::new`]) holding the state of the snapshot
    /// section `reader` is at; the reader is left after it.
    ///
    /// # Errors
    ///
    /// [`SnapshotError`] naming the byte offset: storage that does not fit
    /// ([`SnapshotProblem::Storage`]), a section that is not a ledger's of this format version,
    /// more workers, requests or tombstones than the storage holds, a worker or request listed
    /// twice, a request state the ledger never makes, a time or calibration sum that is not
    /// finite, and bytes that end early.
    pub fn from_snapshot(
        requests: R,
        workers: L,
        tombstones: T,
        reader: &mut SnapshotReader<'_>,
    ) -> Result<Self, SnapshotError> {
        let mut ledger = Self::new(requests, workers, tombstones)
            .map_err(|e| reader.error_here(SnapshotProblem::Storage(e)))?;
        reader.section(SNAPSHOT_TAG, SNAPSHOT_VERSION)?;
        let c = &mut ledger.counters;
        for v in [
            &mut c.duplicate_events,
            &mut c.late_events,
            &mut c.unknown_worker_events,
            &mut c.forgotten_tombstones,
            &mut c.dropped_events,
        ] {
            *v = reader.u64()?;
        }
        let seen = reader.u64()?;
        let mut sums = [0.0; 9];
        for v in &mut sums {
            *v = reader.finite()?;
        }
        ledger.fleet = Fit::from_parts(seen, sums);
        ledger.fleet_pace =
            Pace::from_parts([reader.finite()?, reader.finite()?, reader.finite()?]);
        for _ in 0..reader.count("workers", ledger.workers.capacity())? {
            let at = reader.offset();
            let worker = reader.worker()?;
            let load = WorkerLoad {
                active_prefill_tokens: reader.u64()?,
                active_decode_blocks: reader.u64()?,
                active_requests: reader.u64()?,
            };
            let pace = Pace::from_parts([reader.finite()?, reader.finite()?, reader.finite()?]);
            let duplicate = SnapshotReader::error_at(
                at,
                SnapshotProblem::Duplicate {
                    what: "worker",
                    key: worker.worker_id,
                },
            );
            if ledger.workers.find(worker).is_some() {
                return Err(duplicate);
            }
            ledger
                .workers
                .insert(worker, WorkerState { load, pace })
                .map_err(|_| duplicate)?;
        }
        for _ in 0..reader.count("requests", ledger.requests.capacity())? {
            let at = reader.offset();
            let id = reader.u64()?;
            let worker = reader.worker()?;
            let prefill_tokens = reader.u64()?;
            let blocks = reader.u64()?;
            let state_at = reader.offset();
            let state = reader.u8()?;
            if state == 0 || state & !(BOOKED | PREFILL_DONE | FREED | TIMED) != 0 {
                return Err(SnapshotReader::error_at(
                    state_at,
                    SnapshotProblem::BadState(state),
                ));
            }
            let time_at = reader.offset();
            let booked_at = reader.u64()?;
            if state & TIMED != 0 && !f64::from_bits(booked_at).is_finite() {
                return Err(SnapshotReader::error_at(
                    time_at,
                    SnapshotProblem::NotFinite,
                ));
            }
            let entry = RequestEntry {
                worker,
                prefill_tokens,
                blocks,
                state,
                booked_at,
                work: reader.u64()?,
                decode: reader.u64()?,
            };
            let duplicate = SnapshotReader::error_at(
                at,
                SnapshotProblem::Duplicate {
                    what: "request",
                    key: id,
                },
            );
            if ledger.requests.find(id).is_some() {
                return Err(duplicate);
            }
            ledger.requests.insert(id, entry).map_err(|_| duplicate)?;
            if state & (BOOKED | FREED) == BOOKED {
                ledger.active += 1;
            }
        }
        let ring = ledger.tombstones.as_ref().len();
        let n = reader.count("tombstones", ring)?;
        for k in 0..n {
            ledger.tombstones.as_mut()[k] = reader.u64()?;
        }
        ledger.tomb_len = n;
        Ok(ledger)
    }
}

#[derive(Clone, Copy)]
enum Sign {
    Add,
    Sub,
}

#[cfg(test)]
mod tests {
    use std::vec;
    use std::vec::Vec;

    use super::*;

    fn ledger() -> Ledger<Vec<RequestSlot>, Vec<LoadSlot>, Vec<u64>> {
        Ledger::new(
            vec![RequestSlot::empty(); 256],
            vec![LoadSlot::empty(); 16],
            vec![0; 8],
        )
        .unwrap()
    }

    /// The log gives exactly the changes since a state it still holds, oldest first, and
    /// nothing for a state further back or of another ledger.
    #[test]
    fn the_change_log_tells_what_changed_while_it_remembers() {
        let mut l = ledger();
        let workers: Vec<WorkerKey> = (0..4).map(|w| WorkerKey::new(w, 0)).collect();
        for &w in &workers {
            l.add_worker(w).unwrap();
        }
        let start = l.version();
        assert_eq!(l.changed_since(start).unwrap().count(), 0);
        // CHANGE_LOG bookings: every one still remembered.
        for id in 0..CHANGE_LOG as u64 {
            l.book(id, workers[(id % 4) as usize], 10, 1).unwrap();
        }
        let changed: Vec<WorkerKey> = l.changed_since(start).unwrap().collect();
        let expected: Vec<WorkerKey> = (0..CHANGE_LOG).map(|i| workers[i % 4]).collect();
        assert_eq!(changed, expected);
        // One more: the oldest is forgotten, so the state before it is no longer served.
        let before_free = l.version();
        l.free(0).unwrap();
        assert!(l.changed_since(start).is_none());
        assert_eq!(
            l.changed_since(before_free).unwrap().collect::<Vec<_>>(),
            [workers[0]]
        );
        // Completions, removals and replica events are changes too; tombstones are not.
        let v = l.version();
        l.prefill_complete(1).unwrap();
        l.remove_worker(workers[3]);
        l.apply(&LedgerEvent::Booked {
            id: 900,
            worker: workers[2],
            prefill_tokens: 5,
            blocks: 1,
        });
        l.apply(&LedgerEvent::Freed { id: 901 });
        let changed: Vec<WorkerKey> = l.changed_since(v).unwrap().collect();
        assert_eq!(changed, [workers[1], workers[3], workers[2]]);
        // Another ledger's state, even with the same count, is not served.
        let other = ledger();
        assert!(l.changed_since(other.version()).is_none());
        assert!(other.changed_since(l.version()).is_none());
    }
}
