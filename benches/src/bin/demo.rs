//! `cargo demo`: routes a built-in stream of requests with shared prefixes over a small fleet,
//! printing every decision and its per-scorer breakdown.
//!
//! The workload is synthetic and seeded, so it runs anywhere and prints the same thing every
//! time: three applications whose requests share a system prompt, multi-turn sessions whose
//! prompts grow by one turn at a time, and a fleet of 6 workers whose KV caches hold a bounded
//! number of blocks. The policy is Dynamo's default cost plus a small queue-depth scorer, to show
//! how scorers compose and how a selection explains itself.

use std::collections::VecDeque;

use libroute_core::{
    Cache, Candidates, ComponentError, DefaultKnobs, Leg, Load, Policy, Request, RequestView, Row,
    Scorer, Selector, WorkerInputs, WorkerKey,
};

const WORKERS: u64 = 6;
const BLOCK: u32 = 16;
/// Blocks of KV cache per worker (oldest evicted first).
const CACHE_BLOCKS: usize = 160;
/// A request stays active for this many later requests, then frees its load.
const LIFETIME: usize = 10;

/// Half a block of cost per active request: a queue-depth term on top of the default cost.
struct QueueDepth;

impl Scorer for QueueDepth {
    fn inputs(&self, _leg: Leg) -> WorkerInputs {
        WorkerInputs::LOAD
    }
    fn score(
        &self,
        _: &RequestView<'_>,
        rows: &Candidates<'_>,
        costs: &mut [f64],
    ) -> Result<(), ComponentError> {
        for (cost, row) in costs.iter_mut().zip(rows.iter()) {
            *cost = 0.5 * row.load().map_or(0, |l| l.active_requests) as f64;
        }
        Ok(())
    }
}

/// One simulated worker: the block hashes it caches and its active load.
#[derive(Default)]
struct Worker {
    blocks: VecDeque<u64>,
    prefill_tokens: u64,
    decode_blocks: u64,
    requests: u64,
}

impl Worker {
    /// Leading blocks of `hashes` this worker holds.
    fn overlap(&self, hashes: &[u64]) -> u32 {
        let held = hashes
            .iter()
            .take_while(|h| self.blocks.contains(h))
            .count();
        u32::try_from(held).expect("a request has fewer than 2^32 blocks")
    }

    fn store(&mut self, hashes: &[u64]) {
        for &h in hashes {
            if let Some(pos) = self.blocks.iter().position(|&b| b == h) {
                self.blocks.remove(pos);
            }
            self.blocks.push_back(h);
            if self.blocks.len() > CACHE_BLOCKS {
                self.blocks.pop_front();
            }
        }
    }
}

/// A request of the synthetic workload: chained block hashes of its prompt.
struct Job {
    app: &'static str,
    session: u64,
    turn: u64,
    hashes: Vec<u64>,
}

fn chain(parent: u64, salt: u64) -> u64 {
    // A 64-bit mix (splitmix64 finalizer) of the parent hash and the block's content.
    let mut z = parent ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Three apps (system prompts of 12, 24 and 6 blocks), 9 sessions, 3 turns each, interleaved.
fn workload() -> Vec<Job> {
    let apps = [("chat", 12u64), ("code", 24), ("search", 6)];
    let mut jobs = Vec::new();
    for turn in 0..3 {
        for session in 0..9u64 {
            let (app, system) = apps[usize::try_from(session % 3).expect("small")];
            let mut hashes = Vec::new();
            let mut h = chain(0, system);
            for b in 0..system {
                h = chain(h, b);
                hashes.push(h);
            }
            // Each turn appends 4 + session blocks of conversation to the session's history.
            for t in 0..=turn {
                for b in 0..4 + session {
                    h = chain(h, 1000 * session + 100 * t + b);
                    hashes.push(h);
                }
            }
            jobs.push(Job {
                app,
                session,
                turn,
                hashes,
            });
        }
    }
    jobs
}

fn main() {
    let knobs = DefaultKnobs::default();
    let policy = Policy::new(
        (),
        (knobs.cost, QueueDepth),
        libroute_core::DefaultPicker { temperature: 0.0 },
    )
    .expect("two scorers")
    .with_seed(Some(42));
    let mut selector = Box::new(Selector::<64>::new());
    let mut fleet: Vec<Worker> = (0..WORKERS).map(|_| Worker::default()).collect();
    let mut active: VecDeque<(usize, u64, u64)> = VecDeque::new();
    let (mut hit_blocks, mut total_blocks) = (0u64, 0u64);

    println!(
        "libroute demo: {WORKERS} workers, {CACHE_BLOCKS}-block caches, {BLOCK}-token blocks, seed 42"
    );
    println!("policy: Dynamo default cost + queue depth (0.5 per active request), temperature 0\n");
    for (n, job) in workload().iter().enumerate() {
        let prompt = job.hashes.len() as u64 * u64::from(BLOCK);
        let request = Request::new(prompt, BLOCK).has_tier_matches(true);
        let rows: Vec<Row> = fleet
            .iter()
            .enumerate()
            .map(|(id, w)| {
                let device = w.overlap(&job.hashes);
                Row::new(WorkerKey::new(id as u64, 0))
                    .with_cache(Cache::from_tiers(device, 0, 0, 0.75, 0.25, BLOCK))
                    .with_load(Load {
                        available: true,
                        active_prefill_tokens: w.prefill_tokens,
                        active_decode_blocks: w.decode_blocks,
                        active_requests: w.requests,
                    })
            })
            .collect();
        let s = match policy.select(&mut selector, &request, &rows) {
            Ok(s) => s,
            Err(e) => {
                println!("req {n:2}: no selection: {e}");
                continue;
            }
        };
        let mut others: Vec<(usize, f64)> =
            selector.last_costs().filter(|&(r, _)| r != s.row).collect();
        others.sort_by(|a, b| a.1.total_cmp(&b.1));
        let chosen = &rows[s.row];
        println!(
            "req {n:2} {:<6} session {} turn {}: {:3} blocks -> worker {}  cost {:6.2} = default {:6.2} + queue {:4.2}  \
             (cached {:3}/{:3}; next best worker {} at {:6.2})",
            job.app,
            job.session,
            job.turn,
            s.request_blocks,
            s.worker,
            s.cost,
            s.contributions()[0],
            s.contributions()[1],
            chosen.device_blocks,
            s.request_blocks,
            others.first().map_or(usize::MAX, |o| o.0),
            others.first().map_or(f64::NAN, |o| o.1),
        );
        // Book the request: the host's job (the core only decides).
        hit_blocks += u64::from(chosen.device_blocks);
        total_blocks += s.request_blocks;
        let w = &mut fleet[s.row];
        let new_tokens = prompt - s.cached_tokens.min(prompt);
        w.prefill_tokens += new_tokens;
        w.decode_blocks += s.request_blocks;
        w.requests += 1;
        w.store(&job.hashes);
        active.push_back((s.row, new_tokens, s.request_blocks));
        if active.len() > LIFETIME {
            let (row, tokens, blocks) = active.pop_front().expect("non-empty");
            let w = &mut fleet[row];
            w.prefill_tokens -= tokens;
            w.decode_blocks -= blocks;
            w.requests -= 1;
        }
    }
    println!(
        "\ncache hit rate: {hit_blocks} of {total_blocks} prompt blocks ({:.1}%) served from a worker's cache",
        100.0 * hit_blocks as f64 / total_blocks as f64
    );
}
