"""``GET /metadata``: who leads each partition and coordinates each group (Kafka's Metadata
and FindCoordinator in one HTTP call).

``GET /metadata?topics=a,b&groups=g1,g2`` (both optional, comma lists, at most
``MAX_NAMES`` names each) answers::

    {"cluster_id": "...", "generation": 41, "driver_epoch": 3,
     "gateways": [{"slot": 0, "url": "http://10.0.0.7:8082", "live": true}],
     "topics": [{"topic": "a", "partitions": [{"partition": 0,
                                               "leader": {"slot": 0, "url": "http://..."}}]},
                {"topic": "gone", "error": "unknown_topic"}],
     "groups": [{"group": "g1", "coordinator": {"slot": 1, "url": "http://..."}}]}

Any gateway answers it from the broker application's current assignment in the
store (``log_layout.brokers``). A standalone gateway (no ``gateway.broker.id``)
leads everything: ``generation`` is null and every leader and coordinator is
``{"slot": null, "url": null}``, where a null ``url`` means *the gateway you
asked*. Before the application's first assignment, leaders are null too and
``generation`` is null; clients ask again.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from conf.topic import validate_topic_name
from ingest_gateway.protocol.groups import validate_group_id
from ingest_gateway.errors import BadRequest
from ingest_gateway.http.access import allowed
from ingest_gateway.http.params import query_param
from ingest_gateway.http.topics import batcher_of, cluster_id, metadata_of
from ingest_gateway.server.topic_metadata import TopicMetadata
from log_layout import UnknownTopic

#: names asked about in one call, per list (a bound on the work one request causes)
MAX_NAMES = 1000
SELF = {"slot": None, "url": None}


def _names(request: Request, name: str, validate) -> list[str]:
    raw = query_param(request, name)
    if raw is None or raw == "":
        return []
    names = raw.split(",")
    if len(names) > MAX_NAMES:
        raise BadRequest(f"{name}= names {len(names)} entries; at most {MAX_NAMES}")
    for n in names:
        validate(n)
    return list(dict.fromkeys(names))


def _partition_counts(meta: TopicMetadata, topics: list[str]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for t in topics:
        try:
            out[t] = meta.topic(t).partitions
        except UnknownTopic:
            out[t] = None
    return out


async def metadata(request: Request) -> Response:
    topics = _names(request, "topics", validate_topic_name)
    groups = _names(request, "groups", validate_group_id)
    batcher = batcher_of(request)
    counts = await batcher.run_blocking(_partition_counts, metadata_of(request), topics)
    member = request.app.state.gateway.cluster
    a = member.assignment if member is not None else None
    doc: dict[str, Any] = {"cluster_id": await cluster_id(request)}
    if member is None:
        doc.update(generation=None, driver_epoch=None,
                   gateways=[{"slot": None, "url": None, "live": True}])
    else:
        doc.update(generation=a.generation if a else None,
                   driver_epoch=a.driver_epoch if a else None,
                   gateways=[{"slot": s, "url": url, "live": s in a.live}
                             for s, url in sorted(a.slots.items())] if a else
                   [{"slot": member.slot, "url": member.url, "live": True}])

    def leader(t: str, p: int) -> dict[str, Any] | None:
        return SELF if member is None else member.leader(t, p)

    doc["topics"] = [{"topic": t, "error": "not_authorized"}
                     if not allowed(request, "Describe", "Topic", t) else
                     {"topic": t, "error": "unknown_topic"} if n is None else
                     {"topic": t, "partitions": [{"partition": p, "leader": leader(t, p)}
                                                 for p in range(n)]}
                     for t, n in counts.items()]
    doc["groups"] = [{"group": g, "error": "not_authorized"}
                     if not allowed(request, "Describe", "Group", g) else
                     {"group": g, "coordinator": SELF if member is None
                      else member.coordinator(g)} for g in groups]
    return JSONResponse(doc)


def routes() -> list[BaseRoute]:
    return [Route("/metadata", metadata, methods=["GET"])]
