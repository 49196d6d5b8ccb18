"""Protobuf values for the ``sparklog`` source's ``valueFormat`` / ``keyFormat`` =
``protobuf``: a registry schema compiled to descriptors, its message's Spark (Arrow)
type, and Confluent's wire format decoded into that type.

**Compiling.** ``pipeline`` may not import ``ingest_gateway`` (the gateway compiles the
same schemas for REST Proxy, :mod:`ingest_gateway.server.schema_protobuf`), and
``log_layout`` stays free of Protobuf, so this module calls ``protoc`` as the
``grpcio-tools`` wheel ships it, in process, the same way: a schema's ``.proto`` text and
the texts its references reach, written under their reference names, compiled to a
``FileDescriptorSet`` (``--include_imports``); a schema registered as a base64
``FileDescriptorProto`` (confluent-kafka's Python ``ProtobufSerializer`` registers that)
is taken as it is, and the well-known ``google/protobuf/*.proto`` files it imports
without a reference (``skip.known.types``) come from the protobuf runtime.

**Types**, as Spark's ``from_protobuf`` maps them: a message -> struct (its fields in
declaration order), ``repeated`` -> array, ``map<K, V>`` -> map, an enum -> string (its
value's name; an unknown number as its digits), ``int32``/``sint32``/``sfixed32`` -> int,
``int64``/``sint64``/``sfixed64`` and ``uint32`` -> long, ``uint64`` -> decimal(20, 0),
``float``/``double``/``bool``/``string``/``bytes`` as themselves;
``google.protobuf.Timestamp`` -> timestamp (UTC). A recursive message has no Spark type
and is refused naming the field (:class:`~pipeline.errors.UnusableSchema`).

**Values.** Protobuf needs no writer/reader resolution: a record is parsed with the
*reader* schema's message (a field the reader does not know is skipped, one the writer
did not send takes its default), so records written with several compatible versions
read as one type. A scalar with presence (``optional``, a ``oneof`` member, proto2) that
was not sent, and a message field that was not sent, read as null.

**The wire format** after the magic byte and id: the message indexes (which message of
the file, then which nested one): a zigzag varint count, then each index as a zigzag
varint, ``[0]`` (the first message) written as the single byte ``0``. The column's
message is the reader file's first message; a record naming another message fails.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import os
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from pipeline.errors import UnusableSchema

MAX_DEPTH = 64          # message nesting / `{` depth refused past this (hostile, not real)
MAX_INDEXES = 64        # message indexes per record: more is hostile
_MAIN = "sparklog_schema.proto"
_PROTOC = threading.Lock()  # protoc's main is not known to be reentrant
_TS = pa.timestamp("us", tz="UTC")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_TIMESTAMP = "google.protobuf.Timestamp"


class BadRecord(ValueError):
    """A record's bytes that do not decode (the message says why)."""


