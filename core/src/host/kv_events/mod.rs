//! Engines' KV events on the wire: vLLM's and SGLang's `KVEventBatch` payloads, decoded in place
//! and applied to a [`crate::host::index::PrefixIndex`].
//!
//! vLLM and SGLang publish KV-cache events on a ZMQ PUB socket as three frames: a topic, an
//! 8-byte big-endian sequence number and a MessagePack payload, a `KVEventBatch` encoded by
//! msgspec. [`KvBatch::parse`] reads and checks one payload without allocating; [`KvIngest`] maps
//! the engine's block hashes to the router's (it re-hashes the stored blocks' token ids with
//! [`crate::BlockHasher`], so events and requests agree) and applies the batch to an index;
//! [`SequenceCheck`] tells a subscriber which batches it missed, to ask the engine's replay socket
//! for them.
//!
//! The payload's forms are documented on [`KvBatch`], the public item that reads them.

mod batch;
mod ingest;
mod msgpack;

use core::fmt;

pub use batch::{Events, KvBatch, Lora, RemovedBlocks, StoredBlocks, WireEvent};
pub use ingest::{
    BatchSummary, EngineBlock, EngineSlot, IngestCounters, IngestError, KvIngest, MappedBlock,
};

/// What was wrong with a payload, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireError {
    /// The byte offset in the payload of the value that is wrong (the payload's length when it
    /// ends too early).
    pub offset: usize,
    /// What is wrong there.
    pub problem: WireProblem,
}

/// What is wrong with a payload at [`WireError::offset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireProblem {
    /// The payload ends inside a value.
    Truncated,
    /// A value of another type than the field needs.
    Expected {
        /// What the field needs.
        what: &'static str,
        /// The MessagePack marker byte found instead.
        found: u8,
    },
    /// An integer out of the field's range (negative, or above `max`).
    OutOfRange {
        /// The largest value the field takes.
        max: u64,
    },
    /// A required field is absent.
    MissingField {
        /// Its name.
        field: &'static str,
    },
    /// An event tag other than `BlockStored`, `BlockRemoved` and `AllBlocksCleared`.
    UnknownEvent,
    /// A `medium` libroute has no tier for.
    UnknownMedium,
    /// A block size of zero.
    ZeroBlockSize,
    /// A stored event whose token count is not `block_size` per block hash.
    TokenCount {
        /// Tokens in `token_ids`.
        tokens: usize,
        /// Block hashes in `block_hashes`.
        blocks: usize,
        /// The event's `block_size`.
        block_size: u32,
    },
    /// A stored event's block size differs from the one requests are hashed with.
    BlockSize {
        /// The event's `block_size`.
        found: u32,
        /// The ingest's block size.
        expected: u32,
    },
    /// Bytes after the batch.
    TrailingBytes,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KV event payload, byte {}: ", self.offset)?;
        match self.problem {
            WireProblem::Truncated => f.write_str("the payload ends inside a value"),
            WireProblem::Expected { what, found } => {
                write!(f, "expected {what}, found marker 0x{found:02x}")
            }
            WireProblem::OutOfRange { max } => {
                write!(f, "integer out of range (0 to {max})")
            }
            WireProblem::MissingField { field } => write!(f, "missing field `{field}`"),
            WireProblem::UnknownEvent => f.write_str(
                "unknown event (expected BlockStored, BlockRemoved or AllBlocksCleared)",
            ),
            WireProblem::UnknownMedium => f.write_str(
                "unknown medium (expected GPU, CPU, CPU_PINNED, DISK, EXTERNAL or REMOTE)",
            ),
            WireProblem::ZeroBlockSize => f.write_str("block_size is 0"),
            WireProblem::TokenCount {
                tokens,
                blocks,
                block_size,
            } => write!(
                f,
                "{tokens} token ids for {blocks} blocks of {block_size} tokens"
            ),
            WireProblem::BlockSize { found, expected } => write!(
                f,
                "block_size {found} differs from the router's block size {expected}"
            ),
            WireProblem::TrailingBytes => f.write_str("bytes after the end of the batch"),
        }
    }
}

impl core::error::Error for WireError {}

/// Where a batch's sequence number stands against the ones seen before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceStep {
    /// The first batch seen, or the one after the last: apply it.
    Next,
    /// A sequence number already seen (a replayed or duplicated batch): skip it.
    Seen,
    /// Batches `missed.0 ..= missed.1` never arrived: ask the replay socket for them from
    /// `missed.0`, and apply this one after them.
    Gap {
        /// The first and last missed sequence numbers.
        missed: (u64, u64),
    },
}

/// A subscriber's record of the last sequence number applied, to detect missed batches.
///
/// # Examples
///
/// ```
/// use libroute_core::{SequenceCheck, SequenceStep};
///
/// let mut seq = SequenceCheck::new();
/// assert_eq!(seq.step(0), SequenceStep::Next);
/// seq.applied(0);
/// assert_eq!(seq.step(3), SequenceStep::Gap { missed: (1, 2) });
/// assert_eq!(seq.step(0), SequenceStep::Seen);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SequenceCheck {
    last: Option<u64>,
}

impl SequenceCheck {
    /// Nothing seen yet: the first batch is [`SequenceStep::Next`] whatever its number (a
    /// subscriber joining late starts where the stream is).
    #[must_use]
    pub const fn new() -> Self {
        Self { last: None }
    }

    /// The last sequence number applied.
    #[must_use]
    pub const fn last(&self) -> Option<u64> {
        self.last
    }

    /// Where `seq` stands; changes nothing (call [`SequenceCheck::applied`] once it is).
    #[must_use]
    pub const fn step(&self, seq: u64) -> SequenceStep {
        match self.last {
            None => SequenceStep::Next,
            Some(last) if seq <= last => SequenceStep::Seen,
            Some(last) if seq == last + 1 => SequenceStep::Next,
            Some(last) => SequenceStep::Gap {
                missed: (last + 1, seq - 1),
            },
        }
    }

    /// Records that batch `seq` was applied (or deliberately given up on).
    pub fn applied(&mut self, seq: u64) {
        if self.last.is_none_or(|last| seq > last) {
            self.last = Some(seq);
        }
    }
}
