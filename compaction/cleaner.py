"""Kafka's log cleaner for one partition: plan from the manifest, dedup with Arrow, commit.

The rules (Kafka's ``LogCleaner``/``Cleaner``, with sparklog's manifest as the log):

* **Cleanable range** ``[log start, first uncleanable offset)``: every segment
  but the newest (the *active* segment, never cleaned), up to the first segment
  holding a record newer than ``min.compaction.lag.ms`` (its ``max_ts >
  now_ms - min.compaction.lag.ms``); that segment and all after it stay dirty.
  The range also ends at the last stable offset: an open transaction is never
  cleaned (the transactional rules: ``compaction.txn_rules``).
* **Checkpoint**: ``Manifest.cleaned_offset`` (Kafka's cleaner-offset-checkpoint).
  Segments below it are the *clean* head, segments from it to the first
  uncleanable offset the *dirty* part. A pass moves it to the first uncleanable
  offset.
* **Dirty ratio** ``dirty bytes / (clean + dirty bytes)`` of the cleanable
  range; a partition is cleaned when it has dirty bytes and the ratio reaches
  ``min.cleanable.dirty.ratio``.
* **Survivors**: for each key only the record with the highest offset in the
  cleanable range survives, with its offset, timestamp and headers unchanged
  and in offset order (dropped offsets become gaps). Records with a null key
  (refused at produce time for compacted topics; written only by hand) are
  kept as they are: they have no key to be superseded by.
* **Tombstones** (null value) remove earlier values of their key at once, like
  any newer record. A surviving tombstone is itself removed by a pass when
  (a) it already lay in the clean head before that pass -- so a previous pass
  kept it and consumers that keep up have had the chance to see it, as Kafka
  keeps a tombstone through the pass that first cleans it -- and (b) its
  timestamp is at least ``delete.retention.ms`` before ``now_ms``.
* **Transactions** (``compaction.txn_rules``): records of aborted transactions
  are dropped unread, committed ones dedup like any record, and a control
  marker stays while a record of its transaction does, then goes like a
  tombstone (two passes, ``delete.retention.ms``).
* **Output** segments hold the survivors in offset order, cut so that each is
  at most ``segment.bytes`` (estimated from the Arrow payload), and tile the
  replaced offset range (see ``PartitionLog.replace_segments``); a segment holds
  records of one kind only (not transactional, one transaction, one marker).

Every function takes ``now_ms``; none reads the clock. The commit rebases over
concurrent appends; if another maintenance job replaced one of the segments
first, :func:`compact_partition` reports a conflict and leaves the work for
the next run (the skeleton of every maintenance step: ``log_layout.maintenance``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction import txn_rules
from conf.topic import TopicConfig
from log_layout import Manifest, PartitionLog, SegmentInfo
from log_layout.maintenance import MaintenanceStep, NothingToDo, StepResult

#: Arrow payload per record besides key and value: offset, timestamp, two
#: variable-length offsets and validity bits (used to size output segments).
ROW_OVERHEAD_BYTES = 8 + 8 + 4 + 4 + 4
#: cleanable ranges up to this many file bytes are read at once (one read per file);
#: larger ones stream one segment at a time, reading each file twice
MEMORY_BUDGET_BYTES = 512 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class CleanPlan:
    """The cleanable range of a partition and whether it is due."""

    segments: tuple[SegmentInfo, ...]  # [log start, first uncleanable): all replaced
    first_dirty_offset: int  # the checkpoint, clamped to the log start
    first_uncleanable_offset: int  # the new checkpoint after the pass
    clean_bytes: int
    dirty_bytes: int
    min_ratio: float

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    @property
    def due(self) -> bool:
        return self.dirty_bytes > 0 and self.dirty_ratio >= self.min_ratio


def plan_clean(m: Manifest, config: TopicConfig, now_ms: int) -> CleanPlan | None:
    """The cleanable range of ``m`` at ``now_ms``, or None if there is none.

    None also for topics whose ``cleanup.policy`` does not include compact.
    """
    if not config.compacted or len(m.segments) < 2:
        return None
    horizon = now_ms - config.min_compaction_lag_ms
    stable = m.last_stable_offset
    cleanable: list[SegmentInfo] = []
    for info in m.segments[:-1]:  # the newest segment is the active one
        if config.min_compaction_lag_ms > 0 and info.max_ts > horizon:
            break
        if info.end_offset > stable:  # Kafka's cleaner never cleans above the LSO
            break
        cleanable.append(info)
    if not cleanable:
        return None
    first_dirty = max(m.cleaned_offset, m.log_start_offset)
    clean = sum(s.bytes for s in cleanable if s.end_offset <= first_dirty)
    dirty = sum(s.bytes for s in cleanable if s.end_offset > first_dirty)
    return CleanPlan(tuple(cleanable), first_dirty, cleanable[-1].end_offset, clean, dirty,
                     config.min_cleanable_dirty_ratio)


def latest_offsets(keys: pa.Array | pa.ChunkedArray,
                   offsets: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The highest offset of each non-null key (a hash group-by, no per-row Python)."""
    keyed = pa.table({"key": keys, "offset": offsets})
    keyed = keyed.filter(pc.is_valid(keyed.column("key")))
    latest = keyed.group_by("key", use_threads=True).aggregate([("offset", "max")])
    return latest.column("offset_max").combine_chunks()


