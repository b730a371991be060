//! Ledger call streams from arbitrary bytes (books, completions, frees, replica events),
//! checked after every call against the reference model the property tests use
//! (`core/tests/common/mod.rs`): each result and every worker's load.

use arbitrary::{Arbitrary, Unstructured};
use libroute_core::{Ledger, LedgerEvent, LoadSlot, RequestSlot, WorkerKey};

use crate::common;

#[derive(Arbitrary, Debug)]
enum Op {
    Book(u8, u8, u16, u8),
    Prefill(u8),
    Free(u8),
    /// A replica's events for a fresh id (above the local ids), in the order given, possibly
    /// repeated: the final load must be as if they came in order once.
    Replica(u8, u8, u16, u8, Vec<u8>),
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(ops) = Vec::<Op>::arbitrary(&mut Unstructured::new(data)) else { return };
    // 512 requests and 256 tombstones: more than 40 local ids plus 200 replica ids can use, so the
    // model (which has no capacity) stays exact.
    let mut ledger = Ledger::new(vec![RequestSlot::empty(); 1024], vec![LoadSlot::empty(); 16], vec![0u64; 256]).unwrap();
    let mut model = common::LedgerModel::default();
    for w in 0..4u64 {
        ledger.add_worker(WorkerKey::new(w, 0)).unwrap();
        model.workers.insert(w);
    }
    let mut next_replica_id = 1_000u64;
    for op in ops.iter().take(200) {
        match op {
            Op::Book(id, w, p, b) => {
                let (id, w) = (u64::from(id % 40), u64::from(w % 5));
                assert_eq!(ledger.book(id, WorkerKey::new(w, 0), u64::from(*p), u64::from(*b)), model.book(id, w, u64::from(*p), u64::from(*b)));
            }
            Op::Prefill(id) => assert_eq!(ledger.prefill_complete(u64::from(id % 40)), model.prefill_complete(u64::from(id % 40))),
            Op::Free(id) => assert_eq!(ledger.free(u64::from(id % 40)), model.free(u64::from(id % 40))),
            Op::Replica(w, kinds, p, b, order) => {
                let id = next_replica_id;
                next_replica_id += 1;
                let worker = u64::from(w % 5);
                let booked = LedgerEvent::Booked { id, worker: WorkerKey::new(worker, 0), prefill_tokens: u64::from(*p), blocks: u64::from(*b) };
                let (done, freed) = (kinds & 1 != 0, kinds & 2 != 0);
                let mut events = vec![booked];
                if done {
                    events.push(LedgerEvent::PrefillComplete { id });
                }
                if freed {
                    events.push(LedgerEvent::Freed { id });
                }
                // Deliver in an arbitrary order, each event once or twice.
                for &o in order.iter().take(8) {
                    ledger.apply(&events[usize::from(o) % events.len()]);
                }
                for e in &events {
                    ledger.apply(e);
                }
                if !freed && model.workers.contains(&worker) {
                    model.requests.insert(id, (worker, u64::from(*p), u64::from(*b), done));
                }
            }
        }
        for w in 0..4 {
            assert_eq!(ledger.load(WorkerKey::new(w, 0)).unwrap(), model.load(w));
        }
    }
}
