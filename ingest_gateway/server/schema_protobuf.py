"""Protobuf schemas for REST Proxy's embedded format: JSON data to messages and back, in
Confluent's wire format.

A schema is compiled to descriptors by :mod:`log_layout.schema_proto` (protoc from the
``grpcio-tools`` wheel, in process; base64 descriptors as confluent-kafka registers
them); Google's ``protobuf`` runtime builds message classes from it
(``message_factory``) and converts JSON with ``json_format`` (Protobuf's canonical JSON
mapping, as Confluent's REST Proxy uses through ``JsonFormat``: lowerCamelCase names
answered, either spelling read, 64-bit integers as strings). After the magic byte and
the id come the message indexes (:func:`log_layout.schema_proto.message_indexes`), then
the message. REST Proxy writes the file's first message, as Confluent's does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from log_layout.schema_proto import InvalidProto, compile_file, message_at, message_indexes

__all__ = ["InvalidProto", "ProtoSchema", "compile_schema", "decode", "encode"]


@dataclasses.dataclass(frozen=True)
class ProtoSchema:
    """A compiled schema: its file's descriptor and the class of its first message."""

    file: Any
    first: Any  # the message class REST Proxy encodes with

    def message_class(self, indexes: list[int]) -> Any:
        """The class of the message ``indexes`` name; raises InvalidProto."""
        from google.protobuf import message_factory

        return message_factory.GetMessageClass(message_at(self.file, indexes))


def compile_schema(text: str, referenced: list[tuple[str, str]]) -> ProtoSchema:
    """The schema of ``text``; ``referenced``: (import name, text) of every schema its
    references reach. Raises InvalidProto."""
    from google.protobuf import message_factory

    file = compile_file(text, referenced)
    try:
        first = message_factory.GetMessageClass(list(file.message_types_by_name.values())[0])
    except RecursionError:
        # building a class builds its fields' message classes first, recursively: a
        # chain of thousands of messages each holding the next passes Python's stack
        raise InvalidProto("messages hold one another too deeply to build") from None
    return ProtoSchema(file, first)


def encode(schema: ProtoSchema, datum: Any) -> bytes:
    """Message indexes ``[0]`` and the first message of ``datum`` (JSON data); raises
    ValueError (json_format's ParseError) when it does not fit."""
    from google.protobuf import json_format

    message = json_format.ParseDict(datum, schema.first(), max_recursion_depth=64)
    return b"\x00" + message.SerializeToString()


def decode(schema: ProtoSchema, payload: memoryview) -> Any:
    """The message after its indexes as JSON data; raises InvalidProto or a
    ``DecodeError``."""
    from google.protobuf import json_format

    indexes, start = message_indexes(payload)
    message = schema.message_class(indexes).FromString(bytes(payload[start:]))
    return json_format.MessageToDict(message)
