//! The prefix-overlap index: which workers hold which KV blocks, in which tier, fed by KV-cache
//! events; and, for a request's block hashes, how many leading blocks each worker holds.
//!
//! # Model
//!
//! A block is a chained 64-bit hash: it names the whole prefix up to and including it, so a block
//! is looked up by its hash alone (the parent a KV event carries is not needed). A worker's
//! matched prefix for a request is the longest run of the request's leading blocks it holds in
//! any tier; each block of that run counts toward the fastest tier holding it (device, then host,
//! then disk). So `device + host + disk` is the matched prefix length, and the accounting estimate
//! is `E_blocks = device + host_w*host + disk_w*disk` (spec section 2).
//!
//! # Storage and capacity
//!
//! All memory is given at construction (an array, or a boxed slice a host allocates once); nothing
//! allocates afterwards. Workers get one bit each in a per-block mask of `WORDS` 64-bit words, so
//! an index tracks up to `64 * WORDS` workers. The block table holds half as many blocks as it has slots.
//!
//! **When the block table is full**, storing a new block evicts the least recently stored block
//! (every worker's copy of it, in every tier), and `evictions` counts it. Re-storing a block
//! refreshes it. Queries do not refresh: they take `&self`. An event for a worker beyond the
//! worker capacity is refused with [`IndexError::WorkersFull`] and counted in `rejected_events`;
//! removals for unknown workers or blocks are ignored and counted in `ignored_events`.

use core::fmt;

use crate::host::snapshot::{SnapshotError, SnapshotProblem, SnapshotReader, SnapshotWriter};
use crate::host::table::{Slot, StorageError, Table};
use crate::host::version::{Version, new_instance};
use crate::vocab::{Cache, Row, RowFlags, WorkerKey};

/// A KV-cache tier.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// GPU memory.
    Device = 0,
    /// Host (CPU) memory.
    Host = 1,
    /// Local disk.
    Disk = 2,
}

impl Tier {
    /// Every tier, fastest first.
    pub const ALL: [Tier; 3] = [Tier::Device, Tier::Host, Tier::Disk];

    /// The tier with this value, `None` for any other.
    #[must_use]
    pub const fn from_u32(value: u32) -> Option<Self> {
        match value {
            0 => Some(Tier::Device),
            1 => Some(Tier::Host),
            2 => Some(Tier::Disk),
            _ => None,
        }
    }
}

/// One block of the index: which workers hold it in each tier, and whether it was stored since
/// the clock's hand last passed it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct BlockEntry<const WORDS: usize> {
    /// Holders per tier, then (row 3) the router's own unexpired predictions (approximate mode).
    held: [[u64; WORDS]; 4],
    /// Stored since the hand last passed: the hand clears it instead of evicting the block.
    referenced: bool,
    /// Bit `r` set when row `r` of `held` has a bit set: most blocks are held in device memory
    /// only, and a query then reads one row of the entry instead of four.
    rows: u8,
}

impl<const WORDS: usize> Default for BlockEntry<WORDS> {
    fn default() -> Self {
        Self {
            held: [[0; WORDS]; 4],
            referenced: false,
            rows: 0,
        }
    }
}

impl<const WORDS: usize> fmt::Debug for BlockEntry<WORDS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockEntry")
            .field("held", &self.held)
            .field("rows", &self.rows)
            .field("referenced", &self.referenced)
            .finish()
    }
}

impl<const WORDS: usize> BlockEntry<WORDS> {
    fn is_empty(&self) -> bool {
        debug_assert_eq!(
            self.rows == 0,
            self.held.iter().flatten().all(|w| *w == 0),
            "the row summary matches the rows"
        );
        self.rows == 0
    }

    /// Sets `mask` in word `word` of row `row`.
    fn set(&mut self, row: usize, word: usize, mask: u64) {
        self.held[row][word] |= mask;
        self.rows |= 1 << row;
    }

    /// Clears `mask` in word `word` of row `row`, keeping the row summary exact.
    fn clear(&mut self, row: usize, word: usize, mask: u64) {
        if self.held[row][word] & mask == 0 {
            return;
        }
        self.held[row][word] &= !mask;
        if self.held[row].iter().all(|w| *w == 0) {
            self.rows &= !(1 << row);
        }
    }
}

/// A slot of the block table's storage.
pub type BlockSlot<const WORDS: usize> = Slot<u64, BlockEntry<WORDS>>;
/// A slot of the worker table's storage (worker key to bit position).
pub type WorkerSlot = Slot<WorkerKey, u32>;

/// What an index has done, for hosts to export as metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexCounters {
    /// Blocks held now.
    pub blocks: usize,
    /// Workers known now.
    pub workers: usize,
    /// Blocks evicted to make room.
    pub evictions: u64,
    /// Events refused (worker capacity exceeded).
    pub rejected_events: u64,
    /// Removals of unknown blocks or for unknown workers, ignored.
    pub ignored_events: u64,
}

