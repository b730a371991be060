//! The tests' harness: a real nats-server on loopback, replicas over it, a synthetic workload
//! driven through them round robin, and each replica's state as a comparable fingerprint.
#![allow(dead_code, reason = "each test file uses part of the harness")]
#![allow(
    unreachable_pub,
    reason = "a test harness module: pub is for its test files"
)]

use std::collections::HashMap;
use std::path::PathBuf;

use libroute_benches::sim::{Synthetic, Trace};
use libroute_core::catalog::CatalogPolicy;
use libroute_core::{KvEvent, Request, Row, Selector, Tier, WorkerKey, WorkerLoad};
use libroute_nats::{Bus, BusConfig, HostRouter, KvPublisher, LocalServer, Replica, host_router};

pub const WORKERS: usize = 8;

/// A scratch directory for a server's store, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("libroute-nats-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn server(scratch: &Scratch) -> LocalServer {
    LocalServer::start(&scratch.0).expect("nats-server (cargo xtask nats installs it)")
}

pub async fn bus(server: &LocalServer, prefix: &str) -> Bus {
    let mut config = BusConfig::new(server.url());
    config.prefix = prefix.to_owned();
    Bus::connect(config).await.unwrap()
}

pub fn router() -> HostRouter<1> {
    let mut r = host_router::<1>(1 << 15, WORKERS, 1 << 12).unwrap();
    for w in 0..WORKERS as u64 {
        r.ledger.add_worker(WorkerKey::new(w, 0)).unwrap();
    }
    r
}

pub fn workload(requests: usize) -> Trace {
    Synthetic {
        requests,
        ..Synthetic::default()
    }
    .generate()
}

/// What a replica holds, in a form two replicas can be compared by: every worker's load, and
/// every trace request's per-worker overlap in the index.
#[derive(Debug, PartialEq, Eq)]
pub struct Fingerprint {
    pub loads: Vec<WorkerLoad>,
    pub overlaps: Vec<Vec<u32>>,
    pub active: usize,
}

pub fn fingerprint(replica: &Replica<1>, trace: &Trace) -> Fingerprint {
    let router = replica.router();
    let keys: Vec<WorkerKey> = (0..WORKERS as u64).map(|w| WorkerKey::new(w, 0)).collect();
    let mut overlaps = Vec::new();
    let mut scratch = libroute_core::Overlaps::<1>::new();
    for r in &trace.requests {
        router.index.query(&r.blocks, &mut scratch);
        overlaps.push(
            keys.iter()
                .map(|&k| router.index.overlap(&scratch, k).map_or(0, |o| o[0]))
                .collect(),
        );
    }
    Fingerprint {
        loads: keys
            .iter()
            .map(|&k| router.ledger.load(k).unwrap())
            .collect(),
        overlaps,
        active: router.ledger.counters().active_requests,
    }
}

/// Drives a workload through replicas round robin, as a load balancer in front of them would:
/// each request is routed by one replica, its worker's KV events are published to the bus, and
/// requests complete and are freed by the replica that routed them, `lag` requests later.
pub struct Driver {
    pub policy: CatalogPolicy,
    pub selector: Box<Selector<64>>,
    /// Which replica (by id) booked each request still active, and where.
    pub booked: HashMap<u64, (u32, WorkerKey)>,
    pub routed: usize,
}

