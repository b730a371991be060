//! One router replica: a [`HostRouter`] behind a mutex, two stream consumers applying what the
//! bus carries, and an outbox publishing what this replica books, completes and frees.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use futures_util::{FutureExt, StreamExt};
use libroute_core::{
    EngineSlot, Filters, KvIngest, LedgerError, LedgerEvent, Picker, Policy, PredictionRecord,
    PredictionSlot, Request, RouteError, Row, Scorers, Selection, Selector,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::outbox::{Outbox, OutboxStats};
use crate::snapshot::{self, SnapshotFailure};
use crate::wire::{self, WireError};
use crate::{Bus, Error, HostRouter, epoch};

/// The engine-hash map a replica reading engines' own batches keeps ([`libroute_core::KvIngest`]
/// over heap storage).
pub type Engines = KvIngest<Vec<EngineSlot>>;

/// How far a replica has read each stream: the last stream sequence number applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Positions {
    /// In the KV stream.
    pub kv: u64,
    /// In the ledger stream.
    pub ledger: u64,
}

/// What a replica has done, for hosts to export.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReplicaStats {
    /// KV events applied to the index.
    pub kv_events: u64,
    /// KV events the index refused (see the index's counters for why).
    pub kv_refused: u64,
    /// Other replicas' ledger events applied (duplicates included: the ledger counts those).
    pub ledger_events: u64,
    /// This replica's own events read back from the stream and skipped (it applied them when it
    /// made them).
    pub own_events_skipped: u64,
    /// Messages that were not valid batches, skipped; the last one's sequence and error.
    pub malformed: u64,
    /// The last malformed message: its stream sequence and what was wrong with it.
    pub last_malformed: Option<(u64, WireError)>,
    /// Consumers recreated after the server went away or a consumer failed.
    pub resubscribes: u64,
    /// Time from start to having applied both streams up to where they ended at start.
    pub catch_up: Duration,
    /// Events (KV and ledger) applied during that catch-up.
    pub catch_up_events: u64,
    /// The stream positions of the snapshot the replica started from; `None` when it replayed
    /// the streams from their start (no snapshot, or one it could not load).
    pub snapshot_loaded: Option<Positions>,
    /// Snapshots this replica stored.
    pub snapshots_taken: u64,
    /// Snapshots it could not take, store or load; the last one's reason.
    pub snapshot_failures: u64,
    /// Why the last snapshot could not be taken, stored or loaded.
    pub last_snapshot_failure: Option<SnapshotFailure>,
    /// What this replica published.
    pub published: OutboxStats,
}

struct Shared<const WORDS: usize> {
    router: Mutex<HostRouter<WORDS>>,
    /// The last sequence of each stream the router holds, written under the router's lock (so
    /// a snapshot names exactly what it includes); `positions` follows them after the lock.
    applied_kv: AtomicU64,
    applied_ledger: AtomicU64,
    stats: Mutex<ReplicaStats>,
    positions: watch::Sender<Positions>,
    snapshots: Snapshots,
}

/// Where and when a replica stores snapshots.
struct Snapshots {
    js: jetstream::Context,
    bucket: String,
    memory: bool,
    every: Option<u64>,
    /// The replica reads engines' batches: no snapshots.
    reads_engines: bool,
    /// Events applied since the last snapshot was started.
    since: AtomicU64,
    /// A snapshot is being taken.
    busy: AtomicBool,
}

impl<const WORDS: usize> Shared<WORDS> {
    fn stats(&self) -> MutexGuard<'_, ReplicaStats> {
        self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn router(&self) -> MutexGuard<'_, HostRouter<WORDS>> {
        self.router.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts `events` applied from a stream, and starts a snapshot in the background when
    /// [`crate::BusConfig::snapshot_every`] of them were applied since the last one (unless one
    /// is being taken).
    fn applied(this: &Arc<Self>, events: u64) {
        let s = &this.snapshots;
        let since = s.since.fetch_add(events, Ordering::Relaxed) + events;
        if s.every.is_some_and(|every| since >= every)
            && !s.reads_engines
            && !s.busy.swap(true, Ordering::Acquire)
        {
            let shared = Arc::clone(this);
            tokio::spawn(async move {
                let _ = shared.snapshot().await;
                shared.snapshots.busy.store(false, Ordering::Release);
            });
        }
    }

    /// Encodes the router under its lock with the positions it holds, and stores it.
    async fn snapshot(&self) -> Result<Positions, SnapshotFailure> {
        let taken = self.take_snapshot().await;
        let mut stats = self.stats();
        match taken {
            Ok(_) => stats.snapshots_taken += 1,
            Err(e) => {
                stats.snapshot_failures += 1;
                stats.last_snapshot_failure = Some(e);
            }
        }
        taken
    }

