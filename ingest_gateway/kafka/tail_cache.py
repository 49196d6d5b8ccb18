"""The tail cache: Kafka record batches produced over the Kafka listener, kept as
received once committed, so a Fetch of recent records sends them back stamped instead
of rebuilding batches from the Arrow segments (``fetch._encode``: ~0.35 us a record).

What is kept (``produce`` calls :meth:`TailCache.add` after an acks=all answer, i.e.
after the manifest commit, with the offsets that commit assigned): whole batches that
are neither transactional nor control, in CreateTime with every record's timestamp set
(a missing one becomes the flush's time in the segments), offset deltas 0..n-1. Each
batch is stored with its base offset stamped, under the topic's id and the leader
epoch this gateway wrote the partition at. An idempotent retry that the batcher
answered with earlier offsets is not kept again (its base is below the cached end).

What is served (:meth:`TailCache.take`, ``fetch``): a run of whole batches within the
partition's share of the answer (``partition_max_bytes``; a first batch larger than
that is a miss: the segment path cuts records finer, which keeps librdkafka's queue
under ``queued.min.messages``), starting exactly at the fetch position, each the next one's predecessor (an HTTP produce or another
writer's records leave a gap that ends the run), only while the topic's id, the
partition's leader epoch here, ``message.timestamp.type`` (CreateTime) and
``compression.type`` (``producer`` or the batch's own codec: Fetch answers in the
topic's codec) still allow it, from at or above the log start and the log cleaner's
checkpoint (DeleteRecords, retention and compaction change only what lies below those),
to below the high watermark (read_committed: the last stable offset). A run of only
non-transactional batches holds no markers and no aborted records. Anything else is a
miss and the segments answer. ``partitionLeaderEpoch`` is stamped at serving from the
manifest's epoch history, as the segment path does; the CRC covers neither field.

Memory is bounded by ``gateway.kafka.tail.cache.bytes`` (0: off), oldest batch evicted
first. Used on the event loop only (no locks). Hits and misses (per partition asked)
are counted in ``sparklog_gateway_kafka_tail_cache_{hits,misses}_total``.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any

from ingest_gateway.kafka import records
from log_layout.leader_epochs import epoch_at

#: one cache per gateway (keyed by its batcher, shared by its Kafka listeners)


@dataclass(slots=True)
class _Entry:
    end: int  # offset after the batch's last record
    raw: bytearray  # the batch, its base offset stamped
    codec: str


@dataclass(slots=True)
class _Partition:
    topic_id: str
    leader_epoch: int
    batches: dict[int, _Entry]  # base offset -> batch
    end: int  # the largest end cached


class TailCache:
    """Committed Kafka record batches per partition, bounded by bytes."""

    def __init__(self, max_bytes: int, registry: Any = None):
        self.max_bytes = max_bytes
        self.size = 0
        self._parts: dict[tuple[str, int], _Partition] = {}
        #: (partition, base offset, entry), oldest first
        self._order: collections.deque[tuple[tuple[str, int], int, _Entry]] = \
            collections.deque()
        self.hits = self.misses = None
        if registry is not None:
            from prometheus_client import Counter

            self.hits = Counter("sparklog_gateway_kafka_tail_cache_hits",
                                "partitions of Kafka fetches served from the tail cache",
                                registry=registry)
            self.misses = Counter("sparklog_gateway_kafka_tail_cache_misses",
                                  "partitions of Kafka fetches rebuilt from the segments",
                                  registry=registry)

    def add(self, tp: tuple[str, int], *, topic_id: str, leader_epoch: int, base: int,
            batch: records.DecodedBatch) -> None:
        """Keep one committed batch appended whole at ``base`` (see the module doc): its
        bytes as received (``batch.raw``), copied once to stamp the base offset."""
        n, raw = batch.record_count, batch.raw
        if (self.max_bytes <= 0 or len(raw) > self.max_bytes or n == 0 or leader_epoch < 0
                or batch.is_control or batch.is_transactional
                or batch.timestamp_type != records.CREATE_TIME
                or batch.last_offset_delta != n - 1
                or batch.table.column("timestamp").null_count):
            return
        part = self._parts.get(tp)
        if part is None or part.topic_id != topic_id or part.leader_epoch != leader_epoch:
            self.drop(tp)
            part = self._parts[tp] = _Partition(topic_id, leader_epoch, {}, -1)
        if base < part.end:  # a retry answered with earlier offsets, or out of order
            return
        buf = bytearray(raw)
        records._stamp(buf, base, 0)
        entry = part.batches[base] = _Entry(base + n, buf, batch.codec)
        part.end = base + n
        self.size += len(buf)
        self._order.append((tp, base, entry))
        while self.size > self.max_bytes:
            old_tp, old_base, old_entry = self._order.popleft()
            old = self._parts.get(old_tp)
            if old is not None and old.batches.get(old_base) is old_entry:
                del old.batches[old_base]
                self.size -= len(old_entry.raw)  # (the partition's end is kept: retries)

    def drop(self, tp: tuple[str, int]) -> None:
        """Forget a partition (rare: a claim elsewhere, a re-created topic)."""
        part = self._parts.pop(tp, None)
        if part is not None:
            self.size -= sum(len(e.raw) for e in part.batches.values())
            self._order = collections.deque(o for o in self._order if o[0] != tp)

    def take(self, tp: tuple[str, int], offset: int, *, topic_id: str, leader_epoch: int,
             manifest: Any, committed: bool, topic_codec: str, max_bytes: int) -> list | None:
        """The stamped batches from ``offset`` (whole, up to ``max_bytes`` in all), or
        None: a miss, the segments answer. ``manifest``: the partition's snapshot;
        ``topic_codec``: the topic's ``compression.type``."""
        got = self._take(tp, offset, topic_id, leader_epoch, manifest, committed,
                         topic_codec, max_bytes)
        counter = self.misses if got is None else self.hits
        if counter is not None:
            counter.inc()
        return got

    def _take(self, tp, offset, topic_id, leader_epoch, m, committed, topic_codec,
              max_bytes) -> list | None:
        part = self._parts.get(tp)
        if part is None:
            return None
        if part.topic_id != topic_id or part.leader_epoch != leader_epoch:
            self.drop(tp)
            return None
        if offset < m.log_start_offset or offset < m.cleaned_offset:
            return None
        limit = m.last_stable_offset if committed else m.next_offset
        out: list[bytes] = []
        size = 0
        entry = part.batches.get(offset)
        # whole batches within max_bytes (a first one larger: a miss, the segments cut it)
        while entry is not None and entry.end <= limit and size + len(entry.raw) <= max_bytes:
            if topic_codec != "producer" and entry.codec != topic_codec:
                break
            epoch = epoch_at(m.epochs, offset)  # as the segment path stamps it
            entry.raw[12:16] = epoch.to_bytes(4, "big", signed=True)
            out.append(bytes(entry.raw))
            size += len(entry.raw)
            offset = entry.end
            entry = part.batches.get(offset)
        return out or None

