"""Roll-up: merge runs of small consecutive segments into segments of about ``segment.bytes``.

The gateway writes one segment per flush, so a busy partition collects many
small files. Roll-up walks the manifest oldest first and groups consecutive
segments greedily while a group stays within ``segment.bytes`` (file bytes)
and spans at most ``segment.ms`` of record time (newest ``max_ts`` minus
oldest ``min_ts``); every group of two or more segments becomes one segment
with exactly the same records and offsets. A group never straddles the
compaction checkpoint (``Manifest.cleaned_offset``), so the cleaner's
clean/dirty byte accounting stays exact. A group also keeps transaction
boundaries (manifest.py): it is a run of non-transactional segments, or a run
of one producer's segments with no marker between them (one transaction: a
marker is its own segment, and compaction removes a marker only after every
record of its transaction) once that transaction has ended, all aborted or none
(see :func:`same_transaction`); a marker is never merged at all. The newest segment may be merged
too: unlike Kafka's active segment it is a closed file, and merging it is what
makes the tail of the log look like Kafka's rolled segments.

Commits go through ``PartitionLog.replace_segments`` (rebases over appends;
a concurrent maintenance commit on the same segments is reported as a
conflict and retried by the next run). Each group is one commit of a whole
manifest, so a run merges at most ``MAX_GROUPS_PER_RUN`` groups, oldest first,
and leaves the rest to the next: on S3 a partition of ~4,700 small segments
beside a live producer made one run of ~1,000 commits last 90 s.
"""

from __future__ import annotations

import pyarrow as pa

from compaction.cleaner import read_range
from conf.topic import TopicConfig
from log_layout import Manifest, PartitionLog, SegmentInfo, paths
from log_layout.manifest import NO_PRODUCER
from log_layout.maintenance import (CONFLICTS, MaintenanceStep, NothingToDo, StepResult,
                                    conflict_note)

#: groups one run merges at most (each is a commit); the rest wait for the next run
MAX_GROUPS_PER_RUN = 128


def plan_rollup(m: Manifest, config: TopicConfig) -> list[tuple[SegmentInfo, ...]]:
    """Groups of 2+ consecutive segments of ``m`` to merge, oldest first."""
    groups: list[tuple[SegmentInfo, ...]] = []
    run: list[SegmentInfo] = []
    size = 0

    def close() -> None:
        # a lone segment in a shared hot object is rewritten too: that is what lets
        # the sweeper delete the object (log_layout.hot_sweep)
        if len(run) >= 2 or (run and paths.is_hot_file(run[0].file)):
            groups.append(tuple(run))

    for info in m.segments:
        fits = run and size + info.bytes <= config.segment_bytes \
            and max(info.max_ts, *(s.max_ts for s in run)) - min(info.min_ts, run[0].min_ts) \
            <= config.segment_ms \
            and not run[-1].end_offset <= m.cleaned_offset < info.end_offset \
            and same_transaction(m, run[-1], info)
        if fits:
            run.append(info)
            size += info.bytes
        else:
            close()
            run, size = [info], info.bytes
    close()
    return groups


def same_transaction(m: Manifest, a: SegmentInfo, b: SegmentInfo) -> bool:
    """Whether consecutive segments ``a`` and ``b`` of ``m`` may share a segment:
    neither is a marker, and both are non-transactional, or both are one producer's
    (no marker of it lies between consecutive segments) in an ended transaction and
    both aborted or neither (a segment discarded from a transaction, ``txn_discard``,
    is aborted alone)."""
    if a.control or b.control or a.producer_id != b.producer_id:
        return False
    if a.producer_id == NO_PRODUCER:
        return True
    # an open transaction's segments stay as appended: txn_discard names them by range
    first_open = m.open_txns.get(a.producer_id)
    return (first_open is None or b.base_offset < first_open) \
        and m.is_aborted(a) == m.is_aborted(b)


Group = tuple[SegmentInfo, ...]


class Rollup(MaintenanceStep[list[Group]]):
    """Roll-up as a maintenance step (see :func:`rollup_partition`); each group is its
    own commit, and a conflict on one group leaves the others merged."""

    action = "rollup"

    def __init__(self, config: TopicConfig, now_ms: int):
        self.config, self.now_ms = config, now_ms

    def plan(self, plog: PartitionLog, m: Manifest) -> list[Group] | NothingToDo:
        groups = plan_rollup(m, self.config)[:MAX_GROUPS_PER_RUN]
        return groups or NothingToDo("no small segments to merge")

    def preview(self, plog: PartitionLog, m: Manifest, groups: list[Group]) -> StepResult:
        records = sum(s.count for g in groups for s in g)
        size = sum(s.bytes for g in groups for s in g)
        return StepResult(self.action, plog.topic, plog.partition, True, True,
                          sum(len(g) for g in groups), len(groups), records, records,
                          size, size, log_start_offset=m.log_start_offset)

    def apply(self, plog: PartitionLog, m: Manifest, groups: list[Group]) -> StepResult:
        done_before = done_after = done_segments = done_records = merged = 0
        notes = []
        for group in groups:
            try:
                table: pa.Table = read_range(plog, m, group)
                new = plog.replace_segments(group, [table], committer="rollup",
                                            now_ms=self.now_ms)
            except CONFLICTS as e:  # this group is left to the next run; the rest go on
                notes.append(conflict_note(e))
                continue
            m = new
            lo, hi = group[0].base_offset, group[-1].last_offset
            written = [s for s in new.segments if s.base_offset >= lo and s.last_offset <= hi]
            merged += 1
            done_segments += len(group)
            done_records += table.num_rows
            done_before += sum(s.bytes for s in group)
            done_after += sum(s.bytes for s in written)
        # a roll-up keeps every record: before and after are the records it rewrote
        return StepResult(self.action, plog.topic, plog.partition, merged > 0, False,
                          done_segments, merged, done_records, done_records, done_before,
                          done_after, note="; ".join(notes),
                          log_start_offset=m.log_start_offset, conflict=bool(notes))


def rollup_partition(plog: PartitionLog, config: TopicConfig, now_ms: int, *,
                     dry_run: bool = False) -> StepResult:
    """Merge every planned group of one partition; report segments and bytes before/after."""
    return Rollup(config, now_ms).run(plog, dry_run=dry_run)
