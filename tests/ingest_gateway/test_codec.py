"""Body parsing and record checks, without HTTP (the HTTP tests cover the wiring)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from conf.topic import TopicConfig
from ingest_gateway import codec
from ingest_gateway.errors import BadRequest, MissingKey, UnsupportedContentType
from log_layout import RecordTooLarge, UnknownPartition


def parse(records, media=codec.JSON_V2, partitions=3, path_partition=None):
    return codec.json_to_parsed(json.dumps({"records": records}).encode(), media, topic="t",
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
    parsed = codec.arrow_to_parsed(sink.getvalue().to_pybytes(), topic="t", partitions=1,
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
