"""What the batcher holds per partition, and what it answers per request.

A :class:`FlushBatch` is one partition's records between two flushes with its ONE
future; a request's share of it is a :class:`Ticket` (batch, part index), from
which its offsets follow once the batch is flushed (:class:`PartResult`).
:class:`PartitionState` is everything the gateway keeps for a partition it
writes: open, flushing and queued batches, the idempotent batches accepted
and not committed (``pending``), the offsets predicted for acks=1.
:func:`write_batch` is what a flush does with a batch on a flush thread;
:class:`JournalFlushes` hands hot partitions' batches to their journals.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ingest_gateway.errors import NotLeader
from ingest_gateway.server.codec import Rows, part_bytes, to_table
from log_layout import (AppendResult, Fenced, PartitionLog, PartitionWriter, ProducerBatch,
                        TopicInfo)
from log_layout.idempotence import after_appends, check_with_pending, sort_out


class FlushBatch:
    """One partition's records between two flushes, resolved once by its flush."""

    __slots__ = ("parts", "producers", "rows", "nbytes", "future", "starts", "dropped",
                 "result", "error", "acked", "txn")

    def __init__(self, future: asyncio.Future, txn: tuple[int, int] | None = None):
        #: (producer id, epoch) of a transactional batch: its records only, flushed as
        #: one transactional segment; None: any non-transactional records
        self.txn = txn
        self.parts: list[pa.Table | Rows] = []
        #: (ProducerBatch, index of its part)
        self.producers: list[tuple[ProducerBatch, int]] = []
        self.rows = 0
        self.nbytes = 0
        self.future = future
        #: after the flush: the first offset's row of each part within the segment
        self.starts: list[int] = []
        #: after the flush: part index -> why it was not written (or its duplicate offsets)
        self.dropped: dict[int, Exception | tuple[int, int]] = {}
        self.result: AppendResult | None = None
        self.error: Exception | None = None
        #: rows answered before the flush (acks=0 or 1): lost if the flush fails
        self.acked = 0

    def add(self, part: "pa.Table | Rows") -> int:
        self.parts.append(part)
        self.rows += part.num_rows
        self.nbytes += part_bytes(part)
        return len(self.parts) - 1


class PartitionState:
    """What the gateway holds for one partition it writes."""

    def __init__(self, plog: PartitionLog, writer: PartitionWriter, info: TopicInfo):
        self.plog, self.writer = plog, writer
        self.topic, self.partition = plog.topic, plog.partition
        #: which incarnation of the topic: one deleted and created again is another
        self.incarnation = (info.created_ms, info.topic_id)
        self.current: FlushBatch | None = None
        #: batches being flushed, oldest first: at most one on the per-partition path;
        #: a hot journal plans each flush on the ones before it, so several go at once
        self.flushing: collections.deque[FlushBatch] = collections.deque()
        self.flush_limit = 1 if writer.journal is None else writer.journal.uploads_in_flight
        #: full batches closed while a flush was in flight, flushed in order
        self.queue: collections.deque[FlushBatch] = collections.deque()
        self.flush_again = False
        self.timer: asyncio.TimerHandle | None = None
        #: producer id -> [(batch descriptor, FlushBatch, part index)] accepted, not committed
        self.pending: dict[int, list[tuple[ProducerBatch, FlushBatch, int]]] = {}
        #: the offset the next accepted record will get, if every flush succeeds
        self.assigned = writer.partition.snapshot(refresh=False).next_offset
        self.stopped: NotLeader | None = None
        #: released (moved to another leader): refused, but what was accepted still flushes
        self.draining = False
        #: resolved (and dropped) when ``pending`` or the committed producer state
        #: changes: requests held for an earlier sequence check again
        self.sequence_changed: asyncio.Future | None = None

    def committed_producers(self) -> dict:
        """The producers' committed sequences. A hot writer's own head: it is the
        partition's only writer and its head is what its last entry committed (the
        snapshot would merge the journal's new entries on every request: 7% of a
        gateway's time at 1,024 partitions, issue 30); else the cached snapshot's."""
        if self.writer.journal is not None:
            return self.writer.head.producers
        return self.plog.snapshot(refresh=False).producers

    @property
    def idle(self) -> bool:
        """Nothing open, queued or being flushed."""
        return self.current is None and not self.flushing and not self.queue

    def small_tail(self, position: int, *, segments: int, nbytes: int) -> bool:
        """Whether the records from ``position`` to the last committed lie in at most
        ``segments`` segments of at most ``nbytes`` bytes in all (a tail reader's next
        read). No store access."""
        m = self.plog.snapshot(refresh=False)
        if not m.log_start_offset <= position <= m.next_offset:
            return False
        for info in reversed(m.segments):  # the newest first: a tail reader needs few
            if info.last_offset < position:
                return True
            segments -= 1
            nbytes -= info.bytes
            if segments < 0 or nbytes < 0:
                return False
        return True

    def taken_back(self) -> bool:
        """Whether this hot partition's writer was fenced by an append to ``_log`` at its
        own epoch (a transaction marker written by another process, a Spark sink's
        task), which takes the partition back from the journal, rather than by another
        leader's claim: nobody leads it then, and this gateway may claim it again.
        Reads the store."""
        if self.writer.journal is None:
            return False
        m = self.plog.snapshot()
        return m.leader_epoch == self.writer.epoch and m.hot_journal is None

    def wake_held(self) -> None:
        """Wake the requests held for an earlier sequence of this partition."""
        waiter, self.sequence_changed = self.sequence_changed, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


