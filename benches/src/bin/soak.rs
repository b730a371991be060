//! `cargo xtask soak [--requests N]`: routes N requests (10 million by default) through one
//! `Router` (every other one over a `Fleet` it keeps) with the event mix a server sees, then frees everything, and fails unless the books
//! balance throughout and return to zero, and resident memory stays flat after warm-up.
//!
//! The workload is the built-in synthetic one (`libroute_benches::Synthetic`: applications with
//! shared system prompts, Zipf-popular multi-turn conversations), generated in chunks as it is
//! consumed. Around each route, a simulated fleet produces what real engines and replicas send:
//!
//! - KV events: the chosen worker stores the blocks it did not hold; each worker's cache is a
//!   bounded FIFO whose evictions are `Removed` events, one batch in four offloaded to host
//!   memory (`Stored` in the host tier) first; now and then a worker restarts (`Cleared`).
//! - The request's life: its prefill completes 8 requests later (1 in 100 is cancelled then
//!   instead) and it is freed 64 requests after it was routed.
//! - Another replica's bookings: every third request, a replica books one of its own requests;
//!   its completion and free arrive 5 and 40 requests later, 1 event in 20 delivered twice, and 1
//!   request in 30 has its completion delivered before its booking.
//!
//! Every 1/20 of the run it checks that the ledger's active requests and the sum of the
//! workers' loads equal what the simulation holds booked, and samples resident memory
//! (`/proc/self/statm`). After warm-up (the first 1/10) the samples may grow by at most 4 MiB in
//! total (the allocator's slack for the workload chunks; the router itself allocates nothing).

// Why: a command-line tool reports progress and failures on stderr.
#![allow(clippy::print_stderr, reason = "the soak's progress log is its stderr")]

use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::Instant;

use libroute_benches::sim::Synthetic;
use libroute_core::{
    BlockSlot, DefaultKnobs, Fleet, FleetPlace, KvEvent, Ledger, LedgerEvent, LoadSlot,
    PrefixIndex, Request, RequestSlot, Router, Row, Selector, TaintSet, Tier, WorkerKey,
    WorkerLoad, WorkerSlot,
};

const WORKERS: u64 = 32;
const BLOCK_TOKENS: u32 = 16;
/// Blocks of KV cache per simulated worker.
const CACHE_BLOCKS: usize = 4096;
/// Requests generated at a time.
const CHUNK: usize = 8192;
const PREFILL_LAG: usize = 8;
const FREE_LAG: usize = 64;
const REPLICA_COMPLETE_LAG: usize = 5;
const REPLICA_FREE_LAG: usize = 40;
/// Replica request ids live above this, apart from the local ones.
const REPLICA_IDS: u64 = 1 << 62;
/// Growth of resident memory allowed after warm-up.
const RSS_SLACK: u64 = 4 << 20;

type Index = PrefixIndex<Vec<BlockSlot<1>>, Vec<WorkerSlot>, 1>;
type Books = Ledger<Vec<RequestSlot>, Vec<LoadSlot>, Vec<u64>>;

/// One simulated engine: the blocks its KV cache holds, oldest first.
struct Engine {
    cache: VecDeque<u64>,
}

/// A ledger event due at a request number.
struct Due {
    at: u64,
    event: LedgerEvent,
}

fn main() -> ExitCode {
    match soak(&std::env::args().skip(1).collect::<Vec<_>>()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::FAILURE
        }
    }
}

fn parse(args: &[String]) -> Result<u64, String> {
    match args {
        [] => Ok(10_000_000),
        [flag, n] if flag == "--requests" => n
            .parse()
            .map_err(|_| format!("--requests takes a whole number, not {n:?}")),
        _ => Err("usage: soak [--requests N]".to_owned()),
    }
}

/// Resident memory in bytes.
fn rss() -> Result<u64, String> {
    let statm = std::fs::read_to_string("/proc/self/statm")
        .map_err(|e| format!("/proc/self/statm (resident memory is read on Linux): {e}"))?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("/proc/self/statm: {statm:?}"))?;
    Ok(pages * 4096)
}

