//! `cargo run --release --example catchup`: how fast a restarted replica rebuilds its index and
//! ledger from the streams.
//!
//! Fills a fresh server's streams with `--requests` requests' worth of events (each request: a
//! booking, a prefill completion and a free in the ledger stream, and a store of `--blocks` blocks
//! on its worker in the KV stream, with a removal of an older request's blocks once the workers'
//! caches are full), `--per-message` events to a message (the batching a busy replica's and a
//! busy engine's publishers reach), then times a new replica's start: from nothing to having
//! applied both streams to their ends. Prints events per second, per stream and together.
//!
//! With `--snapshot TAIL`, a replica first catches up and stores a snapshot, `TAIL` more
//! requests' events follow, and each timed replica loads the snapshot and replays only those:
//! prints the events the restart covered (the snapshot's and the tail's) per second.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line example"
)]

use std::process::ExitCode;
use std::time::Instant;

use libroute_core::{KvEvent, LedgerEvent, Tier, WorkerKey};
use libroute_nats::{Bus, BusConfig, LocalServer, Replica, host_router, wire};

const HELP: &str = "\
cargo run --release --example catchup -- [options]

  --requests N     requests whose events fill the streams (200000)
  --per-message N  events per message (64)
  --blocks N       blocks per stored KV event (16)
  --workers N      workers (32)
  --runs N         timed catch-ups, each by a new replica (3)
  --snapshot N     after the fill, a replica stores a snapshot and N more requests' events
                   follow it; the timed replicas load the snapshot and replay those (off)";

