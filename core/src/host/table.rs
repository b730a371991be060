//! A fixed-capacity hash table over caller-provided storage: open addressing, linear probing,
//! backward-shift deletion (no tombstones, so lookups never slow down with churn).
//!
//! Storage is any `S: AsRef<[Slot<V>]> + AsMut<[Slot<V>]>`: an array for `no_std` statics, a
//! `Box<[Slot<V>]>` or `Vec` on a host (built on the heap with `vec![Slot::EMPTY; n]`, so a large
//! table never passes through the stack). The slot count must be a power of two; the table holds at
//! most half of it: with linear probing, a lookup that misses probes about 2.5 slots at that load
//! and about 32 at 7/8, so the spare half is what keeps ingest fast.

use core::fmt;
use core::marker::PhantomData;

use crate::vocab::WorkerKey;

/// A key of the fixed-capacity tables behind the index and the ledger: compared exactly, hashed
/// to a slot position.
pub trait TableKey: Copy + Eq + Default {
    /// 64 well-mixed bits of the key.
    fn hash64(&self) -> u64;
}

impl TableKey for u64 {
    #[inline]
    fn hash64(&self) -> u64 {
        mix(*self)
    }
}

impl TableKey for WorkerKey {
    #[inline]
    fn hash64(&self) -> u64 {
        mix(self.worker_id ^ mix(u64::from(self.dp_rank) ^ 0x9e37_79b9))
    }
}

/// One slot of a table's storage: unused, or a key and its value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Slot<K, V> {
    key: K,
    used: bool,
    value: V,
}

impl<K: fmt::Debug, V: fmt::Debug> fmt::Debug for Slot<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.used {
            write!(f, "Slot({:?} => {:?})", self.key, self.value)
        } else {
            f.write_str("Slot(empty)")
        }
    }
}

impl<K: TableKey, V: Copy + Default> Slot<K, V> {
    /// An unused slot: what storage is filled with (`vec![Slot::empty(); n]`) before a table
    /// takes it.
    #[must_use]
    pub fn empty() -> Self {
        Self {
            key: K::default(),
            used: false,
            value: V::default(),
        }
    }
}

/// Why storage cannot back a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageError {
    /// The slot count is not a power of two of at least 8 (or exceeds `u32::MAX`).
    SlotCount {
        /// The slot count given.
        slots: usize,
    },
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::SlotCount { slots } => {
                write!(
                    f,
                    "storage has {slots} slots; it needs a power of two between 8 and 2^31"
                )
            }
        }
    }
}

impl core::error::Error for StorageError {}

/// The table is full (half of its slots are used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

