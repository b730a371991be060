//! `cargo run --release --example replicas`: router replicas in sync over NATS JetStream, on a
//! real request trace, against one router routing it alone.
//!
//! Starts a local `nats-server -js` (loopback, a scratch store; or uses `--url`), then replays
//! the trace through the simulated fleet of `cargo replay` three ways: one in-process router (no
//! bus), one replica over the bus (KV events arrive through the stream), and `--replicas N`
//! replicas behind a round-robin balancer (each books on its own ledger and learns the others'
//! bookings from the stream). Simulated time runs `--speed` times faster than the wall clock, so
//! every millisecond the bus takes counts `--speed` milliseconds of the fleet's time: the
//! replicas route on state that is that much older than the in-process router's.
//!
//! Afterwards it checks that no request was booked twice or lost (every replica's ledger back to
//! zero, every booking, completion and free applied by every other replica exactly once) and
//! that the replicas agree, and it times a new replica's catch-up from the streams.
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line example"
)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use libroute_benches::sim::{self, Fleet, Placement, Report, Synthetic, Trace};
use libroute_core::catalog::CatalogPolicy;
use libroute_core::{KvEvent, Overlaps, Request, Row, Selector, WorkerKey};
use libroute_nats::{Bus, BusConfig, KvPublisher, LocalServer, Replica, host_router};

const HELP: &str = "\
cargo run --release --example replicas -- [TRACE.jsonl] [options]

