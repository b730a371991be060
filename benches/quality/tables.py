#!/usr/bin/env python3
"""Markdown tables of `cargo replay --json` and `cargo replay --engine aisimulate --json` side by
side: one table per load, a row per policy, each simulator's hit rate, TTFT and its rank by TTFT
p90. Usage: tables.py FLEET.json ENGINE.json"""

import json
import sys


def runs(path):
    with open(path) as f:
        doc = json.load(f)
    out = {}
    for run in doc["runs"]:
        out.setdefault(run["load"], {})[run["report"]["policy"]] = run["report"]
    return out


def ranks(by_policy, key):
    order = sorted(by_policy, key=lambda p: by_policy[p][key])
    return {p: i + 1 for i, p in enumerate(order)}


def main():
    fleet, engine = runs(sys.argv[1]), runs(sys.argv[2])
    for load in sorted(fleet):
        f, e = fleet[load], engine.get(load, {})
        rf, re_ = ranks(f, "ttft_p90_ms"), ranks(e, "ttft_p90_ms")
        ceiling_f = next(iter(f.values()))["hit_rate_ceiling"]
        ceiling_e = next(iter(e.values()))["hit_rate_ceiling"] if e else float("nan")
        print(f"Load x{load:g} (ceiling: fleet {100 * ceiling_f:.1f}%, engine {100 * ceiling_e:.1f}%):\n")
        print("| policy | fleet hit | fleet TTFT mean | p90 | p99 | rank | engine hit | engine TTFT mean | p90 | p99 | rank |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for p in f:
            a, b = f[p], e.get(p)
            row = f"| {p} | {100 * a['hit_rate']:.1f}% | {a['ttft_mean_ms']:.0f} | {a['ttft_p90_ms']:.0f} | {a['ttft_p99_ms']:.0f} | {rf[p]} |"
            if b:
                row += f" {100 * b['hit_rate']:.1f}% | {b['ttft_mean_ms']:.0f} | {b['ttft_p90_ms']:.0f} | {b['ttft_p99_ms']:.0f} | {re_[p]} |"
            else:
                row += " | | | | |"
            print(row)
        print()


if __name__ == "__main__":
    main()