@dataclasses.dataclass
class PartResult:
    """Where one partition's share of a request went."""

    partition: int
    count: int
    base_offset: int | None = None
    error: Exception | None = None


@dataclasses.dataclass
class Ticket:
    """A request's claim on a batch (or a committed duplicate's original offsets)."""

    partition: int
    count: int
    batch: FlushBatch | None = None
    part: int = -1
    predicted: int | None = None
    committed: tuple[int, int] | None = None


def check_sequence(state: PartitionState, pb: ProducerBatch):
    """None for the next batch; a committed duplicate's (base, last) offsets; or
    (FlushBatch, part) of a pending duplicate. Raises the idempotence errors
    (the rules: ``log_layout.idempotence``)."""
    committed = state.committed_producers().get(pb.producer_id)
    pending = state.pending.get(pb.producer_id) or []
    verdict = check_with_pending(committed, [q for q, _, _ in pending], pb, state.partition)
    if verdict.pending is not None:
        _, batch, part = pending[verdict.pending]
        return batch, part
    return verdict.committed


def write_now(state: PartitionState, batch: FlushBatch) -> concurrent.futures.Future:
    """``write_batch`` on this thread, its outcome as a done future (as a flush
    thread's would be)."""
    done: concurrent.futures.Future = concurrent.futures.Future()
    try:
        done.set_result(write_batch(state, batch))
    except Exception as exc:
        done.set_exception(exc)
    return done


def write_batch_hot(state: PartitionState, batch: FlushBatch) -> concurrent.futures.Future:
    """``write_batch`` through the partition's hot journal, on the event loop: the
    returned future gives the AppendResult once the journal commits it (or raises what
    ``write_batch`` would). The caller calls the journal's ``flush_here`` at the end of
    the loop's turn."""
    try:
        table, accepted = _accepted(state, batch)
        return state.writer.append_async(table, producer_batches=accepted,
                                         transactional=batch.txn is not None,
                                         caller_flushes=True)
    except Exception as exc:
        done: concurrent.futures.Future = concurrent.futures.Future()
        done.set_exception(exc)
        return done


def write_batch(state: PartitionState, batch: FlushBatch) -> AppendResult:
    """On a flush thread: drop parts whose sequence no longer fits, append the rest."""
    table, accepted = _accepted(state, batch)
    try:
        return state.writer.append(table, producer_batches=accepted,
                                   transactional=batch.txn is not None)
    except Fenced:
        raise
    except Exception:
        # The commit's outcome may be unknown (the store failed mid-call): re-read, so
        # an idempotent retry is checked against what really got committed.
        try:
            state.plog.snapshot()
        except Exception:  # the store is still failing; the next flush re-reads
            pass
        raise


def _accepted(state: PartitionState, batch: FlushBatch) -> tuple[pa.Table, list]:
    """The batch's records to write, and its producer batches with their first rows:
    parts whose sequence no longer fits are dropped (``batch.dropped``). Raises
    NothingToWrite if none is left."""
    producers = state.committed_producers()
    for earlier in state.flushing:  # hot: this flush is planned after those in flight
        if earlier is not batch:
            producers = after_appends(producers, [(pb, -1) for pb, part in earlier.producers
                                                  if part not in earlier.dropped])
    accepted: list[tuple[ProducerBatch, int]] = []
    fates = sort_out(producers, [pb for pb, _ in batch.producers], state.partition)
    for (pb, part), fate in zip(batch.producers, fates):
        if fate is None:
            accepted.append((pb, part))
        else:  # a duplicate's offsets, or why it no longer fits (an earlier batch failed)
            batch.dropped[part] = fate
    row = 0
    tables = []
    starts = []
    for i, t in enumerate(batch.parts):
        starts.append(row)
        if i not in batch.dropped:
            tables.append(t)
            row += t.num_rows
    batch.starts = starts
    if not tables:
        raise NothingToWrite()
    return to_table(tables), [(pb, starts[part]) for pb, part in accepted]


class JournalFlushes:
    """The hot journals given a gateway's appends in this turn of its event loop, each
    offered the flush at the turn's end (``JournalWriter.flush_here``): on a local store
    without fsync an idle journal flushes on the loop, every partition's appends of the
    turn in one entry, with no hand-off to its flush thread and back (the batcher's
    INLINE_FLUSH_BYTES, for the hot tier). Used on the loop's thread only."""

    def __init__(self) -> None:
        self._due: set[Any] = set()
        self._here: int | None = None  # the loop's thread while a journal flushes on it

    def write(self, state: PartitionState, batch: FlushBatch,
              on_done: Callable[[concurrent.futures.Future], None]) -> None:
        """``write_batch_hot`` of ``batch``; ``on_done(future)`` runs on the loop once it
        is committed or failed (at once if the loop flushed it itself)."""
        loop = asyncio.get_running_loop()

        def done(f: concurrent.futures.Future) -> None:
            if self._here == threading.get_ident():
                on_done(f)
            else:
                loop.call_soon_threadsafe(on_done, f)

        write_batch_hot(state, batch).add_done_callback(done)
        if not self._due:
            loop.call_soon(self._flush)
        self._due.add(state.writer.journal)

    def _flush(self) -> None:
        due, self._due = self._due, set()
        self._here = threading.get_ident()
        try:
            for journal in due:
                journal.flush_here()
        finally:
            self._here = None


class NothingToWrite(Exception):
    """Every part of a batch was dropped (stale sequences): no segment to write."""
