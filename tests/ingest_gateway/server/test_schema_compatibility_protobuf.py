"""Protobuf's compatibility rules (Confluent's), without a gateway (a ``memory://`` store).

- A corpus of reader/writer pairs, each naming the difference Confluent reports.
- Hypothesis: random message evolutions (fields added, removed, renumbered, retyped,
  made repeated) checked against an independent oracle: a message encoded with the
  writer's descriptor (protoc-compiled, Google's dynamic messages) decoded with the
  reader's, every field they share by number read back without loss.
- The levels (BACKWARD, FORWARD, FULL, transitive, NONE) through
  ``SchemaRegistry.register`` over the same evolutions, and ``?verbose`` reasons.
- JSON Schema's rules against ``jsonschema`` validating instances (a property).
"""

from __future__ import annotations

import functools
import itertools
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

pytest.importorskip("grpc_tools")


@functools.lru_cache(maxsize=4096)
def parsed(text: str):
    return schema_types.parse("PROTOBUF", text, [])


def reasons(reader: str, writer: str) -> list[str]:
    return schema_types.incompatibilities("PROTOBUF", parsed(reader), parsed(writer))


P3 = 'syntax = "proto3";\npackage shop;\n'
P2 = 'syntax = "proto2";\npackage shop;\n'


def p3(body: str, extra: str = "") -> str:
    return P3 + "message Order {\n" + body + "\n}\n" + extra


