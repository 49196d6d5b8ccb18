"""An operator's view of transactions, as ``kafka-transactions.sh`` gives it: the
producers a partition knows, the transactions left hanging in partitions, and
the ways to end one by hand.

A transaction **hangs** in a partition when the partition holds it open
(``Manifest.open_txns``: records above the last stable offset, so read_committed
readers stop there) but nothing will ever write its marker: no transactional id
of the transaction log names that producer, or the id names it but is not
Ongoing or being completed with this partition in it, or it has been Ongoing
longer than the longest timeout a transaction may have (the timeout aborter
would have ended it). Kafka's causes are the same: a coordinator that lost the
partition, a bug, a marker never written. Hanging transactions stall every
read_committed consumer of the partition and hold back compaction.

Ending one: ``transactions.abort`` aborts a transactional id's Ongoing transaction
(at a bumped epoch, fencing its producer) and finishes a decided one, as the
timeout would; :func:`abort_hanging` writes an ABORT marker into one partition
for one producer at the producer's epoch there (``kafka-transactions.sh abort``),
for the hanging case where no transactional id will.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from conf.errors import SparklogError
from log_layout import transactions
from log_layout.commit import wall_clock_ms


class NoOpenTransaction(SparklogError, LookupError):
    """``abort_hanging`` of a producer with no open transaction in the partition."""

    code = "no_open_transaction"

    def __init__(self, topic: str, partition: int, producer_id: int, why: str):
        self.topic, self.partition, self.producer_id = topic, partition, producer_id
        super().__init__(f"producer {producer_id} {why} in {topic}-{partition}: "
                         "nothing to abort")


@dataclasses.dataclass(frozen=True)
class ProducerState:
    """What a partition knows of one producer (Kafka's DescribeProducers)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int  # of its newest batch kept for duplicate detection (-1: none)
    current_txn_start_offset: int  # its open transaction's first offset (-1: none)


@dataclasses.dataclass(frozen=True)
class Hanging:
    """A transaction open in a partition that nothing will end."""

    topic: str
    partition: int
    producer_id: int
    epoch: int
    start_offset: int
    transactional_id: str | None  # the id naming this producer, if any
    reason: str


def describe_producers(log: Any, topic: str, partition: int) -> list[ProducerState]:
    """The producers ``topic``-``partition`` keeps state for, by producer id. Raises
    UnknownTopic or UnknownPartition."""
    m = log.partition(topic, partition).snapshot()
    return [ProducerState(pid, e.epoch, e.last_sequence, e.batches[-1][3] if e.batches else -1,
                          m.open_txns.get(pid, -1))
            for pid, e in sorted(m.producers.items())]


def _by_producer(log: Any) -> dict[int, tuple[str, dict[str, Any]]]:
    """producer id -> (transactional id, its document), over the transaction log."""
    found = {}
    for tid in transactions.list_transactions(log):
        doc = transactions.describe(log, tid)
        if doc:
            found[doc["producer_id"]] = (tid, doc)
    return found


def _why_hanging(topic: str, partition: int, first_ms: int | None,
                 named: tuple[str, dict[str, Any]] | None, now_ms: int,
                 max_timeout_ms: int) -> str | None:
    if named is None:
        return "no transactional id names this producer"
    tid, doc = named
    here = [topic, partition] in [list(tp) for tp in doc["partitions"]]
    if doc["state"] in transactions.PREPARED and here:
        return None  # decided: its markers are on their way (or recovery writes them)
    if doc["state"] != transactions.ONGOING or not here:
        return f"{tid!r} is {doc['state']} without this partition in a transaction"
    started = doc["started_ms"] if first_ms is None else min(doc["started_ms"], first_ms)
    if now_ms - started > max_timeout_ms:
        return f"{tid!r} has been Ongoing for more than {max_timeout_ms} ms"
    return None


def find_hanging(log: Any, topics: Iterable[str] | None = None, *, now_ms: int | None = None,
                 max_timeout_ms: int = transactions.MAX_TIMEOUT_MS) -> list[Hanging]:
    """Every hanging transaction (module doc) in ``topics`` (default: every topic).
    Raises UnknownTopic for a named topic that does not exist."""
    now = wall_clock_ms() if now_ms is None else now_ms
    named = _by_producer(log)
    found = []
    for topic in (log.topics() if topics is None else topics):
        for part in log.partitions(topic):
            m = part.snapshot()
            for pid, first in sorted(m.open_txns.items()):
                first_ms = next((s.min_ts for s in m.segments if s.base_offset == first), None)
                why = _why_hanging(topic, part.partition, first_ms, named.get(pid), now,
                                   max_timeout_ms)
                if why is not None:
                    entry = m.producers.get(pid)
                    found.append(Hanging(topic, part.partition, pid,
                                         entry.epoch if entry is not None else -1, first,
                                         named[pid][0] if pid in named else None, why))
    return found


def abort_hanging(log: Any, topic: str, partition: int, producer_id: int) -> int:
    """Write an ABORT marker for ``producer_id``'s open transaction in the partition, at
    the producer's epoch there (so its coordinator, should it still end the
    transaction, writes a no-op marker, not a refused one). Returns the marker's
    offset. Raises NoOpenTransaction when that producer has no open transaction there,
    UnknownTopic or UnknownPartition."""
    part = log.partition(topic, partition)
    m = part.snapshot()
    entry = m.producers.get(producer_id)
    if producer_id not in m.open_txns or entry is None:
        raise NoOpenTransaction(topic, partition, producer_id, "has no open transaction")
    after = part.writer().write_marker(producer_id, entry.epoch, False)
    if after is None:  # ended meanwhile by its coordinator
        raise NoOpenTransaction(topic, partition, producer_id, "ended its transaction meanwhile")
    return after.next_offset - 1
