"""The ``sparklog`` source's registry decoding without Spark: the reader tasks' Arrow
batches (what Spark's Python workers yield) for Avro written with several schema
versions, JSON Schema, the column types of schemas, and hostile records."""

from __future__ import annotations

import datetime as dt
import decimal
import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.errors import InvalidSourceOption, UndecodableRecord, UnusableSchema
from pipeline.registry_types import avro_arrow_type, json_schema_arrow_type
from pipeline.source import SparklogDataSource
from tests.pipeline.conftest import append, source_options
from tests.pipeline.registry_records import avro, header, jsonschema, record, register

URL = {"name": "url", "type": "string"}
MS_INT = {"name": "ms", "type": "int"}
MS_LONG = {"name": "ms", "type": "long"}
REF = {"name": "ref", "type": ["null", "string"], "default": None}
V1 = record("Click", URL, MS_INT)
V2 = record("Click", URL, MS_LONG, REF)  # BACKWARD: int widens to long, a field with a default


def rows(log, **options) -> list[dict]:
    """Every row the source reads (its schema() first, as Spark's load() does)."""
    ds = SparklogDataSource(source_options(log, **options))
    ds.schema()
    reader = ds.reader(None)
    return [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]


def decoded(log, **options) -> list:
    return [(r["offset"], r["value"], r["valueSchemaId"]) for r in rows(log, **options)]


@pytest.fixture
def clicks(local_log):
    local_log.create_topic("clicks", {"partitions": 1})
    return local_log


def test_two_writer_versions_read_as_the_latest(clicks):
    id1 = register(clicks, "clicks-value", V1)
    append(clicks, "clicks", 0, [avro(V1, id1, {"url": "/a", "ms": 1}), None])
    id2 = register(clicks, "clicks-value", V2)
    append(clicks, "clicks", 0, [avro(V2, id2, {"url": "/b", "ms": 2 ** 40, "ref": "x"})])
    assert decoded(clicks, subscribe="clicks", valueFormat="avro") == [
        (0, {"url": "/a", "ms": 1, "ref": None}, id1),  # resolved: int -> long, ref's default
        (1, None, None),                                # a tombstone stays null
        (2, {"url": "/b", "ms": 2 ** 40, "ref": "x"}, id2)]
    # an older version as the reader: a long cannot be read as an int (Avro's rules)
    with pytest.raises(UndecodableRecord, match=f"clicks-0 offset 2: .*schema id {id2} does "
                                                "not read it"):
        decoded(clicks, subscribe="clicks", valueFormat="avro", valueSchemaVersion=1)
    assert decoded(clicks, subscribe="clicks", valueFormat="avro", valueSchemaVersion=1,
                   endingOffsets='{"clicks": {"0": 2}}')[0] == (0, {"url": "/a", "ms": 1}, id1)


def test_keys_decode_by_their_own_subject(clicks):
    key_id = register(clicks, "clicks-key", "string")
    value_id = register(clicks, "clicks-value", V1)
    append(clicks, "clicks", 0, [avro(V1, value_id, {"url": "/a", "ms": 1})],
           keys=[avro("string", key_id, "user-7")])
    (row,) = rows(clicks, subscribe="clicks", valueFormat="avro", keyFormat="avro")
    assert (row["key"], row["keySchemaId"], row["value"]["url"]) == ("user-7", key_id, "/a")


def test_logical_types_become_spark_types(clicks):
    schema = record("T", {"name": "day", "type": {"type": "int", "logicalType": "date"}},
                    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
                    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal",
                                               "precision": 9, "scale": 2}},
                    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
                    {"name": "tags", "type": {"type": "map", "values": "int"}},
                    {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A", "B"]}})
    sid = register(clicks, "clicks-value", schema)
    at = dt.datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=dt.timezone.utc)
    value = {"day": dt.date(2026, 1, 2), "at": at, "price": decimal.Decimal("12.34"),
             "id": "0b7e9a5c-0000-4000-8000-000000000001", "tags": {"a": 1}, "kind": "B"}
    append(clicks, "clicks", 0, [avro(schema, sid, value)])
    (row,) = rows(clicks, subscribe="clicks", valueFormat="avro")
    assert row["value"] == {**value, "tags": [("a", 1)]}