/// Why an index refused an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexError {
    /// Every worker bit is taken; the event's worker is new.
    WorkersFull {
        /// The worker that did not fit.
        worker: WorkerKey,
        /// The index's worker capacity.
        capacity: usize,
    },
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::WorkersFull { worker, capacity } => {
                write!(
                    f,
                    "worker {worker} does not fit: the index tracks at most {capacity} workers"
                )
            }
        }
    }
}

impl core::error::Error for IndexError {}

/// A KV-cache event, as workers report them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvEvent<'a> {
    /// The worker stored these blocks in `tier`.
    Stored {
        /// The worker.
        worker: WorkerKey,
        /// Where.
        tier: Tier,
        /// Chained block hashes.
        hashes: &'a [u64],
    },
    /// The worker removed these blocks from `tier`.
    Removed {
        /// The worker.
        worker: WorkerKey,
        /// From where.
        tier: Tier,
        /// Chained block hashes.
        hashes: &'a [u64],
    },
    /// The worker dropped everything it cached (it stays known).
    Cleared {
        /// The worker.
        worker: WorkerKey,
    },
    /// The worker left: its blocks are dropped and its bit is freed.
    WorkerRemoved {
        /// The worker.
        worker: WorkerKey,
    },
}

/// How many of a query's blocks are looked up ahead of counting.
const FIND_AHEAD: usize = 16;

/// Vertical (bit-sliced) counters, for the host and disk tiers: bit `w` of plane `p` is bit
/// `p` of worker `w`'s count, so adding one to every worker in a mask is a ripple carry over a
/// few words. The device tier needs none: see [`PrefixIndex::query`].
const PLANES: usize = 32;

/// Per-worker overlap counts of one query, per tier: the caller-owned scratch of
/// [`PrefixIndex::query`].
#[derive(Clone)]
pub struct Overlaps<const WORDS: usize> {
    /// The host and disk tiers' bit-sliced counters (`planes[tier - 1]`).
    planes: [[[u64; WORDS]; PLANES]; 2],
    /// Per-worker counts, `counts[tier][word][bit]`: host and disk transposed from their
    /// planes once per query, device the worker's prefix length less those two. Host and disk
    /// are stale, and not read, when `device_only`.
    counts: [[[u32; 64]; WORDS]; 3],
    /// Highest plane any counter reached, for host and disk (planes above it are zero).
    top: [usize; 2],
    /// No host or disk count: every matched block was in device memory (see
    /// [`Overlaps::tiers`]).
    device_only: bool,
    has_tier_matches: bool,
    matched: usize,
}

impl<const WORDS: usize> fmt::Debug for Overlaps<WORDS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Overlaps")
            .field("has_tier_matches", &self.has_tier_matches)
            .field("matched", &self.matched)
            .finish_non_exhaustive()
    }
}

