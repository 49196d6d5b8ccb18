"""``POST /topics/{topic}[/partitions/{partition}]``: produce, the gateway's hottest route.

Parameters (query string): ``acks`` = 0 | 1 | all (default all; the
``X-Sparklog-Acks`` header works too); for idempotent producing
``producer_id`` (0 .. 2^63-1), ``producer_epoch`` (0 .. 32767) and ``sequence``:
the first sequence number of the request's records in its one partition, or
``P:SEQ,P:SEQ`` when a request spans partitions; with those, ``transactional_id``
writes the records into the producer's ongoing transaction (every partition added
to it first: ``POST /v3/transactions/{id}/partitions``; else 409
``invalid_txn_state``; an older epoch: 409 ``producer_fenced``;
``server.txn_produce``). Bodies: ``server.codec``.

The route is a bare ASGI endpoint (:class:`Produce`) that ``app.GatewayApp``
calls without Starlette's routing; it parses the body (``codec_json`` /
``codec_arrow``; Avro and JSON Schema bodies ``codec_schema``, off the event loop), hands
the parts to the batcher and answers the offsets (and the schema ids).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from conf.errors import SparklogError
from conf.topic import validate_topic_name
from ingest_gateway.errors import BadRequest, InvalidRequiredAcks, RequestTooLarge
from ingest_gateway.http.errors import refusal, status_of
from ingest_gateway.http.params import int_param, partition_param, query_dict
from ingest_gateway.security.subject_acls import register_check
from ingest_gateway.server import codec, codec_arrow, codec_json, codec_schema
from ingest_gateway.server.batcher import Batcher
from ingest_gateway.server.batches import PartResult

ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}


def parse_acks(raw: str | None) -> int:
    """``0``, ``1`` or ``all``/``-1`` (default) -> 0, 1, -1, exactly as written
    (no whitespace: Kafka's ``acks`` takes none either); raises InvalidRequiredAcks."""
    if raw is None:
        return -1
    try:
        return ACKS[raw]
    except KeyError:
        raise InvalidRequiredAcks(raw) from None


def _sequences(raw: str | None, parts: Sequence[int]) -> dict[int, int] | None:
    if raw is None:
        return None
    if ":" not in raw:
        seq = int_param("sequence", raw, lo=0, hi=2**31 - 1)
        if len(parts) != 1:
            raise BadRequest(f"the request spans partitions {sorted(parts)}: give sequence as "
                             "P:SEQ,P:SEQ")
        return {parts[0]: seq}  # type: ignore[dict-item]
    out = {}
    for item in raw.split(","):
        p, _, s = item.partition(":")
        out[int_param("sequence partition", p, lo=0, hi=2**31 - 1)] = \
            int_param("sequence", s, lo=0, hi=2**31 - 1)
    return out  # type: ignore[return-value]


class Produce:
    """``POST /topics/{topic}[/partitions/{partition}]`` as a bare ASGI endpoint.

    The hottest route skips Starlette's Request/Response objects (measured at
    about half of a one-record request's time on the event loop) and, reached
    through :class:`GatewayApp`, its middleware and route matching too; errors
    are answered from the same one table.
    """

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self._produce(scope, receive, send)
        except SparklogError as exc:
            await send_refusal(send, scope["app"].state, exc)

    async def _produce(self, scope: Any, receive: Any, send: Any) -> None:
        state = scope["app"].state
        content_type = acks_header = None
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value.decode("latin-1")
            elif name == b"content-length":
                declared = value
            elif name == b"x-sparklog-acks":
                acks_header = value.decode("latin-1")
        raw_q = scope["query_string"]
        query = query_dict(raw_q.decode("latin-1")) if raw_q else {}
        params = scope["path_params"]
        limit = state.settings.gateway.max_request_size
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RequestTooLarge(int(declared), limit)

        async def read_body() -> bytes:
            chunks, size, more = [], 0, True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise BadRequest("the client disconnected before sending the whole body")
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise RequestTooLarge(size, limit)
                chunks.append(chunk)
                more = message.get("more_body", False)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)

        media, doc = await produce(state, params["topic"], params.get("partition"), content_type,
                                   query, acks_header, read_body,
                                   may_register=lambda: register_check(state.gateway.authorizer,
                                                                       scope))
        await send_json(send, 200, doc, [(b"content-type", media.encode())])


async def send_refusal(send: Any, state: Any, exc: BaseException) -> None:
    """Answer ``exc`` from the one error table (``errors.refusal``), as a bare ASGI app."""
    status, body, headers = refusal(state, exc)
    await send_json(send, status, body, [(b"content-type", b"application/json")] + [
        (k.lower().encode(), v.encode()) for k, v in headers.items()])


