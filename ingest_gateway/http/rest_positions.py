"""REST Proxy v2 consumer instances: seek and manual assignment.

Routes (``inst`` = ``/consumers/{group}/instances/{instance}``)::

    POST   {inst}/positions            {"offsets": [{"topic", "partition", "offset"}]}
    POST   {inst}/positions/beginning  {"partitions": [{"topic", "partition"}]}
    POST   {inst}/positions/end        {"partitions": [{"topic", "partition"}]}
    POST   {inst}/assignments          {"partitions": [{"topic", "partition"}]}
    GET    {inst}/assignments          the partitions the instance owns now

A seek moves the position the next ``records`` request reads from (Kafka's
``seek``, ``seekToBeginning``, ``seekToEnd``): only of partitions the instance
owns now (409 ``partition_not_assigned``, 40913), to an offset from 0 to 2^63-1
(400 otherwise; past the log end is allowed and answered by
``auto.offset.reset`` at the next read, as Kafka does). ``assignments`` is
Kafka's ``assign()``: the instance owns exactly those partitions, with no group
membership (409 ``subscription_conflict`` if it subscribed), positions from the
group's committed offsets or ``auto.offset.reset``; every partition must exist
(404 ``unknown_topic`` 40401, ``unknown_partition`` 40402). Nothing changes
unless the whole request is valid.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ingest_gateway.errors import BadRequest, PartitionNotAssigned, SubscriptionConflict
from ingest_gateway.http.access import require_topics
from ingest_gateway.http import bodies
from ingest_gateway.http.bodies import offsets_of, partitions_of, read_body_as
from ingest_gateway.http.requests import V2_RESPONSE, instance_of, metadata_of, sync_instance
from ingest_gateway.server.rest_instances import Instance
from log_layout import UnknownPartition

MAX_OFFSET = 2**63 - 1
#: partitions named in one request (a bound on the store reads one request causes)
MAX_PARTITIONS = 10_000


def _owned(inst: Instance, tps) -> None:
    for t, p in tps:
        if (t, p) not in inst.assignment:
            raise PartitionNotAssigned(inst.group, inst.member_id, t, p, inst.generation)


def _partitions(request: Request, body: bodies.Partitions) -> list[tuple[str, int]]:
    tps = partitions_of(body.partitions)
    if len(tps) > MAX_PARTITIONS:
        raise BadRequest(f"at most {MAX_PARTITIONS} partitions in one request")
    require_topics(request, "Read", (t for t, _ in tps))
    return tps  # type: ignore[return-value]


async def seek(request: Request) -> Response:
    """Raises PartitionNotAssigned, BadRequest (an offset outside 0 .. 2^63-1)."""
    hub, inst = instance_of(request)
    offsets = offsets_of((await read_body_as(request, bodies.Offsets)).offsets)
    require_topics(request, "Read", (t for t, _ in offsets))
    for (t, p), offset in offsets.items():  # type: ignore[union-attr]
        if not 0 <= offset <= MAX_OFFSET:
            raise BadRequest(f"offset of {t[:100]}-{p} must be 0 to {MAX_OFFSET}, not {offset}")
    async with inst.lock:
        await sync_instance(hub, inst)
        _owned(inst, offsets)
        inst.positions.update(offsets)  # type: ignore[arg-type]
    return Response(status_code=204)


async def _seek_to(request: Request, end: bool) -> Response:
    hub, inst = instance_of(request)
    tps = _partitions(request, await read_body_as(request, bodies.Partitions))
    async with inst.lock:
        await sync_instance(hub, inst)
        _owned(inst, tps)
        marks = await hub.run(lambda: {tp: hub.source.watermarks(tp) for tp in tps})
        inst.positions.update({tp: marks[tp][1 if end else 0] for tp in tps})
    return Response(status_code=204)


async def seek_to_beginning(request: Request) -> Response:
    """Kafka's seekToBeginning: the log start offset of each partition."""
    return await _seek_to(request, end=False)


async def seek_to_end(request: Request) -> Response:
    """Kafka's seekToEnd: the high watermark of each partition."""
    return await _seek_to(request, end=True)


async def assign(request: Request) -> Response:
    """Raises SubscriptionConflict, UnknownTopic, UnknownPartition, BadRequest."""
    hub, inst = instance_of(request)
    tps = _partitions(request, await read_body_as(request, bodies.Partitions))

    def check() -> None:
        for t, p in tps:
            count = metadata_of(request).partition_count(t)  # UnknownTopic / InvalidTopicName
            if not 0 <= p < count:
                raise UnknownPartition(t, p, count)

    async with inst.lock:
        kind = inst.subscription_kind()
        if kind not in (None, "assignments"):
            raise SubscriptionConflict(inst.name, kind, "assignments")
        await hub.run(check)
        await hub.run(inst.assign, tps, hub.source.watermarks)
    return Response(status_code=204)


async def get_assignments(request: Request) -> Response:
    hub, inst = instance_of(request)
    async with inst.lock:
        await sync_instance(hub, inst)
    return JSONResponse({"partitions": [{"topic": t, "partition": p} for t, p in inst.assignment]},
                        media_type=V2_RESPONSE)


def routes(inst: str) -> list[BaseRoute]:
    """The seek and assignment routes under the instance path ``inst``."""
    return [
        Route(f"{inst}/positions", seek, methods=["POST"]),
        Route(f"{inst}/positions/beginning", seek_to_beginning, methods=["POST"]),
        Route(f"{inst}/positions/end", seek_to_end, methods=["POST"]),
        Route(f"{inst}/assignments", assign, methods=["POST"]),
        Route(f"{inst}/assignments", get_assignments, methods=["GET"]),
    ]