def keep_mask(table: pa.Table, latest: pa.Array, *, cleaned_before: int, now_ms: int,
              delete_retention_ms: int) -> pa.ChunkedArray:
    """Which records of ``table`` survive, given every key's ``latest`` offset.

    Survivors: the latest record of each key and every null-key record, minus
    tombstones that expire (below ``cleaned_before``, the checkpoint before the
    pass, and at least ``delete_retention_ms`` old at ``now_ms``).
    """
    offsets = table.column("offset")
    keep = pc.or_(pc.is_in(offsets, value_set=latest), pc.is_null(table.column("key")))
    ts_ms = pc.divide(table.column("timestamp").cast(pa.int64()), 1000)
    expired = pc.and_(pc.and_(pc.is_null(table.column("value")),
                              pc.less(offsets, cleaned_before)),
                      pc.less_equal(ts_ms, now_ms - delete_retention_ms))
    return pc.and_(keep, pc.invert(expired))


def survivors(table: pa.Table, *, cleaned_before: int, now_ms: int,
              delete_retention_ms: int) -> pa.Table:
    """The records of ``table`` (one partition's whole cleanable range) that survive a pass."""
    if table.num_rows == 0:
        return table
    latest = latest_offsets(table.column("key"), table.column("offset"))
    return table.filter(keep_mask(table, latest, cleaned_before=cleaned_before, now_ms=now_ms,
                                  delete_retention_ms=delete_retention_ms))


def survivors_streaming(plog: PartitionLog, m: Manifest,
                        segments: list[tuple[SegmentInfo, int]], *, cleaned_before: int,
                        now_ms: int, delete_retention_ms: int) -> tuple[pa.Table, int, int]:
    """Like :func:`survivors` over ``segments`` (each with its label, see
    ``txn_rules``; all at or above the log start), holding one segment file at a time.

    Two passes, as Kafka's cleaner builds its offset map first: the first keeps
    only keys and offsets (copied to ``large_binary``, so the file buffer is
    released and a range past 2 GiB of keys cannot overflow 32-bit offsets);
    the second filters each segment. Returns the survivors and, for dry-run
    estimates, the estimated payload bytes before and after.
    """
    keys, offsets = [], []
    for info, _ in segments:
        t = plog.read_segment(info, m.log_start_offset, version=m.version)
        keys.append(t.column("key").cast(pa.large_binary()))
        offsets.append(t.column("offset").combine_chunks())
        del t
    if not keys:
        return txn_rules.empty(plog, m), 0, 0
    latest = latest_offsets(pa.chunked_array([c for k in keys for c in k.chunks]),
                            pa.chunked_array(offsets))
    del keys, offsets
    kept, before, after = [], 0, 0
    for info, label in segments:
        t = txn_rules.labelled(plog.read_segment(info, m.log_start_offset, version=m.version),
                               label)
        part = t.filter(keep_mask(t, latest, cleaned_before=cleaned_before, now_ms=now_ms,
                                  delete_retention_ms=delete_retention_ms))
        before += int(record_sizes(t).sum())
        after += int(record_sizes(part).sum())
        kept.append(part)  # filter copies: the segment's file buffer is released
        del t
    return pa.concat_tables(kept).combine_chunks(), before, after


def record_sizes(table: pa.Table) -> np.ndarray:
    """Approximate Arrow payload bytes of each record (for cutting segments)."""
    size = np.full(table.num_rows, ROW_OVERHEAD_BYTES, dtype=np.int64)
    for name in ("key", "value"):
        lengths = pc.fill_null(pc.binary_length(table.column(name)), 0)
        size += lengths.to_numpy().astype(np.int64, copy=False)
    return size


def split_by_bytes(table: pa.Table, limit: int) -> list[pa.Table]:
    """Cut ``table`` into consecutive slices of at most ``limit`` estimated bytes each.

    A single record larger than ``limit`` gets a slice of its own.
    """
    if table.num_rows == 0:
        return []
    cumulative = np.cumsum(record_sizes(table))
    out, start, base = [], 0, 0
    while start < table.num_rows:
        end = int(np.searchsorted(cumulative, base + limit, "right"))
        end = max(end, start + 1)
        out.append(table.slice(start, end - start))
        base = int(cumulative[end - 1])
        start = end
    return out


def read_range(plog: PartitionLog, m: Manifest, segments: tuple[SegmentInfo, ...]) -> pa.Table:
    """The live records of ``segments`` (those at or above the log start)."""
    tables = [plog.read_segment(info, m.log_start_offset, version=m.version)
              for info in segments if info.last_offset >= m.log_start_offset]
    if not tables:
        return plog.read_segment(segments[0], version=m.version).slice(0, 0)
    return pa.concat_tables(tables).combine_chunks()