async def send_json(send: Any, status: int, doc: Any, headers: list[tuple[bytes, bytes]]) -> None:
    """Answer ``doc`` (JSON-able, or bytes already encoded) with ``status``."""
    payload = doc if isinstance(doc, bytes) else json.dumps(doc, separators=(",", ":")).encode()
    headers.append((b"content-length", str(len(payload)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def produce(state: Any, topic: str, raw_partition: str | None, content_type: str | None,
                  q: Mapping[str, str], acks_header: str | None,
                  read_body: Any, may_register: Any = None) -> tuple[str, dict[str, Any] | bytes]:
    """Validate, parse, hand to the batcher; returns (response media type, body as a JSON
    document or, for the common all-succeeded v2 answer, already encoded).
    ``may_register()``: the ACL check of registering a schema (Avro, JSON Schema bodies)."""
    validate_topic_name(topic)
    path_partition = None if raw_partition is None else partition_param(topic, raw_partition)
    media = codec.media_type(content_type)
    acks = parse_acks(q["acks"] if "acks" in q else acks_header)
    pid = int_param("producer_id", q.get("producer_id"), lo=0, hi=2**63 - 1)
    epoch = int_param("producer_epoch", q.get("producer_epoch"), lo=0, hi=32767)
    if (pid is None) != (q.get("sequence") is None) or (epoch is not None and pid is None):
        raise BadRequest("idempotent producing needs producer_id and sequence together "
                         "(producer_epoch defaults to 0)")
    tid = q.get("transactional_id")
    if tid is not None:
        validate_topic_name(tid)  # transactional ids follow the topic-name rules
        if pid is None or epoch is None:
            raise BadRequest("transactional producing needs producer_id, producer_epoch and "
                             "sequence")
    body = await read_body()
    batcher: Batcher = state.batcher
    info = await batcher.topic_info(topic)
    sticky = lambda: batcher.sticky.next(topic, info.partitions)  # noqa: E731
    limits = state.settings.gateway
    ids: tuple[int | None, int | None] = (None, None)
    if media in codec.SCHEMA_FORMATS:  # Avro / JSON Schema: the registry, off the loop
        parsed, *id_pair = await asyncio.to_thread(
            codec_schema.schema_to_parsed, body, media, state.gateway.schema_codec(), topic=topic,
            partitions=info.partitions, path_partition=path_partition, sticky=sticky,
            max_depth=limits.max_json_nesting_depth,
            may_register=may_register() if may_register is not None else None)
        ids = (id_pair[0], id_pair[1])
    elif media == codec.ARROW_STREAM:
        parsed = codec_arrow.arrow_to_parsed(
            body, topic=topic, partitions=info.partitions, path_partition=path_partition,
            sticky=sticky, max_uncompressed=limits.max_uncompressed_request_size)
    else:
        parsed = codec_json.json_to_parsed(
            body, media, topic=topic, partitions=info.partitions, path_partition=path_partition,
            sticky=sticky, max_depth=limits.max_json_nesting_depth)
    sequences = _sequences(q.get("sequence"), list(parsed.parts))
    results = await batcher.produce(topic, parsed, acks=acks,
                                    producer=None if pid is None else (pid, epoch or 0),
                                    sequences=sequences, transactional_id=tid)
    failed = [r for r in results if r.error is not None]
    if failed and len(failed) == len(results):
        raise failed[0].error  # type: ignore[misc]
    if media == codec.ARROW_STREAM:
        return "application/json", {"offsets": [_part_doc(r) for r in results]}
    assert parsed.positions is not None
    if not failed:
        return codec.V2_RESPONSE_TYPE, v2_offsets_json(parsed.positions, results, ids)
    offsets = []
    for p, offset, error in record_offsets(parsed.positions, results):
        doc: dict[str, Any] = {"partition": p, "offset": offset, "error_code": None,
                               "error": None}
        if error is not None:
            doc["error_code"], doc["error"] = status_of(error)[1], str(error)
        offsets.append(doc)
    return codec.V2_RESPONSE_TYPE, {"key_schema_id": ids[0], "value_schema_id": ids[1],
                                    "offsets": offsets}


def record_offsets(positions: Sequence[tuple[int, int]], results: Sequence[PartResult]
                   ) -> list[tuple[int, int | None, SparklogError | None]]:
    """Per record of a request (its ``Parsed.positions``): its partition, its offset
    (None at acks=0 or when refused) and the error refusing it."""
    by_part = {r.partition: r for r in results}
    out = []
    for p, row in positions:
        r = by_part[p]
        offset = None if r.base_offset is None or r.error is not None else r.base_offset + row
        out.append((p, offset, r.error))
    return out


def v2_offsets_json(positions: list[tuple[int, int]], results: Sequence[PartResult],
                    ids: tuple[int | None, int | None] = (None, None)) -> bytes:
    """The v2 produce answer when every record was accepted, encoded directly: a
    50-record answer through json.dumps (50 dicts) cost ~10% of the gateway's time.
    The same bytes json.dumps would write (compact separators)."""
    base = {r.partition: r.base_offset for r in results}  # None at acks=0: no offsets
    tail = ',"error_code":null,"error":null}'
    if len(base) == 1 and None not in base.values():
        # one partition: its rows are 0..n-1 in request order, the offsets consecutive
        (p, first), = base.items()
        head = f'{{"partition":{p},"offset":'
        items = head + (tail + "," + head).join(map(str, range(first, first + len(positions)))) \
            + tail
    else:
        items = ",".join(f'{{"partition":{p},"offset":'
                         f'{"null" if base[p] is None else base[p] + row}{tail}'
                         for p, row in positions)
    key_id, value_id = ("null" if i is None else str(i) for i in ids)
    return f'{{"key_schema_id":{key_id},"value_schema_id":{value_id},"offsets":[{items}]}}' \
        .encode()


def _part_doc(r: PartResult) -> dict[str, Any]:
    doc: dict[str, Any] = {"partition": r.partition, "base_offset": r.base_offset,
                           "count": r.count, "error_code": None, "error": None}
    if r.error is not None:
        doc["error_code"], doc["error"] = status_of(r.error)[1], str(r.error)
    return doc
