//! Block hashes from token ids, as NVIDIA Dynamo's KV router computes them.
//!
//! A prompt is cut into blocks of `block_size` tokens (a trailing partial block is not hashed).
//! Each block's **local hash** is xxh3-64 of its tokens as little-endian `u32`s, seeded with
//! [`BlockHasher::SEED`] (1337), or, for a LoRA adapter with a non-empty name, with 1337 plus
//! xxh3-64 of the name's bytes at seed 0 (wrapping). The **sequence hash** of block `i` chains
//! the prefix: the first equals its local hash, each next one is xxh3-64 of the parent's sequence
//! hash and the block's local hash as 16 little-endian bytes, seed 1337 (never salted). The
//! sequence hashes are what the [`crate::host::index::PrefixIndex`] is keyed by: two workers
//! hold the same block only if they hold the same prefix up to it.
//!
//! This is Dynamo's `compute_block_hash_for_seq` and `compute_seq_hash_for_block` (crate
//! `dynamo-kv-router`), checked against vectors made with its own functions
//! (`core/tests/hashing.rs`), so a libroute router reads the hashes a Dynamo publisher relays and
//! hashes requests the way Dynamo does.

use core::convert::Infallible;
use core::fmt;

use xxhash_rust::xxh3::{Xxh3, xxh3_64_with_seed};

/// Bytes of tokens hashed in one call (256 tokens); a longer block is hashed in a stream.
const CHUNK_BYTES: usize = 1024;

/// Why a [`BlockHasher`] cannot do what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HashError {
    /// A block size of zero tokens.
    ZeroBlockSize,
    /// The output holds fewer hashes than the prompt has complete blocks.
    OutputTooShort {
        /// Complete blocks in the prompt.
        blocks: usize,
        /// Hashes the output holds.
        capacity: usize,
    },
}

impl fmt::Display for HashError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HashError::ZeroBlockSize => f.write_str("block_size must be at least 1 token"),
            HashError::OutputTooShort { blocks, capacity } => write!(
                f,
                "the prompt has {blocks} complete blocks but the output holds {capacity} hashes"
            ),
        }
    }
}

impl core::error::Error for HashError {}

/// Turns token ids into the chained block hashes the prefix index uses (see the module docs).
///
/// A value type: build one per (block size, LoRA adapter) and reuse it; hashing allocates
/// nothing.
///
/// # Examples
///
/// ```
/// use libroute_core::BlockHasher;
///
/// let hasher = BlockHasher::new(4, None).unwrap();
/// let tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9]; // two complete blocks; token 9 is not hashed
/// let mut hashes = [0u64; 8];
/// let n = hasher.sequence_hashes(&tokens, None, &mut hashes).unwrap();
/// assert_eq!(n, 2);
/// assert_eq!(hashes[0], hasher.local_hash(&tokens[..4]));
/// assert_eq!(hashes[1], BlockHasher::chain(hashes[0], hasher.local_hash(&tokens[4..8])));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHasher {
    block_size: u32,
    seed: u64,
}

impl BlockHasher {
    /// Dynamo's seed for both local and sequence hashes.
    pub const SEED: u64 = 1337;

    /// A hasher for blocks of `block_size` tokens; `lora` is the LoRA adapter's name (`None` or
    /// an empty name for the base model), which salts the local hashes.
    ///
    /// # Errors
    ///
    /// [`HashError::ZeroBlockSize`] for a block size of zero.
    pub fn new(block_size: u32, lora: Option<&[u8]>) -> Result<Self, HashError> {
        if block_size == 0 {
            return Err(HashError::ZeroBlockSize);
        }
        Ok(Self {
            block_size,
            seed: Self::local_seed(lora),
        })
    }

    /// A hasher with local-hash seed `seed` (see [`BlockHasher::local_seed`]); `block_size` is
    /// not zero.
    pub(crate) const fn with_seed(block_size: u32, seed: u64) -> Self {
        Self { block_size, seed }
    }

