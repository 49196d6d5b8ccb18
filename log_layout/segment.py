"""Segment files: immutable Arrow IPC *file* format, one per flush or roll-up.

Schema (topic and partition are implied by the path)::

    offset     int64                                   not null, strictly increasing
    timestamp  timestamp[us, tz=UTC]                   not null, millisecond values
    key        binary                                  null = no key
    value      binary                                  null = tombstone
    headers    list<struct<key: string, value: binary>>  null or empty = no headers

Timestamps are stored in microseconds (Spark's own unit) so Spark reads need no
cast; their values are whole milliseconds as Kafka's are. Buffers may be
compressed (``lz4`` or ``zstd``: Arrow IPC buffer compression, so any Arrow
reader opens the file). The CRC-32 of the whole file is recorded in the
partition manifest and verified on every read: a mismatch, a truncated file or
bytes that are not Arrow raise :class:`CorruptSegment`.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any

try:  # ISA-L's CRC-32 is the same function as zlib's, ~5x faster (PCLMUL); optional
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - isal is a dependency, but the format does not need it
    _crc32 = zlib.crc32

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from log_layout.errors import CorruptSegment, InvalidRecords

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


def _as_binary(name: str, col: pa.ChunkedArray | pa.Array) -> pa.Array | pa.ChunkedArray:
    t = col.type
    if t == pa.binary():
        return col
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t) \
            or pa.types.is_null(t) or pa.types.is_fixed_size_binary(t) \
            or pa.types.is_binary_view(t) or pa.types.is_string_view(t):
        return col.cast(pa.binary())
    raise InvalidRecords(f"column {name!r} must be binary or string, not {t}")


def _int64_array(values: np.ndarray, type_: pa.DataType) -> pa.Array:
    """A null-free Arrow array over an int64 NumPy array, without a copy.

    (``pa.array(ndarray)`` would do, but its first call imports pandas to ask
    whether the input is a Series: ~0.6 s at a gateway's first flush.)
    """
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


@functools.lru_cache(maxsize=16)
def _nulls(n: int, type_: pa.DataType) -> pa.Array:
    """An all-null array, shared: Arrow arrays are immutable and producers repeat sizes."""
    return pa.nulls(n, type_)


def normalize(records: pa.Table | pa.RecordBatch, *, default_ts_ms: int,
              log_append_time: bool = False) -> pa.Table:
    """Bring producer records to the segment schema, without offsets.

    ``records`` needs a ``value`` column; ``key``, ``timestamp`` (int64
    milliseconds or any Arrow timestamp) and ``headers`` are optional. Returns
    a table of the schema minus ``offset``. Raises InvalidRecords naming the
    column that does not fit.
    """
    if isinstance(records, pa.RecordBatch):
        records = pa.Table.from_batches([records])
    if not isinstance(records, pa.Table):
        raise InvalidRecords(f"expected a pyarrow Table or RecordBatch, got {type(records).__name__}")
    names = set(records.column_names)
    unknown = names - set(INPUT_COLUMNS) - {"partition", "offset"}
    if unknown:
        raise InvalidRecords(f"unknown columns {sorted(unknown)}; allowed: {', '.join(INPUT_COLUMNS)}")
    if "value" not in names:
        raise InvalidRecords("a 'value' column is required")
    n = records.num_rows
    value = _as_binary("value", records.column("value"))
    key = _as_binary("key", records.column("key")) if "key" in names else _nulls(n, pa.binary())

    ts = records.column("timestamp") if "timestamp" in names else None
    if ts is not None and not (pa.types.is_timestamp(ts.type) or pa.types.is_integer(ts.type)):
        raise InvalidRecords(f"column 'timestamp' must be int64 milliseconds or a timestamp, "
                             f"not {ts.type}")
    if log_append_time or ts is None or ts.null_count == n:  # all default: no compute kernels
        ts = _int64_array(np.full(n, default_ts_ms * 1000, dtype=np.int64), TS_TYPE)
    else:
        if pa.types.is_timestamp(ts.type):
            ts = ts.cast(TS_TYPE)
        else:
            ts = pc.multiply(ts.cast(pa.int64()), 1000).cast(TS_TYPE)
        if ts.null_count:
            ts = pc.fill_null(ts, pa.scalar(default_ts_ms * 1000, TS_TYPE))

    if "headers" in names:
        headers = records.column("headers")
        if headers.type != HEADER_TYPE:
            try:
                headers = headers.cast(HEADER_TYPE)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise InvalidRecords(f"column 'headers' must be {HEADER_TYPE}, not {headers.type}") \
                    from None
    else:
        headers = _nulls(n, HEADER_TYPE)
    return pa.Table.from_arrays([ts, key, value, headers], schema=INPUT_SCHEMA)


def with_offsets(table: pa.Table, base_offset: int) -> pa.Table:
    """Prepend consecutive offsets from ``base_offset`` to a normalized table."""
    offsets = _int64_array(np.arange(base_offset, base_offset + table.num_rows, dtype=np.int64),
                           pa.int64())
    return table.add_column(0, SCHEMA.field("offset"), offsets)


def encode(table: pa.Table, *, compression: str | None = None) -> tuple[pa.Buffer, int]:
    """Serialize a table of the segment schema to Arrow IPC file bytes.

    Returns the buffer and its CRC-32. The table is written as one record batch
    (or as the batches it already has), so a reader maps it without copying.
    """
    if table.schema != SCHEMA:
        table = table.cast(SCHEMA)
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_file(sink, SCHEMA, options=options) as writer:
        writer.write_table(table, max_chunksize=1 << 20)
    buf = sink.getvalue()
    return buf, checksum(buf)


def checksum(data: bytes | pa.Buffer | memoryview) -> int:
    """CRC-32 (zlib's polynomial, as ``zlib.crc32``) of a segment's bytes."""
    return _crc32(data)


def decode(data: bytes | pa.Buffer, *, path: str, crc32: int | None) -> pa.Table:
    """Parse segment bytes, verifying the CRC-32 when given.

    Raises CorruptSegment for a checksum mismatch, a truncated file or bytes
    that are not an Arrow IPC file of the segment schema.
    """
    if crc32 is not None:
        actual = checksum(data)
        if actual != crc32:
            raise CorruptSegment(path, f"CRC-32 is {actual:#010x}, the manifest recorded {crc32:#010x}")
    try:
        reader = pa.ipc.open_file(data if isinstance(data, pa.Buffer) else pa.py_buffer(data))
        if not reader.schema.equals(SCHEMA):  # metadata aside; checked before reading
            raise CorruptSegment(path, f"schema is {reader.schema}, expected the segment schema")
        return reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
        raise CorruptSegment(path, f"not a readable Arrow IPC file ({e})") from None


def stats(table: pa.Table) -> dict[str, Any]:
    """base/last offset, count and min/max timestamp (ms) of a non-empty segment table."""
    offsets = [_int64_values(c) for c in table.column("offset").chunks if len(c)]
    min_ts, max_ts = timestamp_range(table)
    return {"base_offset": int(offsets[0][0]), "last_offset": int(offsets[-1][-1]),
            "count": table.num_rows, "min_ts": min_ts, "max_ts": max_ts}


def timestamp_range(table: pa.Table) -> tuple[int, int]:
    """(min, max) of a non-empty table's timestamps, in milliseconds."""
    ts = [_int64_values(c) for c in table.column("timestamp").chunks if len(c)]
    return min(int(t.min()) for t in ts) // 1000, max(int(t.max()) for t in ts) // 1000


def _int64_values(chunk: pa.Array) -> np.ndarray:
    """The values of a null-free 64-bit array as int64, without a copy."""
    return np.frombuffer(chunk.buffers()[1], dtype=np.int64, count=chunk.offset + len(chunk))[
        chunk.offset:]
