"""The host side: KV events into the index, bookings in the ledger, one-call routing."""

import threading

import pytest

import libroute

A, B = libroute.Worker(worker_id=1), libroute.Worker(worker_id=2)


def config(**kw):
    return libroute.RouterConfig(block_slots=64, request_slots=64, **kw)


def candidates():
    return [libroute.Row(worker=A), libroute.Row(worker=B)]


def request():
    return libroute.Request(prompt_tokens=64, block_size=16, role=libroute.Role.AGGREGATED)


def test_route_follows_the_cached_prefix_and_books():
    router = libroute.Router(config())
    router.add_worker(A)
    router.add_worker(B)
    router.apply_kv_events(
        [libroute.KvEvent.STORED(worker=B, tier=libroute.Tier.DEVICE, hashes=[11, 12, 13])]
    )
    policy, selector = libroute.Policy("{}"), libroute.Selector(16, 1)
    routed = router.route(policy, selector, request(), [11, 12, 13, 14], candidates(), 7, 0)
    # 4 blocks. Worker 2 holds 3: 1 block to prefill + 1 new decode block = 2. Worker 1 holds
    # none: 4 + 4 = 8. (The ledger projects this request's own load onto each candidate.)
    assert routed.selection.worker == B
    assert [(c.row, c.cost) for c in selector.last_costs()] == [(0, 8.0), (1, 2.0)]
    assert routed.rows[1].cache.device_blocks == 3
    assert routed.rows[0].cache is None or routed.rows[0].cache.device_blocks == 0
    counters = router.counters()
    assert (counters.blocks, counters.active_requests) == (3, 1)
    with pytest.raises(libroute.RouteError.DuplicateRequest):
        router.route(policy, selector, request(), [], candidates(), 7, 0)
    router.prefill_complete(7)
    router.free_request(7)
    with pytest.raises(libroute.RouteError.UnknownRequest):
        router.free_request(7)
    assert router.counters().active_requests == 0


def test_replica_events_are_idempotent():
    router = libroute.Router(config(tombstones=8))
    router.add_worker(A)
    booked = libroute.LedgerEvent.BOOKED(id=5, worker=A, prefill_tokens=64, blocks=4)
    router.apply_ledger_events([booked, booked, libroute.LedgerEvent.FREED(id=5)])
    counters = router.counters()
    assert counters.active_requests == 0
    assert counters.duplicate_ledger_events == 1


def test_a_restored_router_routes_and_frees_as_the_original():
    original, copy = libroute.Router(config(tombstones=8)), libroute.Router(config(tombstones=8))
    original.add_worker(A)
    original.add_worker(B)
    original.apply_kv_events(
        [libroute.KvEvent.STORED(worker=B, tier=libroute.Tier.DEVICE, hashes=[11, 12, 13])]
    )
    policy, selector = libroute.Policy("{}"), libroute.Selector(16, 1)
    original.route(policy, selector, request(), [11, 12, 13, 14], candidates(), 7, 0)
    snapshot = original.snapshot()
    assert isinstance(snapshot, bytes) and len(snapshot) > 0
    with pytest.raises(libroute.RouteError.InvalidArgument, match=r"snapshot byte \d+"):
        copy.restore(snapshot[:-1])
    assert copy.counters().ledger_workers == 0, "a cut snapshot changes nothing"
    copy.restore(snapshot)
    assert copy.counters() == original.counters()
    a = original.route(policy, selector, request(), [11, 12, 13, 14], candidates(), 8, 0)
    b = copy.route(policy, selector, request(), [11, 12, 13, 14], candidates(), 8, 0)
    assert (a.selection.worker, a.rows) == (b.selection.worker, b.rows)
    copy.free_request(7)  # booked before the snapshot
    copy.read_kv_batches(16, 64)
    with pytest.raises(libroute.RouteError.InvalidArgument, match="engines' KV batches"):
        copy.snapshot()


