"""Topic reads (REST Proxy v2), the v3 cluster and topic admin API, producer ids.

Routes::

    GET    /topics  /topics/{topic}  /topics/{topic}/partitions        v2 reads
    GET    /v3/clusters  /v3/clusters/{cluster_id}                     the one cluster
    GET    /v3/clusters/{cluster_id}/topics        POST (create)
    GET    /v3/clusters/{cluster_id}/topics/{topic}                    DELETE (delete)
    GET    /v3/clusters/{cluster_id}/topics/{topic}/configs            POST .../configs:alter
    GET    /v3/clusters/{cluster_id}/topics/{topic}/partitions
    POST   /v3/producers                           a fresh idempotent producer id

Handlers validate and delegate: store work runs off the event loop on the
batcher's pool, and a change of a topic makes the batcher forget its cached state.
"""

from __future__ import annotations

import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

import conf
from conf.errors import ConfigError
from conf.topic import validate_topic_name
from ingest_gateway.errors import BadRequest, UnknownCluster
from ingest_gateway.http.body import read_json
from ingest_gateway.server import codec
from ingest_gateway.server.batcher import Batcher
from log_layout import Log


def batcher_of(request: Request) -> Batcher:
    """The app's batcher (created by the app's lifespan)."""
    return request.app.state.batcher


def log_of(request: Request) -> Log:
    return request.app.state.log


def _topic_param(request: Request) -> str:
    return validate_topic_name(request.path_params["topic"])


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
    names = await batcher_of(request).run_blocking(log_of(request).topics)
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
    doc = await batcher_of(request).run_blocking(_describe_v2, log_of(request), topic)
    return JSONResponse(doc, media_type=codec.V2_RESPONSE_TYPE)


async def get_partitions_v2(request: Request) -> Response:
    topic = _topic_param(request)
    doc = await batcher_of(request).run_blocking(_describe_v2, log_of(request), topic)
    return JSONResponse(doc["partitions"], media_type=codec.V2_RESPONSE_TYPE)


async def cluster_id(request: Request) -> str:
    state = request.app.state
    if getattr(state, "cluster_id", None) is None:
        state.cluster_id = await batcher_of(request).run_blocking(log_of(request).cluster_id)
    return state.cluster_id


async def _check_cluster(request: Request) -> str:
    cid = await cluster_id(request)
    if request.path_params["cluster_id"] != cid:
        raise UnknownCluster(request.path_params["cluster_id"], cid)
    return cid


def _cluster_doc(request: Request, cid: str) -> dict[str, Any]:
    batcher = batcher_of(request)
    return {"kind": "KafkaCluster", "cluster_id": cid,
            "metadata": {"self": str(request.url_for("cluster", cluster_id=cid))},
            "gateways": [{"gateway_id": batcher.id, "url": str(request.base_url).rstrip("/"),
                          "partitions": sorted(f"{t}-{p}" for t, p in batcher.leading())}]}


async def list_clusters(request: Request) -> Response:
    cid = await cluster_id(request)
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
    lg = log_of(request)
    docs = await batcher_of(request).run_blocking(
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
    lg = log_of(request)
    batcher = batcher_of(request)
    await batcher.run_blocking(lg.create_topic, name, config)
    batcher.forget_topic(name)
    body = await batcher.run_blocking(_topic_doc, lg, cid, name)
    return JSONResponse(body, status_code=201)


async def get_topic_v3(request: Request) -> Response:
    cid = await _check_cluster(request)
    topic = _topic_param(request)
    return JSONResponse(await batcher_of(request).run_blocking(_topic_doc, log_of(request), cid, topic))


async def delete_topic(request: Request) -> Response:
    await _check_cluster(request)
    topic = _topic_param(request)
    batcher = batcher_of(request)
    await batcher.run_blocking(log_of(request).delete_topic, topic)
    batcher.forget_topic(topic)
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
    docs = await batcher_of(request).run_blocking(_config_docs, log_of(request), cid, topic)
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
    batcher = batcher_of(request)
    await batcher.run_blocking(log_of(request).alter_topic, topic, changes)
    batcher.forget_topic(topic)
    return Response(status_code=204)


async def get_partitions_v3(request: Request) -> Response:
    cid = await _check_cluster(request)
    topic = _topic_param(request)
    lg = log_of(request)

    def work() -> list[dict[str, Any]]:
        lg.topic(topic, refresh=True)
        return _partition_docs(lg, topic, cid)

    docs = await batcher_of(request).run_blocking(work)
    return JSONResponse({"kind": "KafkaPartitionList", "metadata": {}, "data": docs})


async def init_producer(request: Request) -> Response:
    # Ids are random 63-bit numbers: collisions are negligible and no coordination
    # (or store write) is needed; the Producer client draws its own the same way.
    return JSONResponse({"producer_id": secrets.randbits(63), "producer_epoch": 0})


def routes() -> list[BaseRoute]:
    """The topic and cluster routes (produce is mounted by ``app``)."""
    v3 = "/v3/clusters/{cluster_id}"
    return [
        Route("/topics", list_topics_v2, methods=["GET"]),
        Route("/topics/{topic}", get_topic_v2, methods=["GET"]),
        Route("/topics/{topic}/partitions", get_partitions_v2, methods=["GET"]),
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
    ]
