"""The hot path from Python: candidates kept in a NumPy array of libroute.ROW_DTYPE, one row per
worker, updated column by column and read in place by every select and route."""

import numpy as np

import libroute

# One row per worker, allocated once. `flags` says which groups a row carries.
rows = np.zeros(4, dtype=libroute.ROW_DTYPE)
rows["worker_id"] = [10, 11, 12, 13]
rows["flags"] = libroute.HAS_LOAD
rows["active_prefill_tokens"] = [512, 0, 64, 2048]
rows["active_decode_blocks"] = [40, 8, 12, 90]
rows["active_requests"] = [4, 1, 1, 9]

policy = libroute.Policy("{}")
selector = libroute.Selector(64, 12345)
request = libroute.Request(prompt_tokens=256, block_size=16, role=libroute.Role.AGGREGATED)
print("select:", selector.select(policy, request, rows).worker.worker_id)

# A router fills the cache and load it knows into the same array, in place.
router = libroute.Router(libroute.RouterConfig(block_slots=1024, request_slots=256))
for worker_id in rows["worker_id"]:
    router.add_worker(libroute.Worker(worker_id=int(worker_id)))
router.apply_kv_events(
    [libroute.KvEvent.STORED(worker=libroute.Worker(worker_id=13), tier=libroute.Tier.DEVICE, hashes=[1, 2, 3, 4])]
)
rows["flags"] = 0  # the router sets what it finds
chosen = router.route_into(policy, selector, request, [1, 2, 3, 4, 5], rows, 1, 0)
print("route:", chosen.worker.worker_id, "cached blocks:", rows["device_blocks"].tolist())
