"""Fetch and ListOffsets over Kafka's protocol.

**Fetch** is the consumer hub's long-poll (``ConsumerHub.fetch``, the one the HTTP
fetch routes use): registered before it reads, woken by the batcher's commits,
answered once ``min_bytes`` are there or ``max_wait_ms`` has passed. What it reads
(Arrow record batches of the segments) is rebuilt as Kafka record batches
(``records.encode_batch``), one per Arrow batch, with the records' own offsets,
compressed with the topic's ``compression.type`` (``lz4``, ``zstd``; ``producer``,
``none`` and ``uncompressed`` answer uncompressed batches), as Kafka's broker stores
and serves them: clients decompress what they fetch whatever codec it is.
A partition whose fetch offset starts a run of batches in the tail cache (``tail_cache``:
batches produced over this listener, kept as received once committed) is answered
from it instead, stamped, without waiting (the others then do not wait either).
Where the reader skipped transaction markers or aborted records, a control batch
tells the client to move past them (``_encode``). ``max_bytes`` bounds the answer
(at least one record, as Kafka) and each partition's share ``partition_max_bytes``
(at least one record of each partition with any). Without the share one partition's
backlog filled an 11 MB answer of 100,000 records, past librdkafka's
``queued.min.messages``, and librdkafka paused fetching for a second
(``fetch.queue.backoff.ms``) five times a million records: confluent-kafka read a
backlog at 145,000 records/s, 450,000 with the shares.
A fetch offset outside ``[log start, high watermark]`` answers
``OFFSET_OUT_OF_RANGE`` for that partition; under the broker application a
partition this gateway does not lead answers ``NOT_LEADER_OR_FOLLOWER`` (clients
refresh their metadata). ``isolation_level`` 1 (read_committed) reads to the last
stable offset. Fetch sessions (KIP-227, ``fetch_sessions``): from v7 a full fetch
may open a session, after which the client sends only the partitions whose position
changed and is answered only those with records, an error or new watermarks.

**Topic ids** (KIP-516): from v13 a Fetch names topics by id and is answered by id.
A topic's id is drawn when it is created and kept in its store metadata (stable across
restarts; a deleted and re-created topic gets a new one), as Metadata answers it. An id
no topic has (a deleted topic's, or the null id of topics made before ids) answers
UNKNOWN_TOPIC_ID for each of its partitions.

**ListOffsets**: timestamp -2 is the log start offset, -1 the end (the high
watermark, or the last stable offset for read_committed), any other timestamp the
first offset whose record is at least that new, with that record's timestamp
(offset -1 when none is). -3 (the record with the largest timestamp, KIP-734) is
not offered (ListOffsets stops at v7).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from typing import Any

import pyarrow as pa

from ingest_gateway.kafka import codes, fetch_sessions, records, throttle
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import ZERO, KafkaContext, resolve_ids
from ingest_gateway.kafka.wire import Header, error, make, response_module
from log_layout import OffsetOutOfRange
from log_layout.leader_epochs import epoch_at

logger = logging.getLogger("sparklog.gateway.kafka")

#: records one fetch reads at most (the answer is bounded by max_bytes too)
MAX_FETCH_RECORDS = 100_000
#: per broker, topic id -> name as last found (checked again on every use)


def _isolation(level: int) -> str | None:
    return "read_committed" if level == 1 else None


def check_partition(ctx: KafkaContext, topic: str, partition: int) -> None:
    """Raises UnknownTopic, UnknownPartition, NotLeader (store reads: run off the loop):
    the gateway's one check (``Gateway.check_partition``)."""
    ctx.gateway.check_partition(topic, partition)


