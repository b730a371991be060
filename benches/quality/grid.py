#!/usr/bin/env python3
"""The `ttft` policy against every builtin on random built-in workloads it was not tuned on.

Draws CASES workloads from SEED (fleet size, cache size, arrival rate, popularity skew, apps,
sessions, turns, system-prompt length, output length all varied), replays each through every
policy with `cargo replay --json` and prints a markdown table: `ttft`'s TTFT mean and p90 beside
the best builtin's, and how often `ttft` is the best. The draws depend only on SEED, so a table
is reproducible and a new SEED is a new held-out set. With `-- --engine aisimulate` the cache
size is given to the engine simulator as the same number of tokens in its 64-token blocks.

Usage: grid.py [--cases N (24)] [--seed S (7)] [--requests N (3000)] [--replay CMD]
               [-- extra replay options, e.g. --approximate or --engine aisimulate]
CMD defaults to `target/release/replay` when it exists, else `cargo replay`."""

import json
import os
import random
import shlex
import subprocess
import sys

from scorecard import ms

CHOICES = [
    ("--workers", [4, 8, 16, 32]),
    ("--cache-blocks", [256, 1024, 2048, 8192]),
    ("--rate", [5, 10, 20, 40, 80]),
    ("--zipf", [0.6, 1.1, 1.5]),
    ("--apps", [1, 4, 16]),
    ("--sessions", [50, 400, 2000]),
    ("--max-turns", [2, 8, 20]),
    ("--system-blocks", [1, 8, 32]),
    ("--output-tokens", [50, 200, 800]),
]

# Tokens per block of the fleet model's cache (`cargo replay --block-tokens` default) and of the
# engine simulator's KV cache (its `--block-size` default).
FLEET_BLOCK = 512
ENGINE_BLOCK = 64


def cases(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        args = ["--seed", str(rng.randint(1, 10**6))]
        for flag, values in CHOICES:
            args += [flag, str(rng.choice(values))]
        out.append(args)
    return out


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    opts = {"--cases": "24", "--seed": "7", "--requests": "3000", "--replay": None}
    while argv:
        flag = argv.pop(0)
        if flag not in opts or not argv:
            sys.exit(f"grid.py: unknown option or missing value: {flag}\n{__doc__}")
        opts[flag] = argv.pop(0)
    replay = opts["--replay"]
    if replay is None:
        replay = "target/release/replay" if os.path.exists("target/release/replay") else "cargo replay"
    print(f"Workloads: {opts['--cases']} drawn from seed {opts['--seed']}, "
          f"{opts['--requests']} requests each; replay options: {' '.join(extra) or '(none)'}\n")
    print("| workload | ttft mean | best builtin mean | ttft p90 | best builtin p90 | ttft mean / best |")
    print("| --- | ---: | --- | ---: | --- | ---: |")
    best_mean = best_p90 = within = 0
    ratios = []
    for args in cases(int(opts["--cases"]), int(opts["--seed"])):
        if "aisimulate" in extra:
            # The engine counts its KV cache in its own blocks: the same tokens per worker.
            i = args.index("--cache-blocks")
            args = args[:i] + ["--kv-blocks", str(int(args[i + 1]) * FLEET_BLOCK // ENGINE_BLOCK)] + args[i + 2:]
        cmd = shlex.split(replay) + ["--json", "--requests", opts["--requests"]] + args + extra
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"grid.py: {' '.join(cmd)} failed:\n{done.stderr}")
        reports = {r["report"]["policy"]: r["report"] for r in json.loads(done.stdout)["runs"]}
        t = reports.pop("ttft")
        mean = min(reports.values(), key=lambda r: r["ttft_mean_ms"])
        p90 = min(reports.values(), key=lambda r: r["ttft_p90_ms"])
        ratio = t["ttft_mean_ms"] / mean["ttft_mean_ms"]
        best_mean += t["ttft_mean_ms"] <= mean["ttft_mean_ms"]
        best_p90 += t["ttft_p90_ms"] <= p90["ttft_p90_ms"]
        within += ratio <= 1.1
        ratios.append(ratio)
        print(f"| `{' '.join(args)}` | {ms(t['ttft_mean_ms'])} | {ms(mean['ttft_mean_ms'])} "
              f"({mean['policy']}) | {ms(t['ttft_p90_ms'])} | {ms(p90['ttft_p90_ms'])} "
              f"({p90['policy']}) | {ratio:.2f} |")
    ratios.sort()
    geo = 1.0
    for r in ratios:
        geo *= r ** (1 / len(ratios))
    print(f"\n`ttft` has the lowest TTFT mean in {best_mean} of {len(ratios)} workloads and the lowest p90 "
          f"in {best_p90}; its mean is within 10% of the best builtin's in {within}. Its mean over "
          f"the best builtin's: geometric mean {geo:.2f}, median {ratios[len(ratios) // 2]:.2f}, "
          f"worst {ratios[-1]:.2f}.")


if __name__ == "__main__":
    main()
