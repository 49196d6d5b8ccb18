"""Vacuum as a maintenance step: delete one partition's files no manifest names any more.

Those are files superseded by compaction or roll-up, dropped by retention, or
left by crashed writers, once older than the topic's ``file.delete.delay.ms``,
and manifest versions beyond the store's retained window
(``PartitionLog.vacuum``, which owns the rules). Time is the ``now_ms``
parameter; ``dry_run`` reports what would be deleted.
"""

from __future__ import annotations

from conf.topic import TopicConfig
from log_layout import PartitionLog
from log_layout.maintenance import StepResult


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
