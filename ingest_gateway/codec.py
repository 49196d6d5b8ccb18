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
                                   NestingTooDeep, UncompressedTooLarge, UnsupportedContentType)
from ingest_gateway.ipc_size import MalformedIpc, expanded_size
from ingest_gateway.partitioner import partition_for_key
from log_layout import InvalidRecords, RecordTooLarge, UnknownPartition
from log_layout.segment import HEADER_TYPE

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
PLAIN_JSON = "application/json"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
CONTENT_TYPES = (JSON_V2, BINARY_V2, PLAIN_JSON, ARROW_STREAM)
V2_RESPONSE_TYPE = "application/vnd.kafka.v2+json"

#: defaults of gateway.max.json.nesting.depth and gateway.max.uncompressed.request.size
#: (conf/defaults.toml); the gateway passes its settings
DEFAULT_MAX_NESTING_DEPTH = 64
DEFAULT_MAX_UNCOMPRESSED = 200 * 1024 * 1024
#: the latest timestamp a record may carry: segments store microseconds in an int64
MAX_TIMESTAMP_MS = (2**63 - 1) // 1000
#: body, "records" list, record: the levels above a key or value
_RECORD_DEPTH = 3
#: compact JSON text; refuses NaN and Infinity, which JSON has no text for (a value
#: stored as "NaN" would make every JSON fetch of its partition fail)
_dump = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode

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


def _utf8(row: int, what: str, text: str) -> bytes:
    """``text`` as UTF-8; raises InvalidRecords for a lone surrogate (no UTF-8 exists)."""
    try:
        return text.encode()
    except UnicodeEncodeError as e:
        raise InvalidRecords(f"record {row}: {what} holds a lone UTF-16 surrogate "
                             f"{e.object[e.start:e.end]!r}, which UTF-8 cannot encode") from None


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
        _utf8(row, "a header key", name)  # the segment stores header keys as UTF-8 strings
        value = h.get("value")
        if binary:
            value = _b64(f"header {name!r}", row, value, BadRequest)
        elif value is not None:
            if not isinstance(value, str):
                raise BadRequest(f"record {row}: header {name!r} value must be a string or null")
            value = _utf8(row, f"header {name!r}", value)
        out.append({"key": name, "value": value})
    return out


def _int_field(row: int, field: str, x: Any, *, minimum: int, maximum: int = 2**63 - 1
               ) -> int | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, int) or x < minimum or x > maximum:
        raise BadRequest(f"record {row}: {field} must be an integer from {minimum} to "
                         f"{maximum}, not {x!r}")
    return x


def _json_text(row: int, field: str, x: Any, error: type[BadRequest], max_depth: int) -> str:
    """Compact JSON text of a key or value that is not a string; raises ``error`` for
    NaN or Infinity, NestingTooDeep past ``max_depth`` (counting the body's levels)."""
    try:
        text = _dump(x)
    except ValueError:
        raise error(f"record {row}: {field} holds NaN or Infinity (or a number beyond "
                    "float range, such as 1e400), which JSON has no text for") from None
    except RecursionError:
        raise NestingTooDeep(max_depth, f"record {row}'s {field}") from None
    # Counting brackets (C speed) bounds the depth from above; walk only when it might be over.
    if x.__class__ in (dict, list) and text.count("[") + text.count("{") + _RECORD_DEPTH \
            > max_depth and _RECORD_DEPTH + _depth(x) > max_depth:
        raise NestingTooDeep(max_depth, f"record {row}'s {field}")
    return text


def _depth(x: Any) -> int:
    """Levels of nested lists and objects in ``x`` (0 for a scalar), without recursion."""
    depth, level = 0, [x]
    while level:
        depth += 1
        inner: list[Any] = []
        for y in level:
            inner.extend(y.values() if y.__class__ is dict else y)
        level = [y for y in inner if y.__class__ in (dict, list)]
    return depth


def _refuse_surrogates(records: list[Any]) -> None:
    """Raise InvalidKey/InvalidValue for a key or value holding a lone surrogate.

    JSON text may spell one (``"\\ud800"``); stored as escaped JSON it would be
    written fine, but no JSON fetch could encode it as UTF-8 again.
    """
    for i, r in enumerate(records):
        for field, error in (("key", InvalidKey), ("value", InvalidValue)):
            x = r.get(field)
            if x is None:
                continue
            try:
                (x if x.__class__ is str else json.dumps(x, ensure_ascii=False)).encode()
            except UnicodeEncodeError as e:
                raise error(f"record {i}: {field} holds a lone UTF-16 surrogate "
                            f"{e.object[e.start:e.end]!r}, which UTF-8 cannot encode") from None


