//! Snapshots of a router's index and ledger (`Router::write_snapshot`,
//! `PrefixIndex::from_snapshot`, `Ledger::from_snapshot`): a router read back from a snapshot
//! taken at any point of a random stream behaves as the original for the rest of the stream
//! (the same answers to every call, the same evictions, tombstones and calibration), and bytes
//! that are cut short or corrupted are errors naming a byte within them, never a panic.

use std::fmt::Write as _;

use libroute_core::*;
use proptest::prelude::*;

type TestRouter =
    Router<Vec<BlockSlot<1>>, Vec<WorkerSlot>, Vec<RequestSlot>, Vec<LoadSlot>, Vec<u64>, 1>;

// Small tables: the stream evicts blocks and forgets tombstones.
const BLOCK_SLOTS: usize = 32;
const REQUEST_SLOTS: usize = 64;
const LOAD_SLOTS: usize = 16;
const TOMBSTONES: usize = 6;

fn router() -> TestRouter {
    let index = PrefixIndex::new(
        vec![BlockSlot::<1>::empty(); BLOCK_SLOTS],
        vec![WorkerSlot::empty(); 128],
    )
    .unwrap();
    let ledger = Ledger::new(
        vec![RequestSlot::empty(); REQUEST_SLOTS],
        vec![LoadSlot::empty(); LOAD_SLOTS],
        vec![0u64; TOMBSTONES],
    )
    .unwrap();
    Router::new(index, ledger, 0.75, 0.25)
}

fn snapshot(router: &TestRouter) -> Vec<u8> {
    let mut bytes = Vec::new();
    router.write_snapshot(&mut |b: &[u8]| bytes.extend_from_slice(b));
    bytes
}

fn restore(bytes: &[u8]) -> Result<TestRouter, SnapshotError> {
    let mut reader = SnapshotReader::new(bytes);
    let index = PrefixIndex::from_snapshot(
        vec![BlockSlot::<1>::empty(); BLOCK_SLOTS],
        vec![WorkerSlot::empty(); 128],
        &mut reader,
    )?;
    let ledger = Ledger::from_snapshot(
        vec![RequestSlot::empty(); REQUEST_SLOTS],
        vec![LoadSlot::empty(); LOAD_SLOTS],
        vec![0u64; TOMBSTONES],
        &mut reader,
    )?;
    reader.finish()?;
    Ok(Router::new(index, ledger, 0.75, 0.25))
}

#[derive(Debug, Clone)]
enum Op {
    AddWorker(u64),
    RemoveWorker(u64),
    Store(u64, usize, Vec<u64>),
    Remove(u64, usize, Vec<u64>),
    Clear(u64),
    Forget(u64),
    Book(u64, u64, u64, u64, Option<f64>),
    Complete(u64, Option<f64>),
    Free(u64),
    Relay(LedgerEvent),
}

const WORKERS: u64 = 6;
const IDS: u64 = 40;
const HASHES: u64 = 48;

fn hashes() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(0..HASHES, 1..6)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0..WORKERS).prop_map(Op::AddWorker),
        1 => (0..WORKERS).prop_map(Op::RemoveWorker),
        4 => (0..WORKERS, 0..3usize, hashes()).prop_map(|(w, t, h)| Op::Store(w, t, h)),
        2 => (0..WORKERS, 0..3usize, hashes()).prop_map(|(w, t, h)| Op::Remove(w, t, h)),
        1 => (0..WORKERS).prop_map(Op::Clear),
        1 => (0..WORKERS).prop_map(Op::Forget),
        3 => (0..IDS, 0..WORKERS, 1..5000u64, 1..64u64, prop::option::of(0.0..1e6f64))
            .prop_map(|(id, w, p, b, t)| Op::Book(id, w, p, b, t)),
        2 => (0..IDS, prop::option::of(0.0..2e6f64)).prop_map(|(id, t)| Op::Complete(id, t)),
        2 => (0..IDS).prop_map(Op::Free),
        3 => (0..IDS, 0..WORKERS, 1..5000u64, 1..64u64, 0..3u8).prop_map(|(id, w, p, b, kind)| {
            Op::Relay(match kind {
                0 => LedgerEvent::Booked {
                    id,
                    worker: WorkerKey::new(w, 0),
                    prefill_tokens: p,
                    blocks: b,
                },
                1 => LedgerEvent::PrefillComplete { id },
                _ => LedgerEvent::Freed { id },
            })
        }),
    ]
}

