//! Router replicas kept in sync over NATS JetStream.
//!
//! A production router runs as several replicas. Each must see every worker's KV events and
//! every booking the others make, or they pile requests onto the same worker. This crate connects
//! a libroute [`Router`] to a NATS server with JetStream:
//!
//! - **KV events** go to a durable stream (`<PREFIX>_KV`, subjects `<prefix>.kv.>`), published by
//!   a [`KvPublisher`] (an engine's relay, or the workers themselves). Every replica reads the
//!   stream from its first message, so a replica that starts late or restarts rebuilds its index
//!   by replaying it, then follows it.
//! - **Ledger events**: each [`Replica`] publishes its own bookings, prefill completions and frees
//!   to `<PREFIX>_LEDGER` (subject `<prefix>.ledger.<replica>`) and applies everyone else's. A
//!   restarted replica replays the stream too, its own previous events included, so it gets back
//!   the bookings it made before it went down and can free them.
//!
//! Delivery is at least once, in stream order per consumer: publishes are retried until the
//! server acknowledges them (with a message id the stream deduplicates on), and consumers are
//! recreated after the last sequence they applied when the server goes away. A message applied
//! twice, or events in another order, change nothing: the index's events are idempotent, and the
//! ledger's replica events are idempotent and order-independent ([`Ledger::apply`]).
//!
//! Messages are batches ([`wire`]): each replica's and each publisher's events are appended to a
//! batch that is published while the previous one waits for its acknowledgement, so a busy
//! replica sends few messages and an idle one sends at once.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use libroute_core::*;
//! use libroute_nats::{Bus, BusConfig, Replica, host_router};
//!
//! let bus = Bus::connect(BusConfig::new("nats://127.0.0.1:4222")).await?;
//! let mut router = host_router::<1>(1 << 16, 64, 1 << 14)?;
//! router.ledger.add_worker(WorkerKey::new(1, 0)).unwrap();
//! let replica = Replica::start(&bus, 0, router).await?; // replays both streams first
//!
//! let policy = DefaultKnobs::default().build().unwrap();
//! let mut selector = Selector::<16>::new();
//! let mut rows = [Row::new(WorkerKey::new(1, 0))];
//! let hashes = [11, 12];
//! let chosen = replica.route(&policy, &mut selector, &Request::new(32, 16), &hashes, &mut rows, 7, 0.0)?;
//! assert_eq!(chosen.worker, WorkerKey::new(1, 0));
//! replica.free(7)?; // published to the other replicas too
//! replica.flush().await; // both events acknowledged by the server
//! # Ok(())
//! # }
//! ```
//!
//! [`Ledger::apply`]: libroute_core::Ledger::apply

mod outbox;
mod replica;
mod server;
pub mod snapshot;
pub mod wire;

use std::fmt;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use libroute_core::{
    BlockSlot, Ledger, LoadSlot, PrefixIndex, RequestSlot, Router, StorageError, WorkerSlot,
};

pub use outbox::OutboxStats;
pub use replica::{Engines, Positions, Replica, ReplicaStats};
pub use server::LocalServer;
pub use snapshot::SnapshotFailure;

/// A [`Router`] over heap storage, as a std host holds one.
pub type HostRouter<const WORDS: usize> = Router<
    Vec<BlockSlot<WORDS>>,
    Vec<WorkerSlot>,
    Vec<RequestSlot>,
    Vec<LoadSlot>,
    Vec<u64>,
    WORDS,
>;

/// A [`HostRouter`] indexing at least `blocks` blocks (beyond, blocks not stored again lately are
/// evicted by the index's clock), for `workers` workers (the index tracks at most `64 * WORDS`) and `requests` requests in flight, with a tombstone ring as long as the
/// request table (events overtaken by up to that many others are still recognized). Tier weights
/// are 0 (device only); build with [`Router::new`] for tiered fleets.
///
/// # Errors
///
/// [`Error::Storage`] for capacities that do not fit.
pub fn host_router<const WORDS: usize>(
    blocks: usize,
    workers: usize,
    requests: usize,
) -> Result<HostRouter<WORDS>, Error> {
    let index = PrefixIndex::new(
        vec![BlockSlot::<WORDS>::empty(); (blocks * 2).next_power_of_two().max(8)],
        vec![WorkerSlot::empty(); 128 * WORDS],
    )
    .map_err(Error::Storage)?;
    let ledger = Ledger::new(
        vec![RequestSlot::empty(); (requests * 2).next_power_of_two().max(8)],
        vec![LoadSlot::empty(); (workers * 2).next_power_of_two().max(8)],
        vec![0u64; requests.max(1)],
    )
    .map_err(Error::Storage)?;
    Ok(Router::new(index, ledger, 0.0, 0.0))
}

