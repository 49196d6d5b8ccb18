"""Request bodies to Arrow tables, and the shape every produce path shares.

Content types (Kafka REST Proxy v2, plus an Arrow fast path):

``application/vnd.kafka.json.v2+json`` and ``application/json``
    ``{"records": [{"key": <json>, "value": <json>, "partition": <int>,
    "timestamp": <ms>, "headers": [{"key": "h", "value": "text"}]}]}``; keys
    and values are any JSON and are stored as their compact JSON text (as the
    REST Proxy's JSON serializer does); a ``null`` value is a tombstone.
``application/vnd.kafka.binary.v2+json``
    the same, but key, value and header values are base64 strings.
``application/vnd.kafka.avro.v2+json``, ``...jsonschema.v2+json``, ``...protobuf.v2+json``
    REST Proxy's embedded formats with a schema: ``codec_schema``.
``application/vnd.apache.arrow.stream``
    an Arrow IPC stream with a ``value`` column (binary or string) and optional
    ``key``, ``partition`` (integer), ``timestamp`` (int64 ms or an Arrow
    timestamp) and ``headers`` (list<struct<key string, value binary>>).

The parsers live in ``codec_json`` and ``codec_arrow``; this module holds what they
share. Every parser returns :class:`Parsed`: one Arrow table per target partition in
:data:`PART_SCHEMA` (no per-record Python objects survive parsing), plus for
JSON bodies the position of each record so the response can list offsets in
request order. Bad input raises a :class:`~ingest_gateway.errors.BadRequest`
subclass naming the record and the field; nothing is written on any error.

Everything that could make a flush fail is refused here, so a bad record fails
only its own request (422: InvalidKey 42201, InvalidValue 42202,
InvalidRecords 42203), never the batch it would share with others, and nothing
accepted is unservable: JSON keys and values holding NaN or Infinity (``1e400``)
or a lone UTF-16 surrogate, a header key or value that is not valid UTF-8, a
timestamp whose microseconds overflow int64, keys and values nested deeper than
``max.json.nesting.depth``. Arrow bodies are validated in full (offsets, UTF-8,
dictionary indices) before any Arrow kernel touches them, and their expanded
size is counted before anything is decompressed (413 past
``max.uncompressed.request.size``; see ``ipc_size``).
"""


from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.topic import InvalidTopicName, TopicConfig
from ingest_gateway.errors import InvalidRequiredAcks, MissingKey, UnsupportedContentType
from log_layout import RecordTooLarge
from log_layout.paths import SCHEMAS_TOPIC
from log_layout.segment import HEADER_TYPE
from log_layout.segment_schema import BINARY, HEADERS, INT64, shared_nulls

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
PLAIN_JSON = "application/json"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
#: REST Proxy's embedded formats with a schema (``schema_codec``, ``codec_schema``)
AVRO_V2 = "application/vnd.kafka.avro.v2+json"
JSONSCHEMA_V2 = "application/vnd.kafka.jsonschema.v2+json"
PROTOBUF_V2 = "application/vnd.kafka.protobuf.v2+json"
SCHEMA_FORMATS = {AVRO_V2: "AVRO", JSONSCHEMA_V2: "JSON", PROTOBUF_V2: "PROTOBUF"}
CONTENT_TYPES = (JSON_V2, BINARY_V2, PLAIN_JSON, ARROW_STREAM, AVRO_V2, JSONSCHEMA_V2,
                 PROTOBUF_V2)
V2_RESPONSE_TYPE = "application/vnd.kafka.v2+json"

#: defaults of gateway.max.json.nesting.depth and gateway.max.uncompressed.request.size
#: (conf/defaults.toml); the gateway passes its settings
DEFAULT_MAX_NESTING_DEPTH = 64
DEFAULT_MAX_UNCOMPRESSED = 200 * 1024 * 1024
#: the latest timestamp a record may carry: segments store microseconds in an int64
MAX_TIMESTAMP_MS = (2**63 - 1) // 1000

#: what the batcher batches: offsets and default timestamps are added at flush
PART_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("timestamp", pa.int64()),  # milliseconds; null = the flush's time
    pa.field("headers", HEADER_TYPE),
])


class Rows:
    """JSON-parsed records of one partition, kept as Python lists until the flush.

    Building Arrow arrays costs ~10 us per call whatever the length, so a
    one-record request would pay more for its arrays than for everything else;
    the batcher merges the Rows of a whole batch and converts them once
    (DESIGN.md: build Arrow columns once per batch).
    """

    __slots__ = ("keys", "values", "stamps", "headers", "index", "nbytes")

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.stamps: list[int | None] = []
        self.headers: list[Any] = []
        #: each record's position in its request (for error messages)
        self.index: list[int] = []
        self.nbytes = 0

    @property
    def num_rows(self) -> int:
        return len(self.values)

    def extend(self, other: "Rows") -> None:
        self.keys += other.keys
        self.values += other.values
        self.stamps += other.stamps
        self.headers += other.headers
        self.nbytes += other.nbytes

    def to_table(self) -> pa.Table:
        n = len(self.values)

        def column(items: list, kind: int, type_: pa.DataType) -> pa.Array:
            # list.count runs in C: ~20x cheaper than any() over a generator; an all-null
            # column is shared (building one costs ~3 us of a ~15 us one-record table)
            return shared_nulls(n, kind) if items.count(None) == n else pa.array(items, type_)

        return pa.Table.from_arrays([column(self.keys, BINARY, _BINARY),
                                     pa.array(self.values, _BINARY),
                                     column(self.stamps, INT64, _INT64),
                                     column(self.headers, HEADERS, HEADER_TYPE)],
                                    schema=PART_SCHEMA)


