//! Self-calibration: the ledger learns each worker's first-token speed from timed bookings and
//! prefill completions, the router hands it to policies that read it, and records the blocks of
//! routed requests for policies that credit them.

use libroute_core::catalog::CatalogPolicy;
use libroute_core::catalog_config::PolicyConfig;
use libroute_core::*;

type TestLedger = Ledger<Vec<RequestSlot>, Vec<LoadSlot>, Vec<u64>>;
type TestRouter =
    Router<Vec<BlockSlot<1>>, Vec<WorkerSlot>, Vec<RequestSlot>, Vec<LoadSlot>, Vec<u64>, 1>;
type TestPredictions = Predictions<Vec<PredictionSlot>, Vec<PredictionRecord>>;

fn ledger() -> TestLedger {
    Ledger::new(
        vec![RequestSlot::empty(); 1024],
        vec![LoadSlot::empty(); 16],
        vec![0u64; 16],
    )
    .unwrap()
}

fn router(workers: &[WorkerKey]) -> TestRouter {
    let index = PrefixIndex::new(
        vec![BlockSlot::<1>::empty(); 1024],
        vec![WorkerSlot::empty(); 128],
    )
    .unwrap();
    let mut r = Router::new(index, ledger(), 0.75, 0.25);
    for &w in workers {
        r.ledger.add_worker(w).unwrap();
    }
    r
}

fn predictions(ttl_ms: u64) -> TestPredictions {
    Predictions::new(
        vec![PredictionSlot::empty(); 1024],
        vec![PredictionRecord::default(); 512],
        ttl_ms,
    )
    .unwrap()
}

fn policy(json: &str) -> CatalogPolicy {
    serde_json::from_str::<PolicyConfig>(json)
        .unwrap()
        .build()
        .unwrap()
}

const A: WorkerKey = WorkerKey::new(1, 0);
const B: WorkerKey = WorkerKey::new(2, 0);

#[test]
fn times_must_be_finite_and_non_negative_and_a_bad_one_changes_nothing() {
    let mut l = ledger();
    l.add_worker(A).unwrap();
    for bad in [f64::NAN, f64::INFINITY, -1.0] {
        assert_eq!(l.book_at(1, A, 10, 1, bad), Err(LedgerError::InvalidTime));
    }
    assert!(!l.contains(1));
    l.book_at(1, A, 10, 1, 0.0).unwrap();
    assert_eq!(
        l.prefill_complete_at(1, f64::NAN),
        Err(LedgerError::InvalidTime)
    );
    assert_eq!(l.load(A).unwrap().active_prefill_tokens, 10);
    l.prefill_complete_at(1, 5.0).unwrap();
    assert_eq!(
        l.prefill_complete_at(1, 6.0),
        Err(LedgerError::PrefillAlreadyComplete(1))
    );
}

#[test]
fn nothing_is_learned_from_untimed_bookings_and_too_few_observations() {
    let mut l = ledger();
    l.add_worker(A).unwrap();
    for id in 0..20u64 {
        l.book(id, A, 100, 1).unwrap();
        l.prefill_complete_at(id, 1000.0).unwrap();
        l.free(id).unwrap();
    }
    assert_eq!(l.speed(A), None, "untimed bookings teach nothing");
    for id in 20..27u64 {
        l.book_at(id, A, 100, 1, 0.0).unwrap();
        l.prefill_complete_at(id, 50.0).unwrap();
        l.free(id).unwrap();
    }
    assert_eq!(l.speed(A), None, "seven observations are not enough");
    l.book_at(27, A, 100, 1, 0.0).unwrap();
    l.prefill_complete_at(27, 50.0).unwrap();
    assert!(l.speed(A).is_some());
    assert_eq!(l.speed(WorkerKey::new(9, 0)), None, "unknown worker");
}

