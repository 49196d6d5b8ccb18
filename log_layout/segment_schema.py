"""The segment schema every reader sees (``SCHEMA``; ``segment``'s docstring says what
each column holds), and the small Arrow helpers the segment modules share."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

TS_TYPE = pa.timestamp("us", tz="UTC")
HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False),
                                  pa.field("value", pa.binary())]))
SCHEMA = pa.schema([
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", TS_TYPE, nullable=False),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", HEADER_TYPE),
])
INPUT_SCHEMA = pa.schema(list(SCHEMA)[1:])
#: columns a producer may hand to ``append`` (offset is assigned by the log)
INPUT_COLUMNS = ("key", "value", "timestamp", "headers")


def int64_array(values: np.ndarray, type_: pa.DataType) -> pa.Array:
    """A null-free Arrow array over an int64 NumPy array, without a copy.

    (``pa.array(ndarray)`` would do, but its first call imports pandas to ask
    whether the input is a Series: ~0.6 s at a gateway's first flush.)
    """
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


#: the types of the all-null columns ``shared_nulls`` shares, by number
BINARY, HEADERS, NULL, INT64 = 0, 1, 2, 3
_NULL_TYPES = (pa.binary(), HEADER_TYPE, pa.null(), pa.int64())
_SHARED_NULLS: dict[tuple[int, int], pa.Array] = {}


def shared_nulls(n: int, kind: int) -> pa.Array:
    """An all-null array of ``_NULL_TYPES[kind]``, shared: Arrow arrays are immutable
    and producers repeat sizes. Keyed by ints: hashing the headers' Arrow type for a
    cache key costs ~2 us, a tenth of a one-record append's encode."""
    arr = _SHARED_NULLS.get((n, kind))
    if arr is None:
        if len(_SHARED_NULLS) >= 256:  # bounded: sizes seen once go together
            _SHARED_NULLS.clear()
        arr = _SHARED_NULLS[(n, kind)] = pa.nulls(n, _NULL_TYPES[kind])
    return arr


def int64_values(chunk: pa.Array) -> np.ndarray:
    """The values of a null-free 64-bit array as int64, without a copy."""
    return np.frombuffer(chunk.buffers()[1], dtype=np.int64, count=chunk.offset + len(chunk))[
        chunk.offset:]