impl<const WORDS: usize> Default for Overlaps<WORDS> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const WORDS: usize> Overlaps<WORDS> {
    /// Empty scratch.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            planes: [[[0; WORDS]; PLANES]; 2],
            counts: [[[0; 64]; WORDS]; 3],
            top: [0; 2],
            device_only: true,
            has_tier_matches: false,
            matched: 0,
        }
    }

    /// Whether any worker held the request's first block in any tier (the request "has tier
    /// matches", even if that worker is not a candidate).
    #[must_use]
    pub const fn has_tier_matches(&self) -> bool {
        self.has_tier_matches
    }

    /// The longest prefix any worker holds, in blocks.
    #[must_use]
    pub const fn longest(&self) -> usize {
        self.matched
    }

    fn reset(&mut self) {
        for (t, planes) in self.planes.iter_mut().enumerate() {
            for plane in &mut planes[..=self.top[t]] {
                *plane = [0; WORDS];
            }
        }
        self.top = [0; 2];
        self.counts[0] = [[0; 64]; WORDS];
        self.has_tier_matches = false;
        self.matched = 0;
    }

    /// Adds one to the count of every worker in `mask`, for `tier` (1, host, or 2, disk).
    #[inline]
    fn add(&mut self, tier: usize, mask: &[u64; WORDS]) {
        let (planes, top) = (&mut self.planes[tier - 1], &mut self.top[tier - 1]);
        for (w, &bits) in mask.iter().enumerate() {
            let mut carry = bits;
            let mut p = 0;
            while carry != 0 && p < PLANES {
                let plane = &mut planes[p][w];
                let sum = *plane ^ carry;
                carry &= *plane;
                *plane = sum;
                p += 1;
            }
            if p > 0 && p - 1 > *top {
                *top = p - 1;
            }
        }
    }

    /// Records that the workers in `dropped` held exactly the first `n` blocks: their prefix
    /// length, in the device tier's counts until [`Overlaps::finish`] subtracts the other
    /// tiers. Each worker drops once per query, so this runs once per worker that held the
    /// first block, however long the prefix.
    #[inline]
    fn held_first(&mut self, word: usize, dropped: u64, n: usize) {
        let mut bits = dropped;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "a prompt has fewer than 2^32 blocks"
        )]
        while bits != 0 {
            self.counts[0][word][bits.trailing_zeros() as usize] = n as u32;
            bits &= bits - 1;
        }
    }

    /// Turns the prefix lengths and the host and disk planes into per-tier counts: every block
    /// of a worker's prefix is in exactly one tier, so its device count is its prefix length
    /// less its host and disk counts.
    fn finish(&mut self) {
        if self.top == [0; 2] && self.planes.iter().all(|planes| planes[0] == [0; WORDS]) {
            // Every block in device memory: no host or disk count (their counts are left as
            // they were and not read), device is the prefix.
            self.device_only = true;
            return;
        }
        self.device_only = false;
        self.transpose();
        for w in 0..WORDS {
            for b in 0..64 {
                self.counts[0][w][b] -= self.counts[1][w][b] + self.counts[2][w][b];
            }
        }
    }

    /// Transposes the host and disk planes into per-worker counts: one pass over the set bits.
    fn transpose(&mut self) {
        for t in 1..3 {
            for w in 0..WORDS {
                self.counts[t][w] = [0; 64];
                for p in 0..=self.top[t - 1] {
                    let mut bits = self.planes[t - 1][p][w];
                    while bits != 0 {
                        self.counts[t][w][bits.trailing_zeros() as usize] |= 1 << p;
                        bits &= bits - 1;
                    }
                }
            }
        }
    }

    /// The count of worker bit `bit` for `tier`.
    #[inline]
    pub(crate) fn count(&self, tier: usize, bit: u32) -> u32 {
        self.counts[tier].as_flattened()[bit as usize]
    }

    /// The device count of worker bit `bit`, or 0 for [`NO_BIT`] (how a fleet keeps the bit of
    /// a worker the index does not know): one bounds check serves as both.
    #[inline]
    pub(crate) fn device_count_or_zero(&self, bit: u32) -> u32 {
        debug_assert!(bit == NO_BIT || (bit as usize) < 64 * WORDS);
        self.counts[0]
            .as_flattened()
            .get(bit as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Whether no block was matched beyond device memory: every worker's host and disk counts
    /// are 0.
    #[inline]
    pub(crate) const fn device_only(&self) -> bool {
        self.device_only
    }

    /// The counts of worker bit `bit` per tier; the host and disk counts are read only when a
    /// block was matched beyond device memory.
    #[inline]
    fn tiers(&self, bit: u32) -> [u32; 3] {
        let device = self.count(0, bit);
        if self.device_only {
            [device, 0, 0]
        } else {
            [device, self.count(1, bit), self.count(2, bit)]
        }
    }
}

/// The prefix-overlap index over caller storage: `B` holds the blocks, `W` the workers.
///
/// # Examples
///
/// ```
/// use libroute_core::{BlockSlot, KvEvent, Overlaps, PrefixIndex, Row, Slot, Tier, WorkerKey, WorkerSlot};
///
/// let mut index = PrefixIndex::<_, _, 1>::new([BlockSlot::<1>::empty(); 64], [WorkerSlot::empty(); 128]).unwrap();
/// let (a, b) = (WorkerKey::new(1, 0), WorkerKey::new(2, 0));
/// index.apply(&KvEvent::Stored { worker: a, tier: Tier::Device, hashes: &[11, 12, 13] }).unwrap();
/// index.apply(&KvEvent::Stored { worker: b, tier: Tier::Host, hashes: &[11] }).unwrap();
///
/// let mut overlaps = Overlaps::<1>::new();
/// index.query(&[11, 12, 99], &mut overlaps);
/// let mut rows = [Row::new(a), Row::new(b), Row::new(WorkerKey::new(3, 0))];
/// index.fill_rows(&overlaps, &mut rows, 0.75, 0.25, 16);
/// assert_eq!(rows[0].cache().device_blocks, 2);
/// assert_eq!(rows[1].cache().host_blocks, 1);
/// assert_eq!(rows[1].cache().effective_blocks, 0.75);
/// assert!(overlaps.has_tier_matches());
/// ```
pub struct PrefixIndex<B, W, const WORDS: usize> {
    blocks: Table<u64, BlockEntry<WORDS>, B>,
    workers: Table<WorkerKey, u32, W>,
    used_bits: [u64; WORDS],
    /// The clock's hand: the next slot it looks at when a store must evict.
    hand: usize,
    counters: IndexCounters,
    /// This index's instance number (see [`crate::host::version`]).
    instance: usize,
    /// How many times a worker got or lost its bit.
    bit_changes: u64,
}

impl<B, W, const WORDS: usize> fmt::Debug for PrefixIndex<B, W, WORDS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrefixIndex")
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl<B, W, const WORDS: usize> PrefixIndex<B, W, WORDS>
where
    B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
    W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
{
    /// An empty index over `blocks` (a power-of-two slot count of at least 8; half of it usable) and
    /// `workers` (a power of two of at least `128 * WORDS` slots).
    ///
    /// # Errors
    ///
    /// [`StorageError`] for a slot count that does not fit.
    pub fn new(blocks: B, workers: W) -> Result<Self, StorageError> {
        const {
            assert!(
                WORDS > 0,
                "an index needs at least one word (64 workers) of worker bits"
            );
        };
        let workers_len = workers.as_ref().len();
        if workers_len < 128 * WORDS {
            return Err(StorageError::SlotCount { slots: workers_len });
        }
        Ok(Self {
            blocks: Table::new(blocks)?,
            workers: Table::new(workers)?,
            used_bits: [0; WORDS],
            hand: 0,
            counters: IndexCounters::default(),
            instance: new_instance(),
            bit_changes: 0,
        })
    }

    /// Most workers this index tracks.
    #[must_use]
    pub const fn worker_capacity(&self) -> usize {
        64 * WORDS
    }

    /// The slot counts of the storage it was given: blocks, then workers (to size the storage
    /// of an index read from its snapshot, [`PrefixIndex::from_snapshot`]).
    #[must_use]
    pub fn slot_counts(&self) -> (usize, usize) {
        (self.blocks.slot_count(), self.workers.slot_count())
    }

    /// Most blocks this index holds before it evicts.
    #[must_use]
    pub fn block_capacity(&self) -> usize {
        self.blocks.capacity()
    }

    /// The counters, with the current block and worker counts.
    #[must_use]
    pub fn counters(&self) -> IndexCounters {
        IndexCounters {
            blocks: self.blocks.len(),
            workers: self.workers.len(),
            ..self.counters
        }
    }

    /// Applies one KV event.
    ///
    /// # Errors
    ///
    /// [`IndexError::WorkersFull`] for a `Stored` event of a new worker when every worker bit is
    /// taken; the event changes nothing.
    pub fn apply(&mut self, event: &KvEvent<'_>) -> Result<(), IndexError> {
        match *event {
            KvEvent::Stored {
                worker,
                tier,
                hashes,
            } => self.store(worker, tier, hashes),
            KvEvent::Removed {
                worker,
                tier,
                hashes,
            } => {
                self.remove(worker, tier, hashes);
                Ok(())
            }
            KvEvent::Cleared { worker } => {
                self.clear(worker, false);
                Ok(())
            }
            KvEvent::WorkerRemoved { worker } => {
                self.clear(worker, true);
                Ok(())
            }
        }
    }

    /// Which workers have which bits: a fleet that read them in this state may keep using them.
    pub(crate) fn bits_version(&self) -> Version {
        Version {
            instance: self.instance,
            changes: self.bit_changes,
        }
    }

    pub(crate) fn bit_of(&self, worker: WorkerKey) -> Option<u32> {
        self.workers.find(worker).map(|i| *self.workers.value(i))
    }

    /// The worker's bit, assigning a free one to a new worker.
    pub(crate) fn bit_for(&mut self, worker: WorkerKey) -> Result<u32, IndexError> {
        if let Some(bit) = self.bit_of(worker) {
            return Ok(bit);
        }
        let full = IndexError::WorkersFull {
            worker,
            capacity: 64 * WORDS,
        };
        let Some((word, bits)) = self
            .used_bits
            .iter()
            .enumerate()
            .find(|(_, w)| **w != u64::MAX)
        else {
            self.counters.rejected_events += 1;
            return Err(full);
        };
        #[allow(
            clippy::cast_possible_truncation,
            reason = "word < WORDS, a small array length"
        )]
        let bit = word as u32 * 64 + bits.trailing_ones();
        if self.workers.insert(worker, bit).is_err() {
            // Cannot happen: the worker table has twice as many slots as worker bits.
            self.counters.rejected_events += 1;
            return Err(full);
        }
        self.used_bits[word] |= 1 << bits.trailing_ones();
        self.bit_changes += 1;
        Ok(bit)
    }

    /// Sets `bit` in row `row` (a tier, or 3 for predictions) of each block, inserting blocks
    /// (evicting one by the clock when full) and marking them referenced.
    pub(crate) fn set_bits(&mut self, row: usize, bit: u32, hashes: &[u64]) {
        let (word, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
        for chunk in hashes.chunks(FIND_AHEAD) {
            // Each block's home slot is read first, for the whole chunk and without a branch, so
            // the reads' cache misses overlap; the searches below then start in cache.
            let mut at_home = [None; FIND_AHEAD];
            self.blocks.at_homes(chunk.iter().copied(), &mut at_home);
            for (&hash, &home) in chunk.iter().zip(&at_home) {
                self.set_bit(row, word, mask, hash, home);
            }
        }
    }

    /// Sets the bit for one block of [`PrefixIndex::set_bits`], found in its home slot `home` a
    /// moment ago (checked again: an eviction since may have removed it).
    fn set_bit(&mut self, row: usize, word: usize, mask: u64, hash: u64, home: Option<usize>) {
        let i = match self.blocks.probe_from(home, hash) {
            Ok(i) => i,
            // Placed where the search ended, before a block is evicted: an eviction may open
            // a slot earlier on its path, and the search would have to run again.
            Err(vacancy) => match self.blocks.place(vacancy, hash, BlockEntry::default()) {
                Ok(()) => vacancy,
                Err(_) => return, // unreachable: at most one block past the capacity
            },
        };
        let entry = self.blocks.value_mut(i);
        entry.set(row, word, mask);
        entry.referenced = true;
        if self.blocks.len() > self.blocks.capacity() {
            self.evict(i);
        }
    }

    /// Clears `bit` in row `row` of block `hash`, deleting the block when nobody holds it;
    /// returns whether the block was present.
    pub(crate) fn clear_bit(&mut self, row: usize, bit: u32, hash: u64) -> bool {
        self.clear_bit_from(None, row, bit, hash)
    }

    /// [`PrefixIndex::clear_bit`], trying slot `hint` first (see [`Table::probe_from`]).
    fn clear_bit_from(&mut self, hint: Option<usize>, row: usize, bit: u32, hash: u64) -> bool {
        let Ok(i) = self.blocks.probe_from(hint, hash) else {
            return false;
        };
        let entry = self.blocks.value_mut(i);
        entry.clear(row, (bit / 64) as usize, 1u64 << (bit % 64));
        if entry.is_empty() {
            self.blocks.remove_at(i);
        }
        true
    }

    fn store(&mut self, worker: WorkerKey, tier: Tier, hashes: &[u64]) -> Result<(), IndexError> {
        let bit = self.bit_for(worker)?;
        self.set_bits(tier as usize, bit, hashes);
        Ok(())
    }

    fn remove(&mut self, worker: WorkerKey, tier: Tier, hashes: &[u64]) {
        let Some(bit) = self.bit_of(worker) else {
            self.counters.ignored_events += 1;
            return;
        };
        for chunk in hashes.chunks(FIND_AHEAD) {
            // Home slots read first, as in `set_bits`.
            let mut at_home = [None; FIND_AHEAD];
            self.blocks.at_homes(chunk.iter().copied(), &mut at_home);
            for (&hash, &home) in chunk.iter().zip(&at_home) {
                if !self.clear_bit_from(home, tier as usize, bit, hash) {
                    self.counters.ignored_events += 1;
                }
            }
        }
    }

    /// Drops every block of `worker`; with `forget`, frees its bit too.
    fn clear(&mut self, worker: WorkerKey, forget: bool) {
        let Some(bit) = self.bit_of(worker) else {
            self.counters.ignored_events += 1;
            return;
        };
        let (word, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
        let mut i = 0;
        while i < self.blocks.slot_count() {
            if self.blocks.is_used(i) {
                let entry = self.blocks.value_mut(i);
                for row in 0..entry.held.len() {
                    entry.clear(row, word, mask);
                }
                if entry.is_empty() {
                    // Backward shift may move a later (unvisited) entry into slot i: look again.
                    self.blocks.remove_at(i);
                    continue;
                }
            }
            i += 1;
        }
        if forget {
            if let Some(i) = self.workers.find(worker) {
                self.workers.remove_at(i);
            }
            self.used_bits[word] &= !mask;
            self.bit_changes += 1;
        }
    }

    /// Evicts one block by the clock, never the one at slot `keep` (the block just stored): the
    /// hand clears the mark of each referenced block it passes and evicts the first unmarked one,
    /// staying on its slot, where the deletion's backward shift may have moved the next block. (A
    /// deletion elsewhere may shift a block back past the hand: that block waits one more sweep.)
    fn evict(&mut self, keep: usize) {
        let last = self.blocks.slot_count() - 1;
        loop {
            let i = self.hand;
            if i != keep && self.blocks.is_used(i) {
                let entry = self.blocks.value_mut(i);
                if !entry.referenced {
                    self.blocks.remove_at(i);
                    self.counters.evictions += 1;
                    return;
                }
                entry.referenced = false;
            }
            self.hand = (i + 1) & last;
        }
    }

    /// Counts, for every worker, the leading blocks of `hashes` it holds, per tier, into `out`.
    pub fn query(&self, hashes: &[u64], out: &mut Overlaps<WORDS>) {
        out.reset();
        // The workers that hold every block so far. A worker's count is the length of its
        // prefix, recorded once when it drops out (`Overlaps::held_first`), and split by tier
        // at the end: only blocks held beyond device memory are counted per block.
        let mut active = [u64::MAX; WORDS];
        // The blocks' home slots are read a chunk at a time, without a branch (`Table::at_home`):
        // the reads are independent, so their cache misses overlap instead of each waiting
        // behind the counting of the block before (or behind a search's branches). A block away
        // from its home slot is searched for when its turn comes, in cache by then.
        let mut found = [None; FIND_AHEAD];
        // Overwritten whole by each block (`host` and `disk` only by blocks held beyond device
        // memory, the only ones that read them), so not cleared per block.
        let (mut next, mut host, mut disk) = ([0; WORDS], [0; WORDS], [0; WORDS]);
        for n in 0..hashes.len() {
            let ahead = n % FIND_AHEAD;
            if ahead == 0 {
                self.blocks
                    .at_homes(hashes[n..].iter().copied(), &mut found);
            }
            // Nothing moves during a query: a block seen at home is there.
            let Some(i) = found[ahead].or_else(|| self.blocks.find(hashes[n])) else {
                break;
            };
            let BlockEntry { held, rows, .. } = self.blocks.value(i);
            // `gone`: some worker holding every block so far does not hold this one. Gathered
            // in the same branch-free loop, so the loop that records who dropped out (a branch
            // per word) runs only for the few blocks where someone did.
            let (mut any, mut gone) = (0, 0);
            let device_only = *rows == 1;
            if device_only {
                // Held in device memory only (the common case): the other rows are zeros, so
                // the loop below reduces to this one, which reads one row instead of four.
                for w in 0..WORDS {
                    next[w] = active[w] & held[0][w];
                    gone |= active[w] ^ next[w];
                    any |= next[w];
                }
            } else {
                for w in 0..WORDS {
                    // A prediction (row 3) counts as device memory: the router sent the prefix
                    // there.
                    let fast = held[0][w] | held[3][w];
                    next[w] = active[w] & (fast | held[1][w] | held[2][w]);
                    host[w] = next[w] & held[1][w] & !fast;
                    disk[w] = next[w] & held[2][w] & !fast & !held[1][w];
                    gone |= active[w] ^ next[w];
                    any |= next[w];
                }
            }
            if n == 0 {
                // Tier matches come from KV events only, not from predictions. Workers without
                // the first block keep the count 0 they start with.
                let real =
                    (0..WORDS).fold(0, |real, w| real | held[0][w] | held[1][w] | held[2][w]);
                out.has_tier_matches = real != 0;
            } else if gone != 0 {
                for w in 0..WORDS {
                    let dropped = active[w] & !next[w];
                    if dropped != 0 {
                        out.held_first(w, dropped, n);
                    }
                }
            }
            active = next;
            if any == 0 {
                break;
            }
            out.matched = n + 1;
            if !device_only {
                out.add(1, &host);
                out.add(2, &disk);
            }
        }
        if out.matched > 0 {
            for (w, &bits) in active.iter().enumerate() {
                out.held_first(w, bits, out.matched);
            }
        }
        out.finish();
    }

    /// The overlap `(device, host, disk)` of `worker` in `overlaps`, `None` for an unknown worker.
    #[must_use]
    pub fn overlap(&self, overlaps: &Overlaps<WORDS>, worker: WorkerKey) -> Option<[u32; 3]> {
        let bit = self.bit_of(worker)?;
        Some(overlaps.tiers(bit))
    }

    /// Writes each row's CACHE inputs from `overlaps`: the tier counts and the estimate
    /// `E_blocks = device + host_weight*host + disk_weight*disk`, `E_tokens = round(E_blocks *
    /// block_size)`. Rows of workers the index does not know get no cache entry.
    pub fn fill_rows(
        &self,
        overlaps: &Overlaps<WORDS>,
        rows: &mut [Row],
        host_weight: f64,
        disk_weight: f64,
        block_size: u32,
    ) {
        for row in rows {
            self.fill_row(overlaps, row, host_weight, disk_weight, block_size);
        }
    }

    /// [`PrefixIndex::fill_rows`] for one row.
    #[inline]
    pub(crate) fn fill_row(
        &self,
        overlaps: &Overlaps<WORDS>,
        row: &mut Row,
        host_weight: f64,
        disk_weight: f64,
        block_size: u32,
    ) {
        let bit = self.bit_of(row.worker);
        write_cache(overlaps, bit, row, host_weight, disk_weight, block_size);
    }

    /// The bit of `worker`, its slot in the index's worker table tried first at `*hint`, if
    /// any, which is updated (see `Table::find_hinted`); `None` when the index does not know it.
    #[allow(
        clippy::inline_always,
        reason = "called from the placed and the fleet loops, plain inline left it a call in both: 0.9 us slower at 1,024 rows"
    )]
    #[inline(always)]
    pub(crate) fn bit_hinted(&self, worker: WorkerKey, hint: Option<&mut u32>) -> Option<u32> {
        self.workers
            .find_hinted(worker, hint)
            .map(|i| *self.workers.value(i))
    }
}

