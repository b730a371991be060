//! Batched publishing that loses nothing acknowledged: events are appended to a batch from
//! synchronous code; one task publishes batches in order, one at a time, each with a message id
//! the stream deduplicates on, and retries a batch until the server acknowledges it. While one
//! batch waits for its acknowledgement the next one fills (natural batching: no timer, no
//! latency added when the bus is idle).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_nats::jetstream::{self, message::PublishMessage};
use tokio::sync::{Notify, watch};

/// A batch is sealed when it reaches this size (well under NATS's default 1 MiB payload limit).
const MAX_BATCH_BYTES: usize = 256 * 1024;

/// What an outbox has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboxStats {
    /// Events handed to the outbox.
    pub events: u64,
    /// Events the server acknowledged.
    pub acked_events: u64,
    /// Batches the server acknowledged.
    pub batches: u64,
    /// Publish attempts that failed and were retried (server down, no acknowledgement in time).
    pub retries: u64,
}

/// Writes a fresh batch's header.
pub(crate) type Start = Box<dyn Fn(&mut Vec<u8>) + Send + Sync>;

struct State {
    /// The batch being filled, and how many events it holds.
    open: (Vec<u8>, u64),
    /// Sealed batches waiting for the publisher, oldest first.
    sealed: VecDeque<(Vec<u8>, u64)>,
    stats: OutboxStats,
    start: Start,
}

impl State {
    /// Takes the open batch (and its event count) and opens a fresh one.
    fn seal(&mut self) -> (Vec<u8>, u64) {
        let mut fresh = Vec::new();
        (self.start)(&mut fresh);
        std::mem::replace(&mut self.open, (fresh, 0))
    }
}

pub(crate) struct Outbox {
    state: Mutex<State>,
    wake: Notify,
    acked: watch::Sender<u64>,
}

impl Outbox {
    /// An outbox whose batches begin with what `start` writes.
    pub(crate) fn new(start: Start) -> Arc<Self> {
        let mut open = Vec::new();
        start(&mut open);
        Arc::new(Self {
            state: Mutex::new(State {
                open: (open, 0),
                sealed: VecDeque::new(),
                stats: OutboxStats::default(),
                start,
            }),
            wake: Notify::new(),
            acked: watch::Sender::new(0),
        })
    }

    /// Appends one event (written by `write`) to the open batch and wakes the publisher.
    pub(crate) fn push(&self, write: impl FnOnce(&mut Vec<u8>)) {
        {
            let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            write(&mut s.open.0);
            s.open.1 += 1;
            s.stats.events += 1;
            if s.open.0.len() >= MAX_BATCH_BYTES {
                let full = s.seal();
                s.sealed.push_back(full);
            }
        }
        self.wake.notify_one();
    }

    /// Queues a message of its own (written by `write`, header included), after the events
    /// queued so far, and wakes the publisher.
    pub(crate) fn push_message(&self, write: impl FnOnce(&mut Vec<u8>)) {
        {
            let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if s.open.1 > 0 {
                let open = s.seal();
                s.sealed.push_back(open);
            }
            let mut message = Vec::new();
            write(&mut message);
            s.sealed.push_back((message, 1));
            s.stats.events += 1;
        }
        self.wake.notify_one();
    }

    pub(crate) fn stats(&self) -> OutboxStats {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stats
    }

    /// Waits until every event pushed before this call is acknowledged by the server.
    pub(crate) async fn flush(&self) {
        let target = self.stats().events;
        let mut acked = self.acked.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = acked.wait_for(|&a| a >= target).await;
    }

    fn take(&self) -> Option<(Vec<u8>, u64)> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(batch) = s.sealed.pop_front() {
            return Some(batch);
        }
        if s.open.1 == 0 {
            return None;
        }
        Some(s.seal())
    }

    /// The publishing task: runs until aborted. `origin` makes message ids unique across
    /// publishers and across restarts of one.
    pub(crate) async fn run(
        self: Arc<Self>,
        js: jetstream::Context,
        subject: String,
        origin: String,
    ) {
        let mut batch_no = 0u64;
        loop {
            let Some((bytes, events)) = self.take() else {
                self.wake.notified().await;
                continue;
            };
            batch_no += 1;
            let id = format!("{origin}-{batch_no}");
            let payload = bytes::Bytes::from(bytes);
            let mut backoff = Duration::from_millis(5);
            loop {
                let sent = js
                    .send_publish(
                        subject.clone(),
                        PublishMessage::build()
                            .payload(payload.clone())
                            .message_id(&id),
                    )
                    .await;
                let acked = match sent {
                    Ok(ack) => ack.await.is_ok(),
                    Err(_) => false,
                };
                if acked {
                    break;
                }
                self.state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .stats
                    .retries += 1;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(500));
            }
            let acked = {
                let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                s.stats.acked_events += events;
                s.stats.batches += 1;
                s.stats.acked_events
            };
            self.acked.send_replace(acked);
        }
    }
}
