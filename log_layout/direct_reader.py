"""Reading partitions straight from the store: what is committed at given offsets, as Arrow.

The one reader of records for consumers, shared by the Python consumer's
direct mode (no gateway on the read path) and the gateway's fetch routes.
It answers ``(tp, batch, next offset)`` triples of segment-schema
``pyarrow.RecordBatch``es, never per-record objects::

    reader = DirectReader(log)
    got, errors = reader.fetch({("clicks", 0): 1000}, max_records=500, wait_ms=100)

The segments one read needs (as far as its ``max_records`` reaches) are read together
(``reader.read_segments``): every one's bytes, then every CRC-32, then every parse, so
no record of a read is handed out before all its segments' checksums are checked. A
position past the last record of a segment moves over a compaction gap to
the segment's end offset, so a consumer never asks for offsets that no
longer exist. A segment vacuumed while being read (compaction or retention
replaced it) is re-planned once on the newest snapshot. The store cannot
notify anyone, so :meth:`DirectReader.fetch` waits by probing the manifests
(two ``exists`` per partition per probe: is there a version after the one
read, is that one still there; a new version is read by itself, the folder is
not listed, see ``versions``). The probe interval grows with the time no
records came: 1/16 of it, from 1 ms up to ``backoff_max_ms``. A partition
committing every few ms is probed every ms (a record waits ~0.5 ms on
average; a probe costs ~16 us on a local store, under 2% of a core), one
quiet for a second or more every ``backoff_max_ms`` (10 ms: 100 probes a
second). The gateway instead wakes its fetches on its own commits and calls
:meth:`DirectReader.read_available`.

``isolation_level`` (Kafka's names, per reader and per call): read_uncommitted
reads to the high watermark, read_committed to the last stable offset and skips
the segments of aborted transactions (manifest.py); both skip control markers. A
skipped segment still moves the position past it: a read that skips only such
segments answers one empty batch whose next position is past them, so a consumer
never stalls on a marker. ``watermarks`` answers the last stable offset as the end
for a read_committed reader (Kafka's ``endOffsets``); ``stable_watermarks`` all three.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa

from log_layout import reader as reads
from log_layout.segment import SCHEMA
from log_layout.errors import MissingSegment, OffsetOutOfRange
from log_layout.manifest import Manifest, SegmentInfo
from log_layout.partition import PartitionLog
from log_layout.topics import Log

TopicPartition = tuple[str, int]
#: the batch of a read that only skipped segments (markers, aborted records)
_EMPTY = pa.RecordBatch.from_arrays([pa.nulls(0, t) for t in SCHEMA.types], schema=SCHEMA)
#: what a read answers: (partition, batch, the position after it) in read order
Fetched = list[tuple[TopicPartition, pa.RecordBatch, int]]
#: a segment read: ((file, position), its table, its offsets as NumPy once needed)
_Cached = tuple[tuple[str, int], pa.Table, "np.ndarray | None"]
#: the shortest wait between two probes of the manifests
PROBE_MIN_S = 0.001
#: the wait between probes is the time since records last came divided by this
PROBE_IDLE_DIVISOR = 16


class DirectReader:
    """Reads the segments of partitions straight from the store; waits by watching manifests.

    Safe to share between threads (the gateway's fetches share one): the segment
    cache is a dict whose entries are replaced whole.
    """

    def __init__(self, log: Log, *, backoff_max_ms: int = 10,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 isolation_level: str = reads.READ_UNCOMMITTED):
        self.log = log
        self.committed = reads.is_committed_read(isolation_level)
        self.isolation_level = isolation_level
        self.backoff_max_s = backoff_max_ms / 1000
        self._clock, self._sleep = clock, sleep
        #: when a probe last found records (the clock's time); the probe interval
        #: grows with the time since
        self._records_at = clock()
        # tp -> the last segment read (_Cached): a poll usually continues inside the
        # segment the last one read, so it is decoded once, not per poll
        self._segments: dict[TopicPartition, _Cached] = {}
        self._rotate = 0

    def partitions(self, topic: str) -> int:
        return self.log.topic(topic).partitions

    def watermarks(self, tp: TopicPartition, *,
                   isolation_level: str | None = None) -> tuple[int, int]:
        """(log start offset, end): the end is the high watermark, or for read_committed
        the last stable offset (Kafka's ``endOffsets``)."""
        m = self.log.partition(*tp).snapshot()
        return m.log_start_offset, reads.read_end(m, None, self._committed(isolation_level))

    def stable_watermarks(self, tp: TopicPartition) -> tuple[int, int, int]:
        """(log start offset, last stable offset, high watermark)."""
        m = self.log.partition(*tp).snapshot()
        return m.log_start_offset, m.last_stable_offset, m.next_offset

    def _committed(self, isolation_level: str | None) -> bool:
        return self.committed if isolation_level is None \
            else reads.is_committed_read(isolation_level)

    def fetch(self, positions: Mapping[TopicPartition, int], max_records: int, wait_ms: int,
              *, isolation_level: str | None = None,
              ) -> tuple[Fetched, dict[TopicPartition, OffsetOutOfRange]]:
        """Up to ``max_records`` from the partitions at ``positions``; waits up to
        ``wait_ms`` for any (probing, see the module docstring). Returns (tp, batch,
        next position) triples and per-partition OffsetOutOfRange errors.
        ``isolation_level`` defaults to the reader's."""
        deadline = self._clock() + wait_ms / 1000
        while True:
            out, errors = self.read_available(positions, max_records,
                                              isolation_level=isolation_level)
            now = self._clock()
            if out:
                self._records_at = now
            remaining = deadline - now
            if out or errors or remaining <= 0:
                return out, errors
            self._sleep(min(self.probe_interval(now), remaining))

    def probe_interval(self, now: float) -> float:
        """Seconds to wait before the next probe: 1/16 of the time since records last
        came, at least PROBE_MIN_S, at most ``backoff_max_ms``.

        Counted from the last records, not from the start of a fetch (as a doubling
        backoff restarted by every fetch was): a consumer polling a busy partition
        keeps probing often between fetches, an idle one stays slow across them.
        """
        wait = (now - self._records_at) / PROBE_IDLE_DIVISOR
        return max(PROBE_MIN_S, min(wait, self.backoff_max_s))

    def read_available(self, positions: Mapping[TopicPartition, int], max_records: int,
                       *, isolation_level: str | None = None,
                       partition_max_records: int | None = None,
                       ) -> tuple[Fetched, dict[TopicPartition, OffsetOutOfRange]]:
        """What is committed at ``positions`` now (up to ``max_records``, and up to
        ``partition_max_records`` of each partition), no waiting.
        Safe to call from several threads (the gateway's fetches share one reader)."""
        committed = self._committed(isolation_level)
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
                got = self._read(tp, positions[tp], min(budget, partition_max_records or budget),
                                 committed)
            except OffsetOutOfRange as e:
                errors[tp] = e
                continue
            for batch, nxt in got:
                out.append((tp, batch, nxt))
                budget -= batch.num_rows
        return out, errors

    def _read(self, tp: TopicPartition, pos: int, budget: int, committed: bool = False, *,
              retry: bool = True) -> list[tuple[pa.RecordBatch, int]]:
        plog = self.log.partition(*tp)
        m = plog.snapshot()
        end = reads.read_end(m, None, committed)
        if pos >= end and pos <= m.next_offset:
            return []
        if pos < m.log_start_offset or pos > m.next_offset:
            raise OffsetOutOfRange(tp[0], tp[1], pos, m.log_start_offset, m.next_offset)
        got: list[tuple[pa.RecordBatch, int]] = []
        start = pos
        segments = m.segments_between(pos, end)
        k = 0
        while k < len(segments) and budget > 0:
            # the segments this budget may reach, read together (``read_segments``)
            todo, k = _plan(m, segments, k, pos, budget, committed)
            try:
                loaded = iter(self._load(tp, plog, m, [info for info, skip in todo if not skip]))
            except MissingSegment:
                # Vacuumed after a compaction or retention replaced it: re-plan once on
                # the newest snapshot (it may also be out of range now).
                if got:
                    break
                if retry:
                    return self._read(tp, pos, budget, committed, retry=False)
                raise
            for info, skip in todo:
                if skip:
                    pos = info.end_offset  # a marker, or aborted: skipped, position moves on
                    continue
                entry = next(loaded, None)
                if entry is None:  # missing from here on: what was read is answered
                    k = len(segments)
                    break
                budget, pos = self._take(tp, info, entry, pos, budget, got)
        if got and got[-1][1] < pos:  # the position skips a trailing compaction gap
            got[-1] = (got[-1][0], pos)
        elif not got and m.transactional and pos > start:
            got.append((_EMPTY, pos))  # only skipped segments: move the position past them
        return got

    def _load(self, tp: TopicPartition, plog: PartitionLog, m: Manifest,
              infos: list[SegmentInfo]) -> list[_Cached]:
        """The cache entries of ``infos``' segments: the cached one if it is the first,
        the others read (``PartitionLog.read_segments``: a missing one ends the list).
        Raises MissingSegment if the first is missing, CorruptSegment."""
        cached = self._segments.get(tp)
        out: list[_Cached] = []
        if infos and cached is not None and cached[0] == (infos[0].file, infos[0].position):
            out.append(cached)
        rest = infos[len(out):]
        if rest:
            try:
                tables = plog.read_segments(rest, version=m.version)
            except MissingSegment:
                self._segments.pop(tp, None)
                if not out:
                    raise
                return out
            # a hot object holds many partitions' segments: its key is the file and position
            out += [((info.file, info.position), table, None) for info, table in zip(rest, tables)]
        return out

    def _take(self, tp: TopicPartition, info: SegmentInfo, entry: _Cached, pos: int, budget: int,
              got: list[tuple[pa.RecordBatch, int]]) -> tuple[int, int]:
        """Append the records of one segment at ``pos`` and after (up to ``budget``) to
        ``got``; returns the budget left and the position after them."""
        key, table, offs = entry
        self._segments[tp] = entry
        n = table.num_rows
        if pos <= info.base_offset and budget >= n:
            # the whole segment (a consumer keeping up): no search, no slice
            part, nxt = table, info.end_offset
        else:
            if offs is None:  # the offsets as NumPy, once per segment read
                offs = table.column(0).to_numpy()
                self._segments[tp] = (key, table, offs)
            i = int(np.searchsorted(offs, pos, "left"))
            j = min(n, i + budget)
            # past the segment's last record, a compaction gap may remain up to its end
            nxt = int(offs[j - 1]) + 1 if j < n else info.end_offset
            part = table.slice(i, j - i)
        for b in part.to_batches():
            if b.num_rows:
                got.append((b, int(b.column(0)[-1].as_py()) + 1))
        return budget - part.num_rows, nxt

    def close(self) -> None:
        self._segments.clear()


def _plan(m: Manifest, segments: list[SegmentInfo], k: int, pos: int, budget: int,
          committed: bool) -> tuple[list[tuple[SegmentInfo, bool]], int]:
    """The segments from ``segments[k]`` on that a read of ``budget`` records at ``pos``
    may reach, each with whether the reader skips it (``reads.hidden``), and the index
    after them. A segment counts for at most its records after ``pos``, so none is
    planned that the budget cannot reach; with compaction gaps a read may need a
    second plan."""
    todo: list[tuple[SegmentInfo, bool]] = []
    while k < len(segments) and budget > 0:
        info = segments[k]
        k += 1
        skip = m.transactional and reads.hidden(m, info, committed)
        todo.append((info, skip))
        if not skip:
            budget -= min(info.count, info.end_offset - max(pos, info.base_offset))
            pos = info.end_offset
    return todo, k
