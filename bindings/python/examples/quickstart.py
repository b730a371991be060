import libroute

policy = libroute.Policy('{"temperature": 0}')  # immutable and thread-safe: share one
selector = libroute.Selector(64, 12345)          # capacity, entropy; one per thread is fastest

rows = [  # one per candidate worker: what it caches of this prompt, and its load
    libroute.Row(
        worker=libroute.Worker(worker_id=1),
        cache=libroute.RowCache(device_blocks=6, effective_blocks=6.0, effective_tokens=96),
        load=libroute.RowLoad(active_prefill_tokens=32, active_decode_blocks=10, active_requests=1),
    ),
    libroute.Row(
        worker=libroute.Worker(worker_id=2),
        load=libroute.RowLoad(active_prefill_tokens=0, active_decode_blocks=2, active_requests=0),
    ),
]
request = libroute.Request(prompt_tokens=128, block_size=16, role=libroute.Role.AGGREGATED)
try:
    chosen = selector.select(policy, request, rows)
except libroute.RouteError as e:  # RouteError.NoEndpoints, .InvalidRow, ... with e.detail
    raise SystemExit(f"no route: {e}")
print(f"worker {chosen.worker.worker_id}, cost {chosen.cost}, breakdown {chosen.contributions}")
# Hot path: keep rows packed (bytes, or a NumPy array of libroute.ROW_DTYPE): read in place.
assert selector.select(policy, request, libroute.pack_rows(rows)) == chosen
