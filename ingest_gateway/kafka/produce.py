"""Produce over Kafka's protocol: record batches into the same batching, flush and
manifest commit as an HTTP produce (``Batcher.produce``).

Each partition's record batches (``records.decode_batches``: CRC checked, decompressed,
converted to the produce schema's Arrow columns) go to ``Batcher.produce`` in order,
one partition's batches one after another, partitions concurrently. acks keeps
Kafka's meaning and the batcher's: ``-1`` (all) answers after the manifest commit,
``1`` once the records are in a batch, ``0`` gets no answer at all (Kafka's rule:
the client does not read one), and a refused partition closes the connection
(Kafka's way of telling an acks=0 client). An idempotent batch (producer id >= 0) carries its
producer id, epoch and base sequence into the batcher's sequencing, the same checks
the HTTP idempotent producer gets (``server.sequencing``, ``log_layout.idempotence``):
a retried batch is answered with its first offsets and not written twice.
At acks=all a committed batch is also kept as received in the tail cache
(``tail_cache``), which answers Fetches of recent records.

Order: a connection's requests are started in arrival order (``listener``) and each
reaches the batcher without waiting on anything but shared futures (the topic cache's
one load, a partition's one claim), which asyncio resumes in the order they were
awaited; so pipelined requests to one partition are appended in the order they were
sent, as Kafka keeps them. An idempotent batch that still arrives ahead of its
predecessor waits for it (``server.sequencing``).

A request with a ``transactional_id`` is ``txn_produce``'s (the listener's Produce
handler passes only the others here); a transactional or control batch without one is
refused with ``INVALID_REQUEST``.
A partition's error is its own; the others of the request still go.

**Topic ids** (v13, KIP-516): the request names topics by id; :func:`by_topic_id`
resolves them (``context.resolve_ids``, as Fetch v13 does), has the handler serve the
request as v12 (the same semantics by name: ACLs, checks, answers), and answers by id;
an id no topic has answers ``UNKNOWN_TOPIC_ID`` for each of its partitions (at acks=0
the connection is closed instead, as for any refused partition).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from ingest_gateway.kafka import codes, records, tail_cache
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import ZERO, KafkaContext, resolve_ids
from ingest_gateway.kafka.wire import Header, ProtocolError, error, field_names, make, \
    response_module
from ingest_gateway.errors import InvalidRequiredAcks
from ingest_gateway.server.codec import check_acks
from ingest_gateway.server.codec import Parsed

logger = logging.getLogger("sparklog.gateway.kafka")


#: one partition's outcome: (topic, partition, error code, base offset or -1, message)
Outcome = tuple[str, int, int, int, str | None]


async def produce(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """The Produce handler of requests without a transactional id; None at acks=0 (no
    answer is sent)."""
    acks = int(req.acks)
    refused = acks_refusal(head, req)
    if refused is not None:
        return refused
    results = await asyncio.gather(*(_partition(ctx, t.name, p.index, p.records, acks)
                                     for t in req.topic_data for p in t.partition_data))
    return answer(head, acks, results)


def acks_refusal(head: Header, req: Any) -> Any:
    """The answer to a Produce whose ``acks`` is not 0, 1 or -1: every partition
    INVALID_REQUIRED_ACKS, nothing written (Kafka's); None for a valid ``acks``."""
    try:
        check_acks(int(req.acks))
    except InvalidRequiredAcks as e:
        return answer(head, int(req.acks), [(t.name, p.index, codes.code_of(e), -1, str(e))
                                            for t in req.topic_data for p in t.partition_data])
    return None


def answer(head: Header, acks: int, results: list[Outcome]) -> Any:
    """The Produce answer of the partitions' outcomes; None at acks=0, where a refused
    partition raises ProtocolError instead (the connection is closed)."""
    if acks == 0:
        refused = [f"{t}-{p}: {message}" for t, p, code, _, message in results if code]
        if refused:  # Kafka's rule: no answer to send, so the connection is closed
            raise ProtocolError(f"a Produce at acks=0 refused ({'; '.join(refused)})")
        return None
    mod = response_module(0, head.api_version)
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, code, base, message in results:
        by_topic.setdefault(topic, []).append(make(
            mod.PartitionProduceResponse, index=partition, error_code=error(code),
            base_offset=base, log_append_time=None, log_start_offset=-1, record_errors=(),
            error_message=message))
    topics = tuple(make(mod.TopicProduceResponse, name=name, partition_responses=tuple(parts))
                   for name, parts in by_topic.items())
    return make(mod.ProduceResponse, responses=topics, throttle_time=ZERO)


async def _partition(ctx: KafkaContext, topic: str, partition: int, data: bytes | None,
                     acks: int) -> Outcome:
    """One partition's outcome."""
    if not sec.allowed(ctx, "Write", "Topic", topic):  # Kafka's ACL for Produce
        return topic, partition, sec.TOPIC_AUTHORIZATION_FAILED, -1, "not authorized to write"
    base = -1
    try:
        # decoded once: each batch keeps its bytes as received for the tail cache
        batches = records.decode_batches(
            data or b"", max_bytes=ctx.settings.gateway.max_uncompressed_request_size)
        cache = ctx.tail_cache if acks == -1 else None  # kept once committed
        for b in batches:
            if b.is_transactional or b.is_control:
                return topic, partition, codes.INVALID_REQUEST, -1, \
                    "a transactional or control batch in a Produce without a transactional id"
            idempotent = b.producer_id >= 0
            result = await ctx.batcher.produce(
                topic, Parsed({partition: b.table}), acks=acks,
                producer=(b.producer_id, b.producer_epoch) if idempotent else None,
                sequences={partition: b.base_sequence} if idempotent else None)
            r = result[0]
            if r.error is not None:
                raise r.error
            if base < 0 and r.base_offset is not None:
                base = r.base_offset
            if cache is not None and r.base_offset is not None:
                _cache(ctx, cache, topic, partition, r.base_offset, b)
        return topic, partition, codes.NONE, base, None
    except Exception as e:  # noqa: BLE001 - every failure is this partition's error code
        code = codes.code_of(e)
        if code == codes.UNKNOWN_SERVER_ERROR:
            logger.exception("produce to %s-%d failed", topic, partition)
        return topic, partition, code, -1, str(e)


def _cache(ctx: KafkaContext, cache: tail_cache.TailCache, topic: str, partition: int,
           base: int, batch: records.DecodedBatch) -> None:
    """Keep a committed batch in the tail cache, under the topic's id and the leader
    epoch this gateway writes the partition at (not writing it: not kept)."""
    try:  # the records are committed: nothing here may turn that into an error
        state = ctx.batcher.writing(topic, partition)
        info = ctx.metadata.topic(topic)
    except Exception:  # noqa: BLE001 - e.g. the topic deleted since: not kept
        return
    if state is None or info.config.message_timestamp_type != "CreateTime":
        return  # LogAppendTime: the segments hold the append time, not the batch's
    cache.add((topic, partition), topic_id=info.topic_id,
              leader_epoch=state.writer.epoch, base=base, batch=batch)


#: the last Produce version that names topics (v13 names them by id)
BY_NAME = 12
Handler = Callable[[KafkaContext, Header, Any], Awaitable[Any]]


@dataclasses.dataclass(frozen=True)
class _Named:
    """A v13 request's topic under its name, as the v12 handlers read it."""

    name: str
    partition_data: tuple


def by_topic_id(inner: Handler) -> Handler:
    """The Produce handler ``inner`` (by name) served for v13 too (module doc)."""
    async def handle(ctx: KafkaContext, head: Header, req: Any) -> Any:
        if head.api_version <= BY_NAME:
            return await inner(ctx, head, req)
        ids = {t.topic_id for t in req.topic_data if t.topic_id is not None}
        names = await resolve_ids(ctx, ids)
        known = tuple(_Named(names[t.topic_id], t.partition_data) for t in req.topic_data
                      if t.topic_id in names)
        unknown = [(t.topic_id, p.index) for t in req.topic_data if t.topic_id not in names
                   for p in t.partition_data]
        if unknown and int(req.acks) == 0:
            raise ProtocolError(f"a Produce at acks=0 names {len(unknown)} partitions of "
                                "unknown topic ids")
        named = dataclasses.replace(head, api_version=BY_NAME)
        body = await inner(ctx, named, dataclasses.replace(req, topic_data=known)) \
            if known else answer(named, int(req.acks), [])
        return None if body is None else _by_id(body, {n: i for i, n in names.items()},
                                                unknown)
    return handle


def _by_id(body: Any, ids: dict[str, uuid.UUID], unknown: list[tuple[Any, int]]) -> Any:
    """A v12 answer as v13's: each topic by its id, then the unknown ids' partitions."""
    mod = response_module(0, BY_NAME + 1)

    def part(p: Any) -> Any:
        return make(mod.PartitionProduceResponse,
                    **{name: getattr(p, name) for name in field_names(type(p))})

    topics = [make(mod.TopicProduceResponse, topic_id=ids[t.name],
                   partition_responses=tuple(part(p) for p in t.partition_responses))
              for t in body.responses]
    missing: dict[Any, list[Any]] = {}
    for tid, index in unknown:
        missing.setdefault(tid, []).append(make(
            mod.PartitionProduceResponse, index=index, error_code=error(codes.UNKNOWN_TOPIC_ID),
            base_offset=-1, log_append_time=None, log_start_offset=-1, record_errors=(),
            error_message="no topic has this id"))
    topics += [make(mod.TopicProduceResponse, topic_id=tid, partition_responses=tuple(ps))
               for tid, ps in missing.items()]
    return make(mod.ProduceResponse, responses=tuple(topics), throttle_time=body.throttle_time)