/// A worker's index bit as a [`Fleet`](crate::Fleet) keeps it when the index does not know the
/// worker.
pub(crate) const NO_BIT: u32 = u32::MAX;

/// Writes `row`'s CACHE inputs from the overlap counts of worker bit `bit`; no cache entry when
/// the index does not know the worker (`None`).
#[inline]
pub(crate) fn write_cache<const WORDS: usize>(
    overlaps: &Overlaps<WORDS>,
    bit: Option<u32>,
    row: &mut Row,
    host_weight: f64,
    disk_weight: f64,
    block_size: u32,
) {
    if let Some(bit) = bit {
        let [device, host, disk] = overlaps.tiers(bit);
        *row = row.with_cache(Cache::from_tiers(
            device,
            host,
            disk,
            host_weight,
            disk_weight,
            block_size,
        ));
    } else {
        clear_cache(row);
    }
}

/// [`write_cache`] when the query matched blocks in device memory only
/// ([`Overlaps::device_only`]) and [`Cache::in_device_is_exact`] holds for the weights and
/// `block_size`: the device count alone, without [`Cache::from_tiers`]'s per-row checks. A
/// worker the index does not know gets zeros without the flag, as [`clear_cache`] writes them,
/// without a branch on the count.
#[inline]
pub(crate) fn write_device_cache<const WORDS: usize>(
    overlaps: &Overlaps<WORDS>,
    bit: Option<u32>,
    row: &mut Row,
    block_size: u32,
) {
    let device = bit.map_or(0, |bit| overlaps.count(0, bit));
    *row = row.with_cache(Cache::in_device(device, block_size));
    if bit.is_none() {
        row.flags = RowFlags(row.flags.0 & !RowFlags::HAS_CACHE.0);
    }
}