# (reader, writer, the incompatible difference expected, or None: compatible)
CORPUS = [
    (p3("int32 id = 1;"), p3("int32 id = 1;"), None),
    (p3("int32 id = 1; string note = 2;"), p3("int32 id = 1;"), None),          # field added
    (p3("int32 id = 1;"), p3("int32 id = 1; string note = 2;"), None),          # removed
    (p3("int32 ident = 1;"), p3("int32 id = 1;"), None),                        # renamed
    (p3("int32 id = 2;"), p3("int32 id = 1;"), None),               # renumbered: gone, added
    # Confluent's wire-compatible scalar groups
    *[(p3(f"{r} x = 1;"), p3(f"{w} x = 1;"), None) for r, w in itertools.permutations(
        ["int32", "uint32", "int64", "uint64", "bool"], 2)],
    (p3("sint64 x = 1;"), p3("sint32 x = 1;"), None),
    (p3("sfixed32 x = 1;"), p3("fixed32 x = 1;"), None),
    (p3("fixed64 x = 1;"), p3("sfixed64 x = 1;"), None),
    (p3("bytes x = 1;"), p3("string x = 1;"), None),
    (p3("string x = 1;"), p3("bytes x = 1;"), None),
    (p3("E x = 1;", "enum E { A = 0; }"), p3("int32 x = 1;"), None),             # enum: number
    (p3("sint32 x = 1;"), p3("int32 x = 1;"), "FIELD_SCALAR_KIND_CHANGED"),
    (p3("fixed32 x = 1;"), p3("int32 x = 1;"), "FIELD_SCALAR_KIND_CHANGED"),
    (p3("fixed64 x = 1;"), p3("fixed32 x = 1;"), "FIELD_SCALAR_KIND_CHANGED"),
    (p3("float x = 1;"), p3("double x = 1;"), "FIELD_SCALAR_KIND_CHANGED"),
    (p3("float x = 1;"), p3("fixed32 x = 1;"), "FIELD_SCALAR_KIND_CHANGED"),
    (p3("string x = 1;"), p3("int64 x = 1;"), "FIELD_SCALAR_KIND_CHANGED"),
    (p3("Item x = 1;", "message Item { int32 n = 1; }"), p3("bytes x = 1;"),
     "FIELD_KIND_CHANGED"),
    (p3("map<string, int32> x = 1;"), p3("repeated string x = 1;"), "FIELD_KIND_CHANGED"),
    (p3("map<string, int64> x = 1;"), p3("map<string, int32> x = 1;"), None),
    (p3("map<string, string> x = 1;"), p3("map<string, int32> x = 1;"),
     "FIELD_SCALAR_KIND_CHANGED"),
    # labels: numeric made repeated or singular is not; string and bytes are
    (p3("repeated int32 x = 1;"), p3("int32 x = 1;"), "FIELD_NUMERIC_LABEL_CHANGED"),
    (p3("int64 x = 1;"), p3("repeated int64 x = 1;"), "FIELD_NUMERIC_LABEL_CHANGED"),
    (p3("repeated string x = 1;"), p3("string x = 1;"), None),
    (p3("optional int32 x = 1;"), p3("int32 x = 1;"), None),       # proto3 optional: a label
    # messages: the named type, and changes inside it
    (p3("Item x = 1;", "message Item { int32 n = 1; }\nmessage Other { int32 n = 1; }"),
     p3("Other x = 1;", "message Item { int32 n = 1; }\nmessage Other { int32 n = 1; }"),
     "FIELD_NAMED_TYPE_CHANGED"),
    (p3("Item x = 1;", "message Item { string n = 1; }"),
     p3("Item x = 1;", "message Item { int32 n = 1; }"), "FIELD_SCALAR_KIND_CHANGED"),
    (p3("Item x = 1;", "message Item { int32 n = 1; int32 m = 2; }"),
     p3("Item x = 1;", "message Item { int32 n = 1; }"), None),
    (p3("Item x = 1; message Item { int32 n = 1; }"),
     p3("Item x = 1; message Item { sint32 n = 1; }"), "FIELD_SCALAR_KIND_CHANGED"),
    (p3("Node next = 1; int64 v = 2;", "message Node { Order o = 1; }"),
     p3("Node next = 1; int32 v = 2;", "message Node { Order o = 1; }"), None),  # recursive
    # messages added, removed, moved
    (p3("int32 id = 1;", "message Extra {}"), p3("int32 id = 1;"), None),
    (p3("int32 id = 1;"), p3("int32 id = 1;", "message Extra {}"), "MESSAGE_REMOVED"),
    (P3 + "message Extra {}\nmessage Order { int32 id = 1; }",
     p3("int32 id = 1;", "message Extra {}"), None),                             # moved
    (P3 + "message Renamed { int32 id = 1; }", p3("int32 id = 1;"), "MESSAGE_REMOVED"),
    # package and syntax
    (p3("int32 id = 1;").replace("package shop;", "package shop.v2;"), p3("int32 id = 1;"),
     "PACKAGE_CHANGED"),
    (p3("int32 id = 1;").replace("package shop;\n", ""), p3("int32 id = 1;"),
     "PACKAGE_CHANGED"),
    (P2 + "message Order { optional int32 id = 1; }", p3("int32 id = 1;"), None),
    # enums: every change is compatible (Confluent's COMPATIBLE_CHANGES)
    (p3("E e = 1;", "enum E { A = 0; B = 1; C = 2; }"),
     p3("E e = 1;", "enum E { A = 0; B = 1; }"), None),
    (p3("E e = 1;", "enum E { A = 0; }"), p3("E e = 1;", "enum E { A = 0; B = 1; }"), None),
    (p3("E e = 1;", "enum E { A = 0; BEE = 1; }"),
     p3("E e = 1;", "enum E { A = 0; B = 1; }"), None),
    (p3("int32 e = 1;"), p3("int32 e = 1;", "enum Gone { A = 0; }"), None),
    # oneofs
    (p3("oneof pay { string card = 1; }"), p3("string card = 1;"), None),  # one field moved in
    (p3("oneof pay { string card = 1; string iban = 2; }"),
     p3("string card = 1; string iban = 2;"), "MULTIPLE_FIELDS_MOVED_TO_ONEOF"),
    (p3("oneof pay { string card = 1; string iban = 2; }"),
     p3("string card = 1; oneof pay { string iban = 2; }"), "FIELD_MOVED_TO_EXISTING_ONEOF"),
    (p3("oneof pay { string card = 1; string iban = 2; }"),
     p3("oneof pay { string card = 1; }"), None),                          # field added to it
    (p3("oneof pay { string card = 1; }"),
     p3("oneof pay { string card = 1; string iban = 2; }"), "ONEOF_FIELD_REMOVED"),
    (p3("oneof pay { int64 card = 1; }"), p3("oneof pay { string card = 1; }"),
     "FIELD_SCALAR_KIND_CHANGED"),
    (p3("oneof method { string card = 1; }"), p3("oneof pay { string card = 1; }"), None),
    (p3("oneof method { int64 card = 1; }"), p3("oneof pay { string card = 1; }"),
     "FIELD_SCALAR_KIND_CHANGED"),                          # renamed oneof: still compared
    (p3("string card = 1;"), p3("oneof pay { string card = 1; }"), None),  # out of a oneof
    # proto2's required fields
    (P2 + "message Order { required int32 id = 1; required string n = 2; }",
     P2 + "message Order { required int32 id = 1; }", "REQUIRED_FIELD_ADDED"),
    (P2 + "message Order { required int32 id = 1; }",
     P2 + "message Order { required int32 id = 1; required string n = 2; }",
     "REQUIRED_FIELD_REMOVED"),
    (P2 + "message Order { required int32 id = 1; optional string n = 2; }",
     P2 + "message Order { required int32 id = 1; }", None),
    (P2 + "message Order { required string n = 1; }",
     P2 + "message Order { optional string n = 1; }", "REQUIRED_FIELD_ADDED"),
]


