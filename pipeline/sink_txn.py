"""The sink's one door to transactions (``log_layout.transactions``): change it here only.

The sink needs five things of the store, in Kafka's terms (KIP-98):

* :func:`begin` -- ``init_transactions(log, tid, timeout_ms) -> (producer_id, epoch)``:
  a new epoch for the transactional id, which fences (and aborts the open transaction
  of) any earlier producer of that id -- a crashed Spark job's or query's;
* :func:`register` -- ``add_partitions(log, tid, pid, epoch, partitions)`` before a
  task appends to them (so the coordinator knows where to write markers);
* :func:`append` -- a transactional append: one segment of the producer's records
  under its epoch and next sequence (``PartitionWriter.append(..., transactional=True)``),
  invisible to read-committed readers until the commit marker;
* :func:`end` -- ``end_transaction(log, tid, pid, epoch, commit)``;
* :func:`last_batch` / the ``batch`` of :func:`end` -- which streaming micro-batch the
  query's last committed transaction held (``add_offsets``; see ``sink_stream``).

Without ``log_layout.transactions`` (:data:`TRANSACTIONAL` False: an older tree) the
sink runs without transactions: appends are plain and visible at once, ``end(commit=
False)`` cannot take them back (at least once, Spark's Kafka sink's guarantee).

Where the batch id lives: as Kafka's ``sendOffsetsToTransaction`` does it, in the
transaction itself -- ``add_offsets`` of the group named like the transactional id,
pseudo-topic ``BATCH_TOPIC`` partition 0, offset = the batch id -- so the group
document holds it exactly when the transaction's records are committed (step 3 of
``transactions``), never before and never without them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pyarrow as pa

from log_layout import Fenced, Log, OutOfOrderSequence, ProducerBatch, wall_clock_ms

try:
    from log_layout import transactions as _tx
except ImportError:  # the transactions module has not landed yet
    _tx = None

TRANSACTIONAL = _tx is not None and all(
    hasattr(_tx, name) for name in ("init_transactions", "add_partitions", "end_transaction"))

#: the pseudo-topic of the group document under which a query's last batch id is kept
BATCH_TOPIC = "_spark_sink_batch"
#: the longest transaction.timeout.ms the store takes (Kafka's transaction.max.timeout.ms)
MAX_TIMEOUT_MS = getattr(_tx, "MAX_TIMEOUT_MS", 900_000)
#: appends that lost a race to another task's (sequence or leader epoch) are retried;
#: each loss means another append committed, so this bounds only a broken store
_RETRIES = 1000


@dataclasses.dataclass(frozen=True)
class Txn:
    """A producer of the sink: ``producer_id`` and ``epoch`` are None without transactions."""

    tid: str
    producer_id: int | None = None
    epoch: int | None = None

    @property
    def transactional(self) -> bool:
        return self.producer_id is not None


def begin(log: Log, tid: str, timeout_ms: int) -> Txn:
    """A new epoch for ``tid``: fences its earlier producers, aborting their open
    transaction. Raises what ``init_transactions`` raises."""
    if not TRANSACTIONAL:
        return Txn(tid)
    pid, epoch = _tx.init_transactions(log, tid, timeout_ms)
    return Txn(tid, pid, epoch)


def register(log: Log, txn: Txn, partitions: Iterable[tuple[str, int]]) -> None:
    """Add ``partitions`` to ``txn``'s open transaction (it opens with the first)."""
    if txn.transactional:
        _tx.add_partitions(log, txn.tid, txn.producer_id, txn.epoch, sorted(set(partitions)))


def append(log: Log, txn: Txn, topic: str, partition: int, table: pa.Table) -> int:
    """Append ``table`` to ``topic``-``partition`` in ``txn``; returns its base offset.

    Appends at the partition's current leader epoch without claiming it: a claim
    would bump the epoch and fence the live gateway writing there (see ``sink``). A
    gateway claiming meanwhile fences this writer before its version is created
    (nothing was appended), so the append is retried at the new epoch; so is a
    transactional append that lost its sequence number to another task of the same
    producer. Raises Fenced / OutOfOrderSequence after ``_RETRIES`` such losses.
    """
    part = log.partition(topic, partition)
    for attempt in range(_RETRIES):
        writer = part.writer()
        try:
            if not txn.transactional:
                return writer.append(table).base_offset
            batch = ProducerBatch(txn.producer_id, txn.epoch, _next_sequence(part, txn),
                                  table.num_rows)
            return writer.append(table, producer_batches=[(batch, 0)],
                                 transactional=True).base_offset
        except (Fenced, OutOfOrderSequence):
            if attempt == _RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def _next_sequence(part, txn: Txn) -> int:
    entry = part.snapshot().producers.get(txn.producer_id)
    if entry is None or entry.epoch < txn.epoch:
        return 0  # a new epoch starts its sequence at 0 (Kafka's rule)
    return entry.last_sequence + 1


def end(log: Log, txn: Txn, *, commit: bool, batch: int | None = None) -> None:
    """Commit or abort ``txn``'s transaction; a commit records ``batch`` (the streaming
    micro-batch it holds) with it, for :func:`last_batch`."""
    if txn.transactional:
        if commit and batch is not None:
            _tx.add_offsets(log, txn.tid, txn.producer_id, txn.epoch, txn.tid,
                            {BATCH_TOPIC: {0: batch}})
        _tx.end_transaction(log, txn.tid, txn.producer_id, txn.epoch, commit)
    elif commit and batch is not None:  # no transactions: recorded after the records
        doc = log.read_group_offsets(txn.tid) or {"group": txn.tid, "generation": 0,
                                                  "strategy": None}
        offsets = doc.setdefault("offsets", {})
        offsets[BATCH_TOPIC] = {"0": {"offset": batch, "metadata": "",
                                      "commit_ms": wall_clock_ms()}}
        log.write_group_offsets(txn.tid, doc)


def last_batch(log: Log, tid: str) -> int | None:
    """The batch id the last committed transaction of ``tid`` recorded, or None."""
    doc = log.read_group_offsets(tid) or {}
    entry = (doc.get("offsets") or {}).get(BATCH_TOPIC, {}).get("0")
    return None if entry is None else int(entry["offset"])
