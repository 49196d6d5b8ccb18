"""The group protocol routes of the gateway, for clients that keep their own
positions (the Python Consumer).

Mounted by ``app.create_app`` with every other route. Routes::

    POST   /groups/{group}/members                   join or rejoin -> member state
    POST   /groups/{group}/members/{member}/heartbeat  {"generation": g} -> member state
    DELETE /groups/{group}/members/{member}          leave
    POST   /groups/{group}/offsets                   commit {"member_id", "generation", "offsets"}
    GET    /groups/{group}/offsets                   committed offsets
    GET    /groups   /groups/{group}                 list, describe (members, lag)

The coordinator lives in the consumer hub (``server.consumer_hub``); group errors
are mapped to HTTP in the one table (``http.errors``). In the broker application
only a group's coordinator (``log_layout.brokers.coordinator_partition``) answers
join, heartbeat, leave and commit: any other gateway answers 503
``not_coordinator`` with a ``coordinator`` field (``{"slot", "url"}``, or null
before any assignment). Committed offsets, the group list and describe are read
from the store and answered by every gateway. Lookups (heartbeat, leave,
committed offsets, describe) of a group nobody joined keep no state (see
``server.groups.coordinator``). Bounds on what
a client gives: ``session_timeout_ms`` within group.min/max.session.timeout.ms (400
``invalid_session_timeout``), ``rebalance_timeout_ms`` 1 to 2^31-1, ``client_id`` at
most 255 characters and commit ``metadata`` at most 4096 (400 ``field_too_long``);
group ids 1 to 249 characters of ``[a-zA-Z0-9._-]``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from conf.errors import SparklogError
from ingest_gateway.protocol.groups import MemberState
from ingest_gateway.errors import BadRequest
from ingest_gateway.http.access import require_topics, visible, visible_offsets
from ingest_gateway.http import bodies
from ingest_gateway.http.bodies import offsets_of, read_body_as
from ingest_gateway.http.requests import group_of, hub_of, offsets_doc, partitions_query


# -- the group protocol ----------------------------------------------------------------------
def _state(st: MemberState) -> Response:
    return JSONResponse(st.to_json())


def _coordinated_here(request: Request) -> str:
    """The route's group, after checking this gateway coordinates it: in the broker
    application another gateway may (503 ``not_coordinator`` naming it)."""
    group = group_of(request)
    hub_of(request).check_coordinator(group)
    return group


async def join_group(request: Request) -> Response:
    group = _coordinated_here(request)
    body = await read_body_as(request, bodies.JoinGroup)
    topics = body.topics
    kw = dict(member_id=body.member_id, client_id=body.client_id,
              strategies=tuple(body.strategies), session_timeout_ms=body.session_timeout_ms,
              rebalance_timeout_ms=body.rebalance_timeout_ms)
    hub = hub_of(request)
    try:
        st = await hub.run(lambda: hub.coordinator.join(group, topics, **kw))
    except ValueError as e:
        if isinstance(e, SparklogError):
            raise
        raise BadRequest(str(e)) from None
    return _state(st)


async def heartbeat(request: Request) -> Response:
    group = _coordinated_here(request)
    generation = (await read_body_as(request, bodies.Heartbeat, empty=True)).generation
    hub = hub_of(request)
    member = request.path_params["member"]
    st = await hub.run(hub.coordinator.heartbeat, group, member, generation)
    return _state(st)


async def leave_group(request: Request) -> Response:
    group = _coordinated_here(request)
    hub = hub_of(request)
    await hub.run(hub.coordinator.leave, group, request.path_params["member"])
    return Response(status_code=204)


async def commit_offsets(request: Request) -> Response:
    group = _coordinated_here(request)
    body = await read_body_as(request, bodies.CommitGroupOffsets)
    offsets = offsets_of(body.offsets)
    require_topics(request, "Read", (t for t, _ in offsets))
    hub = hub_of(request)
    await hub.run(lambda: hub.coordinator.commit(
        group, offsets, member_id=body.member_id, generation=body.generation,
        metadata=body.metadata))
    return Response(status_code=204)


async def get_committed(request: Request) -> Response:
    group = group_of(request)
    hub = hub_of(request)
    tps = partitions_query(request)
    committed = await hub.run(hub.coordinator.committed, group, tps)
    return JSONResponse(offsets_doc(visible_offsets(request, committed)))


async def list_groups(request: Request) -> Response:
    hub = hub_of(request)
    return JSONResponse({"groups": visible(request, "Group",
                                           await hub.run(hub.coordinator.groups))})


async def describe_group(request: Request) -> Response:
    group = group_of(request)
    hub = hub_of(request)
    # the coordinator reads a group it does not hold from the store (without keeping it)
    return JSONResponse((await hub.run(hub.coordinator.describe, group)).to_json())


def routes() -> list[BaseRoute]:
    """The group protocol routes."""
    return [
        Route("/groups", list_groups, methods=["GET"]),
        Route("/groups/{group}", describe_group, methods=["GET"]),
        Route("/groups/{group}/members", join_group, methods=["POST"]),
        Route("/groups/{group}/members/{member}/heartbeat", heartbeat, methods=["POST"]),
        Route("/groups/{group}/members/{member}", leave_group, methods=["DELETE"]),
        Route("/groups/{group}/offsets", commit_offsets, methods=["POST"]),
        Route("/groups/{group}/offsets", get_committed, methods=["GET"]),
    ]
