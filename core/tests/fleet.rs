//! A fleet the router keeps between routes (`Router::route_fleet`), and the host's rows with
//! places kept beside them (`Router::route_placed`), against the same routes over rows the host
//! builds each time (`Router::route`): three routers fed the same events make the same
//! selections and write the same rows, on random streams that add and remove workers (so
//! the ledger's small table shifts entries and the fleet's remembered places go stale), store,
//! remove and clear blocks, mark workers overloaded, and route with policies that read CACHE,
//! SPEED, or neither.

use libroute_core::catalog::CatalogPolicy;
use libroute_core::catalog_config::PolicyConfig;
use libroute_core::*;
use proptest::prelude::*;

type TestRouter =
    Router<Vec<BlockSlot<1>>, Vec<WorkerSlot>, Vec<RequestSlot>, Vec<LoadSlot>, Vec<u64>, 1>;
type TestFleet = Fleet<Vec<Row>, Vec<FleetPlace>>;
type NoPredictions = Predictions<Vec<PredictionSlot>, Vec<PredictionRecord>>;

fn router() -> TestRouter {
    let index = PrefixIndex::new(
        vec![BlockSlot::<1>::empty(); 64],
        vec![WorkerSlot::empty(); 128],
    )
    .unwrap();
    // Sixteen slots for up to eight workers: removals shift entries back often.
    let ledger = Ledger::new(
        vec![RequestSlot::empty(); 256],
        vec![LoadSlot::empty(); 16],
        vec![0u64; 16],
    )
    .unwrap();
    Router::new(index, ledger, 0.75, 0.25)
}

fn catalog(json: &str) -> CatalogPolicy {
    serde_json::from_str::<PolicyConfig>(json)
        .unwrap()
        .build()
        .unwrap()
}

#[derive(Debug, Clone)]
enum Op {
    AddWorker(u64, bool),
    RemoveWorker(u64),
    Store(u64, usize, Vec<u64>),
    Remove(u64, usize, Vec<u64>),
    Clear(u64),
    Overload(u64, bool),
    /// A prompt, the policy (0 default, 1 `ttft`, 2 `round_robin`), and whether it is timed.
    Route(Vec<u64>, usize, bool),
    Complete(usize),
    Free(usize),
    /// Bookings (`true`) and frees relayed by another replica, on these workers: sometimes more
    /// load changes between two routes than a ledger remembers by worker.
    Relay(Vec<(u64, bool)>),
}

fn worker() -> impl Strategy<Value = u64> {
    // Ids that share low bits, so several hash near each other in small tables.
    (0u64..10).prop_map(|w| w * 16)
}

fn op() -> impl Strategy<Value = Op> {
    let hashes = prop::collection::vec(0u64..12, 1..6);
    prop_oneof![
        3 => (worker(), any::<bool>()).prop_map(|(w, t)| Op::AddWorker(w, t)),
        1 => worker().prop_map(Op::RemoveWorker),
        4 => (worker(), 0usize..3, hashes.clone()).prop_map(|(w, t, h)| Op::Store(w, t, h)),
        1 => (worker(), 0usize..3, hashes.clone()).prop_map(|(w, t, h)| Op::Remove(w, t, h)),
        1 => worker().prop_map(Op::Clear),
        1 => (worker(), any::<bool>()).prop_map(|(w, o)| Op::Overload(w, o)),
        6 => (hashes, 0usize..3, any::<bool>()).prop_map(|(h, p, t)| Op::Route(h, p, t)),
        2 => (0usize..64).prop_map(Op::Complete),
        2 => (0usize..64).prop_map(Op::Free),
        1 => prop::collection::vec((worker(), any::<bool>()), 1..90).prop_map(Op::Relay),
    ]
}

const TIERS: [Tier; 3] = [Tier::Device, Tier::Host, Tier::Disk];