fn tier(t: usize) -> Tier {
    [Tier::Device, Tier::Host, Tier::Disk][t]
}

/// Applies `op`, returning what the call answered.
fn apply(r: &mut TestRouter, op: &Op) -> String {
    let key = |w: u64| WorkerKey::new(w, 0);
    match op {
        Op::AddWorker(w) => format!("{:?}", r.ledger.add_worker(key(*w))),
        Op::RemoveWorker(w) => {
            r.ledger.remove_worker(key(*w));
            String::new()
        }
        Op::Store(w, t, h) => format!(
            "{:?}",
            r.index.apply(&KvEvent::Stored {
                worker: key(*w),
                tier: tier(*t),
                hashes: h,
            })
        ),
        Op::Remove(w, t, h) => format!(
            "{:?}",
            r.index.apply(&KvEvent::Removed {
                worker: key(*w),
                tier: tier(*t),
                hashes: h,
            })
        ),
        Op::Clear(w) => format!("{:?}", r.index.apply(&KvEvent::Cleared { worker: key(*w) })),
        Op::Forget(w) => format!(
            "{:?}",
            r.index.apply(&KvEvent::WorkerRemoved { worker: key(*w) })
        ),
        Op::Book(id, w, prefill, blocks, at) => format!(
            "{:?}",
            match at {
                Some(at) => r.ledger.book_at(*id, key(*w), *prefill, *blocks, *at),
                None => r.ledger.book(*id, key(*w), *prefill, *blocks),
            }
        ),
        Op::Complete(id, t) => format!(
            "{:?}",
            match t {
                Some(t) => r.ledger.prefill_complete_at(*id, *t),
                None => r.ledger.prefill_complete(*id),
            }
        ),
        Op::Free(id) => format!("{:?}", r.ledger.free(*id)),
        Op::Relay(e) => {
            r.ledger.apply(e);
            String::new()
        }
    }
}

