"""Type stubs of libroute's native extension (`libroute._native`, PyO3)."""

from typing import ClassVar, Final, Sequence, final

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer, Self, disjoint_base

__all__ = [
    "BlockRange",
    "Candidate",
    "Disposition",
    "ERROR_STATUSES",
    "Explained",
    "Inputs",
    "KvEvent",
    "LedgerEvent",
    "PickReason",
    "Policy",
    "PolicySet",
    "PreferredTaint",
    "ROW_BYTES",
    "Request",
    "Role",
    "Routed",
    "Router",
    "RouterConfig",
    "RouterCounters",
    "KvBatchSummary",
    "block_hashes",
    "Row",
    "RowCache",
    "RowExplanation",
    "RowLoad",
    "RowSpeed",
    "Selection",
    "Selector",
    "Tier",
    "Worker",
    "pack_rows",
    "unpack_rows",
    "version",
]

#: Bytes per packed row: the C `libroute_row`.
ROW_BYTES: Final[int]
#: (name, libroute_status code) of every `RouteError` variant but `Closed`.
ERROR_STATUSES: Final[list[tuple[str, int]]]

#: Rows: a sequence of `Row`, or a C-contiguous buffer of packed rows (a NumPy array of
#: `ROW_DTYPE`, `bytes` from `pack_rows`), read in place.
_Rows = Sequence[Row] | Buffer | npt.NDArray[np.void]
#: Rows a route fills in place: a writable buffer, such as a NumPy array of `ROW_DTYPE`.
_WritableRows = Buffer | npt.NDArray[np.void]

def version() -> str: ...
def pack_rows(rows: _Rows) -> bytes: ...
def unpack_rows(rows: _Rows) -> list[Row]: ...

@final
class Worker:
    worker_id: Final[int]
    dp_rank: Final[int]
    def __new__(cls, worker_id: int, dp_rank: int = 0) -> Self: ...
    def __hash__(self) -> int: ...

@final
class Role:
    PREFILL: ClassVar[Role]
    DECODE: ClassVar[Role]
    AGGREGATED: ClassVar[Role]
    ENCODE: ClassVar[Role]
    def __int__(self) -> int: ...

@final
class PreferredTaint:
    taint: Final[int]
    weight: Final[float]
    def __new__(cls, taint: int, weight: float) -> Self: ...

@final
class BlockRange:
    start: Final[int]
    end: Final[int]
    def __new__(cls, start: int, end: int) -> Self: ...

@final
class Request:
    prompt_tokens: Final[int]
    block_size: Final[int]
    role: Final[Role]
    track_prefill_tokens: Final[bool]
    conditional_disagg: Final[bool]
    has_tier_matches: Final[bool]
    required_taints: Final[int]
    preferred_taints: Final[list[PreferredTaint]]
    shared_hits: Final[list[BlockRange] | None]
    pin: Final[Worker | None]
    session: Final[int | None]
    def __new__(
        cls,
        prompt_tokens: int,
        block_size: int,
        role: Role,
        track_prefill_tokens: bool = True,
        conditional_disagg: bool = False,
        has_tier_matches: bool = False,
        required_taints: int = 0,
        preferred_taints: Sequence[PreferredTaint] = ...,
        shared_hits: Sequence[BlockRange] | None = None,
        pin: Worker | None = None,
        session: int | None = None,
    ) -> Self: ...

@final
class RowCache:
    device_blocks: Final[int]
    host_blocks: Final[int]
    disk_blocks: Final[int]
    effective_blocks: Final[float]
    effective_tokens: Final[int]
    def __new__(
        cls,
        device_blocks: int,
        effective_blocks: float,
        effective_tokens: int,
        host_blocks: int = 0,
        disk_blocks: int = 0,
    ) -> Self: ...

@final
class RowLoad:
    active_prefill_tokens: Final[int]
    active_decode_blocks: Final[int]
    active_requests: Final[int]
    def __new__(cls, active_prefill_tokens: int, active_decode_blocks: int, active_requests: int) -> Self: ...

@final
class RowSpeed:
    base_ms: Final[float]
    ms_per_prefill_token: Final[float]
    ms_per_active_request: Final[float]
    def __new__(cls, base_ms: float, ms_per_prefill_token: float, ms_per_active_request: float) -> Self: ...

@final
class Row:
    worker: Final[Worker]
    taints: Final[int]
    overloaded: Final[bool]
    cache: Final[RowCache | None]
    load: Final[RowLoad | None]
    speed: Final[RowSpeed | None]
    def __new__(
        cls,
        worker: Worker,
        taints: int = 0,
        overloaded: bool = False,
        cache: RowCache | None = None,
        load: RowLoad | None = None,
        speed: RowSpeed | None = None,
    ) -> Self: ...

