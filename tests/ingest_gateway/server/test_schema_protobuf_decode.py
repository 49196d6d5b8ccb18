"""The gateway's Protobuf decoding (REST Proxy consumers): a record's message indexes
name the message it was written as, and indexes naming none are refused."""

from __future__ import annotations

import pytest

from ingest_gateway.server.schema_protobuf import compile_schema, decode
from log_layout.schema_proto import InvalidProto

TEXT = """syntax = "proto3";
package two;
message First { string a = 1; }
message Second { int64 b = 1; message Inner { bool c = 1; } }
"""


@pytest.fixture(scope="module")
def schema():
    return compile_schema(TEXT, [])


def _payload(schema, indexes: bytes, name: str, **fields) -> memoryview:
    cls = {"First": schema.message_class([0]), "Second": schema.message_class([1]),
           "Inner": schema.message_class([1, 0])}[name]
    return memoryview(indexes + cls(**fields).SerializeToString())


def test_each_message_decodes_by_its_indexes(schema):
    assert decode(schema, _payload(schema, b"\x00", "First", a="x")) == {"a": "x"}
    # zigzag varints: count 1, index 1 -> 02 02; count 2, indexes 1, 0 -> 04 02 00
    assert decode(schema, _payload(schema, b"\x02\x02", "Second", b=7)) == {"b": "7"}
    assert decode(schema, _payload(schema, b"\x04\x02\x00", "Inner", c=True)) == {"c": True}


@pytest.mark.parametrize("indexes", [b"\x02\x01", b"\x02\x04", b"\x04\x02\x02", b"\x04\x00\x00"],
                         ids=["minus-one", "past-the-end", "nested-past-the-end",
                              "nested-of-a-leaf"])
def test_indexes_naming_no_message_are_refused(schema, indexes):
    with pytest.raises(InvalidProto, match="name no message"):
        decode(schema, memoryview(indexes + b"\x08\x01"))