/// Routes once on both routers and checks they agree; returns the id booked, if any.
#[allow(clippy::too_many_arguments, reason = "both routers and their state")]
fn route_both<F: Filters, S: Scorers, P: Picker>(
    policy: &Policy<F, S, P>,
    kept: (&mut TestRouter, &mut TestFleet, &mut Selector<16>),
    given: (&mut TestRouter, &mut Selector<16>),
    with_places: (&mut TestRouter, &mut [Place], &mut Selector<16>),
    hashes: &[u64],
    id: u64,
    now_ms: Option<f64>,
) -> Result<(), TestCaseError> {
    let (a, fleet, sel_a) = kept;
    let (b, sel_b) = given;
    let (c, places, sel_c) = with_places;
    // The host's rows: what the fleet knows of each worker besides its inputs.
    let mut rows: Vec<Row> = fleet
        .rows()
        .iter()
        .map(|r| {
            Row::new(r.worker)
                .with_taints(r.taints)
                .overloaded(r.is_overloaded())
        })
        .collect();
    let mut rows_c = rows.clone();
    let request = Request::new(16 * hashes.len() as u64 + 5, 16);
    let none_a: Option<&mut NoPredictions> = None;
    let none_b: Option<&mut NoPredictions> = None;
    let none_c: Option<&mut NoPredictions> = None;
    let (kept_pick, given_pick, placed_pick) = match now_ms {
        Some(now) => (
            a.route_fleet_at(none_a, fleet, policy, sel_a, &request, hashes, id, now),
            b.route_at(none_b, policy, sel_b, &request, hashes, &mut rows, id, now),
            c.route_placed_at(
                none_c,
                policy,
                sel_c,
                &request,
                hashes,
                &mut rows_c,
                places,
                id,
                now,
            ),
        ),
        None => (
            a.route_fleet(fleet, policy, sel_a, &request, hashes, id),
            b.route(policy, sel_b, &request, hashes, &mut rows, id),
            c.route_placed(policy, sel_c, &request, hashes, &mut rows_c, places, id),
        ),
    };
    prop_assert_eq!(kept_pick, given_pick);
    prop_assert_eq!(given_pick, placed_pick);
    prop_assert_eq!(fleet.rows(), &rows[..]);
    prop_assert_eq!(&rows_c, &rows);
    // Each row's CACHE inputs, against the index's overlaps through `Cache::from_tiers` (the
    // three routes share their ways of writing them).
    let reads_cache = policy.inputs(request.leg()).contains(WorkerInputs::CACHE);
    let mut overlaps = Overlaps::<1>::new();
    b.index.query(hashes, &mut overlaps);
    for row in &rows {
        let expected = b.index.overlap(&overlaps, row.worker);
        if let Some([device, host, disk]) = expected.filter(|_| reads_cache) {
            prop_assert!(row.flags.contains(RowFlags::HAS_CACHE));
            let cache = Cache::from_tiers(device, host, disk, 0.75, 0.25, 16);
            prop_assert_eq!(row.cache(), cache);
        } else {
            // No cache entry: zeros without the flag.
            prop_assert!(!row.flags.contains(RowFlags::HAS_CACHE));
            let counts = (row.device_blocks, row.host_blocks, row.disk_blocks);
            prop_assert_eq!(counts, (0, 0, 0));
            prop_assert_eq!(row.effective_tokens, 0);
            prop_assert_eq!(row.effective_blocks.to_bits(), 0);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn a_kept_fleet_routes_as_rows_built_each_time(ops in prop::collection::vec(op(), 1..200)) {
        let (mut a, mut b, mut c) = (router(), router(), router());
        // The third routes over rows built each time with places kept beside them (fewer
        // places than rows at times: the rows beyond them are looked up by hashing).
        let mut places = [Place::empty(); 6];
        let mut fleet = Fleet::new(vec![Row::default(); 8], vec![FleetPlace::empty(); 8]).unwrap();
        let (mut sel_a, mut sel_b, mut sel_c) = (Selector::<16>::new(), Selector::<16>::new(), Selector::<16>::new());
        let default = DefaultKnobs::default().build().unwrap();
        let ttft = catalog(r#"{"type": "ttft"}"#);
        let round_robin = catalog(r#"{"type": "round_robin"}"#);
        let mut booked: Vec<u64> = Vec::new();
        let (mut next_id, mut now) = (0u64, 0.0f64);
        let (mut relayed, mut relayed_open) = (0u64, Vec::new());
        for op in ops {
            match op {
                Op::AddWorker(w, tainted) => {
                    let key = WorkerKey::new(w, 0);
                    let taints = if tainted { TaintSet(1) } else { TaintSet::EMPTY };
                    // The fleet and the ledgers refuse the same workers once full or present.
                    let f = fleet.add(key, taints).is_ok();
                    let l = a.ledger.add_worker(key).is_ok();
                    prop_assert_eq!(l, b.ledger.add_worker(key).is_ok());
                    prop_assert_eq!(l, c.ledger.add_worker(key).is_ok());
                    prop_assert!(f || !l || fleet.len() == fleet.capacity() || fleet.get(key).is_some());
                }
                Op::RemoveWorker(w) => {
                    let key = WorkerKey::new(w, 0);
                    let _ = fleet.remove(key);
                    for r in [&mut a, &mut b, &mut c] {
                        r.ledger.remove_worker(key);
                        r.index.apply(&KvEvent::WorkerRemoved { worker: key }).unwrap();
                    }
                }
                Op::Store(w, t, h) => {
                    let e = KvEvent::Stored { worker: WorkerKey::new(w, 0), tier: TIERS[t], hashes: &h };
                    let applied = a.index.apply(&e);
                    prop_assert_eq!(applied, b.index.apply(&e));
                    prop_assert_eq!(applied, c.index.apply(&e));
                }
                Op::Remove(w, t, h) => {
                    let e = KvEvent::Removed { worker: WorkerKey::new(w, 0), tier: TIERS[t], hashes: &h };
                    let applied = a.index.apply(&e);
                    prop_assert_eq!(applied, b.index.apply(&e));
                    prop_assert_eq!(applied, c.index.apply(&e));
                }
                Op::Clear(w) => {
                    let e = KvEvent::Cleared { worker: WorkerKey::new(w, 0) };
                    let applied = a.index.apply(&e);
                    prop_assert_eq!(applied, b.index.apply(&e));
                    prop_assert_eq!(applied, c.index.apply(&e));
                }
                Op::Overload(w, o) => {
                    let _ = fleet.set_overloaded(WorkerKey::new(w, 0), o);
                }
                Op::Route(h, p, timed) => {
                    next_id += 1;
                    now += 7.5;
                    let at = timed.then_some(now);
                    let kept = (&mut a, &mut fleet, &mut sel_a);
                    let given = (&mut b, &mut sel_b);
                    let placed = (&mut c, &mut places[..], &mut sel_c);
                    match p {
                        0 => route_both(&default, kept, given, placed, &h, next_id, at)?,
                        1 => route_both(&ttft, kept, given, placed, &h, next_id, at)?,
                        _ => route_both(&round_robin, kept, given, placed, &h, next_id, at)?,
                    }
                    if a.ledger.contains(next_id) {
                        booked.push(next_id);
                    }
                }
                Op::Complete(k) if !booked.is_empty() => {
                    let id = booked[k % booked.len()];
                    now += 3.0;
                    let done = a.ledger.prefill_complete_at(id, now);
                    prop_assert_eq!(done, b.ledger.prefill_complete_at(id, now));
                    prop_assert_eq!(done, c.ledger.prefill_complete_at(id, now));
                }
                Op::Free(k) if !booked.is_empty() => {
                    let id = booked.swap_remove(k % booked.len());
                    let freed = a.ledger.free(id);
                    prop_assert_eq!(freed, b.ledger.free(id));
                    prop_assert_eq!(freed, c.ledger.free(id));
                }
                Op::Complete(_) | Op::Free(_) => {}
                Op::Relay(events) => {
                    for (w, book) in events {
                        relayed += 1;
                        // Ids of their own, far above the routes'; a free frees the latest.
                        let event = if book || relayed_open.is_empty() {
                            relayed_open.push(1 << 40 | relayed);
                            LedgerEvent::Booked { id: 1 << 40 | relayed, worker: WorkerKey::new(w, 0), prefill_tokens: 100 + relayed, blocks: 1 + relayed % 5 }
                        } else {
                            LedgerEvent::Freed { id: relayed_open.pop().unwrap() }
                        };
                        for r in [&mut a, &mut b, &mut c] {
                            r.ledger.apply(&event);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn storage_of_different_lengths_is_refused() {
    assert_eq!(
        Fleet::new(vec![Row::default(); 4], vec![FleetPlace::empty(); 3]).unwrap_err(),
        FleetError::StorageMismatch { rows: 4, places: 3 }
    );
}

#[test]
fn a_full_fleet_and_unknown_workers_are_errors_that_change_nothing() {
    let mut fleet = Fleet::new([Row::default(); 2], [FleetPlace::empty(); 2]).unwrap();
    let (a, b, c) = (
        WorkerKey::new(3, 0),
        WorkerKey::new(1, 0),
        WorkerKey::new(2, 0),
    );
    fleet.add(a, TaintSet::EMPTY).unwrap();
    fleet.add(b, TaintSet(4)).unwrap();
    assert_eq!(
        fleet.add(c, TaintSet::EMPTY),
        Err(FleetError::Full { capacity: 2 })
    );
    assert_eq!(fleet.remove(c), Err(FleetError::UnknownWorker(c)));
    assert_eq!(
        fleet.set_overloaded(c, true),
        Err(FleetError::UnknownWorker(c))
    );
    assert_eq!(
        fleet.set_taints(c, TaintSet(1)),
        Err(FleetError::UnknownWorker(c))
    );
    let workers: Vec<WorkerKey> = fleet.rows().iter().map(|r| r.worker).collect();
    assert_eq!(workers, [b, a]);
    assert_eq!(fleet.get(b).unwrap().taints, TaintSet(4));
    fleet.set_taints(b, TaintSet(2)).unwrap();
    assert_eq!(fleet.get(b).unwrap().taints, TaintSet(2));
    assert!(
        FleetError::Full { capacity: 2 }
            .to_string()
            .contains("full")
    );
}

/// A seeded selection over a fleet's rows needs no sort: they are in canonical order.
#[test]
fn rows_stay_in_canonical_order() {
    let mut fleet = Fleet::new(vec![Row::default(); 64], vec![FleetPlace::empty(); 64]).unwrap();
    for w in [40u64, 3, 17, 3, 60, 1, 17, 22] {
        let _ = fleet.add(WorkerKey::new(w, 0), TaintSet::EMPTY);
        let _ = fleet.add(WorkerKey::new(w, 1), TaintSet::EMPTY);
    }
    fleet.remove(WorkerKey::new(17, 0)).unwrap();
    assert!(fleet.rows().windows(2).all(|p| p[0].worker < p[1].worker));
    assert_eq!(fleet.len(), 11);
}

/// Approximate mode with places beside the rows, and over a fleet, routes as without them: the
/// same picks, the same predictions recorded (they steer the later picks).
#[test]
fn predicting_with_places_or_a_fleet_routes_as_without() {
    // `c` routes over a fleet, `d` over rows the host builds in the fleet's (canonical) order:
    // ties are broken by row position, so a fleet is compared with rows in its own order.
    let (mut a, mut b, mut c, mut d) = (router(), router(), router(), router());
    let mut predictions = [0, 1, 2, 3].map(|_| {
        NoPredictions::new(
            vec![PredictionSlot::empty(); 256],
            vec![PredictionRecord::default(); 128],
            // A prompt family comes back every 5 requests, 15 time units later: its predictions
            // expire exactly as it returns, so a route that forgot to expire them first would
            // see them.
            15,
        )
        .unwrap()
    });
    let mut workers: Vec<WorkerKey> = (0..6).map(|w| WorkerKey::new(w * 16, 0)).collect();
    let mut fleet = Fleet::new(vec![Row::default(); 8], vec![FleetPlace::empty(); 8]).unwrap();
    for &w in &workers {
        a.ledger.add_worker(w).unwrap();
        b.ledger.add_worker(w).unwrap();
        c.ledger.add_worker(w).unwrap();
        d.ledger.add_worker(w).unwrap();
        fleet.add(w, TaintSet::EMPTY).unwrap();
    }
    let policy = DefaultKnobs::default().build().unwrap();
    let [mut sel_a, mut sel_b, mut sel_c, mut sel_d] = [0; 4].map(|_| Selector::<16>::new());
    let canonical: Vec<WorkerKey> = fleet.rows().iter().map(|r| r.worker).collect();
    let mut places = [Place::empty(); 6];
    let [pa, pb, pc, pd] = &mut predictions;
    for id in 0..300u64 {
        // Now and then the host lists its workers in another order: every place then points
        // at another worker's slots.
        if id % 50 == 49 {
            workers.rotate_left(1);
        }
        let hashes: Vec<u64> = (0..=id % 7).map(|b| (id % 5) * 100 + b).collect();
        let request = Request::new(16 * hashes.len() as u64, 16);
        let mut rows_a: Vec<Row> = workers.iter().map(|&w| Row::new(w)).collect();
        let mut rows_b = rows_a.clone();
        let now = id * 3;
        let without = a.route_predicting(
            pa,
            &policy,
            &mut sel_a,
            &request,
            &hashes,
            &mut rows_a,
            id,
            now,
        );
        let with = b.route_predicting_placed(
            pb,
            &policy,
            &mut sel_b,
            &request,
            &hashes,
            &mut rows_b,
            &mut places,
            id,
            now,
        );
        let kept = c.route_fleet_predicting(
            pc, &mut fleet, &policy, &mut sel_c, &request, &hashes, id, now,
        );
        let mut rows_d: Vec<Row> = canonical.iter().map(|&w| Row::new(w)).collect();
        let built = d.route_predicting(
            pd,
            &policy,
            &mut sel_d,
            &request,
            &hashes,
            &mut rows_d,
            id,
            now,
        );
        assert_eq!(without, with, "request {id}");
        assert_eq!(rows_a, rows_b, "request {id}");
        assert_eq!(kept, built, "request {id}");
        assert_eq!(fleet.rows(), &rows_d[..], "request {id}");
        assert_eq!(pc.len(), pd.len(), "request {id}");
        if id >= 2 {
            let freed = a.ledger.free(id - 2);
            assert_eq!(freed, b.ledger.free(id - 2));
            assert_eq!(freed, c.ledger.free(id - 2));
            assert_eq!(freed, d.ledger.free(id - 2));
            assert_eq!(freed, Ok(()), "request {}", id - 2);
        }
    }
    assert_eq!(pa.len(), pb.len());
    assert_eq!(pc.len(), pd.len());
}

/// A fleet keeps loads and index bits between routes only for the ledger and index it read them
/// from: another ledger or index put in the router's place, even one that has made as many
/// changes, is read afresh.
#[test]
fn another_ledger_or_index_is_read_afresh() {
    let (w1, w2) = (WorkerKey::new(1, 0), WorkerKey::new(2, 0));
    let mut kept = router();
    let mut fleet = Fleet::new(vec![Row::default(); 4], vec![FleetPlace::empty(); 4]).unwrap();
    let policy = DefaultKnobs::default().build().unwrap();
    let mut selector = Selector::<16>::new();
    // w1 holds the prompt's blocks and gets the first bit.
    for (w, hashes) in [(w1, &[1u64, 2][..]), (w2, &[9][..])] {
        kept.ledger.add_worker(w).unwrap();
        fleet.add(w, TaintSet::EMPTY).unwrap();
        let e = KvEvent::Stored {
            worker: w,
            tier: Tier::Device,
            hashes,
        };
        kept.index.apply(&e).unwrap();
    }
    kept.ledger.book(100, w1, 500, 3).unwrap();
    let request = Request::new(40, 16);
    let mut route = |router: &mut TestRouter, fleet: &mut TestFleet, id| {
        router
            .route_fleet(fleet, &policy, &mut selector, &request, &[1, 2, 3], id)
            .unwrap();
        router.ledger.free(id).unwrap();
        (
            fleet.get(w1).copied().unwrap(),
            fleet.get(w2).copied().unwrap(),
        )
    };
    let (r1, _) = route(&mut kept, &mut fleet, 1);
    assert_eq!(r1.cache().device_blocks, 2);
    assert_eq!(r1.load().active_prefill_tokens, 500);
    // The same workers in another ledger, with as many changes made (two workers added, one
    // booking on w2 instead of w1, and the route's booking and free): its loads are read.
    let mut other = router();
    other.ledger.add_worker(w1).unwrap();
    other.ledger.add_worker(w2).unwrap();
    other.ledger.book(100, w2, 700, 3).unwrap();
    other.ledger.book(1, w2, 1, 1).unwrap();
    other.ledger.free(1).unwrap();
    core::mem::swap(&mut kept.ledger, &mut other.ledger);
    let (r1, r2) = route(&mut kept, &mut fleet, 2);
    assert_eq!(r1.load().active_prefill_tokens, 0);
    assert_eq!(r2.load().active_prefill_tokens, 700);
    // An index that gave the same two bits the other way round: its bits are read.
    for (w, hashes) in [(w2, &[9u64][..]), (w1, &[1, 2][..])] {
        let e = KvEvent::Stored {
            worker: w,
            tier: Tier::Device,
            hashes,
        };
        other.index.apply(&e).unwrap();
    }
    core::mem::swap(&mut kept.index, &mut other.index);
    let (r1, r2) = route(&mut kept, &mut fleet, 3);
    assert_eq!(r1.cache().device_blocks, 2);
    assert_eq!(r2.cache().device_blocks, 0);
}
