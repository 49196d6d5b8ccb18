"""Kafka REST Proxy v2 consumer instances: consumers the gateway runs on behalf of
REST clients (state held by the gateway; an instance idle for its
consumer.instance.timeout.ms, default 5 minutes, is dropped).

Mounted with the other consumer routes by ``fetch.routes()``. Routes::

    POST   /consumers/{group}                                  create an instance
    POST   /consumers/{group}/instances/{instance}/subscription   {"topics": [...]}
    GET    /consumers/{group}/instances/{instance}/subscription
    GET    /consumers/{group}/instances/{instance}/assignments
    GET    /consumers/{group}/instances/{instance}/records?timeout=&max_bytes=
    POST   /consumers/{group}/instances/{instance}/offsets      commit (given, or all consumed)
    GET    /consumers/{group}/instances/{instance}/offsets      committed offsets
    POST   /consumers/{group}/instances/{instance}/heartbeat
    DELETE /consumers/{group}/instances/{instance}              leave the group

Instances are kept in the consumer hub (``fetch.py``); records are read with its
long-poll fetch and answered in its formats (JSON, binary, Arrow; see ``fetch.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ingest_gateway.errors import BadRequest
from ingest_gateway.fetch import (ARROW, BINARY_V2, FORMATS, JSON_V2, MAX_COUNT, MAX_WAIT_MS,
                                  V2_RESPONSE, ConsumerHub, accept, arrow_stream, field, group_of,
                                  hub_of, int_q, offsets_doc, partitions_query, read_json,
                                  records_json, tp_list)
from ingest_gateway.groups import (GroupCoordinator, GroupError, MemberState, RebalanceInProgress,
                                   UnknownMemberId, validate_group_id)


# -- REST Proxy v2 consumer instances --------------------------------------------------------
@dataclasses.dataclass
class Instance:
    """A consumer the gateway runs on behalf of a REST client (positions live here)."""

    group: str
    name: str
    fmt: str
    auto_offset_reset: str
    auto_commit: bool
    session_timeout_ms: int | None
    topics: tuple[str, ...] = ()
    member_id: str | None = None
    generation: int = -1
    assignment: tuple[tuple[str, int], ...] = ()
    positions: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)
    timeout_ms: int = 300_000  # consumer.instance.timeout.ms
    last_used: float = dataclasses.field(default_factory=time.monotonic)
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)

    def sync(self, hub: ConsumerHub) -> None:
        """Blocking: heartbeat, follow a rebalance (commit, rejoin), take a new assignment."""
        if not self.topics:
            return
        coord = hub.coordinator
        st = None
        if self.member_id is not None:
            try:
                st = coord.heartbeat(self.group, self.member_id, self.generation)
            except UnknownMemberId:  # expired: start over from the committed offsets
                self.member_id, self.generation, self.assignment = None, -1, ()
                self.positions.clear()
        if st is None:
            st = self._join(coord)
        if st.rebalance:
            if self.auto_commit:
                self.commit(hub, None, quiet=True)
            self.assignment = ()
            self.positions.clear()
            st = self._join(coord)
        if st.assigned and st.generation != self.generation:
            self.generation, self.assignment = st.generation, st.assignment
            self.positions = {}
            committed = coord.committed(self.group, self.assignment)
            for tp in self.assignment:
                if tp in committed:
                    self.positions[tp] = committed[tp]
                else:
                    start, end = hub.source.watermarks(tp)
                    self.positions[tp] = start if self.auto_offset_reset == "earliest" else end

    def _join(self, coord: GroupCoordinator) -> MemberState:
        st = coord.join(self.group, self.topics, member_id=self.member_id, client_id=self.name,
                        session_timeout_ms=self.session_timeout_ms)
        self.member_id = st.member_id
        return st

    def commit(self, hub: ConsumerHub, offsets: Mapping[tuple[str, int], int] | None, *,
               quiet: bool = False) -> None:
        todo = dict(self.positions) if offsets is None else dict(offsets)
        if not todo or self.member_id is None:
            return
        try:
            hub.coordinator.commit(self.group, todo, member_id=self.member_id,
                                   generation=self.generation)
        except GroupError:
            if not quiet:
                raise


def _positive_ms(doc: Any, name: str, default: int | None) -> int | None:
    raw = field(doc, name, (int, str), default)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer of milliseconds, not {raw!r}") from None
    if not 1 <= value <= 2**31 - 1:
        raise BadRequest(f"{name} must be between 1 and {2**31 - 1} ms, not {value}")
    return value


async def create_instance(request: Request) -> Response:
    group = group_of(request)
    doc = await read_json(request, empty={})
    name = field(doc, "name", str, None) or f"rest-{uuid.uuid4().hex[:12]}"
    validate_group_id(name)  # same alphabet: it becomes part of a URL
    fmt = field(doc, "format", str, "binary")
    if fmt not in ("json", "binary", "arrow"):
        raise BadRequest(f"format must be json, binary or arrow, not {fmt!r}")
    reset = field(doc, "auto.offset.reset", str, "latest")
    if reset not in ("earliest", "latest"):
        raise BadRequest(f"auto.offset.reset must be earliest or latest, not {reset!r}")
    auto_commit = field(doc, "auto.commit.enable", (str, bool), "true")
    auto_commit = str(auto_commit).lower() == "true"
    session = _positive_ms(doc, "session.timeout.ms", None)
    timeout = _positive_ms(doc, "consumer.instance.timeout.ms", 300_000)
    hub = hub_of(request)
    hub.expire_instances()
    if (group, name) in hub.instances:
        return JSONResponse({"error_code": 40902, "error": "consumer_instance_exists",
                             "message": f"consumer instance {name!r} already exists in group "
                                        f"{group!r}"}, status_code=409)
    hub.instances[(group, name)] = Instance(group, name, fmt, reset, auto_commit, session,
                                            timeout_ms=timeout)
    base = str(request.base_url).rstrip("/")
    return JSONResponse({"instance_id": name,
                         "base_uri": f"{base}/consumers/{group}/instances/{name}"},
                        media_type=V2_RESPONSE)


def _instance(request: Request) -> tuple[ConsumerHub, Instance]:
    hub = hub_of(request)
    return hub, hub.instance(group_of(request), request.path_params["instance"])


async def subscribe_instance(request: Request) -> Response:
    hub, inst = _instance(request)
    doc = await read_json(request)
    topics = field(doc, "topics", list)
    if not topics or not all(isinstance(t, str) for t in topics):
        raise BadRequest("topics must be a non-empty list of topic names")
    async with inst.lock:
        for t in topics:
            await hub.run(hub.log.topic, t)
        inst.topics = tuple(topics)
        await hub.run(inst.sync, hub)
    return Response(status_code=204)


async def get_subscription(request: Request) -> Response:
    _, inst = _instance(request)
    return JSONResponse({"topics": list(inst.topics)}, media_type=V2_RESPONSE)


async def get_assignments(request: Request) -> Response:
    hub, inst = _instance(request)
    async with inst.lock:
        await hub.run(inst.sync, hub)
    return JSONResponse({"partitions": [{"topic": t, "partition": p} for t, p in inst.assignment]},
                        media_type=V2_RESPONSE)


async def instance_records(request: Request) -> Response:
    hub, inst = _instance(request)
    fmt = accept(request, default={"json": JSON_V2, "binary": BINARY_V2, "arrow": ARROW}[inst.fmt])
    timeout = int_q(request, "timeout", 1000, 0, MAX_WAIT_MS)
    max_bytes = int_q(request, "max_bytes", 52_428_800, 1, 2**31 - 1)
    async with inst.lock:
        await hub.run(inst.sync, hub)
        if inst.auto_commit and inst.positions:
            # what the last answer handed out counts as processed now (Kafka's poll())
            await hub.run(lambda: inst.commit(hub, None, quiet=True))
        positions = {tp: inst.positions[tp] for tp in inst.assignment}
        got, errors = (await hub.fetch(positions, max_records=int_q(request, "max_records", 500,
                                                                       1, MAX_COUNT),
                                       max_bytes=max_bytes, wait_ms=timeout, min_bytes=1)
                       if positions else ([], {}))
        for tp, e in errors.items():  # out of range: auto.offset.reset
            inst.positions[tp] = e.log_start if inst.auto_offset_reset == "earliest" else e.log_end
        for tp, _b, nxt in got:
            inst.positions[tp] = nxt
    if fmt == ARROW:
        return Response(arrow_stream((b, {"topic": t, "partition": str(p)})
                                     for (t, p), b, _ in got), media_type=ARROW)
    out = []
    for (t, p), b, _ in got:
        out.extend(records_json(t, p, [b], FORMATS[fmt]))
    return JSONResponse(out, media_type=V2_RESPONSE)


async def instance_commit(request: Request) -> Response:
    hub, inst = _instance(request)
    doc = await read_json(request, empty={})
    offsets = None
    if isinstance(doc, dict) and doc.get("offsets") is not None:
        offsets = tp_list(doc["offsets"], with_offset=True)
    async with inst.lock:
        if inst.member_id is None:
            raise RebalanceInProgress(inst.group, inst.generation)
        await hub.run(lambda: inst.commit(hub, offsets))
    return Response(status_code=204)


async def instance_committed(request: Request) -> Response:
    hub, inst = _instance(request)
    tps = partitions_query(request)
    if tps is None:
        doc = await read_json(request, empty={})
        if isinstance(doc, dict) and doc.get("partitions") is not None:
            tps = tp_list(doc["partitions"], with_offset=False)
    committed = await hub.run(hub.coordinator.committed, inst.group,
                                              tps if tps is not None else inst.assignment)
    return JSONResponse(offsets_doc(committed), media_type=V2_RESPONSE)


async def instance_heartbeat(request: Request) -> Response:
    hub, inst = _instance(request)
    async with inst.lock:
        await hub.run(inst.sync, hub)
    return JSONResponse({"generation": inst.generation, "member_id": inst.member_id,
                         "partitions": [{"topic": t, "partition": p} for t, p in inst.assignment]})


async def delete_instance(request: Request) -> Response:
    hub, inst = _instance(request)
    async with inst.lock:
        if inst.auto_commit:
            await hub.run(lambda: inst.commit(hub, None, quiet=True))
        if inst.member_id is not None:
            try:
                await hub.run(hub.coordinator.leave, inst.group, inst.member_id)
            except UnknownMemberId:
                pass
        hub.instances.pop((inst.group, inst.name), None)
    return Response(status_code=204)
