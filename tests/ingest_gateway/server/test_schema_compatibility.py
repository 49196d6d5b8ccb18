"""The registry's compatibility rules, without a gateway (a ``memory://`` store).

- Avro: a corpus of reader/writer pairs from the specification's resolution rules, and
  hypothesis-generated record evolutions checked against an independent oracle:
  fastavro writing a datum with one schema and reading it with the other.
- The levels: BACKWARD, FORWARD, FULL, their transitive forms and NONE, over the same
  evolutions, through ``SchemaRegistry.register`` (409 when refused).
- JSON Schema: the subset of Confluent's rules the registry checks.
"""

from __future__ import annotations

import io
import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest_gateway.server import schema_types
from ingest_gateway.server.schema_registry import SchemaRegistry
from ingest_gateway.server.schema_registry_errors import RegistryError
from log_layout import open_store
from log_layout.schema_registry import SchemaStore

fastavro = pytest.importorskip("fastavro")


def compatible(reader: object, writer: object, kind: str = "AVRO") -> bool:
    r = schema_types.parse(kind, json.dumps(reader), [])
    w = schema_types.parse(kind, json.dumps(writer), [])
    return not schema_types.incompatibilities(kind, r, w)


def rec(*fields, name="R") -> dict:
    return {"type": "record", "name": name, "fields": list(fields)}


def f(name, kind, **kw) -> dict:
    return {"name": name, "type": kind, **kw}


# (reader, writer, compatible): the Avro specification's "Schema Resolution"
AVRO_CORPUS = [
    ("long", "int", True), ("int", "long", False), ("double", "float", True),
    ("float", "long", True), ("int", "float", False), ("bytes", "string", True),
    ("string", "bytes", True), ("string", "int", False),
    (["null", "int"], "int", True), ("int", ["null", "int"], False),
    (["null", "long"], ["null", "int"], True),
    ({"type": "enum", "name": "E", "symbols": ["A", "B", "C"]},
     {"type": "enum", "name": "E", "symbols": ["A", "B"]}, True),
    ({"type": "enum", "name": "E", "symbols": ["A"]},
     {"type": "enum", "name": "E", "symbols": ["A", "B"]}, False),
    ({"type": "enum", "name": "E", "symbols": ["A"], "default": "A"},
     {"type": "enum", "name": "E", "symbols": ["A", "B"]}, True),
    ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 8}, False),
    ({"type": "array", "items": "long"}, {"type": "array", "items": "int"}, True),
    ({"type": "map", "values": "int"}, {"type": "map", "values": "long"}, False),
    (rec(f("a", "int")), rec(f("a", "int"), f("b", "string")), True),   # writer's extra: skipped
    (rec(f("a", "int"), f("b", "string")), rec(f("a", "int")), False),  # reader's new: no default
    (rec(f("a", "int"), f("b", "string", default="")), rec(f("a", "int")), True),
    (rec(f("a", "long")), rec(f("a", "int")), True),
    (rec(f("a", "int")), rec(f("a", "int"), name="Other"), False),       # names must match
]


@pytest.mark.parametrize("reader,writer,expected", AVRO_CORPUS,
                         ids=[str(i) for i in range(len(AVRO_CORPUS))])
def test_avro_resolution_corpus(reader, writer, expected):
    assert compatible(reader, writer) is expected


# (type, default, valid): Java's Schema.isValidDefault, which Confluent applies
DEFAULT_CORPUS = [
    ("int", 1, True), ("int", "x", False), ("int", True, False), ("int", 2**40, False),
    ("long", 2**40, True), ("double", 1, True), ("string", 3, False),
    (["null", "string"], None, True), (["null", "string"], "x", True),
    (["null", "string"], 3, False),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, "B", False),
    ({"type": "array", "items": "int"}, [1, "x"], False),
    ({"type": "map", "values": "int"}, {"k": 1}, True),
    ({"type": "record", "name": "In", "fields": [f("x", "int")]}, {"x": 1}, True),
    ({"type": "record", "name": "In", "fields": [f("x", "int")]}, {}, False),
]


@pytest.mark.parametrize("kind,default,valid", DEFAULT_CORPUS,
                         ids=[str(i) for i in range(len(DEFAULT_CORPUS))])
def test_avro_defaults_must_fit_their_types(kind, default, valid):
    text = json.dumps(rec(f("a", kind, default=default)))
    if valid:
        schema_types.parse("AVRO", text, [])
    else:
        with pytest.raises(schema_types.InvalidSchemaText, match="invalid default"):
            schema_types.parse("AVRO", text, [])


# -- hypothesis: record evolutions against fastavro ------------------------------------
PRIMITIVES = {"int": 7, "long": 2**40, "float": 1.5, "double": 2.5, "string": "s",
              "bytes": b"b", "boolean": True}
DEFAULTS = {"int": 0, "long": 0, "float": 0.0, "double": 0.0, "string": "", "bytes": "",
            "boolean": False}

fields = st.dictionaries(st.sampled_from("abcdef"),
                         st.tuples(st.sampled_from(sorted(PRIMITIVES)), st.booleans()),
                         min_size=1, max_size=5)


def schema_of(spec: dict) -> dict:
    return rec(*[f(n, t, **({"default": DEFAULTS[t]} if d else {}))
                 for n, (t, d) in sorted(spec.items())])