def test_bad_router_config_names_the_field():
    with pytest.raises(libroute.RouteError.InvalidArgument, match="block_slots"):
        libroute.Router(libroute.RouterConfig(block_slots=100, request_slots=64))
    with pytest.raises(libroute.RouteError.UnknownWorker):
        libroute.Router(config()).book(1, A, 16, 1)


def test_one_policy_many_threads():
    policy = libroute.Policy('{"temperature": 0.7, "seed": 42}')
    rows = candidates()
    errors = []

    def work():
        selector = libroute.Selector(16, 0)
        try:
            for _ in range(200):
                selector.select(policy, request(), rows)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_timed_routing_calibrates_the_ttft_policy():
    router = libroute.Router(config())
    router.add_worker(A)
    router.add_worker(B)
    # Worker B takes three times as long as worker A for the same prompt.
    for i in range(40):
        worker, slow = (A, 1.0) if i % 2 == 0 else (B, 3.0)
        tokens, now = 200 + 50 * i, 1000.0 * i
        router.book_at(i, worker, tokens, 2, now)
        router.prefill_complete_at(i, now + slow * (10 + 0.05 * tokens))
        router.free_request(i)
    policy, selector = libroute.Policy('{"type": "ttft"}'), libroute.Selector(16, 1)
    req = libroute.Request(prompt_tokens=1000, block_size=16, role=libroute.Role.AGGREGATED)
    routed = router.route_at(policy, selector, req, [5, 6], candidates(), 100, 50_000.0)
    assert routed.selection.worker == A
    fast, slow = routed.rows[0].speed, routed.rows[1].speed
    assert slow.ms_per_prefill_token > 2 * fast.ms_per_prefill_token
    with pytest.raises(libroute.RouteError.InvalidArgument):
        router.prefill_complete_at(100, -1.0)
    with pytest.raises(libroute.RouteError.InvalidArgument):
        router.route_at(policy, selector, req, [], candidates(), 101, float("nan"))


def test_the_fleet_routes_as_candidates_do():
    over_rows, over_fleet = libroute.Router(config()), libroute.Router(config())
    policy = libroute.Policy("{}")
    sel_a, sel_b = libroute.Selector(16, 3), libroute.Selector(16, 3)
    with pytest.raises(libroute.RouteError.NoEndpoints):
        over_fleet.route_fleet(policy, sel_b, request(), [], 1, 0)
    hashes = [1, 2, 3, 4]
    rows = [libroute.Row(worker=libroute.Worker(worker_id=w)) for w in range(4)]
    # Added out of order: the fleet keeps its rows sorted by worker, as the candidates are.
    for w in [2, 0, 3, 1]:
        worker = libroute.Worker(worker_id=w)
        for r in (over_rows, over_fleet):
            r.add_worker(worker)
            r.apply_kv_events(
                [libroute.KvEvent.STORED(worker=worker, tier=libroute.Tier.DEVICE, hashes=hashes[: w + 1])]
            )
        over_fleet.fleet_add(worker)
    for i in range(1, 13):
        if i == 6:
            rows[3] = libroute.Row(worker=libroute.Worker(worker_id=3), overloaded=True)
            over_fleet.fleet_set_overloaded(libroute.Worker(worker_id=3), True)
        prompt = hashes[: i % 4 + 1]
        routed = over_rows.route(policy, sel_a, request(), prompt, rows, i, 0)
        rows = routed.rows
        fleet = over_fleet.route_fleet(policy, sel_b, request(), prompt, i, 0)
        assert repr(fleet) == repr(routed.selection), i
    assert repr(over_fleet.fleet_rows()) == repr(rows)
    with pytest.raises(libroute.RouteError.DuplicateWorker):
        over_fleet.fleet_add(libroute.Worker(worker_id=1))
    with pytest.raises(libroute.RouteError.UnknownWorker):
        over_fleet.fleet_set_taints(libroute.Worker(worker_id=9), 1)
    with pytest.raises(libroute.RouteError.InvalidArgument):
        over_fleet.route_fleet_at(policy, sel_b, request(), hashes, 99, float("nan"))
    over_fleet.fleet_remove(libroute.Worker(worker_id=1))
    assert len(over_fleet.fleet_rows()) == 3