/// [`write_device_cache`] for a bit kept as a fleet keeps it, [`NO_BIT`] for a worker the
/// index does not know: one bounds-checked read gives the device count, 0 for that worker.
/// Returns the device count written.
#[allow(
    clippy::inline_always,
    reason = "a fleet's refill loop; with it, the loop's machine code is what it was written in place"
)]
#[inline(always)]
pub(crate) fn write_device_cache_of<const WORDS: usize>(
    overlaps: &Overlaps<WORDS>,
    bit: u32,
    row: &mut Row,
    block_size: u32,
) -> u32 {
    let device = overlaps.device_count_or_zero(bit);
    let unknown = RowFlags::HAS_CACHE.0 * u32::from(bit == NO_BIT);
    *row = row.with_cache(Cache::in_device(device, block_size));
    row.flags = RowFlags(row.flags.0 & !unknown);
    device
}

/// Removes `row`'s CACHE inputs: no flag, and zeros.
#[inline]
pub(crate) fn clear_cache(row: &mut Row) {
    *row = Row {
        flags: RowFlags(row.flags.0 & !RowFlags::HAS_CACHE.0),
        device_blocks: 0,
        host_blocks: 0,
        disk_blocks: 0,
        effective_blocks: 0.0,
        effective_tokens: 0,
        ..*row
    };
}

