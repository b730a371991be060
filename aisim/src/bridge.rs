//! The bridge: libroute's [`Router`] as an aisimulate placement policy.
//!
//! aisimulate's replayer owns virtual time and the simulated engines; at each arrival it asks a
//! [`PlacementPolicy`] where the request goes, and it tells the policy what the engines did: the
//! KV events they published ([`PlacementPolicy::observe`]), each prefill's end
//! ([`PlacementPolicy::prefill_completed`]) and each request's end
//! ([`PlacementPolicy::request_terminal`]). [`LibroutePlacement`] answers with libroute's router:
//!
//! - **place**: the request's chained block hashes (the engine's own sequence hashes, so the
//!   index speaks the engines' language), one candidate row per scheduler (worker and attention-DP
//!   rank), then [`Router::route_at`] at the simulated time: overlap query, load (and, for
//!   policies that read it, the measured speed) from the ledger, selection by the catalog policy,
//!   timed booking. In approximate mode the router records its decision as predicted blocks; in
//!   exact mode it does so for policies that declare `PENDING` (blocks routed but not computed).
//! - **observe** (exact mode only): each engine KV event applied to the prefix index (device
//!   blocks stored or removed; host-pinned blocks as the host tier).
//! - **`prefill_completed`** and **`request_terminal`**: the ledger's `prefill_complete_at`
//!   (which calibrates the worker's speed) and `free`.
//!
//! Every placement is immediate (libroute does not hold requests back), so nothing is ever
//! pending. A failure of any of these steps is an error naming the request; the replay stops
//! with it rather than going on with a ledger that lost a booking.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use aisimulate_core::engine::{KvEvent as EngineKvEvent, KvEventData, KvEventTier};
use aisimulate_core::replay::loadgen::{ReplayRequestHashes, ReplayRequestPayload};
use aisimulate_core::replay::{
    EngineEventBatch, Placement, PlacementCacheSample, PlacementDecision, PlacementEffects,
    PlacementPolicy, ReplayAdmissionMetadata, ReplayComposition, ReplayEngineObservation,
    ReplayError, ReplayResult, ReplaySpec, RequestIdentity, WorkerStage, WorkerTopology,
};
use anyhow::{Context as _, anyhow, bail};
use libroute_core::catalog::CatalogPolicy;
use libroute_core::{
    BlockSlot, KvEvent, Ledger, LoadSlot, PredictionRecord, PredictionSlot, Predictions,
    PrefixIndex, Request, RequestSlot, Router, Row, Selector, Tier, WorkerInputs, WorkerKey,
    WorkerSlot,
};
use serde::Serialize;
use uuid::Uuid;

/// The `provider` name a [`ReplaySpec`] gives its placement to be routed by libroute.
pub const PROVIDER: &str = "libroute";

/// The most schedulers (workers times attention-DP ranks) a bridge routes over: the selector's
/// capacity and the index's worker bits.
pub const MAX_SCHEDULERS: usize = 64;

/// Where the router learns what each worker caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The index is fed by the engines' own KV events.
    Exact,
    /// No KV events: the router records its own decisions as predicted blocks that expire after
    /// `ttl_ms` milliseconds of simulated time.
    Approximate {
        /// How long a prediction lives, ms.
        ttl_ms: u64,
    },
}

/// What a bridge needs besides the topology aisimulate hands it.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The catalog policy, as the JSON every libroute host passes (`{"type": ...}`).
    pub policy_json: String,
    /// Exact (KV events) or approximate (predictions) mode.
    pub mode: Mode,
    /// The engines' KV block size in tokens: requests are hashed and sized in these blocks.
    pub block_size: u32,
    /// Distinct block hashes the index holds (all workers together); when full it evicts a
    /// block not stored again lately (by its clock), as a production router's would.
    pub index_blocks: usize,
    /// Requests the ledger can hold at once.
    pub max_in_flight: usize,
}

/// What a bridge did in a replay, shared with whoever made the composition (the replayer owns
/// the placement and drops it at the end).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BridgeStats {
    /// Requests placed (and booked in the ledger).
    pub placed: u64,
    /// Prefill completions reported to the ledger.
    pub prefill_completed: u64,
    /// Requests freed in the ledger at their end.
    pub freed: u64,
    /// Engine KV events applied to the prefix index (exact mode).
    pub kv_events: u64,
    /// Blocks the index evicted for room (it holds [`BridgeConfig::index_blocks`]).
    pub index_evictions: u64,
    /// Requests the ledger still held after the last event.
    pub booked_at_end: u64,
    /// Load the ledger still counted after the last event (prefill tokens, blocks and requests
    /// of every worker, summed): 0 when every booking was freed.
    pub load_at_end: u64,
}

