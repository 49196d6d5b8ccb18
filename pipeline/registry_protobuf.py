"""Protobuf values for the ``sparklog`` source's ``valueFormat`` / ``keyFormat`` =
``protobuf``: a registry schema compiled to descriptors, its message's Spark (Arrow)
type, and Confluent's wire format decoded into that type.

**Compiling** is :mod:`log_layout.schema_proto`'s, as the gateway's: ``protoc`` from
the ``grpcio-tools`` wheel, in process, over a schema's ``.proto`` text and the texts its
references reach, or a base64 ``FileDescriptorProto`` as confluent-kafka's Python
``ProtobufSerializer`` registers it.

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
varint, ``[0]`` (the first message) written as the single byte ``0``.

**Which message.** The column's message is the reader file's first one, or the one the
``valueProtobufMessage`` / ``keyProtobufMessage`` option names by its full name (a
nested one too), as Spark's ``from_protobuf(data, messageName, ...)`` chooses.
A record's indexes are resolved against its *writer* schema (the record's id), as
Confluent's deserializer does, to the message it was written as: a record of the
column's message (by full name) is parsed with the reader's; a record of any other
message is a :class:`BadRecord` naming both.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from log_layout import schema_proto
from pipeline.errors import UnusableSchema

MAX_DEPTH = schema_proto.MAX_DEPTH  # message nesting refused past this (hostile, not real)
_TS = pa.timestamp("us", tz="UTC")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_TIMESTAMP = "google.protobuf.Timestamp"


class BadRecord(ValueError):
    """A record's bytes that do not decode (the message says why)."""


# -- compiling -------------------------------------------------------------------------
def compile_file(text: str, referenced: list[tuple[str, str]], subject: str) -> Any:
    """The FileDescriptor of a schema's ``text``; ``referenced``: (import name, text) of
    every schema its references reach. Raises UnusableSchema."""
    try:
        return schema_proto.compile_file(text, referenced)
    except schema_proto.InvalidProto as e:
        raise UnusableSchema(subject, str(e)) from None


def first_message(file: Any) -> Any:
    """The descriptor of the file's first message (the column's by default)."""
    return list(file.message_types_by_name.values())[0]


def _messages(file: Any) -> list[Any]:
    """The file's message descriptors, each followed by its nested ones (map entries
    left out: no one writes them alone), in declaration order."""
    out: list[Any] = []

    def walk(messages: Any, depth: int) -> None:
        for m in messages:
            if not m.GetOptions().map_entry and depth <= MAX_DEPTH:
                out.append(m)
                walk(m.nested_types, depth + 1)

    walk(file.message_types_by_name.values(), 0)
    return out


def message_names(file: Any) -> list[str]:
    """The full names of the file's messages (see :func:`_messages` for the order)."""
    return [m.full_name for m in _messages(file)]


def message_named(file: Any, name: str | None) -> Any:
    """The descriptor of the file's message whose full name is ``name`` (None: the
    first message), or None when the file has no such message (an import's messages
    are not the file's)."""
    if name is None:
        return first_message(file)
    return next((m for m in _messages(file) if m.full_name == name), None)


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
class MessageReader:
    """Decodes a column's records with the reader file's message ``name`` (a full name;
    None: the file's first)."""

    _MEMO = 1024  # (writer id, indexes) -> full name pairs kept (real topics have a few)

    def __init__(self, file: Any, name: str | None = None):
        from google.protobuf import message_factory

        self.file = file
        self.message = message_named(file, name)
        if self.message is None:
            raise ValueError(f"{name!r} is not a message of the reader schema")
        self.cls = message_factory.GetMessageClass(self.message)
        self._convert = _converter(self.message)
        self._written_as: dict[tuple[int, tuple[int, ...]], str] = {}

    def _writer_message(self, writer: Any, writer_id: int, indexes: list[int]) -> str:
        """The full name of the message ``indexes`` name in the writer's file."""
        key = (writer_id, tuple(indexes))
        found = self._written_as.get(key)
        if found is None:
            try:
                found = schema_proto.message_at(writer, indexes).full_name
            except schema_proto.InvalidProto as e:
                raise BadRecord(f"schema id {writer_id} (the record's writer schema): {e}") \
                    from None
            if len(self._written_as) < self._MEMO:
                self._written_as[key] = found
        return found

    def read(self, body: bytes, writer: Any, writer_id: int) -> dict:
        """The record after the header as a dict fitting :func:`message_arrow_type`;
        ``writer``: the FileDescriptor of the record's id ``writer_id``. Raises BadRecord
        (indexes that do not read or name no message of the writer's file, a message
        other than the column's, bytes that do not parse)."""
        from google.protobuf.message import DecodeError

        try:
            indexes, start = schema_proto.message_indexes(body)
        except schema_proto.InvalidProto as e:
            raise BadRecord(str(e)) from None
        written_as = self._writer_message(writer, writer_id, indexes)
        if written_as != self.message.full_name:
            raise BadRecord(f"it is a {written_as} message (indexes {indexes[:8]} of schema "
                            f"id {writer_id}), not the {self.message.full_name} the column "
                            "reads (choose it with valueProtobufMessage / keyProtobufMessage)")
        try:
            return self._convert(self.cls.FromString(body[start:]))
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