/// The tag and format version of an index's snapshot section.
const SNAPSHOT_TAG: [u8; 4] = *b"LRIX";
const SNAPSHOT_VERSION: u16 = 2;

impl<B, W, const WORDS: usize> PrefixIndex<B, W, WORDS>
where
    B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
    W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
{
    /// Writes the index's state to `out` as a snapshot section ([`crate::snapshot`]): its
    /// counters, its workers and their bits, its blocks with their holders per tier and their
    /// clock marks, and the clock's hand. The blocks are listed so that an index read back into
    /// storage of the same slot count puts each in the slot it had, and its hand on the same
    /// slot, so it evicts in the same order (into storage of another size, the hand goes to the
    /// same point of the table). The router's own predictions (approximate mode)
    /// are not written: they are this router's short-lived guesses, kept beside their records in
    /// [`crate::Predictions`], and a block held by predictions alone is left out (so the blocks
    /// after it in its probe run may move up a slot when read back).
    pub fn write_snapshot(&self, out: &mut impl FnMut(&[u8])) {
        let mut w = SnapshotWriter { out };
        w.section(SNAPSHOT_TAG, SNAPSHOT_VERSION);
        #[allow(
            clippy::cast_possible_truncation,
            reason = "WORDS is a small array length"
        )]
        w.u16(WORDS as u16);
        w.u64(self.counters.evictions);
        w.u64(self.counters.rejected_events);
        w.u64(self.counters.ignored_events);
        w.count(self.workers.len());
        for i in 0..self.workers.slot_count() {
            if self.workers.is_used(i) {
                w.worker(self.workers.key(i));
                w.u32(*self.workers.value(i));
            }
        }
        // The hand, as a slot of a table of this many: an index read back into storage of
        // another size puts it at the same point of the hash space.
        w.u64(self.hand as u64);
        w.u64(self.blocks.slot_count() as u64);
        // Blocks in slot order from an empty slot, so that inserting them in the order written
        // lays them out in the same slots again (a probe run is never split by where the walk
        // starts).
        let slots = self.blocks.slot_count();
        let start = (0..slots).find(|&i| !self.blocks.is_used(i)).unwrap_or(0);
        let walk = || (start..start + slots).map(|i| i & (slots - 1));
        let written = |i: usize| self.blocks.is_used(i) && self.blocks.value(i).rows & 0b111 != 0;
        w.count(walk().filter(|&i| written(i)).count());
        for i in walk().filter(|&i| written(i)) {
            let e = self.blocks.value(i);
            w.u64(self.blocks.key(i));
            w.u8(u8::from(e.referenced));
            for row in &e.held[..3] {
                for word in row {
                    w.u64(*word);
                }
            }
        }
    }

    /// An index over fresh storage (as [`PrefixIndex::new`]) holding the state of the snapshot
    /// section `reader` is at; the reader is left after it.
    ///
    /// # Errors
    ///
    /// [`SnapshotError`] naming the byte offset: storage that does not fit
    /// ([`SnapshotProblem::Storage`]), a section that is not an index's of this format version
    /// and number of worker words, more workers or blocks than the storage holds, a worker or
    /// block listed twice, a worker bit out of range or given twice, a block held by a bit no
    /// worker has or by nobody, a block's clock mark other than 0 or 1, the hand beyond its
    /// table, and bytes that end early.
    pub fn from_snapshot(
        blocks: B,
        workers: W,
        reader: &mut SnapshotReader<'_>,
    ) -> Result<Self, SnapshotError> {
        let mut index = Self::new(blocks, workers)
            .map_err(|e| reader.error_here(SnapshotProblem::Storage(e)))?;
        reader.section(SNAPSHOT_TAG, SNAPSHOT_VERSION)?;
        let at = reader.offset();
        let words = reader.u16()?;
        if usize::from(words) != WORDS {
            return Err(SnapshotReader::error_at(
                at,
                SnapshotProblem::Words {
                    snapshot: words,
                    index: WORDS,
                },
            ));
        }
        index.counters.evictions = reader.u64()?;
        index.counters.rejected_events = reader.u64()?;
        index.counters.ignored_events = reader.u64()?;
        for _ in 0..reader.count("workers", 64 * WORDS)? {
            let at = reader.offset();
            let worker = reader.worker()?;
            let bit_at = reader.offset();
            let bit = reader.u32()?;
            if bit as usize >= 64 * WORDS {
                return Err(SnapshotReader::error_at(
                    bit_at,
                    SnapshotProblem::BitOutOfRange(u64::from(bit)),
                ));
            }
            let (word, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
            if index.used_bits[word] & mask != 0 {
                return Err(SnapshotReader::error_at(
                    bit_at,
                    SnapshotProblem::Duplicate {
                        what: "worker bit",
                        key: u64::from(bit),
                    },
                ));
            }
            if index.workers.find(worker).is_some() || index.workers.insert(worker, bit).is_err() {
                return Err(SnapshotReader::error_at(
                    at,
                    SnapshotProblem::Duplicate {
                        what: "worker",
                        key: worker.worker_id,
                    },
                ));
            }
            index.used_bits[word] |= mask;
        }
        let hand_at = reader.offset();
        let (hand, slots) = (reader.u64()?, reader.u64()?);
        if hand >= slots {
            return Err(SnapshotReader::error_at(
                hand_at,
                SnapshotProblem::Hand { hand, slots },
            ));
        }
        // hand < slots, so the product's quotient is below the slot count, a usize.
        #[allow(
            clippy::cast_possible_truncation,
            reason = "below the slot count, a usize"
        )]
        {
            index.hand =
                (u128::from(hand) * index.blocks.slot_count() as u128 / u128::from(slots)) as usize;
        }
        for _ in 0..reader.count("blocks", index.blocks.capacity())? {
            let at = reader.offset();
            let hash = reader.u64()?;
            let entry = index.read_block(reader)?;
            if entry.rows == 0 {
                return Err(SnapshotReader::error_at(
                    at,
                    SnapshotProblem::EmptyBlock(hash),
                ));
            }
            let duplicate = SnapshotReader::error_at(
                at,
                SnapshotProblem::Duplicate {
                    what: "block",
                    key: hash,
                },
            );
            if index.blocks.find(hash).is_some() {
                return Err(duplicate);
            }
            index.blocks.insert(hash, entry).map_err(|_| duplicate)?;
        }
        Ok(index)
    }

    /// A block's clock mark and holders, as [`PrefixIndex::write_snapshot`] writes them after its
    /// hash: a mark of 0 or 1, and holders with bits of known workers only.
    fn read_block(
        &self,
        reader: &mut SnapshotReader<'_>,
    ) -> Result<BlockEntry<WORDS>, SnapshotError> {
        let mut entry = BlockEntry::<WORDS>::default();
        let mark_at = reader.offset();
        entry.referenced = match reader.u8()? {
            0 => false,
            1 => true,
            m => {
                return Err(SnapshotReader::error_at(
                    mark_at,
                    SnapshotProblem::BadMark(m),
                ));
            }
        };
        for row in 0..3 {
            for word in 0..WORDS {
                let at = reader.offset();
                let bits = reader.u64()?;
                if bits & !self.used_bits[word] != 0 {
                    return Err(SnapshotReader::error_at(at, SnapshotProblem::UnknownBit));
                }
                entry.held[row][word] = bits;
                if bits != 0 {
                    entry.rows |= 1 << row;
                }
            }
        }
        Ok(entry)
    }
}