/// A batch of engine KV events, each with the logical worker that published it.
#[derive(Debug, Default)]
pub struct KvBatch(Vec<(usize, EngineKvEvent)>);

impl EngineEventBatch for KvBatch {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn append(&mut self, mut other: Self) {
        self.0.append(&mut other.0);
    }
}

/// How the replayer hands the bridge its engines' KV events: captured only in exact mode
/// (`EXACT`), so approximate replays do not pay for events nobody reads.
#[derive(Debug, Default)]
pub struct KvObservation<const EXACT: bool>;

impl<const EXACT: bool> ReplayEngineObservation for KvObservation<EXACT> {
    type Batch = KvBatch;

    const CAPTURE_ENGINE_KV_EVENTS: bool = EXACT;

    fn observe_engine_events(
        _stage: WorkerStage,
        worker_id: usize,
        _dp_rank: u32,
        events: Vec<EngineKvEvent>,
    ) -> KvBatch {
        KvBatch(events.into_iter().map(|event| (worker_id, event)).collect())
    }
}

/// The request's block hashes when the workload already computed them (trace replays do).
#[derive(Debug)]
pub struct RequestHashes(Option<ReplayRequestHashes>);

impl ReplayAdmissionMetadata for RequestHashes {
    fn from_hashes(hashes: Option<ReplayRequestHashes>) -> Self {
        Self(hashes)
    }

    fn for_prefill(self) -> Self {
        self
    }

    fn max_output_tokens_override(&self) -> Option<usize> {
        None
    }

    fn into_hashes(self) -> Option<ReplayRequestHashes> {
        self.0
    }
}

/// A replay composition whose placement is libroute's router: pass it to
/// [`aisimulate_core::Replayer::with_composition`]. `EXACT` selects the mode's event capture
/// and must agree with [`BridgeConfig::mode`] (checked when the placement is created).
#[derive(Debug)]
pub struct LibrouteComposition<const EXACT: bool> {
    config: BridgeConfig,
    stats: Rc<RefCell<BridgeStats>>,
}

impl<const EXACT: bool> LibrouteComposition<EXACT> {
    /// A composition that builds its placement from `config`.
    #[must_use]
    pub fn new(config: BridgeConfig) -> Self {
        Self {
            config,
            stats: Rc::default(),
        }
    }

    /// The statistics its placement keeps: clone this before the replayer takes the composition.
    #[must_use]
    pub fn stats(&self) -> Rc<RefCell<BridgeStats>> {
        Rc::clone(&self.stats)
    }
}

impl<const EXACT: bool> ReplayComposition for LibrouteComposition<EXACT> {
    type Metadata = RequestHashes;
    type Observation = KvObservation<EXACT>;
    type AggregatedPlacement = LibroutePlacement;
    type DisaggregatedPlacement = LibroutePlacement;

    fn validate_spec(&self, spec: &ReplaySpec) -> ReplayResult<()> {
        if spec.adapters.placement.provider != PROVIDER {
            return Err(ReplayError::InvalidSpec(format!(
                "the libroute composition places with provider {PROVIDER:?}, not {:?}",
                spec.adapters.placement.provider
            )));
        }
        if spec.adapters.scaling.provider != "none" {
            return Err(ReplayError::InvalidSpec(format!(
                "the libroute composition does not scale workers, got scaling provider {:?}",
                spec.adapters.scaling.provider
            )));
        }
        Ok(())
    }

    fn create_aggregated_placement(
        &mut self,
        _dp_size: u32,
        topology: Vec<WorkerTopology>,
    ) -> anyhow::Result<LibroutePlacement> {
        if EXACT != matches!(self.config.mode, Mode::Exact) {
            bail!("the composition's event capture disagrees with the bridge's mode");
        }
        let mut placement = LibroutePlacement::new(&self.config, &topology)?;
        placement.stats = Rc::clone(&self.stats);
        Ok(placement)
    }

