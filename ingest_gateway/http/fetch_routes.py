"""The fetch routes: records from offsets, long-polled (the hub wakes them on each commit).

Routes::

    GET    /topics/{topic}/partitions/{partition}/messages?offset=&count=&max_bytes=&wait_ms=&min_bytes=
    GET    /topics/{topic}/partitions/{partition}/offsets          beginning_offset, end_offset
    POST   /fetch                         many partitions at once (the Python Consumer's fetch)
    GET    /fetch/waiting                 how many fetches are parked (operations, tests)

Answers are in the formats of ``record_docs``. ``POST /fetch`` always answers
Arrow; each record batch carries custom metadata ``topic``, ``partition`` and
``next_offset`` (an empty batch with ``error`` reports an offset out of range,
with ``log_start_offset`` and ``high_watermark``). An offset outside ``[log
start, high watermark]`` answers 416 with ``log_start_offset`` and
``high_watermark``. ``isolation_level`` (a query parameter of the GETs, a field of
``POST /fetch``): ``read_uncommitted`` (Kafka's default) reads to the high watermark,
``read_committed`` to the last stable offset without aborted transactions' records
(and ``.../offsets`` then answers the last stable offset as ``end_offset``); control
markers reach neither. The long-poll itself: ``server.consumer_hub``.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from conf.topic import validate_topic_name
from ingest_gateway.errors import BadRequest
from ingest_gateway.http.access import require_topics
from ingest_gateway.http import bodies
from ingest_gateway.http.bodies import offsets_of, read_body_as
from ingest_gateway.http.params import partition_param
from ingest_gateway.http.record_docs import arrow_stream, batches_response, out_of_range_response
from ingest_gateway.http.requests import (ARROW, MAX_COUNT, MAX_WAIT_MS, V2_RESPONSE, accept,
                                          hub_of, int_q, metadata_of)
from log_layout import SEGMENT_SCHEMA
from log_layout.reader import ISOLATION_LEVELS


def isolation(raw: object) -> str | None:
    """A request's isolation level (None: absent, read_uncommitted); raises BadRequest."""
    if raw is None or raw in ISOLATION_LEVELS:
        return raw  # type: ignore[return-value]
    raise BadRequest(f"isolation_level must be read_uncommitted or read_committed, "
                     f"not {str(raw)[:100]!r}")


async def get_messages(request: Request) -> Response:
    """REST Proxy v2 ``GET .../messages`` plus long-poll (``wait_ms``, ``min_bytes``)."""
    topic = validate_topic_name(request.path_params["topic"])
    partition = partition_param(topic, request.path_params["partition"])
    fmt = accept(request)
    offset = int_q(request, "offset", None, 0, 2**63 - 1)
    count = int_q(request, "count", 1, 1, MAX_COUNT)
    max_bytes = int_q(request, "max_bytes", 52_428_800, 1, 2**31 - 1)
    wait_ms = int_q(request, "wait_ms", 0, 0, MAX_WAIT_MS)
    min_bytes = int_q(request, "min_bytes", 1, 0, 2**31 - 1)
    level = isolation(request.query_params.get("isolation_level"))
    hub = hub_of(request)
    await hub.run(metadata_of(request).partition, topic, partition)  # Unknown* errors
    got, errors = await hub.fetch({(topic, partition): offset}, max_records=count,
                                  max_bytes=max_bytes, wait_ms=wait_ms, min_bytes=min_bytes,
                                  isolation_level=level)
    if errors:
        return out_of_range_response(next(iter(errors.values())))
    return batches_response(topic, partition, [b for _, b, _ in got], fmt)


async def fetch_waiting(request: Request) -> Response:
    """How many fetches are parked waiting for a commit (operations and tests)."""
    hub = hub_of(request)
    parked = {id(f) for s in hub.waiters.values() for f in s if not f.done()}
    return JSONResponse({"waiting": len(parked)})


async def get_partition_offsets(request: Request) -> Response:
    topic = validate_topic_name(request.path_params["topic"])
    partition = partition_param(topic, request.path_params["partition"])
    level = isolation(request.query_params.get("isolation_level"))
    hub = hub_of(request)
    start, end = await hub.run(
        lambda: hub.source.watermarks((topic, partition), isolation_level=level))
    return JSONResponse({"beginning_offset": start, "end_offset": end}, media_type=V2_RESPONSE)


async def post_fetch(request: Request) -> Response:
    """Many partitions in one long-poll, answered as an Arrow stream (see module doc)."""
    body = await read_body_as(request, bodies.Fetch)
    positions = offsets_of(body.partitions)
    max_records, max_bytes = body.max_records, body.max_bytes
    wait_ms, min_bytes = body.wait_ms, body.min_bytes
    level = isolation(body.isolation_level)
    require_topics(request, "Read", (t for t, _ in positions))
    hub = hub_of(request)

    def check() -> None:
        for t, p in positions:
            metadata_of(request).partition(t, p)
    await hub.run(check)
    got, errors = await hub.fetch(positions, max_records=max_records, max_bytes=max_bytes,
                                  wait_ms=wait_ms, min_bytes=min_bytes,
                                  isolation_level=level)
    items: list[tuple[pa.RecordBatch, Mapping[str, str]]] = [
        (b, {"topic": t, "partition": str(p), "next_offset": str(n)}) for (t, p), b, n in got]
    empty = SEGMENT_SCHEMA.empty_table().to_batches()
    empty_batch = empty[0] if empty else pa.RecordBatch.from_pylist([], schema=SEGMENT_SCHEMA)
    for (t, p), e in errors.items():
        items.append((empty_batch, {"topic": t, "partition": str(p), "error": e.code,
                                    "offset": str(e.offset), "log_start_offset": str(e.log_start),
                                    "high_watermark": str(e.log_end)}))
    return Response(arrow_stream(items), media_type=ARROW)


def routes() -> list[BaseRoute]:
    """The fetch routes."""
    return [
        Route("/topics/{topic}/partitions/{partition}/messages", get_messages, methods=["GET"]),
        Route("/topics/{topic}/partitions/{partition}/offsets", get_partition_offsets,
              methods=["GET"]),
        Route("/fetch", post_fetch, methods=["POST"]),
        Route("/fetch/waiting", fetch_waiting, methods=["GET"]),
    ]
