"""Request bodies to Arrow tables, and the shape every produce path shares.

Content types (Kafka REST Proxy v2, plus an Arrow fast path):

``application/vnd.kafka.json.v2+json`` and ``application/json``
    ``{"records": [{"key": <json>, "value": <json>, "partition": <int>,
    "timestamp": <ms>, "headers": [{"key": "h", "value": "text"}]}]}``; keys
    and values are any JSON and are stored as their compact JSON text (as the
    REST Proxy's JSON serializer does); a ``null`` value is a tombstone.
``application/vnd.kafka.binary.v2+json``
    the same, but key, value and header values are base64 strings.
``application/vnd.apache.arrow.stream``
    an Arrow IPC stream with a ``value`` column (binary or string) and optional
    ``key``, ``partition`` (integer), ``timestamp`` (int64 ms or an Arrow
    timestamp) and ``headers`` (list<struct<key string, value binary>>).

Every parser returns :class:`Parsed`: one Arrow table per target partition in
:data:`PART_SCHEMA` (no per-record Python objects survive parsing), plus for
JSON bodies the position of each record so the response can list offsets in
request order. Bad input raises a :class:`~ingest_gateway.errors.BadRequest`
subclass naming the record and the field; nothing is written on any error.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from json.encoder import encode_basestring_ascii as _quote_str  # the C escaper json.dumps uses
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.topic import TopicConfig
from ingest_gateway.errors import (BadRequest, InvalidKey, InvalidValue, MissingKey,
                                   UnsupportedContentType)
from ingest_gateway.partitioner import partition_for_key
from log_layout import RecordTooLarge, UnknownPartition
from log_layout.segment import HEADER_TYPE

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
PLAIN_JSON = "application/json"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
CONTENT_TYPES = (JSON_V2, BINARY_V2, PLAIN_JSON, ARROW_STREAM)
V2_RESPONSE_TYPE = "application/vnd.kafka.v2+json"

#: what the broker batches: offsets and default timestamps are added at flush
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
    the broker merges the Rows of a whole batch and converts them once
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

        def column(items: list, type_: pa.DataType) -> pa.Array:
            # list.count runs in C: ~20x cheaper than any() over a generator
            return pa.nulls(n, type_) if items.count(None) == n else pa.array(items, type_)

        return pa.Table.from_arrays([column(self.keys, pa.binary()),
                                     pa.array(self.values, pa.binary()),
                                     column(self.stamps, pa.int64()),
                                     column(self.headers, HEADER_TYPE)], schema=PART_SCHEMA)


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


# -- JSON bodies ---------------------------------------------------------------
def _b64(field: str, row: int, x: Any, error: type[BadRequest]) -> bytes | None:
    if x is None:
        return None
    if not isinstance(x, str):
        raise error(f"record {row}: {field} must be a base64 string or null, not "
                    f"{type(x).__name__}")
    try:
        return base64.b64decode(x, validate=True)
    except (binascii.Error, ValueError):
        raise error(f"record {row}: {field} is not valid base64") from None


def _headers(row: int, raw: Any, binary: bool) -> list[dict[str, Any]] | None:
    if raw is None:
        return None
    if isinstance(raw, dict):  # {"name": "value"} is accepted as a shorthand
        raw = [{"key": k, "value": v} for k, v in raw.items()]
    if not isinstance(raw, list):
        raise BadRequest(f"record {row}: headers must be a list of {{key, value}} objects")
    out = []
    for h in raw:
        if not isinstance(h, dict):
            raise BadRequest(f"record {row}: each header must be an object with key and value")
        name = h.get("key", h.get("name"))
        if not isinstance(name, str):
            raise BadRequest(f"record {row}: a header key must be a string")
        value = h.get("value")
        if binary:
            value = _b64(f"header {name!r}", row, value, BadRequest)
        elif value is not None:
            if not isinstance(value, str):
                raise BadRequest(f"record {row}: header {name!r} value must be a string or null")
            value = value.encode()
        out.append({"key": name, "value": value})
    return out


def _int_field(row: int, field: str, x: Any, *, minimum: int) -> int | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, int) or x < minimum or x >= 1 << 63:
        raise BadRequest(f"record {row}: {field} must be an integer >= {minimum}, not {x!r}")
    return x


def parse_json(body: bytes, media: str) -> tuple[list[bytes | None], list[bytes | None],
                                                 list[int | None], list[Any], list[int | None]]:
    """Columns (keys, values, timestamps, headers, partitions) of a REST Proxy v2 body."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the body is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise BadRequest('the body must be an object with a "records" list')
    records = doc["records"]
    if not records:
        raise BadRequest('"records" is empty: nothing to produce')
    binary = media == BINARY_V2
    n = len(records)
    keys: list[bytes | None] = [None] * n
    values: list[bytes | None] = [None] * n
    stamps: list[int | None] = [None] * n
    headers: list[Any] = [None] * n
    partitions: list[int | None] = [None] * n
    dump = json.dumps
    quote = _quote_str
    for i, r in enumerate(records):
        if r.__class__ is not dict:
            raise BadRequest(f"record {i} must be an object with key/value fields")
        k, v = r.get("key"), r.get("value")
        if binary:
            if k is not None:
                keys[i] = _b64("key", i, k, InvalidKey)
            if v is not None:
                values[i] = _b64("value", i, v, InvalidValue)
        else:
            # JSON text as the REST Proxy's JSON serializer writes it (compact); strings,
            # the common case, take the C escaper directly
            if k is not None:
                keys[i] = (quote(k) if k.__class__ is str
                           else dump(k, separators=(",", ":"))).encode()
            if v is not None:
                values[i] = (quote(v) if v.__class__ is str
                             else dump(v, separators=(",", ":"))).encode()
        if len(r) > ("key" in r) + ("value" in r):  # only then look for the rarer fields
            stamps[i] = _int_field(i, "timestamp", r.get("timestamp"), minimum=0)
            headers[i] = _headers(i, r.get("headers"), binary)
            partitions[i] = _int_field(i, "partition", r.get("partition"), minimum=0)
    return keys, values, stamps, headers, partitions


