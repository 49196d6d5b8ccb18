"""Segment files: immutable Arrow IPC *file* format, one per flush or roll-up.

Every reader sees a segment as a table of the **segment schema** (``SCHEMA``; topic
and partition are implied by the path)::

    offset     int64                                   not null, strictly increasing
    timestamp  timestamp[us, tz=UTC]                   not null, millisecond values
    key        binary                                  null = no key
    value      binary                                  null = tombstone
    headers    list<struct<key: string, value: binary>>  null or empty = no headers

Timestamps are in microseconds (Spark's own unit) so Spark reads need no cast; their
values are whole milliseconds as Kafka's are. ``encode`` takes such a table and
``decode`` gives it back, value for value.

On disk (format 2, the **stored form**) a segment keeps only what cannot be derived,
so a 100-byte value with no key and no headers costs 104 bytes (the value and its
int32 end offset) where the segment schema as is costs 136 (Kafka: 110). The file's
Arrow schema carries, as metadata (ASCII decimal integers)::

    sparklog.segment.format       "2"
    sparklog.base_offset          the smallest offset (0 for no records)
    sparklog.base_timestamp_us    the smallest timestamp, in microseconds
    sparklog.timestamp_unit_us    "1000" (deltas in milliseconds) or "1"

and these columns, in this order (the first two may be left out)::

    offset     left out         offsets are base_offset, base_offset + 1, ... (every
                                append; compaction's output has gaps)
               uint8|16|32      offset - base_offset, the narrowest type that holds them
               int64            the offsets as they are (too far apart for 32 bits)
    timestamp  left out         every record has base_timestamp_us (a producer's
                                default timestamp for a request, LogAppendTime)
               uint8|16|32      (timestamp - base_timestamp_us) / timestamp_unit_us, the
                                narrowest type that holds them; the unit is 1 µs only
                                if a timestamp is not a whole millisecond
               timestamp[us]    the timestamps as they are (over ~49 days apart)
    key        null | binary    Arrow's null type (no buffers) when every key is null,
    value      null | binary    else the segment schema's column (every value null: a
    headers    null | list<..>  segment of tombstones)

Reading a segment rebuilds what was left out (an ``arange`` of offsets, the widened
timestamp deltas, null columns sharing one zeroed buffer); the key, value and header
columns it stored are used as they are, without a copy. A file without the format
marker is in **format 1**, the segment schema as is (everything written before
2026-11-25): it is read as it is. Any Arrow reader opens either form; ``canonical``
turns what it reads into the segment schema.

Buffers may be compressed (``lz4`` or ``zstd``: Arrow IPC buffer compression, so any
Arrow reader opens the file). The CRC-32 of the segment's bytes (the whole file, or
the part before a trailer, below) is recorded in the partition manifest and
verified on every read: a mismatch, a truncated file, bytes that are not Arrow, a
schema that is neither form or an unknown format raise :class:`CorruptSegment`.

A segment may carry a **trailer**: bytes after it that are not records. An append
on a local store commits its segment and its manifest version as one file with
two names (see ``store.linked_file``), laid out as::

    [0, bytes)   the segment, a complete Arrow IPC file (the CRC-32 covers exactly this)
    trailer      the payload (the manifest version's JSON)
    8 bytes      the payload's length, unsigned little-endian
    8 bytes      TRAILER_MAGIC
    10 + L bytes a copy of the segment's own last 10 + L bytes (its footer of L bytes,
                 L as int32, "ARROW1")

The copied footer keeps the whole file an Arrow IPC file (a reader finds the
footer from the end, and its block offsets point into the segment at the start),
so any Arrow reader still opens it; the log itself reads ``[0, bytes)``, the
length the manifest records.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from typing import Any

try:  # ISA-L's CRC-32 is the same function as zlib's, ~5x faster (PCLMUL); optional
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - isal is a dependency, but the format does not need it
    _crc32 = zlib.crc32

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from log_layout import segment_stored
from log_layout.errors import CorruptSegment, InvalidRecords
from log_layout.segment_schema import (  # noqa: F401
    BINARY,
    HEADER_TYPE,
    HEADERS,
    INPUT_COLUMNS,
    INPUT_SCHEMA,
    SCHEMA,
    TS_TYPE,
    int64_array,
    int64_values,
    shared_nulls,
)


def _as_binary(name: str, col: pa.ChunkedArray | pa.Array) -> pa.Array | pa.ChunkedArray:
    t = col.type
    if t == pa.binary():
        return col
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t) \
            or pa.types.is_null(t) or pa.types.is_fixed_size_binary(t) \
            or pa.types.is_binary_view(t) or pa.types.is_string_view(t):
        return col.cast(pa.binary())
    raise InvalidRecords(f"column {name!r} must be binary or string, not {t}")


@dataclasses.dataclass(frozen=True)
class Records:
    """Producer records in the segment schema, without offsets (see ``normalize``)."""

    #: timestamp, key, value, headers (``INPUT_SCHEMA``), arrays or chunked arrays
    columns: tuple[Any, ...]
    num_rows: int
    #: the smallest and largest timestamp, in milliseconds (0, 0 when empty)
    min_ts: int
    max_ts: int
    #: every record has the one timestamp ``min_ts`` (the default, or LogAppendTime)
    one_timestamp: bool = False


def normalize(records: pa.Table | pa.RecordBatch, *, default_ts_ms: int,
              log_append_time: bool = False) -> Records:
    """Bring producer records to the segment schema, without offsets.

    ``records`` needs a ``value`` column; ``key``, ``timestamp`` (int64
    milliseconds or any Arrow timestamp) and ``headers`` are optional. Raises
    InvalidRecords naming the column that does not fit.
    """
    if isinstance(records, pa.RecordBatch):
        records = pa.Table.from_batches([records])
    if not isinstance(records, pa.Table):
        raise InvalidRecords(f"expected a pyarrow Table or RecordBatch, got {type(records).__name__}")
    names = records.schema.names
    n = records.num_rows
    if names == ["value"]:  # the common producer input: values only, no checks to make
        value, key, ts, headers = records.column(0), None, None, None
    else:
        unknown = set(names) - set(INPUT_COLUMNS) - {"partition", "offset"}
        if unknown:
            raise InvalidRecords(f"unknown columns {sorted(unknown)}; allowed: "
                                 f"{', '.join(INPUT_COLUMNS)}")
        if "value" not in names:
            raise InvalidRecords("a 'value' column is required")
        value = records.column("value")
        key = _as_binary("key", records.column("key")) if "key" in names else None
        ts = records.column("timestamp") if "timestamp" in names else None
        headers = records.column("headers") if "headers" in names else None
    value = _as_binary("value", value)
    key = shared_nulls(n, BINARY) if key is None else key

    if ts is not None and not (pa.types.is_timestamp(ts.type) or pa.types.is_integer(ts.type)):
        raise InvalidRecords(f"column 'timestamp' must be int64 milliseconds or a timestamp, "
                             f"not {ts.type}")
    one_timestamp = log_append_time or ts is None or ts.null_count == n
    if one_timestamp:  # all default: no compute kernels
        ts = int64_array(np.full(n, default_ts_ms * 1000, dtype=np.int64), TS_TYPE)
        min_ts = max_ts = default_ts_ms if n else 0
    elif ts.type == _INT64 and ts.null_count == 0:
        # int64 milliseconds (the Kafka listener's): NumPy, not three compute kernels,
        # whose call overhead is most of a small batch's cost
        chunks = ts.chunks if isinstance(ts, pa.ChunkedArray) else [ts]
        ms = [int64_values(c) for c in chunks if len(c)]
        ms_all = ms[0] if len(ms) == 1 else np.concatenate(ms)
        ts = int64_array(ms_all * 1000, TS_TYPE)
        min_ts, max_ts = int(ms_all.min()), int(ms_all.max())
    else:
        if pa.types.is_timestamp(ts.type):
            ts = ts.cast(TS_TYPE)
        else:
            ts = pc.multiply(ts.cast(pa.int64()), 1000).cast(TS_TYPE)
        if ts.null_count:
            ts = pc.fill_null(ts, pa.scalar(default_ts_ms * 1000, TS_TYPE))
        min_ts, max_ts = _timestamp_range(ts) if n else (0, 0)

    if headers is not None:
        if headers.type != HEADER_TYPE:
            try:
                headers = headers.cast(HEADER_TYPE)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise InvalidRecords(f"column 'headers' must be {HEADER_TYPE}, not {headers.type}") \
                    from None
    else:
        headers = shared_nulls(n, HEADERS)
    return Records((ts, key, value, headers), n, min_ts, max_ts, one_timestamp)


def with_offsets(records: Records, base_offset: int) -> pa.Table:
    """The records as a segment table, with consecutive offsets from ``base_offset``."""
    n = records.num_rows
    offsets = int64_array(np.arange(base_offset, base_offset + n, dtype=np.int64), pa.int64())
    return pa.Table.from_arrays([offsets, *records.columns], schema=SCHEMA)


def encode(table: pa.Table, *, compression: str | None = None) -> tuple[pa.Buffer, int]:
    """Serialize a table of the segment schema to Arrow IPC file bytes, in the stored
    form (see the module docstring).

    Returns the buffer and its CRC-32. The table is written as one record batch
    (or as the batches it already has), so a reader maps its stored columns
    without copying.
    """
    buf = pa.py_buffer(b"".join(encode_chunks(table, compression=compression).chunks))
    return buf, checksum(buf)


ARROW_MAGIC = b"ARROW1"
TRAILER_MAGIC = b"SLTRAIL1"
_TRAILER_END = struct.Struct("<Q8s")  # payload length, TRAILER_MAGIC


class _Collector:
    """A write-only file object that keeps what is written, by reference: the IPC
    writer hands over its large buffers (the table's own memory) as they are."""

    def __init__(self) -> None:
        self.chunks: list[Any] = []
        self.size, self.closed = 0, False

    def write(self, data: Any) -> int:
        self.chunks.append(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True


#: small writes of the IPC writer (metadata, padding) are gathered up to this size
#: (copied), larger ones are kept as the buffers they are (not copied)
_GATHER_BYTES = 64 << 10


@dataclasses.dataclass(frozen=True)
class Encoded:
    """A segment's Arrow IPC file as its pieces, in order, not concatenated: the table's
    large buffers by reference, the rest gathered. One vectored write stores it."""

    chunks: list[Any]
    size: int

    def checksum(self) -> int:
        """The CRC-32 of the file: best taken just after writing it (the bytes are
        in the CPU's cache then)."""
        crc = 0
        for chunk in self.chunks:
            crc = checksum(chunk, crc)
        return crc

    def tail(self, n: int) -> bytes:
        """The last ``n`` bytes."""
        out, have = [], 0
        for chunk in reversed(self.chunks):
            out.append(bytes(chunk))
            have += len(out[-1])
            if have >= n:
                break
        return b"".join(reversed(out))[-n:]


def encode_chunks(table: pa.Table, *, compression: str | None = None) -> Encoded:
    """The bytes of ``encode`` (without the CRC), as pieces: no buffer of the whole
    file is built (measured: with one vectored write, ~0.05 ms less per 1.2 MB
    segment than building one and writing it)."""
    if table.schema != SCHEMA:
        table = table.cast(SCHEMA)
    return _write(segment_stored.stored(table), compression)


def encode_append(records: Records, base_offset: int, *,
                  compression: str | None = None) -> Encoded:
    """``encode_chunks(with_offsets(records, base_offset))``, without building what the
    stored form leaves out: an append's offsets are consecutive by construction, and its
    records often share one timestamp (``Records.one_timestamp``). A one-record append
    is the latency-bound case: this skips ~15 us of its ~40 us encode."""
    n = records.num_rows
    ts, *rest = records.columns
    if records.one_timestamp:
        base_ts, unit, stamps = records.min_ts * 1000, 1000, None
    else:
        base_ts, unit, stamps = segment_stored.stored_timestamps(_chunked(ts), n)
    return _write(segment_stored.stored_table(n, base_offset, None, base_ts, unit, stamps, rest),
                  compression)


def _chunked(col: Any) -> pa.ChunkedArray:
    return col if isinstance(col, pa.ChunkedArray) else pa.chunked_array([col])


def _write(stored: pa.Table, compression: str | None) -> Encoded:
    """A stored-form table as an Arrow IPC file, in pieces (see ``encode_chunks``)."""
    if stored.get_total_buffer_size() < _GATHER_BYTES:
        # Small (a hot flush's segment of a partition's few records): in Arrow's own
        # memory stream, without a Python call per write of the IPC writer; that was
        # ~40% of encoding a 10-record segment (issue 30), and nothing big is copied.
        memory = pa.BufferOutputStream()
        with pa.ipc.new_file(memory, stored.schema, options=pa.ipc.IpcWriteOptions(
                compression=compression)) as writer:
            writer.write_table(stored, max_chunksize=1 << 20)
        buf = memory.getvalue()
        return Encoded([buf], buf.size)
    sink = _Collector()
    stream = pa.BufferedOutputStream(pa.PythonFile(sink, mode="w"), _GATHER_BYTES)
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_file(stream, stored.schema, options=options) as writer:
        writer.write_table(stored, max_chunksize=1 << 20)
    stream.flush()
    return Encoded(sink.chunks, sink.size)


def trailer(payload: bytes, segment: Encoded) -> list[bytes]:
    """What follows ``segment`` in a file that carries ``payload``: the payload, its
    length and the magic, the segment's footer again (see the module docstring)."""
    (footer,) = struct.unpack("<i", segment.tail(10)[:4])
    return [payload, _TRAILER_END.pack(len(payload), TRAILER_MAGIC), segment.tail(10 + footer)]


def trailer_extent(tail: bytes | memoryview) -> int | None:
    """How many bytes at the end of a file its trailer takes (payload, length, magic and
    the footer copy), from the file's last bytes ``tail``; None if the file carries no
    trailer. Raises ValueError naming the problem for a damaged trailer."""
    view = memoryview(tail)
    if len(view) < 10 + _TRAILER_END.size or view[-6:] != ARROW_MAGIC:
        return None
    (footer,) = struct.unpack_from("<i", view, len(view) - 10)
    if footer <= 0:
        raise ValueError("its Arrow footer length is out of range")
    end = len(view) - 10 - footer - _TRAILER_END.size  # where the payload ends, in tail
    if end < 0:
        return 10 + footer + _TRAILER_END.size + 1  # read more to see the trailer's end
    length, magic = _TRAILER_END.unpack_from(view, end)
    if magic != TRAILER_MAGIC:
        return None  # a plain Arrow file: its footer is not preceded by a trailer
    return length + _TRAILER_END.size + 10 + footer


def read_trailer(tail: bytes | memoryview) -> bytes | None:
    """The payload a segment file carries, from the file's last bytes ``tail`` (at least
    ``trailer_extent`` of them); None if it carries none. Raises ValueError for a
    damaged trailer or a ``tail`` too short to hold it."""
    extent = trailer_extent(tail)
    if extent is None:
        return None
    view = memoryview(tail)
    if extent > len(view):
        raise ValueError(f"its trailer takes {extent} bytes, more than the {len(view)} read")
    (footer,) = struct.unpack_from("<i", view, len(view) - 10)
    start = len(view) - extent
    return bytes(view[start:start + extent - _TRAILER_END.size - 10 - footer])


def checksum(data: bytes | pa.Buffer | memoryview, crc: int = 0) -> int:
    """CRC-32 (zlib's polynomial, as ``zlib.crc32``) of a segment's bytes; ``crc`` is
    the CRC of the bytes before them, to checksum a file in pieces."""
    return _crc32(data, crc)


def decode(data: bytes | pa.Buffer, *, path: str, crc32: int | None,
           size: int | None = None) -> pa.Table:
    """Parse segment bytes, verifying the CRC-32 when given: ``parse(verify(...))``.

    ``size`` is the segment's length as its manifest records it: a longer file
    carries a trailer after the segment (see the module docstring), which is
    not read. Returns a table of the segment schema, from either form (see the
    module docstring). Raises CorruptSegment for a checksum mismatch, a truncated
    file, bytes that are not an Arrow IPC file, or a schema of neither form.
    """
    return parse(verify(data, path=path, crc32=crc32, size=size), path=path)


def verify(data: bytes | pa.Buffer, *, path: str, crc32: int | None,
           size: int | None = None) -> pa.Buffer:
    """The segment's bytes (``data`` up to ``size``: without a trailer) once their length
    and CRC-32 (when given) are checked; only such bytes are given to :func:`parse`.

    Raises CorruptSegment for a file shorter than ``size`` or a checksum mismatch.
    """
    if size is not None and len(data) != size:
        if len(data) < size:
            raise CorruptSegment(path, f"it has {len(data)} bytes, the manifest recorded {size}")
        data = data.slice(0, size) if isinstance(data, pa.Buffer) else memoryview(data)[:size]
    if crc32 is not None:
        # On this thread: taken on a helper thread while this one parsed, 1 MB segments
        # read no faster beside other work on 2 cores (the helper waits for a CPU;
        # 2026-11-28). A reader of several segments verifies them all before it parses
        # any (``reader.read_segments``): faster than one after the other.
        actual = checksum(data)
        if actual != crc32:
            raise CorruptSegment(path, f"CRC-32 is {actual:#010x}, the manifest recorded "
                                       f"{crc32:#010x}")
    return data if isinstance(data, pa.Buffer) else pa.py_buffer(data)


def parse(data: pa.Buffer, *, path: str) -> pa.Table:
    """The segment-schema table of a segment's bytes, verified first (:func:`verify`).

    Raises CorruptSegment for bytes that are not an Arrow IPC file or a schema of
    neither form.
    """
    try:
        reader = pa.ipc.open_file(data)
        layout = segment_stored.layout(reader.schema, path)  # checked before reading
        if layout is None:  # format 1, the segment schema as is
            return reader.read_all()
        return layout.table([reader.get_batch(i) for i in range(reader.num_record_batches)])
    except (pa.ArrowException, OSError, ValueError) as e:  # ValueError: buffers too short
        raise CorruptSegment(path, f"not a readable Arrow IPC file ({e})") from None


def canonical(table: pa.Table, *, path: str = "<table>") -> pa.Table:
    """The segment-schema table of a segment file read by any Arrow reader
    (``pa.ipc.open_file(f).read_all()``): the stored form (format 2) converted, the
    canonical form (format 1) as it is. Raises CorruptSegment for another schema."""
    layout = segment_stored.layout(table.schema, path)
    return table if layout is None else layout.table(table.to_batches())


def stats(table: pa.Table) -> dict[str, Any]:
    """base/last offset, count and min/max timestamp (ms) of a non-empty segment table."""
    offsets = [int64_values(c) for c in table.column("offset").chunks if len(c)]
    min_ts, max_ts = timestamp_range(table)
    return {"base_offset": int(offsets[0][0]), "last_offset": int(offsets[-1][-1]),
            "count": table.num_rows, "min_ts": min_ts, "max_ts": max_ts}


def timestamp_range(table: pa.Table) -> tuple[int, int]:
    """(min, max) of a non-empty table's timestamps, in milliseconds."""
    return _timestamp_range(table.column("timestamp"))


_INT64 = pa.int64()


def _timestamp_range(ts: pa.Array | pa.ChunkedArray) -> tuple[int, int]:
    chunks = ts.chunks if isinstance(ts, pa.ChunkedArray) else [ts]
    values = [int64_values(c) for c in chunks if len(c)]
    return min(int(t.min()) for t in values) // 1000, max(int(t.max()) for t in values) // 1000
