"""The gateway's HTTP API: a Starlette app whose handlers validate and delegate.

Routes (the OpenAPI document at ``/openapi.json`` is the reference, see
``openapi.py``)::

    POST   /topics/{topic}                         produce (REST Proxy v2 JSON/binary, Arrow)
    POST   /topics/{topic}/partitions/{partition}  produce to one partition
    GET    /topics  /topics/{topic}  /topics/{topic}/partitions        v2 reads
    GET    /v3/clusters  /v3/clusters/{cluster_id}                     the one cluster
    GET    /v3/clusters/{cluster_id}/topics        POST (create)
    GET    /v3/clusters/{cluster_id}/topics/{topic}                    DELETE (delete)
    GET    /v3/clusters/{cluster_id}/topics/{topic}/configs            POST .../configs:alter
    GET    /v3/clusters/{cluster_id}/topics/{topic}/partitions
    POST   /v3/producers                           a fresh idempotent producer id
    GET    /healthz  /readyz  /metrics  /openapi.json

Produce parameters (query string): ``acks`` = 0 | 1 | all (default all; the
``X-Sparklog-Acks`` header works too); for idempotent producing
``producer_id`` (0 .. 2^63-1), ``producer_epoch`` (0 .. 32767) and ``sequence``:
the first sequence number of the request's records in its one partition, or
``P:SEQ,P:SEQ`` when a request spans partitions.

Errors: ONE table (:data:`ERRORS`) maps each ``SparklogError`` subclass to an
HTTP status and a REST-Proxy-style numeric ``error_code``; the body is
``{"error_code": 40401, "message": "...", "error": "unknown_topic"}`` (the last
field is the machine-readable name). Extra routes (consumer endpoints) are
mounted with ``create_app(..., extra_routes=[...])``; they reach the broker
and the log as ``request.app.state.broker`` / ``.log``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

import conf
from conf.errors import ConfigError, SparklogError
from conf.topic import InvalidTopicName, validate_topic_name
from ingest_gateway import codec, params
from ingest_gateway.params import query_dict
from ingest_gateway.body import read_json
from ingest_gateway.broker import Broker, PartResult, parse_acks
from ingest_gateway.errors import (BadRequest, BufferFull, ControlRequestTooLarge, FlushFailed,
                                   InvalidKey, InvalidValue, MissingKey, NotLeader,
                                   RequestTimeout, RequestTooLarge, ShuttingDown,
                                   TooManyConnections, UnknownCluster, UnsupportedContentType)
from ingest_gateway.metrics import CONTENT_TYPE_LATEST, GatewayMetrics
from log_layout import (CorruptManifest, CorruptSegment, Fenced, InvalidProducerEpoch,
                        InvalidRecords, Log, MaintenanceConflict, OffsetOutOfRange,
                        OutOfOrderSequence, RecordTooLarge, StoreError, TopicExists,
                        UnknownPartition, UnknownTopic)

log = logging.getLogger("sparklog.gateway")

#: error class -> (HTTP status, REST Proxy style error_code). Looked up along the MRO,
#: so the most specific class wins. Codes follow the REST Proxy where it has one
#: (40401 unknown topic, 40402 unknown partition, 42201/42202 bad key/value).
ERRORS: dict[type[BaseException], tuple[int, int]] = {
    UnknownTopic: (404, 40401),
    UnknownPartition: (404, 40402),
    UnknownCluster: (404, 40403),
    OffsetOutOfRange: (416, 41601),
    InvalidKey: (422, 42201),
    InvalidValue: (422, 42202),
    InvalidRecords: (422, 42203),
    MissingKey: (422, 42204),
    BadRequest: (400, 40001),
    TopicExists: (400, 40002),
    InvalidTopicName: (400, 40003),
    ConfigError: (400, 40004),
    OutOfOrderSequence: (409, 40901),
    InvalidProducerEpoch: (409, 40902),
    MaintenanceConflict: (409, 40903),
    RequestTimeout: (408, 40801),
    RecordTooLarge: (413, 41301),
    RequestTooLarge: (413, 41302),
    UnsupportedContentType: (415, 41501),
    BufferFull: (429, 42901),
    NotLeader: (503, 50301),
    Fenced: (503, 50301),
    FlushFailed: (503, 50302),
    ShuttingDown: (503, 50303),
    TooManyConnections: (503, 50304),
    StoreError: (500, 50002),
    CorruptManifest: (500, 50003),
    CorruptSegment: (500, 50004),
    SparklogError: (500, 50001),
}
#: errors a client may retry unchanged (idempotently)
RETRIABLE = (BufferFull, NotLeader, Fenced, FlushFailed, ShuttingDown, TooManyConnections)


def status_of(exc: BaseException) -> tuple[int, int]:
    for cls in type(exc).__mro__:
        if cls in ERRORS:
            return ERRORS[cls]
    return 500, 50001


def error_body(exc: BaseException) -> dict[str, Any]:
    status, code = status_of(exc)
    name = getattr(exc, "code", "internal_error")
    body: dict[str, Any] = {"error_code": code, "message": str(exc), "error": name}
    if isinstance(exc, OutOfOrderSequence):  # lets a client tell "retry" from "give up"
        body["expected_sequence"], body["sequence"] = exc.expected, exc.got
    return body


def _refusal(state: Any, exc: BaseException) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, body, headers) of the answer to ``exc``, counted in the metrics."""
    status, _code = status_of(exc)
    body = error_body(exc)
    state.metrics.rejected(body["error"])
    headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, BufferFull) else {}
    return status, body, headers