def _checked(ctx: KafkaContext, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Error codes of the partitions that cannot be read here (off the loop)."""
    bad = {}
    for tp in tps:
        try:
            check_partition(ctx, *tp)
        except Exception as e:  # noqa: BLE001 - a per-partition error code
            bad[tp] = codes.code_of(e)
    return bad


def _keys(head: Header, req: Any) -> tuple[dict, list]:
    """The request's partitions (key -> (fetch offset, partition max bytes), in order)
    and its forgotten ones; a key is (topic name, or its id from v13, partition)."""
    ids = head.api_version >= 13
    asked = {(t.topic_id if ids else t.topic, p.partition):
             (p.fetch_offset, p.partition_max_bytes) for t in req.topics for p in t.partitions}
    forgotten = [(t.topic_id if ids else t.topic, p)
                 for t in getattr(req, "forgotten_topics_data", ()) for p in t.partitions]
    return asked, forgotten


async def _asked(ctx: KafkaContext, head: Header, wanted: dict
                 ) -> tuple[list[tuple[str, int, int]], dict[str, uuid.UUID], dict]:
    """(topic, partition, fetch offset) of ``wanted`` (``_keys``); from v13 also each
    topic's id by name and UNKNOWN_TOPIC_ID for the partitions of ids no topic has
    (named ``?<id>``, which is no topic's name)."""
    if head.api_version < 13:
        return [(t, p, off) for (t, p), (off, _) in wanted.items()], {}, {}
    found = await resolve_ids(ctx, {t for t, _ in wanted})
    ids = {found.get(t, f"?{t}"): t for t, _ in wanted}
    asked = [(found.get(t, f"?{t}"), p, off) for (t, p), (off, _) in wanted.items()]
    return asked, ids, {(t, p): codes.UNKNOWN_TOPIC_ID for t, p, _ in asked if t.startswith("?")}


async def fetch(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """A Fetch, within its fetch session (``fetch_sessions``) from v7."""
    mod = response_module(1, head.api_version)
    sessions = ctx.fetch_sessions
    keys, forgotten = _keys(head, req)
    fetch_ctx = sessions.context(head.api_version, getattr(req, "session_id", 0),
                                 getattr(req, "session_epoch", -1), keys, forgotten)
    if fetch_ctx.error:
        return _session_error(mod, fetch_ctx.error, 0)
    asked, ids, parts = await _read(ctx, head, req, fetch_ctx.fetch)
    if fetch_ctx.incremental:
        if not sessions.current(fetch_ctx):  # raced by a request of the same epoch
            return _session_error(mod, fetch_sessions.INVALID_FETCH_SESSION_EPOCH,
                                  fetch_ctx.session.id)
        keep = fetch_ctx.session.answered({
            key: (bool(d.records), int(d.error_code), d.high_watermark, d.log_start_offset)
            for key, d in zip(fetch_ctx.fetch, parts)})
        chosen = [(a, d) for key, a, d in zip(fetch_ctx.fetch, asked, parts) if key in keep]
        session_id = fetch_ctx.session.id
    else:
        chosen = list(zip(asked, parts))
        session_id = sessions.create(head.api_version >= 13, {
            key: (*fetch_ctx.fetch[key], d.high_watermark, d.log_start_offset)
            for key, d in zip(fetch_ctx.fetch, parts)}) if fetch_ctx.may_create else 0
    topics: dict[str, list[Any]] = {}
    for (t, _p, _off), d in chosen:
        topics.setdefault(t, []).append(d)
    responses = tuple(make(mod.FetchableTopicResponse, topic=t, topic_id=ids.get(t),
                           partitions=tuple(ps))
                      for t, ps in topics.items())
    return make(mod.FetchResponse, throttle_time=ZERO, error_code=error(codes.NONE),
                session_id=session_id, responses=responses)


def _session_error(mod: Any, code: int, session_id: int) -> Any:
    return make(mod.FetchResponse, throttle_time=ZERO, error_code=error(code),
                session_id=session_id, responses=())


def throttled(ctx: KafkaContext, req: Any, body: Any) -> Any:
    """The answer to a Fetch whose ``body`` is withheld for its client's quota (Kafka's
    ``getThrottledResponse``): no partitions; an incremental session's answer keeps its
    session id (what it would have told is told next time), a new session made by a
    full fetch is closed again (Kafka makes none for a throttled full fetch)."""
    sessions, session_id = ctx.fetch_sessions, body.session_id
    if session_id:
        session = sessions.sessions.get(session_id)
        if getattr(req, "session_epoch", -1) == fetch_sessions.INITIAL_EPOCH:
            sessions.sessions.pop(session_id, None)
            session_id = 0
        elif session is not None:
            session.undo(session.epoch)
    return dataclasses.replace(body, session_id=session_id, responses=())


async def _read(ctx: KafkaContext, head: Header, req: Any, wanted: dict
                ) -> tuple[list[tuple[str, int, int]], dict[str, uuid.UUID], list[Any]]:
    """(topic, partition, fetch offset) of each partition of ``wanted`` (``_keys``), the
    topic ids by name (v13+) and each partition's PartitionData, in ``wanted``'s order."""
    asked, ids, unknown = await _asked(ctx, head, wanted)
    hub = ctx.hub()
    denied = _denied(ctx, "Read", [(t, p) for t, p, _ in asked])  # Kafka's ACL for Fetch
    bad = await hub.run(_checked, ctx, [(t, p) for t, p, _ in asked if (t, p) not in denied])
    bad.update(denied)
    bad.update(unknown)
    positions = {(t, p): off for t, p, off in asked if (t, p) not in bad}
    got, errors = [], {}
    level = _isolation(getattr(req, "isolation_level", 0))
    share = max((mb for _, mb in wanted.values()), default=1)
    # a quota bounds an answer (Kafka's): one larger would be withheld every time
    cap = throttle.fetch_max_bytes(ctx.gateway.quotas, sec.CURRENT.get().principal,
                                   head.client_id or "")
    max_bytes = max(1, req.max_bytes if cap is None else min(req.max_bytes, cap))
    cached, cached_marks = await _from_cache(ctx, positions, max_bytes, level, share)
    rest = {tp: off for tp, off in positions.items() if tp not in cached}
    if rest:
        try:
            got, errors = await hub.fetch(
                rest, max_records=MAX_FETCH_RECORDS, max_bytes=max_bytes,
                wait_ms=0 if cached else max(0, int(req.max_wait.total_seconds() * 1000)),
                min_bytes=min(req.min_bytes, max_bytes), isolation_level=level,
                partition_max_bytes=max(1, share))
        except Exception as e:  # noqa: BLE001 - a store failure: every partition's error
            logger.warning("Kafka fetch failed: %s", e)
            bad.update(dict.fromkeys(rest, codes.code_of(e)))
            rest = {}
    marks = await hub.run(_watermarks, ctx, [tp for tp in rest if tp not in errors])
    data = _encode(got, rest, {t: _codec(ctx, t) for t, _ in rest},
                   {tp: mark[3] for tp, mark in marks.items()})
    data.update(cached)
    marks.update(cached_marks)
    mod = response_module(1, head.api_version)
    parts = []
    for t, p, _off in asked:
        tp = (t, p)
        code, start, lso, hwm = codes.NONE, -1, -1, -1
        if tp in bad:
            code = bad[tp]
        elif tp in errors:
            e: OffsetOutOfRange = errors[tp]
            code, start, hwm = codes.OFFSET_OUT_OF_RANGE, e.log_start, e.log_end
        else:
            start, lso, hwm, _epochs = marks[tp]
        parts.append(make(
            mod.PartitionData, partition_index=p, error_code=error(code), high_watermark=hwm,
            last_stable_offset=lso, log_start_offset=start, aborted_transactions=(),
            preferred_read_replica=-1, records=b"".join(data.get(tp, ()))))
    return asked, ids, parts


async def _from_cache(ctx: KafkaContext, positions: dict, max_bytes: int, level: str | None,
                      share: int) -> tuple[dict, dict]:
    """The partitions the tail cache answers wholly from their fetch offset (see
    ``tail_cache``): their batches and their watermarks. Misses: the segments'."""
    cache = ctx.tail_cache
    if cache is None or not positions:
        return {}, {}
    try:
        snaps = await ctx.hub().run(_snapshots, ctx, list(positions))
        topics = {t: ctx.metadata.topic(t) for t, _ in positions}  # the log's cache
    except Exception:  # noqa: BLE001 - the segment path answers (and says why)
        return {}, {}
    leading = ctx.batcher.leading()
    data, marks = {}, {}
    share, budget = max(1, share), max_bytes
    for tp, offset in positions.items():
        config, m = topics[tp[0]], snaps[tp]
        got = None if config.config.message_timestamp_type != "CreateTime" else cache.take(
            tp, offset, topic_id=config.topic_id, leader_epoch=leading.get(tp, -1),
            manifest=m, committed=level is not None, max_bytes=min(share, budget),
            topic_codec=_cache_codec(config.config.compression_type))
        if got is not None:
            data[tp] = got
            budget -= sum(len(b) for b in got)
            marks[tp] = (m.log_start_offset, m.last_stable_offset, m.next_offset, m.epochs)
    return data, marks


def _cache_codec(wanted: str) -> str:
    """The codec a cached batch must have to be sent as is (``producer``: any)."""
    return wanted if wanted == "producer" or wanted in records.CODECS else "none"


def _snapshots(ctx: KafkaContext, tps: list[tuple[str, int]]) -> dict[tuple[str, int], Any]:
    return {tp: ctx.metadata.snapshot(*tp) for tp in tps}


def _codec(ctx: KafkaContext, topic: str) -> str:
    """The codec a topic's batches are fetched in. On the loop: ``_checked`` has just
    read the topic off it, so this is the log's cache."""
    wanted = ctx.metadata.topic(topic).config.compression_type
    return wanted if wanted in records.CODECS else "none"  # producer, uncompressed


def _encode(got: list, positions: dict, codecs: dict[str, str], epochs: dict
            ) -> dict[tuple[str, int], list[bytes]]:
    """Kafka record batches per partition. Where the reader's next position is past the
    last record sent (it skipped a transaction marker, aborted records or a compaction
    gap at a segment's end), a control batch at the offset before that position follows:
    Kafka clients move their position only by the offsets they receive, and skip
    control records, so without it a consumer would stay on a marker at a partition's
    end. Its producer id (-1) is no producer's, so no client reads it as ending a
    transaction of its own. ``codecs``: each topic's codec (control batches are never
    compressed). Each batch carries the leader epoch its first record was written under
    (``epochs``: each partition's history, see ``log_layout.leader_epochs``), which a
    client checks with OffsetForLeaderEpoch after a leader change."""
    data: dict[tuple[str, int], list[bytes]] = {}
    reached = dict(positions)
    for tp, batch, nxt in got:
        chunks = data.setdefault(tp, [])
        if batch.num_rows:
            offsets = batch.column(0)
            base = int(offsets[0].as_py())
            chunks.append(records.encode_batch(
                pa.Table.from_batches([batch]), base_offset=base, codec=codecs[tp[0]],
                partition_leader_epoch=epoch_at(epochs.get(tp, ()), base)))
            reached[tp] = int(offsets[-1].as_py()) + 1
        if nxt > reached[tp]:
            chunks.append(records.encode_control_batch(
                base_offset=nxt - 1, commit=True, producer_id=-1, producer_epoch=-1,
                timestamp_ms=int(time.time() * 1000),
                partition_leader_epoch=epoch_at(epochs.get(tp, ()), nxt - 1)))
            reached[tp] = nxt
    return data


def _denied(ctx: KafkaContext, operation: str,
            tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """TOPIC_AUTHORIZATION_FAILED for the partitions whose topic the request's principal
    may not ``operation`` (on the loop: the authorizer does no I/O)."""
    ok: dict[str, bool] = {}
    for t, _ in tps:
        if t not in ok:
            ok[t] = sec.allowed(ctx, operation, "Topic", t)
    return {tp: sec.TOPIC_AUTHORIZATION_FAILED for tp in tps if not ok[tp[0]]}


def _watermarks(ctx: KafkaContext, tps: list[tuple[str, int]]) -> dict[tuple[str, int], tuple]:
    """(log start, last stable offset, high watermark, epoch history) per partition."""
    out = {}
    for tp in tps:
        m = ctx.metadata.snapshot(*tp)
        out[tp] = (m.log_start_offset, m.last_stable_offset, m.next_offset, m.epochs)
    return out


async def list_offsets(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(2, head.api_version)
    committed = getattr(req, "isolation_level", 0) == 1
    asked = [(t.name, p.partition_index, p.timestamp) for t in req.topics for p in t.partitions]
    denied = _denied(ctx, "Describe", [(t, p) for t, p, _ in asked])  # Kafka's ACL
    found = await ctx.hub().run(_offsets, ctx,
                                [a for a in asked if a[:2] not in denied], committed)
    found_of = iter(found)
    found = [(denied[(t, p)], -1, -1, -1) if (t, p) in denied else next(found_of)
             for t, p, _ in asked]
    topics: dict[str, list[Any]] = {}
    for (t, p, _ts), (code, ts, offset, epoch) in zip(asked, found):
        topics.setdefault(t, []).append(make(
            mod.ListOffsetsPartitionResponse, partition_index=p, error_code=error(code),
            timestamp=ts, offset=offset, old_style_offsets=(offset,) if offset >= 0 else (),
            leader_epoch=epoch))
    return make(mod.ListOffsetsResponse, throttle_time=ZERO, topics=tuple(
        make(mod.ListOffsetsTopicResponse, name=t, partitions=tuple(ps))
        for t, ps in topics.items()))


def _offsets(ctx: KafkaContext, asked: list[tuple[str, int, int]],
             committed: bool) -> list[tuple[int, int, int, int]]:
    """(error code, timestamp, offset, leader epoch) per partition asked (store reads:
    off the loop)."""
    out = []
    for topic, partition, ts in asked:
        try:
            check_partition(ctx, topic, partition)
            o = ctx.metadata.list_offset(topic, partition, ts, committed=committed)
            out.append((codes.NONE, o.timestamp_ms, o.offset, o.leader_epoch))
        except Exception as e:  # noqa: BLE001 - a per-partition error code
            out.append((codes.code_of(e), -1, -1, -1))
    return out
