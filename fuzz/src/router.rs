//! A `Router` driven through long random sequences of what a host feeds it: KV events (stores,
//! removals, clears, workers leaving the index), routes, prefill completions, frees,
//! cancellations, and other replicas' ledger events (in any order, repeated), on one id space.
//! After every step the ledger's per-worker totals equal the sum of what a reference model holds
//! booked, and its active count and duplicate checks agree; every route's overlap query and the
//! rows it fills agree with the index model (`core/tests/common/mod.rs`), whether the router
//! fills the host's rows (with places kept beside them or not) or the rows of a `Fleet` it
//! keeps.

use std::collections::HashMap;

use arbitrary::{Arbitrary, Unstructured};
use libroute_core::{
    BlockSlot, DefaultKnobs, Fleet, FleetPlace, KvEvent, Ledger, LedgerError, LedgerEvent,
    LoadSlot, Overlaps, Place, PrefixIndex, Request, RequestSlot, RouteError, Router, Row,
    Selector, TaintSet, Tier, WorkerKey, WorkerLoad, WorkerSlot,
};

use crate::common;

/// Workers registered with the ledger; worker `WORKERS` is unknown to it (replica events naming
/// it are ignored), and the index hears of all of them.
const WORKERS: u64 = 6;
/// Request ids, shared by local routes and replica events so that they meet.
const IDS: u64 = 48;
/// Steps per input: the tombstone ring (512) never fills, so the model needs no capacity.
const STEPS: usize = 256;
const BLOCK_SIZE: u32 = 16;

#[derive(Arbitrary, Debug)]
enum Op {
    /// Blocks `start..start + len` of prefix family `family` stored on a worker in a tier.
    Store { worker: u8, tier: u8, family: u8, start: u8, len: u8 },
    Remove { worker: u8, tier: u8, family: u8, start: u8, len: u8 },
    Clear(u8),
    WorkerRemoved(u8),
    /// A request of `prompt` tokens whose leading blocks are those of `family`.
    Route { id: u8, family: u8, prompt: u16 },
    Prefill(u8),
    Free(u8),
    Cancel(u8),
    /// Another replica's event.
    Booked { id: u8, worker: u8, prefill: u16, blocks: u8 },
    PrefillComplete(u8),
    Freed(u8),
}

/// What the ledger should hold for one id.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Held {
    Booked { worker: u64, prefill: u64, blocks: u64, done: bool },
    /// A replica's completion arrived before its booking.
    CompletedFirst,
    /// Freed by a replica: a later booking of the id is late, ignored.
    Freed,
}

#[derive(Default)]
struct LedgerModel {
    ids: HashMap<u64, Held>,
}

impl LedgerModel {
    fn load(&self, worker: u64) -> WorkerLoad {
        let mut load = WorkerLoad::default();
        for held in self.ids.values() {
            if let Held::Booked { worker: w, prefill, blocks, done } = *held
                && w == worker
            {
                load.active_prefill_tokens += if done { 0 } else { prefill };
                load.active_decode_blocks += blocks;
                load.active_requests += 1;
            }
        }
        load
    }

    fn booked(&self) -> usize {
        self.ids.values().filter(|h| matches!(h, Held::Booked { .. })).count()
    }

    fn prefill_complete(&mut self, id: u64) -> Result<(), LedgerError> {
        match self.ids.get_mut(&id) {
            Some(Held::Booked { done: true, .. }) => Err(LedgerError::PrefillAlreadyComplete(id)),
            Some(Held::Booked { done, .. }) => {
                *done = true;
                Ok(())
            }
            _ => Err(LedgerError::UnknownId(id)),
        }
    }

    fn free(&mut self, id: u64) -> Result<(), LedgerError> {
        match self.ids.get(&id) {
            Some(Held::Booked { .. }) => {
                self.ids.remove(&id);
                Ok(())
            }
            _ => Err(LedgerError::UnknownId(id)),
        }
    }

    fn apply(&mut self, event: &LedgerEvent) {
        match *event {
            LedgerEvent::Booked { id, worker, prefill_tokens, blocks } => {
                if worker.worker_id >= WORKERS {
                    return;
                }
                let booked = |done| Held::Booked { worker: worker.worker_id, prefill: prefill_tokens, blocks, done };
                match self.ids.get(&id) {
                    None => {
                        self.ids.insert(id, booked(false));
                    }
                    Some(Held::CompletedFirst) => {
                        self.ids.insert(id, booked(true));
                    }
                    Some(_) => {} // late or duplicate
                }
            }
            LedgerEvent::PrefillComplete { id } => match self.ids.get_mut(&id) {
                None => {
                    self.ids.insert(id, Held::CompletedFirst);
                }
                Some(Held::Booked { done, .. }) => *done = true,
                Some(_) => {} // duplicate
            },
            LedgerEvent::Freed { id } => {
                self.ids.insert(id, Held::Freed);
            }
        }
    }
}

