"""Avro unions of several non-null types decoded without Spark as Spark's ``from_avro``
types them (``member0..N`` structs, the branch written set), through the ``sparklog``
source's reader tasks, for records fastavro encodes in Confluent's wire format: nested in
records, arrays and maps, resolved from an older writer, a branch added at the end."""

from __future__ import annotations

import fastavro
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import UndecodableRecord, UnusableSchema
from pipeline.registry_types import avro_arrow_type
from tests.pipeline.conftest import append
from tests.pipeline.registry_records import avro, record, register
from tests.pipeline.test_registry_decode import decoded, rows

POINT = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}]}
KIND = {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}
V1 = record("Event",
            {"name": "id", "type": ["null", "int", "string"]},
            {"name": "parts", "type": {"type": "array", "items": ["long", "string", POINT]}},
            {"name": "attrs", "type": {"type": "map", "values": ["null", "test.Point",
                                                                 "boolean"]}},
            {"name": "tag", "type": ["string", KIND]})
# a branch added at the end (BACKWARD: the new reader still reads every old branch)
V2 = record("Event", {"name": "id", "type": ["null", "int", "string", "double"]},
            *V1["fields"][1:],
            {"name": "since", "type": ["int", "string"], "default": 3})  # old records: 3

ID = pa.struct([("member0", pa.int32()), ("member1", pa.string())])
PARTS = pa.list_(pa.field("element", pa.struct([("member0", pa.int64()),
                                                ("member1", pa.string()),
                                                ("member2", pa.struct([("x", pa.int32())]))])))


def _type(schema) -> pa.DataType:
    named: dict = {}
    return avro_arrow_type(fastavro.parse_schema(schema, named_schemas=named), named,
                           subject="s")


def _member(n: int, i: int, value) -> dict:
    """A member struct's row: field ``i`` of ``n`` set."""
    return {f"member{j}": value if j == i else None for j in range(n)}


def test_union_types_are_spark_member_structs():
    t = _type(V1)
    assert t.field("id").type == ID and t.field("parts").type == PARTS
    assert t.field("attrs").type == pa.map_(pa.string(), pa.struct(
        [("member0", pa.struct([("x", pa.int32())])), ("member1", pa.bool_())]))
    assert t.field("tag").type == pa.struct([("member0", pa.string()),
                                             ("member1", pa.string())])
    # Spark's two exceptions: int and long is a long, float and double a double
    assert _type(["null", "int", "long"]) == pa.int64()
    assert _type(["float", "double"]) == pa.float64()
    # a recursive record stays refused, naming the field
    with pytest.raises(UnusableSchema, match="next.member0: type test.Node contains itself"):
        _type(record("Node", {"name": "next", "type": ["null", "test.Node", "string"]}))


@pytest.fixture
def events(local_log):
    local_log.create_topic("ev", {"partitions": 1})
    return local_log


def test_the_branch_written_is_set_nested_and_resolved(events):
    id1 = register(events, "ev-value", V1)
    first = {"id": 7, "parts": [5, "s", {"x": 1}], "attrs": {"k": None, "p": {"x": 2},
                                                            "b": True},
             "tag": ("test.Kind", "B")}  # fastavro's way to write the enum branch
    second = {"id": "seven", "parts": [], "attrs": {}, "tag": "B"}
    third = {"id": None, "parts": [], "attrs": {}, "tag": "A"}
    events_v1 = [avro(V1, id1, v) for v in (first, second, third)]
    append(events, "ev", 0, events_v1)
    want = [
        {"id": _member(2, 0, 7),
         "parts": [_member(3, 0, 5), _member(3, 1, "s"), _member(3, 2, {"x": 1})],
         "attrs": [("k", None), ("p", _member(2, 0, {"x": 2})), ("b", _member(2, 1, True))],
         "tag": _member(2, 1, "B")},
        {"id": _member(2, 1, "seven"), "parts": [], "attrs": [], "tag": _member(2, 0, "B")},
        {"id": None, "parts": [], "attrs": [], "tag": _member(2, 0, "A")}]
    assert decoded(events, subscribe="ev", valueFormat="avro") == [
        (i, v, id1) for i, v in enumerate(want)]

    # v2 adds a branch at the end: v1's records resolve into the same members
    id2 = register(events, "ev-value", V2)
    append(events, "ev", 0, [avro(V2, id2, {**second, "id": 2.5, "since": "x"})])
    got = decoded(events, subscribe="ev", valueFormat="avro")
    assert [v["id"] for _, v, _ in got] == [_member(3, 0, 7), _member(3, 1, "seven"), None,
                                           _member(3, 2, 2.5)]
    assert [sid for *_, sid in got] == [id1, id1, id1, id2]
    assert [v["since"] for _, v, _ in got] == [_member(2, 0, 3)] * 3 + [_member(2, 1, "x")]
    assert got[0][1]["parts"] == want[0]["parts"]
    # read as v1, the double written by v2 has no branch: undecodable, naming the offset
    with pytest.raises(UndecodableRecord, match="ev-0 offset 3: the value cannot be decoded"):
        rows(events, subscribe="ev", valueFormat="avro", valueSchemaVersion=1)
    lenient = decoded(events, subscribe="ev", valueFormat="avro", valueSchemaVersion=1,
                      mode="PERMISSIVE")
    assert [v is None for _, v, _ in lenient] == [False, False, False, True]