fn number(flag: &str, v: Option<&String>) -> Result<usize, String> {
    v.ok_or_else(|| format!("{flag} needs a value"))?
        .parse()
        .map_err(|_| format!("{flag}: not a number"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match Box::pin(run()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("catchup: {e}");
            ExitCode::FAILURE
        }
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "fill, then time: one straight sequence"
)]
async fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut requests, mut per_message, mut blocks, mut workers, mut runs) =
        (200_000, 64, 16, 32, 3);
    let mut tail = None;
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1);
        match args[i].as_str() {
            "--requests" => requests = number("--requests", v)?,
            "--per-message" => per_message = number("--per-message", v)?.max(1),
            "--blocks" => blocks = number("--blocks", v)?,
            "--workers" => workers = number("--workers", v)?.clamp(1, 64),
            "--runs" => runs = number("--runs", v)?.max(1),
            "--snapshot" => tail = Some(number("--snapshot", v)? as u64),
            _ => return Err(HELP.to_owned()),
        }
        i += 2;
    }
    let scratch = std::env::temp_dir().join(format!("libroute-catchup-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    let server = LocalServer::start(&scratch).map_err(|e| e.to_string())?;
    // Snapshots only where this example takes them.
    let mut config = BusConfig::new(server.url());
    config.snapshot_every = None;
    let bus = Bus::connect(config).await.map_err(|e| e.to_string())?;
    let filled = Instant::now();
    let fill = Fill {
        js: bus.jetstream().clone(),
        ledger_subject: bus.ledger_subject(7),
        kv_subject: bus.kv_subject("fill"),
        per_message,
        blocks,
        workers,
    };
    let (ledger_events, kv_events) = fill.requests(0..requests as u64).await?;
    let end = bus.last_sequences().await.map_err(|e| e.to_string())?;
    println!(
        "streams filled in {:.1} s: {ledger_events} ledger events in {} messages, {kv_events} KV \
         events ({blocks} blocks each) in {} messages",
        filled.elapsed().as_secs_f64(),
        end.ledger,
        end.kv
    );

    let router = || -> Result<_, String> {
        let mut router = host_router::<1>(workers * 64 * blocks * 2, workers, 1 << 16)
            .map_err(|e| e.to_string())?;
        for w in 0..workers as u64 {
            router
                .ledger
                .add_worker(WorkerKey::new(w, 0))
                .map_err(|e| e.to_string())?;
        }
        Ok(router)
    };
    if let Some(tail) = tail {
        let timed = Box::pin(from_snapshot(
            &bus,
            &fill,
            requests as u64,
            tail,
            runs,
            router,
        ))
        .await;
        drop(server);
        let _ = std::fs::remove_dir_all(&scratch);
        return timed;
    }
    for run in 0..runs {
        let replica = Replica::start(&bus, 100 + u32::try_from(run).unwrap_or(0), router()?)
            .await
            .map_err(|e| e.to_string())?;
        let s = replica.stats();
        let secs = s.catch_up.as_secs_f64();
        let counters = replica.router().ledger.counters();
        if counters.active_requests != 0
            || s.kv_refused != 0
            || s.malformed != 0
            || s.ledger_events != ledger_events
            || s.kv_events != kv_events
        {
            return Err(format!("the replica's state is wrong: {counters:?} {s:?}"));
        }
        println!(
            "catch-up {}: {} events in {:.3} s: {:.2} M events/s ({} ledger, {} KV: {:.1} M blocks/s)",
            run + 1,
            s.catch_up_events,
            secs,
            s.catch_up_events as f64 / secs / 1e6,
            s.ledger_events,
            s.kv_events,
            (s.kv_events as f64 * blocks as f64) / secs / 1e6
        );
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// `--snapshot TAIL`: a replica catches up with the streams `requests` filled and stores a
/// snapshot; `tail` more requests' events follow; then each timed replica loads the snapshot and
/// replays the tail. Checked: each loaded that snapshot, replayed exactly the tail, and holds what
/// the snapshot's replica holds after the tail.
async fn from_snapshot(
    bus: &Bus,
    fill: &Fill,
    requests: u64,
    tail: u64,
    runs: usize,
    router: impl Fn() -> Result<libroute_nats::HostRouter<1>, String>,
) -> Result<(), String> {
    let first = Replica::start(bus, 99, router()?)
        .await
        .map_err(|e| e.to_string())?;
    let before = first.stats().catch_up_events;
    let taken = Instant::now();
    let at = first.snapshot().await.map_err(|e| e.to_string())?;
    let snapshot_secs = taken.elapsed().as_secs_f64();
    // What the snapshot holds, and how long encoding it (what routing waits for) takes.
    let (bytes, encode_secs) = {
        let router = first.router();
        let encoding = Instant::now();
        let mut bytes = Vec::new();
        router.write_snapshot(&mut |b: &[u8]| bytes.extend_from_slice(b));
        (bytes.len(), encoding.elapsed().as_secs_f64())
    };
    let filled = Instant::now();
    let (tail_ledger, tail_kv) = fill.requests(requests..requests + tail).await?;
    let end = bus.last_sequences().await.map_err(|e| e.to_string())?;
    first.wait_for(end).await;
    let (blocks_held, active) = {
        let r = first.router();
        (
            r.index.counters().blocks,
            r.ledger.counters().active_requests,
        )
    };
    println!(
        "snapshot of {before} events' state at {at:?} ({bytes} bytes, encoded in {encode_secs:.4} s) stored in {snapshot_secs:.3} s; then {tail} requests: {tail_ledger} ledger and {tail_kv} KV events in {:.1} s",
        filled.elapsed().as_secs_f64()
    );
    for run in 0..runs {
        let replica = Replica::start(bus, 100 + u32::try_from(run).unwrap_or(0), router()?)
            .await
            .map_err(|e| e.to_string())?;
        let s = replica.stats();
        let secs = s.catch_up.as_secs_f64();
        let held = replica.router().index.counters().blocks;
        let counters = replica.router().ledger.counters();
        if s.snapshot_loaded != Some(at)
            || counters.active_requests != active
            || held != blocks_held
            || s.kv_refused != 0
            || s.malformed != 0
            || s.ledger_events != tail_ledger
            || s.kv_events != tail_kv
        {
            return Err(format!("the replica's state is wrong: {counters:?} {s:?}"));
        }
        let covered = before + s.catch_up_events;
        println!(
            "catch-up {}: snapshot + {} events in {:.3} s: {covered} events covered, {:.2} M events/s",
            run + 1,
            s.catch_up_events,
            secs,
            covered as f64 / secs / 1e6,
        );
    }
    Ok(())
}

/// Publishes requests' events to the streams, as the example's fill describes.
struct Fill {
    js: async_nats::jetstream::Context,
    ledger_subject: String,
    kv_subject: String,
    per_message: usize,
    blocks: usize,
    workers: usize,
}

impl Fill {
    /// Requests `range`'s events: requests spread over the workers; each worker's cache holds
    /// 64 requests' blocks, then evicts the oldest. Returns the ledger and KV events published.
    async fn requests(&self, range: std::ops::Range<u64>) -> Result<(u64, u64), String> {
        let (mut ledger, mut kv) = (Vec::new(), Vec::new());
        let (mut ledger_n, mut kv_n) = (0usize, 0usize);
        let (mut ledger_events, mut kv_events) = (0u64, 0u64);
        wire::start_ledger(&mut ledger, 7);
        wire::start_kv(&mut kv);
        let mut acks = Vec::new();
        let mut hashes = vec![0u64; self.blocks];
        for r in range {
            let worker = WorkerKey::new(r % self.workers as u64, 0);
            for e in [
                LedgerEvent::Booked {
                    id: r,
                    worker,
                    prefill_tokens: 1000,
                    blocks: self.blocks as u64,
                },
                LedgerEvent::PrefillComplete { id: r },
                LedgerEvent::Freed { id: r },
            ] {
                wire::push_ledger(&mut ledger, &e);
                ledger_n += 1;
                if ledger_n == self.per_message {
                    acks.push(
                        self.js
                            .publish(self.ledger_subject.clone(), ledger.clone().into())
                            .await,
                    );
                    wire::start_ledger(&mut ledger, 7);
                    ledger_events += ledger_n as u64;
                    ledger_n = 0;
                }
            }
            let mut kv_batch = |event: &KvEvent<'_>| {
                wire::push_kv(&mut kv, event);
                kv_n += 1;
                kv_n == self.per_message
            };
            for (k, h) in hashes.iter_mut().enumerate() {
                *h = r.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ k as u64;
            }
            let mut full = kv_batch(&KvEvent::Stored {
                worker,
                tier: Tier::Device,
                hashes: &hashes,
            });
            if r >= 64 * self.workers as u64 {
                let old = r - 64 * self.workers as u64;
                let old_hashes: Vec<u64> = (0..self.blocks as u64)
                    .map(|k| old.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ k)
                    .collect();
                full |= kv_batch(&KvEvent::Removed {
                    worker,
                    tier: Tier::Device,
                    hashes: &old_hashes,
                });
            }
            if full || kv_n >= self.per_message {
                acks.push(
                    self.js
                        .publish(self.kv_subject.clone(), kv.clone().into())
                        .await,
                );
                wire::start_kv(&mut kv);
                kv_events += kv_n as u64;
                kv_n = 0;
            }
            // Bound the acknowledgements in flight.
            if acks.len() >= 4096 {
                for a in acks.drain(..) {
                    a.map_err(|e| e.to_string())?
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        if ledger_n > 0 {
            acks.push(
                self.js
                    .publish(self.ledger_subject.clone(), ledger.into())
                    .await,
            );
            ledger_events += ledger_n as u64;
        }
        if kv_n > 0 {
            acks.push(self.js.publish(self.kv_subject.clone(), kv.into()).await);
            kv_events += kv_n as u64;
        }
        for a in acks {
            a.map_err(|e| e.to_string())?
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok((ledger_events, kv_events))
    }
}