/// Everything a caller can observe of a router's state.
fn observe(r: &TestRouter) -> String {
    let mut out = format!("{:?} {:?}\n", r.index.counters(), r.ledger.counters());
    let mut overlaps = Overlaps::<1>::new();
    for w in 0..WORKERS {
        let k = WorkerKey::new(w, 0);
        writeln!(out, "{w}: {:?} {:?}", r.ledger.load(k), r.ledger.speed(k)).unwrap();
    }
    for h in 0..HASHES {
        r.index.query(&[h], &mut overlaps);
        let held: Vec<_> = (0..WORKERS)
            .map(|w| r.index.overlap(&overlaps, WorkerKey::new(w, 0)))
            .collect();
        writeln!(out, "block {h}: {held:?}").unwrap();
    }
    for id in 0..IDS {
        writeln!(
            out,
            "request {id}: {} {:?}",
            r.ledger.contains(id),
            r.ledger.booking(id)
        )
        .unwrap();
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// A router restored from a snapshot taken after `split` operations answers the rest of the
    /// stream as the original does, and ends in the same state.
    #[test]
    fn a_restored_router_continues_as_the_original(
        ops in prop::collection::vec(op(), 1..160),
        split in any::<prop::sample::Index>(),
    ) {
        let mut original = router();
        let split = split.index(ops.len() + 1);
        for op in &ops[..split] {
            apply(&mut original, op);
        }
        let bytes = snapshot(&original);
        let mut copy = restore(&bytes).unwrap();
        prop_assert_eq!(observe(&copy), observe(&original));
        for op in &ops[split..] {
            prop_assert_eq!(apply(&mut copy, op), apply(&mut original, op), "{:?}", op);
        }
        prop_assert_eq!(observe(&copy), observe(&original));
        // A snapshot of the copy reads back as well (its tables may list keys in another order).
        let again = restore(&snapshot(&copy)).unwrap();
        prop_assert_eq!(observe(&again), observe(&original));
    }

    /// Any cut or any single changed byte of a snapshot is an error naming a byte within it, or
    /// a router that still answers every call: never a panic.
    #[test]
    fn damaged_snapshots_are_errors_not_panics(
        ops in prop::collection::vec(op(), 1..80),
        at in any::<prop::sample::Index>(),
        xor in 1..=255u8,
    ) {
        let mut original = router();
        for op in &ops {
            apply(&mut original, op);
        }
        let bytes = snapshot(&original);
        let at = at.index(bytes.len());
        let err = restore(&bytes[..at]).unwrap_err();
        prop_assert_eq!(err.kind, SnapshotProblem::Truncated);
        prop_assert!(err.offset <= at);
        let mut damaged = bytes.clone();
        damaged[at] ^= xor;
        match restore(&damaged) {
            // The error may show later than the changed byte (a changed bit makes a later
            // worker's a duplicate), never past the end.
            Err(e) => prop_assert!(e.offset <= damaged.len(), "{} for byte {}", e, at),
            Ok(mut r) => {
                observe(&r);
                for op in &ops {
                    apply(&mut r, op);
                }
            }
        }
    }
}

fn small() -> TestRouter {
    let mut r = router();
    let w = WorkerKey::new(1, 0);
    r.ledger.add_worker(w).unwrap();
    r.ledger.book_at(5, w, 100, 2, 10.0).unwrap();
    r.index
        .apply(&KvEvent::Stored {
            worker: w,
            tier: Tier::Device,
            hashes: &[1, 2],
        })
        .unwrap();
    r
}

fn problem(bytes: &[u8]) -> (usize, SnapshotProblem) {
    let e = restore(bytes).unwrap_err();
    (e.offset, e.kind)
}

/// Offsets in `small()`'s snapshot: the index section (tag 4, version 2, words 2, counters
/// 24, a worker count 8 and one worker 16, the clock hand and its table's slot count 16, a
/// block count 8 and two blocks of 33: hash, mark, holders), then the ledger's.
const WORKER_BIT: usize = 4 + 2 + 2 + 24 + 8 + 12;
const HAND: usize = WORKER_BIT + 4;
const BLOCK_COUNT: usize = HAND + 16;
const FIRST_BLOCK: usize = BLOCK_COUNT + 8;
const BLOCK: usize = 8 + 1 + 24;
const LEDGER: usize = FIRST_BLOCK + 2 * BLOCK;

#[test]
fn each_problem_is_named_where_it_is() {
    let bytes = snapshot(&small());
    assert!(restore(&bytes).is_ok());
    let with = |at: usize, value: &[u8]| {
        let mut b = bytes.clone();
        b[at..at + value.len()].copy_from_slice(value);
        b
    };
    assert_eq!(
        problem(&with(0, b"LRXX")),
        (0, SnapshotProblem::WrongTag { expected: *b"LRIX" })
    );
    assert_eq!(problem(&with(4, &[9, 0])), (4, SnapshotProblem::Version(9)));
    assert_eq!(
        problem(&with(6, &[2, 0])),
        (
            6,
            SnapshotProblem::Words {
                snapshot: 2,
                index: 1
            }
        )
    );
    assert_eq!(
        problem(&with(WORKER_BIT, &64u32.to_le_bytes())),
        (WORKER_BIT, SnapshotProblem::BitOutOfRange(64))
    );
    assert_eq!(
        problem(&with(BLOCK_COUNT, &17u64.to_le_bytes())),
        (
            BLOCK_COUNT,
            SnapshotProblem::Capacity {
                what: "blocks",
                count: 17,
                capacity: 16
            }
        )
    );
    // The second block given the first one's hash.
    let first = bytes[FIRST_BLOCK..FIRST_BLOCK + 8].to_vec();
    assert_eq!(
        problem(&with(FIRST_BLOCK + BLOCK, &first)),
        (
            FIRST_BLOCK + BLOCK,
            SnapshotProblem::Duplicate {
                what: "block",
                key: u64::from_le_bytes(first.try_into().unwrap())
            }
        )
    );
    // A holder bit no worker has, and a block with no holder.
    assert_eq!(
        problem(&with(FIRST_BLOCK + 9, &2u64.to_le_bytes())),
        (FIRST_BLOCK + 9, SnapshotProblem::UnknownBit)
    );
    assert!(matches!(
        problem(&with(FIRST_BLOCK + 9, &0u64.to_le_bytes())),
        (FIRST_BLOCK, SnapshotProblem::EmptyBlock(_))
    ));
    assert_eq!(
        problem(&with(LEDGER, b"LRIX")),
        (LEDGER, SnapshotProblem::WrongTag { expected: *b"LRLG" })
    );
    // The fleet fit's first sum (after the tag, version, five counters and the count seen).
    let sum = LEDGER + 6 + 40 + 8;
    assert_eq!(
        problem(&with(sum, &f64::NAN.to_bits().to_le_bytes())),
        (sum, SnapshotProblem::NotFinite)
    );
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(
        problem(&longer),
        (bytes.len(), SnapshotProblem::TrailingBytes(1))
    );
    // Storage that does not fit is named before any byte is read.
    let mut reader = SnapshotReader::new(&bytes);
    let e = PrefixIndex::<_, _, 1>::from_snapshot(
        vec![BlockSlot::<1>::empty(); 30],
        vec![WorkerSlot::empty(); 128],
        &mut reader,
    )
    .unwrap_err();
    assert_eq!(
        e.kind,
        SnapshotProblem::Storage(StorageError::SlotCount { slots: 30 })
    );
    assert!(e.to_string().starts_with("snapshot byte 0: "), "{e}");
}

/// The index's clock: a mark other than 0 or 1, and the hand past its table's slots.
#[test]
fn the_clocks_problems_are_named_where_they_are() {
    let bytes = snapshot(&small());
    let with = |at: usize, value: &[u8]| {
        let mut b = bytes.clone();
        b[at..at + value.len()].copy_from_slice(value);
        b
    };
    assert_eq!(bytes[FIRST_BLOCK + 8], 1, "a stored block is marked");
    assert_eq!(
        problem(&with(FIRST_BLOCK + 8, &[2])),
        (FIRST_BLOCK + 8, SnapshotProblem::BadMark(2))
    );
    assert_eq!(
        bytes[HAND + 8..HAND + 16],
        (BLOCK_SLOTS as u64).to_le_bytes()
    );
    assert_eq!(
        problem(&with(HAND, &(BLOCK_SLOTS as u64).to_le_bytes())),
        (
            HAND,
            SnapshotProblem::Hand {
                hand: BLOCK_SLOTS as u64,
                slots: BLOCK_SLOTS as u64
            }
        )
    );
}

/// The ledger's request states and tombstones survive: a free relayed before its booking is
/// still remembered after a restore, so the late booking is refused there too.
#[test]
fn tombstones_survive_a_restore() {
    let mut r = small();
    r.ledger.apply(&LedgerEvent::Freed { id: 77 });
    let mut copy = restore(&snapshot(&r)).unwrap();
    let late = LedgerEvent::Booked {
        id: 77,
        worker: WorkerKey::new(1, 0),
        prefill_tokens: 10,
        blocks: 1,
    };
    copy.ledger.apply(&late);
    assert_eq!(copy.ledger.counters().late_events, 1);
    assert_eq!(
        copy.ledger
            .load(WorkerKey::new(1, 0))
            .unwrap()
            .active_requests,
        1
    );
    // The last request's state byte (before its time, work and decode, the tombstone count and
    // the one tombstone) set to a bit the ledger never uses.
    let mut b = snapshot(&r);
    let state = b.len() - 8 - 8 - 24 - 1;
    b[state] = 0x40;
    assert_eq!(problem(&b), (state, SnapshotProblem::BadState(0x40)));
    // A snapshot of more tombstones than the ring holds.
    let count = b.len() - 16;
    let mut b = snapshot(&r);
    b[count..count + 8].copy_from_slice(&7u64.to_le_bytes());
    assert_eq!(
        problem(&b),
        (
            count,
            SnapshotProblem::Capacity {
                what: "tombstones",
                count: 7,
                capacity: TOMBSTONES
            }
        )
    );
}
