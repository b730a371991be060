//! The two message formats on the bus: a batch of KV events, and a batch of one replica's ledger
//! events. Little-endian, length-prefixed, versioned by a four-byte magic; a batch is checked
//! whole before any of it is applied, so a malformed message changes nothing.
//!
//! ```text
//! KV batch:     "LRK1" event*
//!   event:      kind:u8 worker_id:u64 dp_rank:u32 [tier:u8 count:u32 hash:u64 * count]
//!               kind 1 Stored and 2 Removed carry the bracketed part; 3 Cleared, 4 WorkerRemoved not
//! engine batch: "LRE1" worker_id:u64 dp_rank:u32 payload
//!               payload: one vLLM or SGLang `KVEventBatch` as the engine published it (msgpack),
//!               applied by a replica's `KvIngest`
//! ledger batch: "LRL1" replica:u32 event*
//!   event:      kind:u8 id:u64 [worker_id:u64 dp_rank:u32 prefill_tokens:u64 blocks:u64]
//!               kind 1 Booked carries the bracketed part; 2 PrefillComplete, 3 Freed not
//! ```

use core::fmt;

use libroute_core::{IngestError, KvEvent, LedgerEvent, Tier, WorkerKey};

/// The first four bytes of a KV batch.
pub const KV_MAGIC: &[u8; 4] = b"LRK1";
/// The first four bytes of an engine's own KV-event batch, relayed as it came.
pub const ENGINE_MAGIC: &[u8; 4] = b"LRE1";
/// Bytes before an engine batch's payload: the magic, the worker id and its rank.
pub const ENGINE_HEADER: usize = 16;
/// The first four bytes of a ledger batch.
pub const LEDGER_MAGIC: &[u8; 4] = b"LRL1";

/// Why a message could not be decoded: what was wrong, and at which byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// The message does not start with the format's magic (another format, or another version).
    BadMagic,
    /// The message ends inside a field.
    Truncated {
        /// Where the field starts.
        offset: usize,
    },
    /// An event kind this version does not know.
    UnknownKind {
        /// Where the kind byte is.
        offset: usize,
        /// Its value.
        kind: u8,
    },
    /// An engine batch's payload was refused by the replica's `KvIngest` (its offset counts
    /// from the payload's first byte, [`ENGINE_HEADER`] bytes into the message).
    Engine(IngestError),
    /// An engine batch reached a replica started without a `KvIngest`
    /// ([`crate::Replica::start_reading_engines`] reads them).
    EngineBatchesNotRead,
    /// A tier value that is not 0 (device), 1 (host) or 2 (disk).
    BadTier {
        /// Where the tier byte is.
        offset: usize,
        /// Its value.
        tier: u8,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::BadMagic => write!(
                f,
                "not a libroute batch: the first four bytes are not LRK1, LRE1 or LRL1"
            ),
            WireError::Engine(e) => write!(
                f,
                "engine batch refused: {e} (offsets from the payload, byte {ENGINE_HEADER} of the message)"
            ),
            WireError::EngineBatchesNotRead => write!(
                f,
                "an engine batch reached a replica that reads none (start it with start_reading_engines)"
            ),
            WireError::Truncated { offset } => {
                write!(f, "the message ends inside the field at byte {offset}")
            }
            WireError::UnknownKind { offset, kind } => {
                write!(f, "unknown event kind {kind} at byte {offset}")
            }
            WireError::BadTier { offset, tier } => {
                write!(f, "tier {tier} at byte {offset} is not 0, 1 or 2")
            }
        }
    }
}

impl std::error::Error for WireError {}

const STORED: u8 = 1;
const REMOVED: u8 = 2;
const CLEARED: u8 = 3;
const WORKER_REMOVED: u8 = 4;

const BOOKED: u8 = 1;
const PREFILL_COMPLETE: u8 = 2;
const FREED: u8 = 3;

