//! Applying engines' batches to a prefix index: engine block hashes mapped to the router's.

use core::fmt;

use super::batch::{KvBatch, Lora, Prehash, RemovedBlocks, StoredBlocks, WireEvent};
use super::{WireError, WireProblem};
use crate::host::hashing::BlockHasher;
use crate::host::index::{BlockSlot, IndexError, KvEvent, PrefixIndex, Tier, WorkerSlot};
use crate::host::table::{Slot, StorageError, Table, TableKey, mix};
use crate::vocab::WorkerKey;

/// Local hashes computed while a payload is checked (`KvIngest::apply`); blocks beyond them are
/// hashed from their token ids as they are applied.
const PREHASHED: usize = 128;

/// Blocks hashed, looked up and handed to the index per step (a batch's event usually holds a
/// request's new blocks: a few to a few dozen).
const CHUNK: usize = 16;

/// One engine block on one worker: the key of [`KvIngest`]'s map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EngineBlock {
    /// The worker that reported it.
    pub worker: WorkerKey,
    /// The engine's hash of the block (see [`super::KvBatch`] for how bytes become a `u64`).
    pub hash: u64,
}

impl TableKey for EngineBlock {
    #[inline]
    fn hash64(&self) -> u64 {
        mix(self.hash ^ self.worker.hash64())
    }
}

/// What [`KvIngest`] keeps per engine block: the router's sequence hash and the tiers holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MappedBlock {
    /// The block's hash in the index (its sequence hash, [`BlockHasher`]).
    pub router_hash: u64,
    tiers: u8,
}

/// A slot of [`KvIngest`]'s storage.
pub type EngineSlot = Slot<EngineBlock, MappedBlock>;

/// What an ingest has done, for hosts to export as metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IngestCounters {
    /// Engine blocks mapped now.
    pub mapped: usize,
    /// Batches applied.
    pub batches: u64,
    /// Blocks stored into the index.
    pub stored_blocks: u64,
    /// Blocks removed from the index.
    pub removed_blocks: u64,
    /// `AllBlocksCleared` events applied.
    pub clears: u64,
    /// Stored blocks skipped because their parent block was never seen (or was forgotten): their
    /// router hashes depend on the prefix before them.
    pub orphaned_blocks: u64,
    /// Removed blocks that were never mapped, ignored.
    pub unknown_removals: u64,
    /// Mappings dropped to make room when the map was full: a later removal of such a block is
    /// ignored (the index evicts it in time) and a block stored after it is an orphan.
    pub forgotten: u64,
}

/// What one batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchSummary {
    /// The worker the events were applied to (the data-parallel rank the batch names replaces
    /// the given key's).
    pub worker: WorkerKey,
    /// Events in the batch.
    pub events: usize,
    /// Blocks stored into the index.
    pub stored_blocks: usize,
    /// Blocks removed from the index.
    pub removed_blocks: usize,
    /// Stored blocks skipped, their parent unknown.
    pub orphaned_blocks: usize,
    /// Removed blocks never mapped.
    pub unknown_removals: usize,
    /// `AllBlocksCleared` events.
    pub clears: usize,
}

/// Why [`KvIngest`] refused a payload, or cannot be built. A refused payload changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IngestError {
    /// The payload is malformed, truncated or unknown.
    Wire(WireError),
    /// The index cannot take the batch's worker (every worker bit is taken).
    Index(IndexError),
    /// The map's storage is not a power of two of at least 8 slots.
    Storage(StorageError),
    /// A block size of zero.
    ZeroBlockSize,
}

impl fmt::Display for IngestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IngestError::Wire(e) => e.fmt(f),
            IngestError::Index(e) => e.fmt(f),
            IngestError::Storage(e) => write!(f, "the engine-hash map's storage: {e}"),
            IngestError::ZeroBlockSize => f.write_str("block_size must be at least 1 token"),
        }
    }
}

impl core::error::Error for IngestError {}

impl From<WireError> for IngestError {
    fn from(e: WireError) -> Self {
        IngestError::Wire(e)
    }
}