/// Mixes a key into a slot position: keys are often small integers (request ids, the Mooncake
/// trace's block ids), which would otherwise cluster.
#[inline]
pub(crate) fn mix(key: u64) -> u64 {
    let z = (key ^ (key >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    z ^ (z >> 33)
}

/// A fixed-capacity map from `u64` keys to `V`.
#[derive(Debug, Clone)]
pub(crate) struct Table<K, V, S> {
    slots: S,
    len: usize,
    kv: PhantomData<fn() -> (K, V)>,
}

impl<K, V, S> Table<K, V, S> {
    /// The number of keys.
    pub(crate) const fn len(&self) -> usize {
        self.len
    }
}

impl<K: TableKey, V: Copy + Default, S: AsRef<[Slot<K, V>]> + AsMut<[Slot<K, V>]>> Table<K, V, S> {
    /// A table over `slots`, which are all reset to unused.
    pub(crate) fn new(mut slots: S) -> Result<Self, StorageError> {
        let n = slots.as_ref().len();
        if n < 8 || !n.is_power_of_two() || n > 1 << 31 {
            return Err(StorageError::SlotCount { slots: n });
        }
        slots.as_mut().fill(Slot::empty());
        Ok(Self {
            slots,
            len: 0,
            kv: PhantomData,
        })
    }

    /// Most keys the table holds: half the slots.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.as_ref().len() / 2
    }

    #[inline]
    fn home(&self, key: K) -> usize {
        let mask = self.slots.as_ref().len() - 1;
        #[allow(clippy::cast_possible_truncation, reason = "masked to the slot count")]
        let home = key.hash64() as usize & mask;
        home
    }

    /// The slot holding `key`.
    #[inline]
    pub(crate) fn find(&self, key: K) -> Option<usize> {
        self.probe(key).ok()
    }

    /// The slot holding `key`, or (`Err`) the empty slot where the search for it ended: where
    /// [`Table::place`] puts it, if nothing is removed first.
    #[inline]
    pub(crate) fn probe(&self, key: K) -> Result<usize, usize> {
        let slots = self.slots.as_ref();
        let mask = slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let s = &slots[i];
            if !s.used {
                return Err(i);
            }
            if s.key == key {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// `key`'s home slot if `key` is there, read without a branch: a pass over a batch's keys
    /// that asks this of each issues all their first reads at once (their cache misses overlap),
    /// where a probe's data-dependent branches would wait for each read in turn.
    #[allow(
        clippy::needless_bitwise_bool,
        reason = "both operands are read anyway: `&&` would add the branch this avoids"
    )]
    #[inline]
    pub(crate) fn at_home(&self, key: K) -> Option<usize> {
        let home = self.home(key);
        let s = &self.slots.as_ref()[home];
        (s.used & (s.key == key)).then_some(home)
    }

    /// [`Table::at_home`] for each of `keys` into `out`, as far as the shorter goes: one pass
    /// whose reads all start before the first returns.
    #[inline]
    pub(crate) fn at_homes(&self, keys: impl IntoIterator<Item = K>, out: &mut [Option<usize>]) {
        for (home, key) in out.iter_mut().zip(keys) {
            *home = self.at_home(key);
        }
    }

    /// [`Table::probe`], trying slot `hint` first (where `key` was seen a moment ago, as
    /// [`Table::at_home`] saw it): checked, since a removal since may have moved or dropped it.
    #[inline]
    pub(crate) fn probe_from(&self, hint: Option<usize>, key: K) -> Result<usize, usize> {
        match hint {
            Some(i) if self.is_used(i) && self.key(i) == key => Ok(i),
            _ => self.probe(key),
        }
    }

    /// Puts absent `key` with `value` at `vacancy`, the empty slot [`Table::probe`] returned for
    /// it with nothing removed since (a removal may open a slot earlier on its path), saving
    /// [`Table::insert`]'s search. One key past the capacity is allowed, for a caller that
    /// removes one next: the table must never fill, or a search for an absent key would not end.
    pub(crate) fn place(&mut self, vacancy: usize, key: K, value: V) -> Result<(), Full> {
        if self.len > self.capacity() {
            return Err(Full);
        }
        let slot = &mut self.slots.as_mut()[vacancy];
        debug_assert!(!slot.used, "slot {vacancy} is not a vacancy");
        *slot = Slot {
            key,
            used: true,
            value,
        };
        self.len += 1;
        Ok(())
    }

    /// The slot holding `key`, tried first at `*hint` (where it was found before) and found by
    /// its hash only when it is not there (or without a hint); `*hint` is then updated
    /// (`u32::MAX` when absent). The check at the hint is one read and one comparison that
    /// almost always succeed, so a caller that keeps hints skips the hash and the probe's
    /// unpredictable branch. A hint from anywhere is safe: a slot is used by its key only.
    #[allow(
        clippy::inline_always,
        reason = "called from the placed and the fleet loops, plain inline left it a call in both: 0.9 us slower at 1,024 rows"
    )]
    #[inline(always)]
    pub(crate) fn find_hinted(&self, key: K, hint: Option<&mut u32>) -> Option<usize> {
        let Some(hint) = hint else {
            return self.find(key);
        };
        if let Some(s) = self.slots.as_ref().get(*hint as usize) {
            if s.used && s.key == key {
                return Some(*hint as usize);
            }
        }
        let found = self.find(key);
        #[allow(
            clippy::cast_possible_truncation,
            reason = "slot counts are at most 2^31"
        )]
        {
            *hint = found.map_or(u32::MAX, |i| i as u32);
        }
        found
    }

    /// The value at slot `i`.
    #[inline]
    pub(crate) fn value(&self, i: usize) -> &V {
        &self.slots.as_ref()[i].value
    }

    /// The value at slot `i`, mutably.
    #[inline]
    pub(crate) fn value_mut(&mut self, i: usize) -> &mut V {
        &mut self.slots.as_mut()[i].value
    }

    /// The key at slot `i` (the default key if the slot is unused).
    #[inline]
    pub(crate) fn key(&self, i: usize) -> K {
        self.slots.as_ref()[i].key
    }

    /// Whether slot `i` holds a key.
    #[inline]
    pub(crate) fn is_used(&self, i: usize) -> bool {
        self.slots.as_ref()[i].used
    }

    /// Empties the table.
    pub(crate) fn clear(&mut self) {
        self.slots.as_mut().fill(Slot::empty());
        self.len = 0;
    }

    /// The number of slots.
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.as_ref().len()
    }

    /// Inserts `key` (which must be absent) with `value`; returns its slot.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Result<usize, Full> {
        if self.len >= self.capacity() {
            return Err(Full);
        }
        let mask = self.slots.as_ref().len() - 1;
        let mut i = self.home(key);
        let slots = self.slots.as_mut();
        while slots[i].used {
            i = (i + 1) & mask;
        }
        slots[i] = Slot {
            key,
            used: true,
            value,
        };
        self.len += 1;
        Ok(i)
    }

    /// Removes the key at slot `i`, shifting later entries of its probe run back so no tombstone
    /// is left.
    pub(crate) fn remove_at(&mut self, i: usize) {
        let mask = self.slots.as_ref().len() - 1;
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            if !self.slots.as_ref()[j].used {
                break;
            }
            let start = self.home(self.slots.as_ref()[j].key);
            // The entry at j may fill the hole if the hole lies on its probe path (start..=j).
            let dist_hole = hole.wrapping_sub(start) & mask;
            let dist_j = j.wrapping_sub(start) & mask;
            if dist_hole <= dist_j {
                let slots = self.slots.as_mut();
                slots[hole] = slots[j];
                hole = j;
            }
        }
        self.slots.as_mut()[hole] = Slot::empty();
        self.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::vec;
    use std::vec::Vec;

    use super::*;

    #[test]
    fn storage_must_be_a_power_of_two() {
        assert!(Table::new(vec![Slot::<u64, u32>::empty(); 12]).is_err());
        assert!(Table::new(vec![Slot::<u64, u32>::empty(); 4]).is_err());
        assert_eq!(
            Table::new(vec![Slot::<u64, u32>::empty(); 16])
                .unwrap()
                .capacity(),
            8
        );
    }

    #[test]
    fn matches_a_hash_map_under_churn() {
        let mut t = Table::new(vec![Slot::<u64, u64>::empty(); 64]).unwrap();
        let mut model: HashMap<u64, u64> = HashMap::new();
        let mut rng = 12345u64;
        let mut hints = [u32::MAX; 80];
        for step in 0..20_000u64 {
            rng = rng
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let key = (rng >> 40) % 80; // small keys collide in the mixer's low bits too
            // A hint kept across the churn (entries move back when others are removed) finds
            // what a lookup by hash finds.
            let hint = &mut hints[usize::try_from(key).unwrap()];
            assert_eq!(t.find_hinted(key, Some(hint)), t.find(key), "key {key}");
            match t.find(key) {
                Some(i) if rng & 1 == 0 => {
                    t.remove_at(i);
                    model.remove(&key);
                }
                Some(i) => {
                    *t.value_mut(i) = step;
                    model.insert(key, step);
                }
                None if rng & 4 == 0 => {
                    if t.insert(key, step).is_ok() {
                        model.insert(key, step);
                    } else {
                        assert_eq!(model.len(), t.capacity());
                    }
                }
                None => {
                    // Placed where the search ended, then (one past the capacity) another key
                    // removed, as the index stores a block before evicting the oldest.
                    let vacancy = t.probe(key).unwrap_err();
                    t.place(vacancy, key, step).unwrap();
                    model.insert(key, step);
                    if t.len() > t.capacity() {
                        let other = t.probe(1_000 + step).unwrap_err();
                        assert!(
                            t.place(other, 1_000 + step, 0).is_err(),
                            "two past the capacity"
                        );
                        let victim = (0..t.slot_count())
                            .map(|i| (vacancy + 1 + i) % t.slot_count())
                            .find(|&i| t.is_used(i))
                            .unwrap();
                        model.remove(&t.key(victim));
                        t.remove_at(victim);
                    }
                }
            }
            assert_eq!(t.len(), model.len());
            if step % 97 == 0 {
                for k in 0..80 {
                    assert_eq!(t.find(k).map(|i| *t.value(i)), model.get(&k).copied());
                }
            }
        }
        for k in 0..80 {
            assert_eq!(
                t.find(k).map(|i| *t.value(i)),
                model.get(&k).copied(),
                "key {k}"
            );
        }
        let used: Vec<usize> = (0..t.slot_count()).filter(|&i| t.is_used(i)).collect();
        assert_eq!(used.len(), model.len());
    }
}
