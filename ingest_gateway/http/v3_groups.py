"""REST Proxy v3 consumer groups: groups, their consumers, assignments and lags.

Routes (under ``/v3/clusters/{cluster_id}/consumer-groups``)::

    GET  /                                              every group
    GET  /{group}                                       one group
    GET  /{group}/consumers[/{consumer}]                members (consumer id = member id)
    GET  /{group}/consumers/{consumer}/assignments[/{topic}/partitions/{partition}]
    GET  /{group}/lags[/{topic}/partitions/{partition}]  lag of each committed partition
    GET  /{group}/lag-summary                           the largest and the total lag

Read-only views over the gateway's group coordinator (``GroupCoordinator.describe``:
a group this gateway does not coordinate is read from the store). Shapes are
REST Proxy's: ``state`` in Kafka's spelling (``STABLE``, ``PREPARING_REBALANCE``,
``EMPTY``), ``partition_assignor`` the group's strategy, ``coordinator`` a link to
the broker (gateway slot; 0 standalone) coordinating it. sparklog has no static
membership, so ``instance_id`` is null; a lag row of a partition nobody owns has
``consumer_id`` and ``client_id`` "" (as REST Proxy answers). Unknown group:
404 ``unknown_group`` (40404); unknown consumer: 404 ``unknown_member_id`` (40403).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from conf.topic import validate_topic_name
from ingest_gateway.errors import UnknownMemberId
from ingest_gateway.http.access import visible
from ingest_gateway.http.params import partition_param
from ingest_gateway.http.requests import group_of, hub_of
from ingest_gateway.http.topics import check_cluster, cluster_url
from ingest_gateway.http.v3_links import crn, list_doc, related, self_meta
from ingest_gateway.server.groups.state import GroupDescription
from log_layout import UnknownPartition

STATES = {"Stable": "STABLE", "PreparingRebalance": "PREPARING_REBALANCE", "Empty": "EMPTY"}


def _coordinator(request: Request, group: str) -> int:
    member = request.app.state.gateway.cluster
    if member is None:
        return 0
    where = member.coordinator(group)
    slot = where.get("slot") if where else None
    return slot if isinstance(slot, int) else -1


class _Views:
    """The v3 documents of one group, from one description."""

    def __init__(self, request: Request, cid: str, d: GroupDescription):
        self.request, self.cid, self.d = request, cid, d
        self.base = cluster_url(request, cid)
        self.url = f"{self.base}/consumer-groups/{d.group}"
        self.members = {m["member_id"]: m for m in d.members}

    def group(self) -> dict[str, Any]:
        d = self.d
        return {"kind": "KafkaConsumerGroup",
                "metadata": self_meta(self.url, crn(self.cid, ("consumer-group", d.group))),
                "cluster_id": self.cid, "consumer_group_id": d.group,
                "is_simple": d.generation <= 0 and not d.members,
                "partition_assignor": d.strategy or "",
                "state": STATES.get(d.state, "UNKNOWN"), "type": "CLASSIC",
                "is_mixed_consumer_group": False,
                "coordinator": related(f"{self.base}/brokers/"
                                       f"{_coordinator(self.request, d.group)}"),
                "consumers": related(f"{self.url}/consumers"),
                "lag_summary": related(f"{self.url}/lag-summary"),
                "lags": related(f"{self.url}/lags"), "generation": d.generation}

    def consumer(self, member_id: str) -> dict[str, Any]:
        m = self.members.get(member_id)
        if m is None:
            raise UnknownMemberId(self.d.group, member_id)
        url = f"{self.url}/consumers/{member_id}"
        return {"kind": "KafkaConsumer",
                "metadata": self_meta(url, crn(self.cid, ("consumer-group", self.d.group),
                                               ("consumer", member_id))),
                "cluster_id": self.cid, "consumer_group_id": self.d.group,
                "consumer_id": member_id, "instance_id": None, "client_id": m["client_id"],
                "assignments": related(f"{url}/assignments")}

    def assignments(self, member_id: str) -> list[dict[str, Any]]:
        self.consumer(member_id)  # UnknownMemberId
        out = []
        for a in self.members[member_id]["assignment"]:
            t, p = a["topic"], a["partition"]
            url = f"{self.url}/consumers/{member_id}/assignments/{t}/partitions/{p}"
            out.append({"kind": "KafkaConsumerAssignment",
                        "metadata": self_meta(url, crn(
                            self.cid, ("consumer-group", self.d.group), ("consumer", member_id),
                            ("assignment", t), ("partition", p))),
                        "cluster_id": self.cid, "consumer_group_id": self.d.group,
                        "consumer_id": member_id, "topic_name": t, "partition_id": p,
                        "partition": related(f"{self.base}/topics/{t}/partitions/{p}"),
                        "lag": related(f"{self.url}/lags/{t}/partitions/{p}")})
        return out

    def lags(self) -> list[dict[str, Any]]:
        out = []
        for row in self.d.partitions:
            if row.committed is None:
                continue  # Kafka lists the partitions with a committed offset
            owner = row.owner or ""
            client = self.members.get(owner, {}).get("client_id", "")
            url = f"{self.url}/lags/{row.topic}/partitions/{row.partition}"
            out.append({"kind": "KafkaConsumerLag",
                        "metadata": self_meta(url, crn(
                            self.cid, ("consumer-group", self.d.group), ("lag", row.topic),
                            ("partition", row.partition))),
                        "cluster_id": self.cid, "consumer_group_id": self.d.group,
                        "topic_name": row.topic, "partition_id": row.partition,
                        "consumer_id": owner, "instance_id": None, "client_id": client,
                        "current_offset": row.committed, "log_end_offset": row.high_watermark,
                        "lag": row.lag})
        return out

    def summary(self) -> dict[str, Any]:
        lags = self.lags()
        top = max(lags, key=lambda r: r["lag"], default=None)
        doc = {"kind": "KafkaConsumerGroupLagSummary",
               "metadata": self_meta(f"{self.url}/lag-summary", crn(
                   self.cid, ("consumer-groups", self.d.group), ("lag-summary", ""))[:-1]),
               "cluster_id": self.cid, "consumer_group_id": self.d.group,
               "max_lag_consumer_id": top["consumer_id"] if top else "",
               "max_lag_instance_id": None, "max_lag_client_id": top["client_id"] if top else "",
               "max_lag_topic_name": top["topic_name"] if top else "",
               "max_lag_partition_id": top["partition_id"] if top else 0,
               "max_lag": top["lag"] if top else 0,
               "total_lag": sum(r["lag"] for r in lags),
               "max_lag_consumer": related(f"{self.url}/consumers/{top['consumer_id']}")
               if top and top["consumer_id"] else None,
               "max_lag_partition": related(f"{self.base}/topics/{top['topic_name']}/partitions/"
                                            f"{top['partition_id']}") if top else None}
        return doc


async def _views(request: Request) -> _Views:
    cid = await check_cluster(request)
    group = group_of(request)
    hub = hub_of(request)
    return _Views(request, cid, await hub.run(hub.coordinator.describe, group))


async def list_groups(request: Request) -> Response:
    cid = await check_cluster(request)
    hub = hub_of(request)

    def work() -> list[GroupDescription]:
        out = []
        for g in visible(request, "Group", hub.coordinator.groups()):
            try:
                out.append(hub.coordinator.describe(g))
            except LookupError:
                continue  # deleted between the listing and its description
        return out

    docs = [_Views(request, cid, d).group() for d in await hub.run(work)]
    return JSONResponse(list_doc("KafkaConsumerGroupList",
                                 f"{cluster_url(request, cid)}/consumer-groups", docs))


async def get_group(request: Request) -> Response:
    return JSONResponse((await _views(request)).group())


async def list_consumers(request: Request) -> Response:
    v = await _views(request)
    return JSONResponse(list_doc("KafkaConsumerList", f"{v.url}/consumers",
                                 [v.consumer(m) for m in v.members]))


async def get_consumer(request: Request) -> Response:
    v = await _views(request)
    return JSONResponse(v.consumer(request.path_params["consumer"]))


async def list_assignments(request: Request) -> Response:
    v = await _views(request)
    consumer = request.path_params["consumer"]
    return JSONResponse(list_doc("KafkaConsumerAssignmentList",
                                 f"{v.url}/consumers/{consumer}/assignments",
                                 v.assignments(consumer)))


class NotInGroup(UnknownPartition):
    """A partition the group (or its consumer) has no assignment or committed offset
    for: 404 ``unknown_partition`` (40402), as REST Proxy answers."""

    def __init__(self, group: str, topic: str, partition: object, what: str):
        self.group, self.topic, self.partition, self.partitions = group, topic, partition, 0
        Exception.__init__(self, f"group {group!r} has no {what} for partition "
                                 f"{partition!r} of topic {topic!r}")


def _one(rows: list[dict[str, Any]], request: Request, group: str, what: str) -> dict[str, Any]:
    """The row of the route's topic and partition; raises NotInGroup (404)."""
    topic = validate_topic_name(request.path_params["topic"])
    raw = request.path_params["partition"]
    try:
        partition = partition_param(topic, raw)
    except UnknownPartition:
        raise NotInGroup(group, topic, raw[:50], what) from None
    for r in rows:
        if r["topic_name"] == topic and r["partition_id"] == partition:
            return r
    raise NotInGroup(group, topic, partition, what)