def test_json_schema_values(clicks):
    schema = {"type": "object", "properties": {
        "user": {"type": "string"}, "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "where": {"$ref": "#/$defs/place"}},
        "$defs": {"place": {"type": ["object", "null"],
                            "properties": {"city": {"type": "string"}}}}}
    sid = register(clicks, "clicks-value", schema, "JSON")
    append(clicks, "clicks", 0, [jsonschema(sid, {"user": "u", "n": 3, "tags": ["a"],
                                                  "where": {"city": "Oslo"}, "extra": 1}),
                                 jsonschema(sid, {"user": "v"}),
                                 jsonschema(sid, {"user": "w", "n": "three"})])
    with pytest.raises(UndecodableRecord, match=r"clicks-0 offset 2: the value .* does not fit"):
        rows(clicks, subscribe="clicks", valueFormat="jsonschema")
    assert decoded(clicks, subscribe="clicks", valueFormat="jsonschema", mode="permissive") == [
        (0, {"user": "u", "n": 3, "tags": ["a"], "where": {"city": "Oslo"}}, sid),
        (1, {"user": "v", "n": None, "tags": None, "where": None}, sid),
        (2, None, sid)]


def test_a_fraction_in_an_integer_field_is_undecodable(clicks):
    """pyarrow would truncate 1.5 to 1 in a bigint column: the record does not fit."""
    schema = {"type": "object", "properties": {
        "n": {"type": "integer"}, "x": {"type": "number"},
        "ns": {"type": "array", "items": {"type": "integer"}},
        "m": {"type": "object", "additionalProperties": {"type": "integer"}}}}
    sid = register(clicks, "clicks-value", schema, "JSON")
    append(clicks, "clicks", 0, [jsonschema(sid, {"n": 2.0, "x": 0.5, "ns": [1], "m": {"a": 3}}),
                                 jsonschema(sid, {"n": 1.5}),
                                 jsonschema(sid, {"ns": [1, 2, 3.25]}),
                                 jsonschema(sid, {"m": {"a": 1e-3}})])
    with pytest.raises(UndecodableRecord, match=r"clicks-0 offset 1: the value cannot be "
                                                r"decoded: value\.n is 1\.5, not the integer"):
        rows(clicks, subscribe="clicks", valueFormat="jsonschema")
    assert decoded(clicks, subscribe="clicks", valueFormat="jsonschema", mode="PERMISSIVE") == [
        (0, {"n": 2, "x": 0.5, "ns": [1], "m": [("a", 3)]}, sid),  # 2.0 is an integer
        (1, None, sid), (2, None, sid), (3, None, sid)]
    with pytest.raises(UndecodableRecord, match=r"offset 2: .*value\.ns\[2\] is 3\.25"):
        rows(clicks, subscribe="clicks", valueFormat="jsonschema",
             startingOffsets='{"clicks": {"0": 2}}')


@pytest.mark.parametrize("raw, reason", [
    (b"{}", "shorter than Confluent's 5-byte header"),
    (b'{"a": 1}', "first byte is 0x7b, not Confluent's magic byte"),
    (header(999) + b"\x02", "schema id 999 is not in the registry"),
    (b"@", "shorter than"),
])
def test_undecodable_records_name_their_offset(clicks, raw, reason):
    sid = register(clicks, "clicks-value", V1)
    append(clicks, "clicks", 0, [avro(V1, sid, {"url": "/a", "ms": 1}), raw])
    with pytest.raises(UndecodableRecord, match=f"clicks-0 offset 1: the value cannot be "
                                                f"decoded: .*{reason}"):
        rows(clicks, subscribe="clicks", valueFormat="avro")
    got = decoded(clicks, subscribe="clicks", valueFormat="avro", mode="PERMISSIVE")
    assert got[1][:2] == (1, None) and got[0][1] == {"url": "/a", "ms": 1}


def test_bytes_the_writer_schema_does_not_read(clicks):
    sid = register(clicks, "clicks-value", V1)
    # a string whose length runs past the record's end
    append(clicks, "clicks", 0, [header(sid) + b"\x7f/a"])
    with pytest.raises(UndecodableRecord, match=f"offset 0: .*schema id {sid} does not read"):
        rows(clicks, subscribe="clicks", valueFormat="avro")


def test_options_and_subjects_refused_clearly(clicks):
    clicks.create_topic("other", {"partitions": 1})
    with pytest.raises(UnusableSchema, match="'clicks-value': no such subject"):
        rows(clicks, subscribe="clicks", valueFormat="avro")
    register(clicks, "clicks-value", V1)
    with pytest.raises(UnusableSchema, match="has no version 5"):
        rows(clicks, subscribe="clicks", valueFormat="avro", valueSchemaVersion=5)
    with pytest.raises(UnusableSchema, match="holds a AVRO schema, not the JSON"):
        rows(clicks, subscribe="clicks", valueFormat="jsonschema")
    with pytest.raises(UnusableSchema, match="holds a AVRO schema, not the PROTOBUF"):
        rows(clicks, subscribe="clicks", valueFormat="protobuf")
    with pytest.raises(InvalidSourceOption, match="valueFormat.*must be avro, jsonschema or "
                                                  "protobuf"):
        rows(clicks, subscribe="clicks", valueFormat="thrift")
    with pytest.raises(InvalidSourceOption, match="needs the subject named"):
        rows(clicks, subscribe="clicks,other", valueFormat="avro")
    with pytest.raises(InvalidSourceOption, match="keySubject.*needs keyFormat"):
        rows(clicks, subscribe="clicks", keySubject="x")
    with pytest.raises(InvalidSourceOption, match="mode.*FAILFAST or PERMISSIVE"):
        rows(clicks, subscribe="clicks", valueFormat="avro", mode="DROPMALFORMED")
    # several topics read with one named subject
    assert rows(clicks, subscribe="clicks,other", valueFormat="avro",
                valueSubject="clicks-value") == []


@pytest.mark.parametrize("schema, reason", [
    (["int", {"type": "long", "logicalType": "timestamp-millis"}], "with a logical type"),
    (record("Node", {"name": "next", "type": ["null", "test.Node"]}), "contains itself"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 0}, "38 digits"),
])
def test_avro_schemas_without_a_spark_type(schema, reason):
    import fastavro

    named: dict = {}
    parsed = fastavro.parse_schema(schema, named_schemas=named)
    with pytest.raises(UnusableSchema, match=reason):
        avro_arrow_type(parsed, named, subject="s")


