//! Layer 4, the host's state: the fixed-capacity tables, the prefix index fed by KV events, the
//! predictions of approximate mode, the load ledger with its speed calibration, and the
//! [`Router`] that turns them into rows (the host's, or those of a [`Fleet`] it keeps between
//! routes) and runs a policy. It uses the vocabulary and the engine, never a particular policy.

pub mod calibrate;
mod fleet;
pub(crate) mod hashing;
pub(crate) mod index;
pub(crate) mod kv_events;
pub(crate) mod ledger;
pub(crate) mod predict;
mod router;
pub mod snapshot;
pub(crate) mod table;
pub(crate) mod version;

pub use fleet::{Fleet, FleetError, FleetPlace, Place};
pub use hashing::{BlockHasher, HashError};
pub use index::{
    BlockEntry, BlockSlot, IndexCounters, IndexError, KvEvent, Overlaps, PrefixIndex, Tier,
    WorkerSlot,
};
pub use kv_events::{
    BatchSummary, EngineBlock, EngineSlot, Events, IngestCounters, IngestError, KvBatch, KvIngest,
    Lora, MappedBlock, RemovedBlocks, SequenceCheck, SequenceStep, StoredBlocks, WireError,
    WireEvent, WireProblem,
};
pub use ledger::{
    Ledger, LedgerCounters, LedgerError, LedgerEvent, LoadSlot, RequestEntry, RequestSlot,
    WorkerLoad, WorkerState,
};
pub use predict::{PredictionKey, PredictionRecord, PredictionSlot, Predictions};
pub use router::{RouteError, Router};
pub use snapshot::{SnapshotError, SnapshotProblem, SnapshotReader};
pub use table::{Slot, StorageError, TableKey};
