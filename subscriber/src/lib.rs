//! libroute-subscriber: a libroute index fed by an engine's KV-event stream, for std hosts.
//!
//! vLLM and SGLang publish KV-cache events on a ZeroMQ PUB socket as (topic, 8-byte big-endian
//! sequence number, msgpack `KVEventBatch`), and keep the last batches for a ROUTER "replay"
//! socket that answers a start sequence number with every buffered (sequence number, payload)
//! from there and an end marker (-1). A [`Subscriber`] connects to both (ZMTP 3.0 over TCP, in
//! std Rust: no libzmq), hands batches out in sequence order, and when a sequence number jumps
//! it asks the replay socket for the missed ones first. [`Subscriber::apply_next`] applies the
//! next batch to a [`PrefixIndex`] through a [`KvIngest`].
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use libroute_core::*;
//! use libroute_subscriber::Subscriber;
//!
//! let mut index = PrefixIndex::<_, _, 1>::new(vec![BlockSlot::<1>::empty(); 1 << 16], vec![WorkerSlot::empty(); 128]).unwrap();
//! let mut ingest = KvIngest::new(vec![EngineSlot::empty(); 1 << 16], 16).unwrap();
//! // vLLM's defaults: --kv-events-config '{"publisher": "zmq", "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558"}'
//! let mut engine = Subscriber::connect("tcp://10.0.0.7:5557", Some("tcp://10.0.0.7:5558"), b"")?;
//! engine.catch_up()?; // what the engine published before we joined, if it still has it
//! loop {
//!     match engine.apply_next(&mut ingest, &mut index, WorkerKey::new(7, 0), Duration::from_millis(100)) {
//!         Ok(Some(summary)) => { let _ = summary.stored_blocks; }
//!         Ok(None) => {} // nothing within the timeout
//!         Err(e) => eprintln!("{e}"),
//!     }
//! }
//! # Ok::<(), std::io::Error>(())
//! ```

pub mod zmtp;

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::time::{Duration, Instant};

use libroute_core::{
    BatchSummary, BlockSlot, EngineSlot, IngestError, KvIngest, PrefixIndex, SequenceCheck,
    SequenceStep, WorkerKey, WorkerSlot,
};

use crate::zmtp::{Connection, SocketType};

/// One batch, in sequence order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The engine's sequence number.
    pub seq: u64,
    /// The msgpack `KVEventBatch`.
    pub payload: Vec<u8>,
    /// Whether it came from the replay socket (it was missed on the live one).
    pub replayed: bool,
}

/// What a subscriber has seen, for hosts to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubscriberCounters {
    /// Batches handed out from the live socket.
    pub live: u64,
    /// Batches handed out from the replay socket.
    pub replayed: u64,
    /// Jumps in sequence numbers (each one a replay request).
    pub gaps: u64,
    /// Batches seen twice (a replay overlapping the live stream), dropped.
    pub duplicates: u64,
    /// Batches missed that the replay socket no longer had: lost.
    pub lost: u64,
}

/// Why [`Subscriber::apply_next`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum SubscribeError {
    /// The sockets failed, or the peer is not a ZMTP 3 engine.
    Io(io::Error),
    /// The batch was refused (it changed nothing); the stream goes on after it.
    Ingest {
        /// The batch's sequence number.
        seq: u64,
        /// Why.
        error: IngestError,
    },
}

impl fmt::Display for SubscribeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubscribeError::Io(e) => write!(f, "KV-event subscription: {e}"),
            SubscribeError::Ingest { seq, error } => write!(f, "KV-event batch {seq}: {error}"),
        }
    }
}

impl std::error::Error for SubscribeError {}

impl From<io::Error> for SubscribeError {
    fn from(e: io::Error) -> Self {
        SubscribeError::Io(e)
    }
}

/// How long connecting and a replay may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const REPLAY_TIMEOUT: Duration = Duration::from_secs(5);

/// An engine's KV-event stream, in sequence order, gaps filled from its replay socket.
#[derive(Debug)]
pub struct Subscriber {
    live: Connection,
    replay_endpoint: Option<String>,
    replay: Option<Connection>,
    seq: SequenceCheck,
    pending: VecDeque<Batch>,
    counters: SubscriberCounters,
}

impl Subscriber {
    /// Subscribes to the PUB socket at `endpoint` (`tcp://host:port`) for messages whose topic
    /// starts with `topic` (empty: all); `replay` is the engine's replay socket, if it has one.
    ///
    /// # Errors
    ///
    /// Connection and handshake errors.
    pub fn connect(endpoint: &str, replay: Option<&str>, topic: &[u8]) -> io::Result<Self> {
        let mut live = Connection::connect(endpoint, SocketType::Sub, CONNECT_TIMEOUT)?;
        // ZMTP 3.0 subscribes with a message: 1, then the topic prefix.
        let mut subscribe = vec![1u8];
        subscribe.extend_from_slice(topic);
        live.send(&[&subscribe])?;
        Ok(Subscriber {
            live,
            replay_endpoint: replay.map(str::to_owned),
            replay: None,
            seq: SequenceCheck::new(),
            pending: VecDeque::new(),
            counters: SubscriberCounters::default(),
        })
    }

    /// The counters.
    #[must_use]
    pub fn counters(&self) -> SubscriberCounters {
        self.counters
    }

    /// The last sequence number handed out.
    #[must_use]
    pub fn last_seq(&self) -> Option<u64> {
        self.seq.last()
    }