def oracle(reader: dict, writer: dict) -> bool:
    """fastavro writes a datum of ``writer`` and reads it with ``reader``: the resolution
    an Avro reader really performs."""
    datum = {fl["name"]: PRIMITIVES[fl["type"]] for fl in writer["fields"]}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(writer), datum)
    buf.seek(0)
    try:
        fastavro.schemaless_reader(buf, fastavro.parse_schema(writer),
                                   fastavro.parse_schema(reader))
    except Exception:  # fastavro's SchemaResolutionError and friends
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(fields, fields)
def test_avro_checks_agree_with_fastavro(old, new):
    reader, writer = schema_of(new), schema_of(old)
    assert compatible(reader, writer) is oracle(reader, writer)


@pytest.fixture
def registry():
    return SchemaRegistry(SchemaStore(open_store(f"memory://registry-{uuid.uuid4().hex}")))


def accepted(registry: SchemaRegistry, subject: str, schema: dict) -> bool:
    try:
        registry.register(subject, {"schema": json.dumps(schema)})
        return True
    except RegistryError as e:
        assert (e.status, e.error_code) == (409, 409)
        return False


@settings(max_examples=60, deadline=None)
@given(st.lists(fields, min_size=2, max_size=4),
       st.sampled_from(["NONE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE",
                        "FORWARD_TRANSITIVE", "FULL_TRANSITIVE"]))
def test_levels_follow_their_definition(evolution, level):
    reg = SchemaRegistry(SchemaStore(open_store(f"memory://levels-{uuid.uuid4().hex}")))
    reg.configs.set_config("s", {"compatibility": level})
    kept: list[dict] = []
    for spec in evolution:
        schema = schema_of(spec)
        against = kept if level.endswith("TRANSITIVE") else kept[-1:]
        if level == "NONE":
            expected = True
        else:
            expected = all(
                (not level.startswith(("BACKWARD", "FULL")) or oracle(schema, old)) and
                (not level.startswith(("FORWARD", "FULL")) or oracle(old, schema))
                for old in against)
        already = any(schema == k for k in kept)
        assert accepted(reg, "s", schema) is (expected or already), (level, kept, schema)
        if expected and not already:
            kept.append(schema)


# -- JSON Schema ------------------------------------------------------------------------
OBJ = {"type": "object", "properties": {"a": {"type": "string"}}}
JSON_CORPUS = [
    (OBJ, OBJ, True),
    ({"type": "object", "properties": {"a": {"type": ["string", "null"]}}}, OBJ, True),
    ({"type": "object", "properties": {"a": {"type": "integer"}}}, OBJ, False),
    ({"type": "number"}, {"type": "integer"}, True),
    ({"type": "integer"}, {"type": "number"}, False),
    (dict(OBJ, required=["a"]), OBJ, False),
    (OBJ, dict(OBJ, required=["a"]), True),
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
     OBJ, False),  # added to an open content model: old data may hold any b
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
     dict(OBJ, additionalProperties=False), True),  # closed: old data has no b
    (dict(OBJ, additionalProperties=False),
     {"type": "object", "properties": {"a": {"type": "string"}, "b": {}}}, False),
    ({"enum": ["x", "y", "z"]}, {"enum": ["x", "y"]}, True),
    ({"enum": ["x"]}, {"enum": ["x", "y"]}, False),
    ({"type": "array", "items": {"type": "number"}},
     {"type": "array", "items": {"type": "integer"}}, True),
    ({"type": "array", "items": {"type": "string"}},
     {"type": "array", "items": {"type": "integer"}}, False),
    ({}, {"type": "string"}, True), ({"type": "string"}, {}, False),
]


@pytest.mark.parametrize("reader,writer,expected", JSON_CORPUS,
                         ids=[str(i) for i in range(len(JSON_CORPUS))])
def test_json_schema_corpus(reader, writer, expected):
    assert compatible(reader, writer, "JSON") is expected


def test_protobuf_is_checked(registry):
    """Protobuf's rules (their corpus: test_schema_compatibility_protobuf.py) apply
    through the registry: a wire-incompatible type change is 409."""
    proto = 'syntax = "proto3"; message Click { string url = 1; }'
    registry.register("p", {"schema": proto, "schemaType": "PROTOBUF"})
    with pytest.raises(RegistryError) as e:
        registry.register("p", {"schema": proto.replace("string", "int64"),
                                "schemaType": "PROTOBUF"})
    assert (e.value.status, e.value.error_code) == (409, 409)
    assert "FIELD_KIND_CHANGED" in str(e.value) or "FIELD_SCALAR_KIND_CHANGED" in str(e.value)
    added = registry.register("p", {"schema": proto.replace("}", "int64 at = 2; }"),
                                    "schemaType": "PROTOBUF"})
    assert registry.version("p", 2)["id"] == added["id"]


# -- hypothesis: arbitrary JSON as a schema is accepted or refused with a 4xx ---------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(
        ["int", "long", "string", "record", "enum", "array", "map", "fixed", "null", "R",
         "object", "number", "integer", "x", ""]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["type", "name", "fields", "items", "values", "symbols", "size",
                         "default", "properties", "required", "enum",
                         "additionalProperties", "$schema", "namespace", "aliases"]),
        children, max_size=5),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["AVRO", "JSON"]), json_values, json_values)
def test_arbitrary_json_schemas_never_fail_the_registry(kind, first, second):
    reg = SchemaRegistry(SchemaStore(open_store(f"memory://fuzz-{uuid.uuid4().hex}")))
    reg.configs.set_config(None, {"compatibility": "FULL_TRANSITIVE"})
    for doc in (first, second):
        try:
            reg.register("s", {"schema": json.dumps(doc), "schemaType": kind})
        except RegistryError as e:
            assert 400 <= e.status < 500 and e.error_code in (409, 422, 42201), e