/// Why connecting, setting up the streams or starting a replica failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The NATS server could not be reached.
    Connect {
        /// The URL tried.
        url: String,
        /// The client's reason.
        reason: String,
    },
    /// A stream could not be created, read or checked.
    Stream {
        /// The stream's name.
        stream: String,
        /// The server's or client's reason.
        reason: String,
    },
    /// The router's storage does not fit (see [`StorageError`]).
    Storage(StorageError),
    /// The subject prefix is empty or holds a character NATS subjects reserve (`.`, `*`, `>`,
    /// whitespace).
    Prefix(String),
    /// The local server could not be started (see [`LocalServer`]).
    Server(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Connect { url, reason } => write!(f, "cannot connect to {url}: {reason}"),
            Error::Stream { stream, reason } => write!(f, "stream {stream}: {reason}"),
            Error::Storage(e) => write!(f, "router storage: {e}"),
            Error::Prefix(p) => write!(
                f,
                "subject prefix {p:?} must be non-empty without '.', '*', '>' or whitespace"
            ),
            Error::Server(reason) => write!(f, "local nats-server: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

/// Where the streams live and how long they keep events.
#[derive(Debug, Clone)]
pub struct BusConfig {
    /// The server, e.g. `nats://127.0.0.1:4222`.
    pub url: String,
    /// Subject prefix (`libroute`): subjects `<prefix>.kv.>` and `<prefix>.ledger.>`, streams
    /// `<PREFIX>_KV` and `<PREFIX>_LEDGER`. Separate deployments on one server use different ones.
    pub prefix: String,
    /// How long the KV stream keeps an event. A replica rebuilds its index from what is kept, so
    /// keep events at least as long as a block stays in an engine's cache.
    pub kv_max_age: Duration,
    /// The KV stream's size limit in bytes; the oldest events go first.
    pub kv_max_bytes: i64,
    /// How long the ledger stream keeps an event: longer than any request runs.
    pub ledger_max_age: Duration,
    /// In memory instead of on disk: faster, and lost when the server restarts.
    pub memory: bool,
    /// A replica stores a snapshot of its router ([`Replica::snapshot`]) after applying this
    /// many events from the streams since its last one; `None`: only when the host asks.
    /// A replica that starts loads the latest snapshot and replays the streams after it.
    pub snapshot_every: Option<u64>,
}

/// [`BusConfig::snapshot_every`]'s default: a restart then replays at most about this many
/// events (well under a second at one event per message), and a busy replica stores a snapshot
/// every few seconds.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 200_000;

impl BusConfig {
    /// Defaults for a server at `url`: prefix `libroute`, file storage, KV events kept an hour
    /// (at most 1 GiB), ledger events a day, a snapshot every [`DEFAULT_SNAPSHOT_EVERY`] events.
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            prefix: "libroute".to_owned(),
            kv_max_age: Duration::from_secs(3600),
            kv_max_bytes: 1 << 30,
            ledger_max_age: Duration::from_secs(24 * 3600),
            memory: false,
            snapshot_every: Some(DEFAULT_SNAPSHOT_EVERY),
        }
    }
}

/// A connection to the bus, with both streams set up.
#[derive(Debug, Clone)]
pub struct Bus {
    js: jetstream::Context,
    /// Counts (re)connections.
    connected: tokio::sync::watch::Receiver<u64>,
    prefix: String,
    kv_stream: String,
    ledger_stream: String,
    /// The object store bucket snapshots go to (`<PREFIX>_SNAPSHOTS`).
    snapshot_bucket: String,
    memory: bool,
    snapshot_every: Option<u64>,
}

