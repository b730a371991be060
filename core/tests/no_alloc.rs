//! Zero heap allocations per warm selection, counted by a global allocator that counts per thread
//! (a global counter would also count other test threads' allocations).

// Why: a global allocator is an unsafe trait; this test file is the only unsafe code outside ffi.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use libroute_core::*;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn bump() {
    // `try_with` because the allocator can run while thread-locals are being torn down.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every method forwards to `System` unchanged; counting touches only a thread-local.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded with the caller's layout, under the caller's obligations.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

fn fleet(n: u64) -> Vec<Row> {
    (0..n)
        .map(|id| {
            let dev = (id * 7) % 9;
            Row::new(WorkerKey::new(id, 0))
                .with_cache(Cache::from_tiers(
                    u32::try_from(dev).unwrap(),
                    2,
                    1,
                    0.75,
                    0.25,
                    16,
                ))
                .with_load(Load {
                    available: true,
                    active_prefill_tokens: 19 * (id % 7),
                    active_decode_blocks: id % 11 + 3,
                    active_requests: id % 5,
                })
        })
        .collect()
}

/// 10,000 warm selections for the headline case (T = 0, unseeded), 1,000 for each other mode.
const ITERATIONS: [usize; 4] = if cfg!(miri) {
    [20; 4]
} else {
    [10_000, 1_000, 1_000, 1_000]
};

#[test]
fn warm_selections_do_not_allocate() {
    let rows = fleet(1024);
    let hits = [BlockRange::new(0, 64)];
    let prefs = [PreferredTaint {
        taint: Taint::new(1).unwrap(),
        weight: 0.5,
    }];
    let request = Request::new(2048, 16)
        .has_tier_matches(true)
        .shared_hits(SharedHits::new(&hits).unwrap())
        .preferred_taints(&prefs);
    let mut selector = Box::new(Selector::<1024>::new());
    let modes = [(0.0, None), (0.7, None), (0.0, Some(42)), (0.7, Some(42))];
    for ((temperature, seed), iterations) in modes.into_iter().zip(ITERATIONS) {
        let knobs = DefaultKnobs {
            cost: DefaultCost {
                overlap_score_credit_decay: 0.5,
                shared_cache_multiplier: 0.5,
                ..DefaultCost::default()
            },
            temperature,
            seed,
        };
        let policy = knobs.build().unwrap();
        policy.select(&mut selector, &request, &rows).unwrap();
        let before = allocations();
        for _ in 0..iterations {
            std::hint::black_box(policy.select(&mut selector, &request, &rows).unwrap());
        }
        assert_eq!(
            allocations() - before,
            0,
            "T = {temperature}, seed = {seed:?}"
        );
    }
}

#[test]
fn the_counter_sees_allocations() {
    let before = allocations();
    std::hint::black_box(vec![1u8; 16]);
    assert_eq!(allocations() - before, 1);
}