impl Driver {
    pub fn new() -> Self {
        let policy = libroute_benches::sim::policy(r#"{"type": "default"}"#).unwrap();
        Self {
            policy,
            selector: Box::new(Selector::with_entropy(7)),
            booked: HashMap::new(),
            routed: 0,
        }
    }

    /// Routes request `i` on `replica`, publishes the chosen worker's store of its blocks, and
    /// marks its prefill complete.
    pub fn route(&mut self, replica: &Replica<1>, kv: &KvPublisher, trace: &Trace, i: usize) {
        let r = &trace.requests[i];
        let mut rows: Vec<Row> = (0..WORKERS as u64)
            .map(|w| Row::new(WorkerKey::new(w, 0)))
            .collect();
        let request = Request::new(r.input_tokens.max(1), trace.block_tokens);
        let s = replica
            .route(
                &self.policy,
                &mut self.selector,
                &request,
                &r.blocks,
                &mut rows,
                i as u64,
                i as f64,
            )
            .unwrap();
        kv.publish(&KvEvent::Stored {
            worker: s.worker,
            tier: Tier::Device,
            hashes: &r.blocks,
        });
        replica.prefill_complete(i as u64, i as f64 + 0.5).unwrap();
        self.booked.insert(i as u64, (replica.id(), s.worker));
        self.routed += 1;
    }

    /// Frees request `id` on the replica that booked it.
    pub fn free(&mut self, replicas: &[&Replica<1>], id: u64) {
        let (owner, _) = self.booked.remove(&id).unwrap();
        let replica = replicas.iter().find(|r| r.id() == owner).unwrap();
        replica.free(id).unwrap();
    }

    /// The loads the requests still booked put on each worker, counted by requests.
    pub fn active_per_worker(&self) -> Vec<u64> {
        let mut n = vec![0u64; WORKERS];
        for (_, w) in self.booked.values() {
            n[usize::try_from(w.worker_id).unwrap()] += 1;
        }
        n
    }
}

/// Flushes every replica and publisher, then waits until every replica applied everything.
pub async fn settle(bus: &Bus, replicas: &[&Replica<1>], kv: &KvPublisher) {
    for r in replicas {
        r.flush().await;
    }
    kv.flush().await;
    let end = bus.last_sequences().await.unwrap();
    for r in replicas {
        tokio::time::timeout(std::time::Duration::from_secs(30), r.wait_for(end))
            .await
            .unwrap_or_else(|_| panic!("replica {} did not reach {end:?}: {r:?}", r.id()));
    }
}

/// The end of a restart test: `requests` more requests routed round robin over `replicas`
/// (`[a, b, restarted]`), then the replicas agree and hold the driver's bookings; every booking
/// is freed by the replica that made it (the restarted one learned its own earlier ones while
/// catching up), and then none is active anywhere.
pub async fn route_agree_and_free_all(
    bus: &Bus,
    replicas: [&Replica<1>; 3],
    kv: &KvPublisher,
    trace: &Trace,
    driver: &mut Driver,
    requests: std::ops::Range<usize>,
) {
    for i in requests {
        driver.route(replicas[i % 3], kv, trace, i);
    }
    settle(bus, &replicas, kv).await;
    let f = fingerprint(replicas[0], trace);
    assert_eq!(fingerprint(replicas[1], trace), f);
    assert_eq!(fingerprint(replicas[2], trace), f);
    assert_eq!(f.active, driver.booked.len());
    let rest: Vec<u64> = driver.booked.keys().copied().collect();
    for id in rest {
        driver.free(&replicas, id);
    }
    settle(bus, &replicas, kv).await;
    for r in replicas {
        assert_eq!(fingerprint(r, trace).active, 0, "replica {}", r.id());
    }
}

/// The start of a restart test: replicas 0, 1 and 2 route requests 0..200 round robin; replica 2
/// dies (its events so far acknowledged: a crash after the server's ack); replicas 0 and 1 route
/// 200..400, freeing the oldest of their own requests every other one. Returns replicas 0 and 1.
pub async fn run_then_kill_replica_2(
    bus: &Bus,
    kv: &KvPublisher,
    trace: &Trace,
    driver: &mut Driver,
) -> (Replica<1>, Replica<1>) {
    let a = Replica::start(bus, 0, router()).await.unwrap();
    let b = Replica::start(bus, 1, router()).await.unwrap();
    let c = Replica::start(bus, 2, router()).await.unwrap();
    for i in 0..200 {
        driver.route([&a, &b, &c][i % 3], kv, trace, i);
    }
    c.flush().await;
    drop(c);
    for i in 200..400 {
        driver.route([&a, &b][i % 2], kv, trace, i);
        if i % 2 == 0 {
            let id = *driver
                .booked
                .iter()
                .filter(|(_, (owner, _))| *owner != 2)
                .map(|(id, _)| id)
                .min()
                .unwrap();
            driver.free(&[&a, &b], id);
        }
    }
    (a, b)
}
