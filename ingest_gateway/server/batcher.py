"""Per-partition batching, flushing, acks and idempotence of one gateway.

Lifecycle of a record: a produce request is parsed into one Arrow table per partition
(``codec``); :meth:`Batcher.produce` checks it (size, keys, producer sequence, buffer
room) for *every* partition before it adds anything, so a refused request leaves nothing
behind; plain calls add in arrival order (``arrival_order``). The tables join the
partition's open :class:`FlushBatch`. Flushes are a *group commit*: a partition with no
flush in flight flushes at once (at the end of the event loop's turn, so that turn's
requests go together); while one is in flight, arrivals gather for the next. A batch
also goes at ``batch.size`` bytes or ``flush.messages`` records, and at shutdown; the
gateway does not linger, as Kafka's broker does not (``gateway.linger.ms`` > 0 makes a
new batch wait, for compatibility). A flush is ONE ``PartitionWriter.append`` of the
concatenated tables (one segment, one manifest commit), at most one in flight per
partition, on a flush thread (a slow flush of P never delays Q); a small batch on a
store whose commits cost microseconds (``Store.cheap_commits``) is written on the event
loop. Each batch has ONE asyncio future, resolved when its flush ends; requests keep
(batch, part) references into it and compute their offsets from its base offset.

Acks: ``0`` answers at once with no offsets; ``1`` once the records are in the batch,
with the offsets they will get (if that flush then fails they are lost, as with Kafka's
acks=1: logged at ERROR, counted in ``sparklog_gateway_flush_failures_total`` and
``sparklog_gateway_records_lost_total``); ``all`` after the manifest commit. A flush
fails only for the store's or the leadership's sake: everything a record could make
fail is refused when its request is parsed, so one bad record never costs its
neighbours.

Idempotence: a request may carry (producer_id, producer_epoch) and per partition a first
sequence. The committed state lives in the manifest (``Manifest.producers``, last five
batches per producer), so it survives a restart; accepted batches not yet committed
(``PartitionState.pending``) are checked too, so a retry arriving before the flush is
answered with the pending batch's offsets (``log_layout.idempotence``: the rules).

Every partition written is claimed first (``PartitionLog.claim``: a new leader epoch,
fencing the previous writer); a writer fenced in turn answers ``NotLeader``. Under the
broker application (``cluster``) only assigned partitions are written, claimed at once
(:meth:`lead`); one moved away is *released* (:meth:`release`): refused, what it
accepted still flushed (or fenced by the new leader's claim), then forgotten.

The hot tier (``gateway.hot.enable``): partitions are claimed with the gateway's journal
(``log_layout.hot_writer``: every partition's flush in one shared object and one commit,
up to ``hot.uploads.in.flight`` out at once). acks=all waits for the entry.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from conf.settings import GatewaySettings
from conf.topic import TopicConfig
from ingest_gateway.errors import BadRequest, BufferFull, FlushFailed, NotLeader, ShuttingDown
from ingest_gateway.partitioner import StickyPartitioner
from ingest_gateway.server import sequencing, txn_produce
from ingest_gateway.server.arrival_order import ArrivalOrder, Gate
from ingest_gateway.server.batches import (FlushBatch, JournalFlushes, NothingToWrite,
                                           PartitionState, PartResult, Ticket, write_batch,
                                           write_now)
from ingest_gateway.server.codec import Parsed, check_acks, check_records
from ingest_gateway.server.metrics import GatewayMetrics
from ingest_gateway.server.topic_cache import TopicCache
from log_layout import (Fenced, Log, OutOfOrderSequence, PartitionLog,
                        PartitionWriter, ProducerBatch, TopicInfo)
from log_layout.hot_writer import JournalBroken, JournalWriter

logger = logging.getLogger("sparklog.gateway")

CommitListener = Callable[[str, int, int], None]

#: the largest batch written on the loop itself on a store of cheap commits: under a Kafka
#: batch (16 KB), which on the loop blocked arrivals, so each request was a flush (issue 30)
INLINE_FLUSH_BYTES = 4 * 1024


class Batcher:
    """The write side of one gateway: create on the event loop, ``await close()`` to stop."""

    def __init__(self, log_: Log, settings: GatewaySettings, *, topic_defaults: TopicConfig,
                 metrics: GatewayMetrics, gateway_id: str | None = None,
                 flush_threads: int | None = None, topic_cache_ms: int = 1000):
        self.log = log_
        self.settings = settings
        self.topic_defaults = topic_defaults
        self.metrics = metrics
        self.id = gateway_id or \
            f"gateway-{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=flush_threads or min(16, (os.cpu_count() or 2) * 4),
            thread_name_prefix="sparklog-flush")
        self.sticky = StickyPartitioner(busy=self._flushing)
        self.buffered = 0
        self.closing = False
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._claims: dict[tuple[str, int], asyncio.Future] = {}
        self._arrivals = ArrivalOrder()
        self.topics = TopicCache(log_, settings, topic_defaults, self.run_blocking,
                                 cache_s=topic_cache_ms / 1000)
        self._listeners: list[CommitListener] = []
        self._idle = asyncio.Event()
        self._idle.set()
        #: the broker application's view (``ClusterMember``); None: lead every partition
        self.cluster: Any = None
        #: bytes and records accepted per partition since start (the cluster's load figures)
        self.bytes_in: dict[tuple[str, int], int] = {}
        self.records_in: dict[tuple[str, int], int] = {}
        #: the hot journal partitions are claimed with (gateway.hot.enable; see _hot_journal)
        self.journal: JournalWriter | None = None
        self._journal_lock = threading.Lock()
        #: hot flushes: each journal given appends in a turn is offered the flush at its end
        self._hot = JournalFlushes()

    # -- hooks -----------------------------------------------------------------
    def add_commit_listener(self, callback: CommitListener) -> None:
        """Call ``callback(topic, partition, high_watermark)`` on the event loop after
        each committed flush (long-poll fetch waits on it)."""
        self._listeners.append(callback)

    def leading(self) -> dict[tuple[str, int], int]:
        """Partitions this gateway currently writes, with the leader epoch it writes at."""
        return {k: s.writer.epoch for k, s in self._states.items() if s.stopped is None}

    def writing(self, topic: str, partition: int) -> PartitionState | None:
        """The state of a partition this gateway writes now, else None."""
        state = self._states.get((topic, partition))
        return state if state is not None and state.stopped is None else None

    async def lead(self, topic: str, partition: int) -> None:
        """Claim a partition now (the broker application assigned it here), fencing its
        previous leader before any record arrives. A state left fenced or released by
        an earlier leadership is dropped first. Raises UnknownTopic, StoreError."""
        info = await self.topic_info(topic)
        if partition >= info.partitions:
            return
        key = (topic, partition)
        state = self._states.get(key)
        if state is not None and state.stopped is not None and state.idle:
            del self._states[key]
        await self._state(info, partition)

    def release(self, topic: str, partition: int, why: NotLeader) -> None:
        """Stop leading a partition (moved away): new requests get ``why``; what is
        already accepted is still flushed; then the partition is forgotten."""
        state = self._states.get((topic, partition))
        if state is None or state.stopped is not None:
            return
        state.stopped, state.draining = why, True
        state.wake_held()
        if state.current is not None:
            self._flush(state)
        self._forget_if_drained(state)

    def _forget_if_drained(self, state: PartitionState) -> None:
        key = (state.topic, state.partition)
        if state.draining and state.idle and self._states.get(key) is state:
            del self._states[key]

    # -- blocking work off the loop ----------------------------------------------
    async def run_blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run store I/O on the flush pool (admin handlers use it too)."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def topic_info(self, topic: str) -> TopicInfo:
        """The topic's metadata (cached ``topic_cache_ms``); auto-creates if enabled.

        Raises InvalidTopicName or UnknownTopic.
        """
        return await self.topics.get(topic)

    def forget_topic(self, topic: str) -> None:
        """Drop cached state of a deleted or altered topic."""
        self.topics.forget(topic)
        for key in [k for k in self._states if k[0] == topic]:
            state = self._states[key]
            if state.idle:
                del self._states[key]

    async def _state(self, info: TopicInfo, partition: int) -> PartitionState:
        key = (info.name, partition)
        state = self._states.get(key)
        if state is not None and state.incarnation == (info.created_ms, info.topic_id):
            if state.stopped is None:
                return state
            if not state.idle or not (isinstance(state.writer.fenced, JournalBroken) or
                                      await self.run_blocking(state.taken_back)):
                raise state.stopped
            del self._states[key]  # not fenced by a leader: claim again
        claim = self._claims.get(key)
        if claim is None:
            claim = self._claims[key] = asyncio.ensure_future(self._claim_state(info, partition))
        return await asyncio.shield(claim)

    async def _claim_state(self, info: TopicInfo, partition: int) -> PartitionState:
        # The state is registered in the same step that retires the claim, so no request
        # can slip in between and claim again (which would fence this very gateway).
        key = (info.name, partition)
        try:
            plog, writer = await self.run_blocking(self._claim, info.name, partition)
            state = self._states[key] = PartitionState(plog, writer, info)
            return state
        finally:
            self._claims.pop(key, None)

    def _claim(self, topic: str, partition: int) -> tuple[PartitionLog, PartitionWriter]:
        plog = self.log.partition(topic, partition)
        return plog, plog.claim(self.id, self._hot_journal())

    def _hot_journal(self) -> JournalWriter | None:
        """The journal to claim with (None: the hot tier is off); a new one after one broke.
        Claims run on several flush threads at once: one journal is made, under a lock."""
        s = self.settings
        with self._journal_lock:
            if s.hot_enable and (self.journal is None or self.journal.broken is not None):
                self.journal = JournalWriter.for_store(self.log.journals, self.id, s)
            return self.journal if s.hot_enable else None

    # -- produce ------------------------------------------------------------------
    async def produce(self, topic: str, parsed: Parsed, *, acks: int = -1,
                      producer: tuple[int, int] | None = None,
                      sequences: dict[int, int] | None = None,
                      transactional_id: str | None = None) -> list[PartResult]:
        """Accept a parsed request; per partition, its base offset (None at acks=0).

        All checks run before anything is added, so an error leaves nothing
        behind. Raises InvalidRequiredAcks (``acks`` not 0, 1 or -1), ShuttingDown,
        UnknownTopic, UnknownPartition, RecordTooLarge, MissingKey, BufferFull, BadRequest
        (sequences), InvalidProducerEpoch, OutOfOrderSequence, NotLeader; with a
        ``transactional_id`` (``txn_produce``) ProducerFenced, InvalidTxnState. With
        acks=all, a failed flush is reported per partition in ``PartResult.error``.
        """
        check_acks(acks)
        if self.closing:
            raise ShuttingDown()
        # plain calls add in arrival order (``arrival_order``); idempotent ones by sequence
        gate = self._arrivals.enter(topic, parsed.parts) if producer is None else None
        try:
            return await self._produce(topic, parsed, acks, producer, sequences,
                                       transactional_id, gate)
        finally:
            if gate is not None:
                gate.leave()

    async def _produce(self, topic: str, parsed: Parsed, acks: int,
                       producer: tuple[int, int] | None, sequences: dict[int, int] | None,
                       transactional_id: str | None, gate: Gate | None) -> list[PartResult]:
        info = await self.topic_info(topic)
        if self.cluster is not None:
            for p in parsed.parts:
                self.cluster.check_leader(topic, p)
        for p, table in parsed.parts.items():
            check_records(topic, info.config, table)
        if transactional_id is not None:
            if producer is None:
                raise BadRequest("a transactional request needs producer_id, producer_epoch "
                                 "and sequence")
            await self.run_blocking(txn_produce.check_in_transaction, self.log,
                                    transactional_id, *producer, topic, list(parsed.parts))
        txn = producer if transactional_id is not None else None
        incoming = parsed.nbytes
        if self.buffered + incoming > self.settings.buffer_memory and self.buffered:
            self.metrics.rejected(BufferFull.code)
            raise BufferFull(self.buffered, incoming, self.settings.buffer_memory)
        states = {p: await self._state(info, p) for p in parsed.parts}
        if self.closing:
            raise ShuttingDown()

        batches: dict[int, ProducerBatch] = {}
        if producer is not None:
            pid, epoch = producer
            for p, table in parsed.parts.items():
                if sequences is None or p not in sequences:
                    raise BadRequest(f"an idempotent request needs a sequence for partition {p}")
                batches[p] = ProducerBatch(pid, epoch, sequences[p], table.num_rows)
        tickets = await sequencing.tickets(parsed, states, batches,
                                           closing=lambda: self.closing,
                                           out_of_order=self.metrics.out_of_order)
        if gate is not None:
            await gate.turn()
        for p, table in parsed.parts.items():
            ticket = tickets[p]
            if ticket.batch is None and ticket.committed is None:
                self._add(states[p], table, batches.get(p), ticket, txn)
                if acks != -1:
                    ticket.batch.acked += table.num_rows  # type: ignore[union-attr]
        if gate is not None:
            gate.leave()  # added: the next call goes on while this one waits for its flush
        self.metrics.accepted(topic, parsed.count, incoming)
        for p, table in parsed.parts.items():
            key = (topic, p)
            self.bytes_in[key] = self.bytes_in.get(key, 0) + table.nbytes
            self.records_in[key] = self.records_in.get(key, 0) + table.num_rows
        return [await self._answer(ticket, acks) for ticket in tickets.values()]

    def _add(self, state: PartitionState, table: pa.Table, pb: ProducerBatch | None,
             ticket: Ticket, txn: tuple[int, int] | None = None) -> None:
        batch = state.current
        if batch is not None and batch.txn != txn:
            # A transactional segment holds one producer's records only (txn_writes):
            # the open batch goes to the queue, in order, and a new one opens.
            state.queue.append(self._close_current(state))
            self._flush(state)
            batch = None
        if batch is None:
            loop = asyncio.get_running_loop()
            batch = state.current = FlushBatch(loop.create_future(), txn)
            if self.settings.linger_ms > 0:  # the compatibility knob: a fixed wait
                state.timer = loop.call_later(self.settings.linger_ms / 1000,
                                              self._linger_expired, state, batch)
            elif len(state.flushing) < state.flush_limit and not state.queue:
                loop.call_soon(self._linger_expired, state, batch)  # a slot: flush at once
            else:
                state.flush_again = True  # group commit: goes when the flush in flight ends
        before = batch.nbytes
        part = batch.add(table)
        self.buffered += batch.nbytes - before
        self._idle.clear()
        if pb is not None:
            batch.producers.append((pb, part))
            state.pending.setdefault(pb.producer_id, []).append((pb, batch, part))
            state.wake_held()
        ticket.batch, ticket.part = batch, part
        ticket.predicted = state.assigned
        state.assigned += table.num_rows
        if self._full(batch):
            self._flush(state)

    async def _answer(self, ticket: Ticket, acks: int) -> PartResult:
        if ticket.committed is not None:
            return PartResult(ticket.partition, ticket.count, ticket.committed[0])
        batch = ticket.batch
        assert batch is not None
        if acks == 0:
            return PartResult(ticket.partition, ticket.count)
        if acks == 1 and batch.result is None and batch.error is None:
            return PartResult(ticket.partition, ticket.count, ticket.predicted)
        await asyncio.shield(batch.future)
        if batch.error is not None:
            return PartResult(ticket.partition, ticket.count, error=batch.error)
        dropped = batch.dropped.get(ticket.part)
        if isinstance(dropped, Exception):
            if isinstance(dropped, OutOfOrderSequence):
                self.metrics.out_of_order()
            return PartResult(ticket.partition, ticket.count, error=dropped)
        if dropped is not None:
            return PartResult(ticket.partition, ticket.count, dropped[0])
        assert batch.result is not None
        return PartResult(ticket.partition, ticket.count,
                          batch.result.base_offset + batch.starts[ticket.part])

    # -- flush -------------------------------------------------------------------------
    def _linger_expired(self, state: PartitionState, batch: FlushBatch) -> None:
        if state.current is batch:
            self._flush(state)

    def _full(self, batch: FlushBatch) -> bool:
        return batch.nbytes >= self.settings.batch_size or \
            batch.rows >= self.settings.flush_messages

    def _flushing(self, topic: str, partition: int) -> bool:
        state = self._states.get((topic, partition))
        return state is not None and (bool(state.flushing) or bool(state.queue))

    def _close_current(self, state: PartitionState) -> FlushBatch:
        batch, state.current = state.current, None
        self.sticky.batch_closed(state.topic, state.partition)
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        assert batch is not None
        return batch

    def _flush(self, state: PartitionState) -> None:
        """Start flushing the next batch; while ``state.flush_limit`` flushes are in
        flight, a full open batch is closed into the queue (so no flush grows past
        batch.size / flush.messages and holds the GIL long), a due one marked for later."""
        if len(state.flushing) >= state.flush_limit:
            if state.current is not None:
                if self._full(state.current):
                    state.queue.append(self._close_current(state))
                else:
                    state.flush_again = True
            return
        if state.queue:
            batch = state.queue.popleft()
        elif state.current is not None:
            batch = self._close_current(state)
            state.flush_again = False
        else:
            return
        state.flushing.append(batch)
        started = time.perf_counter()
        if state.writer.journal is not None:  # the journal gathers every partition's flush
            self._hot.write(state, batch, lambda f: self._flushed(state, batch, f, started))
            return
        if batch.nbytes <= INLINE_FLUSH_BYTES and self.log.store.cheap_commits:
            # A small batch on a store whose commits cost microseconds: the two thread
            # hand-offs (and the GIL passes between them) would cost more than the write.
            self._flushed(state, batch, write_now(state, batch), started)
            return
        fut = asyncio.get_running_loop().run_in_executor(self.executor, write_batch, state, batch)
        fut.add_done_callback(lambda f: self._flushed(state, batch, f, started))

    def _flushed(self, state: PartitionState, batch: FlushBatch, fut: concurrent.futures.Future,
                 started: float) -> None:
        """On the loop: resolve the batch's one future, notify listeners, flush what is due."""
        state.flushing.remove(batch)
        self.buffered -= batch.nbytes
        for pb, _part in batch.producers:
            pending = state.pending.get(pb.producer_id)
            if pending:
                pending[:] = [e for e in pending if e[1] is not batch]
                if not pending:
                    del state.pending[pb.producer_id]
        state.wake_held()  # pending shrank: the committed state is what a held batch meets
        exc = fut.exception()
        if isinstance(exc, NothingToWrite):
            exc = None
        elif exc is None:
            batch.result = fut.result()
            self.metrics.flushed(time.perf_counter() - started, batch.result.count)
        if exc is not None:
            if isinstance(exc, Fenced):
                leader = self.cluster.leader(state.topic, state.partition) \
                    if self.cluster is not None else None
                state.stopped = NotLeader(state.topic, state.partition, str(exc), leader)
                state.draining = False  # nothing more can be written: fail what is queued
                batch.error = state.stopped
            else:
                batch.error = exc if isinstance(exc, FlushFailed) else \
                    FlushFailed(state.topic, state.partition, f"{type(exc).__name__}: {exc}")
            self.metrics.rejected(batch.error.code)
            self._lost(state, batch, exc)
        if exc is not None or batch.dropped:
            # Offsets predicted for acks=1 are void: re-base on what is committed.
            pending_rows = sum(b.rows for b in (*state.flushing, *state.queue)) + \
                (state.current.rows if state.current is not None else 0)
            state.assigned = state.plog.snapshot(refresh=False).next_offset + pending_rows
        batch.future.set_result(None)
        if batch.result is not None:
            hw = batch.result.last_offset + 1
            for listener in self._listeners:
                try:
                    listener(state.topic, state.partition, hw)
                except Exception:  # a listener must never break produce
                    logger.exception("commit listener failed")
        if state.stopped is not None and not state.draining:
            # Fenced: what is queued or open can never be written by this gateway.
            orphans = list(state.queue)
            state.queue.clear()
            if state.current is not None:
                orphans.append(self._close_current(state))
            for orphan in orphans:
                self.buffered -= orphan.nbytes
                orphan.error = state.stopped
                self._lost(state, orphan, state.stopped)
                orphan.future.set_result(None)
        if state.queue or (state.current is not None and (state.flush_again or self.closing
                                                          or state.draining)):
            self._flush(state)
        self._forget_if_drained(state)
        if self.buffered == 0 and all(s.idle for s in self._states.values()):
            self._idle.set()

    def _lost(self, state: PartitionState, batch: FlushBatch, exc: BaseException) -> None:
        """Count and log a batch that will never be written (as Kafka logs a failed
        produce at ERROR): its acks=0/1 records were acknowledged and are lost."""
        assert batch.error is not None
        self.metrics.flush_failed(state.topic, batch.error.code, batch.acked)
        logger.error("flush of %s-%d failed, %d records not written (%d of them acknowledged at "
                     "acks=0 or 1 and lost): %r", state.topic, state.partition, batch.rows,
                     batch.acked, exc)

    # -- shutdown -----------------------------------------------------------------------
    async def flush_all(self) -> None:
        """Flush every open batch and wait until nothing is pending."""
        for state in list(self._states.values()):
            self._flush(state)
        while not self._idle.is_set():
            await self._idle.wait()
            # a batch may have opened meanwhile (acks<all request racing shutdown)
            for state in list(self._states.values()):
                self._flush(state)

    async def close(self) -> None:
        """Stop accepting, flush everything accepted, release the flush threads."""
        self.closing = True
        for state in self._states.values():
            state.wake_held()
        await self.flush_all()
        if self.journal is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.journal.close)
        self.executor.shutdown(wait=True)

