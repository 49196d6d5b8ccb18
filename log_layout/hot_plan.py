"""Planning one partition's appends into a hot flush (``hot_writer.JournalWriter``).

Each append is planned on the state the one before leaves (its offsets, producers'
sequences, transactions: the rules of an append to ``_log``). The records of
consecutive plain appends (no transaction; the same compression and column types) are
written as **one segment**: concatenated, encoded once, one segment row in the entry.

Why: at many partitions a busy gateway takes several appends of a partition into each
flush (one per Produce request that named it, each of a few records). Encoding each as
its own Arrow IPC file was most of a flush's cost (profiled at 1,024 partitions with
Kafka's Java producer: issue 30), and a reader then opened as many tiny segments. What
is stored is unchanged in form: a run's segment is an ordinary segment of the shared
object, its offsets those of the run's appends back to back, so readers and older
sparklogs that read the hot tier read it as they did.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from log_layout import segment
from log_layout.errors import Fenced
from log_layout.manifest import Manifest, SegmentInfo

#: the stats of an append that may join a run (a transactional one also names its
#: producer: its segment holds one producer's records only)
_PLAIN_STATS = frozenset(("base_offset", "last_offset", "count", "min_ts", "max_ts"))


class PartitionPlan:
    """One partition's appends in a flush, planned in order from ``base`` (the state
    the flushes before leave) by ``writer``. ``appends`` pairs each planned append with
    its state once committed; ``chunks`` are the bytes of its segments in the shared
    object ``obj``, starting at ``position``; ``position`` is where the next partition's
    start once :meth:`finish` ran."""

    def __init__(self, writer: Any, key: tuple[str, int], base: Manifest, obj: str,
                 position: int):
        self.writer, self.key, self.base, self.obj = writer, key, base, obj
        self.position = position
        self.cur = base
        self.appends: list[tuple[Any, Manifest]] = []
        self.chunks: list[Any] = []
        # the run: plain appends planned (offsets taken) whose one segment is not yet
        # written; ``_run_from`` is the state before the first of them
        self._run: list[tuple[Any, dict]] = []
        self._run_from: Manifest = base

    def add(self, p: Any) -> None:
        """Plan ``p`` (a ``hot_flush.Pending``) after the appends before it; its own
        failure (fenced, a sequence that no longer fits, ...) is set on its future."""
        w, key = self.writer, self.key
        if p.writer.fenced is not None or p.writer is not w:
            p.future.set_exception(p.writer.fenced or Fenced(
                key[0], key[1], p.writer.epoch, w.epoch))
            return
        try:
            plan = p.build(self.cur)
            if self._joins_run(p, plan):
                stats, changes = plan
                if not self._run:
                    self._run_from = self.cur
                new = self.cur.next(hot=True, **changes)  # its segment: when the run ends
                self._run.append((p, stats))
                self._planned(p, new)
                return
            if self._run:  # planned on a state without the run's segment: again, with it
                self._end_run()
                plan = p.build(self.cur)
            if plan is None:
                p.future.set_result(None)
                return
            if isinstance(plan, dict):
                new = self.cur.next(hot=True, **plan)
            else:
                stats, changes = plan
                info = self._segment(p.records, p.compression, stats)
                new = self.cur.next(segments=self.cur.segments + (info,), hot=True, **changes)
        except BaseException as exc:  # noqa: BLE001 -- the append's own failure
            p.future.set_exception(exc)
            return
        self._planned(p, new)

    def finish(self) -> None:
        """Write the segment of the run still open (call once, after the last ``add``)."""
        if self._run:
            self._end_run()

    def _planned(self, p: Any, new: Manifest) -> None:
        self.appends.append((p, new))
        # the next is planned on this one, at the same version: the entry holds one
        # delta line, one version, for all of them
        self.cur = new.with_fields(version=self.base.version)

    def _joins_run(self, p: Any, plan: Any) -> bool:
        """Whether ``plan`` (of ``p``) is a plain append whose records may be
        concatenated with the run's."""
        if not isinstance(plan, tuple) or p.records is None or plan[0].keys() != _PLAIN_STATS:
            return False
        if not self._run:
            return True
        first = self._run[0][0]
        return first.compression == p.compression and all(
            a.type == b.type for a, b in zip(first.records.columns, p.records.columns))

    def _end_run(self) -> None:
        """Encode the run's records as one segment and put it in the state of the run's
        last append (and the state the next is planned on). If the encoding fails, the
        run's appends fail and the next append is planned as if they never came."""
        run, self._run = self._run, []
        n = len(run)
        runs_appends = self.appends[-n:]
        stats = dict(run[0][1], last_offset=run[-1][1]["last_offset"],
                     count=sum(s["count"] for _, s in run),
                     min_ts=min(s["min_ts"] for _, s in run),
                     max_ts=max(s["max_ts"] for _, s in run))
        try:
            records = concat([p.records for p, _ in run])
            info = self._segment(records, run[0][0].compression, stats)
        except BaseException as exc:  # noqa: BLE001 -- the run's own failure
            del self.appends[-n:]
            for p, _ in runs_appends:
                p.future.set_exception(exc)
            self.cur = self._run_from
            return
        segments = self._run_from.segments + (info,)
        p, last = runs_appends[-1]
        self.appends[-1] = (p, last.with_fields(segments=segments))
        self.cur = self.cur.with_fields(segments=segments)
        self._run_from = self.cur

    def _segment(self, records: segment.Records, compression: str | None,
                 stats: dict) -> SegmentInfo:
        encoded = segment.encode_append(records, stats["base_offset"], compression=compression)
        info = SegmentInfo(file=self.obj, position=self.position, bytes=encoded.size,
                           crc32=encoded.checksum(), **stats)
        self.chunks += encoded.chunks
        self.position += encoded.size
        return info


def concat(parts: list[segment.Records]) -> segment.Records:
    """The records of ``parts`` back to back, each column one array. Raises
    pyarrow's ArrowInvalid if their column types differ."""
    if len(parts) == 1:
        return parts[0]
    columns = tuple(pa.concat_arrays([chunk for r in parts for chunk in _chunks(r.columns[i])])
                    for i in range(len(parts[0].columns)))
    one = all(r.one_timestamp for r in parts) and len({r.min_ts for r in parts}) == 1
    return segment.Records(columns, sum(r.num_rows for r in parts),
                           min(r.min_ts for r in parts), max(r.max_ts for r in parts), one)


def _chunks(column: Any) -> list[Any]:
    return column.chunks if isinstance(column, pa.ChunkedArray) else [column]
