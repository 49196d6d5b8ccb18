"""Time and size retention of one partition.

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

The dropped files are deleted later by vacuum (``retention.vacuum``). Time is
the ``now_ms`` parameter throughout; the step's skeleton (dry run, conflicts)
is ``log_layout.maintenance``.
"""

from __future__ import annotations

import dataclasses

from conf.topic import TopicConfig
from log_layout import Manifest, PartitionLog, SegmentInfo
from log_layout.maintenance import MaintenanceStep, NothingToDo, StepResult


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


class Retention(MaintenanceStep[RetentionPlan]):
    """Retention as a maintenance step (see :func:`retain_partition`)."""

    action = "retention"

    def __init__(self, config: TopicConfig, now_ms: int):
        self.config, self.now_ms = config, now_ms

    def plan(self, plog: PartitionLog, m: Manifest) -> RetentionPlan | NothingToDo:
        plan = plan_retention(m, self.config, self.now_ms)
        if plan is None:
            return NothingToDo("cleanup.policy has no delete" if not self.config.deletes
                               else "nothing expired")
        return plan

    def preview(self, plog: PartitionLog, m: Manifest, plan: RetentionPlan) -> StepResult:
        return self._result(plog, plan, dry_run=True)

    def apply(self, plog: PartitionLog, m: Manifest, plan: RetentionPlan) -> StepResult:
        plog.replace_segments(plan.drop, [], committer="retention", now_ms=self.now_ms,
                              log_start_offset=plan.new_log_start_offset)
        return self._result(plog, plan, dry_run=False)

    def _result(self, plog: PartitionLog, plan: RetentionPlan, *, dry_run: bool) -> StepResult:
        return StepResult(self.action, plog.topic, plog.partition, True, dry_run,
                          len(plan.drop), 0, sum(s.count for s in plan.drop), 0,
                          sum(s.bytes for s in plan.drop), 0,
                          note=f"{plan.by_time} by time, {plan.by_size} by size",
                          log_start_offset=plan.new_log_start_offset)


def retain_partition(plog: PartitionLog, config: TopicConfig, now_ms: int, *,
                     dry_run: bool = False) -> StepResult:
    """Drop the segments retention allows and move the log start offset forward."""
    return Retention(config, now_ms).run(plog, dry_run=dry_run)
