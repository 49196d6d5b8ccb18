"""Arrow IPC stream bodies to :class:`~ingest_gateway.server.codec.Parsed` parts (the
format: ``codec``'s docstring): validated in full, and their expanded size counted
(``ipc_size``), before any Arrow kernel touches them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_gateway.errors import BadRequest, InvalidKey, InvalidValue, UncompressedTooLarge
from ingest_gateway.server.codec import (DEFAULT_MAX_UNCOMPRESSED, MAX_TIMESTAMP_MS,
                                         PART_SCHEMA, Parsed)
from ingest_gateway.server.ipc_size import MalformedIpc, expanded_size
from log_layout import InvalidRecords, UnknownPartition
from log_layout.partitioner import partition_for_key
from log_layout.segment import HEADER_TYPE
from log_layout.segment_schema import BINARY, HEADERS, INT64, shared_nulls

ARROW_COLUMNS = ("key", "value", "partition", "timestamp", "headers")


def _is_bytes_type(t: pa.DataType) -> bool:
    """Binary or string of any layout (or all null): what a key or value may be."""
    if pa.types.is_dictionary(t):
        return _is_bytes_type(t.value_type)
    return t == pa.binary() or pa.types.is_string(t) or pa.types.is_large_string(t) \
        or pa.types.is_large_binary(t) or pa.types.is_binary_view(t) \
        or pa.types.is_string_view(t) or pa.types.is_null(t) or pa.types.is_fixed_size_binary(t)


def _check_schema(schema: pa.Schema) -> None:
    """Refuse a schema the produce path cannot take, before any batch is read.

    Raises BadRequest, or InvalidKey / InvalidValue for those columns' types.
    """
    names = schema.names
    if len(set(names)) != len(names):
        raise BadRequest(f"Arrow column names repeat: {names}")
    unknown = set(names) - set(ARROW_COLUMNS)
    if unknown:
        raise BadRequest(f"unknown Arrow columns {sorted(unknown)}; allowed: "
                         + ", ".join(ARROW_COLUMNS))
    if "value" not in names:
        raise BadRequest("the Arrow stream needs a 'value' column")
    types = dict(zip(names, schema.types))
    for name, error in (("key", InvalidKey), ("value", InvalidValue)):
        if name in types and not _is_bytes_type(types[name]):
            raise error(f"Arrow column {name!r} must be binary or string, not {types[name]}")
    if "partition" in types and not pa.types.is_integer(types["partition"]):
        raise BadRequest(f"Arrow column 'partition' must be integers, not {types['partition']}")
    ts = types.get("timestamp")
    if ts is not None and not (pa.types.is_integer(ts) or pa.types.is_timestamp(ts)):
        raise BadRequest(f"Arrow column 'timestamp' must be int64 milliseconds or a "
                         f"timestamp, not {ts}")
    h = types.get("headers")
    if h is not None and not ((pa.types.is_list(h) or pa.types.is_large_list(h))
                              and pa.types.is_struct(h.value_type)):
        raise BadRequest(f"Arrow column 'headers' must be {HEADER_TYPE}, not {h}")


def read_arrow(body: bytes, *, max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED) -> pa.Table:
    """The table of an Arrow IPC stream body, every batch validated in full.

    Arrow kernels trust offsets, lengths and dictionary indices: a mutated stream
    used unvalidated crashes the process, so nothing touches the data before
    ``validate(full=True)``. Raises UncompressedTooLarge if the buffers would expand
    past ``max_uncompressed`` (counted before anything is decompressed); BadRequest
    (or InvalidKey / InvalidValue) for anything that is not a valid produce stream.
    """
    buf = pa.py_buffer(body)
    try:
        size = expanded_size(buf)
    except (MalformedIpc, pa.ArrowException, OSError, ValueError) as e:
        raise BadRequest(f"the body is not a readable Arrow IPC stream: {e}") from None
    if size > max_uncompressed:
        raise UncompressedTooLarge(size, max_uncompressed)
    try:
        reader = pa.ipc.open_stream(buf)
        schema = reader.schema
    except (pa.ArrowException, OSError, ValueError) as e:
        raise BadRequest(f"the body is not a readable Arrow IPC stream: {e}") from None
    try:
        _check_schema(schema)
    except UnicodeDecodeError as e:
        raise BadRequest(f"an Arrow column name is not UTF-8: {e}") from None
    batches = []
    try:
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            batch.validate(full=True)
            batches.append(batch)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise BadRequest(f"the body is not a valid Arrow IPC stream: {e}") from None
    return pa.Table.from_batches(batches, schema)


def _binary_column(name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    if col.type == pa.binary():
        return col
    try:  # the type was checked with the schema; this decodes dictionaries too
        return col.cast(pa.binary())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        error = InvalidKey if name == "key" else InvalidValue
        raise error(f"Arrow column {name!r} ({col.type}) does not convert to binary: {e}") \
            from None


def _timestamps_ms(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """int64 milliseconds of an integer or timestamp column; raises InvalidRecords for a
    value out of 0 .. MAX_TIMESTAMP_MS (the segment's microseconds would overflow)."""
    try:
        if pa.types.is_timestamp(col.type):
            raw = col.cast(pa.int64())  # same width: the stored count of units
            unit = col.type.unit
            ms = pc.multiply_checked(raw, 1000) if unit == "s" else raw if unit == "ms" \
                else pc.divide(raw, 1000 if unit == "us" else 1_000_000)
        else:
            ms = col.cast(pa.int64())  # a safe cast: uint64 past int64 raises
    except pa.ArrowInvalid as e:
        raise InvalidRecords(f"Arrow column 'timestamp' ({col.type}) is out of range: {e}") \
            from None
    lo_hi = pc.min_max(ms)
    lo, hi = lo_hi["min"].as_py(), lo_hi["max"].as_py()
    if lo is not None and (lo < 0 or hi > MAX_TIMESTAMP_MS):
        raise InvalidRecords(f"Arrow column 'timestamp' holds {lo if lo < 0 else hi} ms; "
                             f"timestamps must be from 0 to {MAX_TIMESTAMP_MS} ms")
    return ms


def _headers_column(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """The column in HEADER_TYPE; raises BadRequest if it does not convert, or
    InvalidRecords for a header without a key (the segment's key is not nullable)."""
    if col.type != HEADER_TYPE:
        try:
            col = col.cast(HEADER_TYPE)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            raise BadRequest(f"Arrow column 'headers' must be {HEADER_TYPE}, "
                             f"not {col.type}") from None
    if col.null_count < len(col):
        keys = pc.struct_field(pc.list_flatten(col), "key")  # a null header -> a null key
        if keys.null_count:
            raise InvalidRecords("Arrow column 'headers' has a header without a key")
    return col


def _arrow_columns(table: pa.Table) -> tuple[pa.Table, pa.ChunkedArray]:
    """The records in PART_SCHEMA, and the key column (for routing)."""
    n = table.num_rows
    names = table.column_names
    value = _binary_column("value", table.column("value"))
    key = _binary_column("key", table.column("key")) if "key" in names \
        else pa.chunked_array([shared_nulls(n, BINARY)])
    ts = _timestamps_ms(table.column("timestamp")) if "timestamp" in names \
        else pa.chunked_array([shared_nulls(n, INT64)])
    headers = _headers_column(table.column("headers")) if "headers" in names \
        else pa.chunked_array([shared_nulls(n, HEADERS)])
    return pa.Table.from_arrays([key, value, ts, headers], schema=PART_SCHEMA), key


def arrow_to_parsed(body: bytes, *, topic: str, partitions: int, path_partition: int | None,
                    sticky: Callable[[], int],
                    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED) -> Parsed:
    """Parse an Arrow IPC stream body and split it by partition, column-wise.

    Raises what :func:`read_arrow` raises, InvalidRecords, UnknownPartition.
    """
    table = read_arrow(body, max_uncompressed=max_uncompressed)
    n = table.num_rows
    if n == 0:
        raise BadRequest("the Arrow stream holds no records")
    whole, key = _arrow_columns(table)
    if "partition" in table.column_names:
        pcol = table.column("partition")
        if pcol.null_count:
            raise BadRequest("Arrow column 'partition' has nulls")
        lo_hi = pc.min_max(pcol)
        lo, hi = lo_hi["min"].as_py(), lo_hi["max"].as_py()
        if path_partition is not None and (lo != path_partition or hi != path_partition):
            raise BadRequest(f"the Arrow 'partition' column names partitions {lo}..{hi} but "
                             f"the URL names partition {path_partition}")
        if lo < 0 or hi >= partitions:
            raise UnknownPartition(topic, lo if lo < 0 else hi, partitions)
        if lo == hi:
            return Parsed({lo: whole})
        pids = pcol.to_numpy()
        return _split(whole, np.asarray(pids, dtype=np.int64))
    if path_partition is not None:
        if path_partition >= partitions:
            raise UnknownPartition(topic, path_partition, partitions)
        return Parsed({path_partition: whole})
    if key.null_count == n:
        return Parsed({sticky(): whole})
    # Keyed records without a partition column: murmur2 per key (the Producer client
    # computes partitions itself and never takes this path).
    fallback = sticky()
    pids = np.fromiter((fallback if k is None else partition_for_key(k, partitions)
                        for k in key.to_pylist()), dtype=np.int64, count=n)
    return _split(whole, pids)


def _split(table: pa.Table, pids: np.ndarray) -> Parsed:
    order = np.argsort(pids, kind="stable")
    sorted_ids = pids[order]
    bounds = np.flatnonzero(np.diff(sorted_ids)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(pids)]))
    # one take per partition (not slices of one take): each part owns its buffers,
    # so buffer-size accounting counts every byte once
    return Parsed({int(sorted_ids[s]): table.take(pa.array(order[s:e]))
                   for s, e in zip(starts, ends)})
