//! Replicas over a real nats-server (started by each test on loopback, with its own store):
//! convergence, a replica killed and restarted, the server killed and restarted, and duplicated,
//! reordered and malformed deliveries.

mod common;

use std::time::Duration;

use common::{
    Driver, Scratch, bus, fingerprint, route_agree_and_free_all, router, run_then_kill_replica_2,
    server, settle, workload,
};
use libroute_core::{KvEvent, LedgerEvent, Tier, WorkerKey};
use libroute_nats::{Replica, wire};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_converge_to_identical_index_and_ledger_state() {
    let scratch = Scratch::new("converge");
    let server = server(&scratch);
    let bus = bus(&server, "converge").await;
    let trace = workload(600);
    let kv = bus.kv_publisher("fleet");
    let a = Replica::start(&bus, 0, router()).await.unwrap();
    let b = Replica::start(&bus, 1, router()).await.unwrap();
    let c = Replica::start(&bus, 2, router()).await.unwrap();
    let replicas = [&a, &b, &c];
    let mut driver = Driver::new();
    for i in 0..trace.requests.len() {
        driver.route(replicas[i % 3], &kv, &trace, i);
        // Requests finish 40 routes later, freed by the replica that routed them.
        if i >= 40 {
            driver.free(&replicas, (i - 40) as u64);
        }
    }
    settle(&bus, &replicas, &kv).await;
    // Mid-run (40 requests active): every replica holds the same bookings and the same index.
    let first = fingerprint(&a, &trace);
    assert_eq!(first.active, 40);
    let by_requests: Vec<u64> = first.loads.iter().map(|l| l.active_requests).collect();
    assert_eq!(by_requests, driver.active_per_worker());
    assert!(first.overlaps.iter().any(|o| o.iter().any(|&n| n > 0)));
    assert_eq!(fingerprint(&b, &trace), first);
    assert_eq!(fingerprint(&c, &trace), first);
    // Everything freed: every ledger back to zero, everywhere.
    let rest: Vec<u64> = driver.booked.keys().copied().collect();
    for id in rest {
        driver.free(&replicas, id);
    }
    settle(&bus, &replicas, &kv).await;
    for r in replicas {
        let f = fingerprint(r, &trace);
        assert_eq!(f.active, 0, "replica {}", r.id());
        assert!(
            f.loads
                .iter()
                .all(|l| *l == libroute_core::WorkerLoad::default())
        );
        assert_eq!(f.overlaps, first.overlaps);
        let stats = r.stats();
        assert_eq!(stats.malformed, 0);
        // Each replica applied the others' events and skipped its own.
        assert_eq!(stats.own_events_skipped, stats.published.events);
        assert_eq!(stats.published.acked_events, stats.published.events);
    }
    // No request booked twice: the bookings published are the requests routed, once each.
    let booked: u64 = replicas.iter().map(|r| r.stats().published.events).sum();
    assert_eq!(
        booked,
        3 * 600,
        "a booking, a prefill completion and a free per request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_run_catches_up_from_the_stream_and_agrees() {
    let scratch = Scratch::new("restart-replica");
    let server = server(&scratch);
    let bus = bus(&server, "restart").await;
    let trace = workload(500);
    let kv = bus.kv_publisher("fleet");
    let mut driver = Driver::new();
    let (a, b) = run_then_kill_replica_2(&bus, &kv, &trace, &mut driver).await;
    // It restarts with an empty router and rebuilds both from the streams.
    let c = Replica::start(&bus, 2, router()).await.unwrap();
    let stats = c.stats();
    assert!(stats.catch_up_events > 400, "{stats:?}");
    // It can free what it booked before it died: it learned it from the stream.
    route_agree_and_free_all(&bus, [&a, &b, &c], &kv, &trace, &mut driver, 400..500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_loses_nothing_acknowledged() {
    let scratch = Scratch::new("restart-server");
    let mut server = server(&scratch);
    let bus = bus(&server, "durable").await;
    let trace = workload(300);
    let kv = bus.kv_publisher("fleet");
    let a = Replica::start(&bus, 0, router()).await.unwrap();
    let b = Replica::start(&bus, 1, router()).await.unwrap();
    let mut driver = Driver::new();
    for i in 0..150 {
        driver.route([&a, &b][i % 2], &kv, &trace, i);
    }
    settle(&bus, &[&a, &b], &kv).await;
    let acked = fingerprint(&a, &trace);
    // The server dies (SIGKILL) and comes back on the same port over the same store.
    server.kill();
    // Routing goes on while it is down: the events wait in the replicas' outboxes.
    for i in 150..200 {
        driver.route([&a, &b][i % 2], &kv, &trace, i);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.restart().unwrap();
    for i in 200..300 {
        driver.route([&a, &b][i % 2], &kv, &trace, i);
    }
    settle(&bus, &[&a, &b], &kv).await;
    let f = fingerprint(&a, &trace);
    assert_eq!(fingerprint(&b, &trace), f);
    assert_eq!(f.active, 300);
    // A replica started now, from the restarted server's store alone, holds everything,
    // including what was acknowledged before the crash.
    let late = Replica::start(&bus, 9, router()).await.unwrap();
    assert_eq!(fingerprint(&late, &trace), f);
    assert_ne!(acked, f);
    let late_stats = late.stats();
    assert_eq!(late_stats.malformed, 0);
    assert_eq!(late_stats.ledger_events, 2 * 300, "{late_stats:?}");
}

/// Publishes `events` as one raw ledger batch from `replica`.
async fn publish_ledger(bus: &libroute_nats::Bus, replica: u32, events: &[LedgerEvent]) {
    let mut bytes = Vec::new();
    wire::start_ledger(&mut bytes, replica);
    for e in events {
        wire::push_ledger(&mut bytes, e);
    }
    publish_raw(bus, bus.ledger_subject(replica), bytes).await;
}

async fn publish_raw(bus: &libroute_nats::Bus, subject: String, bytes: Vec<u8>) {
    bus.jetstream()
        .publish(subject, bytes.into())
        .await
        .unwrap()
        .await
        .unwrap();
}

async fn publish_kv(bus: &libroute_nats::Bus, events: &[KvEvent<'_>]) {
    let mut bytes = Vec::new();
    wire::start_kv(&mut bytes);
    for e in events {
        wire::push_kv(&mut bytes, e);
    }
    publish_raw(bus, bus.kv_subject("raw"), bytes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_reordered_and_malformed_deliveries_change_nothing() {
    let scratch = Scratch::new("messy");
    let server = server(&scratch);
    let trace = workload(120);
    let w = |i: u64| WorkerKey::new(i % common::WORKERS as u64, 0);
    // The events of 120 requests from another replica (id 50): booked, half completed, a third
    // freed; and each request's blocks stored on its worker.
    let mut ledger = Vec::new();
    for i in 0..120u64 {
        ledger.push(LedgerEvent::Booked {
            id: i,
            worker: w(i),
            prefill_tokens: 100 + i,
            blocks: 3 + i % 5,
        });
        if i % 2 == 0 {
            ledger.push(LedgerEvent::PrefillComplete { id: i });
        }
        if i % 3 == 0 {
            ledger.push(LedgerEvent::Freed { id: i });
        }
    }
    let stores: Vec<KvEvent<'_>> = trace
        .requests
        .iter()
        .enumerate()
        .map(|(i, r)| KvEvent::Stored {
            worker: w(i as u64),
            tier: Tier::Device,
            hashes: &r.blocks,
        })
        .collect();

    // In order, once each.
    let clean = bus(&server, "clean").await;
    for chunk in ledger.chunks(16) {
        publish_ledger(&clean, 50, chunk).await;
    }
    for chunk in stores.chunks(8) {
        publish_kv(&clean, chunk).await;
    }
    let reference = Replica::start(&clean, 0, router()).await.unwrap();
    let expected = fingerprint(&reference, &trace);
    assert!(expected.active > 0);

    // Every ledger event twice, the whole in reverse and interleaved (frees and completions
    // before their bookings); every KV batch delivered twice (a publisher's retry without
    // deduplication), batches of different workers swapped; and a malformed message of each kind.
    let messy = bus(&server, "messy").await;
    let mut shuffled: Vec<LedgerEvent> = ledger.iter().rev().copied().collect();
    shuffled.extend(ledger.iter().step_by(2).copied());
    shuffled.extend(ledger.iter().skip(1).step_by(2).rev().copied());
    for chunk in shuffled.chunks(7) {
        publish_ledger(&messy, 50, chunk).await;
    }
    publish_raw(
        &messy,
        messy.ledger_subject(50),
        b"LRL1\x32\0\0\0\x09".to_vec(),
    )
    .await;
    let mut per_worker: Vec<Vec<KvEvent<'_>>> = vec![Vec::new(); common::WORKERS];
    for (i, e) in stores.iter().enumerate() {
        per_worker[i % common::WORKERS].push(*e);
    }
    // Worker order reversed: each worker's own events stay in order, as an engine sends them.
    for events in per_worker.iter().rev() {
        for chunk in events.chunks(4) {
            publish_kv(&messy, chunk).await;
            publish_kv(&messy, chunk).await;
        }
    }
    publish_raw(&messy, messy.kv_subject("raw"), b"LRK1\x01\x02".to_vec()).await;
    let replica = Replica::start(&messy, 0, router()).await.unwrap();
    assert_eq!(fingerprint(&replica, &trace), expected);
    let stats = replica.stats();
    assert_eq!(stats.malformed, 2, "{stats:?}");
    assert!(matches!(
        stats.last_malformed,
        Some((_, wire::WireError::Truncated { .. }))
    ));
    let counters = replica.router().ledger.counters();
    assert!(
        counters.duplicate_events > 0 && counters.late_events > 0,
        "{counters:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_starts_on_streams_whose_events_have_all_aged_out() {
    let scratch = Scratch::new("aged");
    let server = server(&scratch);
    let mut config = libroute_nats::BusConfig::new(server.url());
    config.prefix = "aged".to_owned();
    config.kv_max_age = Duration::from_secs(1);
    config.ledger_max_age = Duration::from_secs(1);
    let bus = libroute_nats::Bus::connect(config).await.unwrap();
    let kv = bus.kv_publisher("fleet");
    let trace = workload(20);
    let a = Replica::start(&bus, 0, router()).await.unwrap();
    let mut driver = Driver::new();
    for i in 0..20 {
        driver.route(&a, &kv, &trace, i);
    }
    settle(&bus, &[&a], &kv).await;
    // Both streams keep their last sequence number once every message has expired.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    for name in ["AGED_KV", "AGED_LEDGER"] {
        loop {
            let mut stream = bus.jetstream().get_stream(name).await.unwrap();
            let state = stream.info().await.unwrap().state.clone();
            if state.messages == 0 {
                assert!(state.last_sequence > 0);
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{name}: {state:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // A replica starting now has nothing to wait for.
    let late = tokio::time::timeout(Duration::from_secs(10), Replica::start(&bus, 1, router()))
        .await
        .expect("a replica on emptied streams starts at once")
        .unwrap();
    assert_eq!(late.stats().catch_up_events, 0);
    assert_eq!(
        bus.last_sequences().await.unwrap(),
        libroute_nats::Positions::default()
    );
}
