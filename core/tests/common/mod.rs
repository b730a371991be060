//! Reference models of the index and the ledger, written with hash maps, shared by the property
//! tests and the `host` fuzz target (which includes this file by path).

#![allow(
    dead_code,
    unreachable_pub,
    reason = "each includer uses part of the models, as a private module"
)]

use std::collections::{HashMap, HashSet};

use libroute_core::{LedgerError, WorkerKey, WorkerLoad};

/// The model: block -> worker -> tiers held, and the block table's slots as the index lays them
/// out (each block in the first free slot from its home, a removal shifting later blocks of its
/// run back), with a clock over them: a store marks its block, and a store past the capacity
/// sweeps a hand from where it stopped, unmarking marked blocks, to the first unmarked one (never
/// the block just stored), which is evicted.
#[derive(Default)]
pub struct Model {
    pub held: HashMap<u64, HashMap<WorkerKey, HashSet<usize>>>,
    /// (block, marked) per slot.
    pub slots: Vec<Option<(u64, bool)>>,
    pub hand: usize,
    pub evictions: u64,
}

/// A block's home slot among `slots` (a power of two): the index's key mix, murmur3's finalizer
/// halves.
fn home(hash: u64, slots: usize) -> usize {
    let z = (hash ^ (hash >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    usize::try_from((z ^ (z >> 33)) % slots as u64).expect("below the slot count")
}

impl Model {
    /// An empty model of an index over `slots` block slots (holding half as many blocks).
    pub fn new(slots: usize) -> Self {
        Self {
            slots: vec![None; slots],
            ..Self::default()
        }
    }

    fn slot_of(&self, hash: u64) -> Option<usize> {
        self.slots
            .iter()
            .position(|s| matches!(s, Some((h, _)) if *h == hash))
    }

    fn forget(&mut self, hash: u64) {
        self.held.remove(&hash);
        let n = self.slots.len();
        let mut hole = self.slot_of(hash).expect("a held block has a slot");
        self.slots[hole] = None;
        // Move each later block of the run into the hole when the hole is on its way from home.
        let mut j = hole;
        loop {
            j = (j + 1) % n;
            let Some((h, _)) = self.slots[j] else { break };
            let from_home = |i: usize| (i + n - home(h, n)) % n;
            if from_home(hole) <= from_home(j) {
                self.slots[hole] = self.slots[j].take();
                hole = j;
            }
        }
    }

    pub fn store(&mut self, worker: WorkerKey, tier: usize, hashes: &[u64]) {
        let n = self.slots.len();
        for &h in hashes {
            let at = self.slot_of(h).unwrap_or_else(|| {
                let mut at = home(h, n);
                while self.slots[at].is_some() {
                    at = (at + 1) % n;
                }
                at
            });
            self.slots[at] = Some((h, true));
            self.held
                .entry(h)
                .or_default()
                .entry(worker)
                .or_default()
                .insert(tier);
            if self.held.len() > n / 2 {
                loop {
                    match self.slots[self.hand] {
                        Some((victim, false)) if self.hand != at => {
                            self.forget(victim);
                            self.evictions += 1;
                            break;
                        }
                        Some((victim, true)) if self.hand != at => {
                            self.slots[self.hand] = Some((victim, false));
                        }
                        _ => {}
                    }
                    self.hand = (self.hand + 1) % n;
                }
            }
        }
    }

    pub fn remove(&mut self, worker: WorkerKey, tier: usize, hashes: &[u64]) {
        for &h in hashes {
            if let Some(workers) = self.held.get_mut(&h) {
                if let Some(tiers) = workers.get_mut(&worker) {
                    tiers.remove(&tier);
                    if tiers.is_empty() {
                        workers.remove(&worker);
                    }
                }
                if workers.is_empty() {
                    self.forget(h);
                }
            }
        }
    }

    pub fn clear(&mut self, worker: WorkerKey) {
        let hashes: Vec<u64> = self.held.keys().copied().collect();
        for h in hashes {
            self.remove(worker, 0, &[h]);
            self.remove(worker, 1, &[h]);
            self.remove(worker, 2, &[h]);
        }
    }

    /// (device, host, disk) for `worker` over `hashes`.
    pub fn overlap(&self, worker: WorkerKey, hashes: &[u64]) -> [u32; 3] {
        let mut counts = [0; 3];
        for h in hashes {
            let Some(tiers) = self.held.get(h).and_then(|w| w.get(&worker)) else {
                break;
            };
            let best = *tiers.iter().min().expect("non-empty");
            counts[best] += 1;
        }
        counts
    }
}

/// The ledger's local API as a map: id -> (worker, prefill tokens, blocks, prefill done).
#[derive(Default)]
pub struct LedgerModel {
    pub requests: HashMap<u64, (u64, u64, u64, bool)>,
    pub workers: HashSet<u64>,
}

impl LedgerModel {
    pub fn book(
        &mut self,
        id: u64,
        worker: u64,
        prefill: u64,
        blocks: u64,
    ) -> Result<(), LedgerError> {
        if self.requests.contains_key(&id) {
            return Err(LedgerError::DuplicateId(id));
        }
        if !self.workers.contains(&worker) {
            return Err(LedgerError::UnknownWorker(WorkerKey::new(worker, 0)));
        }
        self.requests.insert(id, (worker, prefill, blocks, false));
        Ok(())
    }

    pub fn prefill_complete(&mut self, id: u64) -> Result<(), LedgerError> {
        match self.requests.get_mut(&id) {
            None => Err(LedgerError::UnknownId(id)),
            Some(e) if e.3 => Err(LedgerError::PrefillAlreadyComplete(id)),
            Some(e) => {
                e.3 = true;
                Ok(())
            }
        }
    }

    pub fn free(&mut self, id: u64) -> Result<(), LedgerError> {
        self.requests
            .remove(&id)
            .map(|_| ())
            .ok_or(LedgerError::UnknownId(id))
    }

    /// The load the requests put on `worker`.
    pub fn load(&self, worker: u64) -> WorkerLoad {
        let mut load = WorkerLoad::default();
        for &(w, prefill, blocks, done) in self.requests.values() {
            if w == worker {
                load.active_prefill_tokens += if done { 0 } else { prefill };
                load.active_decode_blocks += blocks;
                load.active_requests += 1;
            }
        }
        load
    }
}