@pytest.mark.parametrize("reader,writer,expected", CORPUS,
                         ids=[str(i) for i in range(len(CORPUS))])
def test_protobuf_corpus(reader, writer, expected):
    found = reasons(reader, writer)
    if expected is None:
        assert found == []
    else:
        assert found and any(r.startswith(expected + " ") for r in found), found


def test_references_and_well_known_types_are_compared():
    """A message from a referenced file, and google/protobuf/*.proto imported without a
    reference: the referenced message's changes count."""
    dep_v1 = 'syntax = "proto3";\npackage common;\nmessage Money { int64 cents = 1; }'
    dep_v2 = dep_v1.replace("int64", "string")
    main = ('syntax = "proto3";\nimport "common/money.proto";\n'
            'import "google/protobuf/timestamp.proto";\n'
            'message Pay { common.Money m = 1; google.protobuf.Timestamp at = 2; }')
    r1 = schema_types.parse("PROTOBUF", main, [("common/money.proto", dep_v1)])
    r2 = schema_types.parse("PROTOBUF", main, [("common/money.proto", dep_v2)])
    assert schema_types.incompatibilities("PROTOBUF", r1, r1) == []
    got = schema_types.incompatibilities("PROTOBUF", r2, r1)
    assert any(g.startswith("FIELD_SCALAR_KIND_CHANGED") for g in got), got
    assert any(g.startswith("FIELD_SCALAR_KIND_CHANGED at #/Money/1") for g in got), got


@pytest.mark.parametrize("text", [
    "", "message {", 'syntax = "proto3"; message M { int32 a = 1; int32 b = 1; }',
    'syntax = "proto3"; message M { Missing a = 1; }', 'syntax = "proto4";',
    'syntax = "proto3"; import "nowhere.proto"; message M {}',
    'syntax = "proto3"; enum E { A = 0; }',                  # no message
    'syntax = "proto3";\n' + "message M {\n" * 100 + "}\n" * 100,
    "QUJD",                                                   # base64, not a descriptor
])
def test_invalid_protobuf_is_42201(text):
    reg = SchemaRegistry(SchemaStore(open_store(f"memory://inv-{uuid.uuid4().hex}")))
    with pytest.raises(RegistryError) as e:
        reg.register("s", {"schema": text, "schemaType": "PROTOBUF"})
    assert (e.value.status, e.value.error_code) == (422, 42201), e.value