def _load(body: bytes, max_depth: int) -> tuple[Any, str]:
    """The parsed document and its text; raises BadRequest, NestingTooDeep."""
    try:
        # strict UTF-8 (json.loads(bytes) would let encoded surrogates through)
        text = body.decode("utf-8-sig" if body.startswith(b"\xef\xbb\xbf") else "utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(f"the body is not valid UTF-8: {e}") from None
    try:
        return json.loads(text), text
    except RecursionError:
        raise NestingTooDeep(max_depth) from None
    except ValueError as e:
        raise BadRequest(f"the body is not valid JSON: {e}") from None


def parse_json(body: bytes, media: str, *, max_depth: int = DEFAULT_MAX_NESTING_DEPTH,
               ) -> tuple[list[bytes | None], list[bytes | None], list[int | None], list[Any],
                          list[int | None]]:
    """Columns (keys, values, timestamps, headers, partitions) of a REST Proxy v2 body.

    Raises BadRequest, InvalidKey, InvalidValue, InvalidRecords, NestingTooDeep.
    """
    doc, text = _load(body, max_depth)
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
                           else _json_text(i, "key", k, InvalidKey, max_depth)).encode()
            if v is not None:
                values[i] = (quote(v) if v.__class__ is str
                             else _json_text(i, "value", v, InvalidValue, max_depth)).encode()
        if len(r) > ("key" in r) + ("value" in r):  # only then look for the rarer fields
            stamps[i] = _int_field(i, "timestamp", r.get("timestamp"), minimum=0,
                                   maximum=MAX_TIMESTAMP_MS)
            headers[i] = _headers(i, r.get("headers"), binary)
            partitions[i] = _int_field(i, "partition", r.get("partition"), minimum=0)
    # A lone surrogate can only come from a \uD800-\uDFFF escape (the body is strict
    # UTF-8), so most bodies skip the per-record check: a backslash is found by memchr
    # (~0.1 us for 7 KB) where the substring scans take ~8 us.
    if not binary and "\\" in text and ("\\ud" in text or "\\uD" in text):
        _refuse_surrogates(records)
    return keys, values, stamps, headers, partitions


def json_to_parsed(body: bytes, media: str, *, topic: str, partitions: int,
                   path_partition: int | None, sticky: Callable[[], int],
                   max_depth: int = DEFAULT_MAX_NESTING_DEPTH) -> Parsed:
    """Parse a JSON body and route each record to its partition (explicit, key, sticky).

    Raises what :func:`parse_json` raises, and UnknownPartition.
    """
    keys, values, stamps, headers, wanted = parse_json(body, media, max_depth=max_depth)
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
ARROW_COLUMNS = ("key", "value", "partition", "timestamp", "headers")


def _is_bytes_type(t: pa.DataType) -> bool:
    """Binary or string of any layout (or all null): what a key or value may be."""
    if pa.types.is_dictionary(t):
        return _is_bytes_type(t.value_type)
    return t == pa.binary() or pa.types.is_string(t) or pa.types.is_large_string(t) \
        or pa.types.is_large_binary(t) or pa.types.is_binary_view(t) \
        or pa.types.is_string_view(t) or pa.types.is_null(t) or pa.types.is_fixed_size_binary(t)


def _check_schema(schema: pa.Schema) -> None:
    """Refuse a schema the produce path cannot take, before any batch is read.

    Raises BadRequest, or InvalidKey / InvalidValue for those columns' types.
    """
    names = schema.names
    if len(set(names)) != len(names):
        raise BadRequest(f"Arrow column names repeat: {names}")
    unknown = set(names) - set(ARROW_COLUMNS)
    if unknown:
        raise BadRequest(f"unknown Arrow columns {sorted(unknown)}; allowed: "
                         + ", ".join(ARROW_COLUMNS))
    if "value" not in names:
        raise BadRequest("the Arrow stream needs a 'value' column")
    types = dict(zip(names, schema.types))
    for name, error in (("key", InvalidKey), ("value", InvalidValue)):
        if name in types and not _is_bytes_type(types[name]):
            raise error(f"Arrow column {name!r} must be binary or string, not {types[name]}")
    if "partition" in types and not pa.types.is_integer(types["partition"]):
        raise BadRequest(f"Arrow column 'partition' must be integers, not {types['partition']}")
    ts = types.get("timestamp")
    if ts is not None and not (pa.types.is_integer(ts) or pa.types.is_timestamp(ts)):
        raise BadRequest(f"Arrow column 'timestamp' must be int64 milliseconds or a "
                         f"timestamp, not {ts}")
    h = types.get("headers")
    if h is not None and not ((pa.types.is_list(h) or pa.types.is_large_list(h))
                              and pa.types.is_struct(h.value_type)):
        raise BadRequest(f"Arrow column 'headers' must be {HEADER_TYPE}, not {h}")


