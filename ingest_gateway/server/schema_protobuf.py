"""Protobuf schemas for REST Proxy's embedded format: ``.proto`` text compiled, JSON data
to messages and back, Confluent's message indexes.

A schema's text (and the texts its references name, written under their reference
names) is compiled by ``protoc`` as ``grpcio-tools`` ships it in its wheel, in process
(no network, no binary to install), to a ``FileDescriptorSet``; Google's ``protobuf``
runtime then builds message classes from it (``message_factory``) and converts JSON
with ``json_format`` (Protobuf's canonical JSON mapping, as Confluent's REST Proxy uses
through ``JsonFormat``: lowerCamelCase names answered, either spelling read, 64-bit
integers as strings). A schema registered as a base64 ``FileDescriptorProto`` (as
confluent-kafka's Python ``ProtobufSerializer`` registers it) is read as such.

**The wire format** after the magic byte and the id: the message indexes (which message
of the file, then which nested one), a zigzag varint count then each index as a zigzag
varint, ``[0]`` (the first message) written as the single byte ``0``; then the message.
REST Proxy writes the file's first message, as Confluent's does.

Bounds: text nested deeper than :data:`MAX_DEPTH` braces is refused before ``protoc``
(its parser recurses); compiling is serialized (one ``protoc`` at a time).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
import tempfile
import threading
from typing import Any

#: deepest ``{`` nesting of a .proto text accepted (far past real schemas)
MAX_DEPTH = 64
#: the file name the schema itself is compiled under
_MAIN = "sparklog_schema.proto"
_LOCK = threading.Lock()


class InvalidProto(ValueError):
    """A schema that does not compile (the message says why)."""


@dataclasses.dataclass(frozen=True)
class ProtoSchema:
    """A compiled schema: its file's descriptor and the class of its first message."""

    file: Any
    first: Any  # the message class REST Proxy encodes with

    def message_class(self, indexes: list[int]) -> Any:
        """The class of the message ``indexes`` name; raises InvalidProto."""
        from google.protobuf import message_factory

        try:
            descriptor = list(self.file.message_types_by_name.values())[indexes[0]]
            for i in indexes[1:]:
                descriptor = descriptor.nested_types[i]
        except (IndexError, KeyError):
            raise InvalidProto(f"no message at indexes {indexes[:8]}") from None
        return message_factory.GetMessageClass(descriptor)


def _depth_ok(text: str) -> None:
    depth = deepest = 0
    for ch in text:
        if ch == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == "}":
            depth -= 1
    if deepest > MAX_DEPTH:
        raise InvalidProto(f"nested deeper than {MAX_DEPTH} levels")


def _as_descriptor(text: str) -> Any:
    """The FileDescriptorProto of a base64-encoded schema, or None for .proto text."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped) or "{" in stripped:
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
        return descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, DecodeError):
        return None


def compile_schema(text: str, referenced: list[tuple[str, str]]) -> ProtoSchema:
    """The schema of ``text``; ``referenced``: (import name, text) of every schema its
    references reach. Raises InvalidProto."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    given = _as_descriptor(text)
    try:
        if given is not None:
            files = [*(_compiled_set(t, n, referenced) for n, t in referenced
                       if _as_descriptor(t) is None)]
            for fds in files:
                for f in fds.file:
                    _add(pool, f)
            for _name, t in referenced:
                d = _as_descriptor(t)
                if d is not None:
                    _add(pool, d)
            _add_well_known(pool, given)
            _add(pool, given)
            file = pool.FindFileByName(given.name)
        else:
            fds = _compiled_set(text, _MAIN, referenced)
            for f in fds.file:
                _add(pool, f)
            file = pool.FindFileByName(_MAIN)
    except InvalidProto:
        raise
    except Exception as e:  # noqa: BLE001 - descriptor_pool raises TypeError and kin
        raise InvalidProto(f"the descriptors do not build: {str(e)[:200]}") from None
    if not file.message_types_by_name:
        raise InvalidProto("the schema defines no message")
    try:
        first = message_factory.GetMessageClass(list(file.message_types_by_name.values())[0])
    except RecursionError:
        # building a class builds its fields' message classes first, recursively: a
        # chain of thousands of messages each holding the next passes Python's stack
        raise InvalidProto("messages hold one another too deeply to build") from None
    return ProtoSchema(file, first)


