"""libroute: worker selection for LLM inference routing.

A native extension (PyO3) over libroute's Rust core: every call makes exactly the decisions, and
raises exactly the errors, of the C ABI, Go and the JVM. Failures raise `RouteError.<Variant>`
exceptions whose `detail` names the knob, row or worker.

`Policy`, `Selector`, `Router` free their native memory when garbage-collected; `release()`
frees it at once (later calls raise `RouteError.Closed`), and each is a context manager that
releases on exit.

Rows are a list of `Row` objects, or, on a hot path, a NumPy structured array of `ROW_DTYPE`
(or any buffer of packed rows, as `pack_rows` makes), which `Selector.select` reads in place.
"""

from ._errors import RouteError
from ._native import (
    ROW_BYTES,
    BlockRange,
    Candidate,
    Disposition,
    Explained,
    Inputs,
    KvBatchSummary,
    KvEvent,
    LedgerEvent,
    PickReason,
    Policy,
    PolicySet,
    PreferredTaint,
    Request,
    Role,
    Routed,
    Router,
    RouterConfig,
    RouterCounters,
    Row,
    RowCache,
    RowExplanation,
    RowLoad,
    RowSpeed,
    Selection,
    Selector,
    Tier,
    Worker,
    block_hashes,
    pack_rows,
    unpack_rows,
    version,
)
from ._rows import HAS_CACHE, HAS_LOAD, HAS_SPEED, OVERLOADED, rows_array

__all__ = [
    "ROW_BYTES",
    "ROW_DTYPE",
    "HAS_CACHE",
    "HAS_LOAD",
    "HAS_SPEED",
    "OVERLOADED",
    "BlockRange",
    "Candidate",
    "Disposition",
    "Explained",
    "Inputs",
    "KvBatchSummary",
    "KvEvent",
    "LedgerEvent",
    "PickReason",
    "Policy",
    "PolicySet",
    "PreferredTaint",
    "Request",
    "Role",
    "RouteError",
    "Routed",
    "Router",
    "RouterConfig",
    "RouterCounters",
    "Row",
    "RowCache",
    "RowExplanation",
    "RowLoad",
    "RowSpeed",
    "Selection",
    "Selector",
    "Tier",
    "Worker",
    "block_hashes",
    "pack_rows",
    "rows_array",
    "unpack_rows",
    "version",
]


def __getattr__(name):
    # ROW_DTYPE needs NumPy: built on first use, so importing libroute does not need NumPy.
    if name == "ROW_DTYPE":
        from ._rows import row_dtype

        return row_dtype()
    raise AttributeError(f"module 'libroute' has no attribute {name!r}")