# -- compiling -------------------------------------------------------------------------
def _as_descriptor(text: str) -> Any:
    """The FileDescriptorProto of a base64 schema, or None for .proto text."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped) or "{" in stripped:
        return None
    try:
        return descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(stripped, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return None


def _protoc(texts: list[tuple[str, str]], compile_names: list[str], subject: str) -> Any:
    """The FileDescriptorSet of ``compile_names`` with every (name, text) beside them.
    Raises UnusableSchema."""
    import grpc_tools
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    for _name, text in texts:  # protoc's parser recurses: bound the nesting first
        depth = deepest = 0
        for ch in text:
            depth += (ch == "{") - (ch == "}")
            deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            raise UnusableSchema(subject, f"nested deeper than {MAX_DEPTH} levels")
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="sparklog-proto-") as d:
        for name, text in texts:
            path = os.path.normpath(os.path.join(d, name))
            if not path.startswith(d + os.sep) or not name.endswith(".proto"):
                raise UnusableSchema(subject, f"reference name {name[:80]!r} is not a "
                                     "relative .proto path")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        out = os.path.join(d, "out.pb")
        with _PROTOC:
            rc = protoc.main(["protoc", f"-I{d}", f"-I{well_known}",
                              f"--descriptor_set_out={out}", "--include_imports",
                              *compile_names])
        if rc != 0 or not os.path.exists(out):
            raise UnusableSchema(subject, "protoc could not compile the schema or its "
                                 "references")
        with open(out, "rb") as f:
            return descriptor_pb2.FileDescriptorSet.FromString(f.read())


def _add(pool: Any, proto: Any) -> None:
    try:
        pool.FindFileByName(proto.name)
    except KeyError:
        pool.Add(proto)


def _add_well_known(pool: Any, proto: Any) -> None:
    """The ``google/protobuf/*.proto`` files ``proto`` imports, from the runtime's pool."""
    import importlib

    from google.protobuf import descriptor_pb2, descriptor_pool

    for dep in proto.dependency:
        stem = dep[len("google/protobuf/"):-len(".proto")]
        if not dep.startswith("google/protobuf/") or not stem.replace("_", "").isalnum():
            continue
        try:
            importlib.import_module(f"google.protobuf.{stem}_pb2")
            known = descriptor_pool.Default().FindFileByName(dep)
        except (ImportError, KeyError):
            continue  # not well-known: building the pool names what is missing
        copy = descriptor_pb2.FileDescriptorProto()
        known.CopyToProto(copy)
        _add_well_known(pool, copy)
        _add(pool, copy)


def compile_file(text: str, referenced: list[tuple[str, str]], subject: str) -> Any:
    """The FileDescriptor of a schema's ``text``; ``referenced``: (import name, text) of
    every schema its references reach. Raises UnusableSchema."""
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    given = _as_descriptor(text)
    texts = [(n, t) for n, t in referenced if _as_descriptor(t) is None]
    try:
        if given is None:
            for f in _protoc([*texts, (_MAIN, text)], [_MAIN], subject).file:
                _add(pool, f)
            file = pool.FindFileByName(_MAIN)
        else:
            if texts:
                for f in _protoc(texts, [n for n, _ in texts], subject).file:
                    _add(pool, f)
            for _n, t in referenced:
                if (d := _as_descriptor(t)) is not None:
                    _add_well_known(pool, d)
                    _add(pool, d)
            _add_well_known(pool, given)
            _add(pool, given)
            file = pool.FindFileByName(given.name)
    except UnusableSchema:
        raise
    except Exception as e:  # noqa: BLE001 - descriptor_pool raises TypeError and kin
        raise UnusableSchema(subject, f"its descriptors do not build ({str(e)[:200]})") \
            from None
    if not file.message_types_by_name:
        raise UnusableSchema(subject, "the schema defines no message")
    return file


def first_message(file: Any) -> Any:
    """The descriptor of the file's first message (the column's)."""
    return list(file.message_types_by_name.values())[0]


# -- types -----------------------------------------------------------------------------
def _scalars() -> dict[int, pa.DataType]:
    from google.protobuf.descriptor import FieldDescriptor as F

    return {F.TYPE_DOUBLE: pa.float64(), F.TYPE_FLOAT: pa.float32(),
            F.TYPE_INT32: pa.int32(), F.TYPE_SINT32: pa.int32(), F.TYPE_SFIXED32: pa.int32(),
            F.TYPE_INT64: pa.int64(), F.TYPE_SINT64: pa.int64(), F.TYPE_SFIXED64: pa.int64(),
            F.TYPE_UINT32: pa.int64(), F.TYPE_FIXED32: pa.int64(),
            F.TYPE_UINT64: pa.decimal128(20, 0), F.TYPE_FIXED64: pa.decimal128(20, 0),
            F.TYPE_BOOL: pa.bool_(), F.TYPE_STRING: pa.string(), F.TYPE_BYTES: pa.binary(),
            F.TYPE_ENUM: pa.string()}


def message_arrow_type(message: Any, *, subject: str) -> pa.DataType:
    """The Arrow type of a message descriptor. Raises UnusableSchema naming the field of a
    recursive message, or one nested past :data:`MAX_DEPTH`."""
    return _message_type(message, subject, "", (), _scalars())


def _is_map(field: Any) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _message_type(message: Any, subject: str, path: str, seen: tuple[str, ...],
                  scalars: dict) -> pa.DataType:
    if message.full_name == _TIMESTAMP:
        return _TS
    where = path or "the top level"
    if message.full_name in seen:
        raise UnusableSchema(subject, f"{where}: message {message.full_name} contains itself "
                             "(a recursive message has no Spark type)")
    if len(seen) > MAX_DEPTH:
        raise UnusableSchema(subject, f"{where}: nested deeper than {MAX_DEPTH} levels")
    inner = seen + (message.full_name,)

    def single(field: Any, at: str) -> pa.DataType:
        if field.message_type is not None:
            return _message_type(field.message_type, subject, at, inner, scalars)
        return scalars[field.type]

    fields = []
    for field in message.fields:
        at = f"{path}.{field.name}".lstrip(".")
        if _is_map(field):
            key, value = field.message_type.fields_by_name["key"], \
                field.message_type.fields_by_name["value"]
            kind: pa.DataType = pa.map_(single(key, at), single(value, f"{at}{{}}"))
        elif _repeated(field):
            kind = pa.list_(pa.field("element", single(field, f"{at}[]")))
        else:
            kind = single(field, at)
        fields.append(pa.field(field.name, kind))
    return pa.struct(fields)


def _repeated(field: Any) -> bool:
    repeated = getattr(field, "is_repeated", None)  # newer protobuf: ``label`` is gone in 7
    return repeated if repeated is not None else field.label == 3  # LABEL_REPEATED


# -- values ----------------------------------------------------------------------------
def _zigzag(data: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(data) or shift > 63:
            raise BadRecord("truncated message indexes")
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), i
        shift += 7


def split_indexes(body: bytes) -> tuple[list[int], bytes]:
    """(message indexes, message bytes) of what follows Confluent's 5-byte header.
    Raises BadRecord."""
    count, i = _zigzag(body, 0)
    if count == 0:
        return [0], body[i:]
    if not 0 < count <= MAX_INDEXES:
        raise BadRecord(f"{count} message indexes (at most {MAX_INDEXES})")
    indexes = []
    for _ in range(count):
        index, i = _zigzag(body, i)
        indexes.append(index)
    return indexes, body[i:]


class MessageReader:
    """Decodes a column's records with the reader file's first message."""

    def __init__(self, file: Any):
        from google.protobuf import message_factory

        self.file = file
        self.message = first_message(file)
        self.cls = message_factory.GetMessageClass(self.message)
        self._convert = _converter(self.message)

    def read(self, body: bytes) -> dict:
        """The record after the header as a dict fitting :func:`message_arrow_type`.
        Raises BadRecord."""
        from google.protobuf.message import DecodeError

        indexes, payload = split_indexes(body)
        if indexes != [0]:
            raise BadRecord(f"message indexes {indexes[:8]} name a message other than "
                            f"{self.message.full_name}, the column's (the file's first)")
        try:
            return self._convert(self.cls.FromString(payload))
        except (DecodeError, RecursionError, ValueError) as e:
            raise BadRecord(f"not a {self.message.full_name} message ({str(e)[:120]})") \
                from None


def _timestamp(m: Any) -> dt.datetime:
    return _EPOCH + dt.timedelta(seconds=m.seconds, microseconds=m.nanos // 1000)


def _converter(message: Any) -> Callable[[Any], Any]:
    """A function from a message of ``message``'s class to plain Python values."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if message.full_name == _TIMESTAMP:
        return _timestamp

    def scalar(field: Any) -> Callable[[Any], Any]:
        if field.message_type is not None:
            return _converter(field.message_type)
        if field.type == F.TYPE_ENUM:
            names = {v.number: v.name for v in field.enum_type.values}
            return lambda v: names.get(v, str(v))
        if field.type in (F.TYPE_UINT64, F.TYPE_FIXED64):
            return decimal.Decimal
        return lambda v: v

    parts = []
    for field in message.fields:
        if _is_map(field):
            k = scalar(field.message_type.fields_by_name["key"])
            v = scalar(field.message_type.fields_by_name["value"])
            parts.append((field.name, False,
                          lambda m, n=field.name, k=k, v=v: [(k(a), v(b)) for a, b in
                                                             getattr(m, n).items()]))
        elif _repeated(field):
            one = scalar(field)
            parts.append((field.name, False,
                          lambda m, n=field.name, one=one: [one(x) for x in getattr(m, n)]))
        else:
            one = scalar(field)
            parts.append((field.name, field.has_presence,
                          lambda m, n=field.name, one=one: one(getattr(m, n))))

    def convert(m: Any) -> dict:
        return {name: (None if present and not m.HasField(name) else get(m))
                for name, present, get in parts}

    return convert