    fn create_disaggregated_placements(
        &mut self,
        _prefill_dp_size: u32,
        _prefill_topology: Vec<WorkerTopology>,
        _decode_dp_size: u32,
        _decode_topology: Vec<WorkerTopology>,
    ) -> anyhow::Result<(LibroutePlacement, LibroutePlacement)> {
        bail!("the libroute bridge places aggregated workers only; use an aggregated topology")
    }
}

type BridgeRouter =
    Router<Vec<BlockSlot<1>>, Vec<WorkerSlot>, Vec<RequestSlot>, Vec<LoadSlot>, Vec<u64>, 1>;

/// One candidate: a scheduler (a worker's attention-DP rank) that takes requests.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    scheduler_id: usize,
    key: WorkerKey,
}

/// libroute's router behind aisimulate's placement contract (see the module documentation).
#[derive(Debug)]
pub struct LibroutePlacement {
    router: BridgeRouter,
    predictions: Option<Predictions<Vec<PredictionSlot>, Vec<PredictionRecord>>>,
    policy: CatalogPolicy,
    selector: Box<Selector<MAX_SCHEDULERS>>,
    uses_cache: bool,
    block_size: u32,
    /// Every scheduler that takes requests now, in worker then rank order.
    candidates: Vec<Candidate>,
    /// Scratch: the rows of one selection and the candidate each came from.
    rows: Vec<Row>,
    row_candidates: Vec<usize>,
    /// Ledger ids of the requests in flight.
    booked: HashMap<Uuid, u64>,
    next_id: u64,
    /// Scratch for one KV event's hashes.
    hashes: Vec<u64>,
    stats: Rc<RefCell<BridgeStats>>,
}

impl LibroutePlacement {
    /// A placement over the ready workers of `topology`.
    ///
    /// # Errors
    ///
    /// The policy's configuration error, storage sizes the index or ledger reject, or more
    /// than [`MAX_SCHEDULERS`] schedulers.
    pub fn new(config: &BridgeConfig, topology: &[WorkerTopology]) -> anyhow::Result<Self> {
        let policy = libroute_benches::sim::policy(&config.policy_json)
            .map_err(|e| anyhow!("policy {}: {e}", config.policy_json))?;
        let leg = Request::new(1, config.block_size.max(1)).leg();
        let inputs = policy.inputs(leg);
        let uses_cache = inputs.contains(WorkerInputs::CACHE);
        let index = PrefixIndex::new(
            vec![BlockSlot::<1>::empty(); config.index_blocks.next_power_of_two().max(1024)],
            vec![WorkerSlot::empty(); 2 * MAX_SCHEDULERS],
        )
        .map_err(|e| anyhow!("prefix index: {e}"))?;
        let slots = (2 * config.max_in_flight).next_power_of_two().max(64);
        let ledger = Ledger::new(
            vec![RequestSlot::empty(); slots],
            vec![LoadSlot::empty(); 2 * MAX_SCHEDULERS],
            vec![0u64; 64],
        )
        .map_err(|e| anyhow!("ledger: {e}"))?;
        let knobs = libroute_core::DefaultCost::default();
        let router = Router::new(
            index,
            ledger,
            knobs.host_cache_hit_weight,
            knobs.disk_cache_hit_weight,
        );
        // One prediction per (block, worker): as many as the index holds blocks. The map is
        // twice that (half of a table's slots are usable).
        let records = config.index_blocks.max(1);
        let ttl = match config.mode {
            Mode::Approximate { ttl_ms } => Some(ttl_ms),
            Mode::Exact => inputs
                .contains(WorkerInputs::PENDING)
                .then_some(libroute_benches::sim::PENDING_TTL_MS),
        };
        let predictions = match ttl {
            None => None,
            Some(ttl_ms) => Some(
                Predictions::new(
                    vec![PredictionSlot::empty(); (2 * records).next_power_of_two().max(64)],
                    vec![PredictionRecord::default(); records],
                    ttl_ms,
                )
                .map_err(|e| anyhow!("predictions: {e}"))?,
            ),
        };
        let mut placement = Self {
            router,
            predictions,
            policy,
            selector: Box::new(Selector::with_entropy(0x5eed)),
            uses_cache,
            block_size: config.block_size,
            candidates: Vec::new(),
            rows: Vec::new(),
            row_candidates: Vec::new(),
            booked: HashMap::new(),
            next_id: 0,
            hashes: Vec::new(),
            stats: Rc::default(),
        };
        for worker in topology {
            placement.add_worker(worker)?;
        }
        Ok(placement)
    }

