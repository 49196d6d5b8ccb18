"""Consumer endpoints of the gateway: the consumer hub, shared helpers and long-poll fetch.

Mounted with ``create_app(settings, log, extra_routes=fetch.routes())``; :func:`routes`
assembles every consumer route: the fetch routes here, the group protocol
(``group_routes.py``) and the REST Proxy v2 consumer instances (``rest_consumers.py``),
which share this module's hub, request helpers and encoders. Routes here::

    GET    /topics/{topic}/partitions/{partition}/messages?offset=&count=&max_bytes=&wait_ms=&min_bytes=
    GET    /topics/{topic}/partitions/{partition}/offsets          beginning_offset, end_offset
    POST   /fetch                         many partitions at once (the Python Consumer's fetch)
    GET    /fetch/waiting                 how many fetches are parked (operations, tests)

**Formats** (by ``Accept``): ``application/vnd.kafka.json.v2+json`` (keys and
values are JSON text, as the produce path stores them), ``...binary.v2+json``
(base64) — both answer the REST Proxy's ``[{"topic", "key", "value",
"partition", "offset", "timestamp", "headers"}]`` — or
``application/vnd.apache.arrow.stream``: the records as an Arrow IPC stream of
the segment schema, no per-record work on either side. ``POST /fetch`` always
answers Arrow; each record batch carries custom metadata ``topic``,
``partition`` and ``next_offset`` (an empty batch with ``error`` reports an
offset out of range, with ``log_start_offset`` and ``high_watermark``).

**Long-poll.** A fetch registers a waiter for its partitions *before* it reads
the store, then reads; if fewer than ``min_bytes`` are available it sleeps on
the waiter, which the broker's commit listener completes right after the flush
that commits new data (no polling of the store), and reads again; after
``wait_ms`` it answers with what it has. An offset outside ``[log start, high
watermark]`` answers 416 with ``log_start_offset`` and ``high_watermark``.

**JSON answers hold only strict JSON.** A stored key or value that is not (NaN,
1e400, a lone surrogate, bytes written through the binary or Arrow formats) ends
the answer before it; if it is the first record, the answer is 422
``record_not_json`` naming topic, partition and offset (Kafka's consumer raises
RecordDeserializationException there): read it in the binary format or skip it.

Group errors map to HTTP here (added to the app's one table): unknown member
404, illegal generation / rebalance in progress / partition not assigned /
inconsistent protocol 409, invalid group id, commit offset, session timeout or
a client string too long 400.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import logging
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from conf.topic import validate_topic_name
from ingest_gateway import app as _app
from ingest_gateway.consumer import DirectSource, records_of
from ingest_gateway.errors import BadRequest, RecordNotJson, UnsupportedContentType
from ingest_gateway.params import parse_int, query_param
from ingest_gateway.groups import (GroupCoordinator, GroupError, GroupFieldTooLong,
                                   IllegalGeneration, InconsistentGroupProtocol,
                                   InvalidCommitOffset, InvalidGroupId, InvalidSessionTimeout,
                                   PartitionNotAssigned, RebalanceInProgress, UnknownGroup,
                                   UnknownMemberId, validate_group_id)
from log_layout import OffsetOutOfRange, wall_clock_ms

if TYPE_CHECKING:
    from ingest_gateway.rest_consumers import Instance

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
ARROW = "application/vnd.apache.arrow.stream"
V2_RESPONSE = "application/vnd.kafka.v2+json"
FORMATS = {JSON_V2: "json", BINARY_V2: "binary", ARROW: "arrow"}
MAX_WAIT_MS = 300_000
MAX_COUNT = 1_000_000

_app.ERRORS.update({
    UnknownMemberId: (404, 40403),  # REST Proxy: consumer instance not found
    UnknownGroup: (404, 40404),
    IllegalGeneration: (409, 40911),
    RebalanceInProgress: (409, 40912),
    PartitionNotAssigned: (409, 40913),
    InconsistentGroupProtocol: (409, 40914),
    InvalidGroupId: (400, 40011),
    InvalidCommitOffset: (400, 40012),
    InvalidSessionTimeout: (400, 40013),  # Kafka: INVALID_SESSION_TIMEOUT (26)
    GroupFieldTooLong: (400, 40014),
    RecordNotJson: (422, 42206),  # Kafka: RecordDeserializationException
})
log = logging.getLogger("sparklog.gateway")
#: how often the hub drops idle REST instances and expired group members when no
#: request arrives (the REST Proxy's expiration thread also looks every second)
EXPIRY_INTERVAL_S = 1.0


class UnknownConsumerInstance(GroupError, LookupError):
    code = "unknown_consumer_instance"

    def __init__(self, group: str, instance: str):
        self.group, self.instance = group, instance
        super().__init__(f"consumer instance {instance!r} of group {group!r} does not exist")


_app.ERRORS[UnknownConsumerInstance] = (404, 40403)


# -- the hub: waiters, one DirectSource, the coordinator, REST instances ------------------
class ConsumerHub:
    """Per-app consumer state. Created lazily on the event loop at the first request.

    Its clock (``now_ms``: group sessions, instance idleness) is ``app.state.now_ms``
    when set (tests set one), else the wall clock. Every EXPIRY_INTERVAL_S a task
    drops idle REST instances and expired group members, so neither waits for a
    request to arrive.
    """

    def __init__(self, app_state: Any):
        self.log = app_state.log
        self.broker = app_state.broker
        settings = app_state.settings
        # Reads share one DirectSource: its per-partition segment cache is a dict whose
        # entries are replaced whole, so concurrent fetches need no lock.
        self.source = DirectSource(self.log)
        # Store I/O of consumers runs on threads of its own, so a burst of fetches
        # never delays the broker's flushes (which have the broker's pool).
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="sparklog-consume")
        gw = settings.gateway
        self.now_ms: Any = getattr(app_state, "now_ms", None) or wall_clock_ms
        self.coordinator = GroupCoordinator(
            self.log, now_ms=self.now_ms, default_session_timeout_ms=gw.session_timeout_ms,
            min_session_timeout_ms=gw.group_min_session_timeout_ms,
            max_session_timeout_ms=gw.group_max_session_timeout_ms)
        #: consumer.instance.timeout.ms: the default and the longest an instance may ask for
        self.instance_timeout_ms = gw.consumer_instance_timeout_ms
        self.waiters: dict[tuple[str, int], set[asyncio.Future]] = {}
        self.instances: dict[tuple[str, str], Instance] = {}
        self.broker.add_commit_listener(self.committed)
        self._expiry = asyncio.get_running_loop().create_task(self._expire_periodically())

    # -- long-poll ------------------------------------------------------------------
    def committed(self, topic: str, partition: int, high_watermark: int) -> None:
        """The broker's commit listener (on the loop): wake fetches of this partition."""
        for fut in self.waiters.pop((topic, partition), ()):
            if not fut.done():
                fut.set_result(high_watermark)

    def _register(self, tps: Iterable[tuple[str, int]]) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        for tp in tps:
            self.waiters.setdefault(tp, set()).add(fut)
        return fut

    def _unregister(self, fut: asyncio.Future, tps: Iterable[tuple[str, int]]) -> None:
        for tp in tps:
            s = self.waiters.get(tp)
            if s is not None:
                s.discard(fut)
                if not s:
                    self.waiters.pop(tp, None)

    async def run(self, fn: Any, *args: Any) -> Any:
        """Run blocking store work (reads, group commits) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def _read(self, positions: Mapping[tuple[str, int], int], max_records: int):
        return self.source.read_available(positions, max_records)

    async def fetch(self, positions: Mapping[tuple[str, int], int], *, max_records: int,
                    max_bytes: int, wait_ms: int, min_bytes: int):
        """Long-poll read: ((tp, batch, next), ...), {tp: OffsetOutOfRange}."""
        deadline = time.monotonic() + wait_ms / 1000
        tps = list(positions)
        while True:
            fut = self._register(tps)
            try:
                got, errors = await self.run(self._read, positions, max_records)
                got = _cut(got, max_bytes)
                size = sum(b.nbytes for _, b, _ in got)
                remaining = deadline - time.monotonic()
                if errors or remaining <= 0 or (size >= min_bytes and (got or min_bytes <= 0)):
                    return got, errors
                try:
                    await asyncio.wait_for(asyncio.shield(fut), remaining)
                except asyncio.TimeoutError:
                    got, errors = await self.run(self._read, positions, max_records)
                    return _cut(got, max_bytes), errors
            finally:
                self._unregister(fut, tps)

    # -- REST instances ------------------------------------------------------------------
    def instance(self, group: str, name: str, *, touch: bool = True) -> "Instance":
        """A live instance (``touch``: counting as a use); raises UnknownConsumerInstance
        (also for one idle past its timeout that the periodic expiry has not dropped yet)."""
        inst = self.instances.get((group, name))
        now = self.now_ms()
        if inst is not None and self._idle(inst, now):
            self._drop(inst)
            inst = None
        if inst is None:
            raise UnknownConsumerInstance(group, name)
        if touch:
            inst.last_used_ms = now
        return inst

    def _idle(self, inst: "Instance", now: int) -> bool:
        # an instance in a request (its lock held, e.g. a long-poll) is in use
        return now - inst.last_used_ms >= inst.timeout_ms and not inst.lock.locked()

    def _drop(self, inst: "Instance") -> None:
        """Forget ``inst`` and leave its group in the background. No auto-commit: its
        client never came back to show it processed what it was last handed, so those
        records are read again by the group (at least once)."""
        if self.instances.get((inst.group, inst.name)) is inst:
            del self.instances[(inst.group, inst.name)]
        if inst.member_id is not None:
            asyncio.get_running_loop().run_in_executor(
                self.executor, _leave_quietly, self.coordinator, inst.group, inst.member_id)

    def expire_instances(self) -> list[tuple[str, str]]:
        """Drop instances idle for their ``consumer.instance.timeout.ms`` (the REST
        Proxy does the same), leaving their groups; returns their (group, name)."""
        now = self.now_ms()
        gone = [inst for inst in self.instances.values() if self._idle(inst, now)]
        for inst in gone:
            self._drop(inst)
        return [(inst.group, inst.name) for inst in gone]

    async def _expire_periodically(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_INTERVAL_S)
            try:
                self.expire_instances()
                await self.run(self.coordinator.expire)
            except Exception:  # noqa: BLE001 - a store hiccup must not end expiry for good
                log.exception("expiring consumer instances and group members failed")


def _leave_quietly(coordinator: GroupCoordinator, group: str, member_id: str) -> None:
    try:
        coordinator.leave(group, member_id)
    except GroupError:
        pass  # already expired


def _cut(got, max_bytes: int):
    """Keep whole batches while under ``max_bytes`` (at least one record, as Kafka)."""
    out, size = [], 0
    for tp, batch, nxt in got:
        if out and size + batch.nbytes > max_bytes:
            per = max(1, batch.nbytes // max(1, batch.num_rows))
            rows = (max_bytes - size) // per
            if rows > 0:
                part = batch.slice(0, rows)
                out.append((tp, part, int(part.column(0)[-1].as_py()) + 1))
            break
        if not out and batch.nbytes > max_bytes and batch.num_rows > 1:
            per = max(1, batch.nbytes // batch.num_rows)
            rows = max(1, max_bytes // per)
            if rows < batch.num_rows:
                part = batch.slice(0, rows)
                out.append((tp, part, int(part.column(0)[-1].as_py()) + 1))
                break
        out.append((tp, batch, nxt))
        size += batch.nbytes
    return out


def hub_of(request: Request) -> ConsumerHub:
    state = request.app.state
    hub = getattr(state, "consumer_hub", None)
    if hub is None:
        hub = state.consumer_hub = ConsumerHub(state)
    return hub


# -- parameters and encoders ----------------------------------------------------------------
def int_q(request: Request, name: str, default: int | None, lo: int, hi: int) -> int:
    value = _app._int_param(name, query_param(request, name), lo=lo, hi=hi)
    if value is None:
        if default is None:
            raise BadRequest(f"query parameter {name!r} is required")
        return default
    return value


def accept(request: Request, default: str = BINARY_V2) -> str:
    raw = request.headers.get("accept", "")
    for part in raw.split(","):
        mt = part.split(";")[0].strip()
        if mt in FORMATS:
            return mt
        if mt in ("application/json", "application/vnd.kafka.v2+json"):
            return JSON_V2
    if raw and "*/*" not in raw:
        raise UnsupportedContentType(raw, tuple(FORMATS))
    return default


def _not_a_json_number(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e400: Python reads inf, which JSON cannot write back
        raise ValueError(f"{text[:40]} is past the range of a double")
    return value


#: an escaped UTF-16 surrogate (``\ud800``): paired it is fine, alone it cannot be UTF-8
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
#: values nested deeper than this are test-encoded (json's C code recurses)
_DEEP = 64


def _json_value(raw: bytes | None, topic: str, partition: int, offset: int, part: str) -> Any:
    """``raw`` (a stored key or value) as JSON that the answer can write back.

    Strict JSON only: NaN/Infinity, numbers past a double and lone surrogates
    parse in Python but cannot be written to a JSON answer. Raises RecordNotJson.
    """
    if raw is None:
        return None
    try:
        # decoded first: json.loads(bytes) would also guess UTF-16 and UTF-32
        value = json.loads(raw.decode("utf-8"), parse_constant=_not_a_json_number,
                           parse_float=_finite_float)
        if _SURROGATE_ESCAPE.search(raw) or raw.count(b"[") + raw.count(b"{") > _DEEP:
            # the rare values that might parse but not encode: try it, as the answer will
            json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, RecursionError) as e:  # UnicodeError is a ValueError
        reason = "nested too deep" if isinstance(e, RecursionError) else str(e)[:200]
        raise RecordNotJson(topic, partition, offset, part, reason) from None
    return value


def _b64(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode()


def records_json(topic: str, partition: int, batches: Sequence[pa.RecordBatch], fmt: str,
                 ) -> tuple[list[dict[str, Any]], RecordNotJson | None]:
    """REST Proxy record documents of ``batches`` (``fmt`` json or binary).

    Up to the first record that cannot be answered as JSON, as Kafka's consumer
    hands out the records before one it cannot deserialize: returns the documents
    before it and its RecordNotJson (None when all could be).
    """
    out = []
    for b in batches:
        for r in records_of(topic, partition, b):
            if fmt == "json":
                try:
                    key = _json_value(r.key, topic, partition, r.offset, "key")
                    value = _json_value(r.value, topic, partition, r.offset, "value")
                except RecordNotJson as e:
                    return out, e
                headers = None if r.headers is None else [
                    {"key": k, "value": None if v is None else v.decode("utf-8", "replace")}
                    for k, v in r.headers]
            else:
                key, value = _b64(r.key), _b64(r.value)
                headers = None if r.headers is None else [{"key": k, "value": _b64(v)}
                                                          for k, v in r.headers]
            doc = {"topic": topic, "key": key, "value": value, "partition": partition,
                   "offset": r.offset, "timestamp": r.timestamp}
            if headers:
                doc["headers"] = headers
            out.append(doc)
    return out, None


def not_json_response(e: RecordNotJson) -> Response:
    """422 naming the record (topic, partition, offset), as a 416 names its offset."""
    body = _app.error_body(e)
    body.update(topic=e.topic, partition=e.partition, offset=e.offset)
    return JSONResponse(body, status_code=_app.status_of(e)[0])


def arrow_stream(items: Iterable[tuple[pa.RecordBatch, Mapping[str, str] | None]]) -> bytes:
    from log_layout import SEGMENT_SCHEMA

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SEGMENT_SCHEMA) as w:
        for batch, meta in items:
            if meta is None:
                w.write_batch(batch)
            else:
                w.write_batch(batch, custom_metadata=meta)
    return sink.getvalue().to_pybytes()


def _out_of_range(e: OffsetOutOfRange) -> Response:
    body = _app.error_body(e)
    body.update(topic=e.topic, partition=e.partition, offset=e.offset,
                log_start_offset=e.log_start, high_watermark=e.log_end)
    return JSONResponse(body, status_code=416)


def _batches_response(topic: str, partition: int, batches: list[pa.RecordBatch], fmt: str,
                      ) -> Response:
    if fmt == ARROW:
        return Response(arrow_stream((b, None) for b in batches), media_type=ARROW)
    docs, bad = records_json(topic, partition, batches, FORMATS[fmt])
    if bad is not None and not docs:  # the first record itself: nothing to hand out
        return not_json_response(bad)
    return JSONResponse(docs, media_type=V2_RESPONSE)


# -- fetch routes ------------------------------------------------------------------------------
async def get_messages(request: Request) -> Response:
    """REST Proxy v2 ``GET .../messages`` plus long-poll (``wait_ms``, ``min_bytes``)."""
    topic = validate_topic_name(request.path_params["topic"])
    partition = _app._partition_param(topic, request.path_params["partition"])
    fmt = accept(request)
    offset = int_q(request, "offset", None, 0, 2**63 - 1)
    count = int_q(request, "count", 1, 1, MAX_COUNT)
    max_bytes = int_q(request, "max_bytes", 52_428_800, 1, 2**31 - 1)
    wait_ms = int_q(request, "wait_ms", 0, 0, MAX_WAIT_MS)
    min_bytes = int_q(request, "min_bytes", 1, 0, 2**31 - 1)
    hub = hub_of(request)
    await hub.run(hub.log.partition, topic, partition)  # Unknown* errors
    got, errors = await hub.fetch({(topic, partition): offset}, max_records=count,
                                  max_bytes=max_bytes, wait_ms=wait_ms, min_bytes=min_bytes)
    if errors:
        return _out_of_range(next(iter(errors.values())))
    return _batches_response(topic, partition, [b for _, b, _ in got], fmt)


async def fetch_waiting(request: Request) -> Response:
    """How many fetches are parked waiting for a commit (operations and tests)."""
    hub = hub_of(request)
    parked = {id(f) for s in hub.waiters.values() for f in s if not f.done()}
    return JSONResponse({"waiting": len(parked)})


async def get_partition_offsets(request: Request) -> Response:
    topic = validate_topic_name(request.path_params["topic"])
    partition = _app._partition_param(topic, request.path_params["partition"])
    hub = hub_of(request)
    start, end = await hub.run(
        lambda: hub.source.watermarks((topic, partition)))
    return JSONResponse({"beginning_offset": start, "end_offset": end}, media_type=V2_RESPONSE)


async def read_json(request: Request, *, empty: Any = None) -> Any:
    """The JSON body within max.control.request.size and max.json.nesting.depth
    (see :func:`ingest_gateway.body.read_json`, the one body reader of these routes)."""
    from ingest_gateway.body import read_json as read_bounded_json

    return await read_bounded_json(request, empty=empty)


def field(doc: Any, name: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if not isinstance(doc, dict):
        raise BadRequest("the body must be a JSON object")
    if name not in doc or doc[name] is None:
        if default is ...:
            raise BadRequest(f"field {name!r} is required")
        return default
    v = doc[name]
    if isinstance(v, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise BadRequest(f"field {name!r} must be {kind}, not {v!r}")
    if not isinstance(v, kind):
        raise BadRequest(f"field {name!r} has the wrong type: {v!r}")
    return v


def tp_list(items: Any, *, with_offset: bool) -> dict[tuple[str, int], int] | list[tuple[str, int]]:
    if not isinstance(items, list):
        raise BadRequest("expected a list of {topic, partition" + (", offset}" if with_offset else "}"))
    out: dict = {}
    for i, it in enumerate(items):
        t = field(it, "topic", str)
        p = field(it, "partition", int)
        out[(t, p)] = field(it, "offset", int) if with_offset else None
    return out if with_offset else list(out)


async def post_fetch(request: Request) -> Response:
    """Many partitions in one long-poll, answered as an Arrow stream (see module doc)."""
    doc = await read_json(request)
    positions = tp_list(field(doc, "partitions", list), with_offset=True)
    max_records = field(doc, "max_records", int, 500)
    max_bytes = field(doc, "max_bytes", int, 52_428_800)
    wait_ms = field(doc, "wait_ms", int, 0)
    min_bytes = field(doc, "min_bytes", int, 1)
    if not 1 <= max_records <= MAX_COUNT or not 0 <= wait_ms <= MAX_WAIT_MS or max_bytes < 1:
        raise BadRequest(f"max_records must be 1..{MAX_COUNT}, wait_ms 0..{MAX_WAIT_MS}, "
                         "max_bytes positive")
    hub = hub_of(request)

    def check() -> None:
        for t, p in positions:
            hub.log.partition(t, p)
    await hub.run(check)
    got, errors = await hub.fetch(positions, max_records=max_records, max_bytes=max_bytes,
                                  wait_ms=wait_ms, min_bytes=min_bytes)
    from log_layout import SEGMENT_SCHEMA

    items: list[tuple[pa.RecordBatch, Mapping[str, str]]] = [
        (b, {"topic": t, "partition": str(p), "next_offset": str(n)}) for (t, p), b, n in got]
    empty = SEGMENT_SCHEMA.empty_table().to_batches()
    empty_batch = empty[0] if empty else pa.RecordBatch.from_pylist([], schema=SEGMENT_SCHEMA)
    for (t, p), e in errors.items():
        items.append((empty_batch, {"topic": t, "partition": str(p), "error": e.code,
                                    "offset": str(e.offset), "log_start_offset": str(e.log_start),
                                    "high_watermark": str(e.log_end)}))
    return Response(arrow_stream(items), media_type=ARROW)


# -- helpers of the group routes and the REST instances ----------------------------------------
def group_of(request: Request) -> str:
    return validate_group_id(request.path_params["group"])


def offsets_doc(committed: Mapping[tuple[str, int], int]) -> dict[str, Any]:
    return {"offsets": [{"topic": t, "partition": p, "offset": o, "metadata": ""}
                        for (t, p), o in sorted(committed.items())]}


def partitions_query(request: Request) -> list[tuple[str, int]] | None:
    raw = query_param(request, "partitions")
    if not raw:
        return None
    out = []
    for item in raw.split(","):
        t, sep, p = item.rpartition(":")
        try:
            partition = parse_int(p) if sep else -1
        except ValueError:
            partition = -1
        if partition < 0 or partition >= 2**31:
            raise BadRequest(f"partitions must be TOPIC:PARTITION,... "
                             f"(a partition is 0 to 2147483647), not {raw[:200]!r}")
        out.append((t, partition))
    return out


def routes() -> list[BaseRoute]:
    """The consumer routes, for ``create_app(..., extra_routes=routes())``."""
    # imported here: both modules import this one's hub and helpers
    from ingest_gateway.group_routes import (commit_offsets, describe_group, get_committed,
                                             heartbeat, join_group, leave_group, list_groups)
    from ingest_gateway.rest_consumers import (create_instance, delete_instance,
                                               get_assignments, get_subscription,
                                               instance_commit, instance_committed,
                                               instance_heartbeat, instance_records,
                                               seek_instance, subscribe_instance)

    inst = "/consumers/{group}/instances/{instance}"
    return [
        Route("/topics/{topic}/partitions/{partition}/messages", get_messages, methods=["GET"]),
        Route("/topics/{topic}/partitions/{partition}/offsets", get_partition_offsets,
              methods=["GET"]),
        Route("/fetch", post_fetch, methods=["POST"]),
        Route("/fetch/waiting", fetch_waiting, methods=["GET"]),
        Route("/consumers/{group}", create_instance, methods=["POST"]),
        Route(f"{inst}/subscription", subscribe_instance, methods=["POST"]),
        Route(f"{inst}/subscription", get_subscription, methods=["GET"]),
        Route(f"{inst}/assignments", get_assignments, methods=["GET"]),
        Route(f"{inst}/records", instance_records, methods=["GET"]),
        Route(f"{inst}/positions", seek_instance, methods=["POST"]),
        Route(f"{inst}/offsets", instance_commit, methods=["POST"]),
        Route(f"{inst}/offsets", instance_committed, methods=["GET"]),
        Route(f"{inst}/heartbeat", instance_heartbeat, methods=["POST"]),
        Route(inst, delete_instance, methods=["DELETE"]),
        Route("/groups", list_groups, methods=["GET"]),
        Route("/groups/{group}", describe_group, methods=["GET"]),
        Route("/groups/{group}/members", join_group, methods=["POST"]),
        Route("/groups/{group}/members/{member}/heartbeat", heartbeat, methods=["POST"]),
        Route("/groups/{group}/members/{member}", leave_group, methods=["DELETE"]),
        Route("/groups/{group}/offsets", commit_offsets, methods=["POST"]),
        Route("/groups/{group}/offsets", get_committed, methods=["GET"]),
    ]


# -- OpenAPI ---------------------------------------------------------------------------------
def openapi_paths() -> dict[str, Any]:
    """OpenAPI 3 path items of the consumer routes (merged into /openapi.json)."""
    err = {"$ref": "#/components/schemas/Error"}

    def resp(desc: str, schema: Any = None, media: str = "application/json") -> dict[str, Any]:
        out: dict[str, Any] = {"description": desc}
        if schema is not None:
            out["content"] = {media: {"schema": schema}}
        return out

    def errors(*codes: int) -> dict[str, Any]:
        return {str(c): resp("error", err) for c in codes}

    def p(name: str, where: str, schema: dict[str, Any], desc: str, required: bool = False):
        return {"name": name, "in": where, "required": required or where == "path",
                "schema": schema, "description": desc}

    name = {"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,249}$"}
    topic, group = p("topic", "path", name, "topic name"), p("group", "path", name, "group id")
    partition = p("partition", "path", {"type": "integer", "minimum": 0}, "partition")
    instance = p("instance", "path", name, "consumer instance id")
    member = p("member", "path", {"type": "string"}, "member id (from join)")
    i64 = {"type": "integer", "minimum": 0}
    tp = {"type": "object", "required": ["topic", "partition"],
          "properties": {"topic": {"type": "string"}, "partition": {"type": "integer"}}}
    tpo = {"type": "object", "required": ["topic", "partition", "offset"],
           "properties": {"topic": {"type": "string"}, "partition": {"type": "integer"},
                          "offset": {"type": "integer"}}}
    record = {"type": "object", "properties": {
        "topic": {"type": "string"}, "key": {}, "value": {}, "partition": {"type": "integer"},
        "offset": {"type": "integer"}, "timestamp": {"type": "integer"},
        "headers": {"type": "array", "items": {"type": "object"}}}}
    records = {"200": {"description": "records", "content": {
        V2_RESPONSE: {"schema": {"type": "array", "items": record}},
        ARROW: {"schema": {"type": "string", "format": "binary"}}}}}
    member_state = {"type": "object", "required": ["member_id", "generation", "assignment"],
                    "properties": {"group": {"type": "string"}, "member_id": {"type": "string"},
                                   "generation": {"type": "integer"},
                                   "rebalance": {"type": "boolean"},
                                   "assigned": {"type": "boolean"},
                                   "strategy": {"type": "string", "nullable": True},
                                   "heartbeat_interval_ms": {"type": "integer"},
                                   "assignment": {"type": "array", "items": tp}}}
    offsets = {"type": "object", "properties": {"offsets": {"type": "array", "items": tpo}}}
    not_json = resp("the first record to hand out is not strict JSON (record_not_json, "
                    "naming topic, partition, offset): read it as binary or seek past it", err)
    session_ms = {"type": "integer", "description": "within group.min.session.timeout.ms .. "
                  "group.max.session.timeout.ms (else 400 invalid_session_timeout)"}
    json_body = lambda schema, required=True: {  # noqa: E731
        "required": required, "content": {"application/json": {"schema": schema}}}
    base = "/consumers/{group}/instances/{instance}"
    return {
        "/topics/{topic}/partitions/{partition}/messages": {"get": {
            "summary": "fetch records from an offset; long-poll with wait_ms/min_bytes",
            "parameters": [topic, partition,
                           p("offset", "query", i64, "first offset", required=True),
                           p("count", "query", {"type": "integer", "minimum": 1,
                                                "maximum": MAX_COUNT}, "max records (1)"),
                           p("max_bytes", "query", {"type": "integer", "minimum": 1},
                             "max bytes (at least one record)"),
                           p("wait_ms", "query", {"type": "integer", "minimum": 0,
                                                  "maximum": MAX_WAIT_MS}, "long-poll wait"),
                           p("min_bytes", "query", i64, "answer once this much is there")],
            "responses": {**records, **errors(400, 404, 415),
                          "416": resp("offset out of range", err), "422": not_json}}},
        "/topics/{topic}/partitions/{partition}/offsets": {"get": {
            "summary": "log start offset and high watermark",
            "parameters": [topic, partition],
            "responses": {"200": resp("offsets", {"type": "object", "properties": {
                "beginning_offset": {"type": "integer"}, "end_offset": {"type": "integer"}}},
                V2_RESPONSE), **errors(400, 404)}}},
        "/fetch": {"post": {
            "summary": "many partitions in one long-poll; an Arrow stream with batch metadata",
            "requestBody": json_body({"type": "object", "required": ["partitions"], "properties": {
                "partitions": {"type": "array", "items": tpo},
                "max_records": {"type": "integer"}, "max_bytes": {"type": "integer"},
                "wait_ms": {"type": "integer"}, "min_bytes": {"type": "integer"}}}),
            "responses": {"200": resp("Arrow IPC stream", {"type": "string", "format": "binary"},
                                      ARROW), **errors(400, 404)}}},
        "/fetch/waiting": {"get": {"summary": "fetches parked waiting for a commit",
                                   "responses": {"200": resp("count", {"type": "object"})}}},
        "/consumers/{group}": {"post": {
            "summary": "create a consumer instance (REST Proxy v2)", "parameters": [group],
            "requestBody": json_body({"type": "object", "properties": {
                "name": {"type": "string"}, "format": {"type": "string",
                                                       "enum": ["binary", "json", "arrow"]},
                "auto.offset.reset": {"type": "string", "enum": ["earliest", "latest"]},
                "auto.commit.enable": {"type": "string"},
                "session.timeout.ms": session_ms,
                "consumer.instance.timeout.ms": {
                    "type": "integer", "minimum": 1,
                    "description": "idle time before the instance is dropped; at most the "
                                   "gateway's consumer.instance.timeout.ms (its default)"}}},
                required=False),
            "responses": {"200": resp("instance", {"type": "object", "properties": {
                "instance_id": {"type": "string"}, "base_uri": {"type": "string"}}},
                V2_RESPONSE), **errors(400, 409)}}},
        f"{base}/subscription": {
            "parameters": [group, instance],
            "post": {"summary": "subscribe (joins the group)",
                     "requestBody": json_body({"type": "object", "required": ["topics"],
                                               "properties": {"topics": {
                                                   "type": "array",
                                                   "items": {"type": "string"}}}}),
                     "responses": {"204": resp("subscribed"), **errors(400, 404, 409)}},
            "get": {"summary": "subscribed topics",
                    "responses": {"200": resp("topics", {"type": "object"}, V2_RESPONSE),
                                  **errors(400, 404)}}},
        f"{base}/assignments": {"get": {
            "summary": "partitions assigned now", "parameters": [group, instance],
            "responses": {"200": resp("partitions", {"type": "object"}, V2_RESPONSE),
                          **errors(400, 404, 409)}}},
        f"{base}/records": {"get": {
            "summary": "records of the assigned partitions (long-poll up to timeout ms)",
            "parameters": [group, instance,
                           p("timeout", "query", {"type": "integer", "minimum": 0,
                                                  "maximum": MAX_WAIT_MS}, "wait (ms)"),
                           p("max_bytes", "query", {"type": "integer", "minimum": 1}, "bytes"),
                           p("max_records", "query", {"type": "integer", "minimum": 1,
                                                      "maximum": MAX_COUNT}, "records")],
            "responses": {**records, **errors(400, 404, 409, 415), "422": not_json}}},
        f"{base}/positions": {"post": {
            "summary": "seek: the next offsets to fetch of assigned partitions",
            "parameters": [group, instance],
            "requestBody": json_body(offsets),
            "responses": {"204": resp("positions set"), **errors(400, 404, 409)}}},
        f"{base}/offsets": {
            "parameters": [group, instance],
            "post": {"summary": "commit the given offsets, or everything consumed",
                     "requestBody": json_body(offsets, required=False),
                     "responses": {"204": resp("committed"), **errors(400, 404, 409)}},
            "get": {"summary": "committed offsets",
                    "parameters": [p("partitions", "query", {"type": "string"},
                                     "TOPIC:PARTITION,...")],
                    "responses": {"200": resp("offsets", offsets, V2_RESPONSE),
                                  **errors(400, 404)}}},
        f"{base}/heartbeat": {"post": {
            "summary": "keep the instance's membership alive", "parameters": [group, instance],
            "responses": {"200": resp("state", {"type": "object"}), **errors(400, 404, 409)}}},
        base: {"delete": {"summary": "destroy the instance (leaves the group)",
                          "parameters": [group, instance],
                          "responses": {"204": resp("gone"), **errors(400, 404)}}},
        "/groups": {"get": {"summary": "consumer groups",
                            "responses": {"200": resp("names", {"type": "object"})}}},
        "/groups/{group}": {"get": {
            "summary": "members, assignment, committed offsets and lag", "parameters": [group],
            "responses": {"200": resp("description", {"type": "object"}), **errors(400, 404)}}},
        "/groups/{group}/members": {"post": {
            "summary": "join (or rejoin with member_id)", "parameters": [group],
            "requestBody": json_body({"type": "object", "required": ["topics"], "properties": {
                "topics": {"type": "array", "items": {"type": "string"}},
                "member_id": {"type": "string", "nullable": True},
                "client_id": {"type": "string", "maxLength": 255},
                "strategies": {"type": "array", "items": {
                    "type": "string", "enum": ["range", "roundrobin", "sticky"]}},
                "session_timeout_ms": session_ms,
                "rebalance_timeout_ms": {"type": "integer", "minimum": 1,
                                         "maximum": 2**31 - 1}}}),
            "responses": {"200": resp("member state", member_state),
                          **errors(400, 404, 409)}}},
        "/groups/{group}/members/{member}/heartbeat": {"post": {
            "summary": "heartbeat", "parameters": [group, member],
            "requestBody": json_body({"type": "object", "properties": {
                "generation": {"type": "integer"}}}, required=False),
            "responses": {"200": resp("member state", member_state),
                          **errors(400, 404, 409)}}},
        "/groups/{group}/members/{member}": {"delete": {
            "summary": "leave", "parameters": [group, member],
            "responses": {"204": resp("left"), **errors(400, 404)}}},
        "/groups/{group}/offsets": {
            "parameters": [group],
            "post": {"summary": "commit (member_id and generation fence zombies)",
                     "requestBody": json_body({"type": "object", "required": ["offsets"],
                                               "properties": {
                                                   "member_id": {"type": "string"},
                                                   "generation": {"type": "integer"},
                                                   "metadata": {"type": "string",
                                                                "maxLength": 4096},
                                                   "offsets": {"type": "array", "items": tpo}}}),
                     "responses": {"204": resp("committed"), **errors(400, 404, 409)}},
            "get": {"summary": "committed offsets",
                    "parameters": [p("partitions", "query", {"type": "string"},
                                     "TOPIC:PARTITION,...")],
                    "responses": {"200": resp("offsets", offsets), **errors(400, 404)}}},
    }