    /// Asks the replay socket for every batch after the last one handed out (from 0 before the
    /// first), and queues them; returns how many. For a subscriber that starts after the engine,
    /// or that suspects it missed the stream's tail. Without a replay socket, does nothing.
    ///
    /// # Errors
    ///
    /// The replay socket's errors.
    pub fn catch_up(&mut self) -> io::Result<usize> {
        let from = self.seq.last().map_or(0, |last| last + 1);
        self.replay_from(from, u64::MAX)
    }

    /// Queues the replayed batches `from..=to` that are still new; returns how many.
    fn replay_from(&mut self, from: u64, to: u64) -> io::Result<usize> {
        let Some(endpoint) = self.replay_endpoint.as_deref() else {
            return Ok(0);
        };
        if self.replay.is_none() {
            self.replay = Some(Connection::connect(
                endpoint,
                SocketType::Dealer,
                CONNECT_TIMEOUT,
            )?);
        }
        let Some(replay) = self.replay.as_mut() else {
            return Ok(0);
        };
        // DEALER to ROUTER: an empty delimiter frame, then the start sequence number.
        replay.send(&[b"", &from.to_be_bytes()])?;
        let deadline = Instant::now() + REPLAY_TIMEOUT;
        let mut replies = Vec::new();
        loop {
            let Some(message) = replay.recv(deadline)? else {
                // No end marker in time: drop the connection so a late answer cannot mix
                // with the next request's.
                self.replay = None;
                return Err(io::ErrorKind::TimedOut.into());
            };
            let (seq, payload) =
                seq_and_payload(&message, "a replay reply is not (delimiter, seq, payload)")?;
            if seq == u64::MAX {
                // -1 as an unsigned 64-bit pattern: the end marker.
                break;
            }
            replies.push((seq, payload.clone()));
        }
        let mut queued = 0;
        let mut next = from;
        for (seq, payload) in replies {
            if seq < next || seq > to {
                continue;
            }
            if seq > next {
                self.counters.lost += seq - next;
            }
            self.queue(seq, payload, true);
            queued += 1;
            next = seq + 1;
        }
        Ok(queued)
    }

    fn queue(&mut self, seq: u64, payload: Vec<u8>, replayed: bool) {
        self.seq.applied(seq);
        self.pending.push_back(Batch {
            seq,
            payload,
            replayed,
        });
    }

    /// The next batch in sequence order, waiting up to `timeout` for the live socket; `None`
    /// when nothing came. A jump in sequence numbers first fetches the missed batches from the
    /// replay socket (counted in `lost` if it no longer has them); batches seen before are
    /// dropped.
    ///
    /// # Errors
    ///
    /// Socket errors; `InvalidData` for a message that is not (topic, seq, payload).
    pub fn next_batch(&mut self, timeout: Duration) -> io::Result<Option<Batch>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(batch) = self.pending.pop_front() {
                if batch.replayed {
                    self.counters.replayed += 1;
                } else {
                    self.counters.live += 1;
                }
                return Ok(Some(batch));
            }
            let Some(message) = self.live.recv(deadline)? else {
                return Ok(None);
            };
            let (seq, payload) =
                seq_and_payload(&message, "a KV-event message is not (topic, seq, payload)")?;
            match self.seq.step(seq) {
                SequenceStep::Seen => self.counters.duplicates += 1,
                SequenceStep::Next => self.queue(seq, payload.clone(), false),
                SequenceStep::Gap { missed } => {
                    self.counters.gaps += 1;
                    self.replay_from(missed.0, missed.1)?;
                    // What the replay socket no longer had is lost.
                    let last = self.seq.last().unwrap_or(0);
                    if last < missed.1 {
                        self.counters.lost += missed.1 - last.max(missed.0 - 1);
                    }
                    // This batch comes after the gap, whatever the replay had.
                    self.queue(seq, payload.clone(), false);
                }
            }
        }
    }

    /// Applies the next batch ([`Subscriber::next_batch`]) to `index` as `worker`'s events;
    /// `None` when nothing came within `timeout`.
    ///
    /// # Errors
    ///
    /// [`SubscribeError::Io`] for socket errors; [`SubscribeError::Ingest`] for a batch the
    /// ingest refused (it changed nothing; the next call goes on with the stream).
    pub fn apply_next<S, B, W, const WORDS: usize>(
        &mut self,
        ingest: &mut KvIngest<S>,
        index: &mut PrefixIndex<B, W, WORDS>,
        worker: WorkerKey,
        timeout: Duration,
    ) -> Result<Option<BatchSummary>, SubscribeError>
    where
        S: AsRef<[EngineSlot]> + AsMut<[EngineSlot]>,
        B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
        W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    {
        let Some(batch) = self.next_batch(timeout)? else {
            return Ok(None);
        };
        ingest
            .apply(index, worker, &batch.payload)
            .map(Some)
            .map_err(|error| SubscribeError::Ingest {
                seq: batch.seq,
                error,
            })
    }
}

/// The sequence number (8 bytes, big-endian) and payload of a three-frame message, as the live
/// socket (topic first) and the replay socket (delimiter first) send them; `shape` says which was
/// expected when the message is something else.
fn seq_and_payload<'m>(message: &'m [Vec<u8>], shape: &str) -> io::Result<(u64, &'m Vec<u8>)> {
    let [_, seq, payload] = message else {
        return Err(io::Error::new(io::ErrorKind::InvalidData, shape.to_owned()));
    };
    let bytes: [u8; 8] = seq.as_slice().try_into().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a sequence number of {} bytes, not 8", seq.len()),
        )
    })?;
    Ok((u64::from_be_bytes(bytes), payload))
}
