//! The replay simulator behind `cargo replay`: a request trace through a simulated fleet, routed
//! by libroute's own [`Router`] (prefix index fed by the workers' KV events, or approximate mode
//! with predictions), ledger and catalog policies.
//!
//! # The fleet model
//!
//! Time is in milliseconds. Each worker has a KV cache of `cache_blocks` blocks of
//! `block_tokens` tokens. A request's blocks are pinned from admission until it finishes; blocks
//! of finished requests stay cached and are evicted least recently used when room is needed. A
//! worker serves one queue first come, first served: the head request is admitted when its
//! uncached blocks fit (free plus evictable blocks), then prefilled, taking `prefill_base_ms +
//! prefill_ms_per_token * uncached tokens`; while nothing can be prefilled the worker runs decode
//! steps over its running requests, each taking `decode_base_ms + decode_ms_per_token * (the
//! running requests' context tokens)` and producing one token per request. A request larger than
//! the whole cache can never be admitted: it is reported, never dropped silently.
//!
//! The router books each request in its ledger when routing it, marks the prefill complete and
//! frees it when the worker does. In exact mode the index learns every block a worker stores and
//! evicts from its KV events; in approximate mode the router records its own decisions as
//! predictions that expire after `prediction_ttl_ms`.

// Why: the simulation converts between counts (far below 2^53), times in ms and window indices;
// every such value is non-negative and small.
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss,
    reason = "counts and times of a simulation, non-negative and far below 2^53"
)]

use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::fmt::Write as _;

use libroute_core::catalog::CatalogPolicy;
use libroute_core::catalog_config::PolicyConfig;
use libroute_core::{
    BlockSlot, KvEvent, Ledger, LoadSlot, PredictionRecord, PredictionSlot, Predictions,
    PrefixIndex, Request, RequestSlot, Router, Row, Selector, Tier, WorkerInputs, WorkerKey,
    WorkerSlot,
};
use serde::Serialize;

/// One request of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRequest {
    /// Arrival time in milliseconds.
    pub arrival_ms: f64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Tokens to generate (at least 1 is simulated).
    pub output_tokens: u64,
    /// Chained block hashes of the prompt, one per `block_tokens` tokens.
    pub blocks: Vec<u64>,
    /// The conversation it belongs to, when the workload knows (for session affinity).
    pub session: Option<u64>,
}

/// A workload: requests in arrival order and their block size.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// The requests.
    pub requests: Vec<TraceRequest>,
    /// Tokens per block.
    pub block_tokens: u32,
}

/// Parses a Mooncake-format JSONL trace (`timestamp` ms, `input_length`, `output_length`,
/// `hash_ids` of `block_tokens`-token blocks).
///
/// # Errors
///
/// The line number and what is wrong with it.
pub fn parse_mooncake(text: &str, block_tokens: u32) -> Result<Trace, String> {
    #[derive(serde::Deserialize)]
    struct Line {
        timestamp: f64,
        input_length: u64,
        output_length: u64,
        hash_ids: Vec<u64>,
    }
    let mut requests = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let l: Line =
            serde_json::from_str(line).map_err(|e| format!("trace line {}: {e}", i + 1))?;
        if !l.timestamp.is_finite() || l.timestamp < 0.0 {
            return Err(format!("trace line {}: timestamp {}", i + 1, l.timestamp));
        }
        if l.input_length > l.hash_ids.len() as u64 * u64::from(block_tokens) {
            return Err(format!(
                "trace line {}: input_length {} is longer than its {} hash_ids of {block_tokens} tokens",
                i + 1,
                l.input_length,
                l.hash_ids.len()
            ));
        }
        requests.push(TraceRequest {
            arrival_ms: l.timestamp,
            input_tokens: l.input_length,
            output_tokens: l.output_length,
            blocks: l.hash_ids,
            session: None,
        });
    }
    requests.sort_by(|a, b| a.arrival_ms.total_cmp(&b.arrival_ms));
    Ok(Trace {
        requests,
        block_tokens,
    })
}

/// The built-in synthetic workload's parameters (all settable from the command line).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Synthetic {
    /// Requests to generate.
    pub requests: usize,
    /// Applications, each with its own shared system prompt.
    pub apps: u64,
    /// Blocks of each application's system prompt.
    pub system_blocks: u64,
    /// Conversations; their popularity is Zipf-distributed with exponent `zipf`.
    pub sessions: u64,
    /// Zipf exponent of session popularity.
    pub zipf: f64,
    /// Blocks a turn adds to its conversation's context (user message and answer).
    pub turn_blocks: u64,
    /// Turns after which a session starts a new conversation (a fresh context).
    pub max_turns: u64,
    /// Mean arrivals per second (Poisson).
    pub rate_per_s: f64,
    /// Mean output tokens (exponentially distributed, at least 1).
    pub output_tokens: f64,
    /// Tokens per block.
    pub block_tokens: u32,
    /// The generator's seed.
    pub seed: u64,
}

