"""What a consumer hands out: :class:`Record` tuples, and :class:`ArrowBatch` (a partition's
consecutive records as one Arrow record batch).

Records are built column-wise from segment-schema batches (:func:`records_of`),
without a Python call per record; the gateway's JSON fetch answers use the same
function. :class:`Fetched` is one fetched batch waiting in a consumer's buffer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

TopicPartition = tuple[str, int]


class Record(NamedTuple):
    """One record: timestamp in ms, key/value bytes or None, headers (key, value) pairs or None."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None


class ArrowBatch(NamedTuple):
    """Consecutive records of one partition as Arrow (the segment schema), as
    ``Consumer.poll_batches`` and ``Consumer.batches`` hand them out."""

    topic: str
    partition: int
    records: pa.RecordBatch

    @property
    def next_offset(self) -> int:
        return int(self.records.column(0)[-1].as_py()) + 1


def records_of(topic: str, partition: int, batch: pa.RecordBatch) -> list[Record]:
    """Records of a segment-schema batch, built column-wise (no Python call per record)."""
    n = batch.num_rows
    offsets = batch.column(0).to_numpy().tolist()
    ts = batch.column(1)
    ts = pc.divide(ts.cast(pa.int64()), 1000).to_numpy().tolist() if n else []
    keys = batch.column(2).to_pylist()
    values = batch.column(3).to_pylist()
    hcol = batch.column(4)
    if hcol.null_count == n:
        headers: Iterable[Any] = itertools.repeat(None, n)
    else:
        headers = [None if h is None else [(kv["key"], kv["value"]) for kv in h]
                   for h in hcol.to_pylist()]
    rows = zip(itertools.repeat(topic, n), itertools.repeat(partition, n), offsets, ts, keys,
               values, headers)
    return list(map(Record._make, rows))


class Fetched:
    """A fetched batch of one partition, handed out from row ``start`` on.

    The consumer's buffer holds these between the fetch and the hand-out, so
    ``poll`` and the iterators share one stream: whatever one of them leaves
    in the buffer the other hands out next, and nothing fetched is dropped
    without rewinding the fetch position to it.
    """

    __slots__ = ("tp", "batch", "start", "_records", "next_offset")

    def __init__(self, tp: TopicPartition, batch: pa.RecordBatch, next_offset: int | None = None):
        self.tp, self.batch, self.start = tp, batch, 0
        #: where the fetch goes on after the batch: past its last record, and past the
        #: control markers, aborted records or compaction gap that follow it
        self.next_offset = next_offset
        self._records: list[Record] | None = None

    def records(self) -> list[Record]:
        """Every row as a Record, built once (the iterator hands them out one by one)."""
        if self._records is None:
            self._records = records_of(self.tp[0], self.tp[1], self.batch)
        return self._records


def as_tp(tp: Any) -> TopicPartition:
    """Normalise a (topic, partition) pair given loosely; raises ValueError."""
    try:
        topic, partition = tp
    except (TypeError, ValueError):
        raise ValueError(f"expected a (topic, partition) pair, got {tp!r}") from None
    if not isinstance(topic, str) or isinstance(partition, bool) or not isinstance(partition, int):
        raise ValueError(f"expected a (topic: str, partition: int) pair, got {tp!r}")
    return topic, partition