async def get_assignment(request: Request) -> Response:
    v = await _views(request)
    return JSONResponse(_one(v.assignments(request.path_params["consumer"]), request,
                             v.d.group, "assignment of this consumer"))


async def list_lags(request: Request) -> Response:
    v = await _views(request)
    return JSONResponse(list_doc("KafkaConsumerLagList", f"{v.url}/lags", v.lags()))


async def get_lag(request: Request) -> Response:
    v = await _views(request)
    return JSONResponse(_one(v.lags(), request, v.d.group, "committed offset"))


async def lag_summary(request: Request) -> Response:
    return JSONResponse((await _views(request)).summary())


def routes() -> list[BaseRoute]:
    g = "/v3/clusters/{cluster_id}/consumer-groups"
    c = f"{g}/{{group}}/consumers/{{consumer}}"
    return [
        Route(g, list_groups, methods=["GET"]),
        Route(f"{g}/{{group}}", get_group, methods=["GET"]),
        Route(f"{g}/{{group}}/consumers", list_consumers, methods=["GET"]),
        Route(c, get_consumer, methods=["GET"]),
        Route(f"{c}/assignments", list_assignments, methods=["GET"]),
        Route(f"{c}/assignments/{{topic}}/partitions/{{partition}}", get_assignment,
              methods=["GET"]),
        Route(f"{g}/{{group}}/lags", list_lags, methods=["GET"]),
        Route(f"{g}/{{group}}/lags/{{topic}}/partitions/{{partition}}", get_lag, methods=["GET"]),
        Route(f"{g}/{{group}}/lag-summary", lag_summary, methods=["GET"]),
    ]