@disjoint_base
class PickReason:
    @final
    class PINNED(PickReason):
        __match_args__: ClassVar[tuple[str, ...]] = ()
        def __new__(cls) -> Self: ...
    @final
    class MIN_COST(PickReason):
        ties: Final[int]
        __match_args__: ClassVar[tuple[str, ...]] = ("ties",)
        def __new__(cls, ties: int) -> Self: ...
    @final
    class SAMPLED(PickReason):
        probability: Final[float]
        __match_args__: ClassVar[tuple[str, ...]] = ("probability",)
        def __new__(cls, probability: float) -> Self: ...
    @final
    class CUSTOM(PickReason):
        __match_args__: ClassVar[tuple[str, ...]] = ()
        def __new__(cls) -> Self: ...

@final
class Selection:
    row: Final[int]
    worker: Final[Worker]
    cost: Final[float]
    candidates: Final[int]
    reason: Final[PickReason]
    request_blocks: Final[int]
    cached_tokens: Final[int]
    contributions: Final[list[float]]

@final
class Candidate:
    row: Final[int]
    cost: Final[float]

@final
class Inputs:
    cache: Final[bool]
    load: Final[bool]
    preferred_taint: Final[bool]

@disjoint_base
class Disposition:
    @final
    class CANDIDATE(Disposition):
        __match_args__: ClassVar[tuple[str, ...]] = ()
        def __new__(cls) -> Self: ...
    @final
    class NOT_PINNED(Disposition):
        __match_args__: ClassVar[tuple[str, ...]] = ()
        def __new__(cls) -> Self: ...
    @final
    class INVALID(Disposition):
        __match_args__: ClassVar[tuple[str, ...]] = ()
        def __new__(cls) -> Self: ...
    @final
    class INELIGIBLE(Disposition):
        __match_args__: ClassVar[tuple[str, ...]] = ()
        def __new__(cls) -> Self: ...
    @final
    class OVERLOADED(Disposition):
        __match_args__: ClassVar[tuple[str, ...]] = ()
        def __new__(cls) -> Self: ...
    @final
    class FILTERED(Disposition):
        filter: Final[int]
        __match_args__: ClassVar[tuple[str, ...]] = ("filter",)
        def __new__(cls, filter: int) -> Self: ...
    @final
    class FILTER_OVERLOADED(Disposition):
        filter: Final[int]
        __match_args__: ClassVar[tuple[str, ...]] = ("filter",)
        def __new__(cls, filter: int) -> Self: ...
    @final
    class FILTER_FAILED(Disposition):
        filter: Final[int]
        __match_args__: ClassVar[tuple[str, ...]] = ("filter",)
        def __new__(cls, filter: int) -> Self: ...
    @final
    class NOT_EXAMINED(Disposition):
        __match_args__: ClassVar[tuple[str, ...]] = ()
        def __new__(cls) -> Self: ...

@final
class RowExplanation:
    row: Final[int]
    worker: Final[Worker]
    disposition: Final[Disposition]
    contributions: Final[list[float]]
    total: Final[float]
    chosen: Final[bool]

@final
class Explained:
    selection: Final[Selection]
    rows: Final[list[RowExplanation]]

