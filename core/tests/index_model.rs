//! The prefix index against a reference model written with hash maps, on long random event
//! streams that include eviction (a small table), repeated and out-of-order events, removals of
//! unknown blocks, clears and worker removals.

use std::collections::HashMap;

mod common;
use common::Model;

use libroute_core::{
    BlockSlot, IndexError, KvEvent, Overlaps, PrefixIndex, Row, Tier, WorkerKey, WorkerSlot,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Store(u64, usize, Vec<u64>),
    Remove(u64, usize, Vec<u64>),
    Clear(u64),
    RemoveWorker(u64),
    Query(Vec<u64>),
}

fn op() -> impl Strategy<Value = Op> {
    let hashes = prop::collection::vec(0u64..30, 1..8);
    prop_oneof![
        6 => (0u64..5, 0usize..3, hashes.clone()).prop_map(|(w, t, h)| Op::Store(w, t, h)),
        3 => (0u64..6, 0usize..3, hashes.clone()).prop_map(|(w, t, h)| Op::Remove(w, t, h)),
        1 => (0u64..6).prop_map(Op::Clear),
        1 => (0u64..6).prop_map(Op::RemoveWorker),
        4 => hashes.prop_map(Op::Query),
    ]
}

/// An index of one-word holder sets (up to 64 workers) over `slots` block slots.
fn one_word_index(slots: usize) -> PrefixIndex<Vec<BlockSlot<1>>, Vec<WorkerSlot>, 1> {
    PrefixIndex::new(
        vec![BlockSlot::<1>::empty(); slots],
        vec![WorkerSlot::empty(); 128],
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn the_index_agrees_with_the_model(ops in prop::collection::vec(op(), 1..300)) {
        let mut index = one_word_index(16);
        let mut model = Model::new(16);
        let tiers = Tier::ALL;
        let mut overlaps = Overlaps::<1>::new();
        for op in ops {
            match op {
                Op::Store(w, t, h) => {
                    let worker = WorkerKey::new(w, 0);
                    index.apply(&KvEvent::Stored { worker, tier: tiers[t], hashes: &h }).unwrap();
                    model.store(worker, t, &h);
                }
                Op::Remove(w, t, h) => {
                    let worker = WorkerKey::new(w, 0);
                    index.apply(&KvEvent::Removed { worker, tier: tiers[t], hashes: &h }).unwrap();
                    model.remove(worker, t, &h);
                }
                Op::Clear(w) => {
                    index.apply(&KvEvent::Cleared { worker: WorkerKey::new(w, 0) }).unwrap();
                    model.clear(WorkerKey::new(w, 0));
                }
                Op::RemoveWorker(w) => {
                    index.apply(&KvEvent::WorkerRemoved { worker: WorkerKey::new(w, 0) }).unwrap();
                    model.clear(WorkerKey::new(w, 0));
                }
                Op::Query(h) => {
                    index.query(&h, &mut overlaps);
                    let first_held = model.held.get(&h[0]).is_some_and(|w| !w.is_empty());
                    prop_assert_eq!(overlaps.has_tier_matches(), first_held);
                    for w in 0..6 {
                        let worker = WorkerKey::new(w, 0);
                        let expected = model.overlap(worker, &h);
                        let actual = index.overlap(&overlaps, worker).unwrap_or([0; 3]);
                        prop_assert_eq!(actual, expected, "worker {} over {:?}", w, h);
                    }
                    let mut rows: Vec<Row> = (0..6).map(|w| Row::new(WorkerKey::new(w, 0))).collect();
                    index.fill_rows(&overlaps, &mut rows, 0.75, 0.25, 16);
                    for row in &rows {
                        let [d, hst, dsk] = model.overlap(row.worker, &h);
                        let c = row.cache();
                        prop_assert_eq!((c.device_blocks, c.host_blocks, c.disk_blocks), (d, hst, dsk));
                    }
                }
            }
            prop_assert_eq!(index.counters().blocks, model.held.len());
            prop_assert_eq!(index.counters().evictions, model.evictions);
        }
    }
}

#[test]
fn a_worker_beyond_capacity_is_refused_and_changes_nothing() {
    let mut index = one_word_index(64);
    for w in 0..64 {
        index
            .apply(&KvEvent::Stored {
                worker: WorkerKey::new(w, 0),
                tier: Tier::Device,
                hashes: &[1],
            })
            .unwrap();
    }
    let late = WorkerKey::new(99, 0);
    let err = index
        .apply(&KvEvent::Stored {
            worker: late,
            tier: Tier::Device,
            hashes: &[2],
        })
        .unwrap_err();
    assert_eq!(
        err,
        IndexError::WorkersFull {
            worker: late,
            capacity: 64
        }
    );
    assert_eq!(index.counters().blocks, 1);
    assert_eq!(index.counters().rejected_events, 1);
    // Removing one worker frees its bit for the newcomer.
    index
        .apply(&KvEvent::WorkerRemoved {
            worker: WorkerKey::new(5, 0),
        })
        .unwrap();
    index
        .apply(&KvEvent::Stored {
            worker: late,
            tier: Tier::Device,
            hashes: &[2],
        })
        .unwrap();
    assert_eq!(index.counters().workers, 64);
}

/// The clock's promise, in a user's terms: a full index keeps the blocks that keep being stored
/// (a shared system prompt) through a long stream of blocks stored once, where evicting in
/// store order (first in, first out) would drop them every time the stream turns the table over.
#[test]
fn blocks_stored_again_outlive_blocks_stored_once() {
    let mut index = one_word_index(1024);
    let worker = WorkerKey::new(1, 0);
    let store = |index: &mut PrefixIndex<_, _, 1>, hashes: &[u64]| {
        index
            .apply(&KvEvent::Stored {
                worker,
                tier: Tier::Device,
                hashes,
            })
            .unwrap();
    };
    let hot: Vec<u64> = (0..32).map(|i| 1_000_000 + i).collect();
    store(&mut index, &hot);
    // 20,000 blocks stored once (about 40 times the capacity of 512), the hot ones again after
    // every 128 of them: a quarter of the capacity, well within one turn of the hand. Once the
    // hand has turned (by the first 1,024 cold blocks), every hot block is held whenever it is
    // stored again.
    let mut overlaps = Overlaps::<1>::new();
    for (n, cold) in (0..20_000u64).enumerate() {
        store(&mut index, &[cold]);
        if n % 128 == 127 {
            if n >= 1024 {
                index.query(&hot, &mut overlaps);
                assert_eq!(
                    index.overlap(&overlaps, worker),
                    Some([32, 0, 0]),
                    "after {n}"
                );
            }
            store(&mut index, &hot);
        }
    }
    // The index is full, and keeps the newest of the rest but not the oldest.
    assert_eq!(index.counters().blocks, 512);
    assert!(index.counters().evictions >= 20_032 - 512);
    index.query(&[19_999], &mut overlaps);
    assert_eq!(index.overlap(&overlaps, worker), Some([1, 0, 0]));
    index.query(&[0], &mut overlaps);
    assert_eq!(index.overlap(&overlaps, worker), Some([0, 0, 0]));
}

#[test]
fn storage_that_does_not_fit_is_an_error() {
    assert!(
        PrefixIndex::<_, _, 1>::new(
            vec![BlockSlot::<1>::empty(); 100],
            vec![WorkerSlot::empty(); 128]
        )
        .is_err()
    );
    assert!(
        PrefixIndex::<_, _, 2>::new(
            vec![BlockSlot::<2>::empty(); 64],
            vec![WorkerSlot::empty(); 128]
        )
        .is_err()
    );
}

#[test]
fn many_workers_and_long_prefixes_count_exactly() {
    // 256 workers (4 words); worker w holds the first w blocks of a 300-block prompt, spread over
    // tiers by position, so every count from 0 to 255 and every carry of the counters is hit.
    let mut index = PrefixIndex::<_, _, 4>::new(
        vec![BlockSlot::<4>::empty(); 1024],
        vec![WorkerSlot::empty(); 512],
    )
    .unwrap();
    let prompt: Vec<u64> = (1000..1300).collect();
    for w in 0..256u64 {
        let n = usize::try_from(w).unwrap();
        let worker = WorkerKey::new(w, 0);
        for (i, &h) in prompt[..n].iter().enumerate() {
            let tier = Tier::ALL[i % 3];
            index
                .apply(&KvEvent::Stored {
                    worker,
                    tier,
                    hashes: &[h],
                })
                .unwrap();
        }
    }
    let mut overlaps = Overlaps::<4>::new();
    index.query(&prompt, &mut overlaps);
    for w in 0..256u32 {
        let got = index
            .overlap(&overlaps, WorkerKey::new(u64::from(w), 0))
            .unwrap_or([0; 3]);
        let expect = [w.div_ceil(3), (w + 1) / 3, w / 3];
        assert_eq!(got, expect, "worker {w}");
    }
    assert_eq!(overlaps.longest(), 255);
}

#[derive(Debug, Clone)]
enum Approx {
    Record(u64, Vec<u64>, u64),
    Query(Vec<u64>, u64),
}

fn approx_op() -> impl Strategy<Value = Approx> {
    let hashes = prop::collection::vec(0u64..20, 1..6);
    prop_oneof![
        (0u64..4, hashes.clone(), 0u64..50).prop_map(|(w, h, dt)| Approx::Record(w, h, dt)),
        (hashes, 0u64..50).prop_map(|(h, dt)| Approx::Query(h, dt)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn approximate_mode_agrees_with_the_model(ops in prop::collection::vec(approx_op(), 1..200)) {
        use libroute_core::{PredictionRecord, PredictionSlot, Predictions};
        let ttl = 100;
        let mut index = one_word_index(256);
        let mut predictions = Predictions::new(vec![PredictionSlot::empty(); 2048], vec![PredictionRecord::default(); 1024], ttl).unwrap();
        let mut model: HashMap<(u64, u64), u64> = HashMap::new();
        let mut now = 0u64;
        let mut overlaps = Overlaps::<1>::new();
        for op in ops {
            match op {
                Approx::Record(w, h, dt) => {
                    now += dt;
                    predictions.record(&mut index, WorkerKey::new(w, 0), &h, now).unwrap();
                    for hash in h {
                        model.insert((hash, w), now + ttl);
                    }
                }
                Approx::Query(h, dt) => {
                    now += dt;
                    predictions.expire(&mut index, now);
                    index.query(&h, &mut overlaps);
                    prop_assert!(!overlaps.has_tier_matches());
                    for w in 0..4 {
                        let live = h.iter().take_while(|hash| model.get(&(**hash, w)).is_some_and(|e| *e > now)).count();
                        let got = index.overlap(&overlaps, WorkerKey::new(w, 0)).unwrap_or([0; 3]);
                        prop_assert_eq!(got, [u32::try_from(live).unwrap(), 0, 0], "worker {} at {}", w, now);
                    }
                }
            }
        }
        prop_assert_eq!(predictions.forced_expiries(), 0);
    }
}

#[test]
fn a_full_prediction_ring_expires_the_oldest_early() {
    use libroute_core::{PredictionRecord, PredictionSlot, Predictions};
    let mut index = one_word_index(64);
    let mut predictions = Predictions::new(
        vec![PredictionSlot::empty(); 64],
        vec![PredictionRecord::default(); 4],
        1000,
    )
    .unwrap();
    let w = WorkerKey::new(1, 0);
    predictions.record(&mut index, w, &[1, 2, 3, 4], 0).unwrap();
    predictions.record(&mut index, w, &[5, 6], 1).unwrap();
    assert_eq!(predictions.forced_expiries(), 2);
    let mut overlaps = Overlaps::<1>::new();
    index.query(&[3, 4, 5, 6], &mut overlaps);
    assert_eq!(index.overlap(&overlaps, w), Some([4, 0, 0]));
    index.query(&[1], &mut overlaps);
    assert_eq!(
        index.overlap(&overlaps, w),
        Some([0, 0, 0]),
        "block 1 expired early"
    );
}

#[test]
fn kv_events_and_predictions_combine() {
    use libroute_core::{PredictionRecord, PredictionSlot, Predictions};
    let mut index = one_word_index(64);
    let mut predictions = Predictions::new(
        vec![PredictionSlot::empty(); 64],
        vec![PredictionRecord::default(); 16],
        10,
    )
    .unwrap();
    let w = WorkerKey::new(1, 0);
    index
        .apply(&KvEvent::Stored {
            worker: w,
            tier: Tier::Host,
            hashes: &[1],
        })
        .unwrap();
    predictions.record(&mut index, w, &[1, 2], 0).unwrap();
    let mut overlaps = Overlaps::<1>::new();
    index.query(&[1, 2], &mut overlaps);
    // Block 1 is predicted (device) and held in host memory: the faster counts.
    assert_eq!(index.overlap(&overlaps, w), Some([2, 0, 0]));
    assert!(overlaps.has_tier_matches());
    predictions.expire(&mut index, 10);
    index.query(&[1, 2], &mut overlaps);
    assert_eq!(
        index.overlap(&overlaps, w),
        Some([0, 1, 0]),
        "the KV event outlives the prediction"
    );
}

#[test]
fn routing_in_approximate_mode_follows_its_own_predictions() {
    use libroute_core::{
        DefaultKnobs, Ledger, LoadSlot, PredictionRecord, PredictionSlot, Predictions, Request,
        RequestSlot, Router, Selector,
    };
    let index = one_word_index(256);
    let ledger = Ledger::new(
        vec![RequestSlot::empty(); 64],
        vec![LoadSlot::empty(); 16],
        vec![0u64; 16],
    )
    .unwrap();
    let mut router = Router::new(index, ledger, 0.75, 0.25);
    let mut predictions = Predictions::new(
        vec![PredictionSlot::empty(); 256],
        vec![PredictionRecord::default(); 128],
        1000,
    )
    .unwrap();
    for w in 0..4 {
        router.ledger.add_worker(WorkerKey::new(w, 0)).unwrap();
    }
    let policy = DefaultKnobs::default().build().unwrap();
    let mut selector = Selector::<8>::new();
    let prompt: Vec<u64> = (500..516).collect();
    let mut rows: Vec<Row> = (0..4).map(|w| Row::new(WorkerKey::new(w, 0))).collect();
    let req = Request::new(256, 16);
    let first = router
        .route_predicting(
            &mut predictions,
            &policy,
            &mut selector,
            &req,
            &prompt,
            &mut rows,
            1,
            0,
        )
        .unwrap();
    router.ledger.free(1).unwrap();
    // The same prefix goes back to the same worker while the prediction lives...
    let again = router
        .route_predicting(
            &mut predictions,
            &policy,
            &mut selector,
            &req,
            &prompt,
            &mut rows,
            2,
            500,
        )
        .unwrap();
    assert_eq!(again.worker, first.worker);
    assert_eq!(again.cached_tokens, 256);
    router.ledger.free(2).unwrap();
    // ...and after it expired (refreshed at 500, so at 1500) the cache credit is gone.
    let late = router
        .route_predicting(
            &mut predictions,
            &policy,
            &mut selector,
            &req,
            &prompt,
            &mut rows,
            3,
            1500,
        )
        .unwrap();
    assert_eq!(late.cached_tokens, 0);
}
