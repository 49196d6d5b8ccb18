"""The records of one Kafka record batch to and from Arrow columns.

``records`` frames, checks and decompresses batches; this module turns one batch's
records (the bytes after its 61-byte header, uncompressed) into the produce schema's
columns, and a table's columns into a batch. Two implementations, the same answers
(``tests/ingest_gateway/kafka/test_records_columns.py`` compares them byte for byte):

* ``_records_c`` (``_records_c.c``, built by ``pip install -e .`` through
  ``setup.py``): one pass over the records straight into Arrow's buffers (offsets,
  data, validity bitmaps), no Python object per record, with the GIL released.
  Measured by ``bench/kafka_records.py`` (5,000 x 100 B, uncompressed): decode
  0.03 us a record, encode 0.04 (through aiokafka: 0.34 and 0.43). Under
  ``bench/kafka_protocol.py`` the gateway had spent two thirds of its busy time in
  the aiokafka path, on the event loop, ahead of every pipelined request.
* aiokafka's compiled reader and builder, a Python object per record: when the
  extension is not built (logged once at import), and for records with headers (a
  small share of traffic; the C pass checks their framing but does not build the
  ``list<struct>`` column).

Errors: :func:`read` raises ValueError for any malformed record (``records`` turns it
into CORRUPT_MESSAGE with the batch's position); :func:`write` raises ValueError for
timestamps that are null for some records only, or offsets that do not increase.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from aiokafka.record.default_records import (
    DefaultRecordBatch,
    DefaultRecordBatchBuilder,
)

from log_layout.segment_schema import HEADER_TYPE, HEADERS, shared_nulls

logger = logging.getLogger("sparklog.gateway.kafka")

try:
    from ingest_gateway.kafka import _records_c
except ImportError:  # not built: aiokafka's path, ~10x slower a record
    _records_c = None
    logger.warning("ingest_gateway.kafka._records_c is not built (pip install -e . builds "
                   "it): Kafka record batches go through aiokafka's reader and builder")

HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61 bytes before the records
LOG_OVERHEAD = 12  # baseOffset + batchLength
CRC_START = 21  # the CRC covers attributes .. end
TRANSACTIONAL_BIT = 0x10
NO_TIMESTAMP = -1
_MAX_BATCH_BYTES = 2**31 - 1  # aiokafka's builder refuses records past its batch size


@dataclass(frozen=True, slots=True)
class Columns:
    """One batch's records as columns."""

    keys: pa.Array  # binary
    values: pa.Array  # binary
    stamps: np.ndarray  # int64 ms, as the batch states them (Kafka's -1 kept)
    deltas: np.ndarray  # int64, each record's offset minus the batch's base offset
    headers: pa.Array  # HEADER_TYPE: null for all when no record has any


def read(header: bytes, body: memoryview, *, count: int, first_timestamp: int,
         max_timestamp: int, log_append_time: bool) -> Columns:
    """The ``count`` records of ``body``; ``header`` is the batch's 61 bytes with its
    codec bits cleared (aiokafka's path reads header and body together). Raises
    ValueError for a malformed record."""
    if _records_c is not None:
        (kv, ko, kd, kn, vv, vo, vd, vn, ts, dl, has_headers) = _records_c.decode(
            body, count, first_timestamp, max_timestamp, log_append_time)
        if not has_headers:
            return Columns(_binary(count, kv, ko, kd, kn), _binary(count, vv, vo, vd, vn),
                           np.frombuffer(ts, np.int64),
                           np.frombuffer(dl, np.int32).astype(np.int64),
                           shared_nulls(count, HEADERS))
    return _read_aiokafka(header + body, HEADER.unpack_from(header)[0], count)