    fn add_worker(&mut self, worker: &WorkerTopology) -> anyhow::Result<()> {
        for (rank, &scheduler_id) in worker.scheduler_ids.iter().enumerate() {
            if self
                .candidates
                .iter()
                .any(|c| c.scheduler_id == scheduler_id)
            {
                continue;
            }
            if self.candidates.len() == MAX_SCHEDULERS {
                bail!(
                    "worker {}: the libroute bridge routes over at most {MAX_SCHEDULERS} schedulers",
                    worker.worker_id
                );
            }
            let key = WorkerKey::new(worker.worker_id as u64, u32::try_from(rank)?);
            self.router
                .ledger
                .add_worker(key)
                .map_err(|e| anyhow!("worker {}: {e}", worker.worker_id))?;
            self.candidates.push(Candidate { scheduler_id, key });
        }
        self.candidates
            .sort_by_key(|c| (c.key.worker_id, c.key.dp_rank));
        Ok(())
    }

    /// Records what the ledger still holds, so the end of a replay shows what was not freed.
    fn record_end_state(&self) {
        let load: u64 = self
            .candidates
            .iter()
            .filter_map(|c| self.router.ledger.load(c.key))
            .map(|l| l.active_prefill_tokens + l.active_decode_blocks + l.active_requests)
            .sum();
        let mut stats = self.stats.borrow_mut();
        stats.booked_at_end = self.router.ledger.counters().active_requests as u64;
        stats.load_at_end = load;
    }

    fn stop_placing_on(&mut self, worker: &WorkerTopology) {
        self.candidates
            .retain(|c| c.key.worker_id != worker.worker_id as u64);
    }

    /// The request's chained block hashes, as the engines compute them.
    fn block_hashes(&self, request: &ReplayRequestPayload, metadata: RequestHashes) -> Vec<u64> {
        if let Some(hashes) = metadata.0 {
            return hashes.sequence_hashes;
        }
        let hashes = match request.materialized_tokens() {
            Some(tokens) => ReplayRequestHashes::from_tokens(tokens, self.block_size),
            None => ReplayRequestHashes::from_tokens(&request.prompt_tokens(), self.block_size),
        };
        hashes.sequence_hashes
    }

    fn ledger_id(&self, request_id: Uuid) -> anyhow::Result<u64> {
        self.booked
            .get(&request_id)
            .copied()
            .ok_or_else(|| anyhow!("request {request_id} was never placed by libroute"))
    }

    fn apply(&mut self, worker_id: usize, event: &EngineKvEvent) -> anyhow::Result<()> {
        let worker = WorkerKey::new(worker_id as u64, event.dp_rank);
        let tier = match event.tier {
            KvEventTier::Device => Tier::Device,
            KvEventTier::HostPinned => Tier::Host,
        };
        self.hashes.clear();
        let stored = match &event.data {
            KvEventData::Stored(stored) => {
                self.hashes
                    .extend(stored.blocks.iter().map(|block| block.block_hash));
                true
            }
            KvEventData::Removed { block_hashes } => {
                self.hashes.extend_from_slice(block_hashes);
                false
            }
        };
        let hashes = &self.hashes;
        let event = if stored {
            KvEvent::Stored {
                worker,
                tier,
                hashes,
            }
        } else {
            KvEvent::Removed {
                worker,
                tier,
                hashes,
            }
        };
        self.router
            .index
            .apply(&event)
            .with_context(|| format!("KV event from worker {worker}"))
    }
}

