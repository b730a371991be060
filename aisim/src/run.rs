//! One engine replay: a workload, an engine configuration and a placement, through aisimulate's
//! replayer; and what the replay measured, in the terms `cargo replay` reports.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use aisimulate_core::engine::{Backend, EngineConfig, TimingModelConfig};
use aisimulate_core::replay::loadgen::{MooncakeRow, ReplayRequestHashes, Trace as EngineTrace};
use aisimulate_core::replay::{
    CURRENT_REPLAY_SPEC_VERSION, ProviderSpec, ReplayAdapters, ReplayCaptureOptions,
    ReplayDeterminism, ReplayEngineFactory, ReplayReport, ReplayRequestContext, ReplayRuntimeInput,
    ReplaySpec, ReplayTerminalStatus, ReplayTopology, Replayer,
};
use anyhow::{Context as _, bail};
use libroute_benches::sim::Trace;
use serde::Serialize;

use crate::bridge::{BridgeConfig, BridgeStats, LibrouteComposition, Mode, PROVIDER};

/// The simulated engines: one aggregated pool of identical workers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Engine {
    /// The scheduler each worker runs: `vllm` or `sglang`.
    #[serde(serialize_with = "backend_name")]
    pub backend: Backend,
    /// Workers (one attention-DP rank each).
    pub workers: usize,
    /// KV cache of each worker, in blocks.
    pub kv_blocks: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Requests a worker runs at once.
    pub max_num_seqs: usize,
    /// Tokens a worker's forward pass takes (prefill chunks plus decode tokens).
    pub max_num_batched_tokens: usize,
    /// How long a forward pass takes.
    pub timing: Timing,
}

// Why: serde's `serialize_with` passes the field by reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn backend_name<S: serde::Serializer>(backend: &Backend, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match backend {
        Backend::Vllm => "vllm",
        Backend::Sglang => "sglang",
        Backend::Trtllm => "trtllm",
    })
}

/// The engine's timing model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// aisimulate's built-in fitted curves (the mocker's fallback): a prefill pass takes
    /// `16.5 + 0.0152 t + 4.21e-7 t^2` ms for `t` new tokens in the batch, a decode pass `5.74 +
    /// 54.0 u - 25.7 u^2` ms at KV-cache utilization `u`. No GPU or profile data needed.
    Polynomial,
    /// Every prefill pass and every decode pass takes a constant time (parity fixtures).
    Fixed {
        /// Prefill pass, ms.
        prefill_ms: f64,
        /// Decode pass, ms.
        decode_ms: f64,
    },
}

impl Default for Engine {
    fn default() -> Self {
        Self {
            backend: Backend::Vllm,
            workers: 8,
            kv_blocks: 16_384,
            block_size: 64,
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            timing: Timing::Polynomial,
        }
    }
}

impl Engine {
    /// The replay spec of this engine for a placement provider (`round_robin` for aisimulate's
    /// own composition, [`PROVIDER`] for libroute's).
    ///
    /// # Errors
    ///
    /// An engine setting aisimulate rejects.
    pub fn spec(&self, provider: &str, policy_json: Option<&str>) -> anyhow::Result<ReplaySpec> {
        let timing_model = match self.timing {
            Timing::Polynomial => TimingModelConfig::Polynomial,
            Timing::Fixed {
                prefill_ms,
                decode_ms,
            } => TimingModelConfig::Fixed {
                prefill_ms,
                decode_ms,
            },
        };
        let rank = EngineConfig {
            num_gpu_blocks: self.kv_blocks,
            block_size: self.block_size,
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            timing_model,
            ..EngineConfig::for_backend(self.backend)
        };
        let engine = aisimulate_core::replay::ReplayEngineConfig {
            rank,
            ..Default::default()
        };
        let config = policy_json
            .map(serde_json::from_str::<serde_json::Value>)
            .transpose()?
            .map_or(
                serde_json::Value::Null,
                |policy| serde_json::json!({ "policy": policy }),
            );
        Ok(ReplaySpec {
            version: CURRENT_REPLAY_SPEC_VERSION,
            topology: ReplayTopology::aggregated(self.workers),
            engine: serde_json::to_value(engine)?,
            adapters: ReplayAdapters {
                placement: ProviderSpec {
                    provider: provider.to_owned(),
                    config,
                },
                ..ReplayAdapters::default()
            },
            max_sim_time_ms: None,
            max_in_flight: None,
            record_per_request: true,
            sla: aisimulate_core::replay::SlaThresholds::default(),
            requests: Vec::new(),
        })
    }
}