def read_arrow(body: bytes, *, max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED) -> pa.Table:
    """The table of an Arrow IPC stream body, every batch validated in full.

    Arrow kernels trust offsets, lengths and dictionary indices: a mutated stream
    used unvalidated crashes the process, so nothing touches the data before
    ``validate(full=True)``. Raises UncompressedTooLarge if the buffers would expand
    past ``max_uncompressed`` (counted before anything is decompressed); BadRequest
    (or InvalidKey / InvalidValue) for anything that is not a valid produce stream.
    """
    buf = pa.py_buffer(body)
    try:
        size = expanded_size(buf)
    except (MalformedIpc, pa.ArrowException, OSError, ValueError) as e:
        raise BadRequest(f"the body is not a readable Arrow IPC stream: {e}") from None
    if size > max_uncompressed:
        raise UncompressedTooLarge(size, max_uncompressed)
    try:
        reader = pa.ipc.open_stream(buf)
        schema = reader.schema
    except (pa.ArrowException, OSError, ValueError) as e:
        raise BadRequest(f"the body is not a readable Arrow IPC stream: {e}") from None
    try:
        _check_schema(schema)
    except UnicodeDecodeError as e:
        raise BadRequest(f"an Arrow column name is not UTF-8: {e}") from None
    batches = []
    try:
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            batch.validate(full=True)
            batches.append(batch)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise BadRequest(f"the body is not a valid Arrow IPC stream: {e}") from None
    return pa.Table.from_batches(batches, schema)


def _binary_column(name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    if col.type == pa.binary():
        return col
    try:  # the type was checked with the schema; this decodes dictionaries too
        return col.cast(pa.binary())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        error = InvalidKey if name == "key" else InvalidValue
        raise error(f"Arrow column {name!r} ({col.type}) does not convert to binary: {e}") \
            from None


def _timestamps_ms(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """int64 milliseconds of an integer or timestamp column; raises InvalidRecords for a
    value out of 0 .. MAX_TIMESTAMP_MS (the segment's microseconds would overflow)."""
    try:
        if pa.types.is_timestamp(col.type):
            raw = col.cast(pa.int64())  # same width: the stored count of units
            unit = col.type.unit
            ms = pc.multiply_checked(raw, 1000) if unit == "s" else raw if unit == "ms" \
                else pc.divide(raw, 1000 if unit == "us" else 1_000_000)
        else:
            ms = col.cast(pa.int64())  # a safe cast: uint64 past int64 raises
    except pa.ArrowInvalid as e:
        raise InvalidRecords(f"Arrow column 'timestamp' ({col.type}) is out of range: {e}") \
            from None
    lo_hi = pc.min_max(ms)
    lo, hi = lo_hi["min"].as_py(), lo_hi["max"].as_py()
    if lo is not None and (lo < 0 or hi > MAX_TIMESTAMP_MS):
        raise InvalidRecords(f"Arrow column 'timestamp' holds {lo if lo < 0 else hi} ms; "
                             f"timestamps must be from 0 to {MAX_TIMESTAMP_MS} ms")
    return ms


def _headers_column(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """The column in HEADER_TYPE; raises BadRequest if it does not convert, or
    InvalidRecords for a header without a key (the segment's key is not nullable)."""
    if col.type != HEADER_TYPE:
        try:
            col = col.cast(HEADER_TYPE)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            raise BadRequest(f"Arrow column 'headers' must be {HEADER_TYPE}, "
                             f"not {col.type}") from None
    if col.null_count < len(col):
        keys = pc.struct_field(pc.list_flatten(col), "key")  # a null header -> a null key
        if keys.null_count:
            raise InvalidRecords("Arrow column 'headers' has a header without a key")
    return col


def _arrow_columns(table: pa.Table) -> tuple[pa.Table, pa.ChunkedArray]:
    """The records in PART_SCHEMA, and the key column (for routing)."""
    n = table.num_rows
    names = table.column_names
    value = _binary_column("value", table.column("value"))
    key = _binary_column("key", table.column("key")) if "key" in names \
        else pa.chunked_array([pa.nulls(n, pa.binary())])
    ts = _timestamps_ms(table.column("timestamp")) if "timestamp" in names \
        else pa.chunked_array([pa.nulls(n, pa.int64())])
    headers = _headers_column(table.column("headers")) if "headers" in names \
        else pa.chunked_array([pa.nulls(n, HEADER_TYPE)])
    return pa.Table.from_arrays([key, value, ts, headers], schema=PART_SCHEMA), key


def arrow_to_parsed(body: bytes, *, topic: str, partitions: int, path_partition: int | None,
                    sticky: Callable[[], int],
                    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED) -> Parsed:
    """Parse an Arrow IPC stream body and split it by partition, column-wise.

    Raises what :func:`read_arrow` raises, InvalidRecords, UnknownPartition.
    """
    table = read_arrow(body, max_uncompressed=max_uncompressed)
    n = table.num_rows
    if n == 0:
        raise BadRequest("the Arrow stream holds no records")
    whole, key = _arrow_columns(table)
    if "partition" in table.column_names:
        pcol = table.column("partition")
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
