"""The stored form of a segment (format 2): what ``segment.encode`` writes and
``segment.decode`` reads back (the format: ``segment``'s module docstring).

``stored`` and ``stored_table`` build a stored-form table from the segment schema's
columns; ``layout`` reads a file's schema and gives how its columns become the
segment schema's again (``Layout.table``), raising CorruptSegment for a schema of
neither form.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from log_layout.errors import CorruptSegment
from log_layout.segment_schema import (
    HEADER_TYPE,
    NULL,
    SCHEMA,
    TS_TYPE,
    int64_values,
    shared_nulls,
)

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


def stored(table: pa.Table) -> pa.Table:
    """A table of the segment schema in the stored form: offsets and timestamps left out
    when derivable, else as narrow deltas; all-null columns of null type."""
    n = table.num_rows
    offsets, stamps, *rest = table.columns
    base_offset, offsets = _stored_offsets(offsets, n)
    base_ts, unit, stamps = stored_timestamps(stamps, n)
    return stored_table(n, base_offset, offsets, base_ts, unit, stamps, rest)


def stored_table(n: int, base_offset: int, offsets: Any, base_ts: int, unit: int,
                  stamps: Any, rest: list[Any]) -> pa.Table:
    """The stored form from its parts: offsets and stamps as ``_stored_offsets`` and
    ``_stored_timestamps`` give them, ``rest`` the key, value and headers columns."""
    nulls = tuple(c.null_count == n for c in rest)
    arrays = [c for c in (offsets, stamps) if c is not None]
    arrays += [shared_nulls(n, NULL) if null else c for c, null in zip(rest, nulls)]
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


def stored_timestamps(col: pa.ChunkedArray, n: int) -> tuple[int, int, Any]:
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
        return int64_values(col.chunk(0))
    chunks = [int64_values(c) for c in col.chunks if len(c)]
    return np.concatenate(chunks) if chunks else np.empty(0, np.int64)


@dataclasses.dataclass(slots=True)  # not frozen: its __init__ is ~1 µs faster (per read)
class Layout:
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
            out.append(self.columns(batch, row))
            row += batch.num_rows
        if len(out) == 1:  # the usual segment: one batch, no RecordBatch in between
            return pa.Table.from_arrays(out[0], schema=SCHEMA)
        return pa.Table.from_batches([pa.RecordBatch.from_arrays(c, schema=SCHEMA) for c in out],
                                     schema=SCHEMA)

    def canonical(self, batch: pa.RecordBatch, row: int) -> pa.RecordBatch:
        """The batch in the segment schema; ``row`` is its first row's number in the file."""
        return pa.RecordBatch.from_arrays(self.columns(batch, row), schema=SCHEMA)

    def columns(self, batch: pa.RecordBatch, row: int) -> list[pa.Array]:
        """The segment schema's columns of a batch; ``row`` is its first row's number in
        the file."""
        n, i = batch.num_rows, 0
        if self.offset_type is None:
            start = self.base_offset + row
            offsets = _consecutive(start, n)
        else:
            offsets, i = batch.column(0), 1
            if self.offset_type.id != _INT64_ID:
                offsets = _widen(offsets, self.base_offset, 1, _INT64)
        if self.ts_type is None:
            buf, values = _pooled(n)
            values.fill(self.base_ts)
            stamps = _array(TS_TYPE, buf, values)
        else:
            stamps, i = batch.column(i), i + 1
            if self.ts_type.id != _TIMESTAMP_ID:
                stamps = _widen(stamps, self.base_ts, self.unit, TS_TYPE)
        columns = [offsets, stamps]
        for j, null in enumerate(self.nulls):
            columns.append(_null_column(n, j == 2) if null else batch.column(i + j))
        return columns


_INT64 = pa.int64()
_INT64_ID, _TIMESTAMP_ID = _INT64.id, TS_TYPE.id
#: all-null key/value and headers columns by row count, shared between reads (Arrow
#: arrays are immutable): building them is ~4 us of a 10,000-record segment's rebuild
_NULL_COLUMNS: dict[int, tuple[pa.Array, pa.Array]] = {}


def _null_column(n: int, headers: bool) -> pa.Array:
    """An all-null binary (or headers) column of ``n`` rows: validity (all null) and
    offsets (all empty) share one zeroed buffer; no values, no child rows."""
    pair = _NULL_COLUMNS.get(n)
    if pair is None:
        zeros = np.zeros(n + 1, dtype=np.int32)
        zeros.flags.writeable = False  # an immutable Arrow buffer: the arrays are shared
        zeros = pa.py_buffer(zeros)
        pair = (pa.Array.from_buffers(pa.binary(), n, [zeros, zeros, _EMPTY], null_count=n),
                pa.Array.from_buffers(HEADER_TYPE, n, [zeros, zeros], null_count=n,
                                      children=[_NO_HEADERS]))
        if len(_NULL_COLUMNS) >= 64:  # bounded: sizes seen once go together
            _NULL_COLUMNS.clear()
        _NULL_COLUMNS[n] = pair
    return pair[headers]