fn chain(family: u8, start: u8, len: u8) -> Vec<u64> {
    let (family, start) = (u64::from(family % 4), u64::from(start % 24));
    (start..start + u64::from(len % 12)).map(|b| family * 100 + b).collect()
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(ops) = Vec::<Op>::arbitrary(&mut u) else { return };
    let temperature = if u.arbitrary::<bool>().unwrap_or(false) { 0.5 } else { 0.0 };
    let knobs = DefaultKnobs { temperature, seed: Some(7), ..DefaultKnobs::default() };
    let policy = knobs.build().expect("valid knobs");
    let index = PrefixIndex::<_, _, 1>::new(vec![BlockSlot::<1>::empty(); 64], vec![WorkerSlot::empty(); 128]).unwrap();
    let ledger = Ledger::new(vec![RequestSlot::empty(); 1024], vec![LoadSlot::empty(); 16], vec![0u64; 512]).unwrap();
    let (host_weight, disk_weight) = (knobs.cost.host_cache_hit_weight, knobs.cost.disk_cache_hit_weight);
    let mut router = Router::new(index, ledger, host_weight, disk_weight);
    let mut kv = common::Model::new(64);
    let mut books = LedgerModel::default();
    for w in 0..WORKERS {
        router.ledger.add_worker(WorkerKey::new(w, 0)).unwrap();
    }
    let mut fleet = Fleet::new(vec![Row::default(); 16], vec![FleetPlace::empty(); 16]).unwrap();
    for w in 0..=WORKERS {
        fleet.add(WorkerKey::new(w, 0), TaintSet::EMPTY).unwrap();
    }
    let mut places = [Place::empty(); 16];
    let mut selector = Selector::<16>::new();
    let mut overlaps = Overlaps::<1>::new();
    let key = |w: u8| WorkerKey::new(u64::from(w) % (WORKERS + 1), 0);
    for op in ops.iter().take(STEPS) {
        match *op {
            Op::Store { worker, tier, family, start, len } => {
                let (worker, tier, hashes) = (key(worker), usize::from(tier % 3), chain(family, start, len));
                router.index.apply(&KvEvent::Stored { worker, tier: Tier::ALL[tier], hashes: &hashes }).unwrap();
                kv.store(worker, tier, &hashes);
            }
            Op::Remove { worker, tier, family, start, len } => {
                let (worker, tier, hashes) = (key(worker), usize::from(tier % 3), chain(family, start, len));
                router.index.apply(&KvEvent::Removed { worker, tier: Tier::ALL[tier], hashes: &hashes }).unwrap();
                kv.remove(worker, tier, &hashes);
            }
            Op::Clear(w) => {
                router.index.apply(&KvEvent::Cleared { worker: key(w) }).unwrap();
                kv.clear(key(w));
            }
            Op::WorkerRemoved(w) => {
                router.index.apply(&KvEvent::WorkerRemoved { worker: key(w) }).unwrap();
                kv.clear(key(w));
            }
            Op::Route { id, family, prompt } => {
                let id = u64::from(id) % IDS;
                let prompt = u64::from(prompt % 400);
                let request = Request::new(prompt, BLOCK_SIZE);
                let blocks = request.request_blocks();
                let hashes = chain(family, 0, u8::try_from(blocks.min(11)).unwrap_or(0));
                // The query the router makes, made here too, against the model.
                router.index.query(&hashes, &mut overlaps);
                let expected: Vec<[u32; 3]> = (0..=WORKERS).map(|w| kv.overlap(WorkerKey::new(w, 0), &hashes)).collect();
                for (w, want) in expected.iter().enumerate() {
                    let got = router.index.overlap(&overlaps, WorkerKey::new(w as u64, 0)).unwrap_or([0; 3]);
                    assert_eq!(got, *want, "overlap of worker {w} for {hashes:?}");
                }
                let mut rows: Vec<Row> = (0..=WORKERS).map(|w| Row::new(WorkerKey::new(w, 0))).collect();
                let loads: Vec<WorkerLoad> = (0..=WORKERS).map(|w| books.load(w)).collect();
                // Ids route in turn over the fleet the router keeps, over fresh rows with places
                // kept from earlier routes, and over fresh rows alone: all must fill the rows the
                // same way (the fleet's are in the same, sorted, order).
                let kept = id.is_multiple_of(3);
                let result = match id % 3 {
                    0 => router.route_fleet(&mut fleet, &policy, &mut selector, &request, &hashes, id),
                    1 => router.route_placed(&policy, &mut selector, &request, &hashes, &mut rows, &mut places, id),
                    _ => router.route(&policy, &mut selector, &request, &hashes, &mut rows, id),
                };
                let rows: &[Row] = if kept { fleet.rows() } else { &rows };
                if let Err(RouteError::Ledger(LedgerError::DuplicateId(d))) = result {
                    assert_eq!(d, id);
                    assert!(books.ids.contains_key(&id), "request {id} refused as a duplicate");
                    continue;
                }
                assert!(!books.ids.contains_key(&id), "request {id} booked twice");
                for (w, row) in rows.iter().enumerate() {
                    let cache = row.cache();
                    assert_eq!([cache.device_blocks, cache.host_blocks, cache.disk_blocks], expected[w], "row {w}");
                    if (w as u64) < WORKERS {
                        let new_blocks = blocks.saturating_sub(u64::from(expected[w][0]));
                        assert_eq!(row.active_prefill_tokens, loads[w].active_prefill_tokens, "row {w}");
                        assert_eq!(row.active_decode_blocks, loads[w].active_decode_blocks + new_blocks, "row {w}");
                        assert_eq!(row.active_requests, loads[w].active_requests, "row {w}");
                    }
                }
                match result {
                    Ok(s) => {
                        let w = s.worker.worker_id;
                        assert!(w < WORKERS, "booked on worker {w}, which the ledger does not know");
                        let prefill = prompt.saturating_sub(s.cached_tokens);
                        let new_blocks = blocks.saturating_sub(u64::from(expected[w as usize][0]));
                        books.ids.insert(id, Held::Booked { worker: w, prefill, blocks: new_blocks, done: false });
                    }
                    // The index knows a worker the ledger does not: chosen, it cannot be booked,
                    // and nothing is (the checks below see the books unchanged).
                    Err(RouteError::Ledger(LedgerError::UnknownWorker(w))) => assert_eq!(w.worker_id, WORKERS),
                    Err(e) => panic!("route {id} failed: {e}"),
                }
            }
            Op::Prefill(id) => {
                let id = u64::from(id) % IDS;
                assert_eq!(router.ledger.prefill_complete(id), books.prefill_complete(id));
            }
            Op::Free(id) => {
                let id = u64::from(id) % IDS;
                assert_eq!(router.ledger.free(id), books.free(id));
            }
            Op::Cancel(id) => {
                let id = u64::from(id) % IDS;
                assert_eq!(router.ledger.cancel(id), books.free(id));
            }
            Op::Booked { id, worker, prefill, blocks } => {
                let event = LedgerEvent::Booked {
                    id: u64::from(id) % IDS,
                    worker: key(worker),
                    prefill_tokens: u64::from(prefill),
                    blocks: u64::from(blocks),
                };
                router.ledger.apply(&event);
                books.apply(&event);
            }
            Op::PrefillComplete(id) => {
                let event = LedgerEvent::PrefillComplete { id: u64::from(id) % IDS };
                router.ledger.apply(&event);
                books.apply(&event);
            }
            Op::Freed(id) => {
                let event = LedgerEvent::Freed { id: u64::from(id) % IDS };
                router.ledger.apply(&event);
                books.apply(&event);
            }
        }
        // The books balance: each worker's totals are the sum of what it has booked.
        let mut total = WorkerLoad::default();
        for w in 0..WORKERS {
            let load = router.ledger.load(WorkerKey::new(w, 0)).expect("a registered worker");
            assert_eq!(load, books.load(w), "worker {w}'s load");
            total.active_requests += load.active_requests;
        }
        assert_eq!(router.ledger.counters().active_requests, books.booked());
        assert_eq!(total.active_requests, books.booked() as u64);
        for id in 0..IDS {
            assert_eq!(router.ledger.contains(id), books.ids.contains_key(&id), "whether {id} is known");
        }
        assert_eq!(router.index.counters().blocks, kv.held.len());
        assert_eq!(router.index.counters().evictions, kv.evictions);
    }
}