impl Default for Synthetic {
    fn default() -> Self {
        Self {
            requests: 4000,
            apps: 4,
            system_blocks: 8,
            sessions: 400,
            zipf: 1.1,
            turn_blocks: 2,
            max_turns: 8,
            rate_per_s: 20.0,
            output_tokens: 200.0,
            block_tokens: 512,
            seed: 42,
        }
    }
}

/// Parses a command-line number, naming the flag it was given to when it is not one.
///
/// # Errors
///
/// `FLAG: "VALUE" is not a valid number`.
pub fn number<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{flag}: {v:?} is not a valid number"))
}

impl Synthetic {
    /// The command-line flags [`Synthetic::set`] takes, one per field but `block_tokens` (which
    /// the commands share with their trace readers).
    pub const FLAGS: [&'static str; 10] = [
        "--requests",
        "--apps",
        "--system-blocks",
        "--sessions",
        "--zipf",
        "--turn-blocks",
        "--max-turns",
        "--rate",
        "--output-tokens",
        "--seed",
    ];

    /// Sets the field behind one of [`Synthetic::FLAGS`] from its command-line value.
    ///
    /// # Errors
    ///
    /// The value is not a number of the field's type, or the flag is not one of `FLAGS`.
    pub fn set(&mut self, flag: &str, v: &str) -> Result<(), String> {
        match flag {
            "--requests" => self.requests = number(flag, v)?,
            "--apps" => self.apps = number(flag, v)?,
            "--system-blocks" => self.system_blocks = number(flag, v)?,
            "--sessions" => self.sessions = number(flag, v)?,
            "--zipf" => self.zipf = number(flag, v)?,
            "--turn-blocks" => self.turn_blocks = number(flag, v)?,
            "--max-turns" => self.max_turns = number(flag, v)?,
            "--rate" => self.rate_per_s = number(flag, v)?,
            "--output-tokens" => self.output_tokens = number(flag, v)?,
            "--seed" => self.seed = number(flag, v)?,
            _ => return Err(format!("{flag} is not a synthetic-workload option")),
        }
        Ok(())
    }

    /// Generates the workload: each request is the next turn of a Zipf-chosen conversation; its
    /// prompt is its app's system prompt, then the conversation so far, then the new turn.
    #[must_use]
    pub fn generate(&self) -> Trace {
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let weights: Vec<f64> = (1..=self.sessions.max(1))
            .map(|k| 1.0 / (k as f64).powf(self.zipf))
            .collect();
        let total: f64 = weights.iter().sum();
        let mut turns = vec![0u64; weights.len()];
        let mut now = 0.0;
        let mut requests = Vec::with_capacity(self.requests);
        for _ in 0..self.requests {
            now += -(1.0 - rng.f64()).ln() / self.rate_per_s * 1000.0;
            let mut x = rng.f64() * total;
            let mut session = weights.len() - 1;
            for (k, w) in weights.iter().enumerate() {
                if x < *w {
                    session = k;
                    break;
                }
                x -= w;
            }
            let app = session as u64 % self.apps.max(1);
            turns[session] += 1;
            let turn = (turns[session] - 1) % self.max_turns.max(1) + 1;
            // Each conversation of a session has its own context, so its blocks are its own.
            let conversation =
                ((session as u64) << 20) | ((turns[session] - 1) / self.max_turns.max(1));
            let mut blocks: Vec<u64> = (0..self.system_blocks)
                .map(|b| chain(app, b, u64::MAX))
                .collect();
            for b in 0..turn * self.turn_blocks {
                blocks.push(chain(app, self.system_blocks + b, conversation));
            }
            let output = (-(1.0 - rng.f64()).ln() * self.output_tokens).max(1.0) as u64;
            requests.push(TraceRequest {
                arrival_ms: now,
                input_tokens: blocks.len() as u64 * u64::from(self.block_tokens),
                output_tokens: output,
                blocks,
                session: Some(conversation),
            });
        }
        Trace {
            requests,
            block_tokens: self.block_tokens,
        }
    }
}

