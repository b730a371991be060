"""One select of 64 candidates from Python, the workload of the Rust and Go benchmarks.

    cargo xtask python        # builds the wheel and a fresh environment with it and NumPy
    target/python-fresh/bin/python bindings/python/benches/bench_select.py

Prints, for each way of passing the rows, the median of 7 timed runs after a warm-up, in ns
per call, with the fastest and slowest run.
"""

import statistics
import time

import numpy as np

import libroute


def fleet(n):
    """The Rust benchmarks' fleet (benches/src/lib.rs), as Row objects."""
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


def timed(what, call, n):
    for _ in range(n // 10):
        call()
    runs = []
    for _ in range(7):
        start = time.perf_counter_ns()
        for _ in range(n):
            call()
        runs.append((time.perf_counter_ns() - start) / n)
    print(
        f"python {what}, 64 candidates: median {statistics.median(runs):.0f} ns "
        f"(min {min(runs):.0f}, max {max(runs):.0f}) over 7 runs of {n}"
    )


def main():
    policy = libroute.Policy("{}")
    selector = libroute.Selector(4096, 0)
    rows = fleet(64)
    array = libroute.rows_array(rows)
    assert isinstance(array, np.ndarray)
    packed = libroute.pack_rows(rows)
    request = libroute.Request(prompt_tokens=2048, block_size=16, role=libroute.Role.AGGREGATED)
    select = selector.select
    timed("select (NumPy array of ROW_DTYPE, read in place)", lambda: select(policy, request, array), 200_000)
    timed("select (bytes of packed rows)", lambda: select(policy, request, packed), 200_000)
    timed("select (list of Row objects)", lambda: select(policy, request, rows), 100_000)
    timed("select_explained (list of Row objects)", lambda: selector.select_explained(policy, request, rows), 20_000)


if __name__ == "__main__":
    main()
