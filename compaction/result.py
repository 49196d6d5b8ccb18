"""What one maintenance step did (or, in a dry run, would do) to one partition.

Compaction, roll-up and retention all report a :class:`StepResult`; it is a
plain picklable dataclass so Spark tasks return it to the driver, and
:meth:`StepResult.to_dict` is the shape kept in the maintenance history.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class StepResult:
    action: str  # "compact" | "rollup" | "retention" | "vacuum"
    topic: str
    partition: int
    #: True if the step committed a change (or would have, in a dry run)
    changed: bool = False
    dry_run: bool = False
    segments_before: int = 0
    segments_after: int = 0
    records_before: int = 0
    records_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    #: files deleted by vacuum (or due for deletion, in a dry run)
    files_deleted: int = 0
    #: why nothing happened, or what went wrong ("", "conflict: ...", "below dirty ratio")
    note: str = ""
    log_start_offset: int = 0

    @property
    def records_removed(self) -> int:
        return self.records_before - self.records_after

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def unchanged(cls, action: str, topic: str, partition: int, note: str, *,
                  dry_run: bool = False, log_start_offset: int = 0) -> "StepResult":
        return cls(action, topic, partition, False, dry_run, note=note,
                   log_start_offset=log_start_offset)
