"""The ``sparklog`` source's ``valueFormat=protobuf`` without Spark: records written with an
older schema version read with the newer one's message (and the reverse), the column
type of every kind of field, recursive messages refused, bad message indexes and
hostile bytes failing FAILFAST with the offset or reading as null PERMISSIVE."""

from __future__ import annotations

import datetime as dt
import re
import decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.errors import InvalidSourceOption, UndecodableRecord, UnusableSchema
from pipeline.registry_protobuf import compile_file, first_message
from tests.pipeline.conftest import append
from tests.pipeline.registry_records import header, registry
from tests.pipeline.test_registry_decode import decoded, rows

pytest.importorskip("grpc_tools.protoc")

V1 = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
enum Status { NEW = 0; PAID = 1; }
message Order {
  string id = 1;
  int64 cents = 2;
  google.protobuf.Timestamp at = 3;
  Status status = 4;
  message Line { string sku = 1; uint32 qty = 2; }
  repeated Line lines = 5;
  map<string, int32> attrs = 6;
}
"""
# BACKWARD-compatible: fields added (one with presence, an unsigned 64-bit, a repeated)
V2 = V1.replace("map<string, int32> attrs = 6;\n", "map<string, int32> attrs = 6;\n"
                "  optional string note = 7;\n  uint64 big = 8;\n  repeated string tags = 9;\n")
AT = dt.datetime(2026, 11, 29, 4, 30, 1, 250000, tzinfo=dt.timezone.utc)


def register(log, subject: str, text: str) -> int:
    return registry(log).register(subject, {"schema": text, "schemaType": "PROTOBUF"})["id"]


def encode(text: str, schema_id: int, value: dict, indexes: bytes = b"\0") -> bytes:
    """``value`` (Protobuf's JSON mapping) as ProtobufSerializer writes it: magic byte,
    id, message indexes, the message."""
    from google.protobuf import json_format, message_factory

    cls = message_factory.GetMessageClass(first_message(compile_file(text, [], "t")))
    return header(schema_id) + indexes + json_format.ParseDict(value, cls()).SerializeToString()


ORDER1 = {"id": "o-1", "cents": "1250", "at": "2026-11-29T04:30:01.250Z", "status": "PAID",
          "lines": [{"sku": "a", "qty": 2}], "attrs": {"k": 7}}
ORDER2 = {"id": "o-2", "cents": "-3", "note": "", "big": str(2 ** 64 - 1), "tags": ["x"]}


@pytest.fixture
def orders(local_log):
    local_log.create_topic("orders", {"partitions": 1})
    return local_log


def test_an_older_version_reads_with_the_newer_message(orders):
    id1 = register(orders, "orders-value", V1)
    append(orders, "orders", 0, [encode(V1, id1, ORDER1), None])
    id2 = register(orders, "orders-value", V2)
    append(orders, "orders", 0, [encode(V2, id2, ORDER2)])
    got = decoded(orders, subscribe="orders", valueFormat="protobuf")
    assert got == [
        (0, {"id": "o-1", "cents": 1250, "at": AT, "status": "PAID",
             "lines": [{"sku": "a", "qty": 2}], "attrs": [("k", 7)],
             "note": None, "big": decimal.Decimal(0), "tags": []}, id1),  # defaults
        (1, None, None),  # a tombstone stays null
        (2, {"id": "o-2", "cents": -3, "at": None, "status": "NEW", "lines": [], "attrs": [],
             "note": "", "big": decimal.Decimal(2 ** 64 - 1), "tags": ["x"]}, id2)]
    # the older version as the reader: the fields it does not know are skipped
    old = decoded(orders, subscribe="orders", valueFormat="protobuf", valueSchemaVersion=1)
    assert old[2] == (2, {"id": "o-2", "cents": -3, "at": None, "status": "NEW",
                          "lines": [], "attrs": []}, id2)


def test_the_column_type_of_every_kind_of_field(orders):
    register(orders, "orders-value", V2)
    from pipeline.source import SparklogDataSource
    from tests.pipeline.conftest import source_options

    ds = SparklogDataSource(source_options(orders, subscribe="orders", valueFormat="protobuf"))
    (plan,) = ds.plans
    t = plan.arrow_type
    assert t.field("cents").type == pa.int64()
    assert t.field("at").type == pa.timestamp("us", tz="UTC")
    assert t.field("status").type == pa.string()
    assert t.field("lines").type.value_type == pa.struct([("sku", pa.string()),
                                                           ("qty", pa.int64())])
    assert t.field("attrs").type == pa.map_(pa.string(), pa.int32())
    assert t.field("big").type == pa.decimal128(20, 0)
    assert ds.schema()["value"].dataType.simpleString().startswith(
        "struct<id:string,cents:bigint,at:timestamp,status:string,lines:array<struct<")


def test_a_recursive_message_is_refused_naming_the_field(orders):
    register(orders, "orders-value", 'syntax = "proto3";\nmessage Node {\n  string name = 1;\n'
             '  Wrap child = 2;\n}\nmessage Wrap { Node node = 1; }\n')
    with pytest.raises(UnusableSchema, match=r"child\.node: message Node contains itself"):
        rows(orders, subscribe="orders", valueFormat="protobuf")


def test_bad_indexes_and_bytes_fail_with_the_offset_or_read_null(orders):
    sid = register(orders, "orders-value", V1)
    good = encode(V1, sid, ORDER1)
    bad = [encode(V1, sid, ORDER1, indexes=b"\x02\x02"),  # [1]: a message the file lacks
           header(sid) + b"\x80",                          # a truncated varint
           header(sid) + b"\x7e" + b"\0" * 8,              # 63 indexes, each [0]... then none
           header(sid) + b"\0\x0a\xff\xff\xff\x0f",        # a string field 4 GB long
           header(999) + b"\0",                            # an id the registry lacks
           b"\1" + good[1:]]                               # not the magic byte
    append(orders, "orders", 0, [good, *bad])
    with pytest.raises(UndecodableRecord, match=r"orders-0 offset 1: .*schema id \d+ \(the "
                                                r"record's writer schema\): message indexes "
                                                r"\[1\] name no message \(index 1 of 1"):
        rows(orders, subscribe="orders", valueFormat="protobuf")
    got = decoded(orders, subscribe="orders", valueFormat="protobuf", mode="PERMISSIVE")
    assert [v is None for _, v, _ in got] == [False] + [True] * len(bad)
    assert [i for _, _, i in got] == [sid] * 5 + [999, None]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.binary(max_size=64), min_size=1, max_size=8))
def test_hostile_bytes_never_crash_the_reader(orders, bodies):
    sid = register(orders, "orders-value", V2)  # the same schema again: the same id
    append(orders, "orders", 0, [header(sid) + b for b in bodies])
    got = decoded(orders, subscribe="orders", valueFormat="protobuf", mode="PERMISSIVE")
    assert all(v is None or isinstance(v, dict) for _, v, _ in got)
    assert all(i == sid for _, _, i in got)
    try:
        decoded(orders, subscribe="orders", valueFormat="protobuf")
    except UndecodableRecord as e:  # FAILFAST: the first bad one, named
        assert "orders-0 offset" in str(e)


# -- choosing the message: valueProtobufMessage --------------------------------------------
MULTI = """syntax = "proto3";
package multi;
message First { string a = 1; }
message Second {
  int64 n = 1;
  message Inner { string s = 1; repeated int32 xs = 2; }
  Inner inner = 2;
  map<string, int32> m = 3;
}
"""
# the same messages, Second first: index [0] names a different message in each version
REORDERED = """syntax = "proto3";
package multi;
message Second {
  int64 n = 1;
  message Inner { string s = 1; repeated int32 xs = 2; }
  Inner inner = 2;
  map<string, int32> m = 3;
}
message First { string a = 1; }
"""


def zigzag(n: int) -> bytes:
    """``n`` as a zigzag varint (any size, as a hostile writer may send)."""
    u = 2 * n if n >= 0 else -2 * n - 1
    out = bytearray()
    while True:
        b, u = u & 0x7F, u >> 7
        out.append(b | (0x80 if u else 0))
        if not u:
            return bytes(out)


def message_bytes(text: str, name: str, value: dict) -> bytes:
    from google.protobuf import json_format, message_factory

    file = compile_file(text, [], "t")
    return json_format.ParseDict(value, message_factory.GetMessageClass(
        file.pool.FindMessageTypeByName(name))()).SerializeToString()


def multi_record(schema_id: int, indexes: list[int], name: str, value: dict,
                 text: str = MULTI) -> bytes:
    """As ProtobufSerializer writes a record of message ``name`` (``[0]`` as one 0)."""
    head = b"\0" if indexes == [0] else zigzag(len(indexes)) + b"".join(map(zigzag, indexes))
    return header(schema_id) + head + message_bytes(text, name, value)


def test_zigzag_is_confluents():
    assert [zigzag(n) for n in (0, -1, 1, 2, -64, 2 ** 40)] == [
        b"\0", b"\x01", b"\x02", b"\x04", b"\x7f", b"\x80\x80\x80\x80\x80\x40"]


@pytest.fixture
def multi(orders):
    sid = register(orders, "orders-value", MULTI)
    append(orders, "orders", 0, [
        multi_record(sid, [0], "multi.First", {"a": "x"}),
        multi_record(sid, [1], "multi.Second", {"n": "5", "inner": {"s": "in"}, "m": {"k": 1}}),
        multi_record(sid, [1, 0], "multi.Second.Inner", {"s": "deep", "xs": [1, 2]})])
    return orders, sid


def test_the_option_chooses_a_top_level_or_nested_message(multi):
    orders, sid = multi
    opts = {"subscribe": "orders", "valueFormat": "protobuf", "mode": "PERMISSIVE"}
    assert decoded(orders, **opts, valueProtobufMessage="multi.Second") == [
        (0, None, sid),
        (1, {"n": 5, "inner": {"s": "in", "xs": []}, "m": [("k", 1)]}, sid),
        (2, None, sid)]
    assert decoded(orders, **opts, valueProtobufMessage="multi.Second.Inner") == [
        (0, None, sid), (1, None, sid), (2, {"s": "deep", "xs": [1, 2]}, sid)]
    # without the option: the file's first message, as before
    assert decoded(orders, **opts) == [(0, {"a": "x"}, sid), (1, None, sid), (2, None, sid)]


def test_a_record_of_another_message_fails_naming_both(multi):
    orders, sid = multi
    with pytest.raises(UndecodableRecord, match=(
            rf"orders-0 offset 0: the value cannot be decoded: it is a multi\.First message "
            rf"\(indexes \[0\] of schema id {sid}\), not the multi\.Second\.Inner the column "
            "reads")):
        rows(orders, subscribe="orders", valueFormat="protobuf",
             valueProtobufMessage="multi.Second.Inner")
    with pytest.raises(UndecodableRecord, match=r"orders-0 offset 1: .* it is a multi\.Second "
                                                r"message \(indexes \[1\] .*not the multi\.First"):
        rows(orders, subscribe="orders", valueFormat="protobuf")


def test_an_unknown_message_is_refused_at_load_listing_the_files(multi):
    orders, _ = multi
    from pipeline.source import SparklogDataSource
    from tests.pipeline.conftest import source_options

    for name in ("multi.Third", "Second", "multi.Second.MEntry", "other.First"):
        with pytest.raises(InvalidSourceOption, match=(
                r"'valueProtobufMessage' '" + re.escape(name) + r"': is not a message of "
                r"orders-value version 1 \(its messages, by full name: multi\.First, "
                r"multi\.Second, multi\.Second\.Inner\)")):
            SparklogDataSource(source_options(orders, subscribe="orders", valueFormat="protobuf",
                                              valueProtobufMessage=name)).schema()
    with pytest.raises(InvalidSourceOption, match="'valueProtobufMessage' 'multi.First': needs "
                                                  "valueFormat=protobuf, not avro"):
        rows(orders, subscribe="orders", valueFormat="avro", valueProtobufMessage="multi.First")
    with pytest.raises(InvalidSourceOption, match="'keyProtobufMessage' 'multi.First': needs "
                                                  "keyFormat"):
        rows(orders, subscribe="orders", keyProtobufMessage="multi.First")
    with pytest.raises(InvalidSourceOption, match="must be a message's full name"):
        rows(orders, subscribe="orders", valueFormat="protobuf", valueProtobufMessage="a..b")


def test_indexes_are_resolved_against_the_writer_schema(orders):
    """A version that reorders the file's messages: ``[0]`` is Second in one and First in
    the other; each record reads as what its own writer schema says it is."""
    from tests.pipeline.registry_records import registry

    registry(orders).configs.set_config("orders-value", {"compatibility": "NONE"})
    id1 = register(orders, "orders-value", REORDERED)
    id2 = register(orders, "orders-value", MULTI)
    append(orders, "orders", 0, [
        multi_record(id1, [0], "multi.Second", {"n": "1"}, REORDERED),
        multi_record(id2, [1], "multi.Second", {"n": "2"}),
        multi_record(id2, [0], "multi.First", {"a": "f"})])
    got = decoded(orders, subscribe="orders", valueFormat="protobuf", mode="PERMISSIVE",
                  valueProtobufMessage="multi.Second")
    assert [(o, v and v["n"], i) for o, v, i in got] == [(0, 1, id1), (1, 2, id2),
                                                          (2, None, id2)]
    # the latest version's first message (First): the REORDERED record is a Second
    with pytest.raises(UndecodableRecord, match=rf"offset 0: .*it is a multi\.Second message "
                                                rf"\(indexes \[0\] of schema id {id1}\)"):
        rows(orders, subscribe="orders", valueFormat="protobuf")


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(
    st.one_of(st.integers(-2 ** 70, 2 ** 70), st.integers(-3, 70)),   # the count
    st.lists(st.one_of(st.integers(-2 ** 70, 2 ** 70), st.integers(-2, 3)), max_size=70),
    st.integers(0, 40),                                                 # bytes cut off the end
    st.binary(max_size=16)), min_size=1, max_size=6),
    st.sampled_from(["multi.First", "multi.Second.Inner"]))
def test_hostile_message_indexes_never_crash_the_reader(orders, records, name):
    sid = register(orders, "orders-value", MULTI)
    bodies = []
    for count, indexes, cut, tail in records:
        raw = zigzag(count) + b"".join(map(zigzag, indexes)) + tail
        bodies.append(header(sid) + raw[:max(len(raw) - cut, 0)])
    append(orders, "orders", 0, bodies)
    opts = {"subscribe": "orders", "valueFormat": "protobuf", "valueProtobufMessage": name}
    got = decoded(orders, **opts, mode="PERMISSIVE")
    assert all(v is None or isinstance(v, dict) for _, v, _ in got)
    assert all(i == sid for _, _, i in got)
    try:
        decoded(orders, **opts)
    except UndecodableRecord as e:  # FAILFAST: the first bad one, named
        assert "orders-0 offset" in str(e)


def test_keys_choose_their_own_message(orders):
    kid = register(orders, "orders-key", MULTI)
    vid = register(orders, "orders-value", V1)
    append(orders, "orders", 0, [encode(V1, vid, ORDER1)],
           keys=[multi_record(kid, [1, 0], "multi.Second.Inner", {"s": "k"})])
    (row,) = rows(orders, subscribe="orders", valueFormat="protobuf", keyFormat="protobuf",
                  keyProtobufMessage="multi.Second.Inner")
    assert (row["key"], row["keySchemaId"], row["value"]["id"]) == (
        {"s": "k", "xs": []}, kid, "o-1")


def test_materialize_refuses_a_message_without_protobuf():
    from pipeline.errors import TableError
    from pipeline.tables import _registry_options

    assert _registry_options("t", "protobuf", "protobuf", False, {},
                             {"value": "a.B", "key": None}) == {
        "valueFormat": "protobuf", "keyFormat": "protobuf", "valueProtobufMessage": "a.B"}
    with pytest.raises(TableError, match=r"key_message \('a.B'\) chooses a Protobuf message: "
                                         "it needs key_format protobuf"):
        _registry_options("t", "protobuf", "avro", False, {}, {"key": "a.B"})


@pytest.mark.parametrize("indexes, reason", [
    (zigzag(1) + zigzag(-1), r"message indexes \[-1\] name no message \(index -1 of 2"),
    (zigzag(2) + zigzag(1) + zigzag(5),  # Second has Inner and its map entry
     r"\[1, 5\] name no message \(index 5 of 2 at depth 1"),
    (zigzag(2 ** 40), r"1099511627776 message indexes \(at most 64\)"),
    (zigzag(-3), r"-3 message indexes \(at most 64\)"),
    (zigzag(2) + zigzag(1), "truncated message indexes"),
    (zigzag(1) + b"\xff" * 12, "truncated message indexes"),  # a varint past 64 bits
])
def test_hostile_index_arrays_are_named(orders, indexes, reason):
    sid = register(orders, "orders-value", MULTI)
    append(orders, "orders", 0, [header(sid) + indexes])
    with pytest.raises(UndecodableRecord, match="orders-0 offset 0: the value cannot be "
                                                "decoded: .*" + reason):
        rows(orders, subscribe="orders", valueFormat="protobuf",
             valueProtobufMessage="multi.Second.Inner")