/// Applies engines' `KVEventBatch` payloads to a [`PrefixIndex`], keeping a bounded map from each
/// worker's engine block hashes to the router's.
///
/// Engines hash blocks their own way (vLLM: SHA-256 or Python's `hash`, per process), and a
/// `BlockRemoved` names only those hashes, so the router re-hashes each stored block's token ids
/// (with its LoRA adapter, chained from its parent's router hash; [`BlockHasher`]) and remembers
/// engine hash to router hash until the block leaves every tier. The map holds
/// [`KvIngest::capacity`] blocks; when full, a mapping is forgotten to make room
/// ([`IngestCounters::forgotten`]), so memory stays fixed: size it like the index.
///
/// # Examples
///
/// ```
/// use libroute_core::*;
///
/// let mut index = PrefixIndex::<_, _, 1>::new(vec![BlockSlot::<1>::empty(); 1024], vec![WorkerSlot::empty(); 128]).unwrap();
/// let mut ingest = KvIngest::new(vec![EngineSlot::empty(); 1024], 2).unwrap();
/// // [ts, [["BlockStored", [11, 12], None, [1, 2, 3, 4], 2, None, "GPU"]]]
/// let payload = [
///     0x92, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0,
///     0x91, 0x97, 0xab, b'B', b'l', b'o', b'c', b'k', b'S', b't', b'o', b'r', b'e', b'd',
///     0x92, 11, 12, 0xc0, 0x94, 1, 2, 3, 4, 2, 0xc0, 0xa3, b'G', b'P', b'U',
/// ];
/// let worker = WorkerKey::new(7, 0);
/// let summary = ingest.apply(&mut index, worker, &payload).unwrap();
/// assert_eq!(summary.stored_blocks, 2);
///
/// // The router hashes a request's tokens the same way, so the index finds the prefix.
/// let mut hashes = [0u64; 2];
/// BlockHasher::new(2, None).unwrap().sequence_hashes(&[1, 2, 3, 4], None, &mut hashes).unwrap();
/// let mut overlaps = Overlaps::new();
/// index.query(&hashes, &mut overlaps);
/// assert_eq!(index.overlap(&overlaps, worker), Some([2, 0, 0]));
///
/// // A truncated payload is an error naming the byte, and changes nothing.
/// let err = ingest.apply(&mut index, worker, &payload[..30]).unwrap_err();
/// assert_eq!(err.to_string(), "KV event payload, byte 30: the payload ends inside a value");
/// ```
#[derive(Debug)]
pub struct KvIngest<S> {
    map: Table<EngineBlock, MappedBlock, S>,
    block_size: u32,
    counters: IngestCounters,
}

impl<S: AsRef<[EngineSlot]> + AsMut<[EngineSlot]>> KvIngest<S> {
    /// An ingest whose stored blocks must have `block_size` tokens (the router's, the size its
    /// requests are hashed with), mapping at most half of `slots` engine blocks.
    ///
    /// # Errors
    ///
    /// [`IngestError::Storage`] when the slot count is not a power of two of at least 8;
    /// [`IngestError::ZeroBlockSize`].
    pub fn new(slots: S, block_size: u32) -> Result<Self, IngestError> {
        if block_size == 0 {
            return Err(IngestError::ZeroBlockSize);
        }
        Ok(Self {
            map: Table::new(slots).map_err(IngestError::Storage)?,
            block_size,
            counters: IngestCounters::default(),
        })
    }

