"""Transactions seen from outside: listing and describing transactional ids, the
producers of a partition, aborting a hanging transaction's partition, and writing the
marker another gateway's coordinator forwards to this leader -- what
``kafka-transactions.sh list``, ``describe``, ``describe-producers`` and ``abort``
(ListTransactions, DescribeTransactions, DescribeProducers, WriteTxnMarkers) and REST
v3's ``GET /v3/transactions[/{tid}]`` read.

The transaction log's documents are ``log_layout.transactions``' (a dict per id:
``transactional_id``, ``producer_id``, ``epoch``, ``timeout_ms``, ``state``,
``started_ms``, ``updated_ms``, ``partitions``, ``offsets``); the producer states are
the partition manifest's (``log_layout.txn_admin``). Every call runs on the batcher's
pool, off the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ingest_gateway.errors import NotLeader
from ingest_gateway.server.gateway import Gateway
from ingest_gateway.server.transaction_markers import Marker, router
from log_layout import Fenced, InvalidProducerEpoch, transactions
from log_layout.txn_admin import NoOpenTransaction, abort_hanging
from log_layout.txn_admin import describe_producers as _producers

#: a transactional id's document (module doc)
Document = dict[str, Any]


async def describe(gateway: Gateway, tid: str) -> Document | None:
    """The transaction log's document of ``tid``; None if the id has none. Raises
    StoreError."""
    return await gateway.batcher.run_blocking(transactions.describe, gateway.log, tid)


async def list_all(gateway: Gateway, matcher: Callable[[str], Any] | None = None
                   ) -> list[tuple[str, Document]]:
    """(transactional id, its document) of every id whose whole name ``matcher`` matches
    (a truthy answer; every id when None). Raises StoreError."""
    def listed() -> list[tuple[str, Document]]:
        out = []
        for tid in transactions.list_transactions(gateway.log):
            if matcher is not None and not matcher(tid):
                continue
            doc = transactions.describe(gateway.log, tid)
            if doc:
                out.append((tid, doc))
        return out

    return await gateway.batcher.run_blocking(listed)


async def producers(gateway: Gateway, topic: str, partition: int) -> list[tuple[Any, int]]:
    """(``txn_admin.ProducerState``, last record timestamp ms or -1) of each producer of
    ``topic``-``partition``. Raises UnknownTopic, UnknownPartition, NotLeader,
    StoreError."""
    def read() -> list[tuple[Any, int]]:
        gateway.check_partition(topic, partition)
        m = gateway.log.partition(topic, partition).snapshot()
        return [(s, _last_timestamp(m, s.last_offset))
                for s in _producers(gateway.log, topic, partition)]

    return await gateway.batcher.run_blocking(read)


def _last_timestamp(m: Any, offset: int) -> int:
    """The largest record timestamp (ms) of the segment holding ``offset`` (-1: none)."""
    if offset < 0:
        return -1
    for s in m.segments:
        if s.base_offset <= offset <= s.last_offset:
            return s.max_ts
    return -1


async def abort_partition(gateway: Gateway, topic: str, partition: int, producer_id: int,
                          epoch: int) -> None:
    """Write the ABORT marker of ``producer_id``'s open transaction in one partition
    (nothing when it has none), then wake the partition's read_committed long-polls.
    Raises UnknownTopic, UnknownPartition, NotLeader, InvalidProducerEpoch (an epoch
    older than the partition's), StoreError."""
    def abort() -> None:
        gateway.check_partition(topic, partition)
        m = gateway.log.partition(topic, partition).snapshot()
        entry = m.producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise InvalidProducerEpoch(producer_id, epoch, entry.epoch)
        # the leader's own hot writer when it has one (no seal of its journal)
        if entry is not None and producer_id in m.open_txns and router(gateway).write_here(
                Marker(topic, partition, producer_id, entry.epoch, False, False, None),
                gateway.clock_ms()):
            return
        try:
            abort_hanging(gateway.log, topic, partition, producer_id)
        except NoOpenTransaction:
            pass  # ended already: nothing left to abort

    await gateway.batcher.run_blocking(abort)
    gateway.hub().committed(topic, partition, -1)  # the marker moved the last stable offset


async def write_forwarded(gateway: Gateway, marker: Marker) -> None:
    """Write a marker another gateway's transaction coordinator forwarded to this one
    as the partition's leader (``transaction_markers``), through this gateway's writer
    of the partition (into its hot journal), then wake the partition's read_committed
    long-polls. A partition assigned here that is not written yet is claimed first;
    without the broker application, one this gateway does not write hot is written
    into ``_log``. Raises NotLeader (another gateway leads it, or this one was fenced:
    the coordinator asks the new leader), UnknownTopic, UnknownPartition,
    InvalidProducerEpoch, StoreError."""
    topic, partition = marker.topic, marker.partition
    await gateway.batcher.run_blocking(gateway.check_partition, topic, partition)
    if gateway.cluster is not None and gateway.batcher.writing(topic, partition) is None:
        await gateway.batcher.lead(topic, partition)
    markers, now = router(gateway), gateway.clock_ms()

    def write() -> None:
        state = gateway.batcher.writing(topic, partition)
        if state is None and gateway.cluster is not None:  # claimed above: fenced since
            raise NotLeader(topic, partition, "fenced by another gateway's claim")
        try:
            if state is not None and state.writer.journal is not None:
                state.writer.write_marker(marker.producer_id, marker.epoch, marker.commit,
                                          now_ms=now, strict=marker.strict,
                                          before=marker.before)
            else:
                if gateway.settings.gateway.hot_enable:
                    markers.count("direct", "cold")
                markers.direct(topic, partition, marker.producer_id, marker.epoch,
                               marker.commit, now_ms=now, strict=marker.strict,
                               before=marker.before)
        except Fenced as e:  # a claim took it meanwhile: the coordinator asks again
            raise NotLeader(topic, partition, str(e)) from None

    await gateway.batcher.run_blocking(write)
    gateway.hub().committed(topic, partition, -1)  # the marker moved the last stable offset