def json_to_parsed(body: bytes, media: str, *, topic: str, partitions: int,
                   path_partition: int | None, sticky: Callable[[], int]) -> Parsed:
    """Parse a JSON body and route each record to its partition (explicit, key, sticky)."""
    keys, values, stamps, headers, wanted = parse_json(body, media)
    n = len(values)
    explicit = any(p is not None for p in wanted)
    keyed = any(k is not None for k in keys)
    if not explicit and (path_partition is not None or not keyed):
        # the common case: the whole request goes to one partition, no per-record routing
        p = path_partition if path_partition is not None else sticky()
        if p >= partitions:
            raise UnknownPartition(topic, p, partitions)
        rows = Rows()
        rows.keys, rows.values, rows.stamps, rows.headers = keys, values, stamps, headers
        rows.index = list(range(n))
        rows.nbytes = 16 * n + sum(len(v) for v in values if v is not None) \
            + (sum(len(k) for k in keys if k is not None) if keyed else 0) \
            + sum(headers_size(h) for h in headers if h)
        return Parsed({p: rows}, [(p, i) for i in range(n)])
    targets: list[int] = []
    sticky_p: int | None = None
    for i in range(n):
        p = wanted[i]
        if path_partition is not None:
            if p is not None and p != path_partition:
                raise BadRequest(f"record {i} names partition {p} but the URL names "
                                 f"partition {path_partition}")
            p = path_partition
        elif p is None:
            if keys[i] is not None:
                p = partition_for_key(keys[i], partitions)
            else:
                if sticky_p is None:
                    sticky_p = sticky()
                p = sticky_p
        if p >= partitions:
            raise UnknownPartition(topic, p, partitions)
        targets.append(p)
    parts: dict[int, Rows] = {}
    positions = []
    for i, p in enumerate(targets):
        rows = parts.get(p)
        if rows is None:
            rows = parts[p] = Rows()
        positions.append((p, len(rows.values)))
        k, v, h = keys[i], values[i], headers[i]
        rows.keys.append(k)
        rows.values.append(v)
        rows.stamps.append(stamps[i])
        rows.headers.append(h)
        rows.index.append(i)
        rows.nbytes += 16 + (len(k) if k is not None else 0) + (len(v) if v is not None else 0) \
            + (headers_size(h) if h else 0)
    return Parsed(parts, positions)  # type: ignore[arg-type]


def headers_size(h: list[dict[str, Any]]) -> int:
    """Bytes of a record's header keys and values (part of its size for max.message.bytes)."""
    return sum(len(x["key"]) + len(x["value"] or b"") for x in h)


# -- Arrow bodies --------------------------------------------------------------
def _binary_column(name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    t = col.type
    if t == pa.binary():
        return col
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t) \
            or pa.types.is_binary_view(t) or pa.types.is_string_view(t) or pa.types.is_null(t) \
            or pa.types.is_fixed_size_binary(t):
        return col.cast(pa.binary())
    error = InvalidKey if name == "key" else InvalidValue
    raise error(f"Arrow column {name!r} must be binary or string, not {t}")


def read_arrow(body: bytes) -> pa.Table:
    """The table of an Arrow IPC stream body; raises BadRequest if it is not one."""
    try:
        return pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError, ValueError) as e:
        raise BadRequest(f"the body is not a readable Arrow IPC stream: {e}") from None