_BINARY, _INT64 = pa.binary(), pa.int64()


def part_rows(part: "pa.Table | Rows") -> int:
    return part.num_rows


def part_bytes(part: "pa.Table | Rows") -> int:
    # get_total_buffer_size is ~100x cheaper than Table.nbytes (no buffer dedup walk)
    return part.nbytes if isinstance(part, Rows) else part.get_total_buffer_size()


def to_table(parts: "list[pa.Table | Rows]") -> pa.Table:
    """One table of a batch's parts: runs of Rows are merged and converted once."""
    tables: list[pa.Table] = []
    run: Rows | None = None
    for part in parts:
        if isinstance(part, Rows):
            if run is None:
                run = Rows()
            run.extend(part)
            continue
        if run is not None:
            tables.append(run.to_table())
            run = None
        tables.append(part)
    if run is not None:
        tables.append(run.to_table())
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


@dataclasses.dataclass
class Parsed:
    """Records of one request, split by target partition."""

    #: partition -> table in PART_SCHEMA (Arrow bodies) or Rows (JSON bodies)
    parts: "dict[int, pa.Table | Rows]"
    #: JSON bodies only: for record i, (partition, row within that partition's table)
    positions: list[tuple[int, int]] | None = None

    @property
    def count(self) -> int:
        return sum(t.num_rows for t in self.parts.values())

    @property
    def nbytes(self) -> int:
        return sum(part_bytes(t) for t in self.parts.values())


def media_type(content_type: str | None) -> str:
    """The bare media type of a Content-Type header; raises UnsupportedContentType."""
    bare = (content_type or "").split(";", 1)[0].strip().lower()
    if bare not in CONTENT_TYPES:
        raise UnsupportedContentType(bare or "(none)", CONTENT_TYPES)
    return bare



def headers_size(h: list[dict[str, Any]]) -> int:
    """Bytes of a record's header keys and values (part of its size for max.message.bytes)."""
    return sum(len(x["key"]) + len(x["value"] or b"") for x in h)


# -- checks against the topic's config --------------------------------------------
def check_acks(acks: int) -> None:
    """Raises InvalidRequiredAcks unless ``acks`` is 0, 1 or -1 (all), Kafka's values."""
    if acks not in (0, 1, -1):
        raise InvalidRequiredAcks(acks)


def check_records(topic: str, config: TopicConfig, table: "pa.Table | Rows", *,
                  row_of: Callable[[int], int] = lambda i: i) -> None:
    """Refuse records Kafka would refuse: too large, keyless on a compacted topic, or
    for the Schema Registry's ``_schemas`` (only the registry writes it, with appends
    conditional on its log end: ``log_layout.schema_registry``; Kafka refuses an append
    to an internal topic with INVALID_TOPIC_EXCEPTION too).

    The size of a record is its key plus value plus header keys and values.
    Raises RecordTooLarge, MissingKey or InvalidTopicName.
    """
    if topic == SCHEMAS_TOPIC:
        raise InvalidTopicName(topic, "the Schema Registry's topic: only the registry writes it")
    if isinstance(table, Rows):
        _check_rows(topic, config, table)
        return
    key, value = table.column("key"), table.column("value")
    if config.compacted and key.null_count:
        first = int(np.flatnonzero(key.is_null().to_numpy(zero_copy_only=False))[0])
        raise MissingKey(topic, row_of(first))
    if table.get_total_buffer_size() <= config.max_message_bytes:
        return  # no record can be larger than all buffers together (small requests)
    size = pc.add(pc.fill_null(pc.binary_length(key), 0), pc.fill_null(pc.binary_length(value), 0))
    headers = table.column("headers")
    if headers.null_count < len(headers):
        flat = pc.list_flatten(headers)
        if len(flat):
            hsize = pc.add(pc.fill_null(pc.binary_length(pc.struct_field(flat, "value")), 0),
                           pc.binary_length(pc.struct_field(flat, "key")))
            parents = pc.list_parent_indices(headers).to_numpy()
            per_row = np.bincount(parents, weights=hsize.to_numpy(), minlength=len(headers))
            size = pc.add(size, pa.array(per_row.astype(np.int64)))
    biggest = pc.max(size).as_py() or 0
    if biggest > config.max_message_bytes:
        raise RecordTooLarge(topic, int(biggest), config.max_message_bytes)


def _check_rows(topic: str, config: TopicConfig, rows: Rows) -> None:
    if config.compacted:
        for k, i in zip(rows.keys, rows.index):
            if k is None:
                raise MissingKey(topic, i)
    if rows.nbytes <= config.max_message_bytes:
        return  # no record can be larger than all of them together
    limit = config.max_message_bytes
    for k, v, h in zip(rows.keys, rows.values, rows.headers):
        size = (len(k) if k is not None else 0) + (len(v) if v is not None else 0) \
            + (headers_size(h) if h else 0)
        if size > limit:
            raise RecordTooLarge(topic, size, limit)