#: the types each stored column may have (the first two columns may be left out)
_STORED_TYPES = {"offset": (*_NUMPY, pa.int64()), "timestamp": (*_NUMPY, TS_TYPE),
                 "key": (pa.binary(), pa.null()), "value": (pa.binary(), pa.null()),
                 "headers": (HEADER_TYPE, pa.null())}
_STORED_NAMES = [["offset", "timestamp", *_NULLABLE], ["offset", *_NULLABLE],
                 ["timestamp", *_NULLABLE], list(_NULLABLE)]


def layout(schema: pa.Schema, path: str) -> Layout | None:
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
    # The columns' part is checked once per schema: a schema read is compared with the
    # ones that passed (Arrow's equality, metadata aside: ~0.05 us where serializing
    # it for a dict key was ~2 us and comparing the types ~5 us).
    global _KNOWN
    for known, kinds in _KNOWN:
        if schema.equals(known):
            break
    else:
        kinds = _kinds(schema, path)
        # bounded (a stored form has at most 5 * 5 * 8 schemas), newest first; replaced
        # whole, so threads reading it meanwhile see one tuple or the other
        _KNOWN = ((schema.remove_metadata(), kinds),) + _KNOWN[:15]
    try:
        layout = Layout(*kinds, int(meta[BASE_OFFSET_KEY]), int(meta[BASE_TIMESTAMP_KEY]),
                        int(meta[TIMESTAMP_UNIT_KEY]))
    except (KeyError, ValueError):
        layout = None
    if layout is None or layout.unit not in (1, 1000):
        raise CorruptSegment(path, f"its schema metadata {meta} lacks a base offset, base "
                                   f"timestamp or timestamp unit (1 or 1000)")
    return layout


Kinds = tuple[pa.DataType | None, pa.DataType | None, tuple[bool, ...]]
#: stored-form schemas (without their metadata) that passed ``_kinds``, and its answer
_KNOWN: tuple[tuple[pa.Schema, Kinds], ...] = ()


def _kinds(schema: pa.Schema, path: str) -> Kinds:
    """The offset type, timestamp type and null columns of a stored-form schema (its
    metadata aside); raises CorruptSegment for another."""
    names, types = schema.names, schema.types
    if names not in _STORED_NAMES \
            or any(t not in _STORED_TYPES[c] for c, t in zip(names, types)):
        raise CorruptSegment(path, f"schema is {schema}, not the segment schema's stored form")
    kinds = dict(zip(names, types))
    return (kinds.get("offset"), kinds.get("timestamp"),
            tuple(t == pa.null() for t in types[-3:]))


def _widen(deltas: pa.Array, base: int, unit: int, type_: pa.DataType) -> pa.Array:
    """``base + deltas * unit`` as a null-free int64-based array of ``type_``."""
    n = len(deltas)
    buf, out = _pooled(n)
    if n:
        values = np.frombuffer(deltas.buffers()[1], dtype=_UNSIGNED[deltas.type.bit_width],
                               count=deltas.offset + n)[deltas.offset:]
        if unit != 1:
            np.multiply(values, unit, out=out, dtype=np.int64)
            out += base
        else:
            np.add(values, base, out=out, dtype=np.int64)
    return _array(type_, buf, out)


# The columns a read rebuilds are allocated from Arrow's memory pool (mimalloc), not
# NumPy's (malloc): a consumer holds a fetch's tables (20 segments of 10,000 records at
# max.poll.records 200,000), and malloc gave their 3 MB back to the kernel at each
# release and page-faulted it in again at the next fetch: ~55 us a segment where the
# pool, which keeps freed memory a while, takes ~12 (measured 2026-11-28).
#: 0, 1, 2, ...: consecutive offsets are this plus their base, in blocks of its length
_IOTA = np.arange(1 << 16, dtype=np.int64)
_IOTA.flags.writeable = False


def _pooled(n: int) -> tuple[pa.Buffer, np.ndarray]:
    """A buffer of ``n`` int64 from Arrow's memory pool, and a writable view of it."""
    buf = pa.allocate_buffer(8 * n)
    return buf, np.frombuffer(buf, dtype=np.int64)


def _array(type_: pa.DataType, buf: pa.Buffer, values: np.ndarray) -> pa.Array:
    """A null-free array of ``type_`` over ``buf`` (its int64 ``values`` written)."""
    return pa.Array.from_buffers(type_, len(values), [None, buf])


def _consecutive(start: int, n: int) -> pa.Array:
    """The int64 array ``start, start + 1, ..., start + n - 1``."""
    buf, out = _pooled(n)
    block = len(_IOTA)
    for k in range(0, n, block):
        m = min(block, n - k)
        np.add(_IOTA[:m], start + k, out=out[k:k + m])
    return _array(_INT64, buf, out)