    async fn take_snapshot(&self) -> Result<Positions, SnapshotFailure> {
        let s = &self.snapshots;
        if s.reads_engines {
            return Err(SnapshotFailure::ReadsEngines);
        }
        s.since.store(0, Ordering::Relaxed);
        let (bytes, positions) = {
            let router = self.router();
            let positions = Positions {
                kv: self.applied_kv.load(Ordering::Relaxed),
                ledger: self.applied_ledger.load(Ordering::Relaxed),
            };
            (snapshot::encode(&router, positions), positions)
        };
        let store = snapshot::store(&s.js, &s.bucket, s.memory).await?;
        snapshot::put(&store, &bytes).await?;
        Ok(positions)
    }
}

/// A router replica in sync with the others over the bus.
///
/// Routing, completions and frees are synchronous calls (a mutex and the core's work, no
/// network); the events they make are published in the background. KV events and the other
/// replicas' ledger events are applied in the background as they arrive. Dropping the replica
/// stops its tasks; events not yet acknowledged are lost with it, as a crashed process's would be
/// ([`Replica::flush`] first to shut down cleanly).
pub struct Replica<const WORDS: usize> {
    id: u32,
    shared: Arc<Shared<WORDS>>,
    outbox: Arc<Outbox>,
    tasks: Vec<JoinHandle<()>>,
}