def test_a_writer_type_goes_to_the_branch_avro_resolves_it_to(events):
    """Python's int cannot tell int from long: the writer's branch decides, as Avro's
    resolution (the same type first, then a promotion) does."""
    old = record("N", {"name": "n", "type": ["long", "string"]})
    new = record("N", {"name": "n", "type": ["int", "long", "string"]})
    plain = record("N", {"name": "n", "type": "int"})
    id_old = register(events, "ev-value", old)
    id_new = register(events, "ev-value", new)
    id_plain = register(events, "other-value", plain)  # ids are global: a writer of ev too
    append_values = [avro(old, id_old, {"n": 5}), avro(new, id_new, {"n": 5}),
                     avro(old, id_old, {"n": "x"}), avro(plain, id_plain, {"n": 6})]
    append(events, "ev", 0, append_values)
    got = decoded(events, subscribe="ev", valueFormat="avro", valueSchemaVersion=2)
    assert [v["n"] for _, v, _ in got] == [_member(3, 1, 5), _member(3, 0, 5),
                                          _member(3, 2, "x"), _member(3, 0, 6)]


W = record("W", {"name": "v", "type": ["null", "int", "string", "double",
                                      {"type": "array", "items": ["long", "string"]}]})
# a newer reader: int read as long (a promotion), a branch added at the end
R = record("W", {"name": "v", "type": ["null", "long", "string", "double",
                                      {"type": "array", "items": ["long", "string"]},
                                      "boolean"]})
_VALUES = st.one_of(st.none(), st.integers(-(2 ** 31), 2 ** 31 - 1), st.text(max_size=5),
                    st.floats(allow_nan=False),
                    st.lists(st.one_of(st.integers(-(2 ** 63), 2 ** 63 - 1),
                                       st.text(max_size=3)), max_size=4))


@pytest.fixture(scope="module")
def union_plans(tmp_path_factory):
    """Plans reading ``u-value`` as W (version 1) and as R (version 2), in a store of
    their own; W's id."""
    from log_layout import open_log
    from pipeline.registry_decode import FAILFAST, plan_column

    log = open_log(str(tmp_path_factory.mktemp("unions")))
    wid = register(log, "u-value", W)
    register(log, "u-value", R)
    description = {"url": log.store.describe()["url"], "storage_options": None}
    return ([plan_column(description, "value", "avro", "u-value", v, FAILFAST)
             for v in (1, 2)], wid, description)


def _expected(value, width: int) -> dict | None:
    """The member struct fastavro's writer's branch (the first that fits) gives."""
    if value is None:
        return None
    branch = (0 if isinstance(value, int) else 1 if isinstance(value, str)
              else 2 if isinstance(value, float) else 3)
    if branch == 3:
        value = [_member(2, 0 if isinstance(x, int) else 1, x) for x in value]
    return _member(width, branch, value)


@settings(max_examples=150, deadline=None)
@given(st.lists(_VALUES, min_size=1, max_size=8))
def test_any_union_value_lands_in_its_branch(union_plans, values):
    from pipeline.registry_decode import decode_batch

    plans, wid, description = union_plans
    batch = pa.RecordBatch.from_pydict({
        "value": pa.array([avro(W, wid, {"v": v}) for v in values], pa.binary()),
        "offset": pa.array(range(len(values)), pa.int64())})
    for plan, width in zip(plans, (4, 5)):  # as the writer's own version, then as R
        got = decode_batch(batch, (plan,), description, "u", 0).column("value").to_pylist()
        assert [g["v"] for g in got] == [_expected(v, width) for v in values]
