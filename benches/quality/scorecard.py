#!/usr/bin/env python3
"""The `ttft` policy against every builtin, as a markdown scorecard: one row per workload,
simulator, mode and load; the best builtin's TTFT p90 and mean (lower is better) and hit rate,
and whether the three targets of issue 12 are met. Usage: scorecard.py LABEL=FILE.json ..."""

import json
import sys


def rows(label, path):
    with open(path) as f:
        doc = json.load(f)
    by = {}
    for run in doc["runs"]:
        by.setdefault(run["load"], {})[run["report"]["policy"]] = run["report"]
    out = []
    for load, pol in sorted(by.items()):
        t = pol["ttft"]
        rest = {k: v for k, v in pol.items() if k != "ttft"}
        p90 = min(rest.values(), key=lambda r: r["ttft_p90_ms"])
        mean = min(rest.values(), key=lambda r: r["ttft_mean_ms"])
        hit = max(rest.values(), key=lambda r: r["hit_rate"])
        ok = (t["ttft_p90_ms"] < p90["ttft_p90_ms"],
              t["ttft_mean_ms"] <= mean["ttft_mean_ms"],
              t["hit_rate"] >= 0.95 * hit["hit_rate"])
        out.append((label, load, t, p90, mean, hit, ok))
    return out


def ms(x):
    return f"{x / 1000:.1f} s" if x >= 10000 else f"{x:.0f}"


def main():
    all_rows = []
    for arg in sys.argv[1:]:
        label, path = arg.split("=", 1)
        all_rows += rows(label, path)
    print("| workload, simulator, mode | load | ttft p90 | best builtin p90 | ttft mean | best builtin mean | ttft hit | best builtin hit | p90 / mean / hit |")
    print("| --- | ---: | ---: | --- | ---: | --- | ---: | --- | :---: |")
    met = [0, 0, 0]
    for label, load, t, p90, mean, hit, ok in all_rows:
        for i, o in enumerate(ok):
            met[i] += o
        marks = " / ".join("yes" if o else "**no**" for o in ok)
        print(f"| {label} | x{load:g} | {ms(t['ttft_p90_ms'])} | {ms(p90['ttft_p90_ms'])} ({p90['policy']}) "
              f"| {ms(t['ttft_mean_ms'])} | {ms(mean['ttft_mean_ms'])} ({mean['policy']}) "
              f"| {100 * t['hit_rate']:.1f}% | {100 * hit['hit_rate']:.1f}% ({hit['policy']}) | {marks} |")
    n = len(all_rows)
    print(f"\nTargets met: TTFT p90 lower than every builtin in {met[0]} of {n} cells, TTFT mean no "
          f"higher than the best builtin's in {met[1]} of {n}, hit rate at least 95% of the best "
          f"builtin's in {met[2]} of {n}.")


if __name__ == "__main__":
    main()