/// A block hash: a function of the app, the position and the conversation (the system prompt's
/// blocks pass `u64::MAX`), so equal hashes mean equal prefixes, as chained hashes do.
fn chain(app: u64, position: u64, session: u64) -> u64 {
    let mut z = app
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(position.wrapping_mul(0xbf58_476d_1ce4_e5b9))
        ^ session.wrapping_mul(0x94d0_49bb_1331_11eb);
    z = (z ^ (z >> 31)).wrapping_mul(0xd6e8_feb8_6659_fd93);
    z ^ (z >> 32)
}

/// The fleet and its timing constants.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fleet {
    /// Workers.
    pub workers: usize,
    /// KV capacity of each worker, in blocks.
    pub cache_blocks: u64,
    /// Fixed cost of a prefill, ms.
    pub prefill_base_ms: f64,
    /// Prefill cost per uncached prompt token, ms.
    pub prefill_ms_per_token: f64,
    /// Fixed cost of a decode step, ms.
    pub decode_base_ms: f64,
    /// Decode step cost per context token of the running requests, ms.
    pub decode_ms_per_token: f64,
    /// Arrival times are divided by this (2 = twice the offered load).
    pub load: f64,
    /// Approximate mode: route on the router's own predictions instead of KV events.
    pub approximate: bool,
    /// Approximate mode: how long a prediction lives, ms.
    pub prediction_ttl_ms: u64,
}

impl Default for Fleet {
    fn default() -> Self {
        Self {
            workers: 8,
            cache_blocks: 2048,
            prefill_base_ms: 5.0,
            prefill_ms_per_token: 0.05,
            decode_base_ms: 10.0,
            decode_ms_per_token: 0.0002,
            load: 1.0,
            approximate: false,
            prediction_ttl_ms: 120_000,
        }
    }
}

