"""REST Proxy v3 produce: ``POST /v3/clusters/{cluster_id}/topics/{topic}/records`` and
``.../records:batch``.

``records`` takes one record, or several as concatenated JSON, and answers one
delivery report per record, concatenated in the same order, each with its own
``error_code`` (200: written); a chunked body without a ``Content-Length`` is REST
Proxy's streaming mode, each report sent as soon as its record is written
(``v3_stream``)::

    {"partition_id": 1, "headers": [{"name": "h", "value": "<base64>"}],
     "key": {"type": "BINARY", "data": "<base64>"},
     "value": {"type": "JSON", "data": {"foo": "bar"}},
     "timestamp": "2021-02-05T19:14:42Z"}
    -> {"error_code": 200, "cluster_id": "...", "topic_name": "t", "partition_id": 1,
        "offset": 0, "timestamp": "2021-02-05T19:14:42Z",
        "key": {"type": "BINARY", "size": 6}, "value": {"type": "JSON", "size": 13}}

A lone record refused as a whole (unknown topic, bad base64, ...) answers the
error's status and body instead, as REST Proxy does for a non-streamed request.
``records:batch`` takes ``{"entries": [{"id": "1", ...record}]}`` (ids 1 to 80
characters, unique) and answers 207 ``{"successes": [...], "failures": [{"id",
"error_code", "message"}]}``.

Data types: ``BINARY`` (base64), ``JSON`` (any JSON value, stored as its compact
text), ``STRING`` (stored as UTF-8); a key or value that is absent or null is
null (a null value is a tombstone). With a schema, as Confluent's v3 API:
``{"type": "AVRO" | "JSONSCHEMA" | "PROTOBUF", "schema": "<text>", "data": ...}``
(looked up in, else registered under, the topic's ``-key``/``-value`` subject or the
given ``subject``), ``{"schema_id": 3, "data": ...}``, ``{"schema_version": 2,
"subject": "s", "data": ...}`` or a type alone (the subject's latest): the data is
encoded in Confluent's wire format (``server.schema_codec``) and the report adds
``subject``, ``schema_id`` and ``schema_version``. ``subject_name_strategy``: TOPIC_NAME
(the default), RECORD_NAME or TOPIC_RECORD_NAME (the schema's record name: ``schema_codec``).
Refused: data not fitting its schema (422 42203), an unknown id or a
registration the registry refuses (422 42207): each record on its own.
Records go to the same service as v2 produce and Kafka's Produce
(``Batcher.produce``, acks=all): validated whole before anything is written, then
one batch for the request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import datetime
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from conf.errors import SparklogError
from conf.topic import validate_topic_name
from ingest_gateway.errors import BadRequest, ControlRequestTooLarge, RequestTooLarge
from ingest_gateway.http.bodies import V3BatchIds, V3Data, V3Header, V3Record, convert
from ingest_gateway.http.body import PARSE_INLINE_BYTES, json_depth, read_body
from ingest_gateway.http.errors import error_body, status_of
from ingest_gateway.http import v3_stream
from ingest_gateway.http.produce import record_offsets
from ingest_gateway.security.subject_acls import register_check
from ingest_gateway.http.topics import batcher_of, check_cluster
from ingest_gateway.http.v3_stream import DuplexResponse
from ingest_gateway.server import codec_json, schema_codec
from ingest_gateway.server.schema_codec import SchemaChoice, SchemaCodec
from log_layout import UnknownPartition

TYPES = ("BINARY", "JSON", "STRING")


def _schema_choice(row: str, which: str, raw: V3Data) -> SchemaChoice | None:
    """The schema a key or value names (Confluent's v3 ``schema``, ``schema_id``,
    ``subject`` / ``schema_version``, or a schema type alone: the subject's latest), None
    for the schemaless types; raises BadRequest for a combination REST Proxy refuses."""
    kind = raw.type
    schema_id, version, subject, text = raw.schema_id, raw.schema_version, raw.subject, raw.schema
    named = (schema_id, version, subject, text, raw.subject_name_strategy)
    if kind in TYPES:
        if any(x is not None for x in named):
            raise BadRequest(f"{row}: {which} type {kind} does not support schemas")
        return None
    strategy = raw.subject_name_strategy or "TOPIC_NAME"
    if strategy != "TOPIC_NAME" and subject is None and schema_id is None and text is None:
        # REST Proxy's: the subject comes from the schema's name, so a schema is needed
        raise BadRequest(f"{row}: {which} cannot use subject_name_strategy={strategy} "
                         "without schema_id or schema")
    if sum(x is not None for x in (schema_id, version, text)) > 1 or \
            (kind is not None and (schema_id is not None or version is not None)) or \
            (text is not None and kind is None):
        raise BadRequest(f"{row}: {which} takes one of schema_id, schema_version or (type and "
                         "schema), with subject optional; a type goes with a schema or alone")
    return SchemaChoice(None if kind is None else schema_codec.V3_TYPES[kind], text=text,
                        schema_id=schema_id, subject=subject, version=version,
                        strategy=strategy)


def _data(row: str, which: str, raw: V3Data | None
          ) -> tuple[bytes | None, dict[str, Any] | None, SchemaChoice | None]:
    """(stored bytes, {"type", "size"}, None) of a record's key or value, or (None, None,
    the schema it names) when it is to be encoded by a schema; raises BadRequest."""
    if raw is None:
        return None, None, None
    choice = _schema_choice(row, which, raw)
    if choice is not None:
        return None, None, choice
    kind, data = raw.type, raw.data
    if data is None:
        return None, {"type": kind, "size": 0}, None
    if kind == "BINARY":
        if not isinstance(data, str):
            raise BadRequest(f"{row}: {which} data={data!r:.50} is not a base64 string")
        try:
            out = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"{row}: {which} data={data!r:.50} is not a base64 string") from None
    elif kind == "STRING":
        if not isinstance(data, str):
            raise BadRequest(f"{row}: {which} data of type STRING must be a string")
        try:
            out = data.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest(f"{row}: {which} data holds a lone surrogate") from None
    else:
        out = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8",
                                                                                 "surrogatepass")
    return out, {"type": kind, "size": len(out)}, None


def _timestamp(row: str, raw: str | None) -> tuple[int | None, str | None]:
    """(milliseconds, the ISO text) of a record's timestamp; raises BadRequest."""
    if raw is None:
        return None, None
    try:
        t = datetime.datetime.fromisoformat(raw)
        if t.tzinfo is None:
            t = t.replace(tzinfo=datetime.timezone.utc)
        ms = int(t.timestamp() * 1000)
        if ms < 0:
            raise ValueError
    except (ValueError, OverflowError):
        raise BadRequest(f"{row}: timestamp must be an ISO 8601 date-time after 1970, "
                         f"not {raw!r:.64}") from None
    return ms, raw