# -- hypothesis: evolutions against Google's decoder -------------------------------------
SCALARS = ["int32", "int64", "uint32", "uint64", "bool", "sint32", "sint64", "fixed32",
           "sfixed32", "fixed64", "sfixed64", "float", "double", "string", "bytes"]
#: a value every type of a group holds as the same number (or text), so that a read
#: in the same group loses nothing and any other reads differently or not at all
VALUES = {"int32": 1, "int64": 1, "uint32": 1, "uint64": 1, "bool": True, "sint32": 7,
          "sint64": 7, "fixed32": 7, "sfixed32": 7, "fixed64": 9, "sfixed64": 9,
          "float": 1.5, "double": 2.5, "string": "s", "bytes": b"s"}

# a message: field number -> (type, repeated)
messages = st.dictionaries(st.integers(1, 5),
                           st.tuples(st.sampled_from(SCALARS), st.booleans()),
                           min_size=1, max_size=4)
singular = st.dictionaries(st.integers(1, 5),
                           st.tuples(st.sampled_from(SCALARS), st.just(False)),
                           min_size=1, max_size=4)


def text_of(spec: dict) -> str:
    return p3("\n".join(f"{'repeated ' if rep else ''}{kind} f{n} = {n};"
                        for n, (kind, rep) in sorted(spec.items())))


def _same(a, b) -> bool:
    def norm(v):
        if isinstance(v, bool):
            return int(v)
        return v.decode() if isinstance(v, bytes) else v
    return type(norm(a)) is type(norm(b)) and norm(a) == norm(b) or \
        (isinstance(norm(a), (int, float)) and not isinstance(norm(a), str) and
         isinstance(norm(b), (int, float)) and norm(a) == norm(b))


def oracle(reader: dict, writer: dict) -> bool:
    """Encode a message with ``writer``'s descriptor, decode it with ``reader``'s: every
    field both have (by number) reads back the value written, nothing raises."""
    w_cls, r_cls = parsed(text_of(writer)).first, parsed(text_of(reader)).first
    message = w_cls()
    for n, (kind, rep) in writer.items():
        if rep:
            getattr(message, f"f{n}").append(VALUES[kind])
        else:
            setattr(message, f"f{n}", VALUES[kind])
    try:
        read = r_cls.FromString(message.SerializeToString())
    except Exception:  # DecodeError and kin: the reader cannot read what was written
        return False
    for n in writer.keys() & reader.keys():
        got = getattr(read, f"f{n}")
        if reader[n][1]:
            got = list(got)
            if len(got) != 1:
                return False
            got = got[0]
        if not _same(got, VALUES[writer[n][0]]):
            return False
    return True


def compatible(reader: dict, writer: dict) -> bool:
    return not reasons(text_of(reader), text_of(writer))


@settings(max_examples=200, deadline=None)
@given(messages, messages)
def test_compatible_pairs_decode_without_loss(old, new):
    """What the rules accept, Google's decoder reads without loss (the rules are sound)."""
    if compatible(new, old):
        assert oracle(new, old), (text_of(new), text_of(old))


@settings(max_examples=200, deadline=None)
@given(singular, singular)
def test_singular_fields_rules_match_the_decoder(old, new):
    """For singular scalar fields the rules are exact: refused iff some field the two
    share reads back differently or not at all."""
    assert compatible(new, old) is oracle(new, old), (text_of(new), text_of(old))


