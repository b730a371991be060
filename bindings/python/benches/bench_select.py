"""One select of 64 candidates from Python, the workload of the Rust and Go benchmarks.

    target/python-venv/bin/python bindings/python/benches/bench_select.py

Prints, for each way of passing the rows, the median of 7 timed runs after a warm-up, in ns
per call.
"""

import statistics
import time

import libroute


def fleet(n):
    """The Rust benchmarks' fleet (benches/src/lib.rs)."""
    rows = []
    for i in range(n):
        half = (i * 37) % 97
        rows.append(
            libroute.Row(
                worker=libroute.Worker(worker_id=i),
                cache=libroute.RowCache(
                    device_blocks=0, effective_blocks=half * 0.5, effective_tokens=half * 8
                ),
                load=libroute.RowLoad(
                    active_prefill_tokens=(i * 131) % 4096,
                    active_decode_blocks=(i * 17) % 509,
                    active_requests=i % 13,
                ),
            )
        )
    return rows


def main():
    policy = libroute.Policy("{}")
    selector = libroute.Selector(4096, 0)
    rows = fleet(64)
    request = libroute.Request(prompt_tokens=2048, block_size=16, role=libroute.Role.AGGREGATED)
    n = 2_000
    for _ in range(200):
        selector.select(policy, request, rows)
    runs = []
    for _ in range(7):
        start = time.perf_counter_ns()
        for _ in range(n):
            selector.select(policy, request, rows)
        runs.append((time.perf_counter_ns() - start) / n)
    report("select (Row records)", runs, n)
    n = 50_000
    runs = []
    for _ in range(7):
        start = time.perf_counter_ns()
        for _ in range(n):
            selector.select_packed(policy, request, libroute.pack_rows(rows))
        runs.append((time.perf_counter_ns() - start) / n)
    report("pack_rows + select_packed", runs, n)
    packed = libroute.pack_rows(rows)
    runs = []
    for _ in range(7):
        start = time.perf_counter_ns()
        for _ in range(n):
            selector.select_packed(policy, request, packed)
        runs.append((time.perf_counter_ns() - start) / n)
    report("select_packed (rows kept packed)", runs, n)


def report(what, runs, n):
    print(f"python {what}, 64 candidates: median {statistics.median(runs):.0f} ns "
          f"(min {min(runs):.0f}, max {max(runs):.0f}) over 7 runs of {n}")


if __name__ == "__main__":
    main()