@pytest.mark.parametrize("schema, reason", [
    ({"type": "object"}, r"\$: an object without properties"),
    ({"type": "object", "properties": {"a": {"allOf": []}}}, r"\$\.a: a schema without a type"
     r"|\$\.a: type None"),
    ({"type": "object", "properties": {"a": {"type": ["string", "integer"]}}}, "no one column"),
    ({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
      "$ref": "#/$defs/n"}, "contains itself"),
    ({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}, "points at nothing"),
    ({"type": "array"}, "needs one items schema"),
])
def test_json_schemas_without_a_spark_type(schema, reason):
    with pytest.raises(UnusableSchema, match=reason):
        json_schema_arrow_type(schema, subject="s")


def test_json_schema_types():
    t = json_schema_arrow_type({"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"oneOf": [{"type": "null"}, {"type": "boolean"}]},
        "c": {"type": "object", "additionalProperties": {"type": "integer"}},
        "d": {"enum": ["x", "y"]}}}, subject="s")
    assert t == pa.struct([("a", pa.float64()), ("b", pa.bool_()),
                           ("c", pa.map_(pa.string(), pa.int64())), ("d", pa.string())])


@pytest.fixture(scope="module")
def fuzz_plan(tmp_path_factory):
    """A plan decoding ``f-value`` (a string and an array of longs) in a store of its own."""
    from log_layout import open_log
    from pipeline.registry_decode import FAILFAST, plan_column

    log = open_log(str(tmp_path_factory.mktemp("fuzz")))
    register(log, "f-value", record("R", {"name": "s", "type": "string"},
                                    {"name": "xs", "type": {"type": "array", "items": "long"}}))
    description = {"url": log.store.describe()["url"], "storage_options": None}
    return plan_column(description, "value", "avro", "f-value", "latest", FAILFAST), description


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.binary(max_size=40),
                          st.binary(max_size=30).map(lambda b: header(1) + b),
                          st.integers(0, 2 ** 32 - 1).map(lambda i: b"\0" + struct.pack(">I", i)),
                          st.none()),
                min_size=1, max_size=20))
