//! Reference models of the index and the ledger, written with hash maps, shared by the property
//! tests and the `host` fuzz target (which includes this file by path).

#![allow(
    dead_code,
    unreachable_pub,
    reason = "each includer uses part of the models, as a private module"
)]

use std::collections::{HashMap, HashSet};

use libroute_core::{LedgerError, WorkerKey, WorkerLoad};

/// The model: block -> worker -> tiers held, and blocks in store order (oldest first).
#[derive(Default)]
pub struct Model {
    pub held: HashMap<u64, HashMap<WorkerKey, HashSet<usize>>>,
    pub recency: Vec<u64>,
    pub capacity: usize,
    pub evictions: u64,
}

impl Model {
    fn touch(&mut self, hash: u64) {
        self.recency.retain(|h| *h != hash);
        self.recency.push(hash);
    }

    fn forget(&mut self, hash: u64) {
        self.held.remove(&hash);
        self.recency.retain(|h| *h != hash);
    }

    pub fn store(&mut self, worker: WorkerKey, tier: usize, hashes: &[u64]) {
        for &h in hashes {
            if !self.held.contains_key(&h) && self.held.len() >= self.capacity {
                let oldest = self.recency[0];
                self.forget(oldest);
                self.evictions += 1;
            }
            self.held
                .entry(h)
                .or_default()
                .entry(worker)
                .or_default()
                .insert(tier);
            self.touch(h);
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
