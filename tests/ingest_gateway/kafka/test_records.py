"""Kafka record batches <-> Arrow (``ingest_gateway.kafka.records``): round trips in
every codec, the header fields, third-party readers and builders (aiokafka's), and
the typed refusals (magic 0/1, CRC, compression bombs, timestamps)."""

from __future__ import annotations

import struct
import tracemalloc

import cramjam
import crc32c
import numpy as np
import pyarrow as pa
import pytest
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy as PyBuilder

from ingest_gateway.kafka.records import (CODECS, CorruptRecordBatch, InvalidTimestamp,
                                          KafkaRecordsError, RecordsTooLarge,
                                          UnsupportedCompression, UnsupportedMagic,
                                          decode_batches, encode_batch, encode_control_batch)
from ingest_gateway.server.codec import PART_SCHEMA
from log_layout.segment_schema import HEADER_TYPE, SCHEMA
from log_layout.txn_writes import marker_type

MB = 1 << 20


def segment_table(n: int = 50, base: int = 1000, gaps: bool = True) -> pa.Table:
    """A segment-like table: offset gaps (compaction), null keys and values, headers."""
    offsets = [base + (3 * i if gaps else i) for i in range(n)]
    keys = [None if i % 4 == 0 else b"key-%d" % i for i in range(n)]
    values = [None if i % 7 == 3 else bytes([i % 256]) * (i % 130) for i in range(n)]
    headers = [None if i % 3 else [{"key": "trace", "value": b"t%d" % i},
                                   {"key": "empty", "value": None}] for i in range(n)]
    ts = [1_700_000_000_000_000 + 1000 * (n - i) for i in range(n)]  # not monotonic
    return pa.Table.from_arrays([
        pa.array(offsets, pa.int64()), pa.array(ts, pa.int64()).cast(SCHEMA.field(1).type),
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
        pa.array(headers, HEADER_TYPE)], schema=SCHEMA)


def as_rows(table: pa.Table) -> list[tuple]:
    """(key, value, ms, headers) per record; no headers and empty headers are alike."""
    ts = table.column("timestamp")
    ms = ts.cast(pa.int64()).to_pylist()
    if pa.types.is_timestamp(ts.type):
        ms = [t // 1000 for t in ms]
    heads = [[(h["key"], h["value"]) for h in (x or [])]
             for x in table.column("headers").to_pylist()]
    return list(zip(table.column("key").to_pylist(), table.column("value").to_pylist(),
                    ms, heads))


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(codec):
    table = segment_table()
    data = encode_batch(table, base_offset=1000, codec=codec, partition_leader_epoch=7)
    (batch,) = decode_batches(data, max_bytes=MB)
    assert batch.codec == codec
    assert batch.table.schema == PART_SCHEMA
    assert as_rows(batch.table) == as_rows(table)
    assert batch.offsets().to_pylist() == table.column("offset").to_pylist()
    assert batch.base_offset == 1000 and batch.partition_leader_epoch == 7
    assert batch.last_offset_delta == 3 * 49
    assert batch.first_timestamp == 1_700_000_000_000 + 50
    assert batch.max_timestamp == 1_700_000_000_000 + 50
    assert not batch.is_transactional and not batch.is_control


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_reads_what_is_encoded(codec):
    """A third-party reader (aiokafka's, with its own decompression) agrees."""
    table = segment_table(gaps=False)
    data = encode_batch(table, base_offset=5, codec=codec, producer_id=42, producer_epoch=3,
                        base_sequence=17, is_transactional=True)
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (42, 3, 17)
    assert theirs.is_transactional and theirs.compression_type == CODECS.index(codec)
    got = [(r.key, r.value, r.timestamp, r.headers) for r in theirs]
    assert got == [(k, v, ms, h) for k, v, ms, h in as_rows(table)]


@pytest.mark.parametrize("codec", CODECS)
def test_decodes_a_third_party_builder(codec):
    """aiokafka's pure-Python builder (its own varints, CRC and compression: Java-style
    xerial snappy, KIP-57 lz4, gzip level 9) as the producer side."""
    builder = PyBuilder(2, CODECS.index(codec), 0, 9, 1, 100, 1 << 30)
    expected = []
    for i in range(30):
        key, value = (None if i % 5 == 0 else b"k%d" % i), b"v" * i or None
        headers = [("h", b"%d" % i)] if i % 2 else []
        builder.append(i, 1_600_000_000_000 + i, key, value, headers)
        expected.append((key, value, 1_600_000_000_000 + i, headers))
    (batch,) = decode_batches(bytes(builder.build()), max_bytes=MB)
    assert as_rows(batch.table) == expected
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 1, 100)
    assert batch.last_sequence == 129


