"""A vLLM-style KV-event publisher, run as its own process by `test_kv_events.py`.

The event classes are vLLM's, field for field, in the two wire forms vLLM has used:

- ``array``: ``vllm/distributed/kv_events.py`` as vLLM first published KV events (the version
  in HabanaAI/vllm-fork, a vLLM fork, at commit 428c45d0): msgspec structs with ``array_like=True``, ``BlockStored`` without
  ``medium``, ``EventBatch`` without ``data_parallel_rank``, integer block hashes.
- ``map``: the same file in vllm-project/vllm at commit 0181ea31 (later vLLM): no ``array_like``
  (structs are maps), ``medium``, ``lora_name``, ``extra_keys``, ``group_idx`` and the cache-spec
  fields, ``data_parallel_rank``, and block hashes that are bytes (SHA-256) or integers.

The socket protocol is vLLM's ``ZmqEventPublisher``: a PUB socket sending (topic, 8-byte
big-endian sequence number, msgpack payload), and a ROUTER replay socket that answers a start
sequence number with every buffered (seq, payload) from there and an end marker (seq -1).
To exercise gap recovery the publisher never sends some batches on the PUB socket: they are
only in the replay buffer.

Usage: ``python kv_publisher.py FORM SEED BATCHES PUB_ENDPOINT REPLAY_ENDPOINT``. Prints
``ready`` once bound; on a line on stdin it publishes the stream, prints ``done LAST_SEQ``, and
serves replay requests until stdin closes.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time
from typing import Any

import msgspec

BLOCK = 16
DROPPED = 3  # batches with seq % 7 == DROPPED are only in the replay buffer


# --- vLLM's first classes (array_like) ---------------------------------------------------------


class EventBatchV09(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):  # type: ignore[call-arg]
    ts: float
    events: list[Any]


class KVCacheEventV09(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):  # type: ignore[call-arg]
    """Base class for all KV cache-related events"""


class BlockStoredV09(KVCacheEventV09, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None


class BlockRemovedV09(KVCacheEventV09, tag="BlockRemoved"):
    block_hashes: list[int]


class AllBlocksClearedV09(KVCacheEventV09, tag="AllBlocksCleared"):
    pass


# --- later vLLM's classes (maps) -------------------------------------------------------------

ExternalBlockHash = bytes | int


class EventBatch(msgspec.Struct, omit_defaults=True, gc=False):  # type: ignore[call-arg]
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):  # type: ignore[call-arg]
    """Base class for all KV cache-related events"""


class BlockStored(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


# --- the stream ------------------------------------------------------------------------------


def stream(form: str, seed: int, batches: int) -> list[list[tuple]]:
    """The engine's events, batch by batch, as plain tuples (the test's model reads them too):

    ("stored", hashes, parent, tokens, lora, medium), ("removed", hashes, medium), ("cleared",).
    `lora` is the adapter's identity as libroute salts hashes with it: the name, or the id's
    digits for the array form (which has only `lora_id`).
    """
    rng = random.Random(seed)
    held: dict[Any, tuple[Any, list[int], Any, str]] = {}  # engine hash -> (parent, tokens, lora, medium)
    out = []
    for _ in range(batches):
        batch: list[tuple] = []
        for _ in range(rng.randint(1, 4)):
            roll = rng.random()
            if roll < 0.6 or not held:
                # Store 1-6 blocks: a new sequence, or blocks after one already held.
                parent = rng.choice(list(held)) if held and rng.random() < 0.5 else None
                if parent is not None:
                    _, _, lora, _ = held[parent]
                else:
                    lora = rng.choice([None, None, "adapter-3" if form == "map" else "5"])
                medium = "GPU" if form == "array" else rng.choice(["GPU", "GPU", "CPU"])
                tokens = [rng.randrange(152_064) for _ in range(BLOCK * rng.randint(1, 6))]
                hashes = []
                prev = parent
                for b in range(len(tokens) // BLOCK):
                    block = tokens[b * BLOCK : (b + 1) * BLOCK]
                    if form == "map" and rng.random() < 0.5:
                        h: Any = hashlib.sha256(repr((prev, block, lora)).encode()).digest()
                    else:
                        h = rng.randrange(-(2**63), 2**63)
                    hashes.append(h)
                    held[h] = (prev, block, lora, medium)
                    prev = h
                batch.append(("stored", hashes, parent, tokens, lora, medium))
            elif roll < 0.998:
                gone = rng.sample(list(held), min(len(held), rng.randint(1, 2)))
                medium = held[gone[0]][3]
                gone = [h for h in gone if held[h][3] == medium]
                for h in gone:
                    del held[h]
                batch.append(("removed", gone, medium))
            else:
                held.clear()
                batch.append(("cleared",))
        out.append(batch)
    return out


def encode(form: str, seq: int, batch: list[tuple]) -> bytes:
    events: list[Any] = []
    for e in batch:
        if e[0] == "stored":
            _, hashes, parent, tokens, lora, medium = e
            if form == "array":
                events.append(BlockStoredV09(hashes, parent, tokens, BLOCK, None if lora is None else int(lora)))
            else:
                events.append(
                    BlockStored(
                        hashes, parent, tokens, BLOCK, None, medium, lora,
                        extra_keys=[None] * len(hashes), group_idx=0,
                    )
                )
        elif e[0] == "removed":
            _, hashes, medium = e
            events.append(BlockRemovedV09(hashes) if form == "array" else BlockRemoved(hashes, medium))
        else:
            events.append(AllBlocksClearedV09() if form == "array" else AllBlocksCleared())
    ts = 1.7e9 + seq
    batch_struct: Any = EventBatchV09(ts, events) if form == "array" else EventBatch(ts, events, data_parallel_rank=0)
    return msgspec.msgpack.encode(batch_struct)


def main() -> None:
    import zmq

    form, seed, batches, pub_endpoint, replay_endpoint = sys.argv[1:6]
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    pub.bind(pub_endpoint)
    replay = ctx.socket(zmq.ROUTER)
    replay.bind(replay_endpoint)
    # An endpoint's port may be `*`: the system picks a free one as it binds (a port chosen free
    # by the caller beforehand can be taken before this binds it). Report what was bound.
    bound = [s.getsockopt(zmq.LAST_ENDPOINT).decode() for s in (pub, replay)]
    print("ready", *bound, flush=True)
    sys.stdin.readline()
    buffer: list[tuple[int, bytes]] = []
    topic = b"kv@engine"
    for seq, batch in enumerate(stream(form, int(seed), int(batches))):
        payload = encode(form, seq, batch)
        buffer.append((seq, payload))
        if seq % 7 != DROPPED:
            pub.send_multipart((topic, seq.to_bytes(8, "big"), payload))
        time.sleep(0.001)
    print(f"done {len(buffer) - 1}", flush=True)
    # Serve replay requests until the test closes stdin.
    poller = zmq.Poller()
    poller.register(replay, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    while True:
        ready = dict(poller.poll(100))
        if replay in ready:
            client, _, start = replay.recv_multipart()
            first = int.from_bytes(start, "big")
            for seq, payload in buffer:
                if seq >= first:
                    replay.send_multipart((client, b"", seq.to_bytes(8, "big"), payload))
            replay.send_multipart((client, b"", (-1).to_bytes(8, "big", signed=True), b""))
        if sys.stdin.fileno() in ready or sys.stdin in ready:
            if not sys.stdin.readline():
                break
    pub.close(linger=0)
    replay.close(linger=0)


if __name__ == "__main__":
    main()
