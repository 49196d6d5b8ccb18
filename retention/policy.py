"""Time and size retention of one partition, and deletion of unreferenced files.

Kafka's rules (``UnifiedLog.deleteRetentionMsBreachedSegments`` and
``deleteRetentionSizeBreachedSegments``), with the manifest as the log:

* only topics whose ``cleanup.policy`` includes ``delete``;
* the newest (active) segment is never dropped;
* **time**: drop the oldest segments while their newest record is more than
  ``retention.ms`` older than ``now_ms`` (``-1`` = keep forever);
* **size**: with ``diff = partition bytes - retention.bytes``, drop the oldest
  segment while ``diff - segment bytes >= 0`` (so the partition keeps at least
  ``retention.bytes``, exceeding it by less than one segment; ``-1`` = no
  limit);
* whole segments only, oldest first; the log start offset moves to the base
  offset of the first kept segment.

:func:`vacuum_partition` then deletes files no manifest names any more --
superseded by compaction or roll-up, dropped by retention, orphans of crashed
writers -- once older than ``file.delete.delay.ms``, and manifest versions
beyond the store's retained window (``PartitionLog.vacuum``). Time is the
``now_ms`` parameter throughout.
"""

from __future__ import annotations

import dataclasses

from compaction.result import StepResult
from conf.topic import TopicConfig
from log_layout import Manifest, PartitionLog, SegmentInfo
from log_layout.errors import MaintenanceConflict


@dataclasses.dataclass(frozen=True)
class RetentionPlan:
    drop: tuple[SegmentInfo, ...]
    new_log_start_offset: int
    by_time: int  # how many of ``drop`` the time limit alone would drop
    by_size: int


def plan_retention(m: Manifest, config: TopicConfig, now_ms: int) -> RetentionPlan | None:
    """The oldest segments retention drops at ``now_ms``, or None if none."""
    if not config.deletes or len(m.segments) < 2:
        return None
    candidates = m.segments[:-1]
    by_time = 0
    if config.retention_ms >= 0:
        for info in candidates:
            if now_ms - info.max_ts <= config.retention_ms:
                break
            by_time += 1
    by_size = 0
    if config.retention_bytes >= 0:
        diff = m.size_bytes - config.retention_bytes
        for info in candidates:
            if diff - info.bytes < 0:
                break
            diff -= info.bytes
            by_size += 1
    n = max(by_time, by_size)
    if n == 0:
        return None
    return RetentionPlan(candidates[:n], m.segments[n].base_offset, by_time, by_size)


def retain_partition(plog: PartitionLog, config: TopicConfig, now_ms: int, *,
                     dry_run: bool = False) -> StepResult:
    """Drop the segments retention allows and move the log start offset forward."""
    topic, partition = plog.topic, plog.partition
    m = plog.snapshot()
    plan = plan_retention(m, config, now_ms)
    if plan is None:
        note = "cleanup.policy has no delete" if not config.deletes else "nothing expired"
        return StepResult.unchanged("retention", topic, partition, note, dry_run=dry_run,
                                    log_start_offset=m.log_start_offset)
    result = StepResult("retention", topic, partition, True, dry_run, len(plan.drop), 0,
                        sum(s.count for s in plan.drop), 0, sum(s.bytes for s in plan.drop), 0,
                        note=f"{plan.by_time} by time, {plan.by_size} by size",
                        log_start_offset=plan.new_log_start_offset)
    if dry_run:
        return result
    try:
        plog.replace_segments(plan.drop, [], committer="retention", now_ms=now_ms,
                              log_start_offset=plan.new_log_start_offset)
    except MaintenanceConflict as e:
        return StepResult.unchanged("retention", topic, partition, f"conflict: {e}",
                                    log_start_offset=m.log_start_offset)
    return result


def vacuum_partition(plog: PartitionLog, config: TopicConfig, now_ms: int, *,
                     dry_run: bool = False) -> StepResult:
    """Delete this partition's unreferenced files older than ``file.delete.delay.ms``."""
    report = plog.vacuum(now_ms=now_ms, delay_ms=config.file_delete_delay_ms, dry_run=dry_run)
    segs = [f for f in report.deleted if f.reason != "manifest"]
    return StepResult("vacuum", plog.topic, plog.partition, bool(report.deleted), dry_run,
                      files_deleted=len(report.deleted),
                      bytes_before=sum(f.size for f in segs), bytes_after=0,
                      note=f"{len(report.kept)} files within file.delete.delay.ms"
                      if report.kept else "",
                      log_start_offset=plog.snapshot(refresh=False).log_start_offset)
