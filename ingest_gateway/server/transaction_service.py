"""The transaction coordinator's operations: the one implementation REST v3's
``/v3/transactions`` routes and Kafka's InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit and EndTxn call, and the aborter of transactions older
than their timeout.

The coordinator's state is the transaction log (``log_layout.transactions``); every call
runs on the batcher's pool, off the event loop, at the gateway's clock. Its errors
(ProducerFenced, InvalidProducerEpoch, InvalidTxnState, UnknownPartition, StoreError)
are re-exported here with the log's constants, for the adapters' codes.

``log_layout.transactions.end_transaction`` writes the markers (through the gateway's
``transaction_markers.router``: at the partition's leader, so a hot journal is not
sealed by them) and the transaction's
consumer-group offsets; here the offsets go through this gateway's group coordinator
(``groups.txn_offsets.offsets_writer``: its copy of a group must learn them), and
afterwards the read_committed long-polls of the transaction's partitions are woken (the
markers moved their last stable offsets; the batcher's commits do not tell the hub).

:class:`TimeoutAborter` runs beside the gateway (started and stopped with it by
``server.lifecycle.running_gateway``) and aborts what ``transactions.abort_expired`` finds.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from ingest_gateway.server.gateway import Gateway
from ingest_gateway.server.groups.txn_offsets import offsets_writer
from ingest_gateway.server.transaction_markers import router
from log_layout import InvalidProducerEpoch, StoreError, UnknownPartition, transactions
from log_layout.commit import wall_clock_ms
from log_layout.errors import InvalidTxnState, ProducerFenced

logger = logging.getLogger("sparklog.gateway")

__all__ = ["InvalidProducerEpoch", "InvalidTxnState", "ProducerFenced", "StoreError",
           "UnknownPartition", "MAX_TIMEOUT_MS", "PREPARED", "init", "add_partitions",
           "add_offsets", "end_transaction", "TimeoutAborter"]

#: the longest transaction.timeout.ms a producer may ask for; the states an ending
#: transaction is in (a call then is Kafka's CONCURRENT_TRANSACTIONS)
MAX_TIMEOUT_MS, PREPARED = transactions.MAX_TIMEOUT_MS, transactions.PREPARED

#: how often the gateway aborts timed-out transactions (Kafka's
#: transaction.abort.timed.out.transaction.cleanup.interval.ms is 10 s; shorter here
#: because a check is one listing of the transaction log)
ABORT_CHECK_S = 1.0
#: the same in a slot of the broker application, where one slot at a time does it (the
#: slot coordinating ClusterMember.TIMEOUTS_OWNER): Kafka's 10 s, a LIST of the store
#: each time (issue 33: an idle application's store requests)
CLUSTER_ABORT_CHECK_S = 10.0


async def _run(gateway: Gateway, fn: Any, *args: Any, **kwargs: Any) -> Any:
    return await gateway.batcher.run_blocking(functools.partial(fn, *args, **kwargs))


async def init(gateway: Gateway, tid: str, timeout_ms: int, *, producer_id: int = -1,
               epoch: int = -1) -> tuple[int, int]:
    """A new epoch for ``tid`` (fencing its older producer, whose open transaction is
    aborted); its (producer id, epoch). With KIP-360's current ``producer_id`` and
    ``epoch`` named, only if they are still the id's (else ProducerFenced), and a retried
    bump (the epoch just before the current, nothing begun since) answers the current
    pair again. Raises ProducerFenced, InvalidTxnState, StoreError."""
    def work() -> tuple[int, int]:
        if producer_id >= 0:
            doc = transactions.describe(gateway.log, tid)
            if doc is None or doc["producer_id"] != producer_id or epoch < doc["epoch"] - 1:
                cur = (doc or {}).get("producer_id", -1), (doc or {}).get("epoch", -1)
                raise ProducerFenced(tid, producer_id, epoch, *cur)
            if epoch == doc["epoch"] - 1 and doc["state"] == transactions.EMPTY:
                return doc["producer_id"], doc["epoch"]
        return transactions.init_transactions(gateway.log, tid, timeout_ms, now,
                                              markers=router(gateway))

    now = gateway.clock_ms()
    return await gateway.batcher.run_blocking(work)


async def add_partitions(gateway: Gateway, tid: str, producer_id: int, epoch: int,
                         pairs: list[tuple[str, int]]) -> None:
    """Add the (topic, partition) ``pairs`` to the producer's transaction, all or none:
    an unknown topic or partition is refused before anything is added. Raises
    UnknownTopic, UnknownPartition, ProducerFenced, InvalidTxnState, StoreError."""
    for topic in sorted({t for t, _ in pairs}):
        info = await gateway.batcher.topic_info(topic)
        for t, p in pairs:
            if t == topic and not 0 <= p < info.partitions:
                raise UnknownPartition(topic, p, info.partitions)
    await _run(gateway, transactions.add_partitions, gateway.log, tid, producer_id, epoch,
               pairs, now_ms=gateway.clock_ms())


async def add_offsets(gateway: Gateway, tid: str, producer_id: int, epoch: int, group: str,
                      offsets: dict[str, dict[int, int]]) -> None:
    """The group joins the producer's transaction with ``offsets`` (topic -> partition ->
    offset; may be empty), committed by the transaction's end. Raises ProducerFenced,
    InvalidTxnState, StoreError."""
    await _run(gateway, transactions.add_offsets, gateway.log, tid, producer_id, epoch, group,
               offsets, now_ms=gateway.clock_ms())


async def end_transaction(gateway: Gateway, tid: str, pid: int, epoch: int,
                          commit: bool, *, bump: bool = False,
                          bound_markers: bool = False) -> tuple[int, int]:
    """Commit (``commit``) or abort the transaction of ``tid`` by producer ``pid`` at
    ``epoch``; the producer id and epoch to go on with (``bump``: transactions v2,
    KIP-890, the epoch after; ``log_layout.transactions``; ``bound_markers``: its records
    were all committed before the end, as a Kafka producer's at acks=all, so the v1
    late-marker guard applies). Raises ProducerFenced, InvalidTxnState, StoreError."""
    store, hub = gateway.log, gateway.hub()

    def direct(group: str, offsets: Any) -> None:
        transactions.merge_group_offsets(store, group, offsets, wall_clock_ms())

    run = gateway.batcher.run_blocking
    before = await run(transactions.describe, store, tid) or {}
    after = await run(functools.partial(
        transactions.end_transaction, store, tid, pid, epoch, commit, gateway.clock_ms(),
        commit_offsets=offsets_writer(hub.coordinator, direct), bump=bump,
        bound_markers=bound_markers, markers=router(gateway)))
    for topic, partition in before.get("partitions", ()):
        hub.committed(topic, partition, -1)
    return after


class TimeoutAborter:
    """Calls ``abort_expired`` every ``interval_s`` on the batcher's pool, from
    :meth:`start` to :meth:`stop` (the gateway's life), in rounds where ``should_run()``
    says so (default: every round), writing its markers with ``markers`` (a
    ``transactions.MarkerWriter``; default: into ``_log``). Several gateways may run
    one each: the coordinator's exclusive versions let one abort win."""

    def __init__(self, batcher: Any, log_: Any, now_ms: Any = None,
                 interval_s: float = ABORT_CHECK_S, should_run: Any = None,
                 markers: Any = None):
        self.batcher, self.log, self.interval_s = batcher, log_, interval_s
        self.markers = markers
        self.now_ms = now_ms or wall_clock_ms
        self.should_run = should_run or (lambda: True)
        self._task: asyncio.Task | None = None

    def start(self) -> "TimeoutAborter":
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            if not self.should_run():
                continue
            try:
                aborted = await self.batcher.run_blocking(functools.partial(
                    transactions.abort_expired, self.log, self.now_ms(), markers=self.markers))
                for tid in aborted:
                    logger.info("transaction of %r aborted: older than its timeout", tid)
            except Exception:  # the store failing now: the next round tries again
                logger.exception("aborting timed-out transactions failed")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
