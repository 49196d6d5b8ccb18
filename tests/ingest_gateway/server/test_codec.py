"""Body parsing and record checks, without HTTP (the HTTP tests cover the wiring)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from conf.topic import TopicConfig
from ingest_gateway.server import codec, codec_arrow, codec_json, ipc_size
from ingest_gateway.errors import (BadRequest, InvalidKey, InvalidValue, MissingKey,
                                   NestingTooDeep, UncompressedTooLarge, UnsupportedContentType)
from log_layout import InvalidRecords, RecordTooLarge, UnknownPartition


def parse(records, media=codec.JSON_V2, partitions=3, path_partition=None):
    return codec_json.json_to_parsed(json.dumps({"records": records}).encode(), media, topic="t",
                                partitions=partitions, path_partition=path_partition,
                                sticky=lambda: 1)


def test_media_types():
    assert codec.media_type("application/vnd.kafka.json.v2+json; charset=utf-8") == codec.JSON_V2
    with pytest.raises(UnsupportedContentType):
        codec.media_type(None)


def test_json_rows_split_by_partition_keep_request_positions_and_merge_at_flush():
    parsed = parse([{"value": 1, "partition": 2}, {"value": 2}, {"value": 3, "partition": 2}])
    assert parsed.positions == [(2, 0), (1, 0), (2, 1)]
    assert sorted(parsed.parts) == [1, 2] and parsed.count == 3
    arrow = pa.table({"key": pa.array([b"k"]), "value": pa.array([b"a"]),
                      "timestamp": pa.array([5], pa.int64()),
                      "headers": pa.nulls(1, codec.PART_SCHEMA.field("headers").type)})
    table = codec.to_table([parsed.parts[2], arrow, parsed.parts[1]])
    assert table.schema == codec.PART_SCHEMA
    assert table.column("value").to_pylist() == [b"1", b"3", b"a", b"2"]
    assert table.column("timestamp").to_pylist() == [None, None, 5, None]


def test_checks_size_with_headers_and_keys_on_compacted_topics():
    big = parse([{"key": "k", "value": "x" * 40, "headers": [{"key": "h", "value": "y" * 40}]}])
    with pytest.raises(RecordTooLarge) as e:
        codec.check_records("t", TopicConfig(max_message_bytes=80), big.parts[next(iter(big.parts))])
    assert e.value.size == 3 + 42 + 1 + 40
    keyless = parse([{"key": "a", "value": 1}, {"value": 2}], path_partition=0)
    with pytest.raises(MissingKey) as e:
        codec.check_records("t", TopicConfig(cleanup_policy="compact"), keyless.parts[0])
    assert e.value.row == 1


def test_arrow_checks_are_vectorized_too():
    table = pa.table({"value": [b"x" * 10, b"x" * 200]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    parsed = codec_arrow.arrow_to_parsed(sink.getvalue().to_pybytes(), topic="t", partitions=1,
                                   path_partition=0, sticky=lambda: 0)
    with pytest.raises(RecordTooLarge) as e:
        codec.check_records("t", TopicConfig(max_message_bytes=100), parsed.parts[0])
    assert e.value.size == 200


@pytest.mark.parametrize("records,error", [
    ([{"value": 1, "partition": 5}], UnknownPartition),
    ([{"value": 1, "partition": True}], BadRequest),
    (["not an object"], BadRequest),
    ([{"value": 1, "headers": [{"key": 3}]}], BadRequest),
])
def test_json_refusals(records, error):
    with pytest.raises(error):
        parse(records)


# -- refused at parse: what would fail a flush or a JSON fetch (issue 11) ------------------
def parse_text(text: str | bytes, media=codec.JSON_V2, **kw):
    body = text.encode() if isinstance(text, str) else text
    return codec_json.json_to_parsed(body, media, topic="t", partitions=1, path_partition=None,
                                sticky=lambda: 0, **kw)


@pytest.mark.parametrize("text,error", [
    ('{"records":[{"value":NaN}]}', InvalidValue),
    ('{"records":[{"value":[1, Infinity]}]}', InvalidValue),
    ('{"records":[{"value":{"a":1e400}}]}', InvalidValue),
    ('{"records":[{"key":-1e999,"value":1}]}', InvalidKey),
    (json.dumps({"records": [{"value": "\ud800"}]}), InvalidValue),
    (json.dumps({"records": [{"value": {"\udc00": 1}}]}), InvalidValue),
    (json.dumps({"records": [{"key": ["\udfff"], "value": 1}]}), InvalidKey),
    (json.dumps({"records": [{"value": 1, "headers": [{"key": "\ud800", "value": "v"}]}]}),
     InvalidRecords),
    (json.dumps({"records": [{"value": 1, "headers": {"h": "\ud800"}}]}), InvalidRecords),
    (b'{"records":[{"value":"\xed\xa0\x80"}]}', BadRequest),  # a surrogate encoded as bytes
    ('{"records":[{"value":1,"timestamp":9223372036854776}]}', BadRequest),  # us overflow
])
def test_values_that_could_not_be_flushed_or_served_are_refused(text, error):
    with pytest.raises(error):
        parse_text(text)


def test_valid_non_ascii_json_is_kept_as_escaped_text():
    body = json.dumps({"records": [{"key": "é", "value": {"s": "😀"}}]})
    rows = parse_text(body).parts[0]
    assert rows.keys == [b'"\\u00e9"'] and rows.values == [b'{"s":"\\ud83d\\ude00"}']
    assert parse_text(b'\xef\xbb\xbf{"records":[{"value":1}]}').parts[0].values == [b"1"]


def test_json_nesting_is_capped():
    def body(depth):  # body, "records", record: three levels above the value
        return '{"records":[{"value":' + "[" * depth + "]" * depth + "}]}"

    assert parse_text(body(61), max_depth=64).count == 1
    for depth, limit in ((62, 64), (10, 12), (100_000, 64)):
        with pytest.raises(NestingTooDeep) as e:
            parse_text(body(depth), max_depth=limit)
        assert e.value.limit == limit
    # brackets inside strings are text, not depth
    assert parse_text('{"records":[{"value":{"s":"' + "[" * 200 + '"}}]}').count == 1


def arrow_bytes(table: pa.Table, compression=None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema,
                           options=pa.ipc.IpcWriteOptions(compression=compression)) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def parse_arrow(body: bytes, **kw):
    return codec_arrow.arrow_to_parsed(body, topic="t", partitions=1, path_partition=0,
                                 sticky=lambda: 0, **kw)


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_expanded_size_is_counted_before_decompressing(compression):
    table = pa.table({"value": [b"\0" * 100_000] * 10})
    body = arrow_bytes(table, compression)
    size = ipc_size.expanded_size(pa.py_buffer(body))
    assert 1_000_000 <= size <= 1_000_000 + 1000
    assert parse_arrow(body, max_uncompressed=size).count == 10
    with pytest.raises(UncompressedTooLarge) as e:
        parse_arrow(body, max_uncompressed=size - 1)
    assert (e.value.size, e.value.limit) == (size, size - 1)


def test_declared_lengths_without_buffers_count_too():
    body = arrow_bytes(pa.table({"value": pa.nulls(10**9)}))  # a type without buffers
    assert len(body) < 1000
    with pytest.raises(UncompressedTooLarge):
        parse_arrow(body)


def test_arrow_data_is_validated_before_use():
    # offsets past the data: a reader that trusted them would read out of bounds
    bad = pa.Array.from_buffers(pa.binary(), 2, [None, pa.py_buffer(
        np.array([0, 1 << 20, 3], dtype=np.int32).tobytes()), pa.py_buffer(b"abc")])
    with pytest.raises(BadRequest, match="valid Arrow"):
        parse_arrow(arrow_bytes(pa.table({"value": bad})))
    not_utf8 = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(
        np.array([0, 2], dtype=np.int32).tobytes()), pa.py_buffer(b"\xff\xfe")])
    with pytest.raises(BadRequest, match="valid Arrow"):
        parse_arrow(arrow_bytes(pa.table({"value": not_utf8})))


def test_arrow_schema_checks():
    dup = pa.Table.from_arrays([pa.array([b"a"]), pa.array([b"b"])], names=["value", "value"])
    with pytest.raises(BadRequest, match="repeat"):
        parse_arrow(arrow_bytes(dup))
    with pytest.raises(InvalidValue):
        parse_arrow(arrow_bytes(pa.table({"value": [1]})))
    header_type = codec.PART_SCHEMA.field("headers").type
    nullable = pa.array([[{"key": None, "value": b"v"}]], pa.list_(pa.struct([
        pa.field("key", pa.string()), pa.field("value", pa.binary())])))
    with pytest.raises(BadRequest, match="must be"):
        parse_arrow(arrow_bytes(pa.table({"value": [b"x"], "headers": nullable})))
    # declared not null, yet null: the declaration is not trusted
    pairs = pa.StructArray.from_arrays([pa.array([None], pa.string()), pa.array([b"v"])],
                                       fields=list(header_type.value_type))
    lying = pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), pairs, type=header_type)
    with pytest.raises(InvalidRecords, match="without a key"):
        parse_arrow(arrow_bytes(pa.table({"value": [b"x"], "headers": lying})))
    # dictionary-encoded keys and values (pandas categoricals) are decoded
    table = pa.table({"key": pa.array(["a", "b", "a"]).dictionary_encode(),
                      "value": pa.array(["x", "y", "x"]).dictionary_encode()})
    part = parse_arrow(arrow_bytes(table)).parts[0]
    assert part.column("value").to_pylist() == [b"x", b"y", b"x"]


@pytest.mark.parametrize("column", [
    pa.array([2**64 - 1], pa.uint64()), pa.array([codec.MAX_TIMESTAMP_MS + 1], pa.int64()),
    pa.array([-1], pa.int32()), pa.array([2**62], pa.timestamp("s")),
])
def test_arrow_timestamps_out_of_range(column):
    with pytest.raises(InvalidRecords):
        parse_arrow(arrow_bytes(pa.table({"value": [b"v"], "timestamp": column})))


def test_arrow_timestamps_of_any_unit_become_milliseconds():
    ms = 1_700_000_000_123
    for unit, scale in (("s", 1000), ("ms", 1), ("us", 1 / 1000), ("ns", 1 / 1_000_000)):
        raw = ms // 1000 if unit == "s" else int(ms / scale)
        part = parse_arrow(arrow_bytes(pa.table({
            "value": [b"v"], "timestamp": pa.array([raw], pa.timestamp(unit, tz="UTC"))}))).parts[0]
        assert part.column("timestamp").to_pylist() == [ms // 1000 * 1000 if unit == "s" else ms]
