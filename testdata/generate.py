#!/usr/bin/env python3
"""Writes the golden scenario corpus in testdata/scenarios/ from an independent reference.

This file re-implements spec/default-policy.md (the default cost, the default picker, fastrand's
wyrand and the selection pipeline) in plain Python, separately from the Rust core, and records
what it computes as the expected values. The worked numbers of spec section 5 and the seed-42
sequences of section 4 are asserted here against the spec's own figures before anything is
written. The Rust core, the C ABI and every binding then have to agree with this file bit for bit.

Usage:
    python3 testdata/generate.py           # rewrite testdata/scenarios/*.jsonl
    python3 testdata/generate.py --check   # exit 1 if a committed file differs (CI)

Python floats are IEEE-754 binary64 and math.exp/math.tanh are the platform's (glibc), the same
functions the std build of libroute-core and Dynamo call.
"""

import json
import math
import pathlib
import sys

MASK = (1 << 64) - 1
OUT = pathlib.Path(__file__).resolve().parent / "scenarios"

# ---------------------------------------------------------------------------------------------
# fastrand 2.4.1 wyrand, usize(0..n) and f64()


class WyRand:
    def __init__(self, seed):
        self.state = seed & MASK

    def next_u64(self):
        self.state = (self.state + 0x2D358DCCAA6C78A5) & MASK
        t = self.state * (self.state ^ 0x8BB84B93962EACC9)
        return (t & MASK) ^ (t >> 64)

    def index(self, n):
        r = self.next_u64()
        product = r * n
        lo = product & MASK
        if lo < n:
            threshold = ((-n) & MASK) % n
            while lo < threshold:
                r = self.next_u64()
                product = r * n
                lo = product & MASK
        return product >> 64

    def unit(self):
        while True:
            x = float(self.next_u64() >> 1) * (1.0 / float(1 << 63))
            if x < 1.0:
                return x


# ---------------------------------------------------------------------------------------------
# The default cost (spec section 2)

DEFAULT_KNOBS = {
    "overlap_score_credit": 1.0,
    "overlap_score_credit_decay": 0.0,
    "prefill_load_scale": 1.0,
    "decode_active_request_weight": 0.0,
    "host_cache_hit_weight": 0.75,
    "disk_cache_hit_weight": 0.25,
    "shared_cache_multiplier": 0.0,
    "temperature": 0.0,
}


def knobs_of(policy):
    k = dict(DEFAULT_KNOBS)
    k["seed"] = None
    for key, value in policy.items():
        if key == "overlap_score_weight":
            k["prefill_load_scale"] = float(value)
            if value == 0:
                k["overlap_score_credit"] = 0.0
        else:
            k[key] = value if key == "seed" else float(value)
    return k


def round_half_away(x):
    f = math.floor(x)
    return f + 1 if x - f >= 0.5 else f


def hits_beyond(ranges, position):
    return sum(e - max(s, position) for s, e in ranges if e > position)


