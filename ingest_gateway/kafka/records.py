"""Kafka record batches (v2, magic 2) to and from Arrow tables.

The wire format (Kafka's ``DefaultRecordBatch``; every integer big-endian)::

    offset  size  field
         0     8  baseOffset               not covered by the CRC: the broker stamps it
         8     4  batchLength              bytes after this field (total = 12 + batchLength)
        12     4  partitionLeaderEpoch     not covered by the CRC either
        16     1  magic                    2; 0 and 1 (old message sets) are refused
        17     4  crc                      CRC-32C of bytes 21 .. end
        21     2  attributes               bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4,
                                           4 zstd), 3 timestamp type (1 = LogAppendTime),
                                           4 transactional, 5 control
        23     4  lastOffsetDelta
        27     8  firstTimestamp           milliseconds
        35     8  maxTimestamp
        43     8  producerId               -1 without idempotence
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordCount
        61     .  records                  compressed as one block when codec != 0

A record is ``length varint, attributes int8, timestampDelta varlong, offsetDelta
varint, key varint-length bytes (-1 = null), value likewise, headers: varint count of
(key varint-length UTF-8, value varint-length bytes (-1 = null))``.

:func:`decode_batches` checks the framing and the CRC itself (``crc32c``, C: ~5 ns a
record), decompresses with a cap on the expanded size (``cramjam``'s ``*_into``
functions write into a buffer of bounded size and fail when it is full, so a
compression bomb costs at most ``max_bytes`` of memory), then reads the records
(``records_columns``: a compiled pass into Arrow buffers, ~0.03 us a record, or
aiokafka's reader) into the produce schema the batcher takes (``PART_SCHEMA``: key,
value, timestamp in ms, headers). :func:`encode_batch` builds a batch from a segment's
table (offset deltas from its ``offset`` column, so compacted gaps survive) through
``records_columns`` too; :func:`encode_control_batch` builds a transaction marker's
batch.

Errors carry Kafka's error code (``error_code``) so the listener can answer with it:
CORRUPT_MESSAGE (2) for bad framing or CRC, UNSUPPORTED_VERSION (35) for magic 0/1,
MESSAGE_TOO_LARGE (10) past ``max_bytes``, INVALID_TIMESTAMP (32),
UNSUPPORTED_COMPRESSION_TYPE (76) for codec ids 5-7.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cramjam
import crc32c
import numpy as np
import pyarrow as pa
from aiokafka.codec import snappy_encode

from conf.errors import SparklogError
from ingest_gateway.kafka import records_columns as columns
from ingest_gateway.kafka.records_columns import CRC_START, HEADER, LOG_OVERHEAD
from ingest_gateway.server.codec import MAX_TIMESTAMP_MS, PART_SCHEMA
from log_layout.segment_schema import int64_array
from log_layout.txn_writes import marker_records

MIN_BATCH_LENGTH = HEADER.size - LOG_OVERHEAD
MIN_RECORD_SIZE = 7  # length, attributes, ts delta, offset delta, key, value, headers: 1 each
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_MASK, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, CONTROL_BIT = 0x07, 0x08, 0x10, 0x20
CREATE_TIME, LOG_APPEND_TIME = 0, 1
_XERIAL_MAGIC = b"\x82SNAPPY\x00"  # the Java client's snappy framing (xerial)


class KafkaRecordsError(SparklogError, ValueError):
    """Record batch bytes the broker refuses; ``error_code`` is Kafka's answer code."""

    error_code = 2  # CORRUPT_MESSAGE
    code = "corrupt_message"

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class CorruptRecordBatch(KafkaRecordsError):
    """Truncated, mis-sized, CRC mismatch, undecodable compression or records."""


class UnsupportedMagic(KafkaRecordsError):
    error_code, code = 35, "unsupported_version"

    def __init__(self, magic: int, position: int):
        self.magic, self.position = magic, position
        super().__init__(f"the record batch at byte {position} has magic {magic}; only "
                         f"magic 2 (Kafka 0.11+ record batches) is supported")


class RecordsTooLarge(KafkaRecordsError):
    error_code, code = 10, "message_too_large"

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        super().__init__(f"the records expand past max_bytes = {max_bytes} bytes")


class InvalidTimestamp(KafkaRecordsError):
    error_code, code = 32, "invalid_timestamp"