/// Appends one KV event to a batch that starts with [`KV_MAGIC`] (write it first with
/// [`start_kv`]). An event of more than `u32::MAX` hashes is written as several events of the
/// same kind, in order, which the index applies the same way.
pub fn push_kv(out: &mut Vec<u8>, event: &KvEvent<'_>) {
    let (kind, worker, body) = match *event {
        KvEvent::Stored {
            worker,
            tier,
            hashes,
        } => (STORED, worker, Some((tier, hashes))),
        KvEvent::Removed {
            worker,
            tier,
            hashes,
        } => (REMOVED, worker, Some((tier, hashes))),
        KvEvent::Cleared { worker } => (CLEARED, worker, None),
        KvEvent::WorkerRemoved { worker } => (WORKER_REMOVED, worker, None),
    };
    let head = |out: &mut Vec<u8>| {
        out.push(kind);
        out.extend_from_slice(&worker.worker_id.to_le_bytes());
        out.extend_from_slice(&worker.dp_rank.to_le_bytes());
    };
    let Some((tier, hashes)) = body else {
        head(out);
        return;
    };
    let mut rest = hashes;
    loop {
        let count = u32::try_from(rest.len()).unwrap_or(u32::MAX);
        let (part, more) = rest.split_at(count as usize);
        head(out);
        out.push(tier as u8);
        out.extend_from_slice(&count.to_le_bytes());
        out.reserve(part.len() * 8);
        for h in part {
            out.extend_from_slice(&h.to_le_bytes());
        }
        if more.is_empty() {
            return;
        }
        rest = more;
    }
}

/// Starts a KV batch.
pub fn start_kv(out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(KV_MAGIC);
}

