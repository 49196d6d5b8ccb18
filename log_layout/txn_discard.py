"""Discarding some segments of an open transaction: the writes of a failed attempt.

A Spark task that fails after appending, and is retried, appends its rows again
under the same producer and transaction (the job's or micro-batch's): committing
the transaction would commit both copies. Spark tells the driver which attempt
of each task succeeded (its commit message); before committing, the driver
discards every segment of the producer's open transaction that no successful
attempt reported (``pipeline.sink_txn``).

A discard adds ``[producer_id, base_offset, last_offset]`` of each such segment
to the manifest's ``aborted`` list without closing the transaction: readers at
read_committed skip the segment as they skip an aborted transaction's records
(``Manifest.is_aborted``), maintenance drops it as aborted, and the transaction's
COMMIT marker later commits the rest. Its ABORT marker instead covers the whole
transaction, and replaces these entries (``txn_writes.plan_marker``), so a
producer's aborted ranges never overlap.
"""

from __future__ import annotations

from collections.abc import Iterable

from log_layout import commit
from log_layout.commit import wall_clock_ms
from log_layout.errors import InvalidProducerEpoch, InvalidRecords
from log_layout.manifest import Manifest


def plan_discard(m: Manifest, producer_id: int, epoch: int,
                 ranges: Iterable[tuple[int, int]], ts: int) -> Manifest | None:
    """The version after ``m`` that discards ``ranges`` (each exactly one of the
    producer's segments in its open transaction), None when all are discarded
    already. Raises InvalidProducerEpoch (another epoch now), InvalidRecords (no
    open transaction, or a range that is not one of its segments)."""
    entry = m.producers.get(producer_id)
    if entry is not None and entry.epoch != epoch:
        raise InvalidProducerEpoch(producer_id, epoch, entry.epoch)
    first = m.open_txns.get(producer_id)
    if first is None:
        raise InvalidRecords(f"producer {producer_id} has no open transaction in "
                             f"{m.topic}-{m.partition} to discard segments of")
    ours = {s.base_offset: s.last_offset for s in m.segments
            if s.producer_id == producer_id and not s.control and s.base_offset >= first}
    done = {(lo, hi) for p, lo, hi in m.aborted if p == producer_id}
    new = []
    for lo, hi in sorted(set(ranges)):
        if ours.get(lo) != hi:
            raise InvalidRecords(f"{lo}..{hi} is not a segment of producer {producer_id}'s "
                                 f"open transaction in {m.topic}-{m.partition}")
        if (lo, hi) not in done:
            new.append((producer_id, lo, hi))
    if not new:
        return None
    return m.next(aborted=m.aborted + tuple(new), transactional=True, committer="discard",
                  committed_ms=ts)


def discard_segments(partition, producer_id: int, epoch: int,
                     ranges: Iterable[tuple[int, int]], *, now_ms: int | None = None
                     ) -> Manifest | None:
    """Discard ``ranges`` of ``partition`` (a PartitionLog) for ``producer_id`` at
    ``epoch``; returns the version committed, None if nothing was to do. Rebases over
    concurrent appends. Raises what :func:`plan_discard` raises."""
    ranges = list(ranges)
    ts = wall_clock_ms() if now_ms is None else now_ms
    v = partition.versions
    return commit.run(v.snapshot, lambda m: plan_discard(m, producer_id, epoch, ranges, ts),
                      v.attempt)