@st.composite
def evolutions(draw):
    """A message, then a few steps each adding, removing, renumbering or retyping one
    field (singular, so that the decoder is an exact oracle)."""
    spec = draw(singular)
    out = [spec]
    for _ in range(draw(st.integers(1, 3))):
        spec = dict(spec)
        op = draw(st.sampled_from(["add", "remove", "renumber", "retype"]))
        free = [n for n in range(1, 7) if n not in spec]
        if op == "add" and free:
            spec[draw(st.sampled_from(free))] = (draw(st.sampled_from(SCALARS)), False)
        elif op == "remove" and len(spec) > 1:
            del spec[draw(st.sampled_from(sorted(spec)))]
        elif op == "renumber" and free:
            spec[draw(st.sampled_from(free))] = spec.pop(draw(st.sampled_from(sorted(spec))))
        else:
            spec[draw(st.sampled_from(sorted(spec)))] = (draw(st.sampled_from(SCALARS)), False)
        out.append(spec)
    return out


@settings(max_examples=60, deadline=None)
@given(evolutions(), st.sampled_from(["NONE", "BACKWARD", "FORWARD", "FULL",
                                      "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE",
                                      "FULL_TRANSITIVE"]))
def test_protobuf_levels_follow_their_definition(evolution, level):
    reg = SchemaRegistry(SchemaStore(open_store(f"memory://pl-{uuid.uuid4().hex}")))
    reg.configs.set_config("s", {"compatibility": level})
    kept: list[dict] = []
    for spec in evolution:
        against = kept if level.endswith("TRANSITIVE") else kept[-1:]
        expected = level == "NONE" or all(
            (not level.startswith(("BACKWARD", "FULL")) or oracle(spec, old)) and
            (not level.startswith(("FORWARD", "FULL")) or oracle(old, spec))
            for old in against)
        already = any(spec == k for k in kept)
        check = reg.check("s", "latest", {"schema": text_of(spec), "schemaType": "PROTOBUF"},
                          verbose=True) if kept else None
        try:
            reg.register("s", {"schema": text_of(spec), "schemaType": "PROTOBUF"})
            ok = True
        except RegistryError as e:
            assert (e.status, e.error_code) == (409, 409)
            ok = False
        assert ok is (expected or already), (level, kept, spec)
        if check is not None and not level.endswith("TRANSITIVE"):
            # verbose says why, in Confluent's names
            assert check["is_compatible"] is (expected or already)
            if not check["is_compatible"]:
                assert any("_CHANGED" in m or "REMOVED" in m or "ADDED" in m
                           for m in check["messages"]), check
        if expected and not already:
            kept.append(spec)


# -- JSON Schema: the rules against jsonschema validating instances ----------------------
JSON_TYPES = ["string", "integer", "number", "boolean", ["string", "null"]]
INSTANCE_VALUES = ["s", 1, 1.5, True, None]
KEYS = ["a", "b", "c"]


@st.composite
def objects(draw):
    props = draw(st.dictionaries(st.sampled_from(KEYS), st.sampled_from(range(len(JSON_TYPES))),
                                 max_size=3))
    schema = {"type": "object",
              "properties": {k: {"type": JSON_TYPES[t]} for k, t in sorted(props.items())}}
    required = draw(st.lists(st.sampled_from(sorted(props) or ["a"]), unique=True, max_size=3))
    if props and required:
        schema["required"] = sorted(r for r in required if r in props)
    if draw(st.booleans()):
        schema["additionalProperties"] = False
    return schema


_ABSENT = object()
#: every object over the three keys (each absent or one of the values), with and
#: without a key no schema names (what an open content model lets through)
ALL_INSTANCES = [
    {k: v for k, v in zip([*KEYS, "z"], combo) if v is not _ABSENT}
    for combo in itertools.product(*[[_ABSENT, *INSTANCE_VALUES]] * len(KEYS),
                                   [_ABSENT, "s"])]


def json_oracle(reader: dict, writer: dict) -> bool:
    """Every instance (of 432) valid under ``writer`` is valid under
    ``reader``."""
    import jsonschema

    r, w = jsonschema.Draft7Validator(reader), jsonschema.Draft7Validator(writer)
    return all(r.is_valid(i) for i in ALL_INSTANCES if w.is_valid(i))