    /// The seed of local hashes for a LoRA adapter's name (`None` or empty: the base model).
    #[must_use]
    pub fn local_seed(lora: Option<&[u8]>) -> u64 {
        match lora {
            Some(name) if !name.is_empty() => Self::SEED.wrapping_add(xxh3_64_with_seed(name, 0)),
            _ => Self::SEED,
        }
    }

    /// Tokens per block.
    #[must_use]
    pub const fn block_size(&self) -> u32 {
        self.block_size
    }

    /// Complete blocks in a prompt of `tokens` tokens.
    #[must_use]
    pub const fn block_count(&self, tokens: usize) -> usize {
        tokens / self.block_size as usize
    }

    /// The local hash of one block's tokens (any length; normally `block_size` of them).
    #[must_use]
    pub fn local_hash(&self, tokens: &[u32]) -> u64 {
        // The buffers are filled from the slice in order, a whole run of tokens per buffer: a
        // copy the compiler widens, with no per-token check of an iterator's end.
        let mut rest = tokens;
        let fill = |bytes: &mut [u8]| {
            let (now, later) = rest.split_at((bytes.len() / 4).min(rest.len()));
            for (out, token) in bytes.chunks_exact_mut(4).zip(now) {
                out.copy_from_slice(&token.to_le_bytes());
            }
            rest = later;
            Ok::<(), Infallible>(())
        };
        match self.local_hash_with(tokens.len(), fill) {
            Ok(hash) => hash,
            Err(never) => match never {},
        }
    }

    /// The local hash of `len` tokens read from `tokens` (which must yield at least `len`;
    /// missing ones hash as zeros).
    pub(crate) fn local_hash_of(&self, len: usize, mut tokens: impl Iterator<Item = u32>) -> u64 {
        let fill = |bytes: &mut [u8]| {
            write_u32s_le(bytes, || Ok::<u32, Infallible>(tokens.next().unwrap_or(0)))
        };
        match self.local_hash_with(len, fill) {
            Ok(hash) => hash,
            Err(never) => match never {},
        }
    }

    /// The local hash of `len` tokens that `fill` writes, as little-endian `u32`s, into the
    /// buffers it is given in turn (`len * 4` bytes in all): decoders write the tokens straight
    /// off the wire, with no iterator between them and the hash. `fill`'s first error is
    /// returned.
    #[inline]
    pub(crate) fn local_hash_with<E>(
        &self,
        len: usize,
        fill: impl FnMut(&mut [u8]) -> Result<(), E>,
    ) -> Result<u64, E> {
        // The buffer is zeroed on every call, so its size follows the block's: 16 and 64 tokens
        // are the usual block sizes.
        if len <= 16 {
            return self.one_shot::<64, E>(len, fill);
        }
        if len <= 64 {
            return self.one_shot::<256, E>(len, fill);
        }
        if len * 4 <= CHUNK_BYTES {
            return self.one_shot::<CHUNK_BYTES, E>(len, fill);
        }
        self.streamed(len, fill)
    }

    /// [`BlockHasher::local_hash_with`] for a block longer than a chunk, hashed as a stream (the
    /// streaming digest equals the one-shot hash). Out of line: its state is large, and the
    /// usual block sizes never come here.
    #[inline(never)]
    fn streamed<E>(
        &self,
        len: usize,
        mut fill: impl FnMut(&mut [u8]) -> Result<(), E>,
    ) -> Result<u64, E> {
        let mut buf = [0u8; CHUNK_BYTES];
        let mut state = Xxh3::with_seed(self.seed);
        let mut left = len;
        while left > 0 {
            let take = left.min(CHUNK_BYTES / 4);
            let bytes = &mut buf[..take * 4];
            fill(bytes)?;
            state.update(bytes);
            left -= take;
        }
        Ok(state.digest())
    }

