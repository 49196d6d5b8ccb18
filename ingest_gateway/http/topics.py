"""Topic reads (REST Proxy v2), the v3 cluster and topic admin API, producer ids.

Routes::

    GET    /topics  /topics/{topic}  /topics/{topic}/partitions[/{partition}]  v2 reads
    GET    /brokers                                                     v2 broker ids
    GET    /v3/clusters  /v3/clusters/{cluster_id}                     the one cluster
    GET    /v3/clusters/{cluster_id}/topics        POST (create)
    GET    /v3/clusters/{cluster_id}/topics/{topic}   PATCH (partitions_count)  DELETE
    GET    /v3/clusters/{cluster_id}/topics/{topic}/partitions[/{partition}]
    POST   /v3/producers                           a fresh idempotent producer id

(configs: ``v3_configs``; records: ``v3_records``; consumer groups: ``v3_groups``.)

Shapes are REST Proxy's: a v2 partition's ``leader`` and ``replicas[].broker`` are
int broker ids (a standalone gateway is broker 0; in the broker application a
broker is a gateway slot, -1 while a partition has no leader); every v3 resource
has ``metadata.self`` and ``resource_name`` and links its related resources as
``{"related": url}`` (``v3_links``). sparklog's own facts (log start offset, high
watermark, bytes, segments, leader epoch) ride along as extra fields, which REST
Proxy clients ignore.

Handlers validate and delegate: store work runs off the event loop on the
batcher's pool, and a change of a topic makes the batcher forget its cached state.
"""

from __future__ import annotations

import secrets
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from conf.topic import validate_topic_name
from ingest_gateway.errors import BadRequest, UnknownBroker, UnknownCluster
from ingest_gateway.http.access import require_create, require_idempotent_producer, visible
from ingest_gateway.http import bodies
from ingest_gateway.http.bodies import read_body_as
from ingest_gateway.http.params import partition_param
from ingest_gateway.http.requests import metadata_of
from ingest_gateway.http.v3_links import V3, cluster_url, crn, list_doc, related, self_meta
from ingest_gateway.server import codec
from ingest_gateway.server.batcher import Batcher
from ingest_gateway.server.gateway import Gateway
from ingest_gateway.server.topic_admin import TopicAdmin
from ingest_gateway.server.topic_metadata import TopicMetadata
from log_layout import UnknownPartition


def batcher_of(request: Request) -> Batcher:
    """The app's batcher (created by the app's lifespan)."""
    return request.app.state.batcher


def gateway_of(request: Request) -> Gateway:
    """The gateway's services (built when the app starts)."""
    return request.app.state.gateway


def topic_admin_of(request: Request) -> TopicAdmin:
    """Topic and config admin, the one implementation the Kafka listener calls too."""
    return gateway_of(request).topics


def _topic_param(request: Request) -> str:
    return validate_topic_name(request.path_params["topic"])


def _partition_docs(meta: TopicMetadata, topic: str) -> list[dict[str, Any]]:
    """sparklog's facts of each partition of ``topic`` (blocking: reads the store)."""
    out = []
    for plog in meta.partitions(topic):
        m = plog.snapshot()
        # leader_gateway: the id of the gateway that last wrote it (sparklog's own fact)
        out.append({"partition_id": m.partition, "leader_gateway": m.leader,
                    "leader_epoch": m.leader_epoch,
                    "log_start_offset": m.log_start_offset, "high_watermark": m.next_offset,
                    "bytes": m.size_bytes, "segments": len(m.segments)})
    return out


def broker_ids(request: Request) -> list[int]:
    """The v2 broker ids: a standalone gateway is broker 0; in the broker application
    the gateway slots the last assignment names."""
    member = gateway_of(request).cluster
    if member is None:
        return [0]
    a = member.assignment
    return sorted(a.slots) if a is not None else [member.slot]


def leader_id(request: Request, topic: str, partition: int) -> int:
    """The int broker id leading ``topic``-``partition`` (REST Proxy's ``leader``): 0 for
    a standalone gateway, else the leading slot, -1 when none is known yet (Kafka's
    "no leader")."""
    return gateway_of(request).leader(topic, partition)