@dataclasses.dataclass(frozen=True)
class CleanPass:
    """A due cleaning pass, read: the plan, its survivors cut into output segments, and
    the estimated payload bytes before and after (for a dry run's estimate)."""

    plan: CleanPlan
    chunks: list[pa.Table]
    records_after: int
    estimate_before: int
    estimate_after: int

    @property
    def bytes_before(self) -> int:
        return sum(s.bytes for s in self.plan.segments)


class Compaction(MaintenanceStep[CleanPass]):
    """The cleaner as a maintenance step (see :func:`compact_partition`)."""

    action = "compact"

    def __init__(self, config: TopicConfig, now_ms: int, *, force: bool = False,
                 memory_budget_bytes: int = MEMORY_BUDGET_BYTES):
        self.config, self.now_ms, self.force = config, now_ms, force
        self.memory_budget_bytes = memory_budget_bytes

    def plan(self, plog: PartitionLog, m: Manifest) -> CleanPass | NothingToDo:
        config = self.config
        plan = plan_clean(m, config, self.now_ms)
        if plan is None:
            return NothingToDo("not a compacted topic" if not config.compacted
                               else "nothing cleanable")
        if not (plan.due or (self.force and plan.segments)):
            return NothingToDo(f"dirty ratio {plan.dirty_ratio:.2f} below {plan.min_ratio:.2f}")
        horizon = dict(cleaned_before=plan.first_dirty_offset, now_ms=self.now_ms,
                       delete_retention_ms=config.delete_retention_ms)
        kinds = txn_rules.classify(m, plan.segments)  # aborted segments are not read
        if sum(s.bytes for s in plan.segments) <= self.memory_budget_bytes:  # one read per file
            table = txn_rules.read_labelled(plog, m, kinds.records)
            kept = survivors(table, **horizon)
            before, after = int(record_sizes(table).sum()), int(record_sizes(kept).sum())
            del table
        else:  # two reads of each file, one file in memory at a time
            kept, before, after = survivors_streaming(plog, m, kinds.records, **horizon)
        markers = txn_rules.kept_markers(plog, m, kinds, kept, **horizon)
        if markers:  # in offset order among the records
            kept = pa.concat_tables([kept, *markers])
            kept = kept.take(pc.sort_indices(kept, [("offset", "ascending")]))
        chunks = [c for run in txn_rules.cut_by_kind(kept)
                  for c in split_by_bytes(run, config.segment_bytes)]
        return CleanPass(plan, chunks, kept.num_rows, before, after)

    def _result(self, plog: PartitionLog, work: CleanPass, **more: Any) -> StepResult:
        plan = work.plan
        return StepResult(action=self.action, topic=plog.topic, partition=plog.partition,
                          changed=True, segments_before=len(plan.segments),
                          records_before=sum(s.count for s in plan.segments),
                          records_after=work.records_after, bytes_before=work.bytes_before,
                          note=f"dirty ratio {plan.dirty_ratio:.2f}", **more)

    def preview(self, plog: PartitionLog, m: Manifest, work: CleanPass) -> StepResult:
        after = int(work.bytes_before * work.estimate_after / work.estimate_before) \
            if work.estimate_before else 0
        return self._result(plog, work, dry_run=True, segments_after=len(work.chunks),
                            bytes_after=after, log_start_offset=m.log_start_offset)

    def apply(self, plog: PartitionLog, m: Manifest, work: CleanPass) -> StepResult:
        plan = work.plan
        new = plog.replace_segments(plan.segments, work.chunks, committer="compaction",
                                    now_ms=self.now_ms,
                                    cleaned_offset=plan.first_uncleanable_offset)
        lo, hi = plan.segments[0].base_offset, plan.segments[-1].last_offset
        written = [s for s in new.segments if s.base_offset >= lo and s.last_offset <= hi]
        return self._result(plog, work, segments_after=len(written),
                            bytes_after=sum(s.bytes for s in written),
                            log_start_offset=new.log_start_offset)


def compact_partition(plog: PartitionLog, config: TopicConfig, now_ms: int, *,
                      dry_run: bool = False, force: bool = False,
                      memory_budget_bytes: int = MEMORY_BUDGET_BYTES) -> StepResult:
    """Clean one partition if its dirty ratio is due (or ``force``); report what changed.

    ``force`` ignores ``min.cleanable.dirty.ratio`` (still needs a cleanable
    range). A cleanable range larger than ``memory_budget_bytes`` (file bytes)
    is cleaned segment by segment in two passes (:func:`survivors_streaming`).
    A conflicting concurrent maintenance commit or a segment vacuumed under
    the pass yields a result with ``conflict`` set and no change.
    """
    return Compaction(config, now_ms, force=force,
                      memory_budget_bytes=memory_budget_bytes).run(plog, dry_run=dry_run)