#[test]
fn index_ledger_and_router_do_not_allocate_after_construction() {
    let index = PrefixIndex::<_, _, 1>::new(
        vec![BlockSlot::<1>::empty(); 1 << 14],
        vec![WorkerSlot::empty(); 128],
    )
    .unwrap();
    let ledger = Ledger::new(
        vec![RequestSlot::empty(); 1 << 12],
        vec![LoadSlot::empty(); 128],
        vec![0u64; 256],
    )
    .unwrap();
    let mut router = Router::new(index, ledger, 0.75, 0.25);
    let workers: Vec<WorkerKey> = (0..64).map(|w| WorkerKey::new(w, 0)).collect();
    for &w in &workers {
        router.ledger.add_worker(w).unwrap();
    }
    let policy = DefaultKnobs::default().build().unwrap();
    let mut selector = Box::new(Selector::<64>::new());
    let mut rows: Vec<Row> = workers.iter().map(|&w| Row::new(w)).collect();
    let mut fleet = Fleet::new(vec![Row::default(); 64], vec![FleetPlace::empty(); 64]).unwrap();
    for &w in &workers {
        fleet.add(w, TaintSet::EMPTY).unwrap();
    }
    let prompts: Vec<Vec<u64>> = (0..32u64)
        .map(|p| (0..64).map(|b| p * 1000 + b).collect())
        .collect();
    let iterations = if cfg!(miri) { 10 } else { 10_000u64 };
    // Odd requests route over the host's rows, even ones over the fleet the router keeps.
    let mut run = |router: &mut Router<_, _, _, _, _, 1>, i: u64| {
        let prompt = &prompts[usize::try_from(i % 32).unwrap()];
        let request = Request::new(1024, 16);
        let s = if i % 2 == 1 {
            router.route(&policy, &mut selector, &request, prompt, &mut rows, i)
        } else {
            router.route_fleet(&mut fleet, &policy, &mut selector, &request, prompt, i)
        }
        .unwrap();
        router
            .index
            .apply(&KvEvent::Stored {
                worker: s.worker,
                tier: Tier::Device,
                hashes: prompt,
            })
            .unwrap();
        router.ledger.apply(&LedgerEvent::PrefillComplete { id: i });
        router.ledger.prefill_complete(i).unwrap_err();
        router.ledger.free(i).unwrap();
        if i % 97 == 0 {
            router
                .index
                .apply(&KvEvent::Removed {
                    worker: s.worker,
                    tier: Tier::Device,
                    hashes: &prompt[32..],
                })
                .unwrap();
        }
    };
    for i in 0..100 {
        run(&mut router, i);
    }
    let before = allocations();
    for i in 100..100 + iterations {
        run(&mut router, i);
    }
    assert_eq!(allocations() - before, 0);

    // A snapshot written into a buffer sized beforehand, and read back into storage given
    // beforehand: no allocation of the core's own.
    let mut len = 0;
    router.write_snapshot(&mut |b: &[u8]| len += b.len());
    let mut buffer = vec![0u8; len];
    let storage = (
        vec![BlockSlot::<1>::empty(); 1 << 14],
        vec![WorkerSlot::empty(); 128],
        vec![RequestSlot::empty(); 1 << 12],
        vec![LoadSlot::empty(); 128],
        vec![0u64; 256],
    );
    let before = allocations();
    let mut at = 0;
    router.write_snapshot(&mut |b: &[u8]| {
        buffer[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    });
    let mut reader = SnapshotReader::new(&buffer);
    let index = PrefixIndex::<_, _, 1>::from_snapshot(storage.0, storage.1, &mut reader).unwrap();
    let ledger = Ledger::from_snapshot(storage.2, storage.3, storage.4, &mut reader).unwrap();
    reader.finish().unwrap();
    assert_eq!(allocations() - before, 0);
    assert_eq!(index.counters(), router.index.counters());
    assert_eq!(ledger.counters(), router.ledger.counters());
}

#[test]
fn catalog_policies_and_explanations_do_not_allocate() {
    use libroute_core::catalog_config::PolicyConfig;
    let rows = fleet(1024);
    let request = Request::new(2048, 16).session(77);
    let mut selector = Box::new(Selector::<1024>::new());
    let mut explanations = vec![Explanation::EMPTY; 1024];
    let iterations = if cfg!(miri) { 5 } else { 200 };
    for json in [
        r#"{"type": "round_robin"}"#,
        r#"{"type": "random"}"#,
        r#"{"type": "power_of_two", "seed": 1}"#,
        r#"{"type": "least_loaded", "metric": "prefill_tokens"}"#,
        r#"{"type": "dynamo_two_tier"}"#,
        r#"{"type": "sglang_cache_aware"}"#,
        r#"{"type": "llm_d", "kv_capacity_blocks": 512}"#,
        r#"{"type": "ttft"}"#,
        r#"{"type": "ttft", "kv_capacity_blocks": 4096}"#,
        r#"{"type": "composed", "filters": [{"type": "overload", "max_requests": 3},
            {"type": "allow_list", "workers": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]},
            {"type": "require_taints", "taints": []}],
            "scorers": [{"type": "default"}, {"type": "session_affinity", "weight": 3}],
            "picker": {"type": "softmax", "temperature": 0.5}}"#,
    ] {
        let policy = serde_json::from_str::<PolicyConfig>(json)
            .unwrap()
            .build()
            .unwrap();
        policy.select(&mut selector, &request, &rows).unwrap();
        let before = allocations();
        for _ in 0..iterations {
            std::hint::black_box(policy.select(&mut selector, &request, &rows).unwrap());
            std::hint::black_box(
                policy
                    .select_explained(&mut selector, &request, &rows, &mut explanations)
                    .unwrap(),
            );
        }
        assert_eq!(allocations() - before, 0, "{json}");
    }
}

