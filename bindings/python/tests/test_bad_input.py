"""Bad input raises RouteError variants naming what was wrong; nothing crashes."""

import math

import pytest

import libroute


def request(**kw):
    return libroute.Request(prompt_tokens=64, block_size=16, role=libroute.Role.AGGREGATED, **kw)


def row(worker_id, device_blocks=0, effective=None):
    effective = float(device_blocks) if effective is None else effective
    return libroute.Row(
        worker=libroute.Worker(worker_id=worker_id),
        cache=libroute.RowCache(
            device_blocks=device_blocks,
            effective_blocks=effective,
            effective_tokens=device_blocks * 16,
        ),
    )


def test_invalid_config_names_the_knob():
    with pytest.raises(libroute.RouteError.InvalidKnob, match="temperature"):
        libroute.Policy('{"temperature": -1}')
    with pytest.raises(libroute.RouteError.UnknownKey, match="temprature"):
        libroute.Policy('{"temprature": 0}')
    with pytest.raises(libroute.RouteError.InvalidJson):
        libroute.Policy("{")


def test_empty_rows():
    policy, selector = libroute.Policy("{}"), libroute.Selector(8, 0)
    with pytest.raises(libroute.RouteError.NoEndpoints) as error:
        selector.select(policy, request(), [])
    # One sentence, the same as C's libroute_last_error: not the status's text and then the
    # detail repeating it.
    assert error.value.detail == "no endpoints: no eligible worker among the rows"
    assert str(error.value).count("no endpoints") == 1, str(error.value)


def test_too_many_rows():
    policy, selector = libroute.Policy("{}"), libroute.Selector(2, 0)
    with pytest.raises(libroute.RouteError.CapacityExceeded, match="3 rows"):
        selector.select(policy, request(), [row(1), row(2), row(3)])
    with pytest.raises(libroute.RouteError.CapacityExceeded):
        libroute.Selector(5000, 0)
    with pytest.raises(libroute.RouteError.InvalidArgument):
        libroute.Selector(0, 0)


def test_nan_fields():
    policy, selector = libroute.Policy("{}"), libroute.Selector(8, 0)
    with pytest.raises(libroute.RouteError.InvalidRow, match="row 1"):
        selector.select(policy, request(), [row(1, 1), row(2, 1, effective=math.nan)])
    nan_weight = request(preferred_taints=[libroute.PreferredTaint(taint=3, weight=math.nan)])
    with pytest.raises(libroute.RouteError.InvalidRequest):
        selector.select(policy, nan_weight, [row(1)])


def test_out_of_range_integers_are_a_python_error_naming_the_argument():
    # Python's own error for an integer that does not fit its C type.
    with pytest.raises(OverflowError, match="capacity"):
        libroute.Selector(-1, 0)
    with pytest.raises(OverflowError, match="entropy"):
        libroute.Selector(8, 2**64)
    with pytest.raises(OverflowError, match="dp_rank"):
        libroute.Worker(worker_id=1, dp_rank=2**32)


def test_wrong_types_name_the_argument():
    with pytest.raises(TypeError, match=r"rows\[1\] is a int, not a libroute.Row"):
        libroute.Selector(8, 0).select(libroute.Policy("{}"), request(), [row(1), 7])
    with pytest.raises(TypeError, match="rows must be a list of libroute.Row"):
        libroute.Selector(8, 0).select(libroute.Policy("{}"), request(), 42)
    with pytest.raises(TypeError, match="request"):
        libroute.Selector(8, 0).select(libroute.Policy("{}"), "request", [row(1)])


def test_use_after_release():
    policy, selector = libroute.Policy("{}"), libroute.Selector(8, 0)
    policy.release()
    policy.release()
    with pytest.raises(libroute.RouteError.Closed):
        selector.select(policy, request(), [row(1)])
    with pytest.raises(libroute.RouteError.Closed):
        policy.inputs(libroute.Role.DECODE, False)
    selector.release()
    with pytest.raises(libroute.RouteError.Closed):
        selector.last_costs()


def test_context_managers_release():
    with libroute.Selector(8, 0) as selector:
        pass
    with pytest.raises(libroute.RouteError.Closed):
        selector.last_costs()