/// The workload lowered for aisimulate: open-loop requests at their arrival times.
///
/// Requests without a session go through aisimulate's trace driver (prompts stay as one hash id
/// per trace block until a worker admits them). Requests with a session (the built-in workload's
/// conversations) are materialized, so that their session reaches the placement as a request
/// context while they still arrive at their own times: aisimulate treats the turns of an authored
/// session as a closed loop (each turn waits for the previous answer), which would give the two
/// simulators different arrivals.
fn lower(trace: &Trace, load: f64, engine_block_size: usize) -> anyhow::Result<ReplayRuntimeInput> {
    let rows: Vec<MooncakeRow> = trace
        .requests
        .iter()
        .map(|r| MooncakeRow {
            timestamp: Some(r.arrival_ms / load),
            input_length: Some(usize::try_from(r.input_tokens).unwrap_or(usize::MAX)),
            output_length: Some(usize::try_from(r.output_tokens.max(1)).unwrap_or(usize::MAX)),
            hash_ids: Some(r.blocks.clone()),
            ..MooncakeRow::default()
        })
        .collect();
    let block_tokens = trace.block_tokens as usize;
    let lowered = EngineTrace::from_mooncake_rows(rows, block_tokens)?;
    if trace.requests.iter().all(|r| r.session.is_none()) {
        return Ok(ReplayRuntimeInput::Workload(
            lowered.into_trace_driver_with_block_size(engine_block_size)?,
        ));
    }
    let mut requests = lowered.to_single_turn_requests()?;
    for (i, (request, source)) in requests.iter_mut().zip(&trace.requests).enumerate() {
        request.replay_context = Some(ReplayRequestContext {
            // Ordinal, so that every replay of the workload has the same ids.
            authored_id: format!("request-{}", i + 1),
            session_id: source.session.map(|s| format!("conversation-{s}")),
            turn_index: None,
            metadata: serde_json::Value::Null,
            prompt_token_source: aisimulate_core::replay::ReplayPromptTokenSource::Materialized,
            agentic: None,
        });
    }
    Ok(ReplayRuntimeInput::Requests(VecDeque::from(requests)))
}

fn capture() -> ReplayCaptureOptions {
    // Ordinal request ids instead of random ones: every replay of a workload is the same.
    ReplayCaptureOptions {
        determinism: ReplayDeterminism::CanonicalV1,
        ..ReplayCaptureOptions::default()
    }
}

/// How the router of a libroute replay is set up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Routing {
    /// Exact (KV events) or approximate (predictions).
    pub mode: Mode,
}