/// The timed path a self-calibrating host runs: route at a time with pending predictions, a
/// timed prefill completion (which refits the speeds), a free; rows with SPEED for `ttft`.
#[test]
fn timed_routing_and_calibration_do_not_allocate() {
    use libroute_core::catalog_config::PolicyConfig;
    let index = PrefixIndex::<_, _, 1>::new(
        vec![BlockSlot::<1>::empty(); 1 << 14],
        vec![WorkerSlot::empty(); 128],
    )
    .unwrap();
    let ledger = Ledger::new(
        vec![RequestSlot::empty(); 1 << 12],
        vec![LoadSlot::empty(); 128],
        vec![0u64; 256],
    )
    .unwrap();
    let mut router = Router::new(index, ledger, 0.75, 0.25);
    let mut pending = Predictions::new(
        vec![PredictionSlot::empty(); 1 << 14],
        vec![PredictionRecord::default(); 1 << 13],
        2_000,
    )
    .unwrap();
    let workers: Vec<WorkerKey> = (0..64).map(|w| WorkerKey::new(w, 0)).collect();
    for &w in &workers {
        router.ledger.add_worker(w).unwrap();
    }
    let policy = serde_json::from_str::<PolicyConfig>(r#"{"type": "ttft"}"#)
        .unwrap()
        .build()
        .unwrap();
    let mut selector = Box::new(Selector::<64>::new());
    let mut rows: Vec<Row> = workers.iter().map(|&w| Row::new(w)).collect();
    let prompts: Vec<Vec<u64>> = (0..32u64)
        .map(|p| (0..64).map(|b| p * 1000 + b).collect())
        .collect();
    let iterations = if cfg!(miri) { 10 } else { 10_000u64 };
    let mut run = |router: &mut Router<_, _, _, _, _, 1>, i: u64| {
        let prompt = &prompts[usize::try_from(i % 32).unwrap()];
        let now = 10.0 * i as f64;
        router
            .route_at(
                Some(&mut pending),
                &policy,
                &mut selector,
                &Request::new(1024, 16),
                prompt,
                &mut rows,
                i,
                now,
            )
            .unwrap();
        assert!(rows.iter().all(|r| i < 20 || r.speed().is_some()));
        router.ledger.prefill_complete_at(i, now + 7.0).unwrap();
        router.ledger.free(i).unwrap();
    };
    for i in 0..100 {
        run(&mut router, i);
    }
    let before = allocations();
    for i in 100..100 + iterations {
        run(&mut router, i);
    }
    assert_eq!(allocations() - before, 0);
}

/// `[0.0, [["BlockStored", hashes, parent, tokens, 16, None, "GPU"]]]` with `n` blocks (n < 16),
/// block `b`'s engine hash `first + b` and tokens `b * 16 .. b * 16 + 16` (mod 128).
fn stored_payload(first: u8, n: u8, parent: Option<u8>) -> Vec<u8> {
    let mut p = vec![0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x97, 0xab];
    p.extend_from_slice(b"BlockStored");
    p.push(0x90 | n);
    p.extend((0..n).map(|b| (first + b) & 0x7f));
    p.push(parent.map_or(0xc0, |h| h & 0x7f));
    p.extend_from_slice(&[0xdc, 0, n * 16]);
    p.extend((0..u16::from(n) * 16).map(|t| u8::try_from(t % 128).unwrap()));
    p.extend_from_slice(&[16, 0xc0, 0xa3, b'G', b'P', b'U']);
    p
}

#[test]
fn hashing_and_kv_ingest_do_not_allocate() {
    let mut index = PrefixIndex::<_, _, 1>::new(
        vec![BlockSlot::<1>::empty(); 1 << 12],
        vec![WorkerSlot::empty(); 128],
    )
    .unwrap();
    let mut ingest = KvIngest::new(vec![EngineSlot::empty(); 1 << 10], 16).unwrap();
    let first = stored_payload(0, 8, None);
    let next = stored_payload(8, 8, Some(7));
    // BlockRemoved of engine hashes 0..8, then AllBlocksCleared.
    let mut removed = vec![0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x92, 0x93, 0xac];
    removed.extend_from_slice(b"BlockRemoved");
    removed.extend_from_slice(&[0x98, 0, 1, 2, 3, 4, 5, 6, 7, 0xc0, 0x91, 0xb0]);
    removed.extend_from_slice(b"AllBlocksCleared");
    let tokens: Vec<u32> = (0..2048).collect();
    let hasher = BlockHasher::new(16, Some(b"adapter")).unwrap();
    let mut block_hashes = vec![0u64; 128];
    let iterations = if cfg!(miri) { 3 } else { 2_000u64 };
    let mut run = |i: u64| {
        let w = WorkerKey::new(i % 8, 0);
        assert_eq!(
            ingest.apply(&mut index, w, &first).unwrap().stored_blocks,
            8
        );
        assert_eq!(ingest.apply(&mut index, w, &next).unwrap().stored_blocks, 8);
        assert_eq!(ingest.apply(&mut index, w, &removed).unwrap().clears, 1);
        assert!(ingest.apply(&mut index, w, &first[..20]).is_err());
        assert_eq!(
            hasher.sequence_hashes(&tokens, None, &mut block_hashes),
            Ok(128)
        );
    };
    run(0);
    let before = allocations();
    for i in 1..iterations {
        run(i);
    }
    assert_eq!(allocations() - before, 0);
}