def _headers(row: str, raw: list[V3Header] | None) -> list[dict[str, Any]] | None:
    """A record's headers ([{name, value: base64}]) as the segment stores them."""
    if raw is None:
        return None
    try:
        return codec_json.parse_headers(0, [{"key": h.name, "value": h.value} for h in raw],
                                        binary=True)
    except BadRequest as e:  # named by this record's label, not a v2 row number
        raise BadRequest(f"{row}: {e.reason.split(': ', 1)[-1]}") from None


@dataclasses.dataclass
class _Record:
    """One record read from a v3 body: what is written, and the report's known fields."""

    partition: int | None
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None
    headers: list[dict[str, Any]] | None
    known: dict[str, Any]
    #: (field, schema, JSON data) of a key or value still to encode by its schema
    pending: list[tuple[str, SchemaChoice, Any]] = dataclasses.field(default_factory=list)


def _record(row: str, doc: Any, topic: str, partitions: int) -> _Record:
    """A v3 record (parsed JSON, read as its declaration ``bodies.V3Record``); raises
    BadRequest or UnknownPartition."""
    try:
        rec = convert(doc, V3Record)
    except BadRequest as e:
        raise BadRequest(f"{row}: {e.reason}") from None
    p = rec.partition_id
    if p is not None and not 0 <= p < partitions:
        raise UnknownPartition(topic, p, partitions)
    key, key_doc, key_choice = _data(row, "key", rec.key)
    value, value_doc, value_choice = _data(row, "value", rec.value)
    ms, stamp = _timestamp(row, rec.timestamp)
    record = _Record(p, key, value, ms, _headers(row, rec.headers),
                     {"timestamp": stamp, "key": key_doc, "value": value_doc, "row": row})
    for field, choice, data in (("key", key_choice, rec.key), ("value", value_choice,
                                                                rec.value)):
        if choice is not None and data is not None:
            record.pending.append((field, choice, data.data))
    return record


