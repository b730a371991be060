//! KV event streams from arbitrary bytes into the prefix index, checked after every event
//! against the reference model the property tests use (`core/tests/common/mod.rs`): overlaps per
//! worker and tier, block and eviction counts.

use arbitrary::{Arbitrary, Unstructured};
use libroute_core::{BlockSlot, KvEvent, Overlaps, PrefixIndex, Tier, WorkerKey, WorkerSlot};

use crate::common;

#[derive(Arbitrary, Debug)]
enum Op {
    Store(u8, u8, Vec<u8>),
    Remove(u8, u8, Vec<u8>),
    Clear(u8),
    RemoveWorker(u8),
    Query(Vec<u8>),
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(ops) = Vec::<Op>::arbitrary(&mut Unstructured::new(data)) else { return };
    let mut index = PrefixIndex::<_, _, 1>::new(vec![BlockSlot::<1>::empty(); 32], vec![WorkerSlot::empty(); 128]).unwrap();
    let mut model = common::Model::new(32);
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
        }
        assert_eq!(index.counters().blocks, model.held.len());
        assert_eq!(index.counters().evictions, model.evictions);
    }
}
