//! Approximate mode: for hosts without KV events, the router's own decisions stand in for the
//! workers' caches. Each routed request's blocks are recorded as predicted on the chosen worker
//! and expire after a TTL. Time is always an argument: the core reads no clock.
//!
//! Predicted blocks live in the [`PrefixIndex`] (as device holdings that never set
//! `has_tier_matches`), so one query serves both modes. This module remembers when each
//! `(block, worker)` prediction expires: a map from the pair to its latest expiry, and a ring of
//! records in the order they were made (so, with one TTL, in expiry order). [`Predictions::expire`]
//! pops due records and clears a prediction only if it was not refreshed since.
//!
//! **When the ring or the map is full**, the oldest record expires early, and
//! `forced_expiries` counts it.

use core::fmt;

use crate::host::index::{BlockSlot, IndexError, PrefixIndex, WorkerSlot};
use crate::host::table::{Slot, StorageError, Table, TableKey, mix};
use crate::vocab::WorkerKey;

/// Row of the index's block masks that holds predictions.
const PREDICTED: usize = 3;

/// A `(block hash, worker bit)` pair: the key of one prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PredictionKey {
    hash: u64,
    bit: u32,
}

impl TableKey for PredictionKey {
    #[inline]
    fn hash64(&self) -> u64 {
        mix(self.hash ^ mix(u64::from(self.bit)))
    }
}

/// One prediction as the ring records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PredictionRecord {
    key: PredictionKey,
    expires: u64,
}

/// A slot of the prediction map's storage.
pub type PredictionSlot = Slot<PredictionKey, u64>;

/// The expiry bookkeeping of approximate mode, over caller storage: `M` map slots (a power of
/// two; half usable) and `R` ring records.
///
/// # Examples
///
/// ```
/// use libroute_core::*;
///
/// let mut index = PrefixIndex::<_, _, 1>::new(vec![BlockSlot::<1>::empty(); 64], vec![WorkerSlot::empty(); 128]).unwrap();
/// let mut predictions = Predictions::new(vec![PredictionSlot::empty(); 64], vec![PredictionRecord::default(); 32], 120_000).unwrap();
/// let w = WorkerKey::new(4, 0);
/// predictions.record(&mut index, w, &[1, 2, 3], 1_000).unwrap(); // now = 1 s, in ms
///
/// let mut overlaps = Overlaps::<1>::new();
/// index.query(&[1, 2, 3], &mut overlaps);
/// assert_eq!(index.overlap(&overlaps, w), Some([3, 0, 0]));
/// assert!(!overlaps.has_tier_matches(), "predictions are not KV events");
///
/// predictions.expire(&mut index, 121_000); // the TTL has passed
/// index.query(&[1, 2, 3], &mut overlaps);
/// assert_eq!(index.overlap(&overlaps, w), Some([0, 0, 0]));
/// ```
pub struct Predictions<M, R> {
    map: Table<PredictionKey, u64, M>,
    ring: R,
    head: usize,
    len: usize,
    ttl: u64,
    forced: u64,
}

impl<M, R> fmt::Debug for Predictions<M, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Predictions")
            .field("records", &self.len)
            .field("ttl", &self.ttl)
            .field("forced_expiries", &self.forced)
            .finish_non_exhaustive()
    }
}

