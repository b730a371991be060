//! The load ledger against reference models written with hash maps: the strict local API on long
//! random call streams (duplicates, unknown ids, double frees: errors that change nothing), and
//! replica events delivered late, twice and in any order (idempotent, order-independent).

use std::collections::HashMap;

mod common;
use common::LedgerModel;

use libroute_core::{
    Ledger, LedgerError, LedgerEvent, LoadSlot, RequestSlot, WorkerKey, WorkerLoad,
};
use proptest::prelude::*;

type TestLedger = Ledger<Vec<RequestSlot>, Vec<LoadSlot>, Vec<u64>>;

fn ledger(tombstones: usize) -> TestLedger {
    let mut l = Ledger::new(
        vec![RequestSlot::empty(); 512],
        vec![LoadSlot::empty(); 16],
        vec![0u64; tombstones],
    )
    .unwrap();
    for w in 0..4 {
        l.add_worker(WorkerKey::new(w, 0)).unwrap();
    }
    l
}

/// The load the model's requests put on `worker`.
fn model_load(model: &HashMap<u64, (u64, u64, u64, bool)>, worker: u64) -> WorkerLoad {
    LedgerModel {
        requests: model.clone(),
        ..LedgerModel::default()
    }
    .load(worker)
}

#[derive(Debug, Clone)]
enum Call {
    Book(u64, u64, u64, u64),
    Prefill(u64),
    Free(u64),
    Cancel(u64),
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        (0u64..30, 0u64..5, 0u64..1000, 0u64..64).prop_map(|(id, w, p, b)| Call::Book(id, w, p, b)),
        (0u64..30).prop_map(Call::Prefill),
        (0u64..30).prop_map(Call::Free),
        (0u64..30).prop_map(Call::Cancel),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    #[allow(clippy::map_entry, reason = "the model reads in the order the ledger decides: duplicate, worker, insert")]
    fn the_local_api_agrees_with_the_model(calls in prop::collection::vec(call(), 1..200)) {
        let mut l = ledger(8);
        let mut model: HashMap<u64, (u64, u64, u64, bool)> = HashMap::new();
        for c in calls {
            let (got, expected) = match c {
                Call::Book(id, w, p, b) => {
                    let expected = if model.contains_key(&id) {
                        Err(LedgerError::DuplicateId(id))
                    } else if w >= 4 {
                        Err(LedgerError::UnknownWorker(WorkerKey::new(w, 0)))
                    } else {
                        model.insert(id, (w, p, b, false));
                        Ok(())
                    };
                    (l.book(id, WorkerKey::new(w, 0), p, b), expected)
                }
                Call::Prefill(id) => {
                    let expected = match model.get_mut(&id) {
                        None => Err(LedgerError::UnknownId(id)),
                        Some(e) if e.3 => Err(LedgerError::PrefillAlreadyComplete(id)),
                        Some(e) => {
                            e.3 = true;
                            Ok(())
                        }
                    };
                    (l.prefill_complete(id), expected)
                }
                Call::Free(id) | Call::Cancel(id) => {
                    let expected = if model.remove(&id).is_some() { Ok(()) } else { Err(LedgerError::UnknownId(id)) };
                    let got = if matches!(c, Call::Free(_)) { l.free(id) } else { l.cancel(id) };
                    (got, expected)
                }
            };
            prop_assert_eq!(got, expected);
            for w in 0..4 {
                prop_assert_eq!(l.load(WorkerKey::new(w, 0)).unwrap(), model_load(&model, w));
            }
            prop_assert_eq!(l.counters().active_requests, model.len());
        }
    }

    #[test]
    fn replica_events_are_idempotent_and_order_independent(
        requests in prop::collection::vec((0u64..6, 0u64..1000, 0u64..64, any::<bool>(), any::<bool>()), 1..40),
        shuffle in any::<u64>(),
        repeats in prop::collection::vec(any::<prop::sample::Index>(), 0..30),
    ) {
        // Each request: Booked, maybe PrefillComplete, maybe Freed; delivered in any order, some twice.
        let mut events = Vec::new();
        let mut model: HashMap<u64, (u64, u64, u64, bool)> = HashMap::new();
        for (id, &(w, p, b, done, freed)) in requests.iter().enumerate() {
            let id = id as u64;
            events.push(LedgerEvent::Booked { id, worker: WorkerKey::new(w, 0), prefill_tokens: p, blocks: b });
            if done {
                events.push(LedgerEvent::PrefillComplete { id });
            }
            if freed {
                events.push(LedgerEvent::Freed { id });
            } else if w < 4 {
                model.insert(id, (w, p, b, done));
            }
        }
        for r in &repeats {
            let e = events[r.index(events.len())];
            events.push(e);
        }
        fastrand::Rng::with_seed(shuffle).shuffle(&mut events);
        let mut l = ledger(256);
        for e in &events {
            l.apply(e);
        }
        for w in 0..4 {
            prop_assert_eq!(l.load(WorkerKey::new(w, 0)).unwrap(), model_load(&model, w), "worker {}", w);
        }
        prop_assert_eq!(l.counters().active_requests, model.len());
        // Applying everything again changes nothing.
        for e in &events {
            l.apply(e);
        }
        for w in 0..4 {
            prop_assert_eq!(l.load(WorkerKey::new(w, 0)).unwrap(), model_load(&model, w));
        }
    }
}

#[test]
fn unknown_workers_are_ignored_and_counted() {
    let mut l = ledger(4);
    l.apply(&LedgerEvent::Booked {
        id: 1,
        worker: WorkerKey::new(42, 0),
        prefill_tokens: 5,
        blocks: 5,
    });
    assert_eq!(l.counters().unknown_worker_events, 1);
    assert_eq!(l.counters().active_requests, 0);
    assert_eq!(
        l.book(1, WorkerKey::new(42, 0), 5, 5),
        Err(LedgerError::UnknownWorker(WorkerKey::new(42, 0)))
    );
}

#[test]
fn a_full_request_table_refuses_and_changes_nothing() {
    let mut l = Ledger::new(
        vec![RequestSlot::empty(); 8],
        vec![LoadSlot::empty(); 8],
        vec![0u64; 0],
    )
    .unwrap();
    let w = WorkerKey::new(1, 0);
    l.add_worker(w).unwrap();
    for id in 0..4 {
        l.book(id, w, 1, 1).unwrap();
    }
    assert_eq!(
        l.book(4, w, 1, 1),
        Err(LedgerError::RequestsFull { capacity: 4 })
    );
    assert_eq!(l.load(w).unwrap().active_requests, 4);
}

#[test]
fn a_booking_relayed_as_its_event_books_the_same_on_another_replica() {
    let (mut here, mut there) = (ledger(8), ledger(8));
    let w = WorkerKey::new(2, 0);
    here.book(9, w, 300, 7).unwrap();
    let event = here.booking(9).unwrap();
    assert_eq!(
        event,
        LedgerEvent::Booked {
            id: 9,
            worker: w,
            prefill_tokens: 300,
            blocks: 7
        }
    );
    there.apply(&event);
    assert_eq!(there.load(w), here.load(w));
    // Not booked: unknown, a tombstone only, or freed.
    assert_eq!(here.booking(10), None);
    here.apply(&LedgerEvent::PrefillComplete { id: 11 });
    assert_eq!(here.booking(11), None);
    here.free(9).unwrap();
    assert_eq!(here.booking(9), None);
}