Replays a Mooncake-format trace (or, without one, cargo replay's synthetic workload) through
router replicas over NATS JetStream and through one router alone, and prints hit rate and balance.

  --replicas N     replicas behind the round-robin balancer (3)
  --speed X        simulated milliseconds per wall-clock millisecond (100)
  --requests N     replay only the first N requests of the trace
  --policy JSON    the routing policy ({\"type\": \"default\"})
  --block-tokens N tokens per block of the trace (512)
  --workers N      simulated workers (8)
  --recorded       keep arrivals that share a timestamp simultaneous (by default they are spread
                   evenly up to the next timestamp: the trace's clock resolution)
  --url URL        use this NATS server instead of starting nats-server";

struct Options {
    trace: Option<PathBuf>,
    replicas: u32,
    speed: f64,
    requests: Option<usize>,
    policy: String,
    block_tokens: u32,
    fleet: Fleet,
    url: Option<String>,
    recorded: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        trace: None,
        replicas: 3,
        speed: 100.0,
        requests: None,
        policy: r#"{"type": "default"}"#.to_owned(),
        block_tokens: 512,
        fleet: Fleet::default(),
        url: None,
        recorded: false,
    };
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let mut value = || {
            i += 1;
            args.get(i)
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a {
            "--replicas" => o.replicas = sim::number(a, &value()?)?,
            "--speed" => o.speed = sim::number(a, &value()?)?,
            "--requests" => o.requests = Some(sim::number(a, &value()?)?),
            "--policy" => o.policy = value()?,
            "--block-tokens" => o.block_tokens = sim::number(a, &value()?)?,
            "--workers" => o.fleet.workers = sim::number(a, &value()?)?,
            "--url" => o.url = Some(value()?),
            "--recorded" => o.recorded = true,
            "-h" | "--help" => return Err(HELP.to_owned()),
            _ if !a.starts_with('-') && o.trace.is_none() => o.trace = Some(PathBuf::from(a)),
            _ => return Err(format!("unknown argument {a:?}\n\n{HELP}")),
        }
        i += 1;
    }
    if o.replicas == 0 {
        return Err("--replicas must be at least 1".to_owned());
    }
    if !(o.speed.is_finite() && o.speed > 0.0) {
        return Err(format!("--speed {} must be a positive number", o.speed));
    }
    Ok(o)
}

/// Keeps simulated time from running ahead of the wall clock times `speed`.
struct Pace {
    start: Instant,
    speed: f64,
}

impl Pace {
    fn wait(&self, now_ms: f64) {
        let due = self.start + Duration::from_secs_f64(now_ms / 1000.0 / self.speed);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
    }
}

/// The fleet's routing through replicas over the bus, spread round robin.
struct OverBus<'a> {
    replicas: &'a [Replica<1>],
    kv: &'a KvPublisher,
    policy: &'a CatalogPolicy,
    selectors: Vec<Box<Selector<64>>>,
    /// Which replica routed each request: the one the balancer keeps its connection on, which
    /// reports its completion and its end.
    owner: Vec<usize>,
    next: usize,
    pace: Pace,
}

impl Placement for OverBus<'_> {
    fn route(
        &mut self,
        i: usize,
        request: &Request<'_>,
        hashes: &[u64],
        rows: &mut [Row],
        now_ms: f64,
    ) -> Result<usize, String> {
        self.pace.wait(now_ms);
        let r = self.next % self.replicas.len();
        self.next += 1;
        self.owner[i] = r;
        self.replicas[r]
            .route(
                self.policy,
                &mut self.selectors[r],
                request,
                hashes,
                rows,
                i as u64,
                now_ms,
            )
            .map(|s| s.row)
            .map_err(|e| format!("request {i} on replica {r}: {e}"))
    }

    fn prefill_complete(&mut self, i: usize, at_ms: f64) -> Result<(), String> {
        self.replicas[self.owner[i]]
            .prefill_complete(i as u64, at_ms)
            .map_err(|e| format!("request {i}: {e}"))
    }

    fn free(&mut self, i: usize) -> Result<(), String> {
        self.replicas[self.owner[i]]
            .free(i as u64)
            .map_err(|e| format!("request {i}: {e}"))
    }

    fn kv(&mut self, event: &KvEvent<'_>) {
        self.kv.publish(event);
    }
}

struct BusRun {
    report: Report,
    agree: bool,
    problems: Vec<String>,
    bus: Bus,
}

fn router(
    workers: usize,
    requests: usize,
    fleet: &Fleet,
) -> Result<libroute_nats::HostRouter<1>, String> {
    // Room for every block the workers can hold, twice over: the index never evicts what a
    // worker still holds.
    let blocks = usize::try_from(fleet.cache_blocks).map_err(|e| e.to_string())? * workers * 2;
    let mut r = host_router::<1>(blocks, workers, requests.max(1024)).map_err(|e| e.to_string())?;
    for w in 0..workers as u64 {
        r.ledger
            .add_worker(WorkerKey::new(w, 0))
            .map_err(|e| e.to_string())?;
    }
    Ok(r)
}

/// Replays the trace through `n` replicas on a fresh prefix of the server, then checks the books.
async fn over_bus(
    url: &str,
    prefix: &str,
    n: u32,
    trace: &Trace,
    fleet: &Fleet,
    policy: &CatalogPolicy,
    speed: f64,
) -> Result<BusRun, String> {
    let mut config = BusConfig::new(url);
    config.prefix = prefix.to_owned();
    let bus = Bus::connect(config).await.map_err(|e| e.to_string())?;
    let mut replicas = Vec::new();
    for id in 0..n {
        let r = router(fleet.workers, trace.requests.len(), fleet)?;
        replicas.push(
            Replica::start(&bus, id, r)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let kv = bus.kv_publisher("fleet");
    let name = if n == 1 {
        "one replica over the bus".to_owned()
    } else {
        format!("{n} replicas, round robin")
    };
    let report = {
        let mut placement = OverBus {
            replicas: &replicas,
            kv: &kv,
            policy,
            selectors: (0..n)
                .map(|id| Box::new(Selector::with_entropy(0x5eed + u64::from(id))))
                .collect(),
            owner: vec![0; trace.requests.len()],
            next: 0,
            pace: Pace {
                start: Instant::now(),
                speed,
            },
        };
        // The simulation sleeps to keep pace: off the runtime's threads.
        tokio::task::block_in_place(|| sim::replay_with(&name, trace, fleet, &mut placement))?
    };
    for r in &replicas {
        r.flush().await;
    }
    kv.flush().await;
    let end = bus.last_sequences().await.map_err(|e| e.to_string())?;
    for r in &replicas {
        r.wait_for(end).await;
    }
    // The books: every replica's ledger back to zero, every event of every other replica
    // applied once, none dropped or for an unknown worker.
    let mut problems = Vec::new();
    let published: u64 = replicas.iter().map(|r| r.stats().published.events).sum();
    for r in &replicas {
        let stats = r.stats();
        let counters = r.router().ledger.counters();
        if counters.active_requests != 0 {
            problems.push(format!(
                "replica {}: {} requests still booked",
                r.id(),
                counters.active_requests
            ));
        }
        if stats.ledger_events != published - stats.published.events {
            problems.push(format!(
                "replica {}: applied {} of the others' {} events",
                r.id(),
                stats.ledger_events,
                published - stats.published.events
            ));
        }
        if counters.duplicate_events + counters.dropped_events + counters.unknown_worker_events != 0
            || stats.malformed != 0
        {
            problems.push(format!("replica {}: {counters:?} {stats:?}", r.id()));
        }
    }
    let bookings = 3 * report.finished as u64;
    if published != bookings {
        problems.push(format!(
            "{published} ledger events published for {} requests served (3 each expected)",
            report.finished
        ));
    }
    let agree = replicas
        .iter()
        .all(|r| state(r, trace) == state(&replicas[0], trace));
    Ok(BusRun {
        report,
        agree,
        problems,
        bus,
    })
}

/// Every trace request's per-worker device overlap, and every worker's load.
fn state(replica: &Replica<1>, trace: &Trace) -> (Vec<u32>, Vec<libroute_core::WorkerLoad>) {
    let router = replica.router();
    let mut scratch = Overlaps::<1>::new();
    let mut overlaps = Vec::new();
    let workers: Vec<WorkerKey> = (0..router.ledger.counters().workers as u64)
        .map(|w| WorkerKey::new(w, 0))
        .collect();
    for r in &trace.requests {
        router.index.query(&r.blocks, &mut scratch);
        overlaps.extend(
            workers
                .iter()
                .map(|&w| router.index.overlap(&scratch, w).map_or(0, |o| o[0])),
        );
    }
    let loads = workers
        .iter()
        .map(|&w| router.ledger.load(w).unwrap_or_default())
        .collect();
    (overlaps, loads)
}

fn row(name: &str, r: &Report) -> String {
    format!(
        "{name:<28} {:>8.2}% {:>10.3} {:>10.1} {:>10.1} {:>9}",
        r.hit_rate * 100.0,
        r.imbalance,
        r.ttft_p50_ms,
        r.ttft_p90_ms,
        r.finished
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Boxed: the run holds routers, whose ledgers keep their latest load changes inline.
    match Box::pin(run(&args)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replicas: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    let mut trace = match &o.trace {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            sim::parse_mooncake(&text, o.block_tokens)?
        }
        None => Synthetic::default().generate(),
    };
    if let Some(n) = o.requests {
        trace.requests.truncate(n);
    }
    if !o.recorded {
        spread(&mut trace);
    }
    let policy = sim::policy(&o.policy)?;
    let scratch = std::env::temp_dir().join(format!("libroute-replicas-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    let server = match &o.url {
        Some(_) => None,
        None => Some(LocalServer::start(&scratch).map_err(|e| e.to_string())?),
    };
    let url = o
        .url
        .clone()
        .or_else(|| server.as_ref().map(LocalServer::url))
        .unwrap_or_default();
    let span_s = trace.requests.last().map_or(0.0, |r| r.arrival_ms) / 1000.0;
    let workload = o.trace.as_ref().map_or_else(
        || "the built-in synthetic workload".to_owned(),
        |p| p.display().to_string(),
    );
    println!(
        "{workload}: {} requests over {span_s:.0} s, {} workers, at {}x ({:.1} s per run); NATS at {url}",
        trace.requests.len(),
        o.fleet.workers,
        o.speed,
        span_s / o.speed
    );
    let alone = sim::replay("one router, in process", &trace, &o.fleet, &policy)?;
    // Distinct prefixes: each run has streams of its own on the one server.
    let tag = std::process::id();
    let one = over_bus(
        &url,
        &format!("one{tag}"),
        1,
        &trace,
        &o.fleet,
        &policy,
        o.speed,
    )
    .await?;
    let many = over_bus(
        &url,
        &format!("many{tag}"),
        o.replicas,
        &trace,
        &o.fleet,
        &policy,
        o.speed,
    )
    .await?;
    let problems = compare(&alone, &one, &many, o.replicas);
    // A replica restarting now rebuilds from the streams of the N-replica run.
    let r = router(o.fleet.workers, trace.requests.len(), &o.fleet)?;
    let late = Replica::start(&many.bus, 1000, r)
        .await
        .map_err(|e| e.to_string())?;
    let s = late.stats();
    let messages = late.positions();
    println!(
        "catch-up of a restarted replica: {} events ({} KV in {} messages, {} ledger in {} \
         messages) in {:.1} ms: {:.2} M events/s",
        s.catch_up_events,
        s.kv_events + s.kv_refused,
        messages.kv,
        s.ledger_events,
        messages.ledger,
        s.catch_up.as_secs_f64() * 1000.0,
        s.catch_up_events as f64 / s.catch_up.as_secs_f64() / 1e6
    );
    drop(late);
    drop(server);
    let _ = std::fs::remove_dir_all(&scratch);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

/// Prints the three runs side by side, and returns what is wrong with the books.
fn compare(alone: &Report, one: &BusRun, many: &BusRun, replicas: u32) -> Vec<String> {
    println!(
        "\n{:<28} {:>9} {:>10} {:>10} {:>10} {:>9}",
        "routing", "hit rate", "imbalance", "TTFT p50", "TTFT p90", "served"
    );
    println!("{}", row("one router, in process", alone));
    println!("{}", row(&one.report.policy, &one.report));
    println!("{}", row(&many.report.policy, &many.report));
    let gap = (many.report.hit_rate - alone.hit_rate) * 100.0;
    println!(
        "\n{} replicas against one router alone: hit rate {gap:+.2} percentage points (against one \
         replica over the bus: {:+.2})",
        replicas,
        (many.report.hit_rate - one.report.hit_rate) * 100.0
    );
    let mut problems = one.problems.clone();
    problems.extend(many.problems.iter().cloned());
    if !one.agree || !many.agree {
        problems.push("the replicas' index or ledger state differ after the run".to_owned());
    }
    if problems.is_empty() {
        println!(
            "books: every request booked once, completed and freed on every replica; the replicas' \
             index and ledger states are identical"
        );
    }
    problems
}

/// Spreads requests that share a timestamp evenly over the time until the next timestamp.
///
/// A trace records arrivals at its clock's resolution (the Mooncake traces' is 3 s): requests
/// with one timestamp arrived somewhere in that interval, not at once. Routed at once, they are
/// a burst no replica can know the others' share of, a worst case that the trace does not say
/// happened; spread evenly, each arrives where a uniform guess puts it. The last timestamp's
/// group is spread over the median interval between timestamps.
fn spread(trace: &mut Trace) {
    let mut stamps: Vec<f64> = trace.requests.iter().map(|r| r.arrival_ms).collect();
    stamps.dedup();
    let mut gaps: Vec<f64> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_by(f64::total_cmp);
    let median = gaps.get(gaps.len() / 2).copied().unwrap_or(0.0);
    let mut i = 0;
    while i < trace.requests.len() {
        let t = trace.requests[i].arrival_ms;
        let n = trace.requests[i..]
            .iter()
            .take_while(|r| r.arrival_ms == t)
            .count();
        let next = trace
            .requests
            .get(i + n)
            .map_or(t + median, |r| r.arrival_ms);
        for (j, r) in trace.requests[i..i + n].iter_mut().enumerate() {
            r.arrival_ms = t + (next - t) * j as f64 / n as f64;
        }
        i += n;
    }
}
