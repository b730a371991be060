"""Engines' KV events end to end: a real publisher process (pyzmq and msgspec, vLLM's event
classes and socket protocol, `kv_publisher.py`) streams stored, removed and cleared blocks with
gaps, LoRA adapters and bytes-typed hashes; a subscriber here (ZMQ SUB, and the replay socket on
every gap) hands each payload to `Router.apply_kv_batch`; afterwards every prefix the engines
stored is routed, and the overlaps the router finds equal a model's."""

from __future__ import annotations

import pathlib
import queue
import subprocess
import sys
import threading

import pytest

import libroute

zmq = pytest.importorskip("zmq")
pytest.importorskip("msgspec")

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import kv_publisher  # noqa: E402

BLOCK = kv_publisher.BLOCK
TIER = {"GPU": 0, "CPU": 1}


class Publisher:
    """`kv_publisher.py` in its own process, bound to two loopback ports it picks and reports."""

    def __init__(self, form: str, seed: int, batches: int):
        self.proc = subprocess.Popen(
            [sys.executable, str(pathlib.Path(kv_publisher.__file__)), form, str(seed), str(batches), "tcp://127.0.0.1:*", "tcp://127.0.0.1:*"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready, self.pub, self.replay = self.proc.stdout.readline().split()
        assert ready == "ready"
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(l) for l in self.proc.stdout], daemon=True).start()

    def start(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def last_seq(self) -> int | None:
        try:
            line = self.lines.get_nowait()
        except queue.Empty:
            return None
        assert line.startswith("done ")
        return int(line.split()[1])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def subscribe(router: libroute.Router, worker: libroute.Worker, publisher: Publisher) -> dict[str, int]:
    """Applies the stream in order, asking the replay socket for what the PUB socket missed."""
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(publisher.pub)
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(publisher.replay)
    stats = {"live": 0, "replayed": 0, "gaps": 0, "stored": 0, "removed": 0, "clears": 0}
    next_seq = 0

    def apply(payload: bytes) -> None:
        nonlocal next_seq
        s = router.apply_kv_batch(worker, payload)
        stats["stored"] += s.stored_blocks
        stats["removed"] += s.removed_blocks
        stats["clears"] += s.clears
        assert s.orphaned_blocks == 0 and s.unknown_removals == 0
        next_seq += 1

    def catch_up() -> None:
        stats["gaps"] += 1
        dealer.send_multipart([b"", next_seq.to_bytes(8, "big")])
        while True:
            _, seq_bytes, payload = dealer.recv_multipart()
            seq = int.from_bytes(seq_bytes, "big", signed=True)
            if seq == -1:
                return
            if seq == next_seq:
                stats["replayed"] += 1
                apply(payload)

    import time

    time.sleep(0.2)  # let the SUB socket join before the first batch
    publisher.start()
    last = None
    while last is None or next_seq <= last:
        if sub.poll(300):
            _, seq_bytes, payload = sub.recv_multipart()
            seq = int.from_bytes(seq_bytes, "big")
            if seq > next_seq:
                catch_up()
            if seq == next_seq:
                stats["live"] += 1
                apply(payload)
        else:
            last = publisher.last_seq() if last is None else last
            if last is not None and next_seq <= last:
                catch_up()  # the stream's tail was dropped
    sub.close(linger=0)
    dealer.close(linger=0)
    return stats


class Model:
    """The engine's cache as the router should see it: router hash -> tiers held."""

    def __init__(self) -> None:
        self.prefix: dict[object, tuple[list[int], str | None]] = {}  # engine hash -> (tokens, lora)
        self.router_hash: dict[object, int] = {}
        self.held: dict[int, set[int]] = {}
        self.prefixes: list[tuple[list[int], str | None]] = []

    def apply(self, batch: list[tuple]) -> None:
        for e in batch:
            if e[0] == "stored":
                _, hashes, parent, tokens, lora, medium = e
                prefix = list(self.prefix[parent][0]) if parent is not None else []
                for b, h in enumerate(hashes):
                    prefix = prefix + tokens[b * BLOCK : (b + 1) * BLOCK]
                    self.prefix[h] = (prefix, lora)
                    r = libroute.block_hashes(prefix, BLOCK, lora)[-1]
                    self.router_hash[h] = r
                    self.held.setdefault(r, set()).add(TIER[medium])
                self.prefixes.append((prefix, lora))
            elif e[0] == "removed":
                _, hashes, medium = e
                for h in hashes:
                    self.held[self.router_hash[h]].discard(TIER[medium or "GPU"])
            else:
                self.held.clear()

    def overlap(self, hashes: list[int]) -> tuple[int, int, int]:
        counts = [0, 0, 0]
        for h in hashes:
            tiers = self.held.get(h)
            if not tiers:
                break
            counts[min(tiers)] += 1
        return tuple(counts)


@pytest.mark.parametrize("batches", [300])
def test_a_publisher_stream_with_gaps_matches_the_model(batches: int) -> None:
    workers = [libroute.Worker(worker_id=1), libroute.Worker(worker_id=2)]
    forms = ["array", "map"]
    router = libroute.Router(
        libroute.RouterConfig(block_slots=1 << 16, request_slots=64, host_weight=0.75, disk_weight=0.25)
    )
    router.read_kv_batches(BLOCK, 1 << 16)
    models = []
    for seed, (worker, form) in enumerate(zip(workers, forms)):
        router.add_worker(worker)
        publisher = Publisher(form, seed, batches)
        try:
            stats = subscribe(router, worker, publisher)
        finally:
            publisher.close()
        assert stats["gaps"] >= 1 and stats["replayed"] >= batches // 7, stats
        assert stats["live"] + stats["replayed"] == batches, stats
        assert stats["stored"] > 0 and stats["removed"] > 0, stats
        model = Model()
        for batch in kv_publisher.stream(form, seed, batches):
            model.apply(batch)
        models.append(model)

    policy, selector = libroute.Policy("{}"), libroute.Selector(16, 1)
    checked = 0
    for w, model in enumerate(models):
        overlaps = [sum(model.overlap(libroute.block_hashes(p, BLOCK, lora))) for p, lora in model.prefixes]
        # The stream leaves prefixes whole, cut short by removals, and gone: all three are checked.
        whole = sum(o == len(p) // BLOCK for o, (p, _) in zip(overlaps, model.prefixes))
        cut = sum(0 < o < len(p) // BLOCK for o, (p, _) in zip(overlaps, model.prefixes))
        assert whole >= 30 and cut >= 10 and len(overlaps) - whole - cut >= 10, (whole, cut, len(overlaps))
        for prefix, lora in model.prefixes:
            hashes = libroute.block_hashes(prefix, BLOCK, lora)
            request = libroute.Request(prompt_tokens=len(prefix), block_size=BLOCK, role=libroute.Role.AGGREGATED)
            rows = [libroute.Row(worker=x) for x in workers]
            routed = router.route(policy, selector, request, hashes, rows, 1000 + checked, 0)
            router.free_request(1000 + checked)
            for x, m in enumerate(models):
                cache = routed.rows[x].cache
                got = (0, 0, 0) if cache is None else (cache.device_blocks, cache.host_blocks, cache.disk_blocks)
                # The other engine never stored this worker's (random) tokens.
                assert got == m.overlap(hashes), (w, x, prefix[:4], lora)
            checked += 1
    assert checked == sum(len(m.prefixes) for m in models)


def test_bad_payloads_name_the_byte_and_change_nothing() -> None:
    router = libroute.Router(libroute.RouterConfig(block_slots=64, request_slots=64))
    worker = libroute.Worker(worker_id=1)
    batch = [("stored", [11, 12], None, list(range(32)), None, "GPU")]
    payload = kv_publisher.encode("map", 0, batch)
    with pytest.raises(libroute.RouteError.InvalidArgument, match="read_kv_batches"):
        router.apply_kv_batch(worker, payload)
    router.read_kv_batches(BLOCK, 64)
    for cut in range(len(payload)):
        with pytest.raises(libroute.RouteError.InvalidArgument, match=r"KV event payload, byte \d+"):
            router.apply_kv_batch(worker, payload[:cut])
    assert router.counters().blocks == 0
    # block_size 16 -> 8: 32 tokens are 4 blocks of 8, not 2.
    wrong = kv_publisher.encode("array", 0, batch).replace(b"\x10\xc0", b"\x08\xc0")
    with pytest.raises(libroute.RouteError.InvalidArgument, match="byte 28: 32 token ids for 2 blocks of 8 tokens"):
        router.apply_kv_batch(worker, wrong)
    four = [("stored", [11, 12, 13, 14], None, list(range(32)), None, "GPU")]
    wrong = kv_publisher.encode("array", 0, four).replace(b"\x10\xc0", b"\x08\xc0")
    with pytest.raises(libroute.RouteError.InvalidArgument, match="block_size 8 differs from the router's block size 16"):
        router.apply_kv_batch(worker, wrong)
    assert router.counters().blocks == 0
    s = router.apply_kv_batch(worker, payload)
    assert (s.events, s.stored_blocks, s.worker) == (1, 2, worker)
    assert router.counters().blocks == 2
    assert libroute.block_hashes(list(range(33)), BLOCK) == libroute.block_hashes(list(range(32)), BLOCK)
    with pytest.raises(libroute.RouteError.InvalidArgument):
        libroute.block_hashes([1, 2], 0)
