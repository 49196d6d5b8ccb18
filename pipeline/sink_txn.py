"""The sink's one door to transactions (``log_layout.transactions``): change it here only.

The sink needs six things of the store, in Kafka's terms (KIP-98):

* :func:`begin` -- ``init_transactions(log, tid, timeout_ms) -> (producer_id, epoch)``:
  a new epoch for the transactional id, which fences (and aborts the open transaction
  of) any earlier producer of that id -- a crashed Spark job's or query's;
* :func:`register` -- ``add_partitions(log, tid, pid, epoch, partitions)`` before a
  task appends to them (so the coordinator knows where to write markers);
* :func:`append` -- a transactional append: one segment of the producer's records
  under its epoch and next sequence (``PartitionWriter.append(..., transactional=True)``),
  invisible to read-committed readers until the commit marker;
* :func:`discard_unreported` -- before a commit, the segments of task attempts that
  Spark retried are discarded from the transaction (``log_layout.txn_discard``), so
  a retried task's rows are committed once;
* :func:`end` -- ``end_transaction(log, tid, pid, epoch, commit)``;
* :func:`last_batch` / the ``batch`` of :func:`end` -- which streaming micro-batch the
  query's last committed transaction held (``add_offsets``; see ``sink_stream``).

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

from log_layout import Fenced, Log, OutOfOrderSequence, ProducerBatch
from log_layout import transactions as _tx
from log_layout.txn_discard import discard_segments

#: the pseudo-topic of the group document under which a query's last batch id is kept
BATCH_TOPIC = "_spark_sink_batch"
#: the longest transaction.timeout.ms the store takes (Kafka's transaction.max.timeout.ms)
MAX_TIMEOUT_MS = _tx.MAX_TIMEOUT_MS
#: appends that lost a race to another task's (sequence or leader epoch) are retried;
#: each loss means another append committed, so this bounds only a broken store
_RETRIES = 1000


@dataclasses.dataclass(frozen=True)
class Txn:
    """A producer of the sink (``producer_id`` and ``epoch`` None: not initialised)."""

    tid: str
    producer_id: int | None = None
    epoch: int | None = None

    @property
    def transactional(self) -> bool:
        return self.producer_id is not None


def begin(log: Log, tid: str, timeout_ms: int) -> Txn:
    """A new epoch for ``tid``: fences its earlier producers, aborting their open
    transaction. Raises what ``init_transactions`` raises."""
    pid, epoch = _tx.init_transactions(log, tid, timeout_ms)
    return Txn(tid, pid, epoch)


def register(log: Log, txn: Txn, partitions: Iterable[tuple[str, int]]) -> None:
    """Add ``partitions`` to ``txn``'s open transaction (it opens with the first)."""
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


def discard_unreported(log: Log, txn: Txn, reported: Iterable[tuple[str, int, int, int]]
                       ) -> int:
    """Before a commit: discard every segment of ``txn``'s open transaction that no
    successful task attempt reported (``(topic, partition, base, last)``: the appends
    of attempts Spark retried, so their rows are not committed twice;
    ``log_layout.txn_discard``). Returns how many segments were discarded."""
    doc = _tx.describe(log, txn.tid) or {}
    if (doc.get("producer_id"), doc.get("epoch")) != (txn.producer_id, txn.epoch):
        return 0  # fenced: end() says so
    kept = {(t, p, lo) for t, p, lo, _ in reported}
    discarded = 0
    for topic, p in doc.get("partitions", []):
        part = log.partition(topic, p)
        m = part.snapshot()
        first = m.open_txns.get(txn.producer_id)
        if first is None:
            continue
        extra = [(s.base_offset, s.last_offset) for s in m.segments
                 if s.producer_id == txn.producer_id and not s.control
                 and s.base_offset >= first and (topic, p, s.base_offset) not in kept]
        if extra:
            discard_segments(part, txn.producer_id, txn.epoch, extra)
            discarded += len(extra)
    return discarded


def end(log: Log, txn: Txn, *, commit: bool, batch: int | None = None) -> None:
    """Commit or abort ``txn``'s transaction; a commit records ``batch`` (the streaming
    micro-batch it holds) with it, for :func:`last_batch`."""
    if commit and batch is not None:
        _tx.add_offsets(log, txn.tid, txn.producer_id, txn.epoch, txn.tid,
                        {BATCH_TOPIC: {0: batch}})
    _tx.end_transaction(log, txn.tid, txn.producer_id, txn.epoch, commit)


def last_batch(log: Log, tid: str) -> int | None:
    """The batch id the last committed transaction of ``tid`` recorded, or None."""
    doc = log.read_group_offsets(tid) or {}
    entry = (doc.get("offsets") or {}).get(BATCH_TOPIC, {}).get("0")
    return None if entry is None else int(entry["offset"])
