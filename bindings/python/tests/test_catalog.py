"""The catalog through Python: every builtin type by JSON, explanations, named instances."""

import math

import pytest

import libroute

TYPES = [
    '{"type": "default", "temperature": 0.5, "seed": 1}',
    '{"type": "round_robin"}',
    '{"type": "random", "seed": 3}',
    '{"type": "power_of_two", "k": 2, "metric": "prefill_tokens"}',
    '{"type": "least_loaded", "metric": "active_blocks"}',
    '{"type": "dynamo_two_tier", "spread": 16, "ratio": 1.2, "coverage": 0.4}',
    '{"type": "sglang_cache_aware", "abs_threshold": 32}',
    '{"type": "llm_d", "kv_capacity_blocks": 100, "queue_weight": 0.5}',
    '{"type": "composed", "filters": [{"type": "overload", "max_requests": 50}],'
    ' "scorers": [{"type": "default", "knobs": {"prefill_load_scale": 2}},'
    ' {"type": "session_affinity", "weight": 4}], "picker": {"type": "softmax", "temperature": 0.3}}',
]


def row(worker, dev, n):
    return libroute.Row(
        worker=libroute.Worker(worker_id=worker),
        cache=libroute.RowCache(device_blocks=dev, effective_blocks=float(dev), effective_tokens=dev * 16),
        load=libroute.RowLoad(active_prefill_tokens=100 * n, active_decode_blocks=10 * n, active_requests=n),
    )


REQUEST = libroute.Request(prompt_tokens=160, block_size=16, role=libroute.Role.AGGREGATED)


@pytest.mark.parametrize("config", TYPES)
def test_every_builtin_builds_and_selects(config):
    selector = libroute.Selector(16, 1)
    chosen = selector.select(libroute.Policy(config), REQUEST, [row(1, 2, 10), row(2, 6, 12), row(3, 0, 40)])
    assert chosen.worker.worker_id in (1, 2, 3)


def test_explanations_name_the_filter_and_the_contributions():
    policy = libroute.Policy(
        '{"type": "dynamo_two_tier", "filters": [{"type": "overload", "max_requests": 30}]}'
    )
    explained = libroute.Selector(16, 1).select_explained(
        policy, REQUEST, [row(1, 2, 10), row(2, 6, 12), row(3, 0, 20), row(4, 9, 40)]
    )
    # Spread 10 <= 32 among the candidates; best overlap 6 of 10: cost = 6 - dev.
    assert explained.selection.worker.worker_id == 2
    totals = [e.total for e in explained.rows]
    assert totals[:3] == [4.0, 0.0, 6.0] and math.isnan(totals[3])
    assert explained.rows[1].chosen and explained.rows[1].contributions == [0.0]
    assert explained.rows[3].disposition == libroute.Disposition.FILTER_OVERLOADED(filter=0)


def test_named_instances_per_role():
    config = (
        '{"instances": [{"name": "cache", "policy": {"type": "sglang_cache_aware"}},'
        ' {"name": "rr", "policy": {"type": "round_robin"}}], "roles": {"prefill": "cache", "decode": "rr"}}'
    )
    policies = libroute.PolicySet(config)
    assert policies.instance_name(libroute.Role.PREFILL) == "cache"
    assert policies.instance_name(libroute.Role.ENCODE) == "default"
    prefill = policies.policy(libroute.Role.PREFILL)
    del policies  # the lent policy keeps the set alive
    chosen = libroute.Selector(4, 1).select(prefill, REQUEST, [row(1, 1, 5), row(2, 4, 10)])
    assert chosen.worker.worker_id == 2  # balanced; best match 4/10 > 0.3


def test_catalog_configuration_errors_name_what_is_wrong():
    with pytest.raises(libroute.RouteError.UnknownKey, match="fastest"):
        libroute.Policy('{"type": "fastest"}')
    with pytest.raises(libroute.RouteError.InvalidKnob, match="k = 0"):
        libroute.Policy('{"type": "power_of_two", "k": 0}')
    with pytest.raises(libroute.RouteError.InvalidKnob, match="nope"):
        libroute.PolicySet('{"roles": {"decode": "nope"}}')


def test_session_affinity_through_the_abi():
    policy = libroute.Policy(
        '{"type": "composed", "scorers": [{"type": "session_affinity", "weight": 100}, {"type": "least_loaded"}]}'
    )
    selector = libroute.Selector(16, 1)
    rows = [row(i + 1, 0, i) for i in range(8)]
    owners = set()
    for session in range(20):
        req = libroute.Request(prompt_tokens=160, block_size=16, role=libroute.Role.AGGREGATED, session=session)
        first = selector.select(policy, req, rows).worker
        assert selector.select(policy, req, rows).worker == first
        owners.add(first.worker_id)
    assert len(owners) >= 3
    assert selector.select(policy, REQUEST, rows).worker.worker_id == 1


def test_long_instance_names_are_served():
    name = "n" * 1000
    policies = libroute.PolicySet(
        '{"instances": [{"name": "%s", "policy": {"type": "least_loaded"}}], "roles": {"decode": "%s"}}'
        % (name, name)
    )
    assert policies.instance_name(libroute.Role.DECODE) == name
    chosen = libroute.Selector(4, 1).select(
        policies.policy(libroute.Role.DECODE), REQUEST, [row(1, 0, 5), row(2, 0, 1)]
    )
    assert chosen.worker.worker_id == 2