@final
class Policy:
    def __new__(cls, json: str) -> Self: ...
    def inputs(self, role: Role, conditional_disagg: bool = False) -> Inputs: ...
    def release(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> bool: ...

@final
class PolicySet:
    def __new__(cls, json: str) -> Self: ...
    def policy(self, role: Role) -> Policy: ...
    def instance_name(self, role: Role) -> str: ...

@final
class Selector:
    def __new__(cls, capacity: int, entropy: int) -> Self: ...
    def select(self, policy: Policy, request: Request, rows: _Rows) -> Selection: ...
    def select_packed(self, policy: Policy, request: Request, rows: _Rows) -> Selection: ...
    def select_explained(self, policy: Policy, request: Request, rows: _Rows) -> Explained: ...
    def last_costs(self) -> list[Candidate]: ...
    def reset_seeded(self) -> None: ...
    def release(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> bool: ...

@final
class RouterConfig:
    block_slots: Final[int]
    request_slots: Final[int]
    max_workers: Final[int]
    tombstones: Final[int]
    prediction_slots: Final[int]
    prediction_ttl: Final[int]
    host_weight: Final[float]
    disk_weight: Final[float]
    def __new__(
        cls,
        block_slots: int,
        request_slots: int,
        max_workers: int = 64,
        tombstones: int = 0,
        prediction_slots: int = 0,
        prediction_ttl: int = 0,
        host_weight: float = 0.0,
        disk_weight: float = 0.0,
    ) -> Self: ...

@final
class Tier:
    DEVICE: ClassVar[Tier]
    HOST: ClassVar[Tier]
    DISK: ClassVar[Tier]
    def __int__(self) -> int: ...

@disjoint_base
class KvEvent:
    @final
    class STORED(KvEvent):
        worker: Final[Worker]
        tier: Final[Tier]
        hashes: Final[list[int]]
        __match_args__: ClassVar[tuple[str, ...]] = ("worker", "tier", "hashes")
        def __new__(cls, worker: Worker, tier: Tier, hashes: Sequence[int]) -> Self: ...
    @final
    class REMOVED(KvEvent):
        worker: Final[Worker]
        tier: Final[Tier]
        hashes: Final[list[int]]
        __match_args__: ClassVar[tuple[str, ...]] = ("worker", "tier", "hashes")
        def __new__(cls, worker: Worker, tier: Tier, hashes: Sequence[int]) -> Self: ...
    @final
    class CLEARED(KvEvent):
        worker: Final[Worker]
        __match_args__: ClassVar[tuple[str, ...]] = ("worker",)
        def __new__(cls, worker: Worker) -> Self: ...
    @final
    class WORKER_REMOVED(KvEvent):
        worker: Final[Worker]
        __match_args__: ClassVar[tuple[str, ...]] = ("worker",)
        def __new__(cls, worker: Worker) -> Self: ...

@disjoint_base
class LedgerEvent:
    @final
    class BOOKED(LedgerEvent):
        id: Final[int]
        worker: Final[Worker]
        prefill_tokens: Final[int]
        blocks: Final[int]
        __match_args__: ClassVar[tuple[str, ...]] = ("id", "worker", "prefill_tokens", "blocks")
        def __new__(cls, id: int, worker: Worker, prefill_tokens: int, blocks: int) -> Self: ...
    @final
    class PREFILL_COMPLETE(LedgerEvent):
        id: Final[int]
        __match_args__: ClassVar[tuple[str, ...]] = ("id",)
        def __new__(cls, id: int) -> Self: ...
    @final
    class FREED(LedgerEvent):
        id: Final[int]
        __match_args__: ClassVar[tuple[str, ...]] = ("id",)
        def __new__(cls, id: int) -> Self: ...

@final
class RouterCounters:
    blocks: Final[int]
    index_workers: Final[int]
    evictions: Final[int]
    rejected_kv_events: Final[int]
    ignored_kv_events: Final[int]
    active_requests: Final[int]
    ledger_workers: Final[int]
    duplicate_ledger_events: Final[int]
    late_ledger_events: Final[int]
    unknown_worker_ledger_events: Final[int]
    predictions: Final[int]
    forced_prediction_expiries: Final[int]

@final
class KvBatchSummary:
    worker: Final[Worker]
    events: Final[int]
    stored_blocks: Final[int]
    removed_blocks: Final[int]
    orphaned_blocks: Final[int]
    unknown_removals: Final[int]
    clears: Final[int]

def block_hashes(tokens: Sequence[int], block_size: int, lora_name: str | None = None) -> list[int]: ...

@final
class Routed:
    selection: Final[Selection]
    rows: Final[list[Row]]

@final
class Router:
    def __new__(cls, config: RouterConfig) -> Self: ...
    def add_worker(self, worker: Worker) -> None: ...
    def remove_worker(self, worker: Worker) -> None: ...
    def apply_kv_events(self, events: Sequence[KvEvent]) -> None: ...
    def read_kv_batches(self, block_size: int, engine_hash_slots: int) -> None: ...
    def apply_kv_batch(self, worker: Worker, payload: bytes) -> KvBatchSummary: ...
    def snapshot(self) -> bytes: ...
    def restore(self, snapshot: bytes) -> None: ...
    def apply_ledger_events(self, events: Sequence[LedgerEvent]) -> None: ...
    def book(self, id: int, worker: Worker, prefill_tokens: int, blocks: int) -> None: ...
    def book_at(self, id: int, worker: Worker, prefill_tokens: int, blocks: int, now_ms: float) -> None: ...
    def prefill_complete(self, id: int) -> None: ...
    def prefill_complete_at(self, id: int, now_ms: float) -> None: ...
    def free_request(self, id: int) -> None: ...
    def route(
        self, policy: Policy, selector: Selector, request: Request, hashes: Sequence[int], candidates: _Rows, id: int, now: int
    ) -> Routed: ...
    def route_at(
        self, policy: Policy, selector: Selector, request: Request, hashes: Sequence[int], candidates: _Rows, id: int, now_ms: float
    ) -> Routed: ...
    def route_into(
        self, policy: Policy, selector: Selector, request: Request, hashes: Sequence[int], candidates: _WritableRows, id: int, now: int
    ) -> Selection: ...
    def route_into_at(
        self, policy: Policy, selector: Selector, request: Request, hashes: Sequence[int], candidates: _WritableRows, id: int, now_ms: float
    ) -> Selection: ...
    def fleet_add(self, worker: Worker, taints: int = 0) -> None: ...
    def fleet_remove(self, worker: Worker) -> None: ...
    def fleet_set_taints(self, worker: Worker, taints: int) -> None: ...
    def fleet_set_overloaded(self, worker: Worker, overloaded: bool) -> None: ...
    def fleet_rows(self) -> list[Row]: ...
    def route_fleet(
        self, policy: Policy, selector: Selector, request: Request, hashes: Sequence[int], id: int, now: int
    ) -> Selection: ...
    def route_fleet_at(
        self, policy: Policy, selector: Selector, request: Request, hashes: Sequence[int], id: int, now_ms: float
    ) -> Selection: ...
    def counters(self) -> RouterCounters: ...
    def release(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> bool: ...