async def _sparklog_error(request: Request, exc: Exception) -> Response:
    status, body, headers = _refusal(request.app.state, exc)
    return JSONResponse(body, status_code=status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    name = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return JSONResponse({"error_code": exc.status_code * 100, "message": str(exc.detail),
                         "error": name}, status_code=exc.status_code, headers=exc.headers)


# -- small helpers -----------------------------------------------------------------
def _broker(request: Request) -> Broker:
    return request.app.state.broker


def _log(request: Request) -> Log:
    return request.app.state.log


# numbers in paths and query strings: ASCII digits, full matches (see params)
_int_param = params.int_param
_partition_param = params.partition_param


def _topic_param(request: Request) -> str:
    return validate_topic_name(request.path_params["topic"])


def _sequences(raw: str | None, parts: Sequence[int]) -> dict[int, int] | None:
    if raw is None:
        return None
    if ":" not in raw:
        seq = _int_param("sequence", raw, lo=0, hi=2**31 - 1)
        if len(parts) != 1:
            raise BadRequest(f"the request spans partitions {sorted(parts)}: give sequence as "
                             "P:SEQ,P:SEQ")
        return {parts[0]: seq}  # type: ignore[dict-item]
    out = {}
    for item in raw.split(","):
        p, _, s = item.partition(":")
        out[_int_param("sequence partition", p, lo=0, hi=2**31 - 1)] = \
            _int_param("sequence", s, lo=0, hi=2**31 - 1)
    return out  # type: ignore[return-value]


# -- produce ---------------------------------------------------------------------------
class Produce:
    """``POST /topics/{topic}[/partitions/{partition}]`` as a bare ASGI endpoint.

    The hottest route skips Starlette's Request/Response objects (measured at
    about half of a one-record request's time on the event loop) and, reached
    through :class:`GatewayApp`, its middleware and route matching too; errors
    are answered from the same one table.
    """

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self._produce(scope, receive, send)
        except SparklogError as exc:
            status, body, headers = _refusal(scope["app"].state, exc)
            await _send_json(send, status, body, [(b"content-type", b"application/json")] + [
                (k.lower().encode(), v.encode()) for k, v in headers.items()])

    async def _produce(self, scope: Any, receive: Any, send: Any) -> None:
        state = scope["app"].state
        content_type = acks_header = None
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value.decode("latin-1")
            elif name == b"content-length":
                declared = value
            elif name == b"x-sparklog-acks":
                acks_header = value.decode("latin-1")
        raw_q = scope["query_string"]
        query = query_dict(raw_q.decode("latin-1")) if raw_q else {}
        params = scope["path_params"]
        limit = state.settings.gateway.max_request_size
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RequestTooLarge(int(declared), limit)

        async def read_body() -> bytes:
            chunks, size, more = [], 0, True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise BadRequest("the client disconnected before sending the whole body")
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise RequestTooLarge(size, limit)
                chunks.append(chunk)
                more = message.get("more_body", False)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)

        media, doc = await produce(state, params["topic"], params.get("partition"), content_type,
                                   query, acks_header, read_body)
        await _send_json(send, 200, doc, [(b"content-type", media.encode())])


