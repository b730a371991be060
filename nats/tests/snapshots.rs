//! Snapshots over a real nats-server: a replica that restarts loads the latest snapshot (taken
//! by another replica, automatically and on request) and replays only the events after it, then
//! agrees with the others; a damaged snapshot is reported and the streams replayed instead.

mod common;

use common::{
    Driver, Scratch, fingerprint, route_agree_and_free_all, router, run_then_kill_replica_2,
    server, settle, workload,
};
use libroute_nats::{Bus, BusConfig, LocalServer, Replica, SnapshotFailure};

async fn bus(server: &LocalServer, prefix: &str, every: Option<u64>) -> Bus {
    let mut config = BusConfig::new(server.url());
    config.prefix = prefix.to_owned();
    config.snapshot_every = every;
    Bus::connect(config).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_restarted_from_a_snapshot_replays_only_the_tail_and_agrees() {
    let scratch = Scratch::new("snapshot-restart");
    let server = server(&scratch);
    // Every replica stores a snapshot after each 400 events it applies from the streams.
    let bus = bus(&server, "snap", Some(400)).await;
    let trace = workload(600);
    let kv = bus.kv_publisher("fleet");
    let mut driver = Driver::new();
    let (a, b) = run_then_kill_replica_2(&bus, &kv, &trace, &mut driver).await;
    settle(&bus, &[&a, &b], &kv).await;
    // The automatic snapshots are stored in the background: wait for them.
    let automatic = || a.stats().snapshots_taken + b.stats().snapshots_taken;
    let waited = std::time::Instant::now();
    while automatic() == 0 && waited.elapsed() < std::time::Duration::from_secs(20) {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(automatic() > 0, "{:?} {:?}", a.stats(), b.stats());
    // One more on request, then events after it: the restarted replica needs both.
    let at = b.snapshot().await.unwrap();
    assert_eq!(at, bus.last_sequences().await.unwrap());
    for i in 400..450 {
        driver.route([&a, &b][i % 2], &kv, &trace, i);
    }
    settle(&bus, &[&a, &b], &kv).await;
    let end = bus.last_sequences().await.unwrap();

    let c = Replica::start(&bus, 2, router()).await.unwrap();
    let stats = c.stats();
    let loaded = stats.snapshot_loaded.expect("a snapshot was loaded");
    assert!(
        (at.kv..=end.kv).contains(&loaded.kv) && (at.ledger..=end.ledger).contains(&loaded.ledger),
        "{loaded:?} {at:?} {end:?}"
    );
    assert_eq!(stats.snapshot_failures, 0, "{stats:?}");
    // Only the tail was replayed: far fewer events than the streams hold.
    let all = a.stats().kv_events + a.stats().ledger_events + a.stats().own_events_skipped;
    assert!(
        stats.catch_up_events < all / 2,
        "{} of {all}",
        stats.catch_up_events
    );
    // Replica 2 frees what it booked before it died: the snapshot told it.
    route_agree_and_free_all(&bus, [&a, &b, &c], &kv, &trace, &mut driver, 450..600).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_snapshot_is_reported_and_the_streams_replayed() {
    let scratch = Scratch::new("snapshot-damaged");
    let server = server(&scratch);
    let bus = bus(&server, "damaged", None).await;
    let trace = workload(100);
    let kv = bus.kv_publisher("fleet");
    let a = Replica::start(&bus, 0, router()).await.unwrap();
    let mut driver = Driver::new();
    for i in 0..100 {
        driver.route(&a, &kv, &trace, i);
    }
    settle(&bus, &[&a], &kv).await;
    a.snapshot().await.unwrap();
    let store = bus
        .jetstream()
        .get_object_store("DAMAGED_SNAPSHOTS")
        .await
        .unwrap();
    let mut good = Vec::new();
    {
        use tokio::io::AsyncReadExt;
        let mut object = store.get("latest").await.unwrap();
        object.read_to_end(&mut good).await.unwrap();
    }
    let expected = fingerprint(&a, &trace);

    // The ledger section ends with its tombstone count (0: one replica, no relayed frees): make
    // it claim 256 tombstones it does not hold.
    let mut damaged = good.clone();
    let count = damaged.len() - 8;
    assert_eq!(damaged[count..], [0; 8]);
    damaged[count + 1] = 1;
    store.put("latest", &mut damaged.as_slice()).await.unwrap();
    let b = Replica::start(&bus, 1, router()).await.unwrap();
    let stats = b.stats();
    assert_eq!(stats.snapshot_loaded, None);
    assert_eq!(stats.snapshot_failures, 1);
    assert!(
        matches!(stats.last_snapshot_failure, Some(SnapshotFailure::Router(e)) if e.kind == libroute_core::SnapshotProblem::Truncated),
        "{stats:?}"
    );
    assert_eq!(fingerprint(&b, &trace), expected);

    // Not a snapshot at all.
    store
        .put("latest", &mut b"not a snapshot".as_slice())
        .await
        .unwrap();
    let c = Replica::start(&bus, 2, router()).await.unwrap();
    assert_eq!(
        c.stats().last_snapshot_failure,
        Some(SnapshotFailure::Header)
    );
    assert_eq!(fingerprint(&c, &trace), expected);

    // The good one again: loaded.
    store.put("latest", &mut good.as_slice()).await.unwrap();
    let d = Replica::start(&bus, 3, router()).await.unwrap();
    assert!(d.stats().snapshot_loaded.is_some(), "{:?}", d.stats());
    assert_eq!(fingerprint(&d, &trace), expected);
}
