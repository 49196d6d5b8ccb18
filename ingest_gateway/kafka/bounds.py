"""Every length a Kafka request declares, checked against the bytes received, before kio reads it.

kio's native reader allocates an array's declared item count before reading its items,
and Rust aborts the process when an allocation fails: a request header followed by a
compact array length of 3.5 billion (five bytes) killed the gateway with no exception
to catch. So a request body is walked here first, field by field from the same kio
schema class its reader will use, and refused with ``ProtocolError`` (the listener
closes the connection, as Kafka's broker does) unless every declared length fits in
what remains of the frame. What kio then reads has been seen whole: no array, string,
bytes or record set it allocates can be larger than the frame, itself bounded by
``socket.request.max.bytes``.

The rules are Kafka's own readers' (``ByteBufferAccessor``, ``MessageUtil``), per the
field's ``kafka_type`` and whether the version is flexible:

- fixed-size fields: their size must remain;
- strings: int16 length (flexible: unsigned varint length + 1), bytes and records:
  int32 length (flexible: the same varint); the null length (-1; flexible: 0) only
  where the schema says nullable, any other negative length refused;
- arrays: int32 count (flexible: varint count + 1), -1 (0) null; ``count x`` the
  smallest encoding of an item must fit in what remains (Kafka checks ``count >
  remaining``; the smallest item size is stricter and costs nothing), then every
  item is walked;
- nullable structs (KIP-893): an int8 marker, -1 null or 1 present;
- flexible versions end each struct with tagged fields: a varint count, then per
  field a varint tag and a varint size that must fit; a tag the schema knows is
  walked inside its size, an unknown one skipped.

Varints longer than five bytes or above 2**32 - 1 are refused, so this walk and kio
always agree on a value. A walk costs ~1 us per field in Python; the hot requests
(Produce, Fetch) have tens of fields, their records travel as one ``bytes`` field.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Callable

from kio.serial._introspect import (EntityField, PrimitiveField,
                                    PrimitiveTupleField, classify_field, get_field_tag,
                                    get_schema_field_type, is_optional)

from ingest_gateway.errors import ProtocolError

#: walk(buf, pos, end) -> the position after the value; raises ProtocolError
Walk = Callable[[bytes, int, int], int]

_FIXED = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2,
          "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8,
          "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16}
_I8, _I16, _I32 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i")


def check_body(cls: type, buf: bytes, pos: int) -> None:
    """Walk the body of request class ``cls`` starting at ``buf[pos]``; raises
    ProtocolError naming the field whose declared length does not fit."""
    _entity(cls)[0](buf, pos, len(buf))


def uvarint(buf: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    """(value, position after) of an unsigned varint; raises ProtocolError for one
    that runs past ``end``, is over five bytes, or is above 2**32 - 1."""
    value = shift = 0
    while True:
        if pos >= end:
            raise ProtocolError(f"{what}: a varint runs past the frame")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 28:
            raise ProtocolError(f"{what}: a varint over five bytes")
    if value > 0xFFFFFFFF:
        raise ProtocolError(f"{what}: a varint above 2**32 - 1")
    return value, pos


def _need(pos: int, size: int, end: int, what: str) -> int:
    if size > end - pos:
        raise ProtocolError(f"{what} declares {size:,} bytes but {max(end - pos, 0):,} remain")
    return pos + size


def _fixed(size: int, what: str) -> Walk:
    def walk(buf: bytes, pos: int, end: int) -> int:
        return _need(pos, size, end, what)
    return walk


def _sized(kafka_type: str, flexible: bool, nullable: bool, what: str) -> tuple[Walk, int]:
    """A string, bytes or records field: (its walk, its smallest encoding)."""
    if flexible:
        def walk(buf: bytes, pos: int, end: int) -> int:
            n, pos = uvarint(buf, pos, end, what)
            if n == 0:
                if not nullable:
                    raise ProtocolError(f"{what} is null but not nullable")
                return pos
            return _need(pos, n - 1, end, what)
        return walk, 1
    prefix = _I16 if kafka_type == "string" else _I32

    def walk(buf: bytes, pos: int, end: int) -> int:
        pos = _need(pos, prefix.size, end, what)
        n = prefix.unpack_from(buf, pos - prefix.size)[0]
        if n < 0:
            if n != -1 or not nullable:
                raise ProtocolError(f"{what} has length {n}")
            return pos
        return _need(pos, n, end, what)
    return walk, prefix.size


def _array(item: Walk, item_min: int, flexible: bool, what: str) -> tuple[Walk, int]:
    """An array of ``item``s: (its walk, its smallest encoding: a null or empty array)."""
    smallest = max(item_min, 1)

    def items(buf: bytes, pos: int, end: int, count: int) -> int:
        if count * smallest > end - pos:
            raise ProtocolError(f"{what} declares {count:,} items but {max(end - pos, 0):,} "
                                f"bytes remain")
        for _ in range(count):
            pos = item(buf, pos, end)
        return pos

    if flexible:
        def walk(buf: bytes, pos: int, end: int) -> int:
            n, pos = uvarint(buf, pos, end, what)
            return pos if n == 0 else items(buf, pos, end, n - 1)
        return walk, 1

    def walk(buf: bytes, pos: int, end: int) -> int:
        pos = _need(pos, 4, end, what)
        n = _I32.unpack_from(buf, pos - 4)[0]
        if n < 0:
            if n != -1:
                raise ProtocolError(f"{what} has {n} items")
            return pos
        return items(buf, pos, end, n)
    return walk, 4


def _nullable(entity: Walk, what: str) -> Walk:
    """A nullable struct (KIP-893): int8 marker -1 (null) or 1, then the struct."""
    def walk(buf: bytes, pos: int, end: int) -> int:
        pos = _need(pos, 1, end, what)
        marker = _I8.unpack_from(buf, pos - 1)[0]
        if marker == -1:
            return pos
        if marker != 1:
            raise ProtocolError(f"{what} has null marker {marker}")
        return entity(buf, pos, end)
    return walk


def _field(owner: type, field: dataclasses.Field, flexible: bool, tagged: bool
           ) -> tuple[Walk, int]:
    """(walk, smallest encoding) of one field, as kio's ``get_field_reader`` reads it."""
    what = f"{owner.__name__}.{field.name}"
    optional = False if tagged else is_optional(field)
    kind = classify_field(field)
    if isinstance(kind, (PrimitiveField, PrimitiveTupleField)):
        kafka_type = get_schema_field_type(field)
        nullable = optional and not kind.is_array  # an array's nullability is its own
        if kafka_type in _FIXED:
            size = _FIXED[kafka_type]
            inner, inner_min = _fixed(size, what), size
        elif kafka_type in ("string", "bytes", "records"):
            inner, inner_min = _sized(kafka_type, flexible, nullable, what)
        else:
            raise TypeError(f"{what}: kafka type {kafka_type!r} has no bounds check")
    else:
        inner, inner_min = _entity(kind.type_)
        if isinstance(kind, EntityField) and optional:
            inner, inner_min = _nullable(inner, what), 1
    if kind.is_array:
        return _array(inner, inner_min, flexible, what)
    return inner, inner_min


