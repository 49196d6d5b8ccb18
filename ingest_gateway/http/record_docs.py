"""How fetched records are answered: REST Proxy JSON / binary documents, or an Arrow stream.

**Formats** (by ``Accept``): ``application/vnd.kafka.json.v2+json`` (keys and
values are JSON text, as the produce path stores them), ``...binary.v2+json``
(base64) — both answer the REST Proxy's ``[{"topic", "key", "value",
"partition", "offset", "timestamp", "headers"}]`` — or
``application/vnd.apache.arrow.stream``: the records as an Arrow IPC stream of
the segment schema, no per-record work on either side.

**JSON answers hold only strict JSON.** A stored key or value that is not (NaN,
1e400, a lone surrogate, bytes written through the binary or Arrow formats) ends
the answer before it; if it is the first record, the answer is 422
``record_not_json`` naming topic, partition and offset (Kafka's consumer raises
RecordDeserializationException there): read it in the binary format or skip it.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from starlette.responses import JSONResponse, Response

from ingest_gateway.client.records import records_of
from ingest_gateway.errors import RecordNotJson
from ingest_gateway.http.errors import error_body, status_of
from ingest_gateway.http.requests import ARROW, FORMATS, V2_RESPONSE
from log_layout import SEGMENT_SCHEMA, OffsetOutOfRange


def _not_a_json_number(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e400: Python reads inf, which JSON cannot write back
        raise ValueError(f"{text[:40]} is past the range of a double")
    return value


#: an escaped UTF-16 surrogate (``\ud800``): paired it is fine, alone it cannot be UTF-8
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
#: values nested deeper than this are test-encoded (json's C code recurses)
_DEEP = 64


def _json_value(raw: bytes | None, topic: str, partition: int, offset: int, part: str) -> Any:
    """``raw`` (a stored key or value) as JSON that the answer can write back.

    Strict JSON only: NaN/Infinity, numbers past a double and lone surrogates
    parse in Python but cannot be written to a JSON answer. Raises RecordNotJson.
    """
    if raw is None:
        return None
    try:
        # decoded first: json.loads(bytes) would also guess UTF-16 and UTF-32
        value = json.loads(raw.decode("utf-8"), parse_constant=_not_a_json_number,
                           parse_float=_finite_float)
        if _SURROGATE_ESCAPE.search(raw) or raw.count(b"[") + raw.count(b"{") > _DEEP:
            # the rare values that might parse but not encode: try it, as the answer will
            json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, RecursionError) as e:  # UnicodeError is a ValueError
        reason = "nested too deep" if isinstance(e, RecursionError) else str(e)[:200]
        raise RecordNotJson(topic, partition, offset, part, reason) from None
    return value


def _b64(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode()


def records_json(topic: str, partition: int, batches: Sequence[pa.RecordBatch], fmt: str,
                 ) -> tuple[list[dict[str, Any]], RecordNotJson | None]:
    """REST Proxy record documents of ``batches`` (``fmt`` json or binary).

    Up to the first record that cannot be answered as JSON, as Kafka's consumer
    hands out the records before one it cannot deserialize: returns the documents
    before it and its RecordNotJson (None when all could be).
    """
    out = []
    for b in batches:
        for r in records_of(topic, partition, b):
            if fmt == "json":
                try:
                    key = _json_value(r.key, topic, partition, r.offset, "key")
                    value = _json_value(r.value, topic, partition, r.offset, "value")
                except RecordNotJson as e:
                    return out, e
                headers = None if r.headers is None else [
                    {"key": k, "value": None if v is None else v.decode("utf-8", "replace")}
                    for k, v in r.headers]
            else:
                key, value = _b64(r.key), _b64(r.value)
                headers = None if r.headers is None else [{"key": k, "value": _b64(v)}
                                                          for k, v in r.headers]
            doc = {"topic": topic, "key": key, "value": value, "partition": partition,
                   "offset": r.offset, "timestamp": r.timestamp}
            if headers:
                doc["headers"] = headers
            out.append(doc)
    return out, None


def not_json_response(e: RecordNotJson) -> Response:
    """422 naming the record (topic, partition, offset), as a 416 names its offset."""
    body = error_body(e)
    body.update(topic=e.topic, partition=e.partition, offset=e.offset)
    return JSONResponse(body, status_code=status_of(e)[0])


def arrow_stream(items: Iterable[tuple[pa.RecordBatch, Mapping[str, str] | None]]) -> bytes:
    """An Arrow IPC stream of the segment schema; each batch with its custom metadata."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SEGMENT_SCHEMA) as w:
        for batch, meta in items:
            if meta is None:
                w.write_batch(batch)
            else:
                w.write_batch(batch, custom_metadata=meta)
    return sink.getvalue().to_pybytes()


def out_of_range_response(e: OffsetOutOfRange) -> Response:
    body = error_body(e)
    body.update(topic=e.topic, partition=e.partition, offset=e.offset,
                log_start_offset=e.log_start, high_watermark=e.log_end)
    return JSONResponse(body, status_code=416)


def batches_response(topic: str, partition: int, batches: list[pa.RecordBatch], fmt: str,
                      ) -> Response:
    if fmt == ARROW:
        return Response(arrow_stream((b, None) for b in batches), media_type=ARROW)
    docs, bad = records_json(topic, partition, batches, FORMATS[fmt])
    if bad is not None and not docs:  # the first record itself: nothing to hand out
        return not_json_response(bad)
    return JSONResponse(docs, media_type=V2_RESPONSE)