/// Replays `trace` at `load` (arrival times divided by it) through `engine`, placed by libroute's
/// router with the catalog policy `policy_json`; returns aisimulate's report and what the bridge
/// did.
///
/// # Errors
///
/// The workload, the engine settings or the policy rejected, a routing failure (named), or a
/// replay that ends with requests still booked in the ledger.
pub fn replay_libroute(
    trace: &Trace,
    load: f64,
    engine: &Engine,
    policy_json: &str,
    routing: Routing,
) -> anyhow::Result<(ReplayReport, BridgeStats)> {
    let spec = engine.spec(PROVIDER, Some(policy_json))?;
    let config = BridgeConfig {
        policy_json: policy_json.to_owned(),
        mode: routing.mode,
        block_size: u32::try_from(engine.block_size)?,
        index_blocks: engine
            .workers
            .saturating_mul(engine.kv_blocks)
            .saturating_mul(2),
        max_in_flight: trace.requests.len(),
    };
    let input = lower(trace, load, engine.block_size)?;
    let factory = ReplayEngineFactory::new();
    let (report, stats) = match routing.mode {
        Mode::Exact => {
            let composition = LibrouteComposition::<true>::new(config);
            let stats = composition.stats();
            let report = Replayer::with_composition(spec, factory, composition)?
                .with_runtime_input(input)
                .with_capture_options(capture())
                .run()?;
            (report, *stats.borrow())
        }
        Mode::Approximate { .. } => {
            let composition = LibrouteComposition::<false>::new(config);
            let stats = composition.stats();
            let report = Replayer::with_composition(spec, factory, composition)?
                .with_runtime_input(input)
                .with_capture_options(capture())
                .run()?;
            (report, *stats.borrow())
        }
    };
    if stats.booked_at_end != 0 || stats.load_at_end != 0 || stats.freed != stats.placed {
        bail!(
            "the ledger did not return to empty: {} placed, {} freed, {} still booked, load {} left",
            stats.placed,
            stats.freed,
            stats.booked_at_end,
            stats.load_at_end
        );
    }
    Ok((report, stats))
}

/// Replays `trace` at `load` through `engine` with aisimulate's own built-in placement
/// (`RoundRobinComposition`): the reference the bridge's `round_robin` must reproduce.
///
/// # Errors
///
/// The workload or the engine settings rejected.
pub fn replay_reference_round_robin(
    trace: &Trace,
    load: f64,
    engine: &Engine,
) -> anyhow::Result<ReplayReport> {
    let spec = engine.spec("round_robin", None)?;
    let input = lower(trace, load, engine.block_size)?;
    Ok(Replayer::new(spec, ReplayEngineFactory::new())?
        .with_runtime_input(input)
        .with_capture_options(capture())
        .run()?)
}

/// What an engine replay measured for one policy: the columns of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The policy's name.
    pub policy: String,
    /// Requests in the workload.
    pub requests: usize,
    /// Requests that completed.
    pub completed: usize,
    /// Requests that did not complete (rejected by the engine: larger than a worker's cache).
    pub lost: usize,
    /// Prompt tokens found in the chosen worker's KV cache at first admission, over all prompt
    /// tokens (aisimulate's `first_admission_prefix_cache_reused_ratio`).
    pub hit_rate: f64,
    /// The same with one infinite cache shared by all workers: the most any routing can reach.
    pub hit_rate_ceiling: f64,
    /// Mean over 10 s windows of (max / mean) uncached prompt tokens admitted per worker.
    pub imbalance: f64,
    /// Time to first token, ms: mean, median, 90th and 99th percentiles.
    pub ttft_mean_ms: f64,
    /// Median TTFT.
    pub ttft_p50_ms: f64,
    /// 90th percentile TTFT.
    pub ttft_p90_ms: f64,
    /// 99th percentile TTFT.
    pub ttft_p99_ms: f64,
    /// Mean over requests of the average inter-token latency, ms.
    pub itl_mean_ms: f64,
    /// Output tokens per second over the simulated duration.
    pub output_tok_s: f64,
    /// Simulated duration, s.
    pub duration_s: f64,
}

