//! Snapshots of a replica's router in the bus's object store, so a replica that starts late or
//! restarts loads the latest one and replays only the events after it.
//!
//! An object, `latest` in bucket `<PREFIX>_SNAPSHOTS`, holds: the tag `LRSN`, a format version
//! (`u16`), the KV and ledger stream positions the state includes (`u64` each, little-endian),
//! then the router's index and ledger sections
//! ([`libroute_core::Router::write_snapshot`]). The object store writes a new object's chunks
//! before its metadata, so a reader gets the previous snapshot or the new one, whole.
//!
//! A snapshot taken by any replica serves every replica: they apply the same streams, and the
//! events a replica made itself after the positions are read back from the ledger stream and
//! applied idempotently ([`libroute_core::Ledger::apply`]).

use std::fmt;

use async_nats::jetstream::{self, object_store};
use libroute_core::{
    BlockSlot, Ledger, LoadSlot, PrefixIndex, RequestSlot, Router, SnapshotError, SnapshotReader,
    WorkerSlot,
};
use tokio::io::AsyncReadExt;

use crate::HostRouter;
use crate::replica::Positions;

const TAG: [u8; 4] = *b"LRSN";
const VERSION: u16 = 1;
/// Tag, version and the two positions.
const HEADER: usize = 22;
/// The object every snapshot replaces.
const OBJECT: &str = "latest";

/// Why a snapshot could not be taken, stored or loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotFailure {
    /// The object store could not be created, written or read.
    Store,
    /// The object is not a snapshot of this format: the tag or version (at byte 0 or 4) is
    /// not `LRSN` version 1, or it ends before its positions.
    Header,
    /// A section is damaged or does not fit this router's storage (the byte offset is the
    /// router sections', after the 22-byte header).
    Router(SnapshotError),
    /// The snapshot includes stream positions beyond the streams' ends: it was taken from
    /// streams since deleted and created again, and is not used.
    Ahead {
        /// The snapshot's positions.
        snapshot: Positions,
        /// The streams' last sequences.
        streams: Positions,
    },
    /// The replica reads engines' own batches: its engine-hash map is state a snapshot does
    /// not hold, so it neither takes nor loads one.
    ReadsEngines,
}

impl fmt::Display for SnapshotFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotFailure::Store => f.write_str("the snapshot object store could not be used"),
            SnapshotFailure::Header => f.write_str("the object is not a libroute snapshot (v1)"),
            SnapshotFailure::Router(e) => write!(f, "{e}"),
            SnapshotFailure::Ahead { snapshot, streams } => write!(
                f,
                "the snapshot includes stream positions {snapshot:?} beyond the streams' ends {streams:?}"
            ),
            SnapshotFailure::ReadsEngines => f.write_str(
                "a replica reading engines' batches keeps an engine-hash map snapshots do not hold",
            ),
        }
    }
}

impl std::error::Error for SnapshotFailure {}

/// The snapshot bytes of `router` at `positions`.
pub(crate) fn encode<const WORDS: usize>(
    router: &HostRouter<WORDS>,
    positions: Positions,
) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER);
    bytes.extend_from_slice(&TAG);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&positions.kv.to_le_bytes());
    bytes.extend_from_slice(&positions.ledger.to_le_bytes());
    router.write_snapshot(&mut |b: &[u8]| bytes.extend_from_slice(b));
    bytes
}

/// A router over storage the size of `like`'s, with `like`'s weights, holding the snapshot in
/// `bytes`, and the positions it includes. Workers `like`'s ledger has and the snapshot's does
/// not are added (a replica started with a new worker keeps it).
pub(crate) fn decode<const WORDS: usize>(
    bytes: &[u8],
    like: &HostRouter<WORDS>,
) -> Result<(HostRouter<WORDS>, Positions), SnapshotFailure> {
    let header = bytes.get(..HEADER).ok_or(SnapshotFailure::Header)?;
    if header[..4] != TAG || header[4..6] != VERSION.to_le_bytes() {
        return Err(SnapshotFailure::Header);
    }
    let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().unwrap_or_default());
    let positions = Positions {
        kv: word(6),
        ledger: word(14),
    };
    let (blocks, workers) = like.index.slot_counts();
    let (requests, loads, tombstones) = like.ledger.slot_counts();
    let mut reader = SnapshotReader::new(&bytes[HEADER..]);
    let index = PrefixIndex::from_snapshot(
        vec![BlockSlot::<WORDS>::empty(); blocks],
        vec![WorkerSlot::empty(); workers],
        &mut reader,
    )
    .map_err(SnapshotFailure::Router)?;
    let mut ledger = Ledger::from_snapshot(
        vec![RequestSlot::empty(); requests],
        vec![LoadSlot::empty(); loads],
        vec![0u64; tombstones],
        &mut reader,
    )
    .map_err(SnapshotFailure::Router)?;
    reader.finish().map_err(SnapshotFailure::Router)?;
    for worker in like.ledger.workers() {
        // A worker that does not fit is one the snapshot's fleet had no room for either.
        let _ = ledger.add_worker(worker);
    }
    let (host, disk) = like.cache_weights();
    Ok((Router::new(index, ledger, host, disk), positions))
}

/// The bus's snapshot bucket, created when missing.
pub(crate) async fn store(
    js: &jetstream::Context,
    bucket: &str,
    memory: bool,
) -> Result<object_store::ObjectStore, SnapshotFailure> {
    if let Ok(store) = js.get_object_store(bucket).await {
        return Ok(store);
    }
    js.create_object_store(object_store::Config {
        bucket: bucket.to_owned(),
        description: Some("libroute router snapshots".to_owned()),
        storage: if memory {
            jetstream::stream::StorageType::Memory
        } else {
            jetstream::stream::StorageType::File
        },
        ..object_store::Config::default()
    })
    .await
    .map_err(|_| SnapshotFailure::Store)
}

/// Stores `bytes` as the latest snapshot.
pub(crate) async fn put(
    store: &object_store::ObjectStore,
    bytes: &[u8],
) -> Result<(), SnapshotFailure> {
    let mut data = bytes;
    store
        .put(OBJECT, &mut data)
        .await
        .map(|_| ())
        .map_err(|_| SnapshotFailure::Store)
}

/// The latest snapshot's bytes; `None` when there is none yet.
pub(crate) async fn get(
    store: &object_store::ObjectStore,
) -> Result<Option<Vec<u8>>, SnapshotFailure> {
    let mut object = match store.get(OBJECT).await {
        Ok(object) => object,
        Err(e) if e.kind() == object_store::GetErrorKind::NotFound => return Ok(None),
        Err(_) => return Err(SnapshotFailure::Store),
    };
    let mut bytes = Vec::new();
    object
        .read_to_end(&mut bytes)
        .await
        .map_err(|_| SnapshotFailure::Store)?;
    Ok(Some(bytes))
}