    /// xxh3-64 of `len` tokens (`len * 4 <= N`) written by `fill` into an `N`-byte buffer.
    #[inline]
    fn one_shot<const N: usize, E>(
        &self,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<u64, E> {
        let mut buf = [0u8; N];
        let bytes = &mut buf[..len * 4];
        fill(bytes)?;
        Ok(xxh3_64_with_seed(bytes, self.seed))
    }

    /// The sequence hash of a block whose parent block has sequence hash `parent` and whose own
    /// local hash is `local`.
    #[must_use]
    #[inline]
    pub fn chain(parent: u64, local: u64) -> u64 {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&parent.to_le_bytes());
        bytes[8..].copy_from_slice(&local.to_le_bytes());
        xxh3_64_with_seed(&bytes, Self::SEED)
    }

    /// Writes the local hash of each complete block of `tokens` to `out`; returns how many.
    ///
    /// # Errors
    ///
    /// [`HashError::OutputTooShort`] when `out` holds fewer hashes than there are blocks;
    /// nothing is written.
    pub fn local_hashes(&self, tokens: &[u32], out: &mut [u64]) -> Result<usize, HashError> {
        let blocks = self.checked_count(tokens.len(), out.len())?;
        let size = self.block_size as usize;
        for (block, hash) in tokens.chunks_exact(size).zip(out.iter_mut()) {
            *hash = self.local_hash(block);
        }
        Ok(blocks)
    }

    /// Writes the sequence hash of each complete block of `tokens` to `out`; returns how many.
    /// `parent` is the sequence hash of the block before `tokens` (`None`: they start the
    /// prompt), so a prompt can be hashed in pieces of whole blocks.
    ///
    /// # Errors
    ///
    /// [`HashError::OutputTooShort`] when `out` holds fewer hashes than there are blocks;
    /// nothing is written.
    pub fn sequence_hashes(
        &self,
        tokens: &[u32],
        parent: Option<u64>,
        out: &mut [u64],
    ) -> Result<usize, HashError> {
        let blocks = self.checked_count(tokens.len(), out.len())?;
        let size = self.block_size as usize;
        let mut parent = parent;
        for (block, hash) in tokens.chunks_exact(size).zip(out.iter_mut()) {
            let next = self.next_sequence_hash(parent, self.local_hash(block));
            *hash = next;
            parent = Some(next);
        }
        Ok(blocks)
    }

    /// The sequence hash of a block with local hash `local` after the block with sequence hash
    /// `parent` (`None`: the first block, whose sequence hash is its local hash).
    #[must_use]
    #[inline]
    pub fn next_sequence_hash(&self, parent: Option<u64>, local: u64) -> u64 {
        match parent {
            Some(parent) => Self::chain(parent, local),
            None => local,
        }
    }

    fn checked_count(&self, tokens: usize, capacity: usize) -> Result<usize, HashError> {
        let blocks = self.block_count(tokens);
        if blocks > capacity {
            return Err(HashError::OutputTooShort { blocks, capacity });
        }
        Ok(blocks)
    }
}

/// Writes `out.len() / 4` values from `next` into `out` as little-endian `u32`s, the bytes a block
/// is hashed from; `next`'s first error is returned. Two values go in each 8-byte store: xxh3
/// reads 8-byte words, and a load that spans two narrower stores waits for them to reach the
/// cache instead of being forwarded.
#[inline]
pub(crate) fn write_u32s_le<E>(
    out: &mut [u8],
    mut next: impl FnMut() -> Result<u32, E>,
) -> Result<(), E> {
    let mut pairs = out.chunks_exact_mut(8);
    for bytes in pairs.by_ref() {
        let low = u64::from(next()?);
        let high = u64::from(next()?);
        bytes.copy_from_slice(&(low | high << 32).to_le_bytes());
    }
    for bytes in pairs.into_remainder().chunks_exact_mut(4) {
        bytes.copy_from_slice(&next()?.to_le_bytes());
    }
    Ok(())
}