class UnsupportedCompression(KafkaRecordsError):
    error_code, code = 76, "unsupported_compression_type"


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """One record batch's header fields and its records in ``PART_SCHEMA``."""

    base_offset: int
    partition_leader_epoch: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    codec: str
    timestamp_type: int  # CREATE_TIME or LOG_APPEND_TIME
    is_transactional: bool
    is_control: bool
    #: each record's offset minus base_offset (0 .. n-1 from a producer)
    offset_deltas: np.ndarray
    #: key, value, timestamp (ms; null for Kafka's -1 "no timestamp"), headers
    table: pa.Table
    #: the batch's bytes as received (a view into the request; the tail cache keeps them)
    raw: memoryview = memoryview(b"")

    @property
    def record_count(self) -> int:
        return self.table.num_rows

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record (Kafka's wrap-around at 2**31)."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % 2**31

    def offsets(self) -> pa.Array:
        """Each record's absolute offset as int64."""
        return int64_array(self.offset_deltas.astype(np.int64) + self.base_offset, pa.int64())


def decode_batches(data: bytes | bytearray | memoryview, *, max_bytes: int
                   ) -> list[DecodedBatch]:
    """Every record batch in ``data`` (a Produce request's ``records``), checked.

    ``max_bytes`` caps the records' total size after decompression. Raises
    UnsupportedMagic, CorruptRecordBatch, RecordsTooLarge, InvalidTimestamp,
    UnsupportedCompression (all KafkaRecordsError, a ValueError); nothing is returned
    unless every batch is valid.
    """
    view = memoryview(data).cast("B")
    batches: list[DecodedBatch] = []
    budget = max_bytes
    pos = 0
    if len(view) == 0:
        raise CorruptRecordBatch("the records are empty")
    while pos < len(view):
        end, fields = _frame(view, pos)
        attributes = fields[5]
        codec = attributes & CODEC_MASK
        if codec >= len(CODECS):
            raise UnsupportedCompression(f"the record batch at byte {pos} names compression "
                                         f"codec {codec}; known: 0-4 ({', '.join(CODECS)})")
        body = view[pos + HEADER.size:end]
        if codec:
            body = _decompress(CODECS[codec], body, budget)
        if len(body) > budget:
            raise RecordsTooLarge(max_bytes)
        budget -= len(body)
        batches.append(_decode_one(view[pos:end], body, fields, pos))
        pos = end
    return batches


def _frame(view: memoryview, pos: int) -> tuple[int, tuple]:
    """The end and header fields of the batch at ``pos``, its framing and CRC checked."""
    if len(view) - pos < 17:
        raise CorruptRecordBatch(f"the record batch at byte {pos} is truncated: "
                                 f"{len(view) - pos} bytes")
    magic = view[pos + 16]
    if magic != 2:
        if magic in (0, 1):
            raise UnsupportedMagic(magic, pos)
        raise CorruptRecordBatch(f"the record batch at byte {pos} has magic {magic}")
    (length,) = struct.unpack_from(">i", view, pos + 8)
    if length < MIN_BATCH_LENGTH:
        raise CorruptRecordBatch(f"the record batch at byte {pos} claims {length} bytes, "
                                 f"under the header's {MIN_BATCH_LENGTH}")
    end = pos + LOG_OVERHEAD + length
    if end > len(view):
        raise CorruptRecordBatch(f"the record batch at byte {pos} claims {length} bytes "
                                 f"but {len(view) - pos - LOG_OVERHEAD} follow")
    fields = HEADER.unpack_from(view, pos)
    crc = crc32c.crc32c(view[pos + CRC_START:end])
    if crc != fields[4]:
        raise CorruptRecordBatch(f"the record batch at byte {pos} fails its CRC-32C: "
                                 f"stored {fields[4]:#010x}, computed {crc:#010x}")
    count = fields[12]
    if count <= 0 or count * MIN_RECORD_SIZE > 2**31 or fields[6] < count - 1:
        raise CorruptRecordBatch(f"the record batch at byte {pos} claims {count} records "
                                 f"with lastOffsetDelta {fields[6]}")
    return end, fields


def _decompress(codec: str, body: memoryview, limit: int) -> memoryview:
    """``body`` expanded, at most ``limit`` bytes of it; raises RecordsTooLarge past it,
    CorruptRecordBatch if it does not decompress."""
    if codec == "snappy":
        return _unsnappy(body, limit)
    fn = getattr(cramjam, codec).decompress_into
    # Start near a typical ratio and double: allocating ``limit`` for every small batch
    # would cost more than the decompression.
    size = min(limit, max(1 << 16, 8 * len(body)))
    while True:
        out = bytearray(size)
        try:
            n = fn(body, out)
        except cramjam.DecompressionError as e:
            if "whole buffer" not in str(e):
                raise CorruptRecordBatch(f"the {codec} records do not decompress: {e}") \
                    from None
            if size >= limit:
                raise RecordsTooLarge(limit) from None
            size = min(limit, size * 4)
            continue
        return memoryview(out)[:n]


def _unsnappy(body: memoryview, limit: int) -> memoryview:
    """Raw snappy (librdkafka) or xerial-framed snappy (the Java client): each raw
    block states its expanded length up front, checked before any allocation."""
    blocks = [body]
    if bytes(body[:8]) == _XERIAL_MAGIC:
        blocks, pos = [], 16  # magic, version, compatible version
        while pos < len(body):
            if pos + 4 > len(body):
                raise CorruptRecordBatch("a snappy block's length is truncated")
            (n,) = struct.unpack_from(">i", body, pos)
            if n < 0 or pos + 4 + n > len(body):
                raise CorruptRecordBatch(f"a snappy block claims {n} bytes")
            blocks.append(body[pos + 4:pos + 4 + n])
            pos += 4 + n
    sizes = [_snappy_length(b) for b in blocks]
    if sum(sizes) > limit:
        raise RecordsTooLarge(limit)
    out = bytearray(sum(sizes))
    at = 0
    for block, size in zip(blocks, sizes):
        try:
            n = cramjam.snappy.decompress_raw_into(block, memoryview(out)[at:at + size])
        except cramjam.DecompressionError as e:
            raise CorruptRecordBatch(f"the snappy records do not decompress: {e}") from None
        if n != size:
            raise CorruptRecordBatch(f"a snappy block expanded to {n} bytes, not {size}")
        at += size
    return memoryview(out)


def _snappy_length(block: memoryview) -> int:
    """The expanded length a raw snappy block starts with (an unsigned varint)."""
    result = shift = 0
    for i in range(min(5, len(block))):
        b = block[i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
    raise CorruptRecordBatch("a snappy block's length varint is malformed")


def _decode_one(raw: memoryview, body: memoryview, fields: tuple, pos: int
                ) -> DecodedBatch:
    """The records of one checked batch (``raw``: its bytes; ``body`` its records,
    already decompressed)."""
    (base_offset, _, leader_epoch, _, _, attributes, last_delta, first_ts, max_ts,
     producer_id, producer_epoch, base_sequence, count) = fields
    if count > len(body) // MIN_RECORD_SIZE:
        raise CorruptRecordBatch(f"the record batch at byte {pos} claims {count} records "
                                 f"in {len(body)} bytes")
    # aiokafka's reader (records_columns) must not decompress
    plain = bytearray(raw[:HEADER.size])
    struct.pack_into(">h", plain, CRC_START, attributes & ~CODEC_MASK)
    try:
        cols = columns.read(bytes(plain), body, count=count, first_timestamp=first_ts,
                            max_timestamp=max_ts,
                            log_append_time=bool(attributes & TIMESTAMP_TYPE_BIT))
    except ValueError as e:
        raise CorruptRecordBatch(f"the record batch at byte {pos} has a malformed record: "
                                 f"{e}") from None
    deltas = cols.deltas
    if len(deltas) != count or deltas.min() < 0 or deltas.max() != last_delta:
        raise CorruptRecordBatch(f"the record batch at byte {pos}: record offset deltas do "
                                 f"not match lastOffsetDelta {last_delta}")
    table = pa.Table.from_arrays([cols.keys, cols.values, _timestamps(cols.stamps, pos),
                                  cols.headers], schema=PART_SCHEMA)
    return DecodedBatch(base_offset, leader_epoch, last_delta, first_ts, max_ts, producer_id,
                        producer_epoch, base_sequence, CODECS[attributes & CODEC_MASK],
                        (attributes & TIMESTAMP_TYPE_BIT) >> 3,
                        bool(attributes & TRANSACTIONAL_BIT), bool(attributes & CONTROL_BIT),
                        deltas.astype(np.int32), table, raw)


def _timestamps(ts: np.ndarray, pos: int) -> pa.Array:
    """Milliseconds; Kafka's negative "no timestamp" becomes null (the flush's time)."""
    if ts.max() > MAX_TIMESTAMP_MS:
        raise InvalidTimestamp(f"the record batch at byte {pos} holds timestamp "
                               f"{int(ts.max())} ms, past {MAX_TIMESTAMP_MS}")
    missing = ts < 0
    if not missing.any():
        return int64_array(ts, pa.int64())
    return pa.array(ts, pa.int64(), mask=missing)


def _codec_id(codec: str) -> int:
    try:
        return CODECS.index(codec)
    except ValueError:
        raise UnsupportedCompression(f"unknown compression codec {codec!r}; known: "
                                     + ", ".join(CODECS)) from None


def encode_batch(table: pa.Table, *, base_offset: int, codec: str = "none",
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 is_transactional: bool = False, partition_leader_epoch: int = 0) -> bytes:
    """One record batch v2 holding ``table``'s records (a segment's: offset, timestamp,
    key, value, headers; or the produce schema's). CreateTime timestamps (all null or
    absent: Kafka's -1); a null or empty headers list is no headers. Raises ValueError
    for an empty table, some null timestamps, or offsets that do not increase from
    ``base_offset``; UnsupportedCompression for ``codec``.
    """
    if table.num_rows == 0:
        raise ValueError("a record batch needs at least one record")
    codec_id = _codec_id(codec)
    buf = columns.write(table, base_offset=base_offset, is_transactional=is_transactional,
                        producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=base_sequence)
    if codec_id:
        buf = _compressed(buf, codec_id)
    _stamp(buf, base_offset, partition_leader_epoch)
    return bytes(buf)


def _compressed(plain: bytearray, codec_id: int) -> bytearray:
    """The batch with its records compressed, its attributes, length and CRC set.

    Compressed here rather than by aiokafka's builder, whose gzip runs at level 9 and
    lz4 at 9 (5.9 and 2.8 us a record against 0.3-0.5 at these levels). Snappy is
    xerial-framed, as the Java client writes and every client reads.
    """
    body = memoryview(plain)[HEADER.size:]
    if codec_id == 1:
        packed = bytes(cramjam.gzip.compress(body, level=6))  # zlib's default, as Kafka's
    elif codec_id == 2:
        packed = snappy_encode(bytes(body))
    elif codec_id == 3:
        # independent blocks: KIP-57's interoperable framing for every client
        c = cramjam.lz4.Compressor(level=1, content_checksum=False, block_linked=False)
        c.compress(bytes(body))
        packed = bytes(c.finish())
    else:
        packed = bytes(cramjam.zstd.compress(body, level=3))  # Kafka's default level
    buf = bytearray(plain[:HEADER.size]) + packed
    (attributes,) = struct.unpack_from(">h", buf, CRC_START)
    struct.pack_into(">h", buf, CRC_START, attributes | codec_id)
    struct.pack_into(">i", buf, 8, len(buf) - LOG_OVERHEAD)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(memoryview(buf)[CRC_START:]))
    return buf


def _stamp(buf: bytearray, base_offset: int, partition_leader_epoch: int) -> None:
    """Set the two fields the CRC leaves out, as a broker does on append."""
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, partition_leader_epoch)


def _varint(value: int) -> bytes:
    """Kafka's zigzag varint."""
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _nullable_bytes(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def encode_control_batch(*, base_offset: int, commit: bool, producer_id: int,
                         producer_epoch: int, timestamp_ms: int, coordinator_epoch: int = 0,
                         partition_leader_epoch: int = 0) -> bytes:
    """A transaction marker's batch: transactional and control, one control record
    (the key and value sparklog stores in a marker segment, ``marker_records``)."""
    marker = marker_records(commit, coordinator_epoch)
    key, value = marker.column("key")[0].as_py(), marker.column("value")[0].as_py()
    record = (b"\x00" + _varint(0) + _varint(0) + _nullable_bytes(key)
              + _nullable_bytes(value) + _varint(0))
    records = _varint(len(record)) + record
    buf = bytearray(HEADER.size) + records
    HEADER.pack_into(buf, 0, base_offset, len(buf) - LOG_OVERHEAD, partition_leader_epoch, 2,
                     0, TRANSACTIONAL_BIT | CONTROL_BIT, 0, timestamp_ms, timestamp_ms,
                     producer_id, producer_epoch, -1, 1)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(memoryview(buf)[CRC_START:]))
    return bytes(buf)