def _v2_partition(request: Request, topic: str, d: dict[str, Any]) -> dict[str, Any]:
    leader = leader_id(request, topic, d["partition_id"])
    replicas = [{"broker": leader, "leader": True, "in_sync": True}] if leader >= 0 else []
    extra = {k: v for k, v in d.items() if k != "partition_id"}
    return {"partition": d["partition_id"], "leader": leader, "replicas": replicas, **extra}


async def list_topics_v2(request: Request) -> Response:
    names = await batcher_of(request).run_blocking(metadata_of(request).names)
    return JSONResponse(visible(request, "Topic", names), media_type=codec.V2_RESPONSE_TYPE)


def _describe_v2(meta: TopicMetadata, topic: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    info = meta.topic(topic, refresh=True)
    return info.config.to_kafka(), _partition_docs(meta, topic)


async def get_topic_v2(request: Request) -> Response:
    topic = _topic_param(request)
    configs, parts = await batcher_of(request).run_blocking(_describe_v2, metadata_of(request),
                                                            topic)
    return JSONResponse({"name": topic, "configs": configs,
                         "partitions": [_v2_partition(request, topic, d) for d in parts]},
                        media_type=codec.V2_RESPONSE_TYPE)


async def get_partitions_v2(request: Request) -> Response:
    topic = _topic_param(request)
    _, parts = await batcher_of(request).run_blocking(_describe_v2, metadata_of(request), topic)
    return JSONResponse([_v2_partition(request, topic, d) for d in parts],
                        media_type=codec.V2_RESPONSE_TYPE)


async def _one_partition(request: Request) -> tuple[str, dict[str, Any]]:
    """The route's topic and its partition's doc; raises UnknownTopic, UnknownPartition."""
    topic = _topic_param(request)
    partition = partition_param(topic, request.path_params["partition"])
    _, parts = await batcher_of(request).run_blocking(_describe_v2, metadata_of(request), topic)
    if partition >= len(parts):
        raise UnknownPartition(topic, partition, len(parts))
    return topic, parts[partition]


async def get_partition_v2(request: Request) -> Response:
    """REST Proxy v2 ``GET /topics/{topic}/partitions/{partition}``."""
    topic, doc = await _one_partition(request)
    return JSONResponse(_v2_partition(request, topic, doc), media_type=codec.V2_RESPONSE_TYPE)


async def list_brokers(request: Request) -> Response:
    """REST Proxy v2 ``GET /brokers``: ``{"brokers": [ids]}``."""
    return JSONResponse({"brokers": broker_ids(request)}, media_type=codec.V2_RESPONSE_TYPE)


async def cluster_id(request: Request) -> str:
    return await gateway_of(request).cluster_id()


async def check_cluster(request: Request) -> str:
    """The route's cluster id; raises UnknownCluster unless it is this store's."""
    cid = await cluster_id(request)
    if request.path_params["cluster_id"] != cid:
        raise UnknownCluster(request.path_params["cluster_id"], cid)
    return cid


def _cluster_doc(request: Request, cid: str) -> dict[str, Any]:
    batcher = batcher_of(request)
    url = cluster_url(request, cid)
    brokers = broker_ids(request)
    return {"kind": "KafkaCluster", "metadata": self_meta(url, crn(cid)), "cluster_id": cid,
            # no controller in sparklog: the first broker stands in (Kafka's field is required)
            "controller": related(f"{url}/brokers/{brokers[0]}"),
            "acls": related(f"{url}/acls"), "brokers": related(f"{url}/brokers"),
            "broker_configs": related(f"{url}/broker-configs"),
            "consumer_groups": related(f"{url}/consumer-groups"),
            "topics": related(f"{url}/topics"),
            "partition_reassignments": related(f"{url}/topics/-/partitions/-/reassignment"),
            "gateways": [{"gateway_id": batcher.id, "url": str(request.base_url).rstrip("/"),
                          "partitions": sorted(f"{t}-{p}" for t, p in batcher.leading())}]}


async def list_clusters(request: Request) -> Response:
    cid = await cluster_id(request)
    return JSONResponse(list_doc("KafkaClusterList", f"{str(request.base_url).rstrip('/')}{V3}",
                                 [_cluster_doc(request, cid)]))


async def get_cluster(request: Request) -> Response:
    return JSONResponse(_cluster_doc(request, await check_cluster(request)))


def _broker_doc(request: Request, cid: str, broker: int) -> dict[str, Any]:
    url = f"{cluster_url(request, cid)}/brokers/{broker}"
    member = gateway_of(request).cluster
    where = None
    if member is not None and member.assignment is not None:
        where = member.assignment.slots.get(broker)
    split = urlsplit(where or str(request.base_url))
    return {"kind": "KafkaBroker", "metadata": self_meta(url, crn(cid, ("broker", broker))),
            "cluster_id": cid, "broker_id": broker, "host": split.hostname, "port": split.port,
            "rack": None, "configs": related(f"{url}/configs"),
            "partition_replicas": related(f"{url}/partition-replicas")}


async def list_brokers_v3(request: Request) -> Response:
    cid = await check_cluster(request)
    return JSONResponse(list_doc("KafkaBrokerList", f"{cluster_url(request, cid)}/brokers",
                                 [_broker_doc(request, cid, b) for b in broker_ids(request)]))


async def get_broker_v3(request: Request) -> Response:
    """Raises UnknownBroker (404) for an id that is not a broker."""
    cid = await check_cluster(request)
    raw = request.path_params["broker_id"]
    ids = broker_ids(request)
    if not raw.isascii() or not raw.isdigit() or int(raw) not in ids:
        raise UnknownBroker(raw[:50], ids)
    return JSONResponse(_broker_doc(request, cid, int(raw)))


def topic_url(request: Request, cid: str, topic: str) -> str:
    return f"{cluster_url(request, cid)}/topics/{topic}"


def _topic_doc(request: Request, meta: TopicMetadata, cid: str, topic: str) -> dict[str, Any]:
    info = meta.topic(topic, refresh=True)
    url = topic_url(request, cid, topic)
    return {"kind": "KafkaTopic", "metadata": self_meta(url, crn(cid, ("topic", topic))),
            "cluster_id": cid, "topic_name": topic, "is_internal": False,
            "replication_factor": 1, "partitions_count": info.partitions,
            "partitions": related(f"{url}/partitions"), "configs": related(f"{url}/configs"),
            "partition_reassignments": related(f"{url}/partitions/-/reassignment"),
            "authorized_operations": [],
            "topic_id": info.topic_id or None, "created_ms": info.created_ms}


async def list_topics_v3(request: Request) -> Response:
    cid = await check_cluster(request)
    meta = metadata_of(request)
    docs = await batcher_of(request).run_blocking(
        lambda: [_topic_doc(request, meta, cid, t)
                 for t in visible(request, "Topic", meta.names())])
    return JSONResponse(list_doc("KafkaTopicList", f"{cluster_url(request, cid)}/topics", docs))


async def create_topic(request: Request) -> Response:
    """REST Proxy v3 create; ``validate_only: true`` checks without creating (200)."""
    cid = await check_cluster(request)
    body = await read_body_as(request, bodies.CreateTopic)
    name = validate_topic_name(body.topic_name)
    require_create(request, name)
    if body.replicas_assignments is not None:
        raise BadRequest("replicas_assignments: sparklog places no replicas (the store "
                         "replicates the data); give partitions_count")
    configs = {c.name: c.value for c in body.configs}
    validate_only = body.validate_only
    config = await topic_admin_of(request).create(name, configs, partitions=body.partitions_count,
                                                  validate_only=validate_only)
    if validate_only:
        return JSONResponse({"kind": "KafkaTopic", "cluster_id": cid, "topic_name": name,
                             "partitions_count": config.partitions, "replication_factor": 1,
                             "is_internal": False}, status_code=200)
    doc = await batcher_of(request).run_blocking(_topic_doc, request, metadata_of(request), cid,
                                                 name)
    return JSONResponse(doc, status_code=201)


async def get_topic_v3(request: Request) -> Response:
    cid = await check_cluster(request)
    topic = _topic_param(request)
    return JSONResponse(await batcher_of(request).run_blocking(_topic_doc, request,
                                                               metadata_of(request), cid, topic))


async def patch_topic(request: Request) -> Response:
    """REST Proxy v3 ``PATCH`` topic: ``{"partitions_count": N}`` grows the topic.
    Raises ConfigError (400) for fewer partitions than it has, BadRequest for a body
    without an integer partitions_count."""
    cid = await check_cluster(request)
    topic = _topic_param(request)
    count = (await read_body_as(request, bodies.PatchTopic)).partitions_count
    await topic_admin_of(request).add_partitions(topic, count)
    return JSONResponse(await batcher_of(request).run_blocking(_topic_doc, request,
                                                               metadata_of(request), cid, topic))


async def delete_topic(request: Request) -> Response:
    await check_cluster(request)
    await topic_admin_of(request).delete(_topic_param(request))
    return Response(status_code=204)


def _v3_partition(request: Request, cid: str, topic: str, d: dict[str, Any]) -> dict[str, Any]:
    p = d["partition_id"]
    url = f"{topic_url(request, cid, topic)}/partitions/{p}"
    leader = leader_id(request, topic, p)
    return {"kind": "KafkaPartition",
            "metadata": self_meta(url, crn(cid, ("topic", topic), ("partition", p))),
            "cluster_id": cid, "topic_name": topic, "partition_id": p,
            "leader": related(f"{url}/replicas/{leader}") if leader >= 0 else None,
            "replicas": related(f"{url}/replicas"),
            "reassignment": related(f"{url}/reassignment"),
            **{k: v for k, v in d.items() if k != "partition_id"}}


def _partitions_now(meta: TopicMetadata, topic: str) -> list[dict[str, Any]]:
    meta.topic(topic, refresh=True)
    return _partition_docs(meta, topic)


async def get_partitions_v3(request: Request) -> Response:
    cid = await check_cluster(request)
    topic = _topic_param(request)
    docs = await batcher_of(request).run_blocking(_partitions_now, metadata_of(request), topic)
    return JSONResponse(list_doc("KafkaPartitionList",
                                 f"{topic_url(request, cid, topic)}/partitions",
                                 [_v3_partition(request, cid, topic, d) for d in docs]))


async def get_partition_v3(request: Request) -> Response:
    cid = await check_cluster(request)
    topic, doc = await _one_partition(request)
    return JSONResponse(_v3_partition(request, cid, topic, doc))


async def init_producer(request: Request) -> Response:
    require_idempotent_producer(request)
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
        Route("/topics/{topic}/partitions/{partition}", get_partition_v2, methods=["GET"]),
        Route("/brokers", list_brokers, methods=["GET"]),
        Route("/v3/clusters", list_clusters, methods=["GET"]),
        Route(v3, get_cluster, methods=["GET"], name="cluster"),
        Route(f"{v3}/brokers", list_brokers_v3, methods=["GET"]),
        Route(f"{v3}/brokers/{{broker_id}}", get_broker_v3, methods=["GET"]),
        Route(f"{v3}/topics", list_topics_v3, methods=["GET"]),
        Route(f"{v3}/topics", create_topic, methods=["POST"]),
        Route(f"{v3}/topics/{{topic}}", get_topic_v3, methods=["GET"]),
        Route(f"{v3}/topics/{{topic}}", patch_topic, methods=["PATCH"]),
        Route(f"{v3}/topics/{{topic}}", delete_topic, methods=["DELETE"]),
        Route(f"{v3}/topics/{{topic}}/partitions", get_partitions_v3, methods=["GET"]),
        Route(f"{v3}/topics/{{topic}}/partitions/{{partition}}", get_partition_v3,
              methods=["GET"]),
        Route("/v3/producers", init_producer, methods=["POST"]),
    ]
