"""Rows held in a NumPy structured array of ROW_DTYPE, read in place by Selector.select."""

import math

import numpy as np
import pytest

import libroute

REQUEST = libroute.Request(prompt_tokens=2048, block_size=16, role=libroute.Role.AGGREGATED)


def fleet(n):
    """n rows with a cache entry and a load, as columns."""
    rows = np.zeros(n, dtype=libroute.ROW_DTYPE)
    i = np.arange(n)
    rows["worker_id"] = i
    rows["flags"] = libroute.HAS_CACHE | libroute.HAS_LOAD
    half = (i * 37) % 97
    rows["effective_blocks"] = half * 0.5
    rows["effective_tokens"] = half * 8
    rows["active_prefill_tokens"] = (i * 131) % 4096
    rows["active_decode_blocks"] = (i * 17) % 509
    rows["active_requests"] = i % 13
    return rows


def test_the_dtype_is_the_c_row():
    dtype = libroute.ROW_DTYPE
    assert dtype.itemsize == libroute.ROW_BYTES == 104
    assert dtype.fields["effective_blocks"][1] == 40
    assert dtype.fields["ms_per_active_request"][1] == 96


def test_an_array_selects_as_the_same_rows_as_objects():
    array = fleet(64)
    rows = libroute.unpack_rows(array)
    assert len(rows) == 64 and rows[5].load.active_requests == 5
    assert libroute.rows_array(rows).tobytes() == array.tobytes()
    policy = libroute.Policy('{"temperature": 0.7, "seed": 3}')
    a, b = libroute.Selector(64, 1), libroute.Selector(64, 1)
    for _ in range(50):
        assert a.select(policy, REQUEST, array) == b.select(policy, REQUEST, rows)
    assert a.last_costs() == b.last_costs()


def test_the_array_is_read_in_place_not_copied_at_construction():
    array = fleet(8)
    policy, selector = libroute.Policy("{}"), libroute.Selector(8, 1)
    first = selector.select(policy, REQUEST, array).worker.worker_id
    # Give another row the whole prompt cached: the next select sees the edit.
    other = (first + 1) % 8
    array["effective_blocks"][other] = 128.0
    array["active_prefill_tokens"][other] = 0
    assert selector.select(policy, REQUEST, array).worker.worker_id == other


def test_a_slice_of_rows_and_a_misaligned_view():
    array = fleet(16)
    policy = libroute.Policy("{}")
    whole = libroute.Selector(16, 1)
    whole.select(policy, REQUEST, array[4:12])
    # The same bytes at an odd address: read unaligned, same decision.
    raw = bytearray(1) + bytearray(array[4:12].tobytes())
    odd = memoryview(raw)[1:]
    again = libroute.Selector(16, 1)
    assert again.select(policy, REQUEST, odd) == whole.select(policy, REQUEST, array[4:12])


def test_bad_arrays_name_what_is_wrong():
    policy, selector = libroute.Policy("{}"), libroute.Selector(64, 1)
    with pytest.raises(TypeError, match="dtype"):
        selector.select(policy, REQUEST, np.zeros(13, dtype=np.float64))
    with pytest.raises(TypeError, match="C-contiguous"):
        selector.select(policy, REQUEST, fleet(16)[::2])
    with pytest.raises(ValueError, match="not a multiple of the row size 104"):
        selector.select(policy, REQUEST, bytes(105))
    array = fleet(4)
    array["effective_blocks"][2] = math.nan
    with pytest.raises(libroute.RouteError.InvalidRow, match="row 2"):
        selector.select(policy, REQUEST, array)
    with pytest.raises(libroute.RouteError.NoEndpoints):
        selector.select(policy, REQUEST, fleet(0))
    with pytest.raises(libroute.RouteError.CapacityExceeded, match="65 rows"):
        selector.select(policy, REQUEST, fleet(65))


def test_the_router_takes_an_array_of_candidates():
    router = libroute.Router(libroute.RouterConfig(block_slots=64, request_slots=64))
    array = fleet(2)
    array["flags"] = 0
    a, b = (libroute.Worker(worker_id=0), libroute.Worker(worker_id=1))
    router.add_worker(a)
    router.add_worker(b)
    router.apply_kv_events([libroute.KvEvent.STORED(worker=b, tier=libroute.Tier.DEVICE, hashes=[1, 2, 3])])
    request = libroute.Request(prompt_tokens=64, block_size=16, role=libroute.Role.AGGREGATED)
    routed = router.route(libroute.Policy("{}"), libroute.Selector(2, 1), request, [1, 2, 3, 4], array, 9, 0)
    assert routed.selection.worker == b
    assert routed.rows[1].cache.device_blocks == 3


def test_route_into_fills_the_array_in_place_as_route_fills_its_rows():
    def router():
        r = libroute.Router(libroute.RouterConfig(block_slots=256, request_slots=64))
        for w in range(6):
            r.add_worker(libroute.Worker(worker_id=w))
            r.apply_kv_events(
                [libroute.KvEvent.STORED(worker=libroute.Worker(worker_id=w), tier=libroute.Tier.DEVICE, hashes=list(range(1, w + 2)))]
            )
        return r

    via_records, in_place = router(), router()
    policy = libroute.Policy('{"temperature": 0.3, "seed": 5}')
    a, b = libroute.Selector(8, 1), libroute.Selector(8, 1)
    empty = fleet(6)
    empty["flags"] = 0
    rows = libroute.unpack_rows(empty)
    for id in range(1, 21):
        request = libroute.Request(prompt_tokens=64 + 16 * (id % 5), block_size=16, role=libroute.Role.AGGREGATED)
        hashes = list(range(1, 5 + id % 5))
        expected = via_records.route(policy, a, request, hashes, rows, id, id)
        array = empty.copy()
        got = in_place.route_into(policy, b, request, hashes, array, id, id)
        assert got == expected.selection
        assert libroute.unpack_rows(array) == expected.rows  # field by field (padding aside)
        assert a.last_costs() == b.last_costs()
    assert via_records.counters() == in_place.counters()
    timed = in_place.route_into_at(policy, b, REQUEST, [1, 2], empty.copy(), 100, 5_000.0)
    assert timed == via_records.route_at(policy, a, REQUEST, [1, 2], rows, 100, 5_000.0).selection
    with pytest.raises(libroute.RouteError.DuplicateRequest):
        in_place.route_into(policy, b, REQUEST, [], empty.copy(), 100, 0)
    read_only = empty.copy()
    read_only.setflags(write=False)
    with pytest.raises(TypeError, match="writable"):
        in_place.route_into(policy, b, REQUEST, [], read_only, 101, 0)
    with pytest.raises(TypeError, match="writable"):
        in_place.route_into(policy, b, REQUEST, [], bytes(104), 102, 0)
    with pytest.raises(TypeError, match="dtype"):
        in_place.route_into(policy, b, REQUEST, [], np.zeros(13), 103, 0)
