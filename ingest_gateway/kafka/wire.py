"""Kafka's framing and headers, the APIs and versions offered, and typed bodies via ``kio``.

Framing (Kafka's protocol guide): every request and response is a 4-byte big-endian
size followed by that many bytes. A request starts with its header:

- v1: ``api_key int16, api_version int16, correlation_id int32, client_id nullable
  string`` (int16 length, -1 = null);
- v2 (flexible versions): v1 followed by tagged fields (unsigned varint count, then
  per field a varint tag, a varint size and the bytes). ``client_id`` stays an
  old-style int16-length string in v2, as Kafka keeps it for ApiVersions' sake; kio's
  own header reader would read it as a compact string, so this module reads headers.

A response starts with the correlation id (header v0), followed by an empty tagged
field section (header v1) when the response version is flexible, except ApiVersions
whose response header is always v0 (a client that does not yet know the broker's
versions must be able to read it). Bodies are read and written by ``kio``'s typed
classes (one per API and version).

:data:`OFFERED` is the versions of the APIs served here (the listener adds the group
APIs' own table, ``groups.OFFERED``): Kafka 4.0's version floors up to
what current clients use. From Fetch v13 and Produce v13 topics are named by their
ids, kept in the store (``fetch``, ``produce.by_topic_id``).
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from collections.abc import Mapping
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from ingest_gateway.errors import ProtocolError
from ingest_gateway.kafka import bounds

API_PRODUCE, API_FETCH, API_LIST_OFFSETS, API_METADATA = 0, 1, 2, 3
API_VERSIONS, API_CREATE_TOPICS, API_DELETE_TOPICS, API_INIT_PRODUCER_ID = 18, 19, 20, 22

#: api key -> (min version, max version) offered in ApiVersions
OFFERED: dict[int, tuple[int, int]] = {
    API_PRODUCE: (3, 13),
    API_FETCH: (4, 18),
    API_LIST_OFFSETS: (1, 7),
    API_METADATA: (0, 13),
    API_VERSIONS: (0, 3),
    API_CREATE_TOPICS: (2, 7),
    API_DELETE_TOPICS: (1, 6),
    API_INIT_PRODUCER_ID: (0, 4),
}

_HEAD = struct.Struct(">hhih")
_SIZE = struct.Struct(">i")
_CORRELATION = struct.Struct(">i")


@dataclasses.dataclass(frozen=True)
class Header:
    """A request header: which API and version, the correlation id, the client id."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes) -> Header:
    """The first fields of a request (enough to answer it even if the rest is bad);
    raises ProtocolError for a frame shorter than a header."""
    if len(frame) < _HEAD.size:
        raise ProtocolError(f"a frame of {len(frame)} bytes holds no request header")
    key, version, corr, _ = _HEAD.unpack_from(frame)
    return Header(key, version, corr, None)


def request_class(api_key: int, version: int,
                  offered: Mapping[int, tuple[int, int]] = OFFERED) -> type:
    """kio's request class; raises ProtocolError for an API or version not in ``offered``."""
    low, high = offered.get(api_key, (0, -1))
    if not low <= version <= high:
        raise ProtocolError(f"api key {api_key} version {version} is not offered")
    return load_request_schema(api_key, version)


def parse_request(frame: bytes, offered: Mapping[int, tuple[int, int]] = OFFERED
                  ) -> tuple[Header, Any]:
    """(header, kio request) of one frame. Raises ProtocolError: a truncated header or
    body, an API or version not offered."""
    head = peek_header(frame)
    cls = request_class(head.api_key, head.api_version, offered)
    pos = _HEAD.size
    n = _HEAD.unpack_from(frame)[3]
    client_id = None
    if n >= 0:
        if pos + n > len(frame):
            raise ProtocolError("the client id runs past the frame")
        client_id = frame[pos:pos + n].decode("utf-8", "replace")
        pos += n
    if cls.__flexible__:  # header v2: skip its tagged fields
        pos = bounds.skip_tagged_fields(frame, pos, "the request header")
    # kio allocates declared lengths before reading them: checked against the frame first
    bounds.check_body(cls, frame, pos)
    try:
        body, used = entity_reader(cls)(frame, pos)
    except Exception as e:  # noqa: BLE001 - kio's native reader raises several kinds
        raise ProtocolError(f"{cls.__name__} v{head.api_version} does not parse: {e}") from None
    # Bytes after the body are ignored, as Kafka's broker ignores them: librdkafka's
    # flexible requests can end with a few (measured: Metadata v12 with 3 extra bytes).
    if pos + used > len(frame):
        raise ProtocolError(f"{cls.__name__} runs past the frame")
    return dataclasses.replace(head, client_id=client_id), body


class _Chunks(list):
    """What kio's writers write to: the pieces, joined once at the end. A BytesIO copied
    a Fetch answer's records into a growing buffer and then out of it: 4.6-7.5 ms for an
    answer of 4 x 1.1 MB against 0.5 ms joined once (a third of the gateway's CPU per
    fetched record under bench/kafka_protocol.py)."""

    write = list.append


def encode_response(head: Header, body: Any) -> bytearray:
    """The framed response (size, header v0 or v1, body) to a request with ``head``."""
    buf = _Chunks((b"\0\0\0\0", _CORRELATION.pack(head.correlation_id)))
    if type(body).__flexible__ and head.api_key != API_VERSIONS:
        buf.write(b"\0")  # header v1: no tagged fields
    entity_writer(type(body))(buf, body)
    out = bytearray().join(buf)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return out


def response_module(api_key: int, version: int) -> Any:
    """The kio module of a response version (its nested classes too)."""
    import sys

    return sys.modules[load_response_schema(api_key, version).__module__]


@functools.cache
def field_names(cls: type) -> frozenset[str]:
    """The names of a kio class's fields (cached: ``make`` runs for each partition of a
    request, and ``dataclasses.fields`` walks the class each time)."""
    return frozenset(f.name for f in dataclasses.fields(cls))


def make(cls: type, **values: Any) -> Any:
    """``cls(**values)`` without the values ``cls`` has no field for: one handler builds
    every version of a response, and older versions lack newer fields."""
    names = field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def error(code: int) -> ErrorCode:
    """kio's ErrorCode for Kafka's numeric code."""
    return ErrorCode(code)
