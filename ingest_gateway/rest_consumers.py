"""Kafka REST Proxy v2 consumer instances: consumers the gateway runs on behalf of
REST clients (state held by the gateway; an instance idle for its
consumer.instance.timeout.ms, default 5 minutes, is dropped and leaves its group,
whether or not requests arrive; an instance may ask for a shorter timeout, not a
longer one).

Mounted with the other consumer routes by ``fetch.routes()``. Routes::

    POST   /consumers/{group}                                  create an instance
    POST   /consumers/{group}/instances/{instance}/subscription   {"topics": [...]}
    GET    /consumers/{group}/instances/{instance}/subscription
    GET    /consumers/{group}/instances/{instance}/assignments
    GET    /consumers/{group}/instances/{instance}/records?timeout=&max_bytes=
    POST   /consumers/{group}/instances/{instance}/positions    seek {"offsets": [...]}
    POST   /consumers/{group}/instances/{instance}/offsets      commit (given, or all consumed)
    GET    /consumers/{group}/instances/{instance}/offsets      committed offsets
    POST   /consumers/{group}/instances/{instance}/heartbeat
    DELETE /consumers/{group}/instances/{instance}              leave the group

Instances are kept in the consumer hub (``fetch.py``); records are read with its
long-poll fetch and answered in its formats (JSON, binary, Arrow; see ``fetch.py``).

**Positions move only past what an answer delivers.** In the JSON format a record
whose key or value is not strict JSON ends the answer's records of its partition
(Kafka's consumer does the same before a record it cannot deserialize); when it
is the first thing to hand out, the answer is 422 ``record_not_json`` naming topic,
partition and offset, and the position stays on it: read it in the binary format,
or seek past it (``/positions``). So neither the position nor an auto-commit ever
passes a record that was not delivered.

Client-given names are bounded: group ids and instance names 1 to 249 characters
of ``[a-zA-Z0-9._-]`` (Kafka's topic names), ``session.timeout.ms`` within
group.min/max.session.timeout.ms (400 ``invalid_session_timeout``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ingest_gateway.errors import BadRequest
from ingest_gateway.fetch import (ARROW, BINARY_V2, FORMATS, JSON_V2, MAX_COUNT, MAX_WAIT_MS,
                                  V2_RESPONSE, ConsumerHub, UnknownConsumerInstance, accept, arrow_stream, field, group_of,
                                  hub_of, int_q, not_json_response, offsets_doc,
                                  partitions_query, read_json, records_json, tp_list)
from ingest_gateway.groups import (GroupCoordinator, GroupError, MemberState,
                                   PartitionNotAssigned, RebalanceInProgress, UnknownMemberId,
                                   validate_group_id)
from ingest_gateway.params import parse_int


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
    last_used_ms: int = 0  # by the hub's clock
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


def _positive_ms(doc: Any, name: str, default: int | None, hi: int = 2**31 - 1) -> int | None:
    raw = field(doc, name, (int, str), default)
    if raw is None:
        return None
    try:  # a string must be plain ASCII digits: int() would take " 1", "1_0", "١"
        value = raw if isinstance(raw, int) else parse_int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be an integer of milliseconds, not {raw!r}") from None
    if not 1 <= value <= hi:
        raise BadRequest(f"{name} must be between 1 and {hi} ms, not {value}")
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
    if str(auto_commit).lower() not in ("true", "false"):
        raise BadRequest(f"auto.commit.enable must be true or false, not {auto_commit!r}")
    auto_commit = str(auto_commit).lower() == "true"
    hub = hub_of(request)
    session = _positive_ms(doc, "session.timeout.ms", None)
    if session is not None:  # refused now, not at the first subscription
        hub.coordinator.check_session_timeout(group, session)
    # shorter than the gateway's own timeout, never longer: it bounds the state held
    timeout = _positive_ms(doc, "consumer.instance.timeout.ms", hub.instance_timeout_ms,
                           hi=hub.instance_timeout_ms)
    try:
        hub.instance(group, name, touch=False)  # drops it first if it expired
        exists = True
    except UnknownConsumerInstance:
        exists = False
    if exists:
        return JSONResponse({"error_code": 40902, "error": "consumer_instance_exists",
                             "message": f"consumer instance {name!r} already exists in group "
                                        f"{group!r}"}, status_code=409)
    hub.instances[(group, name)] = Instance(group, name, fmt, reset, auto_commit, session,
                                            timeout_ms=timeout, last_used_ms=hub.now_ms())
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
        # the answer is built (and encoded) before any position moves, and positions
        # move only past the records it holds
        response, after = _records_answer(got, fmt)
        inst.positions.update(after)
        inst.last_used_ms = hub.now_ms()  # a long-poll was use until its end
    return response


def _records_answer(got: list, fmt: str) -> tuple[Response, dict[tuple[str, int], int]]:
    """The answer to a records request and, per partition, the position after what it
    delivers (see the module doc: JSON stops a partition at a record that is not JSON)."""
    if fmt == ARROW:
        return (Response(arrow_stream((b, {"topic": t, "partition": str(p)})
                                      for (t, p), b, _ in got), media_type=ARROW),
                {tp: nxt for tp, _b, nxt in got})
    out: list[dict[str, Any]] = []
    after: dict[tuple[str, int], int] = {}
    first_bad = None
    stopped = set()
    for tp, b, nxt in got:
        if tp in stopped:
            continue
        docs, bad = records_json(tp[0], tp[1], [b], FORMATS[fmt])
        out.extend(docs)
        if bad is None:
            after[tp] = nxt
        else:
            after[tp] = bad.offset
            stopped.add(tp)
            first_bad = first_bad or bad
    if not out and first_bad is not None:
        return not_json_response(first_bad), after
    return JSONResponse(out, media_type=V2_RESPONSE), after


async def seek_instance(request: Request) -> Response:
    """REST Proxy v2 ``POST .../positions``: the next offsets to fetch, e.g. past a
    record that is not JSON. Raises PartitionNotAssigned for a partition the instance
    does not own now, BadRequest for a negative offset."""
    hub, inst = _instance(request)
    doc = await read_json(request)
    offsets = tp_list(field(doc, "offsets", list), with_offset=True)
    async with inst.lock:
        await hub.run(inst.sync, hub)
        for (t, p), offset in offsets.items():
            if (t, p) not in inst.assignment:
                raise PartitionNotAssigned(inst.group, inst.member_id, t, p, inst.generation)
            if offset < 0:
                raise BadRequest(f"offset of {t}-{p} must not be negative, not {offset}")
        inst.positions.update(offsets)
    return Response(status_code=204)


async def instance_commit(request: Request) -> Response:
    hub, inst = _instance(request)
    doc = await read_json(request, empty={})
    if not isinstance(doc, dict):  # only an empty body means "everything delivered"
        raise BadRequest("the body must be a JSON object (or empty, to commit every "
                         "delivered record)")
    offsets = None
    if doc.get("offsets") is not None:
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
        if not isinstance(doc, dict):
            raise BadRequest("the body must be a JSON object (or empty)")
        if doc.get("partitions") is not None:
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
