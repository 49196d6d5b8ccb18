"""Delete records: move a partition's log start offset forward (Kafka's DeleteRecords,
``kafka-delete-records.sh``).

Format: no file of its own. A delete is one manifest version (``manifest.py``) built
on the newest one with

* ``log_start_offset`` = the requested offset (it only moves forward, and never past
  ``next_offset``, the high watermark);
* ``segments`` without every segment whose ``last_offset`` lies below it; those
  are listed under ``removed`` with the commit's time, as any maintenance commit
  lists what it stopped naming, so vacuum deletes them after
  ``file.delete.delay.ms`` and a reader of an older snapshot still finds them;
* a segment that holds the new log start stays whole: readers never return an
  offset below ``log_start_offset`` (``reader.check_range`` refuses such a start,
  ``read_segment`` slices from it), so the records before it are gone for every
  reader at once, and retention or compaction reclaim the file later;
* ``committer`` ``"delete-records"``; the leader epoch is unchanged, so the leader
  keeps appending: an append that loses the race to this version rebases on it.

It is the commit loop of ``commit.py`` (a version created exclusively; a lost race
re-reads and re-applies the delete on the winner's version), so a crash leaves the
old log start or the new one, nothing between.
"""

from __future__ import annotations

from log_layout import commit
from log_layout.errors import OffsetOutOfRange
from log_layout.manifest import Manifest
from log_layout.partition import PartitionLog, wall_clock_ms

COMMITTER = "delete-records"


def delete_records(plog: PartitionLog, before: int, *, now_ms: int | None = None) -> Manifest:
    """Make ``before`` the partition's log start offset: records below it are deleted.

    ``before`` = -1 means the high watermark (Kafka's convention: delete everything).
    Returns the newest manifest: the delete's version, or the current one if the log
    already starts at or after ``before``. Raises OffsetOutOfRange if ``before`` is
    past the high watermark or below -1.
    """
    now = wall_clock_ms() if now_ms is None else now_ms
    v = plog.versions

    def build(m: Manifest) -> Manifest | None:
        target = m.next_offset if before == -1 else before
        if target < 0 or target > m.next_offset:
            raise OffsetOutOfRange(plog.topic, plog.partition, before, m.log_start_offset,
                                   m.next_offset)
        if target <= m.log_start_offset:
            return None
        gone = [s for s in m.segments if s.last_offset < target]
        return m.next(segments=tuple(s for s in m.segments if s.last_offset >= target),
                      removed=m.removed + tuple((s.file, now) for s in gone),
                      log_start_offset=target, committer=COMMITTER, committed_ms=now)

    return commit.run(v.snapshot, build, v.attempt) or v.snapshot()