impl Summary {
    /// The summary of `report`, with the workload's ceiling.
    #[must_use]
    pub fn new(policy: &str, report: &ReplayReport, ceiling: f64, workers: usize) -> Self {
        let counts = &report.request_counts;
        let ttft = &report.latency.ttft;
        Self {
            policy: policy.to_owned(),
            requests: counts.num_requests,
            completed: counts.completed_requests,
            lost: counts.num_requests - counts.completed_requests,
            hit_rate: report.first_admission_prefix_cache_reused_ratio,
            hit_rate_ceiling: ceiling,
            imbalance: imbalance(report, workers),
            ttft_mean_ms: ttft.mean_ms,
            ttft_p50_ms: ttft.median_ms,
            ttft_p90_ms: ttft.p90_ms,
            ttft_p99_ms: ttft.p99_ms,
            itl_mean_ms: report.latency.itl.distribution.mean_ms,
            output_tok_s: report.throughput.output_throughput_tok_s,
            duration_s: report.throughput.duration_ms / 1000.0,
        }
    }
}

const WINDOW_MS: f64 = 10_000.0;

/// Mean over 10 s windows of max/mean uncached prompt tokens admitted per worker (1 is perfect):
/// the prefill work each worker was handed, from the per-request records. The windows are summed
/// in time order (a hash map's order changed the last bits from run to run).
fn imbalance(report: &ReplayReport, workers: usize) -> f64 {
    let mut windows: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for r in &report.per_request {
        if r.terminal_status != ReplayTerminalStatus::Completed {
            continue;
        }
        // Aggregated replays record the worker as the decode worker (the only pool).
        let worker = r.decode_worker_idx.or(r.prefill_worker_idx);
        let (Some(worker), Some(admit)) = (worker, r.first_admit_ms) else {
            continue;
        };
        let reused = r
            .admission_history
            .first()
            .map_or(r.reused_input_tokens, |a| a.reused_input_tokens);
        // Truncation: the window index of a non-negative time.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let window = (admit / WINDOW_MS) as u64;
        let work = windows.entry(window).or_insert_with(|| vec![0.0; workers]);
        if let Some(w) = work.get_mut(worker) {
            *w += r.input_length.saturating_sub(reused) as f64;
        }
    }
    let ratios: Vec<f64> = windows
        .values()
        .filter_map(|work| {
            let mean = work.iter().sum::<f64>() / work.len() as f64;
            (mean > 0.0).then(|| work.iter().copied().fold(0.0, f64::max) / mean)
        })
        .collect();
    if ratios.is_empty() {
        0.0
    } else {
        ratios.iter().sum::<f64>() / ratios.len() as f64
    }
}

/// The hit rate of one infinite KV cache shared by every worker, in the engines' blocks: for
/// each request in arrival order, the prompt tokens in its leading complete blocks that an
/// earlier request already had.
///
/// # Errors
///
/// A request whose prompt the trace's blocks cannot cover.
pub fn ceiling(trace: &Trace, engine_block_size: usize) -> anyhow::Result<f64> {
    let block_tokens = trace.block_tokens as usize;
    let engine_block = u32::try_from(engine_block_size)?;
    let mut interned: HashMap<u64, u32> = HashMap::new();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut tokens: Vec<u32> = Vec::new();
    let (mut hit, mut total) = (0u64, 0u64);
    for (i, r) in trace.requests.iter().enumerate() {
        let input = usize::try_from(r.input_tokens)?;
        if input > r.blocks.len() * block_tokens {
            bail!(
                "request {}: {} prompt tokens but only {} blocks of {block_tokens}",
                i + 1,
                input,
                r.blocks.len()
            );
        }
        // The prompt aisimulate synthesizes: token p is the (interned) id of trace block p / bt.
        tokens.clear();
        for p in 0..input {
            let next = u32::try_from(interned.len()).context("too many distinct blocks")?;
            tokens.push(*interned.entry(r.blocks[p / block_tokens]).or_insert(next));
        }
        let hashes = ReplayRequestHashes::from_tokens(&tokens, engine_block).sequence_hashes;
        let prefix = hashes.iter().take_while(|h| seen.contains(*h)).count();
        hit += (prefix * engine_block_size) as u64;
        total += r.input_tokens;
        seen.extend(hashes);
    }
    Ok(if total == 0 {
        0.0
    } else {
        hit as f64 / total as f64
    })
}
