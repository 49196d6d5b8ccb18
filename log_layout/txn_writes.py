"""The partition side of transactions: what a transactional append and a control
marker change in a manifest (the format is in manifest.py, the coordinator in
``transactions``).

A **transactional append** is one segment of one producer's records (never mixed
with another producer's: aborting is then recorded as offset ranges per producer).
Its batches pass the idempotent producer's sequence checks (``idempotence``); the
first one opens the producer's transaction in ``open_txns`` at its base offset.

A **control marker** (``write_marker``) is a one-record segment at the next offset,
flagged ``control``: it closes the producer's open transaction, adds
``[producer, first, marker offset]`` to ``aborted`` on an abort, and sets the
producer's epoch in ``producers`` to the marker's. A marker of an older epoch than
the producer's is refused (InvalidProducerEpoch); with no open transaction the
marker is a no-op -- recovery may write it twice -- except that a higher epoch is
still recorded (a version with no segment), so a zombie of an older epoch that
later appends here is refused, not given a transaction nobody will end.

**Transactions v2** (KIP-890): the coordinator ends each transaction at the epoch
after the one its records carry, so a marker is ``strict``: it ends only records of
an *older* epoch. Records at the marker's own epoch are the producer's *next*
transaction (it got that epoch back from EndTxn), so a marker of the previous
transaction arriving late -- a recovering gateway's, after the producer finished it
itself -- leaves them open instead of ending them early (Kafka's TV2 check that a
marker's epoch exceed the partition's).

**Transactions v1** keep their epoch from one transaction to the next, so the epoch
cannot tell them apart; the coordinator records each partition's end offset when a
transaction reaches its commit point (``before``): every record of that transaction is
below it, and a transaction the producer opens in the partition afterwards starts at
or above it (after this one's marker), so a late marker leaves it open.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

import pyarrow as pa

from log_layout import idempotence
from log_layout.errors import InvalidProducerEpoch, InvalidRecords, OutOfOrderSequence
from log_layout.manifest import Manifest, ProducerBatch, ProducerEntry

ABORT, COMMIT = 0, 1  # Kafka's ControlRecordType


def marker_records(commit: bool, coordinator_epoch: int = 0) -> pa.Table:
    """A control marker's one record, as Kafka's control record: key = int16 version 0,
    int16 type (0 abort, 1 commit); value = int16 version 0, int32 coordinator epoch."""
    key = struct.pack(">hh", 0, COMMIT if commit else ABORT)
    return pa.table({"key": [key], "value": [struct.pack(">hi", 0, coordinator_epoch)]})


def marker_type(key: bytes) -> bool:
    """True for a COMMIT marker's key, False for an ABORT's."""
    return struct.unpack(">hh", key)[1] == COMMIT


def check_transactional(batches: Sequence[tuple[ProducerBatch, int]], rows: int) -> int:
    """The producer id of a transactional append's batches: one producer, one epoch,
    covering every row in order. Raises InvalidRecords otherwise."""
    if not batches:
        raise InvalidRecords("a transactional append needs its producer batch")
    first = batches[0][0]
    row = 0
    for batch, start in batches:
        if (batch.producer_id, batch.producer_epoch) != (first.producer_id,
                                                          first.producer_epoch):
            raise InvalidRecords("a transactional append holds one producer's records only")
        if start != row:
            raise InvalidRecords(f"transactional batches must cover the records in order: "
                                 f"a batch starts at row {start}, expected {row}")
        row += batch.count
    if row != rows:
        raise InvalidRecords(f"transactional batches cover {row} records of {rows}")
    return first.producer_id


def plan_producers(m: Manifest, batches: Sequence[tuple[ProducerBatch, int]], base: int,
                   partition: int) -> dict[int, ProducerEntry]:
    """``producers`` after appending ``batches`` at ``base``, checked one after the
    other (a flush may hold several batches of one producer). Raises
    InvalidProducerEpoch or OutOfOrderSequence."""
    producers: Mapping[int, ProducerEntry] = m.producers
    for batch, row in batches:
        entry = producers.get(batch.producer_id)
        if idempotence.check_sequence(entry, batch, partition) is not None:
            raise OutOfOrderSequence(batch.producer_id, partition,
                                     entry.last_sequence + 1, batch.first_sequence)
        producers = idempotence.after_appends(producers, [(batch, base + row)])
    return dict(producers)


def transactional_changes(m: Manifest, producer_id: int, base: int) -> dict:
    """The changes a transactional append at ``base`` adds to its version's."""
    open_txns = m.open_txns if producer_id in m.open_txns \
        else {**m.open_txns, producer_id: base}
    return {"open_txns": open_txns, "transactional": True}


def plan_marker(m: Manifest, producer_id: int, epoch: int, commit: bool,
                ts: int, *, strict: bool = False,
                before: int | None = None) -> tuple[dict, dict] | dict | None:
    """A marker's next version on ``m``: ``(stats, changes)`` for a marker segment, a
    dict of changes for an epoch-only version, None for nothing to do. ``strict``: a
    transactions v2 marker (module doc), which leaves records of its own epoch open;
    ``before``: the partition's end when the transaction reached its commit point, so a
    transaction opened at or after it is a later one, left open (module doc). Raises
    InvalidProducerEpoch for an epoch older than the producer's."""
    entry = m.producers.get(producer_id)
    if entry is not None and entry.epoch > epoch:
        raise InvalidProducerEpoch(producer_id, epoch, entry.epoch)
    if strict and entry is not None and entry.epoch == epoch:
        return None  # written already, or the next transaction's records: not this one's
    if before is not None and m.open_txns.get(producer_id, -1) >= before:
        return None  # the producer's next transaction, opened after this one ended
    kept = entry.batches if entry is not None and entry.epoch == epoch else ()
    producers = {**m.producers, producer_id: ProducerEntry(epoch, kept)}
    first = m.open_txns.get(producer_id)
    if first is None:
        if entry is not None and entry.epoch == epoch:
            return None
        return {"producers": producers, "committer": "marker", "committed_ms": ts}
    base = m.next_offset
    open_txns = {pid: off for pid, off in m.open_txns.items() if pid != producer_id}
    # an abort covers the whole transaction: it replaces the ranges of segments
    # discarded from it (``txn_discard``), so a producer's ranges never overlap
    aborted = m.aborted if commit else tuple(
        a for a in m.aborted if a[0] != producer_id or a[1] < first) + \
        ((producer_id, first, base),)
    stats = {"base_offset": base, "last_offset": base, "count": 1, "min_ts": ts,
             "max_ts": ts, "producer_id": producer_id, "control": True}
    changes = {"next_offset": base + 1, "producers": producers, "open_txns": open_txns,
               "aborted": aborted, "transactional": True, "committer": "marker",
               "committed_ms": ts}
    return stats, changes