def _binary(n: int, validity: bytearray | None, offsets: bytearray, data: bytearray,
            nulls: int) -> pa.Array:
    return pa.Array.from_buffers(
        pa.binary(), n, [None if validity is None else pa.py_buffer(validity),
                         pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def _read_aiokafka(buf: bytes, base_offset: int, count: int) -> Columns:
    """One pass that keeps no record object: holding 100k of them (and their header
    lists, which the garbage collector tracks) set off collections that tripled the
    cost (0.8 us a record against 0.3)."""
    keys, values, stamps, offsets, headers = [], [], [], [], []
    key, value, stamp, offset = keys.append, values.append, stamps.append, offsets.append
    try:
        for i, r in enumerate(DefaultRecordBatch(buf)):
            key(r.key)
            value(r.value)
            stamp(r.timestamp)
            offset(r.offset)
            h = r.headers
            if h:
                headers.append((i, h))
    except Exception as e:  # noqa: BLE001 - CorruptRecordException, UnicodeDecodeError, ...
        raise ValueError(f"{type(e).__name__}: {e}") from None
    if len(offsets) != count:
        raise ValueError(f"{len(offsets)} records where the header claims {count}")
    return Columns(pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
                   np.array(stamps, np.int64), np.array(offsets, np.int64) - base_offset,
                   _headers(headers, count))


def _headers(headers: list, count: int) -> pa.Array:
    """Null for every record when none has headers (as HTTP produce leaves them),
    else an empty list for those without."""
    if not headers:
        return shared_nulls(count, HEADERS)
    rows: list = [[]] * count
    for i, h in headers:
        rows[i] = [{"key": k, "value": v} for k, v in h]
    return pa.array(rows, HEADER_TYPE)


def write(table: pa.Table, *, base_offset: int, is_transactional: bool, producer_id: int,
          producer_epoch: int, base_sequence: int) -> bytearray:
    """An uncompressed record batch v2 of ``table``'s records, as aiokafka's builder
    makes it (base offset 0, partition leader epoch -1, CRC set), in a bytearray the
    caller may change. ``table`` has at least one row. Raises ValueError (see module)."""
    n = table.num_rows
    stamps, deltas = _timestamps_ms(table), _deltas(table, base_offset)
    keys, values = _binary_column(table, "key"), _binary_column(table, "value")
    if _records_c is None or keys is None or values is None or _has_headers(table):
        return _write_aiokafka(table, stamps, deltas, is_transactional, producer_id,
                               producer_epoch, base_sequence)
    buf = _records_c.encode(n, *keys, *values, stamps, int(stamps[0]), deltas)
    HEADER.pack_into(buf, 0, 0, len(buf) - LOG_OVERHEAD, -1, 2, 0,
                     TRANSACTIONAL_BIT if is_transactional else 0, int(deltas[-1]),
                     int(stamps[0]), int(stamps.max()), producer_id, producer_epoch,
                     base_sequence, n)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(memoryview(buf)[CRC_START:]))
    return buf


def _binary_column(table: pa.Table, name: str) -> tuple | None:
    """(validity or None, offsets, data, array offset) of a binary column, all null
    when absent; None for another layout (aiokafka's path takes it)."""
    if name not in table.column_names:
        arr = shared_nulls(table.num_rows, 0)  # binary
    else:
        col = table.column(name)
        arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    if arr.type != pa.binary():
        return None
    validity, offsets, data = arr.buffers()
    if arr.null_count and validity is None:
        return None
    return (validity if arr.null_count else None, offsets,
            data if data is not None else b"", arr.offset)


def _has_headers(table: pa.Table) -> bool:
    if "headers" not in table.column_names:
        return False
    col = table.column("headers")
    if col.null_count == len(col):
        return False
    return any(pc.sum(pc.list_value_length(c)).as_py() or 0
               for c in col.chunks)


def _write_aiokafka(table: pa.Table, stamps: np.ndarray, deltas: np.ndarray,
                    is_transactional: bool, producer_id: int, producer_epoch: int,
                    base_sequence: int) -> bytearray:
    builder = DefaultRecordBatchBuilder(2, 0, int(is_transactional), producer_id,
                                        producer_epoch, base_sequence, _MAX_BATCH_BYTES)
    keys, values = _column(table, "key"), _column(table, "value")
    headers = _column(table, "headers")
    stamp_list, delta_list = stamps.tolist(), deltas.tolist()
    append = builder.append
    for i in range(table.num_rows):
        h = headers[i]
        append(delta_list[i], stamp_list[i], keys[i], values[i],
               [(x["key"], x["value"]) for x in h] if h else [])
    return builder.build()


def _column(table: pa.Table, name: str) -> list:
    if name not in table.column_names:
        return [None] * table.num_rows
    return table.column(name).to_pylist()


def _timestamps_ms(table: pa.Table) -> np.ndarray:
    """A segment's ``timestamp[us]`` or the produce schema's int64 ms, as int64 ms
    (Kafka's -1 when absent or all null)."""
    n = table.num_rows
    if "timestamp" not in table.column_names:
        return np.full(n, NO_TIMESTAMP, np.int64)
    col = table.column("timestamp")
    if col.null_count == len(col):
        return np.full(n, NO_TIMESTAMP, np.int64)
    if col.null_count:  # Kafka has no per-record "no timestamp" but the batch's -1
        raise ValueError("timestamps must be all null or none null")
    if pa.types.is_timestamp(col.type):
        per_ms = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}[col.type.unit]
        raw = col.cast(pa.int64()).to_numpy()
        return raw // per_ms if per_ms >= 1 else raw * 1000
    return np.ascontiguousarray(col.to_numpy(), np.int64)


def _deltas(table: pa.Table, base_offset: int) -> np.ndarray:
    """Offset deltas from the table's ``offset`` column (gaps kept), else 0 .. n-1."""
    n = table.num_rows
    if "offset" not in table.column_names:
        return np.arange(n, dtype=np.int64)
    deltas = np.ascontiguousarray(table.column("offset").to_numpy(), np.int64) - base_offset
    if n and (deltas[0] < 0 or deltas[-1] >= 2**31 or (np.diff(deltas) <= 0).any()):
        raise ValueError(f"offsets must increase from base_offset {base_offset} by less "
                         f"than 2**31; got {int(deltas[0]) + base_offset} .. "
                         f"{int(deltas[-1]) + base_offset}")
    return deltas
