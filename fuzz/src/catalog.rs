//! Arbitrary catalog policies (any filters, weighted scorers and picker, with parameters that the
//! configuration would reject too) over arbitrary rows and requests: a selection or an error,
//! never a panic; a selection names a given row; explanations agree with the selection.

use arbitrary::{Arbitrary, Unstructured};
use libroute_core::catalog::*;
use libroute_core::*;

#[derive(Arbitrary, Debug)]
struct Input {
    filters: Vec<(u8, [u64; 3])>,
    scorers: Vec<(u8, f64, [f64; 3], u64)>,
    picker: (u8, f64, u32),
    seed: Option<u64>,
    prompt_tokens: u64,
    block_size: u32,
    session: Option<u64>,
    required: u8,
    rows: Vec<RawRow>,
    explain: bool,
    /// Rows sharing the first row's flags but for one in `2 + k % 16`: a tidy fleet, which the
    /// default cost and the two-mode rules take through loops of their own (arbitrary flags
    /// seldom make one).
    tidy: Option<u8>,
}

#[derive(Arbitrary, Debug)]
struct RawRow {
    worker: u8,
    taints: u64,
    flags: u32,
    tiers: [u32; 3],
    effective_blocks: f64,
    counters: [u64; 4],
    speed: [f64; 3],
}

fn metric(x: u64) -> LoadMetric {
    match x % 3 {
        0 => LoadMetric::PrefillTokens,
        1 => LoadMetric::ActiveBlocks,
        _ => LoadMetric::ActiveRequests,
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mut filters = List::<BuiltinFilter, MAX_FILTERS>::new();
    for (kind, p) in input.filters.iter().take(MAX_FILTERS) {
        let f = match kind % 3 {
            0 => BuiltinFilter::RequireTaints(RequireTaints(TaintSet(p[0] & 0xff))),
            1 => BuiltinFilter::OverloadLimits(OverloadLimits {
                max_active_blocks: Some(p[0]).filter(|v| v % 2 == 0),
                max_prefill_tokens: Some(p[1]).filter(|v| v % 2 == 0),
                max_requests: Some(p[2] % 64),
            }),
            _ => BuiltinFilter::AllowList(AllowList::new(&[p[0] % 32, p[1] % 32, p[2] % 32]).unwrap()),
        };
        let _ = filters.push(f);
    }
    let mut scorers = List::<WeightedScorer, MAX_SCORERS>::new();
    for (kind, weight, f, n) in input.scorers.iter().take(MAX_SCORERS) {
        let scorer = match kind % 9 {
            0 => BuiltinScorer::Default(DefaultCost::default()),
            1 => BuiltinScorer::LeastLoaded(LeastLoaded { metric: metric(*n) }),
            2 => BuiltinScorer::DynamoTwoTier(DynamoTwoTier { spread: *n, ratio: f[0], coverage: f[1] }),
            3 => BuiltinScorer::SglangCacheAware(SglangCacheAware {
                abs_threshold: *n,
                rel_threshold: f[0],
                match_threshold: f[1],
            }),
            4 => BuiltinScorer::Prefix(PrefixScore { host: f[0], disk: f[1] }),
            5 => BuiltinScorer::KvUtilization(KvUtilizationScore { capacity_blocks: *n }),
            6 => BuiltinScorer::Queue(QueueScore),
            7 => BuiltinScorer::SessionAffinity(SessionAffinity),
            _ => BuiltinScorer::FirstToken(FirstToken {
                part: match n % 5 {
                    0 => FirstTokenPart::Queue,
                    1 => FirstTokenPart::Prefill,
                    2 => FirstTokenPart::Decode,
                    3 => FirstTokenPart::DelayToOthers,
                    _ => FirstTokenPart::Affinity,
                },
                speed: (n % 2 == 0).then_some(Speed {
                    base_ms: f[0],
                    ms_per_prefill_token: f[1],
                    ms_per_active_request: f[2],
                }),
                others_weight: f[0],
                affinity_share: f[1],
                affinity_slack: f[2],
                kv_capacity_blocks: *n,
            }),
        };
        let _ = scorers.push(WeightedScorer { scorer, weight: *weight });
    }
    let picker = match input.picker.0 % 5 {
        0 => BuiltinPicker::Default(DefaultPicker { temperature: input.picker.1 }),
        1 => BuiltinPicker::MinCost(MinCostPicker),
        2 => BuiltinPicker::Random(RandomPicker),
        3 => BuiltinPicker::RoundRobin(RoundRobinPicker),
        _ => BuiltinPicker::PowerOfChoices(PowerOfChoices { k: input.picker.2 }),
    };
    let policy: CatalogPolicy = Policy::new(filters, scorers, picker).unwrap().with_seed(input.seed);
    let mut rows: Vec<Row> = input
        .rows
        .iter()
        .take(64)
        .map(|r| Row {
            worker: WorkerKey::new(u64::from(r.worker % 32), 0),
            taints: TaintSet(r.taints),
            flags: RowFlags(r.flags),
            device_blocks: r.tiers[0],
            host_blocks: r.tiers[1],
            disk_blocks: r.tiers[2],
            effective_blocks: r.effective_blocks,
            effective_tokens: r.counters[0],
            active_prefill_tokens: r.counters[1],
            active_decode_blocks: r.counters[2],
            active_requests: r.counters[3],
            base_ms: r.speed[0],
            ms_per_prefill_token: r.speed[1],
            ms_per_active_request: r.speed[2],
        })
        .collect();
    if let (Some(k), Some(first)) = (input.tidy, rows.first().map(|r| r.flags)) {
        let every = 2 + usize::from(k % 16);
        for (i, row) in rows.iter_mut().enumerate() {
            if i % every != 0 {
                row.flags = first;
            }
        }
    }
    let mut request = Request::new(input.prompt_tokens, input.block_size)
        .required_taints(TaintSet(u64::from(input.required)));
    if let Some(s) = input.session {
        request = request.session(s);
    }
    let mut selector = Box::new(Selector::<64>::new());
    let mut out = [Explanation::EMPTY; 64];
    let result = if input.explain {
        policy.select_explained(&mut selector, &request, &rows, &mut out)
    } else {
        policy.select(&mut selector, &request, &rows)
    };
    match result {
        Ok(s) => {
            assert!(s.row < rows.len());
            assert_eq!(s.worker, rows[s.row].worker);
            assert!(s.cost.is_finite());
            if input.explain {
                assert!(out[s.row].chosen);
                assert_eq!(out[s.row].disposition, Disposition::Candidate);
                let candidates = out[..rows.len()]
                    .iter()
                    .filter(|e| e.disposition == Disposition::Candidate)
                    .count();
                assert_eq!(candidates, s.candidates);
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}
