"""The golden corpus (testdata/README.md) through the Python bindings."""

import json
import math
import pathlib
import re
import struct

import libroute

CORPUS = pathlib.Path(__file__).resolve().parents[3] / "testdata" / "scenarios"

ROLES = {
    "prefill": libroute.Role.PREFILL,
    "decode": libroute.Role.DECODE,
    "aggregated": libroute.Role.AGGREGATED,
    "encode": libroute.Role.ENCODE,
}

CONFIG_ERRORS = {"InvalidJson", "UnknownKey", "InvalidKnob"}


def scenarios():
    files = sorted(CORPUS.glob("*.jsonl"))
    assert len(files) >= 4, f"corpus not found under {CORPUS}"
    for path in files:
        for line in path.read_text().splitlines():
            if line.strip():
                yield json.loads(line)


def number(value):
    """A corpus float: a JSON number, or "NaN", "inf", "-inf"."""
    return float(value)


def mask(taints):
    bits = 0
    for t in taints:
        bits |= 1 << t
    return bits


def error_name(err):
    """The corpus name of a RouteError variant (NoEndpoints -> no_endpoints)."""
    name = type(err).__name__
    if name in CONFIG_ERRORS:
        return "invalid_config"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def build(s):
    r = s["request"]
    request = libroute.Request(
        prompt_tokens=r["prompt_tokens"],
        block_size=r["block_size"],
        role=ROLES[r["role"]],
        track_prefill_tokens=r["track_prefill_tokens"],
        conditional_disagg=r["conditional_disagg"],
        has_tier_matches=r["has_tier_matches"],
        required_taints=mask(r["required_taints"]),
        preferred_taints=[
            libroute.PreferredTaint(taint=int(t), weight=number(w))
            for t, w in (r["preferred_taints"] or [])
        ],
        shared_hits=None
        if r["shared_hits"] is None
        else [libroute.BlockRange(start=a, end=b) for a, b in r["shared_hits"]],
        pin=None if r["pin"] is None else libroute.Worker(worker_id=r["pin"][0], dp_rank=r["pin"][1]),
    )
    rows = []
    for c in s["candidates"]:
        cache = c["cache"]
        load = c["load"]
        rows.append(
            libroute.Row(
                worker=libroute.Worker(worker_id=c["worker"], dp_rank=c["rank"]),
                taints=mask(c["taints"]),
                overloaded=c["overloaded"],
                cache=None
                if cache is None
                else libroute.RowCache(
                    device_blocks=cache["device"],
                    host_blocks=cache["host"],
                    disk_blocks=cache["disk"],
                    effective_blocks=number(cache["effective_blocks"]),
                    effective_tokens=cache["effective_tokens"],
                ),
                load=None
                if load is None
                else libroute.RowLoad(
                    active_prefill_tokens=load["active_prefill_tokens"],
                    active_decode_blocks=load["active_decode_blocks"],
                    active_requests=load["active_requests"],
                ),
            )
        )
    return request, rows


def bits(x):
    return struct.pack(">d", x).hex()


def run(s):
    """Every mismatch of scenario `s`, as `name: field: expected X, actual Y` lines."""
    name, expect = s["name"], s["expect"]
    want = expect.get("error")
    problems = []
    try:
        policy = libroute.Policy(json.dumps(s["policy"]))
    except libroute.RouteError as e:
        if want != "invalid_config":
            problems.append(f"{name}: error: expected {want}, actual {e!r}")
        return problems
    request, rows = build(s)
    selector = libroute.Selector(4096, 1)
    try:
        selector.select(policy, request, rows)
        got = None
    except libroute.RouteError as e:
        got = error_name(e)
    if got != want:
        problems.append(f"{name}: error: expected {want}, actual {got}")
    # Packed bytes and a NumPy array read in place must decide, and fail, exactly as the
    # records do.
    for how, packed_rows in (("packed", libroute.pack_rows(rows)), ("numpy", libroute.rows_array(rows))):
        packed = libroute.Selector(4096, 1)
        try:
            packed.select(policy, request, packed_rows)
            got_packed = None
        except libroute.RouteError as e:
            got_packed = error_name(e)
        if got_packed != got:
            problems.append(f"{name}: {how} error: expected {got}, actual {got_packed}")
        elif got is None and packed.last_costs() != selector.last_costs():
            problems.append(f"{name}: {how} costs differ from the records' costs")
    if got is not None:
        return problems
    cost = {c.row: c.cost for c in selector.last_costs()}
    for i, expected in enumerate(expect.get("cost_bits") or []):
        if (expected is None) == (i in cost):
            problems.append(f"{name}: costs[{i}]: expected present={expected is not None}")
        elif expected is not None and bits(cost[i]) != expected:
            problems.append(f"{name}: cost_bits[{i}]: expected {expected}, actual {bits(cost[i])}")
    if expect.get("argmin") is not None:
        low = min(cost.values())
        argmin = sorted(
            [rows[i].worker.worker_id, rows[i].worker.dp_rank] for i, c in cost.items() if c == low
        )
        if argmin != expect["argmin"]:
            problems.append(f"{name}: argmin: expected {expect['argmin']}, actual {argmin}")
    picks = expect.get("picks")
    if picks:
        knobs = dict(s["policy"], seed=picks["seed"], temperature=picks["temperature"])
        seeded = libroute.Policy(json.dumps(knobs))
        fresh = libroute.Selector(4096, 1)
        for k, (worker, rank) in enumerate(picks["sequence"]):
            chosen = fresh.select(seeded, request, rows).worker
            if (chosen.worker_id, chosen.dp_rank) != (worker, rank):
                problems.append(
                    f"{name}: picks.sequence[{k}]: expected {[worker, rank]}, "
                    f"actual {[chosen.worker_id, chosen.dp_rank]}"
                )
                break
    return problems


def check_float_parsing():
    # Python's float() rounds correctly, as the corpus format requires.
    assert math.isnan(number("NaN")) and number("-inf") == -math.inf
