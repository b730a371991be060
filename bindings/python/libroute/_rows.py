"""Rows in NumPy: `ROW_DTYPE`, the C row (`libroute_row`) as a structured dtype, and its flags.

An array of `ROW_DTYPE` is what `Selector.select` reads in place: fill the columns (`worker_id`,
`effective_blocks`, `active_requests`, ...) and set `flags` to say which groups a row carries.
"""

from ._native import ROW_BYTES, pack_rows

#: `flags` bits: the row has a cache entry, a load projection, the host's overload mark, a speed.
HAS_CACHE, HAS_LOAD, OVERLOADED, HAS_SPEED = 1, 2, 4, 8

#: (name, NumPy type, byte offset) of each field of the C row, little-endian.
FIELDS = (
    ("worker_id", "<u8", 0),
    ("dp_rank", "<u4", 8),
    ("taints", "<u8", 16),
    ("flags", "<u4", 24),
    ("device_blocks", "<u4", 28),
    ("host_blocks", "<u4", 32),
    ("disk_blocks", "<u4", 36),
    ("effective_blocks", "<f8", 40),
    ("effective_tokens", "<u8", 48),
    ("active_prefill_tokens", "<u8", 56),
    ("active_decode_blocks", "<u8", 64),
    ("active_requests", "<u8", 72),
    ("base_ms", "<f8", 80),
    ("ms_per_prefill_token", "<f8", 88),
    ("ms_per_active_request", "<f8", 96),
)


def row_dtype():
    """`ROW_DTYPE`, built on the first call (NumPy is imported only then)."""
    global ROW_DTYPE
    if "ROW_DTYPE" in globals():
        return ROW_DTYPE
    import numpy

    names, formats, offsets = zip(*FIELDS)
    ROW_DTYPE = numpy.dtype(
        {"names": list(names), "formats": list(formats), "offsets": list(offsets), "itemsize": ROW_BYTES},
        align=True,
    )
    return ROW_DTYPE


def rows_array(rows):
    """A NumPy array of `ROW_DTYPE` holding `rows` (a list of `Row`)."""
    import numpy

    return numpy.frombuffer(bytearray(pack_rows(rows)), dtype=row_dtype())


def __getattr__(name):
    if name == "ROW_DTYPE":
        return row_dtype()
    raise AttributeError(f"module 'libroute._rows' has no attribute {name!r}")
