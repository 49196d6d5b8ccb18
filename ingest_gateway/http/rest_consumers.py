"""Kafka REST Proxy v2 consumer instances: consumers the gateway runs on behalf of
REST clients (state held by the gateway; an instance idle for its
consumer.instance.timeout.ms, default 5 minutes, is dropped and leaves its group,
whether or not requests arrive; an instance may ask for a shorter timeout, not a
longer one).

Mounted by ``app.create_app`` with every other route. Routes::

    POST   /consumers/{group}                                  create an instance
    POST   /consumers/{group}/instances/{instance}/subscription   {"topics": [...]} or
                                                           {"topic_pattern": "regex"}
    GET    /consumers/{group}/instances/{instance}/subscription
    DELETE /consumers/{group}/instances/{instance}/subscription   unsubscribe (leaves the group)
    GET    /consumers/{group}/instances/{instance}/records?timeout=&max_bytes=
    POST   /consumers/{group}/instances/{instance}/offsets      commit (given, or all consumed)
    GET    /consumers/{group}/instances/{instance}/offsets      committed offsets
    POST   /consumers/{group}/instances/{instance}/heartbeat
    DELETE /consumers/{group}/instances/{instance}              leave the group

Seek and manual assignment (``positions``, ``positions/beginning``,
``positions/end``, ``assignments``) are in ``rest_positions``.

**Formats.** An instance's ``format`` (binary, the default, json, arrow, avro,
jsonschema or protobuf) decides what its records are answered as, with that format's
Content-Type (``application/vnd.kafka.binary.v2+json``, ``...json.v2+json``,
``application/vnd.apache.arrow.stream``, ``...avro.v2+json``, ``...jsonschema.v2+json``,
``...protobuf.v2+json``). Avro, JSON Schema and Protobuf keys and values are decoded
from Confluent's wire format by the registry's schema of their id
(``server.schema_codec``: Avro's JSON encoding, Protobuf's canonical JSON, as REST
Proxy answers them); a record that cannot be decoded stops its partition as a record
that is not JSON does (below). An ``Accept`` naming another embedded
format answers 406 ``consumer_format_mismatch`` (40601), as REST Proxy does; a
generic one (``application/json``, ``application/vnd.kafka.v2+json``, ``*/*``) or
none gets the instance's format.

**Subscriptions.** ``topics``, ``topic_pattern`` (a regular expression matched
against whole topic names, as Kafka's; ``topic_pattern`` refuses the ones that could
backtrack without bound) and manual ``assignments`` are mutually exclusive: mixing them answers
409 ``subscription_conflict`` (40903). A new subscription replaces the previous
one of the same kind.

Instances (``server.rest_instances``) are kept in the consumer hub
(``server.consumer_hub``) of the gateway that created them; records are read with
its long-poll fetch and answered in the formats of ``record_docs`` (JSON, binary,
Arrow). In the broker application the instance's group calls (join, heartbeat,
commit, leave) go to the group's coordinator, this gateway or another, and follow
it when it moves; while none can be reached they answer 503 ``not_coordinator``
(retry), the instance keeping its membership.

**Membership while idle or waiting.** The hub heartbeats an idle subscribed instance
in the background, and a ``records`` long-poll heartbeats between heartbeat
intervals of its wait, so an instance keeps its partitions and positions for its
whole ``consumer.instance.timeout.ms`` (REST Proxy's name, 5 minutes), not its
group session. ``POST .../heartbeat`` (sparklog's own) still works, and is not needed.

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
import re
import time
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ingest_gateway.protocol.groups import validate_group_id
from ingest_gateway.errors import (BadRequest, ConsumerFormatMismatch, NotCoordinator,
                                   RebalanceInProgress, SubscriptionConflict,
                                   UnknownConsumerInstance, UnknownMemberId,
                                   UnsupportedContentType)
from ingest_gateway.http import rest_positions
from ingest_gateway.http.access import readable_topics, require_topics, visible_offsets
from ingest_gateway.http import bodies
from ingest_gateway.http.bodies import offsets_of, partitions_of, read_body_as
from ingest_gateway.http.topic_pattern import compile_topic_pattern
from ingest_gateway.http.params import parse_int
from ingest_gateway.http.record_docs import arrow_stream, not_json_response, records_json
from ingest_gateway.http.requests import (ARROW, BINARY_V2, FORMATS, JSON_V2, MAX_COUNT,
                                          MAX_WAIT_MS, V2_RESPONSE, group_of, hub_of,
                                          instance_of, int_q, metadata_of, offsets_doc,
                                          partitions_query, sync_instance)
from ingest_gateway.client.records import records_of
from ingest_gateway.server.codec import AVRO_V2, JSONSCHEMA_V2, PROTOBUF_V2
from ingest_gateway.server.consumer_hub import ConsumerHub
from ingest_gateway.server.schema_codec import V2_FORMATS, NotWireFormat, SchemaCodec
from ingest_gateway.server.schema_codec_errors import RecordNotDecodable
from ingest_gateway.server.rest_instances import Instance


#: the embedded formats with a schema (``server.schema_codec``), decoded by the registry
SCHEMA_MEDIA = {"avro": AVRO_V2, "jsonschema": JSONSCHEMA_V2, "protobuf": PROTOBUF_V2}
#: the media type of each instance format's records
MEDIA = {"json": JSON_V2, "binary": BINARY_V2, "arrow": ARROW, **SCHEMA_MEDIA}
#: Accept values that name no embedded format: the instance's own is answered
GENERIC = {"", "*/*", "application/*", "application/json", "application/vnd.kafka.v2+json",
           "application/vnd.kafka+json"}


def records_media(request: Request, inst: Instance) -> str:
    """The media type to answer ``inst``'s records with. Raises ConsumerFormatMismatch
    (406, 40601) when Accept names only other embedded formats, UnsupportedContentType
    when it names nothing this route answers."""
    own = MEDIA[inst.fmt]
    raw = request.headers.get("accept", "")
    named = [part.split(";")[0].strip().lower() for part in raw.split(",")]
    if own in named or any(n in GENERIC for n in named):
        return own
    asked = [n for n in named if n in FORMATS or re.fullmatch(
        r"application/vnd\.kafka\.[a-z]+\.v[0-9]+\+json", n)]
    if asked:
        raise ConsumerFormatMismatch(inst.name, inst.fmt, ", ".join(asked)[:200])
    raise UnsupportedContentType(raw[:200], tuple(MEDIA.values()))


def _positive_ms(name: str, raw: int | str | None, default: int | None,
                 hi: int = 2**31 - 1) -> int | None:
    """``raw`` (a number, or ASCII digits: the body's declaration checked them) within
    1 .. ``hi``, ``default`` when absent; raises BadRequest."""
    if raw is None:
        return default
    value = raw if isinstance(raw, int) else parse_int(raw)
    if not 1 <= value <= hi:
        raise BadRequest(f"{name} must be between 1 and {hi} ms, not {value}")
    return value


async def create_instance(request: Request) -> Response:
    group = group_of(request)
    body = await read_body_as(request, bodies.CreateInstance, empty=True)
    name = body.name or f"rest-{uuid.uuid4().hex[:12]}"
    validate_group_id(name)  # same alphabet: it becomes part of a URL
    fmt, reset = body.format, body.auto_offset_reset
    auto_commit = str(body.auto_commit_enable).lower() == "true"
    hub = hub_of(request)
    session = _positive_ms("session.timeout.ms", body.session_timeout_ms, None)
    if session is not None:  # refused now, not at the first subscription
        hub.coordinator.check_session_timeout(group, session)
    # shorter than the gateway's own timeout, never longer: it bounds the state held
    timeout = _positive_ms("consumer.instance.timeout.ms", body.consumer_instance_timeout_ms,
                           hub.instance_timeout_ms, hi=hub.instance_timeout_ms)
    try:
        hub.instance(group, name, touch=False)  # drops it first if it expired
        exists = True
    except UnknownConsumerInstance:
        exists = False
    if exists:
        return JSONResponse({"error_code": 40902, "error": "consumer_instance_exists",
                             "message": f"consumer instance {name!r} already exists in group "
                                        f"{group!r}"}, status_code=409)
    hub.instances[(group, name)] = Instance(group, name, hub.link(group), fmt, reset,
                                            auto_commit, session, timeout_ms=timeout,
                                            last_used_ms=hub.now_ms())
    base = str(request.base_url).rstrip("/")
    return JSONResponse({"instance_id": name,
                         "base_uri": f"{base}/consumers/{group}/instances/{name}"},
                        media_type=V2_RESPONSE)


async def subscribe_instance(request: Request) -> Response:
    """``{"topics": [...]}`` or ``{"topic_pattern": "..."}``; raises BadRequest,
    UnknownTopic (a listed topic), SubscriptionConflict (409: both given, or the
    instance has a manual assignment)."""
    hub, inst = instance_of(request)
    body = await read_body_as(request, bodies.Subscribe)
    topics, raw_pattern = body.topics, body.topic_pattern
    if (topics is None) == (raw_pattern is None):
        if topics is not None:
            raise SubscriptionConflict(inst.name, "topics", "topic_pattern")
        raise BadRequest("give topics (a non-empty list of topic names) or topic_pattern")
    pattern = compile_topic_pattern(raw_pattern) if raw_pattern is not None else None
    require_topics(request, "Read", topics or ())
    async with inst.lock:
        if inst.manual is not None:
            raise SubscriptionConflict(inst.name, "assignments",
                                       "topics" if topics is not None else "topic_pattern")
        for t in topics or ():
            await hub.run(metadata_of(request).topic, t)
        # a pattern matches only topics the principal may read, as Kafka's Metadata
        # leaves out the topics a client may not describe
        inst.pattern, inst.list_topics = pattern, (
            readable_topics(request, metadata_of(request).names) if pattern else None)
        inst.pattern_listed_at = None  # list now
        inst.topics = tuple(topics or ())
        await sync_instance(hub, inst)
    return Response(status_code=204)


async def get_subscription(request: Request) -> Response:
    _, inst = instance_of(request)
    return JSONResponse({"topics": list(inst.topics)}, media_type=V2_RESPONSE)


async def unsubscribe_instance(request: Request) -> Response:
    """Kafka's unsubscribe(): leave the group, forget topics, pattern and assignment."""
    hub, inst = instance_of(request)
    async with inst.lock:
        await hub.run(inst.unsubscribe)
    return Response(status_code=204)


async def instance_records(request: Request) -> Response:
    hub, inst = instance_of(request)
    fmt = records_media(request, inst)
    timeout = int_q(request, "timeout", 1000, 0, MAX_WAIT_MS)
    max_bytes = int_q(request, "max_bytes", 52_428_800, 1, 2**31 - 1)
    async with inst.lock:
        await sync_instance(hub, inst)
        if inst.auto_commit and inst.positions:
            # what the last answer handed out counts as processed now (Kafka's poll())
            await hub.run(lambda: inst.commit(None, quiet=True))
        got, errors = await _long_poll(hub, inst, timeout, max_bytes,
                                       int_q(request, "max_records", 500, 1, MAX_COUNT))
        for tp, e in errors.items():  # out of range: auto.offset.reset
            inst.positions[tp] = e.log_start if inst.auto_offset_reset == "earliest" else e.log_end
        # the answer is built (and encoded) before any position moves, and positions
        # move only past the records it holds
        if inst.fmt in SCHEMA_MEDIA:  # decoding may read schemas from the store
            response, after = await asyncio.to_thread(
                _records_answer, got, fmt,
                _schema_reader(request.app.state.gateway.schema_codec(), inst.fmt))
        else:
            response, after = _records_answer(got, fmt)
        inst.positions.update(after)
        inst.last_used_ms = hub.now_ms()  # a long-poll was use until its end
    return response


async def _long_poll(hub: ConsumerHub, inst: Instance, timeout_ms: int, max_bytes: int,
                     max_records: int) -> tuple[list, dict]:
    """Wait up to ``timeout_ms`` for records of the instance's partitions (the caller
    holds its lock). The wait is cut into heartbeat intervals with a heartbeat between
    them: the lock keeps the hub's background heartbeat out, and a long-poll longer than
    the session (a 30 s timeout, a 10 s session) must not cost the instance its
    membership. A heartbeat that brings a new assignment reads from its positions."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        positions = {tp: inst.positions[tp] for tp in inst.assignment}
        if not positions:
            return [], {}
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        wait_ms = min(remaining_ms, inst.heartbeat_interval_ms) if inst.member_id else \
            remaining_ms
        got, errors = await hub.fetch(positions, max_records=max_records, max_bytes=max_bytes,
                                      wait_ms=wait_ms, min_bytes=1)
        if got or errors or wait_ms >= remaining_ms:
            return got, errors
        await sync_instance(hub, inst)


def _schema_reader(codec: SchemaCodec, fmt: str) -> Any:
    """``records_json``'s counterpart for an Avro or JSON Schema instance: a partition's
    records decoded by the registry, up to the first that cannot be (its error)."""
    kind = V2_FORMATS[fmt]

    def read(topic: str, partition: int, batches: list) -> tuple[list, Any]:
        out = []
        for b in batches:
            for r in records_of(topic, partition, b):
                doc = {"topic": topic, "key": None, "value": None, "partition": partition,
                       "offset": r.offset, "timestamp": r.timestamp}
                for part in ("key", "value"):
                    try:
                        doc[part] = codec.decode(getattr(r, part), kind)
                    except NotWireFormat as e:
                        return out, RecordNotDecodable(topic, partition, r.offset, part,
                                                       fmt, str(e))
                out.append(doc)
        return out, None
    return read


def _records_answer(got: list, fmt: str, read: Any = None
                    ) -> tuple[Response, dict[tuple[str, int], int]]:
    """The answer to a records request and, per partition, the position after what it
    delivers (see the module doc: JSON stops a partition at a record that is not JSON,
    an embedded format with a schema at one it cannot decode); ``read``: a
    ``_schema_reader``, else ``records_json`` in ``fmt``."""
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
        docs, bad = read(tp[0], tp[1], [b]) if read is not None else \
            records_json(tp[0], tp[1], [b], FORMATS[fmt])
        out.extend(docs)
        if bad is None:
            after[tp] = nxt
        else:
            after[tp] = bad.offset
            stopped.add(tp)
            first_bad = first_bad or bad
    if not out and first_bad is not None:
        return not_json_response(first_bad), after
    return JSONResponse(out, media_type=fmt), after


async def instance_commit(request: Request) -> Response:
    hub, inst = instance_of(request)
    # an empty body (or no offsets) means "everything delivered"
    body = await read_body_as(request, bodies.InstanceCommit, empty=True)
    offsets = None
    if body.offsets is not None:
        offsets = offsets_of(body.offsets)
        require_topics(request, "Read", (t for t, _ in offsets))
    async with inst.lock:
        if inst.member_id is None and inst.manual is None:
            raise RebalanceInProgress(inst.group, inst.generation)
        await hub.run(lambda: inst.commit(offsets))
    return Response(status_code=204)


async def instance_committed(request: Request) -> Response:
    hub, inst = instance_of(request)
    tps = partitions_query(request)
    if tps is None:
        body = await read_body_as(request, bodies.InstanceCommitted, empty=True)
        if body.partitions is not None:
            tps = partitions_of(body.partitions)
    committed = await hub.run(inst.link.committed,
                              tps if tps is not None else inst.assignment)
    return JSONResponse(offsets_doc(visible_offsets(request, committed)), media_type=V2_RESPONSE)


async def instance_heartbeat(request: Request) -> Response:
    hub, inst = instance_of(request)
    async with inst.lock:
        await sync_instance(hub, inst)
    return JSONResponse({"generation": inst.generation, "member_id": inst.member_id,
                         "partitions": [{"topic": t, "partition": p} for t, p in inst.assignment]})


async def delete_instance(request: Request) -> Response:
    hub, inst = instance_of(request)
    async with inst.lock:
        if inst.auto_commit:
            await hub.run(lambda: inst.commit(None, quiet=True))
        try:
            if inst.member_id is not None:
                await hub.run(inst.link.leave, inst.member_id)
        except (UnknownMemberId, NotCoordinator):
            pass  # gone already, or unreachable: its session runs out at the coordinator
        hub.instances.pop((inst.group, inst.name), None)
        inst.link.close()
    return Response(status_code=204)


def routes() -> list[BaseRoute]:
    """The REST Proxy v2 consumer instance routes."""
    inst = "/consumers/{group}/instances/{instance}"
    return [
        Route("/consumers/{group}", create_instance, methods=["POST"]),
        # REST Proxy's reference writes it with a trailing slash; answered, not redirected
        Route("/consumers/{group}/", create_instance, methods=["POST"]),
        Route(f"{inst}/subscription", subscribe_instance, methods=["POST"]),
        Route(f"{inst}/subscription", get_subscription, methods=["GET"]),
        Route(f"{inst}/subscription", unsubscribe_instance, methods=["DELETE"]),
        Route(f"{inst}/records", instance_records, methods=["GET"]),
        *rest_positions.routes(inst),
        Route(f"{inst}/offsets", instance_commit, methods=["POST"]),
        Route(f"{inst}/offsets", instance_committed, methods=["GET"]),
        Route(f"{inst}/heartbeat", instance_heartbeat, methods=["POST"]),
        Route(inst, delete_instance, methods=["DELETE"]),
    ]
