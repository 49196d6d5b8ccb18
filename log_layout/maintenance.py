"""A maintenance step on one partition: the skeleton every step runs, and what it reports.

Compaction, retention and roll-up are each one :class:`MaintenanceStep`, run the
same way (:meth:`MaintenanceStep.run`):

1. read the partition's newest manifest and **plan** on it (the plan is made
   where the work is done: an earlier step changes what the next one sees);
   a plan of :class:`NothingToDo` ends the step with its note;
2. in a **dry run**, report what the plan would change, writing nothing;
3. else **apply** it: swap segments with ``PartitionLog.replace_segments``,
   which rebases over concurrent appends;
4. a **conflict** -- another maintenance job replaced some of the step's
   segments first (:class:`MaintenanceConflict`), or vacuum deleted a segment
   the step was reading (:class:`MissingSegment`) -- is not an error: the step
   reports it (``StepResult.conflict``) and leaves the work to the next run.

Every step takes ``now_ms``; none reads the clock. A :class:`StepResult` is a
plain picklable dataclass, so Spark tasks return it to the driver.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Generic, TypeVar

from log_layout.errors import MaintenanceConflict, MissingSegment
from log_layout.manifest import Manifest
from log_layout.partition import PartitionLog

#: what a step meets when another job got there first: reported, never raised
CONFLICTS: tuple[type[Exception], ...] = (MaintenanceConflict, MissingSegment)

P = TypeVar("P")  # a step's plan


@dataclasses.dataclass(frozen=True)
class StepResult:
    """What one maintenance step did (or, in a dry run, would do) to one partition."""

    action: str  # "compact" | "rollup" | "retention" | "vacuum" | "error"
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
    #: True if another job's commit (or vacuum) got in the way of some of the work
    conflict: bool = False

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

    @classmethod
    def conflicted(cls, action: str, topic: str, partition: int, error: Exception, *,
                   dry_run: bool = False, log_start_offset: int = 0) -> "StepResult":
        """No change, because of ``error`` (one of :data:`CONFLICTS`)."""
        return cls(action, topic, partition, False, dry_run, note=conflict_note(error),
                   log_start_offset=log_start_offset, conflict=True)


def conflict_note(error: Exception) -> str:
    """The note a conflict leaves in a result."""
    return f"conflict: {error}"


@dataclasses.dataclass(frozen=True)
class NothingToDo:
    """A plan that is no work, and why (the result's note)."""

    note: str


class MaintenanceStep(Generic[P]):
    """One maintenance step: subclasses plan, preview (dry run) and apply; :meth:`run`
    is the skeleton around them."""

    #: the result's ``action``
    action = ""

    def plan(self, plog: PartitionLog, m: Manifest) -> P | NothingToDo:
        """The work to do on ``m``, the newest manifest; may read segments (a
        :class:`MissingSegment` is a conflict)."""
        raise NotImplementedError

    def preview(self, plog: PartitionLog, m: Manifest, plan: P) -> StepResult:
        """A dry run's result: what applying ``plan`` would change."""
        raise NotImplementedError

    def apply(self, plog: PartitionLog, m: Manifest, plan: P) -> StepResult:
        """Commit ``plan``; raises one of :data:`CONFLICTS` to report a conflict."""
        raise NotImplementedError

    def run(self, plog: PartitionLog, *, dry_run: bool = False) -> StepResult:
        """Plan on the newest manifest, then preview or apply; a conflict is reported
        in the result. Raises what reading and committing raise besides conflicts."""
        m = plog.snapshot()
        try:
            plan = self.plan(plog, m)
            if isinstance(plan, NothingToDo):
                return StepResult.unchanged(self.action, plog.topic, plog.partition, plan.note,
                                            dry_run=dry_run, log_start_offset=m.log_start_offset)
            return self.preview(plog, m, plan) if dry_run else self.apply(plog, m, plan)
        except CONFLICTS as e:
            return StepResult.conflicted(self.action, plog.topic, plog.partition, e,
                                         dry_run=dry_run, log_start_offset=m.log_start_offset)
