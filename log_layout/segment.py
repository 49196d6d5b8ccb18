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
import functools
import struct
import zlib
from collections.abc import Iterable
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


#: the types of the all-null columns ``_nulls`` shares, by number
_BINARY, _HEADERS, _NULL = 0, 1, 2
_NULL_TYPES = (pa.binary(), HEADER_TYPE, pa.null())
_SHARED_NULLS: dict[tuple[int, int], pa.Array] = {}


def _nulls(n: int, kind: int) -> pa.Array:
    """An all-null array of ``_NULL_TYPES[kind]``, shared: Arrow arrays are immutable
    and producers repeat sizes. Keyed by ints: hashing the headers' Arrow type for a
    cache key costs ~2 us, a tenth of a one-record append's encode."""
    arr = _SHARED_NULLS.get((n, kind))
    if arr is None:
        if len(_SHARED_NULLS) >= 256:  # bounded: sizes seen once go together
            _SHARED_NULLS.clear()
        arr = _SHARED_NULLS[(n, kind)] = pa.nulls(n, _NULL_TYPES[kind])
    return arr


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
    key = _nulls(n, _BINARY) if key is None else key

    if ts is not None and not (pa.types.is_timestamp(ts.type) or pa.types.is_integer(ts.type)):
        raise InvalidRecords(f"column 'timestamp' must be int64 milliseconds or a timestamp, "
                             f"not {ts.type}")
    one_timestamp = log_append_time or ts is None or ts.null_count == n
    if one_timestamp:  # all default: no compute kernels
        ts = _int64_array(np.full(n, default_ts_ms * 1000, dtype=np.int64), TS_TYPE)
        min_ts = max_ts = default_ts_ms if n else 0
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
        headers = _nulls(n, _HEADERS)
    return Records((ts, key, value, headers), n, min_ts, max_ts, one_timestamp)


def with_offsets(records: Records, base_offset: int) -> pa.Table:
    """The records as a segment table, with consecutive offsets from ``base_offset``."""
    n = records.num_rows
    offsets = _int64_array(np.arange(base_offset, base_offset + n, dtype=np.int64), pa.int64())
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
    return _write(_stored(table), compression)


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
        base_ts, unit, stamps = _stored_timestamps(_chunked(ts), n)
    return _write(_stored_table(n, base_offset, None, base_ts, unit, stamps, rest),
                  compression)


def _chunked(col: Any) -> pa.ChunkedArray:
    return col if isinstance(col, pa.ChunkedArray) else pa.chunked_array([col])


def _write(stored: pa.Table, compression: str | None) -> Encoded:
    """A stored-form table as an Arrow IPC file, in pieces (see ``encode_chunks``)."""
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
    """Parse segment bytes, verifying the CRC-32 when given.

    ``size`` is the segment's length as its manifest records it: a longer file
    carries a trailer after the segment (see the module docstring), which is
    not read. Returns a table of the segment schema, from either form (see the
    module docstring). Raises CorruptSegment for a checksum mismatch, a truncated
    file, bytes that are not an Arrow IPC file, or a schema of neither form.
    """
    if size is not None and len(data) != size:
        if len(data) < size:
            raise CorruptSegment(path, f"it has {len(data)} bytes, the manifest recorded {size}")
        data = data.slice(0, size) if isinstance(data, pa.Buffer) else memoryview(data)[:size]
    if crc32 is not None:
        actual = checksum(data)
        if actual != crc32:
            raise CorruptSegment(path, f"CRC-32 is {actual:#010x}, the manifest recorded {crc32:#010x}")
    try:
        reader = pa.ipc.open_file(data if isinstance(data, pa.Buffer) else pa.py_buffer(data))
        layout = _layout(reader.schema, path)  # checked before reading
        if layout is None:  # format 1, the segment schema as is
            return reader.read_all()
        return layout.table(reader.get_batch(i) for i in range(reader.num_record_batches))
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
        raise CorruptSegment(path, f"not a readable Arrow IPC file ({e})") from None


def canonical(table: pa.Table, *, path: str = "<table>") -> pa.Table:
    """The segment-schema table of a segment file read by any Arrow reader
    (``pa.ipc.open_file(f).read_all()``): the stored form (format 2) converted, the
    canonical form (format 1) as it is. Raises CorruptSegment for another schema."""
    layout = _layout(table.schema, path)
    return table if layout is None else layout.table(table.to_batches())