/// Writes an engine batch: `worker`'s `payload` (a vLLM or SGLang `KVEventBatch`) as it came.
pub fn write_engine(out: &mut Vec<u8>, worker: WorkerKey, payload: &[u8]) {
    out.clear();
    out.extend_from_slice(ENGINE_MAGIC);
    out.extend_from_slice(&worker.worker_id.to_le_bytes());
    out.extend_from_slice(&worker.dp_rank.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Reads an engine batch's worker and payload (the payload itself is checked when applied).
pub fn decode_engine(bytes: &[u8]) -> Result<(WorkerKey, &[u8]), WireError> {
    if bytes.get(..4) != Some(ENGINE_MAGIC) {
        return Err(WireError::BadMagic);
    }
    let mut r = Reader { bytes, at: 4 };
    let worker = r.worker()?;
    Ok((worker, &bytes[ENGINE_HEADER..]))
}

/// Starts a ledger batch from `replica`.
pub fn start_ledger(out: &mut Vec<u8>, replica: u32) {
    out.clear();
    out.extend_from_slice(LEDGER_MAGIC);
    out.extend_from_slice(&replica.to_le_bytes());
}

/// Appends one ledger event to a batch begun with [`start_ledger`].
pub fn push_ledger(out: &mut Vec<u8>, event: &LedgerEvent) {
    match *event {
        LedgerEvent::Booked {
            id,
            worker,
            prefill_tokens,
            blocks,
        } => {
            out.push(BOOKED);
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&worker.worker_id.to_le_bytes());
            out.extend_from_slice(&worker.dp_rank.to_le_bytes());
            out.extend_from_slice(&prefill_tokens.to_le_bytes());
            out.extend_from_slice(&blocks.to_le_bytes());
        }
        LedgerEvent::PrefillComplete { id } => {
            out.push(PREFILL_COMPLETE);
            out.extend_from_slice(&id.to_le_bytes());
        }
        LedgerEvent::Freed { id } => {
            out.push(FREED);
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
}

/// A cursor over a message that names the offset of whatever is wrong.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let field = self
            .bytes
            .get(self.at..self.at + n)
            .ok_or(WireError::Truncated { offset: self.at })?;
        self.at += n;
        Ok(field)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn worker(&mut self) -> Result<WorkerKey, WireError> {
        let id = self.u64()?;
        Ok(WorkerKey::new(id, self.u32()?))
    }

    fn done(&self) -> bool {
        self.at == self.bytes.len()
    }
}

/// Decodes a KV batch, calling `apply` with each event in order, after the whole batch has been
/// checked (a malformed batch calls it never). `scratch` holds one event's hashes at a time and is
/// reused across calls. Returns the number of events.
pub fn decode_kv(
    bytes: &[u8],
    scratch: &mut Vec<u64>,
    mut apply: impl FnMut(&KvEvent<'_>),
) -> Result<usize, WireError> {
    let events = walk_kv(bytes, scratch, None::<fn(&KvEvent<'_>)>)?;
    walk_kv(bytes, scratch, Some(&mut apply))?;
    Ok(events)
}

/// Reads a KV batch through, naming the first thing wrong; with `apply`, also decodes each
/// event's hashes into `scratch` and hands the event over (the checking pass does neither).
fn walk_kv<F: FnMut(&KvEvent<'_>)>(
    bytes: &[u8],
    scratch: &mut Vec<u64>,
    mut apply: Option<F>,
) -> Result<usize, WireError> {
    if bytes.get(..4) != Some(KV_MAGIC) {
        return Err(WireError::BadMagic);
    }
    let mut r = Reader { bytes, at: 4 };
    let mut events = 0;
    while !r.done() {
        let offset = r.at;
        let kind = r.u8()?;
        if !(STORED..=WORKER_REMOVED).contains(&kind) {
            return Err(WireError::UnknownKind { offset, kind });
        }
        let worker = r.worker()?;
        match kind {
            STORED | REMOVED => {
                let tier_at = r.at;
                let value = r.u8()?;
                let tier = Tier::from_u32(u32::from(value)).ok_or(WireError::BadTier {
                    offset: tier_at,
                    tier: value,
                })?;
                let count_at = r.at;
                let count = r.u32()? as usize;
                let body = r
                    .take(
                        count
                            .checked_mul(8)
                            .ok_or(WireError::Truncated { offset: count_at })?,
                    )
                    .map_err(|_| WireError::Truncated { offset: count_at })?;
                if let Some(apply) = apply.as_mut() {
                    scratch.clear();
                    scratch.extend(
                        body.chunks_exact(8)
                            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
                    );
                    let hashes = scratch.as_slice();
                    apply(&if kind == STORED {
                        KvEvent::Stored {
                            worker,
                            tier,
                            hashes,
                        }
                    } else {
                        KvEvent::Removed {
                            worker,
                            tier,
                            hashes,
                        }
                    });
                }
            }
            CLEARED => {
                if let Some(apply) = apply.as_mut() {
                    apply(&KvEvent::Cleared { worker });
                }
            }
            _ => {
                if let Some(apply) = apply.as_mut() {
                    apply(&KvEvent::WorkerRemoved { worker });
                }
            }
        }
        events += 1;
    }
    Ok(events)
}

/// Decodes a ledger batch into its replica and events, after checking the whole batch.
pub fn decode_ledger(bytes: &[u8], out: &mut Vec<LedgerEvent>) -> Result<u32, WireError> {
    if bytes.get(..4) != Some(LEDGER_MAGIC) {
        return Err(WireError::BadMagic);
    }
    let mut r = Reader { bytes, at: 4 };
    let replica = r.u32()?;
    let start = out.len();
    let result = (|| {
        while !r.done() {
            let offset = r.at;
            let kind = r.u8()?;
            let id = r.u64()?;
            out.push(match kind {
                BOOKED => LedgerEvent::Booked {
                    id,
                    worker: r.worker()?,
                    prefill_tokens: r.u64()?,
                    blocks: r.u64()?,
                },
                PREFILL_COMPLETE => LedgerEvent::PrefillComplete { id },
                FREED => LedgerEvent::Freed { id },
                _ => return Err(WireError::UnknownKind { offset, kind }),
            });
        }
        Ok(())
    })();
    if let Err(e) = result {
        out.truncate(start);
        return Err(e);
    }
    Ok(replica)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv_events(bytes: &[u8]) -> Result<Vec<String>, WireError> {
        let mut seen = Vec::new();
        decode_kv(bytes, &mut Vec::new(), |e| seen.push(format!("{e:?}")))?;
        Ok(seen)
    }

    #[test]
    fn kv_batches_round_trip() {
        let w = WorkerKey::new(7, 2);
        let events = [
            KvEvent::Stored {
                worker: w,
                tier: Tier::Host,
                hashes: &[1, u64::MAX, 3],
            },
            KvEvent::Removed {
                worker: w,
                tier: Tier::Device,
                hashes: &[],
            },
            KvEvent::Cleared { worker: w },
            KvEvent::WorkerRemoved { worker: w },
        ];
        let mut bytes = Vec::new();
        start_kv(&mut bytes);
        for e in &events {
            push_kv(&mut bytes, e);
        }
        let expected: Vec<String> = events.iter().map(|e| format!("{e:?}")).collect();
        assert_eq!(kv_events(&bytes).unwrap(), expected);
    }

    #[test]
    fn a_malformed_kv_batch_names_the_byte_and_applies_nothing() {
        let w = WorkerKey::new(1, 0);
        let mut bytes = Vec::new();
        start_kv(&mut bytes);
        push_kv(&mut bytes, &KvEvent::Cleared { worker: w });
        let good = bytes.len();
        push_kv(
            &mut bytes,
            &KvEvent::Stored {
                worker: w,
                tier: Tier::Disk,
                hashes: &[5, 6],
            },
        );
        // Every cut inside the second event is refused, and the first event is not applied.
        for cut in good + 1..bytes.len() {
            let mut applied = 0;
            let err = decode_kv(&bytes[..cut], &mut Vec::new(), |_| applied += 1).unwrap_err();
            assert!(matches!(err, WireError::Truncated { .. }), "{cut}: {err}");
            assert_eq!(applied, 0);
        }
        let mut bad_tier = bytes.clone();
        bad_tier[good + 13] = 9;
        assert_eq!(
            kv_events(&bad_tier),
            Err(WireError::BadTier {
                offset: good + 13,
                tier: 9
            })
        );
        let mut bad_kind = bytes.clone();
        bad_kind[good] = 0;
        assert_eq!(
            kv_events(&bad_kind),
            Err(WireError::UnknownKind {
                offset: good,
                kind: 0
            })
        );
        // A count that promises more hashes than follow names the count's byte.
        let mut long = bytes.clone();
        long[good + 14..good + 18].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            kv_events(&long),
            Err(WireError::Truncated { offset: good + 14 })
        );
        assert_eq!(kv_events(b"LRL1"), Err(WireError::BadMagic));
        assert_eq!(kv_events(b""), Err(WireError::BadMagic));
    }

    #[test]
    fn engine_batches_carry_their_worker_and_payload() {
        let mut bytes = vec![9, 9];
        write_engine(&mut bytes, WorkerKey::new(4, 2), &[0x92, 0x01, 0x90]);
        assert_eq!(bytes.len(), ENGINE_HEADER + 3);
        assert_eq!(
            decode_engine(&bytes),
            Ok((WorkerKey::new(4, 2), &[0x92, 0x01, 0x90][..]))
        );
        for cut in 4..ENGINE_HEADER {
            assert!(matches!(
                decode_engine(&bytes[..cut]),
                Err(WireError::Truncated { .. })
            ));
        }
        assert_eq!(decode_engine(b"LRK1"), Err(WireError::BadMagic));
    }

    #[test]
    fn ledger_batches_round_trip_and_refuse_whole() {
        let events = [
            LedgerEvent::Booked {
                id: u64::MAX,
                worker: WorkerKey::new(3, 1),
                prefill_tokens: 4096,
                blocks: 33,
            },
            LedgerEvent::PrefillComplete { id: 4 },
            LedgerEvent::Freed { id: 0 },
        ];
        let mut bytes = Vec::new();
        start_ledger(&mut bytes, 42);
        let mut boundaries = vec![bytes.len()];
        for e in &events {
            push_ledger(&mut bytes, e);
            boundaries.push(bytes.len());
        }
        let mut out = vec![LedgerEvent::Freed { id: 99 }];
        assert_eq!(decode_ledger(&bytes, &mut out), Ok(42));
        assert_eq!(out[1..], events);
        for cut in (4..bytes.len()).filter(|c| !boundaries.contains(c)) {
            let mut out = Vec::new();
            assert!(
                matches!(
                    decode_ledger(&bytes[..cut], &mut out),
                    Err(WireError::Truncated { .. })
                ),
                "{cut}"
            );
            assert!(out.is_empty());
        }
        let mut bad = bytes.clone();
        bad[8] = 7;
        assert_eq!(
            decode_ledger(&bad, &mut Vec::new()),
            Err(WireError::UnknownKind { offset: 8, kind: 7 })
        );
        assert_eq!(
            decode_ledger(b"LRK1", &mut Vec::new()),
            Err(WireError::BadMagic)
        );
    }

    #[test]
    fn every_byte_corrupted_is_refused_by_offset_or_decodes_whole() {
        let w = WorkerKey::new(5, 1);
        let mut kv = Vec::new();
        start_kv(&mut kv);
        push_kv(
            &mut kv,
            &KvEvent::Stored {
                worker: w,
                tier: Tier::Host,
                hashes: &[1, 2, 3],
            },
        );
        push_kv(
            &mut kv,
            &KvEvent::Removed {
                worker: w,
                tier: Tier::Device,
                hashes: &[4],
            },
        );
        push_kv(&mut kv, &KvEvent::Cleared { worker: w });
        let mut ledger = Vec::new();
        start_ledger(&mut ledger, 3);
        push_ledger(
            &mut ledger,
            &LedgerEvent::Booked {
                id: 1,
                worker: w,
                prefill_tokens: 9,
                blocks: 2,
            },
        );
        push_ledger(&mut ledger, &LedgerEvent::Freed { id: 1 });
        for value in [0u8, 1, 2, 3, 4, 5, 0x7f, 0x80, 0xff] {
            for at in 0..kv.len() {
                let mut bad = kv.clone();
                bad[at] = value;
                let mut applied = 0;
                match decode_kv(&bad, &mut Vec::new(), |_| applied += 1) {
                    Ok(n) => assert_eq!(applied, n),
                    Err(WireError::BadMagic) => assert!(at < 4),
                    Err(
                        WireError::Truncated { offset }
                        | WireError::UnknownKind { offset, .. }
                        | WireError::BadTier { offset, .. },
                    ) => {
                        assert!(offset >= 4 && offset <= bad.len(), "{at}: {offset}");
                        assert_eq!(applied, 0);
                    }
                    Err(e @ (WireError::Engine(_) | WireError::EngineBatchesNotRead)) => {
                        panic!("{at}: a KV batch's decoder reports {e}");
                    }
                }
            }
            for at in 0..ledger.len() {
                let mut bad = ledger.clone();
                bad[at] = value;
                let mut out = Vec::new();
                match decode_ledger(&bad, &mut out) {
                    Ok(_) => assert!(!out.is_empty()),
                    Err(WireError::BadMagic) => assert!(at < 4),
                    Err(e) => {
                        assert!(
                            matches!(e, WireError::Truncated { offset } | WireError::UnknownKind { offset, .. } if offset >= 8 && offset <= bad.len()),
                            "{at}: {e}"
                        );
                        assert!(out.is_empty());
                    }
                }
            }
        }
    }
}
