"""Appends and reads on every backend: offsets, ranges, timestamps, compression, headers."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from log_layout import SEGMENT_SCHEMA, InvalidRecords, OffsetOutOfRange
from tests.log_layout.helpers import offsets_and_values, table, values


def test_round_trip_and_watermarks(part):
    w = part.claim("w1")
    r1 = w.append(table(0, 3), now_ms=1000)
    r2 = w.append(table(3, 4), now_ms=2000)
    assert (r1.base_offset, r1.last_offset, r1.count) == (0, 2, 3)
    assert (r2.base_offset, r2.last_offset) == (3, 6) and r2.version == r1.version + 1
    assert part.high_watermark() == 7 and part.log_start_offset() == 0
    t = part.read_table(0)
    assert t.schema == SEGMENT_SCHEMA
    assert offsets_and_values(t) == list(zip(range(7), values(0, 7)))
    assert t.column("key").to_pylist() == [f"k{i}".encode() for i in range(7)]
    assert t.column("timestamp").to_pylist()[0] == dt.datetime.fromtimestamp(1, dt.timezone.utc)
    m = part.snapshot()
    assert [(s.base_offset, s.last_offset, s.count) for s in m.segments] == [(0, 2, 3), (3, 6, 4)]
    assert m.next_offset == 7 and m.leader == "w1" and m.leader_epoch == 1


def test_read_ranges(part):
    w = part.claim("w")
    for start in range(0, 30, 10):
        w.append(table(start, 10))
    for lo, hi in [(0, 30), (0, 0), (30, 30), (5, 6), (9, 11), (3, 27), (10, 20), (29, 30)]:
        got = part.read_table(lo, hi)
        assert offsets_and_values(got) == list(zip(range(lo, hi), values(lo, hi - lo))), (lo, hi)
    assert part.read_table(12).column("offset").to_pylist() == list(range(12, 30))
    batches = list(part.read(5, 25))
    assert all(isinstance(b, pa.RecordBatch) for b in batches) and len(batches) == 3


def test_offset_out_of_range_names_the_numbers(part):
    part.claim("w").append(table(0, 5))
    for start, end, bad, bounds in [(6, None, 6, (0, 5)), (-1, None, -1, (0, 5)),
                                    (0, 6, 6, (0, 5)), (3, 2, 2, (3, 5))]:
        with pytest.raises(OffsetOutOfRange) as e:
            part.read(start, end)  # raises at the call, before iterating
        assert e.value.offset == bad and (e.value.log_start, e.value.log_end) == bounds
        assert e.value.topic == "t" and e.value.partition == 0
        assert str(e.value.offset) in str(e.value) and "high watermark 5" in str(e.value)
    with pytest.raises(OffsetOutOfRange, match="offset 9 is out of range for t-0"):
        part.read_table(9)
    assert part.read_table(5).num_rows == 0  # reading at the high watermark is empty, not an error


def test_empty_partition(part):
    assert part.read_table(0).num_rows == 0
    assert part.offset_for_timestamp(0) is None
    with pytest.raises(OffsetOutOfRange):
        part.read_table(1)


def test_offset_for_timestamp(part):
    w = part.claim("w")
    w.append(table(0, 3, ts=100))
    w.append(table(3, 3, ts=200))
    w.append(pa.table({"value": [b"a", b"b"], "timestamp": [300, 400]}))
    assert part.offset_for_timestamp(0) == 0
    assert part.offset_for_timestamp(100) == 0
    assert part.offset_for_timestamp(101) == 3
    assert part.offset_for_timestamp(201) == 6
    assert part.offset_for_timestamp(400) == 7
    assert part.offset_for_timestamp(401) is None


def test_timestamps_inputs(part):
    w = part.claim("w")
    w.append(pa.table({"value": [b"a", b"b"],
                       "timestamp": pa.array([dt.datetime(2026, 1, 1), None], pa.timestamp("ms"))}),
             now_ms=42)
    ts = part.read_table(0).column("timestamp").cast(pa.int64()).to_pylist()
    assert ts == [1767225600000 * 1000, 42 * 1000]  # microseconds holding whole milliseconds
    with pytest.raises(InvalidRecords, match="'timestamp'"):
        w.append(pa.table({"value": [b"a"], "timestamp": ["yesterday"]}))


def test_headers_tombstones_and_string_input(part):
    w = part.claim("w")
    headers = [[{"key": "trace", "value": b"\x00\x01"}, {"key": "empty", "value": None}], [], None]
    w.append(pa.table({"key": ["a", "b", None], "value": [b"1", None, "three"],
                       "headers": pa.array(headers, SEGMENT_SCHEMA.field("headers").type)}))
    t = part.read_table(0)
    assert t.column("key").to_pylist() == [b"a", b"b", None]
    assert t.column("value").to_pylist() == [b"1", None, b"three"]  # None = tombstone
    assert t.column("headers").to_pylist() == [[{"key": "trace", "value": b"\x00\x01"},
                                                {"key": "empty", "value": None}], [], None]


def test_invalid_records(part):
    w = part.claim("w")
    for bad, words in [(pa.table({"key": [b"k"]}), "'value' column is required"),
                       (pa.table({"value": [1]}), "'value' must be binary"),
                       (pa.table({"value": [b"x"], "colour": ["red"]}), "unknown columns"),
                       (pa.table({"value": pa.array([], pa.binary())}), "no records"),
                       ({"value": [b"x"]}, "pyarrow Table"),
                       (pa.table({"value": [b"x"], "headers": [1]}), "'headers'")]:
        with pytest.raises(InvalidRecords, match=words):
            w.append(bad)
    assert part.high_watermark() == 0 and part.orphans() == []


@pytest.mark.parametrize("codec", ["lz4", "zstd", "none", "producer"])
def test_compression(log, codec):
    log.create_topic("c", {"compression.type": codec})
    p = log.partition("c", 0)
    big = pa.table({"value": [b"A" * 1000] * 200})
    p.claim("w").append(big)
    info = p.snapshot().segments[0]
    if codec in ("lz4", "zstd"):
        assert info.bytes < 20_000  # really compressed
    else:
        assert info.bytes > 200_000
    assert p.read_table(0).column("value").to_pylist() == [b"A" * 1000] * 200


def test_record_batch_input_and_many_batches(part):
    w = part.claim("w")
    batch = pa.RecordBatch.from_pydict({"value": values(0, 5)})
    w.append(batch)
    w.append(pa.Table.from_batches([pa.RecordBatch.from_pydict({"value": values(5, 2)})] * 3))
    assert part.read_table(0).column("value").to_pylist() == values(0, 5) + values(5, 2) * 3