def stats(table: pa.Table) -> dict[str, Any]:
    """base/last offset, count and min/max timestamp (ms) of a non-empty segment table."""
    offsets = [_int64_values(c) for c in table.column("offset").chunks if len(c)]
    min_ts, max_ts = timestamp_range(table)
    return {"base_offset": int(offsets[0][0]), "last_offset": int(offsets[-1][-1]),
            "count": table.num_rows, "min_ts": min_ts, "max_ts": max_ts}


def timestamp_range(table: pa.Table) -> tuple[int, int]:
    """(min, max) of a non-empty table's timestamps, in milliseconds."""
    return _timestamp_range(table.column("timestamp"))


def _timestamp_range(ts: pa.Array | pa.ChunkedArray) -> tuple[int, int]:
    chunks = ts.chunks if isinstance(ts, pa.ChunkedArray) else [ts]
    values = [_int64_values(c) for c in chunks if len(c)]
    return min(int(t.min()) for t in values) // 1000, max(int(t.max()) for t in values) // 1000


def _int64_values(chunk: pa.Array) -> np.ndarray:
    """The values of a null-free 64-bit array as int64, without a copy."""
    return np.frombuffer(chunk.buffers()[1], dtype=np.int64, count=chunk.offset + len(chunk))[
        chunk.offset:]



# -- the stored form (format 2; see the module docstring) ------------------------------

FORMAT = 2
FORMAT_KEY = b"sparklog.segment.format"
BASE_OFFSET_KEY = b"sparklog.base_offset"
BASE_TIMESTAMP_KEY = b"sparklog.base_timestamp_us"
TIMESTAMP_UNIT_KEY = b"sparklog.timestamp_unit_us"

#: delta types, narrowest first, with the largest value each holds
_DELTA_TYPES = ((pa.uint8(), 0xFF), (pa.uint16(), 0xFFFF), (pa.uint32(), 0xFFFF_FFFF))
_NUMPY = {pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32}
_UNSIGNED = {8: np.uint8, 16: np.uint16, 32: np.uint32}  # by bit width: no type hashing
#: columns stored as Arrow's null type (no buffers at all) when every value is null
_NULLABLE = ("key", "value", "headers")
_EMPTY = pa.py_buffer(b"")
_NO_HEADERS = pa.nulls(0, HEADER_TYPE.value_type)


def _stored(table: pa.Table) -> pa.Table:
    """A table of the segment schema in the stored form: offsets and timestamps left out
    when derivable, else as narrow deltas; all-null columns of null type."""
    n = table.num_rows
    offsets, stamps, *rest = table.columns
    base_offset, offsets = _stored_offsets(offsets, n)
    base_ts, unit, stamps = _stored_timestamps(stamps, n)
    return _stored_table(n, base_offset, offsets, base_ts, unit, stamps, rest)


def _stored_table(n: int, base_offset: int, offsets: Any, base_ts: int, unit: int,
                  stamps: Any, rest: list[Any]) -> pa.Table:
    """The stored form from its parts: offsets and stamps as ``_stored_offsets`` and
    ``_stored_timestamps`` give them, ``rest`` the key, value and headers columns."""
    nulls = tuple(c.null_count == n for c in rest)
    arrays = [c for c in (offsets, stamps) if c is not None]
    arrays += [_nulls(n, _NULL) if null else c for c, null in zip(rest, nulls)]
    schema = _stored_schema(offsets.type if offsets is not None else None,
                            stamps.type if stamps is not None else None, nulls)
    return pa.Table.from_arrays(arrays, schema=schema.with_metadata({
        FORMAT_KEY: b"%d" % FORMAT, BASE_OFFSET_KEY: b"%d" % base_offset,
        BASE_TIMESTAMP_KEY: b"%d" % base_ts, TIMESTAMP_UNIT_KEY: b"%d" % unit}))