impl<const WORDS: usize> std::fmt::Debug for Replica<WORDS> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("id", &self.id)
            .field("positions", &self.positions())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<const WORDS: usize> Replica<WORDS> {
    /// Starts replica `id` (unique among the replicas; a restarted replica keeps its id) with
    /// `router` (its workers added; its index and ledger usually empty), and returns once it has
    /// replayed both streams up to where they ended when it started. Must be called within a
    /// Tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::Stream`] when a stream cannot be read.
    pub async fn start(bus: &Bus, id: u32, router: HostRouter<WORDS>) -> Result<Self, Error> {
        Self::start_with(bus, id, router, None).await
    }

    /// [`Replica::start`] for a bus that carries engines' own batches
    /// ([`crate::KvPublisher::publish_engine_batch`]): `ingest` (its block size the engines',
    /// its map sized for the blocks they hold) turns them into the router's block hashes.
    /// Every replica reads the same stream in the same order, so their ingests agree.
    ///
    /// # Errors
    ///
    /// As [`Replica::start`].
    pub async fn start_reading_engines(
        bus: &Bus,
        id: u32,
        router: HostRouter<WORDS>,
        ingest: Engines,
    ) -> Result<Self, Error> {
        Self::start_with(bus, id, router, Some(ingest)).await
    }

    async fn start_with(
        bus: &Bus,
        id: u32,
        router: HostRouter<WORDS>,
        ingest: Option<Engines>,
    ) -> Result<Self, Error> {
        let began = Instant::now();
        let end = bus.last_sequences().await?;
        let mut stats = ReplicaStats::default();
        let reads_engines = ingest.is_some();
        let (router, from) = if reads_engines {
            (router, Positions::default())
        } else {
            match load_snapshot(bus, &router)
                .await
                .and_then(|loaded| match loaded {
                    // A stream holding no message reports 0: its end is unknown, not behind.
                    Some((_, from))
                        if (end.kv != 0 && from.kv > end.kv)
                            || (end.ledger != 0 && from.ledger > end.ledger) =>
                    {
                        Err(SnapshotFailure::Ahead {
                            snapshot: from,
                            streams: end,
                        })
                    }
                    loaded => Ok(loaded),
                }) {
                Ok(Some((restored, from))) => {
                    stats.snapshot_loaded = Some(from);
                    (restored, from)
                }
                Ok(None) => (router, Positions::default()),
                Err(e) => {
                    stats.snapshot_failures += 1;
                    stats.last_snapshot_failure = Some(e);
                    (router, Positions::default())
                }
            }
        };
        let shared = Arc::new(Shared {
            router: Mutex::new(router),
            applied_kv: AtomicU64::new(from.kv),
            applied_ledger: AtomicU64::new(from.ledger),
            stats: Mutex::new(stats),
            positions: watch::Sender::new(from),
            snapshots: Snapshots {
                js: bus.js.clone(),
                bucket: bus.snapshot_bucket.clone(),
                memory: bus.memory,
                every: bus.snapshot_every,
                reads_engines,
                since: AtomicU64::new(0),
                busy: AtomicBool::new(false),
            },
        });
        let outbox = Outbox::new(Box::new(move |out| wire::start_ledger(out, id)));
        let mut tasks = vec![
            tokio::spawn(consume(
                bus.js.clone(),
                bus.connected.clone(),
                bus.kv_stream.clone(),
                Arc::clone(&shared),
                Stream::Kv { ingest },
                from.kv,
            )),
            tokio::spawn(consume(
                bus.js.clone(),
                bus.connected.clone(),
                bus.ledger_stream.clone(),
                Arc::clone(&shared),
                Stream::Ledger {
                    me: id,
                    start: end.ledger,
                },
                from.ledger,
            )),
        ];
        tasks.push(tokio::spawn(Arc::clone(&outbox).run(
            bus.js.clone(),
            bus.ledger_subject(id),
            format!("r{id}-{}", epoch()),
        )));
        let replica = Self {
            id,
            shared,
            outbox,
            tasks,
        };
        // Messages can age out while the replica reads towards them (the last one goes last, and
        // then the stream holds none): look again now and then, and stop waiting for a stream
        // that has emptied.
        let mut end = end;
        while tokio::time::timeout(Duration::from_secs(1), replica.wait_for(end))
            .await
            .is_err()
        {
            let now = bus.last_sequences().await?;
            end = Positions {
                kv: if now.kv == 0 { 0 } else { end.kv },
                ledger: if now.ledger == 0 { 0 } else { end.ledger },
            };
        }
        let mut stats = replica.shared.stats();
        stats.catch_up = began.elapsed();
        stats.catch_up_events = stats.kv_events + stats.kv_refused + stats.ledger_events;
        drop(stats);
        Ok(replica)
    }

    /// This replica's id.
    #[must_use]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The router, locked: read its index and ledger, add or remove workers. Hold it briefly:
    /// the consumers wait for it.
    pub fn router(&self) -> MutexGuard<'_, HostRouter<WORDS>> {
        self.shared.router()
    }

    /// Stores a snapshot of the router, with the stream positions it includes, as the bus's
    /// latest ([`crate::snapshot`]); returns those positions. Routing waits while the router is
    /// encoded (about 10 ms per million blocks and requests held), not while it is stored.
    /// Replicas also take one after every [`crate::BusConfig::snapshot_every`] events.
    ///
    /// # Errors
    ///
    /// [`SnapshotFailure::ReadsEngines`] for a replica started with
    /// [`Replica::start_reading_engines`]; [`SnapshotFailure::Store`] when the object store
    /// cannot be created or written.
    pub async fn snapshot(&self) -> Result<Positions, SnapshotFailure> {
        self.shared.snapshot().await
    }

    /// [`libroute_core::Router::route_at`] (without predictions) on this replica's router, and
    /// the booking published to the others.
    ///
    /// # Errors
    ///
    /// As [`libroute_core::Router::route_at`]; nothing is booked or published on error.
    #[allow(
        clippy::too_many_arguments,
        reason = "route_at's arguments: the replica adds none"
    )]
    pub fn route<F: Filters, S: Scorers, P: Picker, const N: usize>(
        &self,
        policy: &Policy<F, S, P>,
        selector: &mut Selector<N>,
        request: &Request<'_>,
        hashes: &[u64],
        rows: &mut [Row],
        id: u64,
        now_ms: f64,
    ) -> Result<Selection, RouteError> {
        let mut router = self.router();
        let selection = router.route_at::<F, S, P, Vec<PredictionSlot>, Vec<PredictionRecord>, N>(
            None, policy, selector, request, hashes, rows, id, now_ms,
        )?;
        let booked = router.ledger.booking(id);
        drop(router);
        if let Some(event) = booked {
            self.publish(&event);
        }
        Ok(selection)
    }

    /// Marks request `id`'s prefill complete at `now_ms` (as
    /// [`libroute_core::Ledger::prefill_complete_at`]) and publishes it.
    ///
    /// # Errors
    ///
    /// As [`libroute_core::Ledger::prefill_complete_at`]; nothing is published on error.
    pub fn prefill_complete(&self, id: u64, now_ms: f64) -> Result<(), LedgerError> {
        self.router().ledger.prefill_complete_at(id, now_ms)?;
        self.publish(&LedgerEvent::PrefillComplete { id });
        Ok(())
    }

    /// Frees request `id` (finished) and publishes it.
    ///
    /// # Errors
    ///
    /// As [`libroute_core::Ledger::free`]; nothing is published on error.
    pub fn free(&self, id: u64) -> Result<(), LedgerError> {
        self.router().ledger.free(id)?;
        self.publish(&LedgerEvent::Freed { id });
        Ok(())
    }

    /// Cancels request `id` and publishes it (the others free it).
    ///
    /// # Errors
    ///
    /// As [`libroute_core::Ledger::cancel`]; nothing is published on error.
    pub fn cancel(&self, id: u64) -> Result<(), LedgerError> {
        self.router().ledger.cancel(id)?;
        self.publish(&LedgerEvent::Freed { id });
        Ok(())
    }

    fn publish(&self, event: &LedgerEvent) {
        self.outbox.push(|out| wire::push_ledger(out, event));
    }

    /// Waits until every event this replica made so far is acknowledged by the server.
    pub async fn flush(&self) {
        self.outbox.flush().await;
    }

    /// How far this replica has applied each stream.
    #[must_use]
    pub fn positions(&self) -> Positions {
        *self.shared.positions.borrow()
    }

    /// Waits until this replica has applied both streams up to `target` (from
    /// [`Bus::last_sequences`]).
    pub async fn wait_for(&self, target: Positions) {
        let mut positions = self.shared.positions.subscribe();
        // The sender lives in `self.shared`, so the channel cannot close while we wait.
        let _ = positions
            .wait_for(|p| p.kv >= target.kv && p.ledger >= target.ledger)
            .await;
    }

    /// What this replica has done.
    #[must_use]
    pub fn stats(&self) -> ReplicaStats {
        ReplicaStats {
            published: self.outbox.stats(),
            ..*self.shared.stats()
        }
    }
}

