"""What a transactional produce request must meet before the batcher takes it.

A request with a ``transactional_id`` (and its producer id, epoch and sequences)
writes into its producer's ongoing transaction: the transaction log
(``log_layout.transactions``) must name this producer id and epoch (else
ProducerFenced), be Ongoing, and hold every partition the request writes -- Kafka's
producer adds a partition (AddPartitionsToTxn) before its first record goes there,
so the markers that end the transaction reach every partition it wrote; a record
for a partition not in it is refused (Kafka's INVALID_TXN_STATE) and nothing of
the request is written. The batcher then appends the records with
``transactional=True``, each flush of them its own segment of this one producer
(``FlushBatch.txn``; ``log_layout.txn_writes``).

A produce that races the end of its own transaction (a commit decided between
this check and the flush) is the client's misuse: the Producer flushes before it
commits, as Kafka's does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from log_layout import transactions
from log_layout.errors import InvalidTxnState, ProducerFenced


def check_in_transaction(log: Any, tid: str, producer_id: int, epoch: int, topic: str,
                         partitions: Iterable[int]) -> None:
    """Raise unless ``tid``'s ongoing transaction is this producer's and holds every
    ``(topic, partition)``: ProducerFenced, InvalidTxnState. Reads the store."""
    doc = transactions.describe(log, tid)
    if not doc:
        raise InvalidTxnState(tid, "Unknown", "produce before init_transactions")
    if (doc["producer_id"], doc["epoch"]) != (producer_id, epoch):
        raise ProducerFenced(tid, producer_id, epoch, doc["producer_id"], doc["epoch"])
    have = {(t, p) for t, p in doc["partitions"]}
    for p in sorted(partitions):
        if doc["state"] != transactions.ONGOING or (topic, p) not in have:
            raise InvalidTxnState(tid, doc["state"], f"produce to {topic}-{p}: the partition "
                                  "is not in the ongoing transaction (add it first)")