@settings(max_examples=300, deadline=None)
@given(objects(), objects())
def test_json_schema_rules_match_validation(old, new):
    """Over objects of typed properties, required lists and open or closed content
    models, the rules refuse a pair exactly when an instance the writer accepts fails
    the reader."""
    got = not schema_types.incompatibilities(
        "JSON", schema_types.parse("JSON", json.dumps(new), []),
        schema_types.parse("JSON", json.dumps(old), []))
    assert got is json_oracle(new, old), (new, old)


# -- hostile Protobuf schemas: refused with 42201 or checked in bounded time ------------
def _chain(n: int, last: str = "int32") -> str:
    return P3 + " ".join(f"message M{i} {{ M{i + 1} n = 1; }}" for i in range(n)) + \
        f" message M{n} {{ {last} x = 1; }}"


def test_hostile_protobuf_schemas_bounded():
    import time

    reg = SchemaRegistry(SchemaStore(open_store(f"memory://host-{uuid.uuid4().hex}")))
    reg.configs.set_config(None, {"compatibility": "FULL_TRANSITIVE"})
    started = time.monotonic()
    # thousands of messages each holding the next: Python's class builder would recurse
    # past its stack; refused, not a 500
    with pytest.raises(RegistryError) as e:
        reg.register("chain", {"schema": _chain(3000), "schemaType": "PROTOBUF"})
    assert (e.value.status, e.value.error_code) == (422, 42201)
    # 400 of them is valid, and compared without recursion: the change at the end found
    reg.register("chain", {"schema": _chain(400), "schemaType": "PROTOBUF"})
    with pytest.raises(RegistryError) as e:
        reg.register("chain", {"schema": _chain(400, "string"), "schemaType": "PROTOBUF"})
    assert e.value.status == 409 and "FIELD_SCALAR_KIND_CHANGED at #/M400/1" in str(e.value)
    # a message of 4,000 fields, every one retyped: each difference found once per
    # direction (FULL)
    wide = p3(" ".join(f"int32 f{i} = {i};" for i in range(1, 4001)))
    reg.register("wide", {"schema": wide, "schemaType": "PROTOBUF"})
    found = reg.check("wide", "latest", {"schema": wide.replace("int32", "string"),
                                         "schemaType": "PROTOBUF"}, verbose=True)
    assert found["is_compatible"] is False and len(found["messages"]) == 8000
    # past upb's bound on one message's layout: refused
    with pytest.raises(RegistryError) as e:
        reg.register("huge", {"schema": p3(" ".join(f"string f{i} = {i};"
                                                     for i in range(1, 18001))),
                              "schemaType": "PROTOBUF"})
    assert (e.value.status, e.value.error_code) == (422, 42201)
    assert time.monotonic() - started < 30  # ~1.5 s here; bounded, not quadratic


proto_tokens = st.lists(st.sampled_from([
    'syntax = "proto3";', 'syntax = "proto2";', "package a.b;", "message", "M", "N",
    "{", "}", "int32", "string", "repeated", "required", "optional", "oneof", "o",
    "enum", "E", "map<string, M>", "x", "=", "1", "2", "0", "-1", "536870912", ";",
    'import "google/protobuf/any.proto";', 'import "x.proto";', "reserved 1;",
    "google.protobuf.Any", "extensions 100 to 200;", "option", "(", ")", "\x00", "é"]),
    max_size=40)


@settings(max_examples=150, deadline=None)
@given(proto_tokens, proto_tokens)
def test_arbitrary_protobuf_text_never_fails_the_registry(first, second):
    reg = SchemaRegistry(SchemaStore(open_store(f"memory://pfuzz-{uuid.uuid4().hex}")))
    reg.configs.set_config(None, {"compatibility": "FULL_TRANSITIVE"})
    for tokens in (first, second):
        try:
            reg.register("s", {"schema": " ".join(tokens), "schemaType": "PROTOBUF"})
        except RegistryError as e:
            assert 400 <= e.status < 500 and e.error_code in (409, 42201), e
