"""log_layout.schema_proto: a stored Protobuf schema compiled by protoc in process; its
errors are the refusal's reason, not lines on the process's standard error."""

from __future__ import annotations

import pytest

from log_layout.schema_proto import InvalidProto, compile_file, message_indexes

pytest.importorskip("grpc_tools")


def test_a_schema_compiles_to_its_file():
    file = compile_file('syntax = "proto3"; message Click { string url = 1; int64 ms = 2; }', [])
    assert list(file.message_types_by_name) == ["Click"]


def test_protocs_error_is_the_reason_and_stays_off_stderr(capfd):
    hostile = 'syntax = "proto3"; message M { ' + " ".join(
        f"int32 f{n} = {n};" for n in range(19000, 19400)) + " }"
    with pytest.raises(InvalidProto) as e:
        compile_file(hostile, [])
    assert "sparklog_schema.proto:" in str(e.value) and "19000" in str(e.value), str(e.value)
    out, err = capfd.readouterr()
    assert "19000" not in err and "reserved" not in err.lower(), err[:500]


def test_a_broken_schema_names_where():
    with pytest.raises(InvalidProto, match=r"sparklog_schema\.proto:1:\d+"):
        compile_file('syntax = "proto3"; message M { string = 1; }', [])


@pytest.mark.parametrize("data,want", [(b"\x00rest", ([0], 1)), (b"\x04\x02\x00m", ([1, 0], 3))])
def test_message_indexes(data, want):
    assert message_indexes(data) == want


@pytest.mark.parametrize("data", [b"", b"\x80", b"\x82\x01" + b"\x00" * 70, b"\x01"])
def test_hostile_indexes_are_refused(data):
    with pytest.raises(InvalidProto):
        message_indexes(data)
