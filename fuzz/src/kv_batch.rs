//! Engines' KV-event payloads (vLLM/SGLang msgpack `KVEventBatch`) as arbitrary bytes: parsing
//! must return a batch or an error whose byte offset lies within the payload, a parsed batch
//! yields exactly its events, and applying a payload to an index either succeeds or fails having
//! changed nothing (the index's and the ingest's counters and every query stay as they were).

use libroute_core::*;

type Index = PrefixIndex<Vec<BlockSlot<1>>, Vec<WorkerSlot>, 1>;

/// Everything observable: counters, and the overlap of a few chains on both workers.
fn snapshot(index: &Index, ingest: &KvIngest<Vec<EngineSlot>>) -> Vec<u64> {
    let c = index.counters();
    let i = ingest.counters();
    let mut out = vec![
        c.blocks as u64,
        c.workers as u64,
        i.mapped as u64,
        i.batches,
    ];
    let mut overlaps = Overlaps::new();
    for first in 0..4u64 {
        let hashes: Vec<u64> = (0..4)
            .map(|b| {
                ingest
                    .router_hash(WorkerKey::new(1, 0), first * 4 + b)
                    .unwrap_or(b)
            })
            .collect();
        index.query(&hashes, &mut overlaps);
        for w in 0..2 {
            out.extend(
                index
                    .overlap(&overlaps, WorkerKey::new(w, 0))
                    .unwrap_or([9; 3])
                    .map(u64::from),
            );
        }
    }
    out
}

/// Runs one input.
pub fn run(data: &[u8]) {
    match KvBatch::parse(data) {
        Ok(batch) => assert_eq!(batch.events().count(), batch.len()),
        Err(e) => assert!(
            e.offset <= data.len(),
            "offset {} beyond {} bytes",
            e.offset,
            data.len()
        ),
    }
    let mut index = Index::new(
        vec![BlockSlot::<1>::empty(); 64],
        vec![WorkerSlot::empty(); 128],
    )
    .unwrap();
    let mut ingest = KvIngest::new(vec![EngineSlot::empty(); 32], 2).unwrap();
    // Some state to damage: worker 1 holds a chain of 16 engine blocks 0..16 (block size 2).
    let mut seed = vec![0x92, 0x01, 0x91, 0x96, 0xab];
    seed.extend_from_slice(b"BlockStored");
    seed.push(0xdc);
    seed.extend_from_slice(&16u16.to_be_bytes());
    seed.extend(0..16u8);
    seed.extend_from_slice(&[0xc0, 0xdc, 0, 32]);
    seed.extend(0..32u8);
    seed.extend_from_slice(&[2, 0xc0]);
    ingest
        .apply(&mut index, WorkerKey::new(1, 0), &seed)
        .expect("the seed payload is valid");
    let before = snapshot(&index, &ingest);
    match ingest.apply(&mut index, WorkerKey::new(0, 0), data) {
        Ok(summary) => {
            assert!(summary.events <= data.len());
            assert_eq!(ingest.counters().batches, 2);
        }
        Err(_) => assert_eq!(
            snapshot(&index, &ingest),
            before,
            "a refused payload changed something"
        ),
    }
}