def test_several_batches_and_the_stamp_leaves_the_crc_valid():
    table = pa.table({"value": [b"a", b"b"]})
    one = encode_batch(table, base_offset=0)
    two = encode_batch(table, base_offset=2, partition_leader_epoch=9, codec="zstd")
    # a broker stamps base offset and leader epoch without recomputing the CRC
    restamped = bytearray(one)
    struct.pack_into(">qii", restamped, 0, 77, struct.unpack_from(">i", one, 8)[0], 3)
    batches = decode_batches(bytes(restamped) + two, max_bytes=MB)
    assert [b.base_offset for b in batches] == [77, 2]
    assert [b.partition_leader_epoch for b in batches] == [3, 9]
    assert [b.table.column("value").to_pylist() for b in batches] == [[b"a", b"b"]] * 2
    # without a timestamp column the records carry Kafka's -1: the flush's time (null)
    assert batches[0].table.column("timestamp").null_count == 2


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch(commit):
    data = encode_control_batch(base_offset=10, commit=commit, producer_id=5, producer_epoch=2,
                                timestamp_ms=123, coordinator_epoch=4)
    assert DefaultRecordBatch(data).validate_crc()
    (batch,) = decode_batches(data, max_bytes=MB)
    assert batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_offset) == (5, 2, 10)
    assert marker_type(batch.table.column("key")[0].as_py()) is commit
    assert batch.table.column("value")[0].as_py() == struct.pack(">hi", 0, 4)


def test_produce_schema_input_encodes_with_int_ms():
    table = pa.table({"key": pa.array([None, b"k"], pa.binary()), "value": [b"x", b"y"],
                      "timestamp": pa.array([7, 5], pa.int64())})
    (batch,) = decode_batches(encode_batch(table, base_offset=0), max_bytes=MB)
    assert batch.table.column("timestamp").to_pylist() == [7, 5]
    assert batch.table.column("headers").null_count == 2
    with pytest.raises(ValueError, match="all null or none"):
        encode_batch(table.set_column(2, "timestamp", pa.array([None, 5], pa.int64())),
                     base_offset=0)


def test_kafka_no_timestamp_decodes_as_null():
    builder = PyBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    builder.append(0, -1, None, b"a", [])
    builder.append(1, 5, None, b"b", [])
    (batch,) = decode_batches(bytes(builder.build()), max_bytes=MB)
    assert batch.table.column("timestamp").to_pylist() == [None, 5]


def legacy_message_set(magic: int) -> bytes:
    """An old (magic 0/1) message set entry: offset, size, crc, magic, ..."""
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", 0) if magic else b"") \
        + struct.pack(">ii", -1, 1) + b"x"
    message = struct.pack(">I", 0) + body
    return struct.pack(">qi", 0, len(message)) + message


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_unsupported_version(magic):
    with pytest.raises(UnsupportedMagic) as e:
        decode_batches(legacy_message_set(magic), max_bytes=MB)
    assert e.value.error_code == 35 and e.value.magic == magic


def test_bad_crc_truncation_and_lengths_are_corrupt_message():
    data = bytearray(encode_batch(segment_table(), base_offset=0))
    data[-1] ^= 1
    with pytest.raises(CorruptRecordBatch, match="CRC-32C") as e:
        decode_batches(bytes(data), max_bytes=MB)
    assert e.value.error_code == 2
    good = encode_batch(segment_table(), base_offset=0)
    for bad in (good[:-1], good[:40], good[:10], b"", good + good[:20]):
        with pytest.raises(CorruptRecordBatch):
            decode_batches(bad, max_bytes=MB)


