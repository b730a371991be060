//! Arbitrary requests, rows and knobs into the selector: it must return a selection or an error,
//! never panic, and a selection must name a row that was given and a finite cost.

use arbitrary::{Arbitrary, Unstructured};
use libroute_core::*;

#[derive(Arbitrary, Debug)]
struct Input {
    knobs: [f64; 8],
    seed: Option<u64>,
    validate: bool,
    prompt_tokens: u64,
    block_size: u32,
    role: u8,
    flags: u8,
    pin: Option<(u8, u8)>,
    required: u8,
    preferred: Vec<(u8, f64)>,
    ranges: Vec<(u16, u16)>,
    rows: Vec<RawRow>,
}

#[derive(Arbitrary, Debug)]
struct RawRow {
    worker: u8,
    rank: u8,
    taints: u64,
    flags: u32,
    tiers: [u32; 3],
    effective_blocks: f64,
    counters: [u64; 4],
    speed: [f64; 3],
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let cost = DefaultCost {
        overlap_score_credit: input.knobs[0],
        overlap_score_credit_decay: input.knobs[1],
        prefill_load_scale: input.knobs[2],
        decode_active_request_weight: input.knobs[3],
        host_cache_hit_weight: input.knobs[4],
        disk_cache_hit_weight: input.knobs[5],
        shared_cache_multiplier: input.knobs[6],
    };
    let knobs = DefaultKnobs { cost, temperature: input.knobs[7], seed: input.seed };
    // Half the runs go through validation (as hosts do); half feed raw knobs to the scorer.
    let policy = if input.validate {
        match knobs.build() {
            Ok(p) => p,
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        }
    } else {
        Policy::new((), (cost,), DefaultPicker { temperature: knobs.temperature }).unwrap().with_seed(input.seed)
    };
    let rows: Vec<Row> = input
        .rows
        .iter()
        .map(|r| Row {
            worker: WorkerKey::new(u64::from(r.worker % 32), u32::from(r.rank % 4)),
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
    let preferred: Vec<PreferredTaint> = input
        .preferred
        .iter()
        .map(|&(t, weight)| PreferredTaint { taint: Taint::new(u32::from(t % 64)).unwrap(), weight })
        .collect();
    let ranges: Vec<BlockRange> = input.ranges.iter().map(|&(a, b)| BlockRange::new(a.into(), b.into())).collect();
    let role = Role::from_u32(u32::from(input.role % 4)).unwrap();
    let mut request = Request::new(input.prompt_tokens, input.block_size)
        .role(role)
        .track_prefill_tokens(input.flags & 1 != 0)
        .conditional_disagg(input.flags & 2 != 0)
        .has_tier_matches(input.flags & 4 != 0)
        .required_taints(TaintSet(u64::from(input.required)))
        .preferred_taints(&preferred);
    if let Ok(hits) = SharedHits::new(&ranges) {
        request = request.shared_hits(hits);
    }
    if let Some((w, r)) = input.pin {
        request = request.pin(WorkerKey::new(u64::from(w % 32), u32::from(r % 4)));
    }
    let mut selector = Box::new(Selector::<64>::new());
    match policy.select(&mut selector, &request, &rows) {
        Ok(s) => {
            assert!(s.row < rows.len());
            assert_eq!(s.worker, rows[s.row].worker);
            assert!(s.cost.is_finite());
            assert_eq!(selector.last_costs().len(), s.candidates);
        }
        Err(e) => {
            let _ = e.to_string();
            assert_eq!(selector.last_costs().len(), 0);
        }
    }
}