async def _send_json(send: Any, status: int, doc: Any, headers: list[tuple[bytes, bytes]]) -> None:
    """Answer ``doc`` (JSON-able, or bytes already encoded) with ``status``."""
    payload = doc if isinstance(doc, bytes) else json.dumps(doc, separators=(",", ":")).encode()
    headers.append((b"content-length", str(len(payload)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def produce(state: Any, topic: str, raw_partition: str | None, content_type: str | None,
                  q: Mapping[str, str], acks_header: str | None,
                  read_body: Any) -> tuple[str, dict[str, Any] | bytes]:
    """Validate, parse, hand to the broker; returns (response media type, body as a JSON
    document or, for the common all-succeeded v2 answer, already encoded)."""
    validate_topic_name(topic)
    path_partition = None if raw_partition is None else _partition_param(topic, raw_partition)
    media = codec.media_type(content_type)
    acks = parse_acks(q["acks"] if "acks" in q else acks_header)
    pid = _int_param("producer_id", q.get("producer_id"), lo=0, hi=2**63 - 1)
    epoch = _int_param("producer_epoch", q.get("producer_epoch"), lo=0, hi=32767)
    if (pid is None) != (q.get("sequence") is None) or (epoch is not None and pid is None):
        raise BadRequest("idempotent producing needs producer_id and sequence together "
                         "(producer_epoch defaults to 0)")
    body = await read_body()
    broker: Broker = state.broker
    info = await broker.topic_info(topic)
    sticky = lambda: broker.sticky.next(topic, info.partitions)  # noqa: E731
    limits = state.settings.gateway
    if media == codec.ARROW_STREAM:
        parsed = codec.arrow_to_parsed(body, topic=topic, partitions=info.partitions,
                                       path_partition=path_partition, sticky=sticky,
                                       max_uncompressed=limits.max_uncompressed_request_size)
    else:
        parsed = codec.json_to_parsed(body, media, topic=topic, partitions=info.partitions,
                                      path_partition=path_partition, sticky=sticky,
                                      max_depth=limits.max_json_nesting_depth)
    sequences = _sequences(q.get("sequence"), list(parsed.parts))
    results = await broker.produce(topic, parsed, acks=acks,
                                   producer=None if pid is None else (pid, epoch or 0),
                                   sequences=sequences)
    failed = [r for r in results if r.error is not None]
    if failed and len(failed) == len(results):
        raise failed[0].error  # type: ignore[misc]
    if media == codec.ARROW_STREAM:
        return "application/json", {"offsets": [_part_doc(r) for r in results]}
    assert parsed.positions is not None
    if not failed:
        return codec.V2_RESPONSE_TYPE, _v2_offsets_json(parsed.positions, results)
    by_part = {r.partition: r for r in results}
    offsets = []
    for p, row in parsed.positions:
        r = by_part[p]
        doc: dict[str, Any] = {"partition": p, "offset": None if r.base_offset is None
                               else r.base_offset + row, "error_code": None, "error": None}
        if r.error is not None:
            doc["error_code"], doc["error"] = status_of(r.error)[1], str(r.error)
        offsets.append(doc)
    return codec.V2_RESPONSE_TYPE, {"key_schema_id": None, "value_schema_id": None,
                                    "offsets": offsets}


def _v2_offsets_json(positions: list[tuple[int, int]], results: Sequence[PartResult]) -> bytes:
    """The v2 produce answer when every record was accepted, encoded directly: a
    50-record answer through json.dumps (50 dicts) cost ~10% of the gateway's time.
    The same bytes json.dumps would write (compact separators)."""
    base = {r.partition: r.base_offset for r in results}  # None at acks=0: no offsets
    tail = ',"error_code":null,"error":null}'
    if len(base) == 1 and None not in base.values():
        # one partition: its rows are 0..n-1 in request order, the offsets consecutive
        (p, first), = base.items()
        head = f'{{"partition":{p},"offset":'
        items = head + (tail + "," + head).join(map(str, range(first, first + len(positions)))) \
            + tail
    else:
        items = ",".join(f'{{"partition":{p},"offset":'
                         f'{"null" if base[p] is None else base[p] + row}{tail}'
                         for p, row in positions)
    return f'{{"key_schema_id":null,"value_schema_id":null,"offsets":[{items}]}}'.encode()


def _part_doc(r: PartResult) -> dict[str, Any]:
    doc: dict[str, Any] = {"partition": r.partition, "base_offset": r.base_offset,
                           "count": r.count, "error_code": None, "error": None}
    if r.error is not None:
        doc["error_code"], doc["error"] = status_of(r.error)[1], str(r.error)
    return doc


# -- topics (v2 reads and v3 admin) -------------------------------------------------------
def _partition_docs(lg: Log, topic: str, cluster_id: str | None = None) -> list[dict[str, Any]]:
    out = []
    for plog in lg.partitions(topic):
        m = plog.snapshot()
        doc = {"partition_id": m.partition, "leader": m.leader, "leader_epoch": m.leader_epoch,
               "log_start_offset": m.log_start_offset, "high_watermark": m.next_offset,
               "bytes": m.size_bytes, "segments": len(m.segments)}
        if cluster_id is not None:
            doc = {"kind": "KafkaPartition", "cluster_id": cluster_id, "topic_name": topic, **doc}
        out.append(doc)
    return out


async def list_topics_v2(request: Request) -> Response:
    names = await _broker(request).run_blocking(_log(request).topics)
    return JSONResponse(names, media_type=codec.V2_RESPONSE_TYPE)


def _describe_v2(lg: Log, topic: str) -> dict[str, Any]:
    info = lg.topic(topic, refresh=True)
    parts = []
    for d in _partition_docs(lg, topic):
        parts.append({"partition": d["partition_id"], "leader": 0,
                      "replicas": [{"broker": 0, "leader": True, "in_sync": True}], **d})
    return {"name": topic, "configs": info.config.to_kafka(), "partitions": parts}


async def get_topic_v2(request: Request) -> Response:
    topic = _topic_param(request)
    doc = await _broker(request).run_blocking(_describe_v2, _log(request), topic)
    return JSONResponse(doc, media_type=codec.V2_RESPONSE_TYPE)


async def get_partitions_v2(request: Request) -> Response:
    topic = _topic_param(request)
    doc = await _broker(request).run_blocking(_describe_v2, _log(request), topic)
    return JSONResponse(doc["partitions"], media_type=codec.V2_RESPONSE_TYPE)


async def _cluster_id(request: Request) -> str:
    state = request.app.state
    if getattr(state, "cluster_id", None) is None:
        state.cluster_id = await _broker(request).run_blocking(_log(request).cluster_id)
    return state.cluster_id


async def _check_cluster(request: Request) -> str:
    cid = await _cluster_id(request)
    if request.path_params["cluster_id"] != cid:
        raise UnknownCluster(request.path_params["cluster_id"], cid)
    return cid


def _cluster_doc(request: Request, cid: str) -> dict[str, Any]:
    broker = _broker(request)
    return {"kind": "KafkaCluster", "cluster_id": cid,
            "metadata": {"self": str(request.url_for("cluster", cluster_id=cid))},
            "gateways": [{"gateway_id": broker.id, "url": str(request.base_url).rstrip("/"),
                          "partitions": sorted(f"{t}-{p}" for t, p in broker.leaders())}]}


async def list_clusters(request: Request) -> Response:
    cid = await _cluster_id(request)
    return JSONResponse({"kind": "KafkaClusterList", "metadata": {},
                         "data": [_cluster_doc(request, cid)]})


async def get_cluster(request: Request) -> Response:
    return JSONResponse(_cluster_doc(request, await _check_cluster(request)))


def _topic_doc(lg: Log, cid: str, topic: str) -> dict[str, Any]:
    info = lg.topic(topic, refresh=True)
    return {"kind": "KafkaTopic", "cluster_id": cid, "topic_name": topic, "is_internal": False,
            "replication_factor": 1, "partitions_count": info.partitions,
            "topic_id": info.topic_id or None, "created_ms": info.created_ms,
            "configs": info.config.to_kafka(),
            "partitions": _partition_docs(lg, topic)}


async def list_topics_v3(request: Request) -> Response:
    cid = await _check_cluster(request)
    lg = _log(request)
    docs = await _broker(request).run_blocking(
        lambda: [_topic_doc(lg, cid, t) for t in lg.topics()])
    return JSONResponse({"kind": "KafkaTopicList", "metadata": {}, "data": docs})


def _configs_list(raw: Any, field: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                            for c in raw):
        raise BadRequest(f'"{field}" must be a list of {{"name": ..., "value": ...}} objects')
    return {c["name"]: c.get("value") for c in raw}


async def create_topic(request: Request) -> Response:
    cid = await _check_cluster(request)
    doc = await read_json(request)
    if not isinstance(doc, dict):
        raise BadRequest("the body must be an object with topic_name")
    name = validate_topic_name(doc.get("topic_name"))
    configs = _configs_list(doc.get("configs"), "configs")
    if any(v is None for v in configs.values()):
        raise BadRequest("every config needs a value")
    count = doc.get("partitions_count")
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int):
            raise BadRequest(f"partitions_count must be an integer, not {count!r}")
        configs["partitions"] = count
    settings: conf.Settings = request.app.state.settings
    config = conf.TopicConfig.from_kafka(configs, base=settings.topic)
    lg = _log(request)
    broker = _broker(request)
    await broker.run_blocking(lg.create_topic, name, config)
    broker.forget_topic(name)
    body = await broker.run_blocking(_topic_doc, lg, cid, name)
    return JSONResponse(body, status_code=201)


async def get_topic_v3(request: Request) -> Response:
    cid = await _check_cluster(request)
    topic = _topic_param(request)
    return JSONResponse(await _broker(request).run_blocking(_topic_doc, _log(request), cid, topic))


async def delete_topic(request: Request) -> Response:
    await _check_cluster(request)
    topic = _topic_param(request)
    broker = _broker(request)
    await broker.run_blocking(_log(request).delete_topic, topic)
    broker.forget_topic(topic)
    return Response(status_code=204)


def _config_docs(lg: Log, cid: str, topic: str) -> list[dict[str, Any]]:
    info = lg.topic(topic, refresh=True)
    defaults = conf.TopicConfig().to_kafka()
    return [{"kind": "KafkaTopicConfig", "cluster_id": cid, "topic_name": topic, "name": k,
             "value": v, "is_default": defaults.get(k) == v, "is_read_only": k == "partitions",
             "is_sensitive": False,
             "source": "DEFAULT_CONFIG" if defaults.get(k) == v else "DYNAMIC_TOPIC_CONFIG"}
            for k, v in info.config.to_kafka().items()]


async def get_configs(request: Request) -> Response:
    cid = await _check_cluster(request)
    topic = _topic_param(request)
    docs = await _broker(request).run_blocking(_config_docs, _log(request), cid, topic)
    return JSONResponse({"kind": "KafkaTopicConfigList", "metadata": {}, "data": docs})


async def alter_configs(request: Request) -> Response:
    await _check_cluster(request)
    topic = _topic_param(request)
    doc = await read_json(request)
    if not isinstance(doc, dict):
        raise BadRequest('the body must be an object with a "data" list')
    items = doc.get("data")
    if not isinstance(items, list) or not all(isinstance(c, dict) for c in items):
        raise BadRequest('"data" must be a list of {"name", "value", "operation"} objects')
    defaults = conf.TopicConfig().to_kafka()
    changes: dict[str, Any] = {}
    for c in items:
        name, op = c.get("name"), str(c.get("operation") or "SET").upper()
        if not isinstance(name, str):
            raise BadRequest("every config change needs a name")
        if op == "DELETE":
            if name not in defaults:
                raise ConfigError(name, None, "unknown topic config")
            changes[name] = defaults[name]
        elif op == "SET":
            if c.get("value") is None:
                raise BadRequest(f"config {name!r}: SET needs a value")
            changes[name] = c["value"]
        else:
            raise BadRequest(f"config {name!r}: operation must be SET or DELETE, not {op!r}")
    broker = _broker(request)
    await broker.run_blocking(_log(request).alter_topic, topic, changes)
    broker.forget_topic(topic)
    return Response(status_code=204)


async def get_partitions_v3(request: Request) -> Response:
    cid = await _check_cluster(request)
    topic = _topic_param(request)
    lg = _log(request)

    def work() -> list[dict[str, Any]]:
        lg.topic(topic, refresh=True)
        return _partition_docs(lg, topic, cid)

    docs = await _broker(request).run_blocking(work)
    return JSONResponse({"kind": "KafkaPartitionList", "metadata": {}, "data": docs})


async def init_producer(request: Request) -> Response:
    # Ids are random 63-bit numbers: collisions are negligible and no coordination
    # (or store write) is needed; the Producer client draws its own the same way.
    return JSONResponse({"producer_id": secrets.randbits(63), "producer_epoch": 0})


# -- operations -----------------------------------------------------------------------------
async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok", "gateway_id": _broker(request).id})


async def readyz(request: Request) -> Response:
    broker = _broker(request)
    if broker.closing:
        raise ShuttingDown()
    await _cluster_id(request)  # the store answers
    return JSONResponse({"status": "ready", "buffered_bytes": broker.buffered})


async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    from ingest_gateway.openapi import document

    return JSONResponse(document())


def routes() -> list[BaseRoute]:
    v3 = "/v3/clusters/{cluster_id}"
    return [
        Route("/topics", list_topics_v2, methods=["GET"]),
        Route("/topics/{topic}", Produce(), methods=["POST"]),
        Route("/topics/{topic}", get_topic_v2, methods=["GET"]),
        Route("/topics/{topic}/partitions", get_partitions_v2, methods=["GET"]),
        Route("/topics/{topic}/partitions/{partition}", Produce(), methods=["POST"]),
        Route("/v3/clusters", list_clusters, methods=["GET"]),
        Route(v3, get_cluster, methods=["GET"], name="cluster"),
        Route(f"{v3}/topics", list_topics_v3, methods=["GET"]),
        Route(f"{v3}/topics", create_topic, methods=["POST"]),
        Route(f"{v3}/topics/{{topic}}", get_topic_v3, methods=["GET"]),
        Route(f"{v3}/topics/{{topic}}", delete_topic, methods=["DELETE"]),
        Route(f"{v3}/topics/{{topic}}/configs", get_configs, methods=["GET"]),
        Route(f"{v3}/topics/{{topic}}/configs:alter", alter_configs, methods=["POST"]),
        Route(f"{v3}/topics/{{topic}}/partitions", get_partitions_v3, methods=["GET"]),
        Route("/v3/producers", init_producer, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]


class GatewayApp:
    """The ASGI app: produce requests go straight to :class:`Produce`, the rest to Starlette.

    A one-record produce request is the gateway's hottest path. Through Starlette
    it would pass four middleware layers and a regular-expression match against
    every route (the consumer routes come first); here it costs one string split.
    ``state`` is the Starlette app's.
    """

    def __init__(self, app: Starlette):
        self.starlette = app
        self.state = app.state
        self._produce = Produce()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            if path.startswith("/topics/"):
                parts = path[8:].split("/")
                if len(parts) == 1 and parts[0]:
                    params = {"topic": parts[0]}
                elif len(parts) == 3 and parts[0] and parts[1] == "partitions" and parts[2]:
                    params = {"topic": parts[0], "partition": parts[2]}
                else:
                    params = None
                if params is not None:
                    scope["app"] = self.starlette
                    scope["path_params"] = params
                    await self._produce(scope, receive, send)
                    return
        if scope["type"] == "http" and await self._refused_by_length(scope, send):
            return
        await self.starlette(scope, receive, send)

    async def _refused_by_length(self, scope: Any, send: Any) -> bool:
        """Answer 413 (and True) if a request other than produce declares a body over
        ``max.control.request.size``: before any route runs, so even a route that never
        reads its body cannot be made to wait for one. Chunked bodies declare no length;
        :func:`ingest_gateway.body.read_body` stops those."""
        limit = self.state.settings.gateway.max_control_request_size
        for name, value in scope["headers"]:
            # bytes.isdigit is ASCII only; httptools already refused a malformed length
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                status, body, _ = _refusal(self.state, ControlRequestTooLarge(int(value), limit))
                await _send_json(send, status, body, [(b"content-type", b"application/json")])
                return True
        return False


def create_app(settings: conf.Settings, log_: Log, *,
               extra_routes: Sequence[BaseRoute] = (), gateway_id: str | None = None,
               flush_threads: int | None = None) -> GatewayApp:
    """The gateway app over ``log_``; the broker starts and stops with the app's lifespan.

    ``extra_routes`` are mounted before the built-in ones (consumer endpoints);
    handlers reach ``request.app.state.broker``, ``.log``, ``.settings``, ``.metrics``.
    """
    metrics_ = GatewayMetrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        broker = Broker(log_, settings.gateway, topic_defaults=settings.topic, metrics=metrics_,
                        gateway_id=gateway_id, flush_threads=flush_threads)
        metrics_.watch_buffer(lambda: broker.buffered)
        app.state.broker = broker
        # off the loop and off the start-up path: readiness does not wait for it
        threading.Thread(target=codec.warm_up, name="sparklog-warm-up", daemon=True).start()
        log.info("gateway %s serving %s", broker.id, log_.url)
        try:
            yield
        finally:
            await broker.close()
            log.info("gateway %s flushed and stopped", broker.id)

    app = Starlette(routes=[*extra_routes, *routes()], lifespan=lifespan,
                    exception_handlers={SparklogError: _sparklog_error,
                                        HTTPException: _http_error})
    app.state.settings = settings
    app.state.log = log_
    app.state.metrics = metrics_
    app.state.cluster_id = None
    return GatewayApp(app)


def error_response_for(exc: BaseException) -> Mapping[str, Any]:
    """The JSON body the gateway would answer for ``exc`` (for tests and clients)."""
    return error_body(exc)
