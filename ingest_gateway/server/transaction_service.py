"""Ending a transaction: the one implementation REST v3 ``:commit``/``:abort`` and Kafka's
EndTxn call.

``log_layout.transactions.end_transaction`` writes the markers and the transaction's
consumer-group offsets; here the offsets go through this gateway's group coordinator
(``groups.txn_offsets.offsets_writer``: its copy of a group must learn them), and
afterwards the read_committed long-polls of the transaction's partitions are woken (the
markers moved their last stable offsets; the batcher's commits do not tell the hub).
"""

from __future__ import annotations

import functools
from typing import Any

from ingest_gateway.server.gateway import Gateway
from ingest_gateway.server.groups.txn_offsets import offsets_writer
from log_layout import transactions
from log_layout.commit import wall_clock_ms


async def end_transaction(gateway: Gateway, tid: str, pid: int, epoch: int,
                          commit: bool) -> None:
    """Commit (``commit``) or abort the transaction of ``tid`` by producer ``pid`` at
    ``epoch``. Raises ProducerFenced, InvalidTxnState, StoreError."""
    store, hub = gateway.log, gateway.hub()

    def direct(group: str, offsets: Any) -> None:
        transactions.merge_group_offsets(store, group, offsets, wall_clock_ms())

    run = gateway.batcher.run_blocking
    before = await run(transactions.describe, store, tid) or {}
    await run(functools.partial(
        transactions.end_transaction, store, tid, pid, epoch, commit, gateway.clock_ms(),
        commit_offsets=offsets_writer(hub.coordinator, direct)))
    for topic, partition in before.get("partitions", ()):
        hub.committed(topic, partition, -1)