def _add_well_known(pool: Any, file_proto: Any) -> None:
    """Add the ``google/protobuf/*.proto`` files ``file_proto`` imports and no reference
    gave: confluent-kafka's serializer skips them as references (``skip.known.types``),
    as Confluent's registry knows them itself."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    for dep in file_proto.dependency:
        if not dep.startswith("google/protobuf/"):
            continue
        try:
            pool.FindFileByName(dep)
            continue
        except KeyError:
            pass
        try:
            known = descriptor_pool.Default().FindFileByName(dep)
        except KeyError:
            _import_well_known(dep)
            try:
                known = descriptor_pool.Default().FindFileByName(dep)
            except KeyError:
                continue  # not a well-known file: building the pool says which is missing
        proto = descriptor_pb2.FileDescriptorProto()
        known.CopyToProto(proto)
        _add_well_known(pool, proto)
        _add(pool, proto)


def _import_well_known(name: str) -> None:
    """Import the ``_pb2`` module of a well-known file so the default pool holds it."""
    import importlib

    stem = name[len("google/protobuf/"):-len(".proto")]
    if name.endswith(".proto") and stem.replace("_", "").replace("/", "").isalnum():
        try:
            importlib.import_module("google.protobuf." + stem.replace("/", ".") + "_pb2")
        except ImportError:
            pass


def _add(pool: Any, file_proto: Any) -> None:
    try:
        pool.FindFileByName(file_proto.name)
    except KeyError:
        pool.Add(file_proto)


def _compiled_set(text: str, name: str, referenced: list[tuple[str, str]]) -> Any:
    """``text`` compiled under ``name`` with the referenced files beside it; raises
    InvalidProto."""
    import grpc_tools
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    _depth_ok(text)
    for _n, t in referenced:
        _depth_ok(t)
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="sparklog-proto-") as d:
        for ref_name, ref_text in [*referenced, (name, text)]:
            path = os.path.normpath(os.path.join(d, ref_name))
            if not path.startswith(d + os.sep) or not ref_name.endswith(".proto"):
                raise InvalidProto(f"a reference's name must be a relative .proto path, "
                                   f"not {ref_name[:80]!r}")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(ref_text)
        out = os.path.join(d, "out.pb")
        with _LOCK:
            rc = protoc.main(["protoc", f"-I{d}", f"-I{well_known}", f"--descriptor_set_out={out}",
                              "--include_imports", name])
        if rc != 0 or not os.path.exists(out):
            raise InvalidProto(f"protoc could not compile {name} (is it valid proto2/proto3, "
                               "with every import given as a reference?)")
        with open(out, "rb") as f:
            return descriptor_pb2.FileDescriptorSet.FromString(f.read())


def encode(schema: ProtoSchema, datum: Any) -> bytes:
    """Message indexes ``[0]`` and the first message of ``datum`` (JSON data); raises
    ValueError (json_format's ParseError) when it does not fit."""
    from google.protobuf import json_format

    message = json_format.ParseDict(datum, schema.first(), max_recursion_depth=64)
    return b"\x00" + message.SerializeToString()


def _varint(data: memoryview, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data) or shift > 63:
            raise InvalidProto("truncated message indexes")
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), i  # zigzag
        shift += 7


def decode(schema: ProtoSchema, payload: memoryview) -> Any:
    """The message after its indexes as JSON data; raises InvalidProto or a
    ``DecodeError``."""
    from google.protobuf import json_format

    count, i = _varint(payload, 0)
    if count < 0 or count > 64:
        raise InvalidProto(f"{count} message indexes")
    indexes = [0]
    if count:
        indexes = []
        for _ in range(count):
            index, i = _varint(payload, i)
            indexes.append(index)
    message = schema.message_class(indexes).FromString(bytes(payload[i:]))
    return json_format.MessageToDict(message)
