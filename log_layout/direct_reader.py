"""Reading partitions straight from the store: what is committed at given offsets, as Arrow.

The one reader of records for consumers, shared by the Python consumer's
direct mode (no gateway on the read path) and the gateway's fetch routes.
It answers ``(tp, batch, next offset)`` triples of segment-schema
``pyarrow.RecordBatch``es, never per-record objects::

    reader = DirectReader(log)
    got, errors = reader.fetch({("clicks", 0): 1000}, max_records=500, wait_ms=100)

A position past the last record of a segment moves over a compaction gap to
the segment's end offset, so a consumer never asks for offsets that no
longer exist. A segment vacuumed while being read (compaction or retention
replaced it) is re-planned once on the newest snapshot. The store cannot
notify anyone, so :meth:`DirectReader.fetch` waits by probing the manifests
(one ``exists`` per partition per probe) with a backoff of 1 ms doubling to
``backoff_max_ms``; the gateway instead wakes its fetches on its own commits
and calls :meth:`DirectReader.read_available`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from log_layout.errors import MissingSegment, OffsetOutOfRange
from log_layout.topics import Log

TopicPartition = tuple[str, int]
#: what a read answers: (partition, batch, the position after it) in read order
Fetched = list[tuple[TopicPartition, pa.RecordBatch, int]]


class DirectReader:
    """Reads the segments of partitions straight from the store; waits by watching manifests.

    Safe to share between threads (the gateway's fetches share one): the segment
    cache is a dict whose entries are replaced whole.
    """

    def __init__(self, log: Log, *, backoff_max_ms: int = 10):
        self.log = log
        self.backoff_max_s = backoff_max_ms / 1000
        # tp -> (segment file, table, offsets as numpy): a poll usually continues
        # inside the segment the last one read, so it is decoded once, not per poll
        self._segments: dict[TopicPartition, tuple[str, pa.Table, np.ndarray]] = {}
        self._rotate = 0

    def partitions(self, topic: str) -> int:
        return self.log.topic(topic).partitions

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        m = self.log.partition(*tp).snapshot()
        return m.log_start_offset, m.next_offset

    def fetch(self, positions: Mapping[TopicPartition, int], max_records: int, wait_ms: int,
              ) -> tuple[Fetched, dict[TopicPartition, OffsetOutOfRange]]:
        """Up to ``max_records`` from the partitions at ``positions``; waits up to
        ``wait_ms`` for any. Returns (tp, batch, next position) triples and
        per-partition OffsetOutOfRange errors."""
        deadline = time.monotonic() + wait_ms / 1000
        backoff = 0.001
        while True:
            out, errors = self.read_available(positions, max_records)
            remaining = deadline - time.monotonic()
            if out or errors or remaining <= 0:
                return out, errors
            time.sleep(min(backoff, remaining))
            backoff = min(backoff * 2, self.backoff_max_s)

    def read_available(self, positions: Mapping[TopicPartition, int], max_records: int,
                       ) -> tuple[Fetched, dict[TopicPartition, OffsetOutOfRange]]:
        """What is committed at ``positions`` now (up to ``max_records``), no waiting.
        Safe to call from several threads (the gateway's fetches share one reader)."""
        out: Fetched = []
        errors: dict[TopicPartition, OffsetOutOfRange] = {}
        tps = list(positions)
        if not tps:
            return out, errors
        self._rotate = (self._rotate + 1) % len(tps)  # fairness when max_records cuts a poll
        budget = max_records
        for tp in tps[self._rotate:] + tps[:self._rotate]:
            if budget <= 0:
                break
            try:
                got = self._read(tp, positions[tp], budget)
            except OffsetOutOfRange as e:
                errors[tp] = e
                continue
            for batch, nxt in got:
                out.append((tp, batch, nxt))
                budget -= batch.num_rows
        return out, errors

    def _read(self, tp: TopicPartition, pos: int, budget: int, *, retry: bool = True,
              ) -> list[tuple[pa.RecordBatch, int]]:
        plog = self.log.partition(*tp)
        m = plog.snapshot()
        if pos == m.next_offset:
            return []
        if pos < m.log_start_offset or pos > m.next_offset:
            raise OffsetOutOfRange(tp[0], tp[1], pos, m.log_start_offset, m.next_offset)
        got: list[tuple[pa.RecordBatch, int]] = []
        for info in m.segments_between(pos, m.next_offset):
            if budget <= 0:
                break
            cached = self._segments.get(tp)
            if cached is None or cached[0] != info.file:
                try:
                    table = plog.read_segment(info, version=m.version)
                except MissingSegment:
                    # Vacuumed after a compaction or retention replaced it: re-plan
                    # once on the newest snapshot (it may also be out of range now).
                    self._segments.pop(tp, None)
                    if got:
                        break
                    if retry:
                        return self._read(tp, pos, budget, retry=False)
                    raise
                cached = (info.file, table, table.column(0).to_numpy())
                self._segments[tp] = cached
            _, table, offs = cached
            i = int(np.searchsorted(offs, pos, "left"))
            j = min(len(offs), i + budget)
            # past the segment's last record, a compaction gap may remain up to its end
            nxt = int(offs[j - 1]) + 1 if j < len(offs) else info.end_offset
            for b in table.slice(i, j - i).to_batches():
                if b.num_rows:
                    got.append((b, int(b.column(0)[-1].as_py()) + 1))
            budget -= j - i
            pos = nxt
        if got and got[-1][1] < pos:  # the position skips a trailing compaction gap
            got[-1] = (got[-1][0], pos)
        return got

    def close(self) -> None:
        self._segments.clear()