/// A stable 64-bit id for a session name (FNV-1a), for session affinity.
fn session_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl PlacementPolicy<ReplayRequestPayload> for LibroutePlacement {
    type Metadata = RequestHashes;
    type Observation = KvBatch;

    fn place(
        &mut self,
        request: &ReplayRequestPayload,
        metadata: RequestHashes,
        session: Option<String>,
        now_ms: f64,
    ) -> anyhow::Result<PlacementEffects> {
        let request_id = request
            .request_id()
            .ok_or_else(|| anyhow!("libroute placement needs a request UUID"))?;
        let hashes = self.block_hashes(request, metadata);
        let mut libroute_request = Request::new(request.input_length() as u64, self.block_size);
        if let Some(name) = &session {
            libroute_request = libroute_request.session(session_id(name));
        }
        let preferred_rank = request.preferred_dp_rank();
        self.rows.clear();
        self.row_candidates.clear();
        for (i, c) in self.candidates.iter().enumerate() {
            if preferred_rank.is_none_or(|rank| rank == c.key.dp_rank) {
                self.rows.push(Row::new(c.key));
                self.row_candidates.push(i);
            }
        }
        let id = self.next_id;
        let selection = self
            .router
            .route_at(
                self.predictions.as_mut(),
                &self.policy,
                &mut self.selector,
                &libroute_request,
                &hashes,
                &mut self.rows,
                id,
                now_ms,
            )
            .map_err(|e| anyhow!("request {request_id}: {e}"))?;
        self.next_id += 1;
        self.booked.insert(request_id, id);
        self.stats.borrow_mut().placed += 1;
        let chosen = self.candidates[self.row_candidates[selection.row]];
        let cache_sample = self.uses_cache.then(|| {
            let blocks = |row: &Row| row.cache().device_blocks;
            PlacementCacheSample {
                overlap_blocks: blocks(&self.rows[selection.row]),
                best_available_overlap_blocks: self.rows.iter().map(blocks).max().unwrap_or(0),
                isl_blocks: u32::try_from(hashes.len()).unwrap_or(u32::MAX),
            }
        });
        Ok(PlacementEffects {
            decision: PlacementDecision::Immediate(Placement {
                request_id,
                scheduler_id: chosen.scheduler_id,
                reported_overlap_tokens: usize::try_from(selection.cached_tokens)?,
                cache_sample,
                placement_replica_id: None,
            }),
            released: Vec::new(),
        })
    }

    fn observe(&mut self, observation: KvBatch, _now_ms: f64) -> anyhow::Result<Vec<Placement>> {
        for (worker_id, event) in &observation.0 {
            self.apply(*worker_id, event)?;
        }
        let mut stats = self.stats.borrow_mut();
        stats.kv_events += observation.0.len() as u64;
        stats.index_evictions = self.router.index.counters().evictions;
        Ok(Vec::new())
    }

    fn cancel_pending(&mut self, _request_id: Uuid) -> bool {
        // Placement is always immediate: nothing waits in the bridge.
        false
    }

    fn request_terminal(
        &mut self,
        request_id: Uuid,
        _now_ms: f64,
    ) -> anyhow::Result<Vec<Placement>> {
        let id = self.ledger_id(request_id)?;
        self.router
            .ledger
            .free(id)
            .map_err(|e| anyhow!("request {request_id}: free: {e}"))?;
        self.booked.remove(&request_id);
        self.record_end_state();
        self.stats.borrow_mut().freed += 1;
        Ok(Vec::new())
    }

    fn prefill_completed(
        &mut self,
        request_id: Uuid,
        now_ms: f64,
    ) -> anyhow::Result<Vec<Placement>> {
        let id = self.ledger_id(request_id)?;
        self.router
            .ledger
            .prefill_complete_at(id, now_ms)
            .map_err(|e| anyhow!("request {request_id}: prefill complete: {e}"))?;
        self.stats.borrow_mut().prefill_completed += 1;
        Ok(Vec::new())
    }

    fn pending_count(&self) -> usize {
        0
    }

    fn worker_ready(
        &mut self,
        worker: WorkerTopology,
        _now_ms: f64,
    ) -> anyhow::Result<Vec<Placement>> {
        self.add_worker(&worker)?;
        Ok(Vec::new())
    }

    fn worker_draining(
        &mut self,
        worker: WorkerTopology,
        _now_ms: f64,
    ) -> anyhow::Result<Vec<Placement>> {
        self.stop_placing_on(&worker);
        Ok(Vec::new())
    }

    fn worker_removed(
        &mut self,
        worker: WorkerTopology,
        _now_ms: f64,
    ) -> anyhow::Result<Vec<Placement>> {
        self.stop_placing_on(&worker);
        for rank in 0..worker.scheduler_ids.len() {
            let key = WorkerKey::new(worker.worker_id as u64, u32::try_from(rank)?);
            self.router
                .index
                .apply(&KvEvent::WorkerRemoved { worker: key })
                .with_context(|| format!("removing worker {key}"))?;
            self.router.ledger.remove_worker(key);
        }
        Ok(Vec::new())
    }

    fn topology_settled(&mut self, _now_ms: f64) -> anyhow::Result<Vec<Placement>> {
        Ok(Vec::new())
    }
}