impl<M, R> Predictions<M, R>
where
    M: AsRef<[PredictionSlot]> + AsMut<[PredictionSlot]>,
    R: AsRef<[PredictionRecord]> + AsMut<[PredictionRecord]>,
{
    /// Empty bookkeeping; predictions live `ttl` time units (the unit of the `now` arguments).
    ///
    /// # Errors
    ///
    /// [`StorageError`] when the map's slot count is not a power of two of at least 8, or the
    /// ring is empty.
    pub fn new(map: M, ring: R, ttl: u64) -> Result<Self, StorageError> {
        if ring.as_ref().is_empty() {
            return Err(StorageError::SlotCount { slots: 0 });
        }
        Ok(Self {
            map: Table::new(map)?,
            ring,
            head: 0,
            len: 0,
            ttl,
            forced: 0,
        })
    }

    /// Live prediction records.
    #[must_use]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every record without clearing anything in an index: for when the index they were
    /// made in was replaced (restored from a snapshot, which holds no predictions). The count of
    /// forced expiries is kept.
    ///
    /// # Examples
    ///
    /// ```
    /// use libroute_core::*;
    /// let mut index = PrefixIndex::<_, _, 1>::new(vec![BlockSlot::<1>::empty(); 64], vec![WorkerSlot::empty(); 128]).unwrap();
    /// let mut predictions = Predictions::new(vec![PredictionSlot::empty(); 64], vec![PredictionRecord::default(); 32], 1_000).unwrap();
    /// predictions.record(&mut index, WorkerKey::new(1, 0), &[7, 8], 0).unwrap();
    /// assert_eq!(predictions.len(), 2);
    /// predictions.forget_all();
    /// assert!(predictions.is_empty());
    /// ```
    pub fn forget_all(&mut self) {
        self.map.clear();
        self.head = 0;
        self.len = 0;
    }

    /// Records that expired early because the ring or map was full.
    #[must_use]
    pub const fn forced_expiries(&self) -> u64 {
        self.forced
    }

    /// Records `hashes` as predicted on `worker` until `now + ttl`, refreshing earlier
    /// predictions of the same blocks. Expires what is due at `now` first.
    ///
    /// # Errors
    ///
    /// [`IndexError::WorkersFull`] when `worker` is new and the index has no free worker bit;
    /// nothing is recorded.
    pub fn record<B, W, const WORDS: usize>(
        &mut self,
        index: &mut PrefixIndex<B, W, WORDS>,
        worker: WorkerKey,
        hashes: &[u64],
        now: u64,
    ) -> Result<(), IndexError>
    where
        B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
        W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    {
        self.expire(index, now);
        let bit = index.bit_for(worker)?;
        let expires = now.saturating_add(self.ttl);
        for &hash in hashes {
            let key = PredictionKey { hash, bit };
            if self.len == self.ring.as_ref().len() {
                self.pop(index, true);
            }
            match self.map.find(key) {
                Some(i) => *self.map.value_mut(i) = expires,
                None => {
                    while self.map.insert(key, expires).is_err() && self.len > 0 {
                        self.pop(index, true);
                    }
                }
            }
            index.set_bits(PREDICTED, bit, &[hash]);
            let ring_len = self.ring.as_ref().len();
            let tail = (self.head + self.len) % ring_len;
            self.ring.as_mut()[tail] = PredictionRecord { key, expires };
            self.len += 1;
        }
        Ok(())
    }

    /// Clears every prediction due at `now` (expiry `<= now`).
    pub fn expire<B, W, const WORDS: usize>(
        &mut self,
        index: &mut PrefixIndex<B, W, WORDS>,
        now: u64,
    ) where
        B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
        W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    {
        while self.len > 0 && self.ring.as_ref()[self.head].expires <= now {
            self.pop(index, false);
        }
    }

    /// Pops the oldest record, clearing its prediction unless a later record refreshed it.
    fn pop<B, W, const WORDS: usize>(&mut self, index: &mut PrefixIndex<B, W, WORDS>, forced: bool)
    where
        B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
        W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    {
        let record = self.ring.as_ref()[self.head];
        self.head = (self.head + 1) % self.ring.as_ref().len();
        self.len -= 1;
        if let Some(i) = self.map.find(record.key) {
            if *self.map.value(i) == record.expires {
                self.map.remove_at(i);
                index.clear_bit(PREDICTED, record.key.bit, record.key.hash);
                if forced {
                    self.forced += 1;
                }
            }
        }
    }
}
