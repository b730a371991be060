//! Snapshots (`Router::write_snapshot`, `PrefixIndex::from_snapshot`, `Ledger::from_snapshot`)
//! from arbitrary bytes, two ways. Raw: the input itself is read as a snapshot; it is an error
//! naming a byte within it, or a router that answers queries, takes events and writes a snapshot
//! that reads back to the same state. Built: the input is a stream of index and ledger calls;
//! the router's snapshot reads back to a router that answers every later call as the original.

use arbitrary::{Arbitrary, Unstructured};
use libroute_core::{BlockSlot, KvEvent, Ledger, LedgerEvent, LoadSlot, Overlaps, PrefixIndex, RequestSlot, Router, SnapshotReader, Tier, WorkerKey, WorkerSlot};

type FuzzRouter = Router<Vec<BlockSlot<1>>, Vec<WorkerSlot>, Vec<RequestSlot>, Vec<LoadSlot>, Vec<u64>, 1>;

const WORKERS: u64 = 6;
const HASHES: u64 = 40;
const IDS: u64 = 32;

#[derive(Arbitrary, Debug)]
enum Op {
    AddWorker(u8),
    RemoveWorker(u8),
    Store(u8, u8, Vec<u8>),
    Remove(u8, u8, Vec<u8>),
    Clear(u8),
    Forget(u8),
    Book(u8, u8, u16, u8, Option<u16>),
    Complete(u8, Option<u16>),
    Free(u8),
    Relay(u8, u8, u8),
}

fn empty() -> FuzzRouter {
    let index = PrefixIndex::new(vec![BlockSlot::<1>::empty(); 32], vec![WorkerSlot::empty(); 128]).unwrap();
    let ledger = Ledger::new(vec![RequestSlot::empty(); 64], vec![LoadSlot::empty(); 16], vec![0u64; 8]).unwrap();
    Router::new(index, ledger, 0.75, 0.25)
}

fn write(router: &FuzzRouter) -> Vec<u8> {
    let mut bytes = Vec::new();
    router.write_snapshot(&mut |b: &[u8]| bytes.extend_from_slice(b));
    bytes
}

fn read(bytes: &[u8]) -> Result<FuzzRouter, libroute_core::SnapshotError> {
    let mut reader = SnapshotReader::new(bytes);
    let index = PrefixIndex::from_snapshot(vec![BlockSlot::<1>::empty(); 32], vec![WorkerSlot::empty(); 128], &mut reader)?;
    let ledger = Ledger::from_snapshot(vec![RequestSlot::empty(); 64], vec![LoadSlot::empty(); 16], vec![0u64; 8], &mut reader)?;
    reader.finish()?;
    Ok(Router::new(index, ledger, 0.75, 0.25))
}

/// Applies `op`, returning what the call answered.
fn apply(r: &mut FuzzRouter, op: &Op) -> String {
    let key = |w: &u8| WorkerKey::new(u64::from(*w) % WORKERS, 0);
    let hashes = |h: &[u8]| -> Vec<u64> { h.iter().take(8).map(|b| u64::from(*b) % HASHES).collect() };
    let tier = |t: &u8| Tier::ALL[usize::from(*t) % 3];
    match op {
        Op::AddWorker(w) => format!("{:?}", r.ledger.add_worker(key(w))),
        Op::RemoveWorker(w) => format!("{:?}", r.ledger.remove_worker(key(w))),
        Op::Store(w, t, h) => format!("{:?}", r.index.apply(&KvEvent::Stored { worker: key(w), tier: tier(t), hashes: &hashes(h) })),
        Op::Remove(w, t, h) => format!("{:?}", r.index.apply(&KvEvent::Removed { worker: key(w), tier: tier(t), hashes: &hashes(h) })),
        Op::Clear(w) => format!("{:?}", r.index.apply(&KvEvent::Cleared { worker: key(w) })),
        Op::Forget(w) => format!("{:?}", r.index.apply(&KvEvent::WorkerRemoved { worker: key(w) })),
        Op::Book(id, w, p, b, t) => {
            let id = u64::from(*id) % IDS;
            format!("{:?}", match t {
                Some(t) => r.ledger.book_at(id, key(w), u64::from(*p), u64::from(*b), f64::from(*t)),
                None => r.ledger.book(id, key(w), u64::from(*p), u64::from(*b)),
            })
        }
        Op::Complete(id, t) => {
            let id = u64::from(*id) % IDS;
            format!("{:?}", match t {
                Some(t) => r.ledger.prefill_complete_at(id, f64::from(*t) * 2.0),
                None => r.ledger.prefill_complete(id),
            })
        }
        Op::Free(id) => format!("{:?}", r.ledger.free(u64::from(*id) % IDS)),
        Op::Relay(id, w, kind) => {
            let id = u64::from(*id) % IDS;
            r.ledger.apply(&match kind % 3 {
                0 => LedgerEvent::Booked { id, worker: key(w), prefill_tokens: u64::from(*kind), blocks: 2 },
                1 => LedgerEvent::PrefillComplete { id },
                _ => LedgerEvent::Freed { id },
            });
            String::new()
        }
    }
}

/// Everything a caller can observe of a router's state.
fn observe(r: &FuzzRouter) -> String {
    let mut out = format!("{:?} {:?}\n", r.index.counters(), r.ledger.counters());
    let mut overlaps = Overlaps::<1>::new();
    for w in 0..WORKERS {
        let k = WorkerKey::new(w, 0);
        out += &format!("{w}: {:?} {:?}\n", r.ledger.load(k), r.ledger.speed(k));
    }
    for h in 0..HASHES {
        r.index.query(&[h], &mut overlaps);
        for w in 0..WORKERS {
            out += &format!("{:?} ", r.index.overlap(&overlaps, WorkerKey::new(w, 0)));
        }
    }
    for id in 0..IDS {
        out += &format!("{id}: {} {:?}\n", r.ledger.contains(id), r.ledger.booking(id));
    }
    out
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode % 2 == 0 {
        // Raw bytes as a snapshot.
        match read(rest) {
            Err(e) => assert!(e.offset <= rest.len(), "{e} in {} bytes", rest.len()),
            Ok(mut r) => {
                let again = read(&write(&r)).expect("a router's own snapshot reads back");
                assert_eq!(observe(&again), observe(&r));
                let Ok(ops) = Vec::<Op>::arbitrary(&mut Unstructured::new(rest)) else { return };
                for op in ops.iter().take(100) {
                    apply(&mut r, op);
                }
            }
        }
        return;
    }
    let Ok((ops, split)) = <(Vec<Op>, u8)>::arbitrary(&mut Unstructured::new(rest)) else { return };
    let ops = &ops[..ops.len().min(300)];
    let split = usize::from(split) * ops.len() / 255;
    let mut original = empty();
    for op in &ops[..split] {
        apply(&mut original, op);
    }
    let mut copy = read(&write(&original)).expect("a router's own snapshot reads back");
    assert_eq!(observe(&copy), observe(&original));
    for op in &ops[split..] {
        assert_eq!(apply(&mut copy, op), apply(&mut original, op), "{op:?}");
    }
    assert_eq!(observe(&copy), observe(&original));
}
