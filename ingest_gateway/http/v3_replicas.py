"""REST Proxy v3 replicas, partition offsets and (never running) reassignments.

Routes (under ``/v3/clusters/{cluster_id}``)::

    GET /topics/{topic}/partitions/{partition}/replicas[/{broker_id}]
    GET /brokers/{broker_id}/partition-replicas
    GET /topics/{topic}/partitions/{partition}/offset     earliest and latest offset
    GET /topics/-/partitions/-/reassignment  /topics/{topic}/partitions/-/reassignment
    GET /topics/{topic}/partitions/{partition}/reassignment

The store replicates sparklog's data (S3, HDFS), so each partition has one
replica: its leader, always in sync. Replicas are never reassigned: the lists
are empty and one partition's reassignment answers 404, as Kafka's
ListPartitionReassignments does for a partition not being reassigned.
"""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from conf.topic import validate_topic_name
from ingest_gateway.errors import UnknownBroker
from ingest_gateway.http.params import partition_param
from ingest_gateway.http.topics import (batcher_of, broker_ids, check_cluster, cluster_url,
                                        leader_id, metadata_of, topic_url)
from ingest_gateway.http.v3_links import crn, list_doc, related, self_meta
from log_layout import UnknownPartition


async def _partition(request: Request) -> tuple[str, str, int]:
    """(cluster, topic, partition) of the route; raises UnknownTopic, UnknownPartition."""
    cid = await check_cluster(request)
    topic = validate_topic_name(request.path_params["topic"])
    partition = partition_param(topic, request.path_params["partition"])
    meta = metadata_of(request)
    info = await batcher_of(request).run_blocking(lambda: meta.topic(topic, refresh=True))
    if partition >= info.partitions:
        raise UnknownPartition(topic, partition, info.partitions)
    return cid, topic, partition


def _replicas(request: Request, cid: str, topic: str, p: int) -> list[dict[str, Any]]:
    leader = leader_id(request, topic, p)
    if leader < 0:
        return []
    url = f"{topic_url(request, cid, topic)}/partitions/{p}/replicas/{leader}"
    return [{"kind": "KafkaReplica", "metadata": self_meta(url, crn(
                cid, ("topic", topic), ("partition", p), ("replica", leader))),
             "cluster_id": cid, "topic_name": topic, "partition_id": p, "broker_id": leader,
             "is_leader": True, "is_in_sync": True,
             "broker": related(f"{cluster_url(request, cid)}/brokers/{leader}")}]


async def list_replicas(request: Request) -> Response:
    cid, topic, p = await _partition(request)
    return JSONResponse(list_doc("KafkaReplicaList",
                                 f"{topic_url(request, cid, topic)}/partitions/{p}/replicas",
                                 _replicas(request, cid, topic, p)))


async def get_replica(request: Request) -> Response:
    """Raises UnknownBroker for a broker holding no replica of the partition."""
    cid, topic, p = await _partition(request)
    raw = request.path_params["broker_id"]
    for r in _replicas(request, cid, topic, p):
        if str(r["broker_id"]) == raw:
            return JSONResponse(r)
    raise UnknownBroker(raw[:50], [r["broker_id"] for r in _replicas(request, cid, topic, p)])


async def broker_replicas(request: Request) -> Response:
    """Every partition replica on one broker (all led by it: one replica each)."""
    cid = await check_cluster(request)
    raw = request.path_params["broker_id"]
    ids = broker_ids(request)
    if not raw.isascii() or not raw.isdigit() or int(raw) not in ids:
        raise UnknownBroker(raw[:50], ids)
    meta = metadata_of(request)

    def counts() -> dict[str, int]:
        out = {}
        for t in meta.names():
            try:
                out[t] = meta.topic(t).partitions
            except LookupError:
                continue  # deleted meanwhile
        return out

    data = [r for t, n in (await batcher_of(request).run_blocking(counts)).items()
            for p in range(n) for r in _replicas(request, cid, t, p)
            if r["broker_id"] == int(raw)]
    return JSONResponse(list_doc("KafkaReplicaList",
                                 f"{cluster_url(request, cid)}/brokers/{raw}/partition-replicas",
                                 data))


async def partition_offsets(request: Request) -> Response:
    """The partition's earliest (log start) and latest (high watermark) offsets."""
    cid, topic, p = await _partition(request)
    plog = metadata_of(request).partition(topic, p)
    m = await batcher_of(request).run_blocking(plog.snapshot)
    url = f"{topic_url(request, cid, topic)}/partitions/{p}/offset"
    return JSONResponse({"kind": "KafkaPartitionWithOffsets", "metadata": self_meta(
                            url, crn(cid, ("topic", topic), ("partition", p)) + "/offset"),
                         "cluster_id": cid, "topic_name": topic, "partition_id": p,
                         "earliest_offset": m.log_start_offset, "latest_offset": m.next_offset})


async def list_reassignments(request: Request) -> Response:
    cid = await check_cluster(request)
    topic = request.path_params.get("topic", "-")
    if topic != "-":
        validate_topic_name(topic)
        await batcher_of(request).run_blocking(metadata_of(request).topic, topic)  # UnknownTopic
    return JSONResponse(list_doc("KafkaReassignmentList",
                                 f"{topic_url(request, cid, topic)}/partitions/-/reassignment",
                                 []))


async def get_reassignment(request: Request) -> Response:
    _cid, topic, p = await _partition(request)
    raise HTTPException(404, f"partition {topic}-{p} is not being reassigned "
                             "(sparklog never reassigns replicas)")


def routes() -> list[BaseRoute]:
    c = "/v3/clusters/{cluster_id}"
    part = f"{c}/topics/{{topic}}/partitions/{{partition}}"
    return [
        Route(f"{c}/topics/-/partitions/-/reassignment", list_reassignments, methods=["GET"]),
        Route(f"{c}/topics/{{topic}}/partitions/-/reassignment", list_reassignments,
              methods=["GET"]),
        Route(f"{part}/reassignment", get_reassignment, methods=["GET"]),
        Route(f"{part}/replicas", list_replicas, methods=["GET"]),
        Route(f"{part}/replicas/{{broker_id}}", get_replica, methods=["GET"]),
        Route(f"{part}/offset", partition_offsets, methods=["GET"]),
        Route(f"{c}/brokers/{{broker_id}}/partition-replicas", broker_replicas, methods=["GET"]),
    ]