def test_hostile_records_fail_as_undecodable_or_read_as_null(fuzz_plan, raws):
    """Whatever the bytes: FAILFAST raises UndecodableRecord only, naming a record's
    offset; PERMISSIVE never raises and gives a row for every record."""
    import dataclasses

    from pipeline.registry_decode import PERMISSIVE, decode_batch

    plan, description = fuzz_plan
    batch = pa.RecordBatch.from_pydict({"value": pa.array(raws, pa.binary()),
                                        "offset": pa.array(range(100, 100 + len(raws)),
                                                           pa.int64())})
    try:
        decode_batch(batch, (plan,), description, "f", 0)
    except UndecodableRecord as e:
        assert (e.topic, e.partition) == ("f", 0) and 100 <= e.offset < 100 + len(raws)
    lenient = dataclasses.replace(plan, mode=PERMISSIVE)
    got = decode_batch(batch, (lenient,), description, "f", 0)
    assert got.num_rows == len(raws) and got.schema.field("value").type == plan.arrow_type
    assert all(v is None for v, raw in zip(got.column("value").to_pylist(), raws) if raw is None)


def _varint(n: int) -> bytes:
    """Avro's zigzag varint of a long."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


EMPTY_ITEMS = record("E", {"name": "nulls", "type": {"type": "array", "items": "null"}},
                     {"name": "ns", "type": {"type": "array", "items": "long"}},
                     {"name": "m", "type": {"type": "map", "values": "null"}})


@pytest.fixture(scope="module")
def empty_items_plan(tmp_path_factory):
    """A plan decoding ``e-value``: arrays of nulls and of longs, a map of nulls."""
    from log_layout import open_log
    from pipeline.registry_decode import FAILFAST, plan_column

    log = open_log(str(tmp_path_factory.mktemp("empty")))
    sid = register(log, "e-value", EMPTY_ITEMS)
    description = {"url": log.store.describe()["url"], "storage_options": None}
    plan = plan_column(description, "value", "avro", "e-value", "latest", FAILFAST)
    return plan, sid, description


def _decode(plan, description, raws):
    from pipeline.registry_decode import decode_batch

    batch = pa.RecordBatch.from_pydict({"value": pa.array(raws, pa.binary()),
                                        "offset": pa.array(range(len(raws)), pa.int64())})
    return decode_batch(batch, (plan,), description, "e", 0).column("value").to_pylist()


def test_array_blocks_claiming_more_than_the_bytes_hold_are_undecodable(empty_items_plan):
    """10 bytes claiming 2**62 nulls would keep fastavro looping for minutes."""
    from pipeline.avro_bounds import MAX_EMPTY_ITEMS

    plan, sid, description = empty_items_plan
    fine = header(sid) + _varint(3) + _varint(0) + _varint(2) + _varint(7) * 2 + _varint(0) \
        + _varint(1) + _varint(1) + b"k" + _varint(0)
    assert _decode(plan, description, [fine]) == [
        {"nulls": [None] * 3, "ns": [7, 7], "m": [("k", None)]}]
    hostile = {
        "more than 1,000,000 empty array items": _varint(2 ** 62) + _varint(0) * 3,
        "in all": (_varint(MAX_EMPTY_ITEMS) + _varint(1)) + _varint(0) * 3,
        "a block of 1,099,511,627,776 items": _varint(0) + _varint(2 ** 40) + _varint(1),
        "a block of 4,611,686,018,427,387,904 items": _varint(0) + _varint(-(2 ** 62))
        + _varint(8) + _varint(1)}
    for reason, body in hostile.items():
        reason = "more than 1,000,000 empty" if reason == "in all" else reason
        with pytest.raises(UndecodableRecord, match=f"e-0 offset 1: .*{reason}"):
            _decode(plan, description, [fine, header(sid) + body])
    # a map of nulls has a key per entry: fastavro runs out of bytes by itself
    with pytest.raises(UndecodableRecord, match="e-0 offset 0"):
        _decode(plan, description, [header(sid) + _varint(0) * 2 + _varint(2 ** 62) + b"k"])


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.integers(-(2 ** 63), 2 ** 63 - 1).map(_varint),
                          st.binary(max_size=4)), max_size=12))
def test_hostile_counts_end_as_undecodable_or_read(empty_items_plan, parts):
    """Whatever counts the bytes claim, a record decodes or is undecodable (and the test
    ends: no block loops over items its bytes cannot hold)."""
    import dataclasses

    from pipeline.registry_decode import PERMISSIVE

    plan, sid, description = empty_items_plan
    raw = header(sid) + b"".join(parts)
    try:
        got = _decode(plan, description, [raw])
    except UndecodableRecord as e:
        assert e.offset == 0
    else:
        assert len(got[0]["nulls"]) <= 1_000_000
    assert len(_decode(dataclasses.replace(plan, mode=PERMISSIVE), description, [raw])) == 1