def with_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def test_hostile_record_counts_and_varints_with_a_valid_crc():
    good = bytearray(encode_batch(pa.table({"value": [b"abc"] * 3}), base_offset=0))
    for count in (0, -1, 4, 2**31 - 1):  # the header's record count lies
        buf = bytearray(good)
        struct.pack_into(">i", buf, 57, count)
        with pytest.raises(CorruptRecordBatch):
            decode_batches(with_crc(buf), max_bytes=MB)
    # a record length varint that never ends (10 continuation bytes)
    buf = bytearray(good[:61]) + b"\xff" * 10 + good[61 + 10:]
    with pytest.raises(CorruptRecordBatch):
        decode_batches(with_crc(buf), max_bytes=MB)
    # codec ids 5-7 do not exist
    buf = bytearray(good)
    struct.pack_into(">h", buf, 21, 6)
    with pytest.raises(UnsupportedCompression) as e:
        decode_batches(with_crc(buf), max_bytes=MB)
    assert e.value.error_code == 76


def bomb_batch(codec: str, expanded: int) -> bytes:
    """A valid batch header around ``expanded`` zero bytes compressed (not valid records:
    the cap must trip before anything reads them)."""
    zeros = bytes(expanded)
    if codec == "snappy":
        packed = bytes(cramjam.snappy.compress_raw(zeros))
    elif codec == "lz4":
        c = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
        c.compress(zeros)
        packed = bytes(c.finish())
    else:
        packed = bytes(getattr(cramjam, codec).compress(zeros))
    buf = bytearray(encode_batch(pa.table({"value": [b"x"]}), base_offset=0)[:61]) + packed
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">h", buf, 21, CODECS.index(codec))
    return with_crc(buf)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_compression_bomb_is_refused_in_bounded_memory(codec):
    bomb = bomb_batch(codec, 64 * MB)
    assert len(bomb) < 4 * MB
    tracemalloc.start()
    try:
        with pytest.raises(RecordsTooLarge) as e:
            decode_batches(bomb, max_bytes=MB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.error_code == 10 and e.value.max_bytes == MB
    assert peak < 4 * MB, f"decoding a bomb allocated {peak} bytes"


def test_the_cap_counts_every_batch():
    one = encode_batch(pa.table({"value": [b"x" * 600]}), base_offset=0, codec="zstd")
    assert len(decode_batches(one, max_bytes=1000)) == 1
    with pytest.raises(RecordsTooLarge):
        decode_batches(one + one, max_bytes=1000)


def test_timestamps_past_the_segment_range_are_invalid():
    table = pa.table({"value": [b"x"], "timestamp": pa.array([2**62], pa.int64())})
    with pytest.raises(InvalidTimestamp) as e:
        decode_batches(encode_batch(table, base_offset=0), max_bytes=MB)
    assert e.value.error_code == 32


def test_encode_refuses_bad_input():
    with pytest.raises(ValueError):
        encode_batch(pa.table({"value": pa.array([], pa.binary())}), base_offset=0)
    with pytest.raises(ValueError, match="offsets must increase"):
        encode_batch(pa.table({"offset": [5, 4], "value": [b"a", b"b"]}), base_offset=4)
    with pytest.raises(ValueError, match="offsets must increase"):
        encode_batch(pa.table({"offset": [3], "value": [b"a"]}), base_offset=4)
    with pytest.raises(UnsupportedCompression):
        encode_batch(pa.table({"value": [b"a"]}), base_offset=0, codec="brotli")


def test_errors_are_one_typed_family():
    for cls in (CorruptRecordBatch, UnsupportedMagic, RecordsTooLarge, InvalidTimestamp,
                UnsupportedCompression):
        assert issubclass(cls, KafkaRecordsError) and issubclass(cls, ValueError)


def test_a_large_batch_round_trips():
    n = 20_000
    blob = np.random.default_rng(1).bytes(100 * n)
    values = pa.array([blob[i * 100:(i + 1) * 100] for i in range(n)], pa.binary())
    table = pa.table({"value": values})
    (batch,) = decode_batches(encode_batch(table, base_offset=0, codec="lz4"), max_bytes=8 * MB)
    assert batch.table.column("value").equals(table.column("value"))
    assert batch.offset_deltas.tolist() == list(range(n))
