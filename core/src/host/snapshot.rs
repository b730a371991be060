//! Snapshots of the host's state: an index's or a ledger's whole content as bytes, and back.
//!
//! A router replica that restarts can rebuild its index and ledger by replaying every event
//! since the beginning, at a cost that grows with the history. A snapshot is the state itself,
//! at a cost that grows with what is held: a replica loads the latest one and replays only the
//! events after it (as Dynamo's router does with its radix tree).
//!
//! The format is little-endian and versioned, one section per part (`LRIX` for an index, `LRLG`
//! for a ledger, each with a format version), written through a byte sink so `no_std` hosts can
//! write into any buffer. Reading never trusts the bytes: a truncated section, an unknown
//! version, counts beyond the storage given, duplicate keys, bits of workers the index does not
//! know and non-finite numbers are errors naming the byte offset, and a part is only ever
//! restored into fresh storage (`from_snapshot` constructors), so an error leaves nothing
//! half-restored.

use core::fmt;

use crate::host::table::StorageError;
use crate::vocab::WorkerKey;

/// Why a snapshot could not be read, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotError {
    /// The byte offset (from the start of the bytes given to the reader) of the value that was
    /// wrong or missing.
    pub offset: usize,
    /// What was wrong.
    pub kind: SnapshotProblem,
}

/// What was wrong with a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotProblem {
    /// The bytes end inside a value.
    Truncated,
    /// A section does not start with the tag expected there.
    WrongTag {
        /// The tag expected (`LRIX` or `LRLG`).
        expected: [u8; 4],
    },
    /// A format version this build does not read.
    Version(u16),
    /// An index snapshot made with another number of worker words.
    Words {
        /// The snapshot's.
        snapshot: u16,
        /// The index's.
        index: usize,
    },
    /// More entries than the storage given holds.
    Capacity {
        /// What: `"blocks"`, `"workers"`, `"requests"` or `"tombstones"`.
        what: &'static str,
        /// How many the snapshot holds.
        count: u64,
        /// How many the storage holds.
        capacity: usize,
    },
    /// A key listed twice.
    Duplicate {
        /// What: `"block"`, `"worker"`, `"worker bit"` or `"request"`.
        what: &'static str,
        /// The key (a worker's id for a worker).
        key: u64,
    },
    /// A worker bit beyond the index's capacity.
    BitOutOfRange(u64),
    /// A block held by a worker bit no worker of the snapshot has.
    UnknownBit,
    /// A block nobody holds.
    EmptyBlock(u64),
    /// A request state that is not a combination the ledger makes.
    BadState(u8),
    /// A block's clock mark that is neither 0 nor 1.
    BadMark(u8),
    /// The clock hand beyond the slots of the table it was written from.
    Hand {
        /// The hand's slot.
        hand: u64,
        /// The table's slot count.
        slots: u64,
    },
    /// A number that must be finite (a time or a calibration sum) is not.
    NotFinite,
    /// Bytes left after the last section.
    TrailingBytes(usize),
    /// The storage given is not usable (see [`StorageError`]).
    Storage(StorageError),
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "snapshot byte {}: ", self.offset)?;
        match self.kind {
            SnapshotProblem::Truncated => f.write_str("the snapshot ends inside a value"),
            SnapshotProblem::WrongTag { expected } => write!(
                f,
                "expected a section tagged {:?}",
                core::str::from_utf8(&expected).unwrap_or("?")
            ),
            SnapshotProblem::Version(v) => {
                write!(f, "format version {v} is not one this build reads")
            }
            SnapshotProblem::Words { snapshot, index } => write!(
                f,
                "the snapshot's index has {snapshot} words of worker bits, this one {index}"
            ),
            SnapshotProblem::Capacity {
                what,
                count,
                capacity,
            } => write!(
                f,
                "the snapshot holds {count} {what}, the storage given at most {capacity}"
            ),
            SnapshotProblem::Duplicate { what, key } => write!(f, "{what} {key} is listed twice"),
            SnapshotProblem::BitOutOfRange(bit) => {
                write!(f, "worker bit {bit} is beyond the index's capacity")
            }
            SnapshotProblem::UnknownBit => {
                f.write_str("a block is held by a worker bit no worker of the snapshot has")
            }
            SnapshotProblem::EmptyBlock(hash) => write!(f, "block {hash:#x} is held by nobody"),
            SnapshotProblem::BadState(s) => {
                write!(f, "request state {s:#x} is not one the ledger makes")
            }
            SnapshotProblem::BadMark(m) => {
                write!(f, "block mark {m:#x} is neither 0 nor 1")
            }
            SnapshotProblem::Hand { hand, slots } => write!(
                f,
                "the clock hand is at slot {hand} of a table of {slots} slots"
            ),
            SnapshotProblem::NotFinite => f.write_str("a time or calibration sum is not finite"),
            SnapshotProblem::TrailingBytes(n) => write!(f, "{n} bytes after the last section"),
            SnapshotProblem::Storage(e) => write!(f, "{e}"),
        }
    }
}

impl core::error::Error for SnapshotError {}

