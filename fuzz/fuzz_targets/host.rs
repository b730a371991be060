//! Event streams from arbitrary bytes into the prefix index and the load ledger, each checked
//! after every event against the reference models the property tests use
//! (`core/tests/common/mod.rs`): overlaps per worker and tier, block and eviction counts, ledger
//! results and loads.

#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use libroute_core::{BlockSlot, KvEvent, Ledger, LoadSlot, Overlaps, PrefixIndex, RequestSlot, Tier, WorkerKey, WorkerSlot};

#[path = "../../core/tests/common/mod.rs"]
mod common;

#[derive(Arbitrary, Debug)]
enum Op {
    Store(u8, u8, Vec<u8>),
    Remove(u8, u8, Vec<u8>),
    Clear(u8),
    RemoveWorker(u8),
    Query(Vec<u8>),
    Book(u8, u8, u16, u8),
    Prefill(u8),
    Free(u8),
}

fuzz_target!(|data: &[u8]| {
    let Ok(ops) = Vec::<Op>::arbitrary(&mut Unstructured::new(data)) else { return };
    let mut index = PrefixIndex::<_, _, 1>::new(vec![BlockSlot::<1>::empty(); 32], vec![WorkerSlot::empty(); 128]).unwrap();
    let mut model = common::Model { capacity: index.block_capacity(), ..common::Model::default() };
    let mut ledger = Ledger::new(vec![RequestSlot::empty(); 64], vec![LoadSlot::empty(); 16], vec![0u64; 8]).unwrap();
    let mut ledger_model = common::LedgerModel::default();
    for w in 0..4u64 {
        ledger.add_worker(WorkerKey::new(w, 0)).unwrap();
        ledger_model.workers.insert(w);
    }
    let mut overlaps = Overlaps::<1>::new();
    let hashes = |h: &[u8]| -> Vec<u64> { h.iter().take(12).map(|b| u64::from(*b % 40)).collect() };
    for op in ops.iter().take(400) {
        match op {
            Op::Store(w, t, h) => {
                let (worker, tier, h) = (WorkerKey::new(u64::from(w % 6), 0), usize::from(t % 3), hashes(h));
                index.apply(&KvEvent::Stored { worker, tier: Tier::ALL[tier], hashes: &h }).unwrap();
                model.store(worker, tier, &h);
            }
            Op::Remove(w, t, h) => {
                let (worker, tier, h) = (WorkerKey::new(u64::from(w % 7), 0), usize::from(t % 3), hashes(h));
                index.apply(&KvEvent::Removed { worker, tier: Tier::ALL[tier], hashes: &h }).unwrap();
                model.remove(worker, tier, &h);
            }
            Op::Clear(w) | Op::RemoveWorker(w) => {
                let worker = WorkerKey::new(u64::from(w % 7), 0);
                let event = if matches!(op, Op::Clear(_)) { KvEvent::Cleared { worker } } else { KvEvent::WorkerRemoved { worker } };
                index.apply(&event).unwrap();
                model.clear(worker);
            }
            Op::Query(h) => {
                let h = hashes(h);
                if h.is_empty() {
                    continue;
                }
                index.query(&h, &mut overlaps);
                for w in 0..7 {
                    let worker = WorkerKey::new(w, 0);
                    assert_eq!(index.overlap(&overlaps, worker).unwrap_or([0; 3]), model.overlap(worker, &h));
                }
            }
            Op::Book(id, w, p, b) => {
                let (id, w) = (u64::from(id % 40), u64::from(w % 5));
                let got = ledger.book(id, WorkerKey::new(w, 0), u64::from(*p), u64::from(*b));
                let expected = if ledger_model.requests.len() >= 32 && !ledger_model.requests.contains_key(&id) && ledger_model.workers.contains(&w) {
                    got // the table is full: the model has no capacity; only check nothing changed below
                } else {
                    ledger_model.book(id, w, u64::from(*p), u64::from(*b))
                };
                assert_eq!(got, expected);
            }
            Op::Prefill(id) => assert_eq!(ledger.prefill_complete(u64::from(id % 40)), ledger_model.prefill_complete(u64::from(id % 40))),
            Op::Free(id) => assert_eq!(ledger.free(u64::from(id % 40)), ledger_model.free(u64::from(id % 40))),
        }
        assert_eq!(index.counters().blocks, model.held.len());
        assert_eq!(index.counters().evictions, model.evictions);
        for w in 0..4 {
            assert_eq!(ledger.load(WorkerKey::new(w, 0)).unwrap(), ledger_model.load(w));
        }
    }
});