impl<const WORDS: usize> Drop for Replica<WORDS> {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Which stream a consumer reads, with what reading it needs.
enum Stream {
    /// KV events, and engines' batches when the replica reads them.
    Kv { ingest: Option<Engines> },
    /// Ledger events. Messages up to `start` were published before replica `me` started: its
    /// own among them are from its previous life and are applied; later ones it made itself are
    /// skipped.
    Ledger { me: u32, start: u64 },
}

/// Reads `stream` from the start (then from after the last sequence applied, when the consumer
/// has to be recreated) and applies each message, for as long as the replica lives.
async fn consume<const WORDS: usize>(
    js: jetstream::Context,
    mut connected: watch::Receiver<u64>,
    stream: String,
    shared: Arc<Shared<WORDS>>,
    mut kind: Stream,
    after: u64,
) {
    let mut last = after;
    let mut hashes = Vec::new();
    let mut events = Vec::new();
    let mut first = true;
    #[allow(
        clippy::while_let_loop,
        reason = "two ways out: a failed read and a reconnection"
    )]
    loop {
        if !first {
            shared.stats().resubscribes += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        first = false;
        let Ok(s) = js.get_stream(&stream).await else {
            continue;
        };
        let config = consumer::push::OrderedConfig {
            deliver_subject: js.client().new_inbox(),
            deliver_policy: if last == 0 {
                consumer::DeliverPolicy::All
            } else {
                consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: last + 1,
                }
            },
            ..consumer::push::OrderedConfig::default()
        };
        let Ok(c) = s.create_consumer(config).await else {
            continue;
        };
        let Ok(mut messages) = c.messages().await else {
            continue;
        };
        connected.borrow_and_update();
        let mut batch: Vec<(u64, bytes::Bytes)> = Vec::with_capacity(MAX_DRAIN);
        loop {
            let message = tokio::select! {
                m = messages.next() => m,
                // Reconnected: the server may have lost this consumer; start over from `last`.
                _ = connected.changed() => None,
            };
            // This message, and every other one already delivered (up to MAX_DRAIN), applied
            // under one lock with one wake-up of the waiters: catching up costs per event, not
            // per message.
            batch.clear();
            let mut broken = !take(message, &mut batch, &mut last);
            while !broken && batch.len() < MAX_DRAIN {
                match messages.next().now_or_never() {
                    None => break,
                    Some(m) => broken = !take(m, &mut batch, &mut last),
                }
            }
            if !batch.is_empty() {
                let mut delta = ReplicaStats::default();
                {
                    let mut router = shared.router();
                    for (seq, payload) in &batch {
                        match &mut kind {
                            Stream::Kv { ingest } => {
                                apply_kv(
                                    &mut router,
                                    ingest.as_mut(),
                                    payload,
                                    *seq,
                                    &mut hashes,
                                    &mut delta,
                                );
                            }
                            Stream::Ledger { me, start } => apply_ledger(
                                &mut router,
                                payload,
                                *seq,
                                &mut events,
                                (*me, *start),
                                &mut delta,
                            ),
                        }
                    }
                    match kind {
                        Stream::Kv { .. } => shared.applied_kv.store(last, Ordering::Relaxed),
                        Stream::Ledger { .. } => {
                            shared.applied_ledger.store(last, Ordering::Relaxed);
                        }
                    }
                }
                shared.stats().add(&delta);
                Shared::applied(
                    &shared,
                    delta.kv_events + delta.kv_refused + delta.ledger_events,
                );
                shared.positions.send_modify(|p| match kind {
                    Stream::Kv { .. } => p.kv = last,
                    Stream::Ledger { .. } => p.ledger = last,
                });
            }
            if broken {
                break;
            }
        }
    }
}