def default_costs(k, req, rows):
    P = req["prompt_tokens"]
    bs = float(req["block_size"])
    RB = max(1, -(-P // req["block_size"]))
    track = req["track_prefill_tokens"]
    role = req["role"]
    plain_decode = role == "decode" and not req["conditional_disagg"]
    c_ovl = 0.0 if (plain_decode and not track) else k["overlap_score_credit"]
    uses_cache = (not plain_decode) and k["overlap_score_credit"] != 0.0
    use_decay = track and k["overlap_score_credit_decay"] > 0.0
    subtract = role != "prefill" and not track and c_ovl > 0.0
    load = lambda r: r["load"] or {"active_prefill_tokens": 0, "active_decode_blocks": 0, "active_requests": 0}
    min_apt = min(load(r)["active_prefill_tokens"] for r in rows) if use_decay else 0
    prefs = req["preferred_taints"] if not req["pin"] else None
    out = []
    for r in rows:
        ld = load(r)
        apt, dcb, nreq = ld["active_prefill_tokens"], float(ld["active_decode_blocks"]), ld["active_requests"]
        if uses_cache:
            c = r["cache"] or {"device": 0, "host": 0, "disk": 0, "effective_blocks": 0.0, "effective_tokens": 0}
            device = float(c["device"]) if req["has_tier_matches"] else float(c["effective_blocks"])
            shared = 0.0
            if req["shared_hits"] is not None:
                shared = k["shared_cache_multiplier"] * float(hits_beyond(req["shared_hits"], max(0, round_half_away(device))))
            decay = 1.0
            if use_decay:
                excess = float(max(0, apt - min_apt)) / bs
                decay = 1.0 / (1.0 + k["overlap_score_credit_decay"] * (excess / float(RB)))
            credit = (c_ovl * decay * device + k["host_cache_hit_weight"] * float(c["host"])
                      + k["disk_cache_hit_weight"] * float(c["disk"]) + shared)
            e_tokens = c["effective_tokens"]
        else:
            credit, e_tokens = 0.0, 0
        req_cost = k["decode_active_request_weight"] * float(nreq)
        if subtract:
            x = dcb - credit
            cost = (x if x > 0 else 0.0) + req_cost
        else:
            if not track:
                raw = 0
            elif r["load"] is not None:
                raw = apt + max(P, e_tokens)
            else:
                raw = P
            x = float(raw) / bs - credit
            cost = k["prefill_load_scale"] * (x if x > 0 else 0.0) + dcb + req_cost
        if prefs:
            total = 0.0
            for taint, weight in prefs:
                if taint in r["taints"]:
                    total += weight
            cost = cost * math.exp(-math.tanh(total))
        out.append(cost)
    return out


# ---------------------------------------------------------------------------------------------
# The default picker (spec section 4), in Dynamo's evaluation order


def pick(costs, temperature, rng):
    if temperature == 0.0:
        best, best_cost, ties = 0, math.inf, 0
        for i, c in enumerate(costs):
            if c < best_cost:
                best, best_cost, ties = i, c, 1
            elif c == best_cost:
                ties += 1
                if rng.index(ties) == 0:
                    best = i
        return best
    sample = rng.unit()
    lo, hi = min(costs), max(costs)
    if lo == hi:
        probs = [1.0 / len(costs)] * len(costs)
    else:
        rng_ = hi - lo
        mag = 1.0 if math.isfinite(rng_) else max(abs(lo), abs(hi))
        lo_n = lo / mag
        scale = -1.0 / ((hi / mag - lo_n) * temperature)
        offset = lo_n * scale
        probs = [math.exp(c / mag * scale - offset) for c in costs]
    total = 0.0
    for p in probs:
        total += p
    probs = [p / total for p in probs]
    cumulative = 0.0
    for i, p in enumerate(probs):
        cumulative += p
        if sample <= cumulative:
            return i
    return len(costs) - 1


# ---------------------------------------------------------------------------------------------
# The pipeline: eligibility, overload, pin, costs, argmin and seeded picks

REQUEST_DEFAULTS = {
    "prompt_tokens": 0, "block_size": 16, "role": "aggregated", "track_prefill_tokens": True,
    "conditional_disagg": False, "has_tier_matches": False, "shared_hits": None,
    "preferred_taints": None, "required_taints": [], "pin": None,
}


def candidate(worker, rank=0, taints=(), overloaded=False, cache=None, load=None):
    return {"worker": worker, "rank": rank, "taints": list(taints), "overloaded": overloaded,
            "cache": cache, "load": load}


def cache(device, host=0, disk=0, effective_blocks=None, effective_tokens=None, bs=16):
    eb = float(device) if effective_blocks is None else float(effective_blocks)
    et = round_half_away(eb * bs) if effective_tokens is None else effective_tokens
    return {"device": device, "host": host, "disk": disk, "effective_blocks": eb, "effective_tokens": et}


def load(apt=0, dcb=0, nreq=0):
    return {"active_prefill_tokens": apt, "active_decode_blocks": dcb, "active_requests": nreq}


def evaluate(s):
    """Expected outcome of scenario `s` (costs per candidate, None where removed)."""
    k = knobs_of(s["policy"])
    req = s["request"]
    rows = s["candidates"]
    for r in rows:
        c = r["cache"]
        if c is not None and not (math.isfinite(c["effective_blocks"]) and c["effective_blocks"] >= 0):
            return {"error": "invalid_row"}
    if not rows:
        return {"error": "no_endpoints"}
    eligible = [i for i, r in enumerate(rows) if set(req["required_taints"]) <= set(r["taints"])]
    if req["pin"] is not None:
        key = tuple(req["pin"])
        matches = [i for i, r in enumerate(rows) if (r["worker"], r["rank"]) == key]
        if not matches:
            return {"error": "pin_not_allowed"}
        i = matches[0]
        if i not in eligible:
            return {"error": "pin_ineligible"}
        if rows[i]["overloaded"]:
            return {"error": "pin_overloaded"}
        survivors = [i]
    else:
        survivors = [i for i in eligible if not rows[i]["overloaded"]]
        if not survivors:
            return {"error": "all_overloaded" if eligible else "no_endpoints"}
    seeded = k["seed"] is not None
    if seeded:
        survivors.sort(key=lambda i: (rows[i]["worker"], rows[i]["rank"]))
    costs = default_costs(k, req, [rows[i] for i in survivors])
    full = [None] * len(rows)
    for i, c in zip(survivors, costs):
        full[i] = c
    low = min(costs)
    argmin = sorted([rows[i]["worker"], rows[i]["rank"]] for i, c in zip(survivors, costs) if c == low)
    expect = {"costs": full, "cost_bits": [None if c is None else "%016x" % struct_bits(c) for c in full],
              "argmin": argmin, "error": None}
    return expect


def struct_bits(x):
    import struct
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def seeded_sequence(s, seed, temperature, count):
    """The first `count` picks of a selector that replays `s` under `seed`."""
    req, rows = s["request"], s["candidates"]
    k = knobs_of(s["policy"])
    survivors = [i for i, r in enumerate(rows)
                 if set(req["required_taints"]) <= set(r["taints"]) and not r["overloaded"]]
    survivors.sort(key=lambda i: (rows[i]["worker"], rows[i]["rank"]))
    costs = default_costs(k, req, [rows[i] for i in survivors])
    rng = WyRand(seed)
    out = []
    for _ in range(count):
        i = survivors[pick(costs, temperature, rng)]
        out.append([rows[i]["worker"], rows[i]["rank"]])
    return out


def scenario(name, why, candidates, policy=None, picks=None, **request):
    req = dict(REQUEST_DEFAULTS)
    for key in request:
        assert key in req, key
    req.update(request)
    s = {"name": name, "why": why, "policy": policy or {}, "request": req, "candidates": candidates}
    s["expect"] = evaluate(s)
    if picks is not None:
        seed, temperature, count = picks
        s["expect"]["picks"] = {"seed": seed, "temperature": temperature,
                                "sequence": seeded_sequence(s, seed, temperature, count)}
    return s


# ---------------------------------------------------------------------------------------------
# The corpus

def worked():
    """Spec section 5, each asserted against the spec's own figure."""
    out = []

    def add(s, expected):
        got = [c for c in s["expect"]["costs"]]
        assert got == expected, (s["name"], got, expected)
        out.append(s)

    w1 = [candidate(0, cache=cache(6, effective_tokens=96), load=load(16, 2 + 3))]
    add(scenario("worked-1-scale-after-credit", "spec 5.1: prefill_load_scale applies after the overlap credit",
                 w1, {"prefill_load_scale": 2}, prompt_tokens=64, role="prefill", has_tier_matches=True), [7.0])
    add(scenario("worked-1-untracked", "spec 5.1: untracked prefill charges only decode load",
                 w1, {"prefill_load_scale": 2}, prompt_tokens=64, role="prefill", has_tier_matches=True,
                 track_prefill_tokens=False), [5.0])
    w2 = [candidate(0, load=load(0, 100, 4))]
    add(scenario("worked-2-empty-prompt", "spec 5.2: an empty prompt (RB clamped to 1) routes by load",
                 w2, prompt_tokens=0), [100.0])
    add(scenario("worked-2-request-weight", "spec 5.2: decode_active_request_weight charges per active request",
                 w2, {"decode_active_request_weight": 32}, prompt_tokens=0), [228.0])
    w3 = [candidate(0, cache=cache(3), load=load(0, 10))]
    add(scenario("worked-3-decode-label", "spec 5.3: the decode label subtracts credit from decode blocks",
                 w3, prompt_tokens=64, role="aggregated", track_prefill_tokens=False, has_tier_matches=True), [7.0])
    add(scenario("worked-3-conditional-decode", "spec 5.3: a decode leg under conditional disaggregation keeps credit",
                 w3, prompt_tokens=64, role="decode", conditional_disagg=True, track_prefill_tokens=False,
                 has_tier_matches=True), [7.0])
    add(scenario("worked-3-plain-decode", "spec 2: plain decode drops the credit and routes by load only",
                 w3, prompt_tokens=64, role="decode", track_prefill_tokens=False, has_tier_matches=True), [10.0])
    w4 = [candidate(0, cache=cache(2, bs=1)), candidate(1)]
    add(scenario("worked-4-shared-hits", "spec 5.4: shared-cache hits beyond the device overlap earn credit",
                 w4, {"shared_cache_multiplier": 0.5}, prompt_tokens=4, block_size=1, role="prefill",
                 has_tier_matches=True, shared_hits=[[0, 4]]), [1.0, 2.0])
    w5 = [candidate(0, cache=cache(4, effective_tokens=64), load=load(48)), candidate(1)]
    add(scenario("worked-5-no-decay", "spec 5.5: without decay the warm worker is cheaper",
                 w5, prompt_tokens=64, role="prefill", has_tier_matches=True), [3.0, 4.0])
    add(scenario("worked-5-decay", "spec 5.5: decay 1 shrinks the warm credit by 1/1.75 and the cold worker wins",
                 w5, {"overlap_score_credit_decay": 1}, prompt_tokens=64, role="prefill",
                 has_tier_matches=True), [7.0 - 4.0 / 1.75, 4.0])
    w6 = [candidate(0, cache=cache(4, effective_tokens=64), load=load(0, 5)), candidate(1)]
    add(scenario("worked-6-credit-1", "spec 5.6: credit 1.0 leaves the warm worker at 9, the cold one wins",
                 w6, prompt_tokens=128, role="prefill", has_tier_matches=True), [9.0, 8.0])
    add(scenario("worked-6-credit-1.5", "spec 5.6: credit above 1 keeps the warm worker",
                 w6, {"overlap_score_credit": 1.5}, prompt_tokens=128, role="prefill", has_tier_matches=True), [7.0, 8.0])
    for weight, m in [(0.85, 0.501040), (-0.25, 1.277517)]:
        s = scenario("worked-7-taint-%s" % weight, "spec 5.7: the preferred-taint multiplier exp(-tanh(w))",
                     [candidate(0, taints=[5], load=load())], prompt_tokens=16, preferred_taints=[[5, weight]])
        assert abs(s["expect"]["costs"][0] - m) < 5e-7, s["expect"]["costs"]
        out.append(s)
    w8 = [candidate(0, cache=cache(3), load=load(0, 2)), candidate(1)]
    add(scenario("worked-8-no-multiplier", "spec 5.8: shared hits earn nothing at multiplier 0",
                 w8, prompt_tokens=64, role="prefill", has_tier_matches=True, shared_hits=[[0, 4]]), [3.0, 4.0])
    add(scenario("worked-8-half-multiplier", "spec 5.8: at multiplier 0.5 the cold worker wins on shared hits",
                 w8, {"shared_cache_multiplier": 0.5}, prompt_tokens=64, role="prefill", has_tier_matches=True,
                 shared_hits=[[0, 4]]), [2.5, 2.0])
    return out


def seeded():
    """Spec section 4: the seed-42 sequences, with rows listed in three orders."""
    spec = {0.0: [10, 30, 10, 10, 30, 20, 10, 10, 10, 20, 10, 20, 30, 10, 20, 20],
            0.7: [30, 20, 30, 10, 20, 20, 30, 20, 30, 10, 10, 30, 30, 20, 30, 30]}
    out = []
    for temperature, expected in spec.items():
        for order in ([10, 20, 30], [30, 10, 20], [20, 30, 10]):
            s = scenario("seed-42-T%s-order-%s" % (temperature, "-".join(map(str, order))),
                         "spec 4: seeded picks over three tied workers, independent of row order",
                         [candidate(i) for i in order], {"seed": 42, "temperature": temperature},
                         picks=(42, temperature, 16), prompt_tokens=16)
            assert [w for w, _ in s["expect"]["picks"]["sequence"]] == expected
            out.append(s)
    return out


def parity():
    """Spec section 5's larger fixture: N workers x 2 ranks, P in {1,17,127,2048}, T in {0,0.7}."""
    out = []
    for n in (8, 64):
        rows = []
        for wid in range(n):
            for rank in range(2):
                dev = (7 * wid + rank) % 9
                rows.append(candidate(wid, rank,
                                      cache=cache(dev, 2, 1, effective_blocks=dev + 0.5, effective_tokens=16 * dev + 8),
                                      load=load(19 * (wid % 7), wid % 11 + 3, wid % 5)))
        for prompt in (1, 17, 127, 2048):
            for temperature in (0.0, 0.7):
                out.append(scenario("parity-N%d-P%d-T%s" % (n, prompt, temperature),
                                    "spec 5: the parity fixture (dev=(7id+rank)%9, host 2, disk 1, E=dev+0.5)",
                                    rows, {"temperature": temperature, "seed": 42},
                                    picks=(42, temperature, 32), prompt_tokens=prompt, has_tier_matches=True))
    # The same fixture with every knob moved off its default, in each role and leg.
    rows = out[0]["candidates"]
    for role in ("prefill", "decode", "aggregated", "encode"):
        for track in (True, False):
            for cond in (False, True):
                out.append(scenario("parity-knobs-%s-track%d-cond%d" % (role, track, cond),
                                    "every knob off its default, every role and leg",
                                    rows, {"overlap_score_credit": 1.25, "overlap_score_credit_decay": 0.75,
                                           "prefill_load_scale": 1.5, "decode_active_request_weight": 0.5,
                                           "host_cache_hit_weight": 0.6, "disk_cache_hit_weight": 0.3,
                                           "shared_cache_multiplier": 0.4, "temperature": 0.5, "seed": 7},
                                    picks=(7, 0.5, 16), prompt_tokens=700, role=role, track_prefill_tokens=track,
                                    conditional_disagg=cond, has_tier_matches=True, shared_hits=[[0, 3], [5, 40]],
                                    preferred_taints=None))
    return out


def behaviours():
    """Spec section 6: filtering, overload, pins, taints and bad input."""
    hot = cache(4, effective_tokens=64)
    return [
        scenario("overloaded-high-overlap-skipped", "spec 6: an overloaded warm worker is skipped",
                 [candidate(0, overloaded=True, cache=hot), candidate(1)], prompt_tokens=64, has_tier_matches=True),
        scenario("all-overloaded", "spec 1: every eligible worker overloaded is its own error",
                 [candidate(0, overloaded=True), candidate(1, overloaded=True)], prompt_tokens=64),
        scenario("no-rows", "spec 1: no candidates at all", [], prompt_tokens=64),
        scenario("required-taints-filter", "spec 6: required taints remove workers without them",
                 [candidate(1, taints=[9]), candidate(2, taints=[0, 9], load=load(0, 50))],
                 prompt_tokens=16, required_taints=[0]),
        scenario("required-taints-none-match", "spec 6: no worker with the required taints is no_endpoints",
                 [candidate(1, taints=[9]), candidate(2, taints=[0])], prompt_tokens=16, required_taints=[3]),
        scenario("preferred-taint-attracts", "spec 6: a positive weight prefers matching workers",
                 [candidate(1), candidate(2, taints=[2])], prompt_tokens=64, preferred_taints=[[2, 1.0]]),
        scenario("preferred-taint-repels", "spec 6: a negative weight avoids matching workers",
                 [candidate(1), candidate(2, taints=[2])], prompt_tokens=64, preferred_taints=[[2, -1.0]]),
        scenario("pin-chosen-without-draw", "spec 1: a pin reduces the set to one row, costed without multiplier",
                 [candidate(1, taints=[2]), candidate(3, taints=[2], load=load(0, 1000))], {"temperature": 1},
                 prompt_tokens=16, pin=[3, 0], preferred_taints=[[2, 1.0]]),
        scenario("pin-not-allowed", "spec 1: a pin outside the rows", [candidate(1)], prompt_tokens=16, pin=[7, 0]),
        scenario("pin-overloaded", "spec 1: an overloaded pin", [candidate(1), candidate(2, overloaded=True)],
                 prompt_tokens=16, pin=[2, 0]),
        scenario("pin-ineligible", "spec 1: a pin without the required taints",
                 [candidate(1, taints=[0]), candidate(4)], prompt_tokens=16, pin=[4, 0], required_taints=[0]),
        scenario("approximate-mode-estimate", "spec 2: without tier matches the device credit is E_blocks",
                 [candidate(0, cache=cache(0, effective_blocks=2.5, effective_tokens=40)), candidate(1)],
                 prompt_tokens=64, role="prefill"),
        scenario("credit-zero-is-load-only", "spec 2 decision: no CACHE declared, so host and disk credit drop too",
                 [candidate(0, cache=cache(2, host=4, disk=4), load=load(0, 1)), candidate(1, load=load(0, 2))],
                 {"overlap_score_credit": 0}, prompt_tokens=64, has_tier_matches=True),
        scenario("legacy-weight-zero", "spec 3: overlap_score_weight 0 zeroes scale and credit",
                 [candidate(0, cache=cache(4), load=load(0, 3)), candidate(1, load=load(0, 2))],
                 {"overlap_score_weight": 0}, prompt_tokens=64, has_tier_matches=True),
        scenario("nan-estimate-rejected", "spec 1: a NaN estimate is an error naming the row",
                 [candidate(0), candidate(1, cache=cache(1, effective_blocks=float("nan"), effective_tokens=0))],
                 prompt_tokens=16),
    ]


def dump(s):
    def fix(x):
        if isinstance(x, float) and math.isnan(x):
            return "NaN"
        if isinstance(x, dict):
            return {k: fix(v) for k, v in x.items()}
        if isinstance(x, list):
            return [fix(v) for v in x]
        return x
    return json.dumps(fix(s), separators=(",", ":"), allow_nan=False)


def catalog():
    """The catalog's builtins (core/src/policies/catalog.rs), with costs written out by hand from each
    component's documented formula, not computed by a second implementation. A 10-block request
    (160 tokens); rows carry `dev` device blocks and `n` active requests (100 n prefill tokens,
    10 n decode blocks)."""
    def row(worker, dev, n):
        return candidate(worker, cache=cache(dev), load=load(100 * n, 10 * n, n))

    def case(name, why, policy, rows, costs=None, error=None):
        req = dict(REQUEST_DEFAULTS)
        req.update(prompt_tokens=160, block_size=16)
        expect = {"error": error}
        if costs is not None:
            present = [c for c in costs if c is not None]
            low = min(present)
            expect["costs"] = [None if c is None else float(c) for c in costs]
            expect["cost_bits"] = [None if c is None else "%016x" % struct_bits(float(c)) for c in costs]
            expect["argmin"] = sorted([r["worker"], r["rank"]] for r, c in zip(rows, costs) if c == low)
        return {"name": name, "why": why, "policy": policy, "request": req, "candidates": rows,
                "expect": expect}

    least = {"type": "least_loaded"}
    two_tier = {"type": "dynamo_two_tier"}
    sglang = {"type": "sglang_cache_aware"}
    # llm-d, prefix weight 2, KV capacity 100 blocks, over rows (dev 2, n 2) and (dev 8, n 6):
    # prefix -(2/10) * 2 and -(8/10) * 2; KV -(1 - 20/100) and -(1 - 60/100); queue (min 2, max 6)
    # -((6-2)/4) and -(0/4); summed in scorer order.
    llm_d = [(-(2 / 10)) * 2 + -(1 - 20 / 100) + -((6 - 2) / 4),
             (-(8 / 10)) * 2 + -(1 - 60 / 100) + -(0 / 4)]
    # libroute's own `ttft` type (core/src/policies/catalog.rs, FirstToken): five scorers summed in order,
    # queue + prefill + decode + delay to others + affinity, over the rows' cached tokens c (at
    # most P = 160), queued prefill tokens q, active requests n, and a speed (b, a, k): the one
    # the configuration gives, or 1 ms per token when neither it nor the rows have one. The
    # delay to others scales the crowd by each worker's estimate over the candidates' mean, and
    # the active requests by one plus their share of the mean (plus one). With a KV capacity of
    # C blocks, the queue part and the estimate add a * kv, the wait for KV room in prefill
    # tokens: kv = D * D * (bs / C) for the row's D booked (decode) blocks.
    def ttft(rows, b, a, k, others=1.0, share=0.5, slack=0.5, capacity=None):
        P = 160
        d = [float(r["load"]["active_decode_blocks"]) for r in rows]
        kv = [x * x * (16.0 / float(capacity)) if capacity else 0.0 for x in d]
        c = [min(r["cache"]["effective_tokens"], P) for r in rows]
        q = [r["load"]["active_prefill_tokens"] for r in rows]
        n = [r["load"]["active_requests"] for r in rows]
        # The crowd: the least wait any candidate has (queued prefill, plus the wait for KV room
        # when priced), times the candidates, over their total own-prefill time.
        own_ms = 0.0
        least = math.inf
        for i in range(len(rows)):
            wait = a * float(q[i]) + a * kv[i] if capacity else a * float(q[i])
            least = min(least, wait)
            own_ms += a * float(P - c[i])
        crowd = float(len(rows)) * least / own_ms if own_ms > 0.0 else 0.0
        busy = crowd / (1.0 + crowd)
        estimates = [b + a * float(q[i] + (P - c[i])) + k * float(n[i] + 1) for i in range(len(rows))]
        if capacity:
            estimates = [e + a * w for e, w in zip(estimates, kv)]
        best = min(estimates)
        total_estimate = 0.0
        for e in estimates:
            total_estimate += e
        mean = total_estimate / float(len(rows))
        total_active = 0.0
        for x in n:
            total_active += float(x)
        mean_active = total_active / float(len(rows))
        longest = max(c)
        costs = []
        for i in range(len(rows)):
            behind = crowd * estimates[i] / mean if mean > 0.0 else 0.0
            parts = [b + a * float(q[i]) + a * kv[i] if capacity else b + a * float(q[i]),
                     a * float(P - c[i]),
                     k * float(n[i] + 1),
                     others * (behind * a * float(P - c[i])
                               + k * (float(n[i]) * (1.0 + float(n[i]) / (mean_active + 1.0)))),
                     slack * busy * best if longest > 0 and float(c[i]) < share * float(longest) else 0.0]
            total = 0.0
            for x in parts:
                total += x
            costs.append(total)
        return costs

    speed = {"base_ms": 10.0, "ms_per_prefill_token": 0.5, "ms_per_active_request": 2.0}
    busy_rows = [row(1, 2, 1), row(2, 8, 3), row(3, 0, 0)]
    loaded_rows = [row(1, 2, 1), row(2, 8, 3), row(3, 0, 2)]
    idle_rows = [candidate(1, cache=cache(8), load=load(0, 40, 4)),
                 candidate(2, cache=cache(0), load=load(0, 0, 0))]
    return [
        case("catalog-ttft-busy", "ttft: every worker queues, the least 100 tokens (50 ms), so the "
             "crowd is 3 * 50 / (64 + 16 + 80) = 0.9375 and the delay to others and the affinity "
             "gate weigh in",
             {"type": "ttft", "speed": speed}, loaded_rows, ttft(loaded_rows, 10.0, 0.5, 2.0)),
        case("catalog-ttft-slack", "ttft: worker 3 is idle, so no one need queue behind anyone "
             "(crowd 0): no delay for those behind, no gate; worker 3 wins over worker 2, which "
             "holds the longest prefix behind 300 queued tokens",
             {"type": "ttft", "speed": speed}, busy_rows, ttft(busy_rows, 10.0, 0.5, 2.0)),
        case("catalog-ttft-idle", "ttft on an idle fleet: crowd 0, no gate; the cached prefix "
             "(8 of 10 blocks) outweighs 4 active requests",
             {"type": "ttft", "speed": speed}, idle_rows, ttft(idle_rows, 10.0, 0.5, 2.0)),
        case("catalog-ttft-unit-speed", "ttft without any speed: 1 ms per prefill token",
             {"type": "ttft", "others_weight": 2, "affinity_slack": 1}, loaded_rows,
             ttft(loaded_rows, 0.0, 1.0, 0.0, others=2.0, slack=1.0)),
        case("catalog-ttft-kv-room", "ttft with a KV capacity of 40 blocks: worker 2's 30 booked "
             "blocks (75% of its cache) wait for room, 16 * 30 * 0.75 = 360 prefill tokens more, "
             "worker 1's 10 blocks 40 tokens, worker 3's 20 blocks 160; the least wait, worker "
             "1's 70 ms, makes the crowd 3 * 70 / 160 = 1.3125",
             {"type": "ttft", "speed": speed, "kv_capacity_blocks": 40}, loaded_rows,
             ttft(loaded_rows, 10.0, 0.5, 2.0, capacity=40)),
        case("catalog-ttft-kv-room-unit-speed", "ttft with a KV capacity and no speed: the wait "
             "for room in prefill tokens, one past capacity (30 blocks of 20: 720 tokens)",
             {"type": "ttft", "kv_capacity_blocks": 20}, busy_rows,
             ttft(busy_rows, 0.0, 1.0, 0.0, capacity=20)),
        case("catalog-ttft-invalid-kv-capacity", "a KV capacity of 0 blocks",
             {"type": "ttft", "kv_capacity_blocks": 0}, [row(1, 0, 0)], error="invalid_config"),
        case("catalog-ttft-invalid-share", "affinity_share above 1",
             {"type": "ttft", "affinity_share": 1.5}, [row(1, 0, 0)], error="invalid_config"),
        case("catalog-ttft-invalid-speed", "a negative speed",
             {"type": "ttft", "speed": {"base_ms": -1.0, "ms_per_prefill_token": 0.5,
                                        "ms_per_active_request": 2.0}},
             [row(1, 0, 0)], error="invalid_config"),
        case("catalog-least-loaded-requests", "least_loaded: cost = active requests",
             least, [row(1, 0, 3), row(2, 0, 1), row(3, 0, 2)], [3, 1, 2]),
        case("catalog-least-loaded-prefill", "least_loaded by prefill tokens",
             {"type": "least_loaded", "metric": "prefill_tokens"},
             [row(1, 0, 3), row(2, 0, 1), row(3, 0, 2)], [300, 100, 200]),
        case("catalog-least-loaded-blocks", "least_loaded by active blocks",
             {"type": "least_loaded", "metric": "active_blocks"},
             [row(1, 0, 3), row(2, 0, 1), row(3, 0, 2)], [30, 10, 20]),
        case("catalog-two-tier-cache", "spread 30 <= 32; best overlap 6/10 > 0.5: cost = 6 - dev",
             two_tier, [row(1, 2, 10), row(2, 6, 12), row(3, 0, 40)], [4, 0, 6]),
        case("catalog-two-tier-load", "spread 40 > 32 and 50 > 1.1 * 10: by active requests",
             two_tier, [row(1, 2, 10), row(2, 6, 12), row(3, 0, 50)], [10, 12, 50]),
        case("catalog-two-tier-uncovered", "best overlap 5/10 is not above 0.5: by load",
             two_tier, [row(1, 2, 10), row(2, 5, 12)], [10, 12]),
        case("catalog-two-tier-empty-overlap", "no overlap anywhere: by load, all tied",
             two_tier, [row(1, 0, 4), row(2, 0, 4)], [4, 4]),
        case("catalog-sglang-match", "balanced, best match 4/10 > 0.3: cost = 4 - dev",
             sglang, [row(1, 1, 5), row(2, 4, 10)], [3, 0]),
        case("catalog-sglang-short-match", "best match 3/10 is not above 0.3: least loaded",
             sglang, [row(1, 1, 5), row(2, 3, 10)], [5, 10]),
        case("catalog-sglang-imbalanced", "100 - 20 > 64 and 100 > 1.5 * 20: least loaded",
             sglang, [row(1, 0, 20), row(2, 9, 100)], [20, 100]),
        case("catalog-llm-d", "prefix (weight 2) + KV utilization (100 blocks) + queue, negated",
             {"type": "llm_d", "prefix_weight": 2, "kv_capacity_blocks": 100},
             [row(1, 2, 2), row(2, 8, 6)], llm_d),
        case("catalog-round-robin-one", "no scorer: every candidate costs 0",
             {"type": "round_robin"}, [row(7, 3, 3)], [0]),
        case("catalog-overload-filter", "overload filter, max 10 requests: worker 2 removed",
             {"type": "least_loaded", "filters": [{"type": "overload", "max_requests": 10}]},
             [row(1, 0, 1), row(2, 0, 50), row(3, 0, 2)], [1, None, 2]),
        case("catalog-all-overloaded", "every row above the limit",
             {"type": "random", "filters": [{"type": "overload", "max_requests": 0}]},
             [row(1, 0, 1), row(2, 0, 2)], error="all_overloaded"),
        case("catalog-all-filtered", "the allow-list names no row",
             {"type": "least_loaded", "filters": [{"type": "allow_list", "workers": [9]}]},
             [row(1, 0, 1), row(2, 0, 2)], error="all_filtered"),
        case("catalog-default-type", "the default type is the default policy (spec worked 1 knobs)",
             {"type": "default", "prefill_load_scale": 2},
             [candidate(0, cache=cache(6), load=load(16, 5, 0))], [2 * (176 / 16 - 6) + 5]),
        case("catalog-unknown-type", "an unknown type is a configuration error",
             {"type": "fastest"}, [row(1, 0, 0)], error="invalid_config"),
        case("catalog-invalid-parameter", "coverage above 1",
             {"type": "dynamo_two_tier", "coverage": 1.5}, [row(1, 0, 0)], error="invalid_config"),
    ]


def main():
    files = {"worked.jsonl": worked(), "seeded.jsonl": seeded(), "parity.jsonl": parity(),
             "behaviours.jsonl": behaviours(), "catalog.jsonl": catalog()}
    check = "--check" in sys.argv[1:]
    stale = []
    for name, scenarios in files.items():
        text = "".join(dump(s) + "\n" for s in scenarios)
        path = OUT / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print("wrote %s (%d scenarios)" % (path, len(scenarios)))
    if stale:
        print("stale corpus files (run python3 testdata/generate.py):", *stale, sep="\n  ", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