    /// Tokens per block.
    #[must_use]
    pub const fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Most engine blocks mapped before one is forgotten.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.map.capacity()
    }

    /// The counters, with the current number of mapped blocks.
    #[must_use]
    pub fn counters(&self) -> IngestCounters {
        IngestCounters {
            mapped: self.map.len(),
            ..self.counters
        }
    }

    /// The router's hash of `worker`'s engine block `engine_hash`, while it is mapped.
    #[must_use]
    pub fn router_hash(&self, worker: WorkerKey, engine_hash: u64) -> Option<u64> {
        let key = EngineBlock {
            worker,
            hash: engine_hash,
        };
        self.map.find(key).map(|i| self.map.value(i).router_hash)
    }

    /// Parses `payload` and applies it to `index` as `worker`'s events (see [`KvIngest::apply_batch`]).
    ///
    /// # Errors
    ///
    /// As [`KvBatch::parse`] and [`KvIngest::apply_batch`]; nothing changes on error.
    pub fn apply<B, W, const WORDS: usize>(
        &mut self,
        index: &mut PrefixIndex<B, W, WORDS>,
        worker: WorkerKey,
        payload: &[u8],
    ) -> Result<BatchSummary, IngestError>
    where
        B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
        W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    {
        // The stored blocks' local hashes are computed as the payload is checked, so its token
        // ids are walked once.
        let mut locals = [0u64; PREHASHED];
        let mut prehash = Prehash::new(self.block_size, &mut locals);
        let batch = KvBatch::parse_with(payload, Some(&mut prehash))?;
        self.apply_with(index, worker, &batch, &locals)
    }

    /// Applies a parsed batch to `index` as `worker`'s events; the data-parallel rank the batch
    /// names, if any, replaces `worker`'s.
    ///
    /// # Errors
    ///
    /// [`WireProblem::BlockSize`] for a stored event whose block size is not the ingest's;
    /// [`IngestError::Index`] when the worker is new to an index whose worker bits are all
    /// taken. Both are checked before anything changes.
    pub fn apply_batch<B, W, const WORDS: usize>(
        &mut self,
        index: &mut PrefixIndex<B, W, WORDS>,
        worker: WorkerKey,
        batch: &KvBatch<'_>,
    ) -> Result<BatchSummary, IngestError>
    where
        B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
        W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    {
        self.apply_with(index, worker, batch, &[])
    }

    /// [`KvIngest::apply_batch`] with the local hashes the batch's check computed (`locals`,
    /// where the events' `locals_at` point).
    fn apply_with<B, W, const WORDS: usize>(
        &mut self,
        index: &mut PrefixIndex<B, W, WORDS>,
        worker: WorkerKey,
        batch: &KvBatch<'_>,
        locals: &[u64],
    ) -> Result<BatchSummary, IngestError>
    where
        B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
        W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    {
        if let Some((found, offset)) = batch.block_size_other_than(self.block_size) {
            return Err(IngestError::Wire(WireError {
                offset,
                problem: WireProblem::BlockSize {
                    found,
                    expected: self.block_size,
                },
            }));
        }
        let worker = batch
            .data_parallel_rank()
            .map_or(worker, |rank| WorkerKey::new(worker.worker_id, rank));
        if batch.has_stores() {
            index.bit_for(worker).map_err(IngestError::Index)?;
        }
        let mut summary = BatchSummary {
            worker,
            events: batch.len(),
            ..BatchSummary::default()
        };
        for event in batch.events() {
            match event {
                WireEvent::Stored(s) => self.store(index, worker, &s, locals, &mut summary)?,
                WireEvent::Removed(r) => self.remove(index, worker, &r, &mut summary),
                WireEvent::Cleared => {
                    index
                        .apply(&KvEvent::Cleared { worker })
                        .map_err(IngestError::Index)?;
                    self.forget_worker(worker);
                    summary.clears += 1;
                }
            }
        }
        let c = &mut self.counters;
        c.batches += 1;
        c.stored_blocks += summary.stored_blocks as u64;
        c.removed_blocks += summary.removed_blocks as u64;
        c.orphaned_blocks += summary.orphaned_blocks as u64;
        c.unknown_removals += summary.unknown_removals as u64;
        c.clears += summary.clears as u64;
        Ok(summary)
    }

    /// Drops every mapping of `worker` (for a worker that left: apply
    /// [`KvEvent::WorkerRemoved`] to the index too).
    pub fn forget_worker(&mut self, worker: WorkerKey) {
        let mut i = 0;
        while i < self.map.slot_count() {
            if self.map.is_used(i) && self.map.key(i).worker == worker {
                // Backward shift may move a later (unvisited) entry into slot i: look again.
                self.map.remove_at(i);
                continue;
            }
            i += 1;
        }
    }

    fn store<B, W, const WORDS: usize>(
        &mut self,
        index: &mut PrefixIndex<B, W, WORDS>,
        worker: WorkerKey,
        stored: &StoredBlocks<'_>,
        locals: &[u64],
        summary: &mut BatchSummary,
    ) -> Result<(), IngestError>
    where
        B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
        W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    {
        let mut parent = match stored.parent() {
            None => None,
            Some(hash) => {
                if let Some(router) = self.router_hash(worker, hash) {
                    Some(router)
                } else {
                    summary.orphaned_blocks += stored.block_count();
                    return Ok(());
                }
            }
        };
        let hasher = BlockHasher::with_seed(self.block_size, stored.lora().seed());
        let tier = stored.tier();
        let size = self.block_size as usize;
        let mut tokens = stored.tokens();
        // Hashed as the payload was checked, with the base model's seed.
        let prehashed = match (stored.lora(), stored.locals_at()) {
            (Lora::Base, Some(at)) => locals.get(at..at + stored.block_count()),
            _ => None,
        };
        let mut done = 0;
        let mut engine_hashes = stored.hashes();
        loop {
            let (engine, found, n) = self.next_chunk(worker, &mut engine_hashes);
            let mut router = [0u64; CHUNK];
            for i in 0..n {
                let local = match prehashed {
                    Some(locals) => locals[done + i],
                    None => hasher.local_hash_of(size, tokens.by_ref()),
                };
                let hash = hasher.next_sequence_hash(parent, local);
                parent = Some(hash);
                self.map_block(found[i], worker, engine[i], hash, tier);
                router[i] = hash;
            }
            Self::stored(index, worker, tier, &router[..n])?;
            done += n;
            if n < CHUNK {
                break;
            }
        }
        summary.stored_blocks += stored.block_count();
        Ok(())
    }

    /// Hands the index a chunk's stored blocks (none: nothing to do).
    fn stored<B, W, const WORDS: usize>(
        index: &mut PrefixIndex<B, W, WORDS>,
        worker: WorkerKey,
        tier: Tier,
        hashes: &[u64],
    ) -> Result<(), IngestError>
    where
        B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
        W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    {
        if hashes.is_empty() {
            return Ok(());
        }
        // Cannot fail: the worker's bit was taken before the first event.
        index
            .apply(&KvEvent::Stored {
                worker,
                tier,
                hashes,
            })
            .map_err(IngestError::Index)
    }

    fn remove<B, W, const WORDS: usize>(
        &mut self,
        index: &mut PrefixIndex<B, W, WORDS>,
        worker: WorkerKey,
        removed: &RemovedBlocks<'_>,
        summary: &mut BatchSummary,
    ) where
        B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
        W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    {
        let tier = removed.tier();
        let mut engine_hashes = removed.hashes();
        loop {
            let (engine, found, n) = self.next_chunk(worker, &mut engine_hashes);
            let mut router = [0u64; CHUNK];
            let mut mapped_count = 0;
            for (&hash, &hint) in engine[..n].iter().zip(&found) {
                // Checked again: a removal before it in the chunk may have shifted it.
                let Ok(i) = self.map.probe_from(hint, EngineBlock { worker, hash }) else {
                    summary.unknown_removals += 1;
                    continue;
                };
                let mapped = self.map.value_mut(i);
                mapped.tiers &= !tier_bit(tier);
                router[mapped_count] = mapped.router_hash;
                if mapped.tiers == 0 {
                    self.map.remove_at(i);
                }
                mapped_count += 1;
            }
            summary.removed_blocks += mapped_count;
            Self::removed(index, worker, tier, &router[..mapped_count]);
            if n < CHUNK {
                break;
            }
        }
    }

    /// Hands the index a chunk's mapped removals (none: nothing to do).
    fn removed<B, W, const WORDS: usize>(
        index: &mut PrefixIndex<B, W, WORDS>,
        worker: WorkerKey,
        tier: Tier,
        hashes: &[u64],
    ) where
        B: AsRef<[BlockSlot<WORDS>]> + AsMut<[BlockSlot<WORDS>]>,
        W: AsRef<[WorkerSlot]> + AsMut<[WorkerSlot]>,
    {
        if hashes.is_empty() {
            return;
        }
        // Removals never fail.
        let _ = index.apply(&KvEvent::Removed {
            worker,
            tier,
            hashes,
        });
    }

    /// The next (up to) [`CHUNK`] of `worker`'s engine hashes, each with its home slot in the
    /// map if its mapping is there, and how many there are. The home slots are read without a
    /// branch ([`Table::at_homes`]), so their cache misses overlap instead of each waiting behind
    /// the work on the block before (a mapping elsewhere is found by a search that starts in
    /// cache then).
    fn next_chunk(
        &self,
        worker: WorkerKey,
        hashes: &mut impl Iterator<Item = u64>,
    ) -> ([u64; CHUNK], [Option<usize>; CHUNK], usize) {
        let mut engine = [0u64; CHUNK];
        let mut n = 0;
        for (slot, hash) in engine.iter_mut().zip(hashes) {
            *slot = hash;
            n += 1;
        }
        let mut found = [None; CHUNK];
        let keys = engine[..n].iter().map(|&hash| EngineBlock { worker, hash });
        self.map.at_homes(keys, &mut found);
        (engine, found, n)
    }

    /// Maps `worker`'s engine block `hash` to `router_hash` in `tier`; `hint` is its home slot
    /// if it was there a moment ago (checked: a forgotten mapping may have shifted it since).
    fn map_block(
        &mut self,
        hint: Option<usize>,
        worker: WorkerKey,
        hash: u64,
        router_hash: u64,
        tier: Tier,
    ) {
        let key = EngineBlock { worker, hash };
        // Absent from its home slot a moment ago, or moved: looked for again (the probe run is
        // in cache now).
        if let Ok(i) = self.map.probe_from(hint, key) {
            let mapped = self.map.value_mut(i);
            mapped.router_hash = router_hash;
            mapped.tiers |= tier_bit(tier);
            return;
        }
        if self.map.len() >= self.map.capacity() {
            self.forget_one(key);
        }
        // Cannot fail: there is room now.
        let _ = self.map.insert(
            key,
            MappedBlock {
                router_hash,
                tiers: tier_bit(tier),
            },
        );
    }

    /// Drops the mapping nearest to `key`'s home slot: a victim as random as the hash, found in
    /// a few probes.
    fn forget_one(&mut self, key: EngineBlock) {
        let mask = self.map.slot_count() - 1;
        #[allow(clippy::cast_possible_truncation, reason = "masked to the slot count")]
        let mut i = key.hash64() as usize & mask;
        while !self.map.is_used(i) {
            i = (i + 1) & mask;
        }
        self.map.remove_at(i);
        self.counters.forgotten += 1;
    }
}

const fn tier_bit(tier: Tier) -> u8 {
    1 << tier as u8
}