/// The latest snapshot in the bus's bucket read into a router like `like`, and the positions
/// it includes; `None` when there is no bucket or no snapshot yet.
async fn load_snapshot<const WORDS: usize>(
    bus: &Bus,
    like: &HostRouter<WORDS>,
) -> Result<Option<(HostRouter<WORDS>, Positions)>, SnapshotFailure> {
    let Ok(store) = bus.js.get_object_store(&bus.snapshot_bucket).await else {
        return Ok(None);
    };
    match snapshot::get(&store).await? {
        None => Ok(None),
        Some(bytes) => snapshot::decode(&bytes, like).map(Some),
    }
}

/// Most messages applied under one lock: bounds how long routing waits behind a catch-up.
const MAX_DRAIN: usize = 256;

/// Keeps a delivered message's sequence and payload, skipping one already applied; false when
/// the consumer failed or ended (it is recreated after `last`).
fn take(
    message: Option<Result<jetstream::Message, consumer::push::OrderedError>>,
    batch: &mut Vec<(u64, bytes::Bytes)>,
    last: &mut u64,
) -> bool {
    let Some(Ok(message)) = message else {
        return false;
    };
    let Ok(info) = message.info() else {
        return false;
    };
    let seq = info.stream_sequence;
    if seq > *last {
        *last = seq;
        batch.push((seq, message.message.payload));
    }
    true
}

impl ReplicaStats {
    /// Counts message `seq` as malformed, for `e`.
    fn malformed(&mut self, seq: u64, e: WireError) {
        self.malformed += 1;
        self.last_malformed = Some((seq, e));
    }

    fn add(&mut self, d: &ReplicaStats) {
        self.kv_events += d.kv_events;
        self.kv_refused += d.kv_refused;
        self.ledger_events += d.ledger_events;
        self.own_events_skipped += d.own_events_skipped;
        self.malformed += d.malformed;
        if d.last_malformed.is_some() {
            self.last_malformed = d.last_malformed;
        }
    }
}

fn apply_kv<const WORDS: usize>(
    router: &mut HostRouter<WORDS>,
    ingest: Option<&mut Engines>,
    payload: &[u8],
    seq: u64,
    hashes: &mut Vec<u64>,
    delta: &mut ReplicaStats,
) {
    if payload.starts_with(wire::ENGINE_MAGIC) {
        let applied = match (wire::decode_engine(payload), ingest) {
            (Err(e), _) => Err(e),
            (Ok(_), None) => Err(WireError::EngineBatchesNotRead),
            (Ok((worker, batch)), Some(ingest)) => ingest
                .apply(&mut router.index, worker, batch)
                .map_err(WireError::Engine),
        };
        match applied {
            Ok(summary) => delta.kv_events += summary.events as u64,
            Err(e) => delta.malformed(seq, e),
        }
        return;
    }
    let decoded = wire::decode_kv(payload, hashes, |event| {
        if router.index.apply(event).is_ok() {
            delta.kv_events += 1;
        } else {
            delta.kv_refused += 1;
        }
    });
    if let Err(e) = decoded {
        delta.malformed(seq, e);
    }
}

/// `(me, ledger_start)`: ledger messages up to `ledger_start` were published before this
/// replica started, its own among them from its previous life, and are applied; later ones it
/// made itself are skipped.
fn apply_ledger<const WORDS: usize>(
    router: &mut HostRouter<WORDS>,
    payload: &[u8],
    seq: u64,
    events: &mut Vec<LedgerEvent>,
    (me, ledger_start): (u32, u64),
    delta: &mut ReplicaStats,
) {
    events.clear();
    match wire::decode_ledger(payload, events) {
        Ok(from) if from == me && seq > ledger_start => {
            delta.own_events_skipped += events.len() as u64;
        }
        Ok(_) => {
            for e in events.iter() {
                router.ledger.apply(e);
            }
            delta.ledger_events += events.len() as u64;
        }
        Err(e) => delta.malformed(seq, e),
    }
}