#[allow(
    clippy::too_many_lines,
    reason = "one loop, read top to bottom, is the simulation"
)]
fn soak(args: &[String]) -> Result<(), String> {
    let total = parse(args)?;
    let knobs = DefaultKnobs::default();
    let policy = knobs.build().map_err(|e| e.to_string())?;
    let index = Index::new(
        // 65,536 blocks, half what the simulated caches hold: the index runs full and evicts.
        vec![BlockSlot::empty(); 1 << 17],
        vec![WorkerSlot::empty(); 128],
    )
    .map_err(|e| e.to_string())?;
    let ledger = Books::new(
        vec![RequestSlot::empty(); 1 << 14],
        vec![LoadSlot::empty(); 128],
        vec![0; 4096],
    )
    .map_err(|e| e.to_string())?;
    let mut state = Router::new(
        index,
        ledger,
        knobs.cost.host_cache_hit_weight,
        knobs.cost.disk_cache_hit_weight,
    );
    let workers: Vec<WorkerKey> = (0..WORKERS).map(|w| WorkerKey::new(w, 0)).collect();
    for &w in &workers {
        state.ledger.add_worker(w).map_err(|e| e.to_string())?;
    }
    let mut engines: Vec<Engine> = (0..WORKERS)
        .map(|_| Engine {
            cache: VecDeque::with_capacity(CACHE_BLOCKS + 256),
        })
        .collect();
    let mut selector = Selector::<64>::new();
    let mut rows: Vec<Row> = workers.iter().map(|&w| Row::new(w)).collect();
    let mut fleet = Fleet::new(
        vec![Row::default(); workers.len()],
        vec![FleetPlace::empty(); workers.len()],
    )
    .map_err(|e| e.to_string())?;
    for &w in &workers {
        fleet.add(w, TaintSet::EMPTY).map_err(|e| e.to_string())?;
    }
    let mut rng = fastrand::Rng::with_seed(2026);
    // Local requests in flight, oldest first: (id, cancelled).
    let mut local: VecDeque<(u64, bool)> = VecDeque::with_capacity(FREE_LAG + 1);
    // The replica's completions and frees, each queue in due order.
    let mut replica_completions: VecDeque<Due> = VecDeque::with_capacity(64);
    let mut replica_frees: VecDeque<Due> = VecDeque::with_capacity(64);
    // Second copies of replica events, delivered at the end of the step (or the next one).
    let mut replica_late: Vec<LedgerEvent> = Vec::with_capacity(64);
    let mut replica_booked: u64 = 0;
    let mut replica_in_flight: u64 = 0;
    let mut evicted: Vec<u64> = Vec::with_capacity(256);
    let mut workload = Synthetic {
        requests: CHUNK,
        apps: 8,
        system_blocks: 32,
        sessions: 1000,
        turn_blocks: 8,
        max_turns: 8,
        block_tokens: BLOCK_TOKENS,
        ..Synthetic::default()
    };
    let (mut routed, mut freed, mut cancelled) = (0u64, 0u64, 0u64);
    let warm_up = total / 10;
    let sample_every = (total / 20).max(1);
    let mut samples: Vec<(u64, u64)> = Vec::new();
    let started = Instant::now();
    let mut chunk = 0u64;
    'run: loop {
        workload.seed = chunk;
        chunk += 1;
        for request in workload.generate().requests {
            if routed == total {
                break 'run;
            }
            let id = routed;
            // Route and book.
            // Even requests over the fleet the router keeps, odd ones over rows built anew.
            let prompt = Request::new(request.input_tokens, BLOCK_TOKENS);
            let kept = id % 2 == 0;
            let s = if kept {
                state.route_fleet(
                    &mut fleet,
                    &policy,
                    &mut selector,
                    &prompt,
                    &request.blocks,
                    id,
                )
            } else {
                for (row, &w) in rows.iter_mut().zip(&workers) {
                    *row = Row::new(w);
                }
                state.route(
                    &policy,
                    &mut selector,
                    &prompt,
                    &request.blocks,
                    &mut rows,
                    id,
                )
            }
            .map_err(|e| format!("request {id}: {e}"))?;
            routed += 1;
            local.push_back((id, false));
            // The engine computes and stores the blocks it did not hold.
            let chosen = if kept {
                &fleet.rows()[s.row]
            } else {
                &rows[s.row]
            };
            let held = chosen.device_blocks as usize;
            let worker = s.worker;
            let engine = &mut engines[usize::try_from(worker.worker_id).unwrap_or(0)];
            let new = &request.blocks[held.min(request.blocks.len())..];
            if !new.is_empty() {
                state
                    .index
                    .apply(&KvEvent::Stored {
                        worker,
                        tier: Tier::Device,
                        hashes: new,
                    })
                    .map_err(|e| e.to_string())?;
                engine.cache.extend(new);
            }
            if engine.cache.len() > CACHE_BLOCKS {
                evicted.clear();
                let over = engine.cache.len() - CACHE_BLOCKS;
                evicted.extend(engine.cache.drain(..over));
                if rng.u8(..4) == 0 {
                    state
                        .index
                        .apply(&KvEvent::Stored {
                            worker,
                            tier: Tier::Host,
                            hashes: &evicted,
                        })
                        .map_err(|e| e.to_string())?;
                }
                state
                    .index
                    .apply(&KvEvent::Removed {
                        worker,
                        tier: Tier::Device,
                        hashes: &evicted,
                    })
                    .map_err(|e| e.to_string())?;
            }
            // A worker restarts now and then: its caches are gone.
            if id % 1_000_003 == 1_000_000 {
                let w = workers[usize::try_from(id % WORKERS).unwrap_or(0)];
                state
                    .index
                    .apply(&KvEvent::Cleared { worker: w })
                    .map_err(|e| e.to_string())?;
                engines[usize::try_from(w.worker_id).unwrap_or(0)]
                    .cache
                    .clear();
            }
            // Earlier requests finish their prefill (or are cancelled), and leave.
            if local.len() > PREFILL_LAG {
                let at = local.len() - 1 - PREFILL_LAG;
                let (old, _) = local[at];
                if rng.u8(..100) == 0 {
                    state
                        .ledger
                        .cancel(old)
                        .map_err(|e| format!("cancel {old}: {e}"))?;
                    local[at].1 = true;
                    cancelled += 1;
                } else {
                    state
                        .ledger
                        .prefill_complete(old)
                        .map_err(|e| format!("prefill of {old}: {e}"))?;
                }
            }
            if local.len() > FREE_LAG {
                let (old, was_cancelled) = local.pop_front().unwrap_or_default();
                if !was_cancelled {
                    state
                        .ledger
                        .free(old)
                        .map_err(|e| format!("free {old}: {e}"))?;
                    freed += 1;
                }
            }
            // Another replica's requests.
            if id % 3 == 0 {
                let rid = REPLICA_IDS + id / 3;
                let booked = LedgerEvent::Booked {
                    id: rid,
                    worker: workers[rng.usize(..workers.len())],
                    prefill_tokens: request.input_tokens / 2,
                    blocks: request.blocks.len() as u64 / 2,
                };
                let complete = LedgerEvent::PrefillComplete { id: rid };
                if rng.u8(..30) == 0 {
                    // The completion overtakes the booking.
                    deliver(&mut state.ledger, &mut rng, complete, &mut replica_late);
                    deliver(&mut state.ledger, &mut rng, booked, &mut replica_late);
                } else {
                    deliver(&mut state.ledger, &mut rng, booked, &mut replica_late);
                    replica_completions.push_back(Due {
                        at: id + REPLICA_COMPLETE_LAG as u64,
                        event: complete,
                    });
                }
                replica_booked += 1;
                replica_in_flight += 1;
                replica_frees.push_back(Due {
                    at: id + REPLICA_FREE_LAG as u64,
                    event: LedgerEvent::Freed { id: rid },
                });
            }
            for event in replica_late.drain(..) {
                state.ledger.apply(&event);
            }
            while replica_completions.front().is_some_and(|d| d.at <= id) {
                let Some(due) = replica_completions.pop_front() else {
                    break;
                };
                deliver(&mut state.ledger, &mut rng, due.event, &mut replica_late);
            }
            while replica_frees.front().is_some_and(|d| d.at <= id) {
                let Some(due) = replica_frees.pop_front() else {
                    break;
                };
                replica_in_flight -= 1;
                deliver(&mut state.ledger, &mut rng, due.event, &mut replica_late);
            }
            if routed % sample_every == 0 {
                let local_booked = local.iter().filter(|(_, c)| !c).count() as u64;
                balance(&state.ledger, &workers, local_booked + replica_in_flight)?;
                let resident = rss()?;
                samples.push((routed, resident));
                eprintln!(
                    "soak: {routed} routed, {:.1} s, resident {:.1} MiB, index {} blocks ({} evicted), ledger {} active",
                    started.elapsed().as_secs_f64(),
                    resident as f64 / f64::from(1u32 << 20),
                    state.index.counters().blocks,
                    state.index.counters().evictions,
                    state.ledger.counters().active_requests,
                );
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    // Everything leaves.
    while let Some((old, was_cancelled)) = local.pop_front() {
        if was_cancelled {
            continue;
        }
        // Requests routed in the last few steps have not completed their prefill yet.
        let _ = state.ledger.prefill_complete(old);
        state
            .ledger
            .free(old)
            .map_err(|e| format!("free {old}: {e}"))?;
        freed += 1;
    }
    for event in replica_late.drain(..) {
        state.ledger.apply(&event);
    }
    for due in replica_completions.drain(..).chain(replica_frees.drain(..)) {
        state.ledger.apply(&due.event);
    }
    balance(&state.ledger, &workers, 0)?;
    let lost = routed - cancelled - freed;
    if lost != 0 {
        return Err(format!("{lost} booked requests were never freed"));
    }
    let c = state.ledger.counters();
    let ic = state.index.counters();
    println!(
        "soak: {routed} requests routed in {elapsed:.1} s ({:.0} requests/s, the simulation included)",
        routed as f64 / elapsed
    );
    println!(
        "soak: {freed} freed and {cancelled} cancelled, none lost; {replica_booked} replica bookings applied and freed; \
         the ledger is back to zero (0 active requests, every worker's load 0)"
    );
    println!(
        "soak: ledger events: {} duplicates and {} late ignored, {} tombstones forgotten, {} dropped",
        c.duplicate_events, c.late_events, c.forgotten_tombstones, c.dropped_events
    );
    println!(
        "soak: index: {} blocks held, {} evicted, {} events ignored",
        ic.blocks, ic.evictions, ic.ignored_events
    );
    rss_verdict(&samples, warm_up)
}

/// Applies a replica event, and one in twenty of them a second time a little later.
fn deliver(
    ledger: &mut Books,
    rng: &mut fastrand::Rng,
    event: LedgerEvent,
    later: &mut Vec<LedgerEvent>,
) {
    ledger.apply(&event);
    if rng.u8(..20) == 0 {
        later.push(event);
    }
}

/// Fails unless the ledger holds exactly `booked` requests and the workers' loads add up to them.
fn balance(ledger: &Books, workers: &[WorkerKey], booked: u64) -> Result<(), String> {
    let mut sum = WorkerLoad::default();
    for &w in workers {
        let load = ledger
            .load(w)
            .ok_or_else(|| format!("worker {w} left the ledger"))?;
        sum.active_requests += load.active_requests;
        sum.active_prefill_tokens += load.active_prefill_tokens;
        sum.active_decode_blocks += load.active_decode_blocks;
    }
    let active = ledger.counters().active_requests as u64;
    if active != booked || sum.active_requests != booked {
        return Err(format!(
            "the books do not balance: {booked} requests booked, the ledger counts {active}, \
             the workers' loads add up to {}",
            sum.active_requests
        ));
    }
    if booked == 0 && (sum.active_prefill_tokens != 0 || sum.active_decode_blocks != 0) {
        return Err(format!(
            "nothing is booked but the workers still carry {} prefill tokens and {} blocks",
            sum.active_prefill_tokens, sum.active_decode_blocks
        ));
    }
    Ok(())
}

/// Prints the resident-memory samples and fails if they grew by more than [`RSS_SLACK`] after
/// warm-up.
fn rss_verdict(samples: &[(u64, u64)], warm_up: u64) -> Result<(), String> {
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    let after: Vec<&(u64, u64)> = samples.iter().filter(|(n, _)| *n > warm_up).collect();
    let (Some(first), Some(max)) = (after.first(), after.iter().map(|(_, r)| *r).max()) else {
        println!("soak: too short to sample resident memory after warm-up");
        return Ok(());
    };
    let last = after.last().map_or(first.1, |s| s.1);
    println!(
        "soak: resident memory after warm-up ({} samples from request {}): first {:.1} MiB, \
         max {:.1} MiB, last {:.1} MiB (growth {:.2} MiB, allowed {:.0})",
        after.len(),
        first.0,
        mib(first.1),
        mib(max),
        mib(last),
        mib(max.saturating_sub(first.1)),
        mib(RSS_SLACK)
    );
    if max.saturating_sub(first.1) > RSS_SLACK {
        return Err(format!(
            "resident memory grew by {:.2} MiB after warm-up",
            mib(max.saturating_sub(first.1))
        ));
    }
    Ok(())
}
