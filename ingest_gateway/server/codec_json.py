"""REST Proxy v2 JSON and binary bodies to :class:`~ingest_gateway.server.codec.Parsed`
parts (the formats and what is refused: ``codec``'s docstring).

The common one-partition request of small records takes the ``Rows`` path:
plain lists that the batcher converts once per flush, not one Arrow table per
request.
"""

from __future__ import annotations

import base64
import binascii
import json
from json.encoder import encode_basestring_ascii as _quote_str  # the C escaper json.dumps uses
from collections.abc import Callable
from typing import Any

from ingest_gateway.errors import BadRequest, InvalidKey, InvalidValue, NestingTooDeep
from ingest_gateway.server.codec import (BINARY_V2, DEFAULT_MAX_NESTING_DEPTH, JSON_V2,
                                         MAX_TIMESTAMP_MS, Parsed, Rows, headers_size,
                                         to_table)
from log_layout import InvalidRecords, UnknownPartition
from log_layout.partitioner import partition_for_key

#: body, "records" list, record: the levels above a key or value
_RECORD_DEPTH = 3
#: compact JSON text; refuses NaN and Infinity, which JSON has no text for (a value
#: stored as "NaN" would make every JSON fetch of its partition fail)
_dump = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


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


def parse_headers(row: int, raw: Any, binary: bool) -> list[dict[str, Any]] | None:
    """A record's headers as the segment stores them ([{key, value bytes}]); ``binary``:
    values in base64. Raises BadRequest naming record ``row``."""
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
            headers[i] = parse_headers(i, r.get("headers"), binary)
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
    return route_columns(keys, values, stamps, headers, wanted, topic=topic,
                         partitions=partitions, path_partition=path_partition, sticky=sticky)


def route_columns(keys: list[bytes | None], values: list[bytes | None],
                  stamps: list[int | None], headers: list[Any], wanted: list[int | None], *,
                  topic: str, partitions: int, path_partition: int | None,
                  sticky: Callable[[], int]) -> Parsed:
    """Route records given as columns (a record's partition: ``wanted``, else
    ``path_partition``, else its key's, else sticky) into a request's ``Parsed``. Raises
    UnknownPartition, BadRequest (a record's partition is not the URL's)."""
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



def warm_up() -> None:
    """Parse one tiny body: pyarrow imports its pandas shim on the first ``pa.array``
    of a Python list (~0.5 s), which should not land on the first producer's request."""
    parsed = json_to_parsed(b'{"records":[{"key":"k","value":1,"timestamp":1,'
                            b'"headers":[{"key":"h","value":"v"}]}]}',
                            JSON_V2, topic="warm-up", partitions=1, path_partition=None,
                            sticky=lambda: 0)
    to_table(list(parsed.parts.values()))