def arrow_to_parsed(body: bytes, *, topic: str, partitions: int, path_partition: int | None,
                    sticky: Callable[[], int]) -> Parsed:
    """Parse an Arrow IPC stream body and split it by partition, column-wise."""
    table = read_arrow(body)
    names = set(table.column_names)
    unknown = names - {"key", "value", "partition", "timestamp", "headers"}
    if unknown:
        raise BadRequest(f"unknown Arrow columns {sorted(unknown)}; allowed: key, value, "
                         "partition, timestamp, headers")
    if "value" not in names:
        raise BadRequest("the Arrow stream needs a 'value' column")
    n = table.num_rows
    if n == 0:
        raise BadRequest("the Arrow stream holds no records")
    value = _binary_column("value", table.column("value"))
    key = _binary_column("key", table.column("key")) if "key" in names \
        else pa.chunked_array([pa.nulls(n, pa.binary())])
    if "timestamp" in names:
        ts = table.column("timestamp")
        if pa.types.is_timestamp(ts.type):
            ts = ts.cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
        elif pa.types.is_integer(ts.type):
            ts = ts.cast(pa.int64())
        else:
            raise BadRequest(f"Arrow column 'timestamp' must be int64 milliseconds or a "
                             f"timestamp, not {ts.type}")
    else:
        ts = pa.chunked_array([pa.nulls(n, pa.int64())])
    if "headers" in names:
        headers = table.column("headers")
        if headers.type != HEADER_TYPE:
            try:
                headers = headers.cast(HEADER_TYPE)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise BadRequest(f"Arrow column 'headers' must be {HEADER_TYPE}, "
                                 f"not {headers.type}") from None
    else:
        headers = pa.chunked_array([pa.nulls(n, HEADER_TYPE)])
    whole = pa.Table.from_arrays([key, value, ts, headers], schema=PART_SCHEMA)

    if "partition" in names:
        pcol = table.column("partition")
        if not pa.types.is_integer(pcol.type):
            raise BadRequest(f"Arrow column 'partition' must be integers, not {pcol.type}")
        if pcol.null_count:
            raise BadRequest("Arrow column 'partition' has nulls")
        lo_hi = pc.min_max(pcol)
        lo, hi = lo_hi["min"].as_py(), lo_hi["max"].as_py()
        if path_partition is not None and (lo != path_partition or hi != path_partition):
            raise BadRequest(f"the Arrow 'partition' column names partitions {lo}..{hi} but "
                             f"the URL names partition {path_partition}")
        if lo < 0 or hi >= partitions:
            raise UnknownPartition(topic, lo if lo < 0 else hi, partitions)
        if lo == hi:
            return Parsed({lo: whole})
        pids = pcol.to_numpy()
        return _split(whole, np.asarray(pids, dtype=np.int64))
    if path_partition is not None:
        if path_partition >= partitions:
            raise UnknownPartition(topic, path_partition, partitions)
        return Parsed({path_partition: whole})
    if key.null_count == n:
        return Parsed({sticky(): whole})
    # Keyed records without a partition column: murmur2 per key (the Producer client
    # computes partitions itself and never takes this path).
    fallback = sticky()
    pids = np.fromiter((fallback if k is None else partition_for_key(k, partitions)
                        for k in key.to_pylist()), dtype=np.int64, count=n)
    return _split(whole, pids)


def _split(table: pa.Table, pids: np.ndarray) -> Parsed:
    order = np.argsort(pids, kind="stable")
    sorted_ids = pids[order]
    bounds = np.flatnonzero(np.diff(sorted_ids)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(pids)]))
    # one take per partition (not slices of one take): each part owns its buffers,
    # so buffer-size accounting counts every byte once
    return Parsed({int(sorted_ids[s]): table.take(pa.array(order[s:e]))
                   for s, e in zip(starts, ends)})


def warm_up() -> None:
    """Parse one tiny body: pyarrow imports its pandas shim on the first ``pa.array``
    of a Python list (~0.5 s), which should not land on the first producer's request."""
    parsed = json_to_parsed(b'{"records":[{"key":"k","value":1,"timestamp":1,'
                            b'"headers":[{"key":"h","value":"v"}]}]}',
                            JSON_V2, topic="warm-up", partitions=1, path_partition=None,
                            sticky=lambda: 0)
    to_table(list(parsed.parts.values()))


# -- checks against the topic's config --------------------------------------------
def check_records(topic: str, config: TopicConfig, table: "pa.Table | Rows", *,
                  row_of: Callable[[int], int] = lambda i: i) -> None:
    """Refuse records Kafka would refuse: too large, or keyless on a compacted topic.

    The size of a record is its key plus value plus header keys and values.
    Raises RecordTooLarge or MissingKey.
    """
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
