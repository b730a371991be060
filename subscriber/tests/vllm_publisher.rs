//! The subscriber against a real publisher process: `bindings/python/tests/kv_publisher.py`
//! (pyzmq and msgspec, vLLM's event classes and its PUB + ROUTER replay protocol), which never
//! sends every seventh batch on the live socket. The subscriber must hand out every batch once,
//! in order, the missed ones fetched from the replay socket; the index it feeds must equal one fed
//! the whole stream in order (asked of the replay socket at the end, in one piece).
//!
//! The publisher needs a Python with pyzmq and msgspec: `LIBROUTE_PYTHON`, else the virtual
//! environment `cargo xtask python` makes (`target/python-fresh`), else `python3`. Without one,
//! the test says so and passes; `cargo xtask python` runs it with that environment, so CI does.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use libroute_core::*;
use libroute_subscriber::Subscriber;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("LIBROUTE_PYTHON").map(PathBuf::from),
        Some(root().join("target/python-fresh/bin/python")),
        Some(PathBuf::from("python3")),
    ];
    candidates.into_iter().flatten().find(|python| {
        Command::new(python)
            .args(["-c", "import zmq, msgspec"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

type Index = PrefixIndex<Vec<BlockSlot<1>>, Vec<WorkerSlot>, 1>;

fn fresh() -> (Index, KvIngest<Vec<EngineSlot>>) {
    (
        PrefixIndex::new(
            vec![BlockSlot::<1>::empty(); 1 << 16],
            vec![WorkerSlot::empty(); 128],
        )
        .unwrap(),
        KvIngest::new(vec![EngineSlot::empty(); 1 << 16], 16).unwrap(),
    )
}

#[test]
#[allow(
    clippy::print_stderr,
    reason = "says why the test did not run, and what it saw"
)]
#[allow(clippy::too_many_lines, reason = "one stream, checked two ways")]
fn every_batch_once_in_order_with_gaps_filled_from_the_replay_socket() {
    let Some(python) = python() else {
        eprintln!("skipped: no Python with pyzmq and msgspec (set LIBROUTE_PYTHON)");
        return;
    };
    for (form, seed) in [("array", 3), ("map", 4)] {
        let batches = 400u64;
        let count = usize::try_from(batches).unwrap();
        // The publisher binds ports the system picks and reports them: a port found free here
        // could be taken by the time it binds.
        let mut child = Command::new(&python)
            .arg(root().join("bindings/python/tests/kv_publisher.py"))
            .args([
                form,
                &seed.to_string(),
                &batches.to_string(),
                "tcp://127.0.0.1:*",
                "tcp://127.0.0.1:*",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the publisher starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.next().unwrap().unwrap();
        let [word, pub_endpoint, replay_endpoint] = ready.split(' ').collect::<Vec<_>>()[..] else {
            panic!("the publisher said {ready:?}");
        };
        assert_eq!(word, "ready");
        let (pub_endpoint, replay_endpoint) = (pub_endpoint.to_owned(), replay_endpoint.to_owned());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });

        let mut sub = Subscriber::connect(&pub_endpoint, Some(&replay_endpoint), b"").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "go").unwrap();
        stdin.flush().unwrap();

        let worker = WorkerKey::new(9, 0);
        let (mut index, mut ingest) = fresh();
        let mut seen = Vec::new();
        let mut last = None;
        while last.is_none_or(|l| sub.last_seq().is_none_or(|s| s < l)) || seen.len() < count {
            if let Some(batch) = sub.next_batch(Duration::from_millis(300)).unwrap() {
                seen.push(batch.seq);
                let s = ingest.apply(&mut index, worker, &batch.payload).unwrap();
                assert_eq!(
                    (s.orphaned_blocks, s.unknown_removals),
                    (0, 0),
                    "batch {}",
                    batch.seq
                );
            } else {
                if let Ok(line) = rx.try_recv() {
                    last = line
                        .strip_prefix("done ")
                        .map(|n| n.parse::<u64>().unwrap());
                }
                if last.is_some() {
                    sub.catch_up().unwrap(); // the stream's tail may have been dropped
                }
            }
        }
        assert_eq!(
            seen,
            (0..batches).collect::<Vec<_>>(),
            "{form}: every batch once, in order"
        );
        let c = sub.counters();
        assert!(c.gaps >= 1 && c.replayed >= batches / 7, "{form}: {c:?}");
        assert_eq!((c.live + c.replayed, c.lost), (batches, 0), "{form}: {c:?}");
        eprintln!("{form}: {c:?}");

        // The whole stream again, from the replay socket in one piece, into a second index.
        let mut again = Subscriber::connect(&pub_endpoint, Some(&replay_endpoint), b"").unwrap();
        assert_eq!(again.catch_up().unwrap(), count);
        let (mut index2, mut ingest2) = fresh();
        let mut engine_hashes = Vec::new();
        while let Some(batch) = again.next_batch(Duration::from_millis(10)).unwrap() {
            for event in KvBatch::parse(&batch.payload).unwrap().events() {
                if let WireEvent::Stored(s) = event {
                    engine_hashes.extend(s.hashes());
                }
            }
            ingest2.apply(&mut index2, worker, &batch.payload).unwrap();
        }
        drop(stdin);
        child.wait().unwrap();

        assert_eq!(index.counters(), index2.counters(), "{form}");
        let (c1, c2) = (ingest.counters(), ingest2.counters());
        assert_eq!(c1, c2, "{form}");
        assert!(
            c1.stored_blocks > 500 && c1.removed_blocks > 100 && c1.mapped > 100,
            "{form}: {c1:?}"
        );
        let mut overlaps = (Overlaps::new(), Overlaps::new());
        for &h in &engine_hashes {
            let router = ingest.router_hash(worker, h);
            assert_eq!(router, ingest2.router_hash(worker, h), "{form}");
            if let Some(r) = router {
                index.query(&[r], &mut overlaps.0);
                index2.query(&[r], &mut overlaps.1);
                assert_eq!(
                    index.overlap(&overlaps.0, worker),
                    index2.overlap(&overlaps.1, worker)
                );
            }
        }
    }
}
