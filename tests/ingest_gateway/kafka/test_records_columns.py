"""The compiled record codec (``_records_c``) against aiokafka's reader and builder:
the same batch bytes from the same table, the same columns from the same bytes, and
on hostile bytes a ValueError, never another exception or a crash."""

from __future__ import annotations

import struct

import crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest_gateway.kafka import records, records_columns
from ingest_gateway.kafka.records import (
    CorruptRecordBatch,
    decode_batches,
    encode_batch,
)
from log_layout.segment_schema import HEADER_TYPE, SCHEMA

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])
C = records_columns._records_c


@pytest.fixture
def aiokafka_only(monkeypatch):
    """Run the code under test with the compiled codec hidden (the fallback path)."""
    def run(fn, *args, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(records_columns, "_records_c", None)
            return fn(*args, **kwargs)
    return run


def test_the_compiled_codec_is_built():
    # setup.py builds it (pip install -e .); without it the gateway is ~10x slower a record
    assert C is not None, "ingest_gateway.kafka._records_c is not built: pip install -e ."


nullable_bytes = st.one_of(st.none(), st.binary(max_size=300))


@st.composite
def segment_tables(draw) -> pa.Table:
    """A segment's table: offsets with gaps, microsecond timestamps, nullable keys and
    values, sometimes sliced (Arrow offsets not at zero)."""
    n = draw(st.integers(1, 60))
    gaps = draw(st.lists(st.integers(1, 200), min_size=n, max_size=n))
    base = draw(st.integers(0, 2**40))
    offsets = np.cumsum(gaps) + base
    ts = draw(st.lists(st.integers(0, 2**41), min_size=n, max_size=n))
    table = pa.Table.from_arrays([
        pa.array(offsets, pa.int64()),
        pa.array(np.array(ts, np.int64) * 1000, pa.int64()).cast(SCHEMA.field(1).type),
        pa.array(draw(st.lists(nullable_bytes, min_size=n, max_size=n)), pa.binary()),
        pa.array(draw(st.lists(nullable_bytes, min_size=n, max_size=n)), pa.binary()),
        pa.nulls(n, HEADER_TYPE)], schema=SCHEMA)
    start = draw(st.integers(0, n - 1))
    return table.slice(start, draw(st.integers(1, n - start)))


@SETTINGS
@given(table=segment_tables(), codec=st.sampled_from(["none", "lz4"]),
       txn=st.booleans())
def test_encode_and_decode_match_aiokafka(table, codec, txn):
    base = table.column("offset")[0].as_py()
    kw = {"base_offset": base, "codec": codec, "is_transactional": txn,
          "producer_id": 7 if txn else -1, "producer_epoch": 1 if txn else -1,
          "base_sequence": 3 if txn else -1}
    ours = encode_batch(table, **kw)
    # by hand: hypothesis refuses function-scoped fixtures such as monkeypatch
    saved, records_columns._records_c = records_columns._records_c, None
    try:
        theirs = encode_batch(table, **kw)
        slow = decode_batches(ours, max_bytes=1 << 24)
    finally:
        records_columns._records_c = saved
    assert ours == theirs
    fast = decode_batches(ours, max_bytes=1 << 24)
    assert fast[0].table.equals(slow[0].table)
    assert (fast[0].offset_deltas == slow[0].offset_deltas).all()
    assert fast[0].table.column("value").to_pylist() == table.column("value").to_pylist()


def test_headers_go_through_aiokafka_with_the_same_answer(aiokafka_only):
    table = pa.table({
        "key": pa.array([b"k", None], pa.binary()), "value": pa.array([None, b"v"]),
        "timestamp": pa.array([5, 6], pa.int64()),
        "headers": pa.array([[{"key": "h", "value": b"x"}], []], HEADER_TYPE)})
    data = encode_batch(table, base_offset=0)
    assert data == aiokafka_only(encode_batch, table, base_offset=0)
    got = decode_batches(data, max_bytes=1 << 20)[0].table
    assert got.column("headers").to_pylist() == [[{"key": "h", "value": b"x"}], []]
    assert got.equals(aiokafka_only(decode_batches, data, max_bytes=1 << 20)[0].table)


def test_log_append_time_gives_every_record_the_max_timestamp():
    table = pa.table({"value": pa.array([b"a", b"b"]), "timestamp": pa.array([5, 9])})
    data = bytearray(encode_batch(table, base_offset=0))
    (attributes,) = struct.unpack_from(">h", data, 21)
    struct.pack_into(">h", data, 21, attributes | records.TIMESTAMP_TYPE_BIT)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    got = decode_batches(bytes(data), max_bytes=1 << 20)[0].table
    assert got.column("timestamp").to_pylist() == [9, 9]


def _plain_records(n: int = 3) -> bytes:
    table = pa.table({"key": pa.array([None, b"k1", b"key-two"][:n], pa.binary()),
                      "value": pa.array([b"v" * 40, None, b"\x00\xff" * 9][:n], pa.binary()),
                      "timestamp": pa.array([10, 20, 30][:n], pa.int64())})
    return encode_batch(table, base_offset=0)[records.HEADER.size:]


BODY = _plain_records()


@SETTINGS
@given(data=st.data())
def test_hostile_records_raise_value_error_only(data):
    body = bytearray(BODY)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(body) - 1))
        body[i] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        body = body[:data.draw(st.integers(1, len(body)))]
    count = data.draw(st.integers(1, 5))
    try:
        out = C.decode(bytes(body), count, 0, 0, False)
    except ValueError:
        return
    assert len(out[9]) == 4 * count and len(out[1]) == 4 * (count + 1)
    assert np.frombuffer(out[1], np.int32)[-1] == len(out[2])


@pytest.mark.parametrize("body, count, why", [
    (b"\xff" * 11, 1, "record 0: its length varint"),
    (b"\x7e" + b"\x00" * 62, 1, "claims 63 bytes but 62 follow"),
    (BODY + b"\x00", 3, "record 2: 1 bytes follow the last record"),
    (b"\x0c\x00\x00\x00\x03\x02\x00\x00\x00\x00\x00\x00\x00", 1, "key length is -2"),
])
def test_malformed_records_name_the_record(body, count, why):
    with pytest.raises(ValueError, match=why):
        C.decode(body, count, 0, 0, False)


def test_corrupt_record_becomes_corrupt_message():
    data = bytearray(encode_batch(pa.table({"value": pa.array([b"abc"])}), base_offset=0))
    data[records.HEADER.size] = 0x7E  # the record claims 63 bytes, more than there are
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    with pytest.raises(CorruptRecordBatch, match="malformed record"):
        decode_batches(bytes(data), max_bytes=1 << 20)


@pytest.mark.parametrize("offsets, data, why", [
    (np.array([0, 5, 3], np.int32), b"abcde", "decrease"),
    (np.array([0, 2, 9], np.int32), b"abcde", "past their data"),
    (np.array([0, 2], np.int32), b"abcde", "fewer than"),
])
def test_encode_refuses_inconsistent_buffers(offsets, data, why):
    good = np.array([0, 1, 2], np.int32)
    ts = np.zeros(2, np.int64)
    with pytest.raises(ValueError, match=why):
        C.encode(2, None, offsets, data, 0, None, good, b"xy", 0, ts, 0, np.arange(2))