/// What a replay measured for one policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The policy's name.
    pub policy: String,
    /// Requests in the trace.
    pub requests: usize,
    /// Requests served to completion.
    pub finished: usize,
    /// Requests larger than a worker's whole cache, reported and not served.
    pub not_admitted: usize,
    /// Prompt tokens served from a worker's cache, over all prompt tokens of finished requests.
    pub hit_rate: f64,
    /// The same with one infinite cache shared by all: the trace's ceiling.
    pub hit_rate_ceiling: f64,
    /// Mean over 10 s windows of (max / mean) busy time across workers.
    pub imbalance: f64,
    /// Time to first token proxy (queue wait + prefill), ms.
    pub ttft_mean_ms: f64,
    /// Its median.
    pub ttft_p50_ms: f64,
    /// Its 90th percentile.
    pub ttft_p90_ms: f64,
    /// Its 99th percentile.
    pub ttft_p99_ms: f64,
    /// Inter-token latency proxy: mean over requests of decode time per output token, ms.
    pub itl_mean_ms: f64,
    /// First arrival to last completion, s.
    pub makespan_s: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Ev {
    at: f64,
    seq: u64,
    kind: EvKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EvKind {
    Arrival(usize),
    WorkerDone(usize),
}

impl Eq for Ev {}

impl Ord for Ev {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.at.total_cmp(&self.at).then(other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Ev {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// One block in a worker's cache.
#[derive(Debug, Clone, Copy)]
struct Cached {
    pins: u32,
    /// LRU stamp (position in `lru` while unpinned).
    stamp: u64,
}

#[derive(Debug, Default)]
struct Worker {
    cache: HashMap<u64, Cached>,
    /// Unpinned blocks by last use: the eviction order.
    lru: BTreeSet<(u64, u64)>,
    queue: VecDeque<usize>,
    running: Vec<usize>,
    busy: bool,
    /// Busy time per 10 s window.
    busy_ms: Vec<f64>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    prefill_end: f64,
    generated: u64,
    /// Time spent in the decode steps that produced its tokens.
    decode_ms: f64,
    hit_tokens: u64,
    /// Whether the ledger was told the prefill completed.
    prefill_reported: bool,
    done: bool,
}

const WINDOW_MS: f64 = 10_000.0;

/// How long the blocks of a routed request count as cached on its worker before its KV events
/// arrive, for policies that declare PENDING (exact mode): longer than any prefill short of
/// saturation, shorter than the time a used block stays in an LRU cache.
pub const PENDING_TTL_MS: u64 = 30_000;

/// Where the simulated fleet's routing goes: the decisions, and what the router is told.
///
/// [`replay`] routes with one in-process [`Router`]; a host that routes elsewhere (router
/// replicas over a message bus, another library) implements this to run the same fleet.
pub trait Placement {
    /// Routes request `i` (its `hashes` and `request`) at `now_ms`; `rows` holds one row per
    /// worker, worker `k` in row `k`, reset to [`Row::new`]. Returns the chosen row.
    ///
    /// # Errors
    ///
    /// A routing failure the simulation cannot continue from.
    fn route(
        &mut self,
        i: usize,
        request: &Request<'_>,
        hashes: &[u64],
        rows: &mut [Row],
        now_ms: f64,
    ) -> Result<usize, String>;

    /// Request `i`'s prefill completed at `at_ms`.
    ///
    /// # Errors
    ///
    /// The router refused it (a bug).
    fn prefill_complete(&mut self, i: usize, at_ms: f64) -> Result<(), String>;

    /// Request `i` finished.
    ///
    /// # Errors
    ///
    /// The router refused it (a bug).
    fn free(&mut self, i: usize) -> Result<(), String>;

    /// A worker's KV event (exact mode only).
    fn kv(&mut self, event: &KvEvent<'_>);
}

type LocalRouter =
    Router<Vec<BlockSlot<1>>, Vec<WorkerSlot>, Vec<RequestSlot>, Vec<LoadSlot>, Vec<u64>, 1>;

/// One in-process [`Router`] with `policy`: the placement [`replay`] uses.
struct Local<'p> {
    router: LocalRouter,
    predictions: Predictions<Vec<PredictionSlot>, Vec<PredictionRecord>>,
    /// Whether routing records predictions (approximate mode, or a policy declaring PENDING).
    predicting: bool,
    selector: Box<Selector<64>>,
    policy: &'p CatalogPolicy,
}

impl<'p> Local<'p> {
    fn new(trace: &Trace, fleet: &Fleet, policy: &'p CatalogPolicy) -> Result<Self, String> {
        let w = fleet.workers;
        let reqs = &trace.requests;
        let index = PrefixIndex::<_, _, 1>::new(
            vec![
                BlockSlot::<1>::empty();
                (w as u64 * fleet.cache_blocks * 4)
                    .next_power_of_two()
                    .max(1024) as usize
            ],
            vec![WorkerSlot::empty(); 128],
        )
        .map_err(|e| e.to_string())?;
        let ledger = Ledger::new(
            vec![RequestSlot::empty(); (reqs.len() * 2).next_power_of_two().max(64)],
            vec![LoadSlot::empty(); 128],
            vec![0u64; 64],
        )
        .map_err(|e| e.to_string())?;
        let mut router = Router::new(index, ledger, 0.0, 0.0);
        // One prediction per (block, worker) routed within the TTL: room for as many as the workers'
        // caches hold, twice over (the map's usable half).
        let prediction_records = (w as u64 * fleet.cache_blocks * 2).max(1) as usize;
        // Predictions stand in for KV events in approximate mode; beside them, for a policy that
        // declares PENDING, they are the blocks of requests routed and not yet computed.
        let pending = policy
            .inputs(Request::new(1, trace.block_tokens.max(1)).leg())
            .contains(WorkerInputs::PENDING);
        let predictions = Predictions::new(
            vec![PredictionSlot::empty(); (prediction_records * 2).next_power_of_two().max(64)],
            vec![PredictionRecord::default(); prediction_records],
            if fleet.approximate {
                fleet.prediction_ttl_ms
            } else {
                PENDING_TTL_MS
            },
        )
        .map_err(|e| e.to_string())?;
        let keys: Vec<WorkerKey> = (0..w as u64).map(|i| WorkerKey::new(i, 0)).collect();
        for &k in &keys {
            router.ledger.add_worker(k).map_err(|e| e.to_string())?;
        }
        Ok(Self {
            router,
            predictions,
            predicting: fleet.approximate || pending,
            selector: Box::new(Selector::<64>::with_entropy(0x5eed)),
            policy,
        })
    }
}

impl Placement for Local<'_> {
    fn route(
        &mut self,
        i: usize,
        request: &Request<'_>,
        hashes: &[u64],
        rows: &mut [Row],
        now_ms: f64,
    ) -> Result<usize, String> {
        self.router
            .route_at(
                self.predicting.then_some(&mut self.predictions),
                self.policy,
                &mut self.selector,
                request,
                hashes,
                rows,
                i as u64,
                now_ms,
            )
            .map(|s| s.row)
            .map_err(|e| format!("request {i}: {e}"))
    }

    fn prefill_complete(&mut self, i: usize, at_ms: f64) -> Result<(), String> {
        self.router
            .ledger
            .prefill_complete_at(i as u64, at_ms)
            .map_err(|e| e.to_string())
    }

    fn free(&mut self, i: usize) -> Result<(), String> {
        self.router.ledger.free(i as u64).map_err(|e| e.to_string())
    }

    fn kv(&mut self, event: &KvEvent<'_>) {
        let _ = self.router.index.apply(event);
    }
}

/// Replays `trace` through `fleet` with `policy`, routed by one in-process [`Router`].
///
/// # Errors
///
/// A routing failure the simulation cannot continue from (a bug or an impossible policy).
pub fn replay(
    name: &str,
    trace: &Trace,
    fleet: &Fleet,
    policy: &CatalogPolicy,
) -> Result<Report, String> {
    check_fleet(fleet)?;
    let mut local = Local::new(trace, fleet, policy)?;
    replay_with(name, trace, fleet, &mut local)
}

fn check_fleet(fleet: &Fleet) -> Result<(), String> {
    let w = fleet.workers;
    if w == 0 || w > 64 {
        return Err(format!("{w} workers: the simulator runs 1 to 64"));
    }
    Ok(())
}

/// Replays `trace` through `fleet`, routed by `placement` (worker `k` is `WorkerKey::new(k, 0)`;
/// its KV events go to the placement in exact mode).
///
/// # Errors
///
/// A routing failure the simulation cannot continue from (a bug or an impossible policy).
#[allow(clippy::too_many_lines, reason = "one event loop, kept in one place")]
pub fn replay_with(
    name: &str,
    trace: &Trace,
    fleet: &Fleet,
    placement: &mut impl Placement,
) -> Result<Report, String> {
    check_fleet(fleet)?;
    let w = fleet.workers;
    let reqs = &trace.requests;
    let bt = u64::from(trace.block_tokens);
    let keys: Vec<WorkerKey> = (0..w as u64).map(|i| WorkerKey::new(i, 0)).collect();
    let mut rows: Vec<Row> = keys.iter().map(|&k| Row::new(k)).collect();
    let mut workers: Vec<Worker> = (0..w).map(|_| Worker::default()).collect();
    let mut progress = vec![Progress::default(); reqs.len()];
    let mut events = BinaryHeap::new();
    let mut seq = 0u64;
    let mut stamp = 0u64;
    for (i, r) in reqs.iter().enumerate() {
        seq += 1;
        events.push(Ev {
            at: r.arrival_ms / fleet.load,
            seq,
            kind: EvKind::Arrival(i),
        });
    }
    let mut not_admitted = 0usize;
    let mut last_finish = 0.0f64;
    let first_arrival = reqs.first().map_or(0.0, |r| r.arrival_ms / fleet.load);
    let mut removed: Vec<u64> = Vec::new();

    while let Some(ev) = events.pop() {
        let now = ev.at;
        let worker_index = match ev.kind {
            EvKind::Arrival(i) => {
                let r = &reqs[i];
                if r.blocks.len() as u64 > fleet.cache_blocks {
                    not_admitted += 1;
                    continue;
                }
                for row in &mut rows {
                    *row = Row::new(row.worker);
                }
                let mut request = Request::new(r.input_tokens.max(1), trace.block_tokens);
                if let Some(session) = r.session {
                    request = request.session(session);
                }
                let k = placement.route(i, &request, &r.blocks, &mut rows, now)?;
                workers[k].queue.push_back(i);
                k
            }
            EvKind::WorkerDone(k) => {
                workers[k].busy = false;
                k
            }
        };
        let k = worker_index;
        if workers[k].busy {
            continue;
        }
        // Finish requests that produced all their tokens (after a decode step).
        let running = std::mem::take(&mut workers[k].running);
        let wk = &mut workers[k];
        for i in running {
            let p = &mut progress[i];
            if !p.prefill_reported && p.prefill_end <= now {
                p.prefill_reported = true;
                placement.prefill_complete(i, p.prefill_end)?;
            }
            if p.generated >= reqs[i].output_tokens.max(1) {
                p.done = true;
                last_finish = last_finish.max(now);
                for &h in &reqs[i].blocks {
                    if let Some(c) = wk.cache.get_mut(&h) {
                        c.pins -= 1;
                        if c.pins == 0 {
                            stamp += 1;
                            c.stamp = stamp;
                            wk.lru.insert((stamp, h));
                        }
                    }
                }
                placement.free(i)?;
            } else {
                wk.running.push(i);
            }
        }
        // Admit and prefill the head of the queue if it fits.
        let mut op_ms = None;
        if let Some(&i) = workers[k].queue.front() {
            let r = &reqs[i];
            let wk = &mut workers[k];
            let cached_prefix = r
                .blocks
                .iter()
                .take_while(|h| wk.cache.contains_key(h))
                .count() as u64;
            let mut missing = 0u64;
            let mut own_evictable = 0u64;
            for h in &r.blocks {
                match wk.cache.get(h) {
                    None => missing += 1,
                    Some(c) if c.pins == 0 => own_evictable += 1,
                    Some(_) => {}
                }
            }
            let free = fleet.cache_blocks - wk.cache.len() as u64;
            let evictable = wk.lru.len() as u64 - own_evictable;
            if missing <= free + evictable {
                wk.queue.pop_front();
                // Pin what the request already finds, then evict the least recently used
                // unpinned blocks until its missing blocks fit, then store those.
                for &h in &r.blocks {
                    if let Some(c) = wk.cache.get_mut(&h) {
                        if c.pins == 0 {
                            wk.lru.remove(&(c.stamp, h));
                        }
                        c.pins += 1;
                    }
                }
                removed.clear();
                while wk.cache.len() as u64 + missing > fleet.cache_blocks {
                    let Some((_, h)) = wk.lru.pop_first() else {
                        break;
                    };
                    wk.cache.remove(&h);
                    removed.push(h);
                }
                for &h in &r.blocks {
                    wk.cache.entry(h).or_insert(Cached { pins: 1, stamp: 0 });
                }
                let hit_tokens = (cached_prefix * bt).min(r.input_tokens);
                let uncached = r.input_tokens - hit_tokens;
                let ms = fleet.prefill_base_ms + fleet.prefill_ms_per_token * uncached as f64;
                progress[i].hit_tokens = hit_tokens;
                progress[i].prefill_end = now + ms;
                wk.running.push(i);
                op_ms = Some(ms);
                if !fleet.approximate {
                    if !removed.is_empty() {
                        placement.kv(&KvEvent::Removed {
                            worker: keys[k],
                            tier: Tier::Device,
                            hashes: &removed,
                        });
                    }
                    placement.kv(&KvEvent::Stored {
                        worker: keys[k],
                        tier: Tier::Device,
                        hashes: &r.blocks,
                    });
                }
            }
        }
        if op_ms.is_none() {
            let wk = &workers[k];
            let prefilled: Vec<usize> = wk
                .running
                .iter()
                .copied()
                .filter(|&i| progress[i].prefill_end <= now)
                .collect();
            if !prefilled.is_empty() {
                let context: u64 = prefilled
                    .iter()
                    .map(|&i| reqs[i].input_tokens + progress[i].generated)
                    .sum();
                let ms = fleet.decode_base_ms + fleet.decode_ms_per_token * context as f64;
                for &i in &prefilled {
                    progress[i].generated += 1;
                    progress[i].decode_ms += ms;
                }
                op_ms = Some(ms);
            }
        }
        if let Some(ms) = op_ms {
            let wk = &mut workers[k];
            wk.busy = true;
            account_busy(&mut wk.busy_ms, now, ms);
            seq += 1;
            events.push(Ev {
                at: now + ms,
                seq,
                kind: EvKind::WorkerDone(k),
            });
        }
    }

    let finished: Vec<usize> = (0..reqs.len()).filter(|&i| progress[i].done).collect();
    let served_tokens: u64 = finished.iter().map(|&i| reqs[i].input_tokens).sum();
    let hit_tokens: u64 = finished.iter().map(|&i| progress[i].hit_tokens).sum();
    let mut ttft: Vec<f64> = finished
        .iter()
        .map(|&i| progress[i].prefill_end - reqs[i].arrival_ms / fleet.load)
        .collect();
    ttft.sort_by(f64::total_cmp);
    let windows = workers.iter().map(|w| w.busy_ms.len()).max().unwrap_or(0);
    let mut ratios = Vec::new();
    for win in 0..windows {
        let busy: Vec<f64> = workers
            .iter()
            .map(|w| w.busy_ms.get(win).copied().unwrap_or(0.0))
            .collect();
        let mean = busy.iter().sum::<f64>() / busy.len() as f64;
        if mean > 0.0 {
            ratios.push(busy.iter().copied().fold(0.0, f64::max) / mean);
        }
    }
    Ok(Report {
        policy: name.to_owned(),
        requests: reqs.len(),
        finished: finished.len(),
        not_admitted,
        hit_rate: ratio(hit_tokens, served_tokens),
        hit_rate_ceiling: ceiling(trace, &finished),
        imbalance: mean(&ratios),
        ttft_mean_ms: mean(&ttft),
        ttft_p50_ms: percentile(&ttft, 0.50),
        ttft_p90_ms: percentile(&ttft, 0.90),
        ttft_p99_ms: percentile(&ttft, 0.99),
        itl_mean_ms: mean(
            &finished
                .iter()
                .map(|&i| progress[i].decode_ms / progress[i].generated.max(1) as f64)
                .collect::<Vec<_>>(),
        ),
        makespan_s: (last_finish - first_arrival).max(0.0) / 1000.0,
    })
}

fn account_busy(windows: &mut Vec<f64>, start: f64, ms: f64) {
    let mut t = start;
    let end = start + ms;
    while t < end {
        let win = (t / WINDOW_MS) as usize;
        let win_end = (win as f64 + 1.0) * WINDOW_MS;
        let slice = end.min(win_end) - t;
        if windows.len() <= win {
            windows.resize(win + 1, 0.0);
        }
        windows[win] += slice;
        t += slice.max(f64::MIN_POSITIVE);
    }
}

#[allow(clippy::cast_precision_loss, reason = "ratios of token counts")]
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// The `q` quantile of sorted `xs` (nearest rank).
fn percentile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    xs[rank - 1]
}

/// The token-weighted hit rate of one infinite cache shared by every worker, over the finished
/// requests in arrival order: the most any routing could reach.
fn ceiling(trace: &Trace, finished: &[usize]) -> f64 {
    let bt = u64::from(trace.block_tokens);
    let mut seen = std::collections::HashSet::new();
    let (mut hit, mut total) = (0u64, 0u64);
    let mut order: Vec<usize> = finished.to_vec();
    order.sort_unstable();
    for i in order {
        let r = &trace.requests[i];
        let prefix = r.blocks.iter().take_while(|h| seen.contains(*h)).count() as u64;
        hit += (prefix * bt).min(r.input_tokens);
        total += r.input_tokens;
        seen.extend(r.blocks.iter().copied());
    }
    ratio(hit, total)
}

/// The catalog's builtins with the parameters the comparison uses.
#[must_use]
pub fn builtin_policies(fleet: &Fleet) -> Vec<(String, String)> {
    [
        (
            "ttft",
            format!(
                r#"{{"type": "ttft", "kv_capacity_blocks": {}}}"#,
                fleet.cache_blocks
            ),
        ),
        ("default", r#"{"type": "default"}"#.to_owned()),
        (
            "dynamo_two_tier",
            r#"{"type": "dynamo_two_tier"}"#.to_owned(),
        ),
        (
            "sglang_cache_aware",
            r#"{"type": "sglang_cache_aware"}"#.to_owned(),
        ),
        (
            "llm_d",
            format!(
                r#"{{"type": "llm_d", "kv_capacity_blocks": {}}}"#,
                fleet.cache_blocks
            ),
        ),
        ("least_loaded", r#"{"type": "least_loaded"}"#.to_owned()),
        (
            "session_affinity",
            r#"{"type": "composed", "scorers": [{"type": "session_affinity", "weight": 1000},
                {"type": "least_loaded"}]}"#
                .to_owned(),
        ),
        (
            "power_of_two",
            r#"{"type": "power_of_two", "seed": 1}"#.to_owned(),
        ),
        ("round_robin", r#"{"type": "round_robin"}"#.to_owned()),
        ("random", r#"{"type": "random", "seed": 1}"#.to_owned()),
    ]
    .into_iter()
    .map(|(n, j)| (n.to_owned(), j))
    .collect()
}

/// The policies a command compares: `builtin`, then every `"name": {config}` of the JSON object
/// in `policies_file`, kept to the names in `only` when it is given.
///
/// # Errors
///
/// The file cannot be read or is not a JSON object, a policy's configuration is invalid, or
/// `only` names a policy there is not.
pub fn choose_policies(
    mut all: Vec<(String, String)>,
    policies_file: Option<&str>,
    only: Option<&[String]>,
) -> Result<Vec<(String, String)>, String> {
    if let Some(path) = policies_file {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let named: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
        for (name, config) in named {
            all.push((name, config.to_string()));
        }
    }
    if let Some(only) = only {
        for name in only {
            if !all.iter().any(|(n, _)| n == name) {
                return Err(format!("--only: no policy named {name:?}"));
            }
        }
        all.retain(|(n, _)| only.contains(n));
    }
    // Every configuration is checked before anything runs.
    for (name, json) in &all {
        policy(json).map_err(|e| format!("policy {name}: {e}"))?;
    }
    Ok(all)
}

/// Builds a policy from its JSON.
///
/// # Errors
///
/// The configuration error, naming what is wrong.
pub fn policy(json: &str) -> Result<CatalogPolicy, String> {
    libroute_core::catalog_config::parse::<PolicyConfig>(json)
        .and_then(|config| config.build())
        .map_err(|e| e.to_string())
}

/// The reports as a table.
#[must_use]
pub fn table(reports: &[Report]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>6}",
        "policy",
        "hit",
        "ceiling",
        "imbalance",
        "ttft mean",
        "ttft p50",
        "ttft p90",
        "ttft p99",
        "itl",
        "makespan",
        "lost"
    );
    for r in reports {
        let _ = writeln!(
            out,
            "{:<20} {:>7.1}% {:>7.1}% {:>9.2} {:>7.0}ms {:>7.0}ms {:>7.0}ms {:>7.0}ms {:>6.1}ms {:>8.1}s {:>6}",
            r.policy,
            100.0 * r.hit_rate,
            100.0 * r.hit_rate_ceiling,
            r.imbalance,
            r.ttft_mean_ms,
            r.ttft_p50_ms,
            r.ttft_p90_ms,
            r.ttft_p99_ms,
            r.itl_mean_ms,
            r.makespan_s,
            r.not_admitted
        );
    }
    out
}

const COLORS: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A horizontal bar chart: one bar per `(label, value)`, and an optional dashed reference line
/// (the hit-rate ceiling).
#[must_use]
pub fn svg_bars(title: &str, bars: &[(String, f64)], reference: Option<f64>) -> String {
    let (left, width, row) = (170.0, 420.0, 26.0);
    let height = 50.0 + row * bars.len() as f64 + 30.0;
    let max = bars
        .iter()
        .map(|b| b.1)
        .chain(reference)
        .fold(0.0f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let x = |v: f64| left + width * v / max;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{height:.0}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"22\" font-size=\"14\">{}</text>\n",
        left + width + 90.0,
        escape(title)
    );
    for (k, (label, value)) in bars.iter().enumerate() {
        let y = 40.0 + row * k as f64;
        let _ = write!(
            s,
            "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">{}</text>\n\
             <rect x=\"{left:.0}\" y=\"{y:.0}\" width=\"{:.1}\" height=\"{:.0}\" fill=\"{}\"/>\n\
             <text x=\"{:.1}\" y=\"{:.0}\">{value:.1}</text>\n",
            left - 6.0,
            y + 15.0,
            escape(label),
            x(*value) - left,
            row - 6.0,
            COLORS[k % COLORS.len()],
            x(*value) + 4.0,
            y + 15.0
        );
    }
    if let Some(r) = reference {
        let _ = write!(
            s,
            "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"34\" y2=\"{1:.0}\" stroke=\"black\" stroke-dasharray=\"4 3\"/>\n\
             <text x=\"{0:.1}\" y=\"{2:.0}\" text-anchor=\"middle\">ceiling {r:.1}</text>\n",
            x(r),
            height - 24.0,
            height - 10.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// A line chart of `(x, y)` series, one per policy.
#[must_use]
pub fn svg_lines(title: &str, series: &[(String, Vec<(f64, f64)>)]) -> String {
    let (left, top, width, height) = (70.0, 40.0, 460.0, 300.0);
    let points = series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0.partial_cmp(&x1) != Some(std::cmp::Ordering::Less) {
        x1 = x0 + 1.0;
    }
    let y1 = y1.max(f64::MIN_POSITIVE) * 1.05;
    let px = |x: f64| left + width * (x - x0) / (x1 - x0);
    let py = |y: f64| top + height - height * y / y1;
    let (bottom, right) = (top + height, left + width);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"22\" font-size=\"14\">{}</text>\n\
         <line x1=\"{left}\" y1=\"{bottom}\" x2=\"{right}\" y2=\"{bottom}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{bottom}\" stroke=\"black\"/>\n",
        right + 170.0,
        bottom + 50.0,
        escape(title),
    );
    for tick in 0..=4 {
        let y = y1 * f64::from(tick) / 4.0;
        let _ = writeln!(
            s,
            "<text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">{y:.0}</text>",
            left - 6.0,
            py(y) + 4.0
        );
    }
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    for x in xs {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.0}\" text-anchor=\"middle\">{x}</text>",
            px(x),
            top + height + 18.0
        );
    }
    for (k, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            path.join(" ")
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.0}\" y=\"{:.0}\" fill=\"{color}\">{}</text>",
            left + width + 12.0,
            top + 14.0 + 18.0 * k as f64,
            escape(name)
        );
    }
    s.push_str("</svg>\n");
    s
}