/// Two workers, one three times slower than the other: the ledger's speeds say so, and the
/// `ttft` policy sends an idle-fleet request to the fast one although both are idle.
#[test]
fn a_slow_worker_is_recognized_and_avoided() {
    let mut r = router(&[A, B]);
    let mut now = 0.0;
    for id in 0..400u64 {
        let (w, factor) = if id % 2 == 0 { (A, 1.0) } else { (B, 3.0) };
        let tokens = 200 + (id * 37) % 1800;
        r.ledger.book_at(id, w, tokens, 4, now).unwrap();
        // The worker's time: 20 ms plus 0.05 ms per prefill token, times its slowness.
        r.ledger
            .prefill_complete_at(id, now + factor * (20.0 + 0.05 * tokens as f64))
            .unwrap();
        r.ledger.free(id).unwrap();
        now += 1000.0;
    }
    let (fast, slow) = (r.ledger.speed(A).unwrap(), r.ledger.speed(B).unwrap());
    let ratio = slow.ms_per_prefill_token / fast.ms_per_prefill_token;
    assert!((2.4..3.6).contains(&ratio), "{fast:?} {slow:?}");
    let p = policy(r#"{"type": "ttft"}"#);
    let mut rows = [Row::new(A), Row::new(B)];
    let s = r
        .route_at::<_, _, _, Vec<PredictionSlot>, Vec<PredictionRecord>, 8>(
            None,
            &p,
            &mut Selector::<8>::new(),
            &Request::new(1000, 16),
            &[11, 12],
            &mut rows,
            1000,
            now,
        )
        .unwrap();
    assert_eq!(s.worker, A);
    assert_eq!(
        rows[1].speed(),
        Some(slow),
        "the rows carry the learned speeds"
    );
}

/// The router fills SPEED only for policies that read it, so Dynamo's default keeps its fused
/// pass; a bad time books nothing.
#[test]
fn route_at_fills_speed_only_when_read_and_rejects_bad_times() {
    let mut r = router(&[A, B]);
    for id in 0..10u64 {
        r.ledger.book_at(id, A, 100, 1, 0.0).unwrap();
        r.ledger.prefill_complete_at(id, 10.0).unwrap();
        r.ledger.free(id).unwrap();
    }
    let none: Option<&mut TestPredictions> = None;
    let mut rows = [Row::new(A), Row::new(B)];
    let default = DefaultKnobs::default().build().unwrap();
    r.route_at(
        none,
        &default,
        &mut Selector::<8>::new(),
        &Request::new(64, 16),
        &[1],
        &mut rows,
        100,
        5.0,
    )
    .unwrap();
    assert!(rows.iter().all(|row| row.speed().is_none()));
    let none: Option<&mut TestPredictions> = None;
    let err = r
        .route_at(
            none,
            &default,
            &mut Selector::<8>::new(),
            &Request::new(64, 16),
            &[1],
            &mut rows,
            101,
            f64::NAN,
        )
        .unwrap_err();
    assert_eq!(err, RouteError::Ledger(LedgerError::InvalidTime));
    assert!(!r.ledger.contains(101));
}

/// Beside KV events, a prediction store credits the blocks of requests routed and not yet
/// computed: the second request of a burst sharing a new prefix follows the first. Both workers
/// already have 256 prefill tokens queued, so no worker is idle and the requests queued behind
/// weigh in (with an idle worker, waiting for the first's prefill and computing the prefix
/// there take the same time, and the estimate ties).
#[test]
fn routed_blocks_are_credited_before_their_kv_events() {
    let p = policy(r#"{"type": "ttft"}"#);
    let prefix: Vec<u64> = (100..164).collect(); // 64 blocks of 16 tokens: 1,024 tokens
    let request = Request::new(1024, 16);
    let route = |pending: Option<&mut TestPredictions>, r: &mut TestRouter, id: u64| {
        let mut rows = [Row::new(A), Row::new(B)];
        r.route_at(
            pending,
            &p,
            &mut Selector::<8>::with_entropy(id),
            &request,
            &prefix,
            &mut rows,
            id,
            0.0,
        )
        .unwrap()
        .worker
    };
    let busy = || {
        let mut r = router(&[A, B]);
        r.ledger.book(1001, A, 256, 16).unwrap();
        r.ledger.book(1002, B, 256, 16).unwrap();
        r
    };
    // Without the store, the second request sees the first's queue and no prefix anywhere: it
    // goes to the other worker.
    let mut r = busy();
    let first = route(None, &mut r, 1);
    let second = route(None, &mut r, 2);
    assert_ne!(first, second);
    // With it, the first request's blocks count as cached on its worker.
    let mut r = busy();
    let mut store = predictions(10_000);
    let first = route(Some(&mut store), &mut r, 1);
    let second = route(Some(&mut store), &mut r, 2);
    assert_eq!(first, second);
}