@functools.cache
def _entity(cls: type) -> tuple[Walk, int]:
    """(walk, smallest encoding) of a struct: its fields in order, then (flexible
    versions) its tagged fields."""
    flexible = bool(cls.__flexible__)
    walks: list[Walk] = []
    tagged: dict[int, Walk] = {}
    smallest = 1 if flexible else 0
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        walk, size = _field(cls, field, flexible, tag is not None)
        if tag is None:
            walks.append(walk)
            smallest += size
        else:
            tagged[tag] = walk
    what = f"{cls.__name__}'s tagged fields"

    def walk_entity(buf: bytes, pos: int, end: int) -> int:
        for walk in walks:
            pos = walk(buf, pos, end)
        if flexible:
            pos = _tagged(buf, pos, end, tagged, what)
        return pos
    return walk_entity, smallest


def _tagged(buf: bytes, pos: int, end: int, known: dict[int, Walk], what: str) -> int:
    count, pos = uvarint(buf, pos, end, what)
    if count * 2 > end - pos:  # a tag and a size, one byte each at least
        raise ProtocolError(f"{what} declares {count:,} fields but {end - pos:,} bytes remain")
    for _ in range(count):
        tag, pos = uvarint(buf, pos, end, what)
        size, pos = uvarint(buf, pos, end, what)
        stop = _need(pos, size, end, f"{what} (tag {tag})")
        walk = known.get(tag)
        if walk is not None:  # read by kio: walked within its size
            walk(buf, pos, stop)
        pos = stop
    return pos


def skip_tagged_fields(buf: bytes, pos: int, what: str) -> int:
    """The position after a tagged-field section none of whose tags is read (a request
    header's); raises ProtocolError if it runs past the frame."""
    return _tagged(buf, pos, len(buf), {}, f"{what}'s tagged fields")