def _encode_pending(codec: SchemaCodec, topic: str, records: list[Any],
                    may_register: Any = None) -> list[Any]:
    """Each record with its schema-typed key and value encoded in the wire format, or the
    SparklogError refusing it (each record on its own, as REST Proxy's v3; a schema is
    resolved and registered once per request). Blocking: the registry reads the store."""
    memo: dict[Any, Any] = {}
    out: list[Any] = []
    for record in records:
        if isinstance(record, SparklogError) or not record.pending:
            out.append(record)
            continue
        try:
            for field, choice, data in record.pending:
                where = f"{record.known['row']}'s {field}"
                framed, info = codec.encode_field(topic, choice, data,
                                                  is_key=field == "key", where=where, memo=memo,
                                                  may_register=may_register)
                setattr(record, field, framed)
                record.known[field] = {"size": 0 if framed is None else len(framed), **info}
            out.append(record)
        except SparklogError as e:
            out.append(e)
    return out



def _documents(text: str, max_depth: int) -> list[Any]:
    """Concatenated JSON documents (whitespace between them); raises BadRequest."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        if i == len(text):
            break
        try:
            doc, i = decoder.raw_decode(text, i)
        except (ValueError, RecursionError) as e:
            raise BadRequest(f"the body is not JSON records: {str(e)[:200]}") from None
        if json_depth(doc) > max_depth:
            raise BadRequest(f"a record is nested deeper than {max_depth}")
        out.append(doc)
    if not out:
        raise BadRequest("the request needs at least one record")
    return out


async def _read_body(request: Request, limit: int) -> bytes:
    """The whole body, bounded by ``max.request.size`` (``limit``) as produce is; raises
    RequestTooLarge naming that limit, BadRequest."""
    try:
        return await read_body(request, limit=limit)
    except ControlRequestTooLarge as e:
        raise RequestTooLarge(e.size, e.limit) from None


async def _parse(text: str, max_depth: int) -> list[Any]:
    """``_documents``, off the event loop for a large body (as ``body.read_json``)."""
    if len(text) <= PARSE_INLINE_BYTES:
        return _documents(text, max_depth)
    return await asyncio.to_thread(_documents, text, max_depth)


async def _produce(request: Request, topic: str, partitions: int,
                   records: list[_Record]) -> list[dict[str, Any]]:
    """Produce ``records`` at acks=all as one request of the batcher (the same service v2
    and Kafka's Produce use); per record its partition and offset, or its error."""
    batcher = batcher_of(request)
    parsed = codec_json.route_columns(
        [r.key for r in records], [r.value for r in records],
        [r.timestamp_ms for r in records], [r.headers for r in records],
        [r.partition for r in records], topic=topic, partitions=partitions,
        path_partition=None, sticky=lambda: batcher.sticky.next(topic, partitions))
    results = await batcher.produce(topic, parsed, acks=-1)
    out = []
    for p, offset, error in record_offsets(parsed.positions or [], results):
        if error is not None:
            out.append({"error_code": status_of(error)[1], "error": str(error)})
        else:
            out.append({"partition": p, "offset": offset})
    return out


def _report(cid: str, topic: str, known: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    if got.get("error_code") is not None:
        return {"error_code": got["error_code"], "message": got.get("error") or ""}
    stamp = known["timestamp"] or datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return {"error_code": 200, "cluster_id": cid, "topic_name": topic,
            "partition_id": got["partition"], "offset": got["offset"], "timestamp": stamp,
            "key": known["key"], "value": known["value"]}


def _refused(exc: SparklogError) -> dict[str, Any]:
    return {"error_code": status_of(exc)[1], "message": error_body(exc)["message"]}


async def _run(request: Request, docs: list[Any], label) -> tuple[str, str, list[Any]]:
    """(cluster, topic, per doc its report or its SparklogError); raises what refuses the
    topic as a whole (unknown cluster or topic)."""
    cid = await check_cluster(request)
    topic = validate_topic_name(request.path_params["topic"])
    info = await batcher_of(request).topic_info(topic)
    out: list[Any] = [None] * len(docs)
    todo, where = [], []
    for i, doc in enumerate(docs):
        if isinstance(doc, SparklogError):  # refused while it was read (v3_stream)
            out[i] = doc
            continue
        try:
            todo.append(_record(label(i, doc), doc, topic, info.partitions))
            where.append(i)
        except SparklogError as e:
            out[i] = e
    if any(r.pending for r in todo):  # Avro / JSON Schema: the registry, off the loop
        state = request.app.state
        encoded = await asyncio.to_thread(_encode_pending, state.gateway.schema_codec(), topic,
                                          todo, register_check(state.gateway.authorizer,
                                                               request.scope))
        for i, r in zip(list(where), encoded):
            if isinstance(r, SparklogError):
                out[i] = r
        todo, where = ([r for r in encoded if not isinstance(r, SparklogError)],
                       [i for i, r in zip(where, encoded) if not isinstance(r, SparklogError)])
    if todo:
        offsets = await _produce(request, topic, info.partitions, todo)
        for i, record, got in zip(where, todo, offsets):
            out[i] = _report(cid, topic, record.known, got)
    return cid, topic, out


async def produce_records(request: Request) -> Response:
    """One record or concatenated records, answered whole; a chunked body without a
    Content-Length is REST Proxy's streaming mode (``v3_stream``)."""
    settings = request.app.state.settings.gateway
    if "content-length" not in request.headers:
        await check_cluster(request)  # what refuses the whole stream is an HTTP error
        await batcher_of(request).topic_info(validate_topic_name(request.path_params["topic"]))

        async def run(docs: list[Any], label: Any) -> list[Any]:
            return (await _run(request, docs, label))[2]

        return DuplexResponse(v3_stream.reports(request, run, _refused),
                              media_type="application/json")
    raw = await _read_body(request, settings.max_request_size)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("the body is not UTF-8 JSON") from None
    docs = await _parse(text, settings.max_json_nesting_depth)
    _cid, _topic, out = await _run(request, docs, lambda i, _d: f"record {i}")
    if len(out) == 1:
        if isinstance(out[0], SparklogError):
            raise out[0]
        if out[0]["error_code"] != 200:
            # REST Proxy error codes are the HTTP status and two digits
            return JSONResponse(out[0], status_code=out[0]["error_code"] // 100)
        return JSONResponse(out[0])
    lines = [_refused(r) if isinstance(r, SparklogError) else r for r in out]
    return Response("\n".join(json.dumps(d, separators=(",", ":")) for d in lines) + "\n",
                    media_type="application/json")


async def produce_batch(request: Request) -> Response:
    settings = request.app.state.settings.gateway
    body = await _read_body(request, settings.max_request_size)
    docs = await _parse(body.decode("utf-8", "replace"), settings.max_json_nesting_depth)
    if len(docs) != 1:
        raise BadRequest('the body must be one {"entries": [{"id": "...", ...}, ...]}')
    # the shape and the ids first; each entry's own fields then fail that entry alone
    ids = [e.id for e in convert(docs[0], V3BatchIds).entries]
    if len(set(ids)) != len(ids):
        raise BadRequest("entry ids must be unique within a batch")
    entries = docs[0]["entries"]
    _cid, _topic, out = await _run(request, entries, lambda i, _d: f"entry {ids[i]!r}")
    successes, failures = [], []
    for i, r in zip(ids, out):
        if isinstance(r, SparklogError):
            failures.append({"id": i, **_refused(r)})
        elif r["error_code"] != 200:
            failures.append({"id": i, **r})
        else:
            successes.append({"id": i, **{k: v for k, v in r.items() if k != "error_code"}})
    return JSONResponse({"successes": successes, "failures": failures}, status_code=207)


def routes() -> list[BaseRoute]:
    t = "/v3/clusters/{cluster_id}/topics/{topic}"
    return [Route(f"{t}/records", produce_records, methods=["POST"]),
            Route(f"{t}/records:batch", produce_batch, methods=["POST"])]