@functools.lru_cache(maxsize=64)
def _stored_schema(offset_type: pa.DataType | None, ts_type: pa.DataType | None,
                   nulls: tuple[bool, ...]) -> pa.Schema:
    """The stored form's schema (without its metadata) for these column types."""
    fields = [pa.field(name, type_, nullable=False)
              for name, type_ in (("offset", offset_type), ("timestamp", ts_type)) if type_]
    fields += [pa.field(name, pa.null()) if null else SCHEMA.field(name)
               for name, null in zip(_NULLABLE, nulls)]
    return pa.schema(fields)


def _stored_offsets(col: pa.ChunkedArray, n: int) -> tuple[int, Any]:
    """The base offset and the stored offset column (None when consecutive)."""
    if n == 0:
        return 0, None
    if col.null_count:  # not a valid segment: kept as it is rather than guessed at
        return 0, col
    offsets = _column_int64(col)
    first = int(offsets[0])
    # Checked in full (exact from the ends alone up to 2 rows): strictly increasing is
    # the writer's rule to keep, and a breach must not be read back as consecutive.
    if int(offsets[-1]) - first == n - 1 \
            and (n <= 2 or bool((offsets[1:] - offsets[:-1] == 1).all())):
        return first, None
    base = int(offsets.min())  # the first, in a valid segment
    return base, _deltas(offsets, base, int(offsets.max()) - base, col)