impl Bus {
    /// Connects and creates the two streams when they do not exist (an existing stream is used
    /// as it is configured).
    ///
    /// # Errors
    ///
    /// [`Error::Prefix`], [`Error::Connect`], or [`Error::Stream`] when a stream cannot be created.
    pub async fn connect(config: BusConfig) -> Result<Self, Error> {
        let prefix = config.prefix.clone();
        if prefix.is_empty()
            || prefix
                .chars()
                .any(|c| c == '.' || c == '*' || c == '>' || c.is_whitespace())
        {
            return Err(Error::Prefix(prefix));
        }
        let (connected_tx, connected) = tokio::sync::watch::channel(0u64);
        let client = async_nats::ConnectOptions::new()
            // Keep trying while a server restarts: publishes and consumers resume after it.
            .retry_on_initial_connect()
            .max_reconnects(None)
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((attempts as u64 * 50).min(1000))
            })
            // Consumers recreate themselves on each reconnection, rather than waiting to miss
            // two heartbeats (seconds) to learn the server lost them.
            .event_callback(move |event| {
                if matches!(event, async_nats::Event::Connected) {
                    connected_tx.send_modify(|n| *n += 1);
                }
                std::future::ready(())
            })
            .connect(config.url.as_str())
            .await
            .map_err(|e| Error::Connect {
                url: config.url.clone(),
                reason: e.to_string(),
            })?;
        let js = jetstream::new(client);
        let upper = prefix.to_uppercase();
        let bus = Self {
            js,
            connected,
            kv_stream: format!("{upper}_KV"),
            ledger_stream: format!("{upper}_LEDGER"),
            snapshot_bucket: format!("{upper}_SNAPSHOTS"),
            memory: config.memory,
            snapshot_every: config.snapshot_every,
            prefix,
        };
        let storage = if config.memory {
            stream::StorageType::Memory
        } else {
            stream::StorageType::File
        };
        bus.ensure(stream::Config {
            name: bus.kv_stream.clone(),
            subjects: vec![format!("{}.kv.>", bus.prefix)],
            max_age: config.kv_max_age,
            max_bytes: config.kv_max_bytes,
            storage,
            ..stream::Config::default()
        })
        .await?;
        bus.ensure(stream::Config {
            name: bus.ledger_stream.clone(),
            subjects: vec![format!("{}.ledger.>", bus.prefix)],
            max_age: config.ledger_max_age,
            storage,
            ..stream::Config::default()
        })
        .await?;
        Ok(bus)
    }

    async fn ensure(&self, config: stream::Config) -> Result<(), Error> {
        let name = config.name.clone();
        self.js
            .get_or_create_stream(config)
            .await
            .map(|_| ())
            .map_err(|e| Error::Stream {
                stream: name,
                reason: e.to_string(),
            })
    }

    /// The last sequence number of each stream (0 for a stream that holds no message): wait for
    /// a replica to reach them ([`Replica::wait_for`]) to know it has applied everything
    /// published so far.
    ///
    /// # Errors
    ///
    /// [`Error::Stream`] when a stream cannot be read.
    pub async fn last_sequences(&self) -> Result<Positions, Error> {
        Ok(Positions {
            kv: self.last_sequence(&self.kv_stream).await?,
            ledger: self.last_sequence(&self.ledger_stream).await?,
        })
    }

    async fn last_sequence(&self, name: &str) -> Result<u64, Error> {
        let err = |e: &dyn fmt::Display| Error::Stream {
            stream: name.to_owned(),
            reason: e.to_string(),
        };
        let mut s = self.js.get_stream(name).await.map_err(|e| err(&e))?;
        let info = s.info().await.map_err(|e| err(&e))?;
        // A stream whose messages have all aged out keeps its last sequence number, but no
        // consumer will ever deliver it: there is nothing to wait for.
        Ok(if info.state.messages == 0 {
            0
        } else {
            info.state.last_sequence
        })
    }

    /// A publisher of KV events (an engine relay or a simulated fleet); `name` tells publishers
    /// apart in subjects and message ids. Must be called within a Tokio runtime: it spawns the
    /// publishing task.
    #[must_use]
    pub fn kv_publisher(&self, name: &str) -> KvPublisher {
        let outbox = outbox::Outbox::new(Box::new(wire::start_kv));
        let task = tokio::spawn(outbox.clone().run(
            self.js.clone(),
            self.kv_subject(name),
            format!("kv-{name}-{}", epoch()),
        ));
        KvPublisher { outbox, task }
    }

    /// The JetStream context, for a host's own use of the same connection (and for tests that
    /// publish raw messages).
    #[must_use]
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.js
    }

    /// The subject a replica's ledger batches are published on.
    #[must_use]
    pub fn ledger_subject(&self, replica: u32) -> String {
        format!("{}.ledger.{replica}", self.prefix)
    }

    /// The subject publisher `name`'s KV batches go to (`<prefix>.kv.<name>`).
    #[must_use]
    pub fn kv_subject(&self, name: &str) -> String {
        format!("{}.kv.{name}", self.prefix)
    }
}

/// Nanoseconds since the Unix epoch: makes message ids unique across restarts of a publisher.
fn epoch() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Publishes KV events to the bus, batched, acknowledged, in order.
#[derive(Debug)]
pub struct KvPublisher {
    outbox: std::sync::Arc<outbox::Outbox>,
    task: tokio::task::JoinHandle<()>,
}

impl fmt::Debug for outbox::Outbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl KvPublisher {
    /// Queues one event; it is published with the next batch. Never blocks on the network.
    pub fn publish(&self, event: &libroute_core::KvEvent<'_>) {
        self.outbox.push(|out| wire::push_kv(out, event));
    }

    /// Queues `worker`'s KV-event batch as its engine published it (a vLLM or SGLang
    /// `KVEventBatch`, msgpack: the payload of a ZMQ message from the engine's PUB socket), in
    /// order after the events queued so far, as one message. Replicas started with
    /// [`Replica::start_reading_engines`] apply it with their `KvIngest` (re-hashing the token
    /// ids into the router's hashes), so a relay forwards bytes and needs no index. A batch that
    /// names a data-parallel rank applies to that rank of `worker`.
    pub fn publish_engine_batch(&self, worker: libroute_core::WorkerKey, payload: &[u8]) {
        self.outbox
            .push_message(|out| wire::write_engine(out, worker, payload));
    }

    /// Waits until every event queued so far is acknowledged by the server.
    pub async fn flush(&self) {
        self.outbox.flush().await;
    }

    /// What it has published (an engine batch counts as one event).
    #[must_use]
    pub fn stats(&self) -> OutboxStats {
        self.outbox.stats()
    }
}

impl Drop for KvPublisher {
    fn drop(&mut self) {
        self.task.abort();
    }
}