/// Reads snapshot sections from bytes, keeping the offset errors name.
///
/// # Examples
///
/// ```
/// use libroute_core::{BlockSlot, KvEvent, PrefixIndex, SnapshotReader, Tier, WorkerKey, WorkerSlot};
///
/// let mut index = PrefixIndex::<_, _, 1>::new(vec![BlockSlot::<1>::empty(); 64], vec![WorkerSlot::empty(); 128]).unwrap();
/// let w = WorkerKey::new(7, 0);
/// index.apply(&KvEvent::Stored { worker: w, tier: Tier::Device, hashes: &[1, 2, 3] }).unwrap();
/// let mut bytes = Vec::new();
/// index.write_snapshot(&mut |b: &[u8]| bytes.extend_from_slice(b));
///
/// let mut reader = SnapshotReader::new(&bytes);
/// let copy = PrefixIndex::<_, _, 1>::from_snapshot(vec![BlockSlot::<1>::empty(); 64], vec![WorkerSlot::empty(); 128], &mut reader).unwrap();
/// reader.finish().unwrap();
/// assert_eq!(copy.counters(), index.counters());
///
/// // A byte short: an error naming where, and nothing built.
/// let mut short = SnapshotReader::new(&bytes[..bytes.len() - 1]);
/// let err = PrefixIndex::<_, _, 1>::from_snapshot(vec![BlockSlot::<1>::empty(); 64], vec![WorkerSlot::empty(); 128], &mut short).unwrap_err();
/// assert_eq!(err.offset, bytes.len() - 8);
/// ```
#[derive(Debug, Clone)]
pub struct SnapshotReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> SnapshotReader<'a> {
    /// A reader at the start of `bytes`.
    #[must_use]
    pub const fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// How many bytes were read.
    #[must_use]
    pub const fn offset(&self) -> usize {
        self.at
    }

    /// Checks that every byte was read.
    ///
    /// # Errors
    ///
    /// [`SnapshotProblem::TrailingBytes`].
    pub fn finish(&self) -> Result<(), SnapshotError> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            n => Err(self.error_here(SnapshotProblem::TrailingBytes(n))),
        }
    }

    pub(crate) const fn error_at(at: usize, kind: SnapshotProblem) -> SnapshotError {
        SnapshotError { offset: at, kind }
    }

    pub(crate) const fn error_here(&self, kind: SnapshotProblem) -> SnapshotError {
        Self::error_at(self.at, kind)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let Some(bytes) = self.bytes.get(self.at..self.at + N) else {
            return Err(self.error_here(SnapshotProblem::Truncated));
        };
        let mut out = [0; N];
        out.copy_from_slice(bytes);
        self.at += N;
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.take::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, SnapshotError> {
        Ok(u16::from_le_bytes(self.take()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, SnapshotError> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    /// A finite `f64`.
    pub(crate) fn finite(&mut self) -> Result<f64, SnapshotError> {
        let at = self.at;
        let v = f64::from_bits(self.u64()?);
        if v.is_finite() {
            Ok(v)
        } else {
            Err(Self::error_at(at, SnapshotProblem::NotFinite))
        }
    }

    pub(crate) fn worker(&mut self) -> Result<WorkerKey, SnapshotError> {
        Ok(WorkerKey::new(self.u64()?, self.u32()?))
    }

    /// A section's tag and version (which must be `version`).
    pub(crate) fn section(&mut self, tag: [u8; 4], version: u16) -> Result<(), SnapshotError> {
        let at = self.at;
        if self.take::<4>()? != tag {
            return Err(Self::error_at(
                at,
                SnapshotProblem::WrongTag { expected: tag },
            ));
        }
        let at = self.at;
        match self.u16()? {
            v if v == version => Ok(()),
            v => Err(Self::error_at(at, SnapshotProblem::Version(v))),
        }
    }

    /// A count of `what`, at most `capacity`.
    pub(crate) fn count(
        &mut self,
        what: &'static str,
        capacity: usize,
    ) -> Result<usize, SnapshotError> {
        let at = self.at;
        let count = self.u64()?;
        match usize::try_from(count) {
            Ok(n) if n <= capacity => Ok(n),
            _ => Err(Self::error_at(
                at,
                SnapshotProblem::Capacity {
                    what,
                    count,
                    capacity,
                },
            )),
        }
    }
}

/// Writes snapshot values into a byte sink.
pub(crate) struct SnapshotWriter<'f, F: FnMut(&[u8])> {
    pub(crate) out: &'f mut F,
}

impl<F: FnMut(&[u8])> SnapshotWriter<'_, F> {
    pub(crate) fn u8(&mut self, v: u8) {
        (self.out)(&[v]);
    }

    pub(crate) fn u16(&mut self, v: u16) {
        (self.out)(&v.to_le_bytes());
    }

    pub(crate) fn u32(&mut self, v: u32) {
        (self.out)(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        (self.out)(&v.to_le_bytes());
    }

    pub(crate) fn f64(&mut self, v: f64) {
        self.u64(v.to_bits());
    }

    pub(crate) fn count(&mut self, n: usize) {
        self.u64(n as u64);
    }

    pub(crate) fn worker(&mut self, w: WorkerKey) {
        self.u64(w.worker_id);
        self.u32(w.dp_rank);
    }

    pub(crate) fn section(&mut self, tag: [u8; 4], version: u16) {
        (self.out)(&tag);
        self.u16(version);
    }
}