def _stored_timestamps(col: pa.ChunkedArray, n: int) -> tuple[int, int, Any]:
    """The base timestamp and the deltas' unit (both in microseconds), and the stored
    timestamp column (None when every record has the base timestamp)."""
    if col.null_count:  # not a valid segment: kept as it is
        return 0, 1000, col
    stamps = _column_int64(col)
    lo, hi = (int(stamps.min()), int(stamps.max())) if n > 1 else (int(stamps[0]),) * 2 if n \
        else (0, 0)
    if hi == lo:  # one timestamp for all (a producer's default, LogAppendTime)
        return lo, 1000, None
    if hi - lo > _DELTA_TYPES[-1][1] * 1000:  # over 49 days apart: as they are
        return lo, 1000, col
    # as uint32 where they fit (71 minutes): its division is ~3x faster than int64's
    deltas = (stamps - lo).astype(np.uint32 if hi - lo <= 0xFFFF_FFFF else np.int64)
    ms = deltas // 1000
    if bool((ms * 1000 == deltas).all()):  # whole milliseconds, as Kafka's are
        return lo, 1000, _deltas(ms, 0, (hi - lo) // 1000, col)
    return lo, 1, _deltas(deltas, 0, hi - lo, col)


def _deltas(values: np.ndarray, base: int, span: int, col: pa.ChunkedArray) -> Any:
    """``values - base`` (each from 0 to ``span``) as an array of the narrowest unsigned
    type that holds them, or the canonical column ``col`` if none does."""
    for type_, top in _DELTA_TYPES:
        if span <= top:
            deltas = (values - base if base else values).astype(_NUMPY[type_])
            return pa.Array.from_buffers(type_, len(deltas), [None, pa.py_buffer(deltas)])
    return col


def _column_int64(col: pa.ChunkedArray) -> np.ndarray:
    """The values of a 64-bit column as one int64 array (no copy for one chunk)."""
    if col.num_chunks == 1:
        return _int64_values(col.chunk(0))
    chunks = [_int64_values(c) for c in col.chunks if len(c)]
    return np.concatenate(chunks) if chunks else np.empty(0, np.int64)


@dataclasses.dataclass(slots=True)  # not frozen: its __init__ is ~1 µs faster (per read)
class _Layout:
    """How the columns of a stored-form segment give the segment schema's."""

    offset_type: pa.DataType | None  # None: left out (consecutive from base_offset)
    ts_type: pa.DataType | None  # None: left out (every record at base_ts)
    nulls: tuple[bool, ...]  # key, value, headers: stored as Arrow's null type
    base_offset: int
    base_ts: int
    unit: int

    def table(self, batches: Iterable[pa.RecordBatch]) -> pa.Table:
        """The file's record batches, in order, as a table of the segment schema."""
        out, row = [], 0
        for batch in batches:
            out.append(self.canonical(batch, row))
            row += batch.num_rows
        return pa.Table.from_batches(out, schema=SCHEMA)

    def canonical(self, batch: pa.RecordBatch, row: int) -> pa.RecordBatch:
        """The batch in the segment schema; ``row`` is its first row's number in the file."""
        n, i = batch.num_rows, 0
        if self.offset_type is None:
            start = self.base_offset + row
            offsets = _int64_array(np.arange(start, start + n, dtype=np.int64), pa.int64())
        else:
            offsets, i = batch.column(0), 1
            if self.offset_type != pa.int64():
                offsets = _widen(offsets, self.base_offset, 1, pa.int64())
        if self.ts_type is None:
            stamps = _int64_array(np.full(n, self.base_ts, dtype=np.int64), TS_TYPE)
        else:
            stamps, i = batch.column(i), i + 1
            if self.ts_type != TS_TYPE:
                stamps = _widen(stamps, self.base_ts, self.unit, TS_TYPE)
        columns, zeros = [offsets, stamps], None
        for j, null in enumerate(self.nulls):
            if not null:
                columns.append(batch.column(i + j))
                continue
            # the batch's null columns share one zeroed buffer: their validity (all
            # null) and their offsets (all empty); no values, no child rows
            zeros = zeros or pa.py_buffer(np.zeros(n + 1, dtype=np.int32))
            columns.append(pa.Array.from_buffers(HEADER_TYPE, n, [zeros, zeros], null_count=n,
                                                 children=[_NO_HEADERS]) if j == 2 else
                           pa.Array.from_buffers(pa.binary(), n, [zeros, zeros, _EMPTY],
                                                 null_count=n))
        return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


#: the types each stored column may have (the first two columns may be left out)
_STORED_TYPES = {"offset": (*_NUMPY, pa.int64()), "timestamp": (*_NUMPY, TS_TYPE),
                 "key": (pa.binary(), pa.null()), "value": (pa.binary(), pa.null()),
                 "headers": (HEADER_TYPE, pa.null())}
_STORED_NAMES = [["offset", "timestamp", *_NULLABLE], ["offset", *_NULLABLE],
                 ["timestamp", *_NULLABLE], list(_NULLABLE)]


def _layout(schema: pa.Schema, path: str) -> _Layout | None:
    """The layout of a stored-form segment of this schema; None for the canonical form
    (format 1). Raises CorruptSegment for any other schema."""
    meta = schema.metadata or {}
    marker = meta.get(FORMAT_KEY)
    if marker is None:
        if not schema.equals(SCHEMA):  # metadata aside
            raise CorruptSegment(path, f"schema is {schema}, expected the segment schema")
        return None
    if marker != b"%d" % FORMAT:
        raise CorruptSegment(path, f"it is in segment format {marker.decode(errors='replace')}; "
                                   f"this reader knows formats 1 and {FORMAT}")
    names, types = schema.names, schema.types
    if names not in _STORED_NAMES \
            or any(t not in _STORED_TYPES[c] for c, t in zip(names, types)):
        raise CorruptSegment(path, f"schema is {schema}, not the segment schema's stored form")
    kinds = dict(zip(names, types))
    try:
        layout = _Layout(kinds.get("offset"), kinds.get("timestamp"),
                         tuple(t == pa.null() for t in types[-3:]), int(meta[BASE_OFFSET_KEY]),
                         int(meta[BASE_TIMESTAMP_KEY]), int(meta[TIMESTAMP_UNIT_KEY]))
    except (KeyError, ValueError):
        layout = None
    if layout is None or layout.unit not in (1, 1000):
        raise CorruptSegment(path, f"its schema metadata {meta} lacks a base offset, base "
                                   f"timestamp or timestamp unit (1 or 1000)")
    return layout


def _widen(deltas: pa.Array, base: int, unit: int, type_: pa.DataType) -> pa.Array:
    """``base + deltas * unit`` as a null-free int64-based array of ``type_``."""
    if len(deltas) == 0:
        return _int64_array(np.empty(0, dtype=np.int64), type_)
    values = np.frombuffer(deltas.buffers()[1], dtype=_UNSIGNED[deltas.type.bit_width],
                           count=deltas.offset + len(deltas))[deltas.offset:]
    out = np.multiply(values, unit, dtype=np.int64) if unit != 1 else values.astype(np.int64)
    out += base
    return _int64_array(out, type_)
