"""The commit protocol of a partition, and the one loop that runs it.

(See manifest.py for the manifest format, versions.py for how versions are read.)

1. A writer builds its segment with offsets from the snapshot's
   ``next_offset`` and stores it under a fresh unique name. The file is
   invisible: readers only open files a manifest names.
2. It creates manifest version N+1 exclusively. If it wins, the records are
   committed (the high watermark moves) and the append is acknowledged.

   On a store with links (local), an append does both with one file: the
   segment, then version N+1's JSON as a trailer, under the segment's name;
   a hard link to the version's name commits it (``store.linked_file``). So an
   append creates one file, not two. Readers of the segment read the
   ``bytes`` the manifest records; readers of the version read the trailer
   from the file's end (``Versions.read_file``), and vacuum cuts the trailer
   off when the version is old (``vacuum.delete_version_file``). On other
   stores (S3, HDFS) the same file is put exclusively under the version's name
   alone, and the manifest names the segment by that file; vacuum keeps it
   while the segment lives. How a segment is written is the seam
   ``segment_commit.py``: the linked commit, that carried one, or the plain
   two-file one (segment, then version) at checkpoint versions.
3. If it loses, it re-reads the newest version. A higher ``leader_epoch``
   means another writer claimed the partition: the writer deletes its
   unnamed segment, raises :class:`Fenced` and never writes again. The same
   epoch means a maintenance job (or another writer of the same epoch)
   committed: the writer rebases (renumbering its segment if the offsets
   moved) and tries N+2.

Every commit of a partition -- appends, claims, maintenance swaps, vacuum's
clean-up of the ``removed`` list -- is this loop, :func:`run`: snapshot, build
the next version on it (the builder rebases by being called again, or raises
to stop), try to create it, and on a lost race re-read and build again. A
topic's config changes (``Log.alter_topic``) run the same loop on config versions.

Maintenance (:meth:`PartitionLog.replace_segments`) swaps a set of
consecutive segments for new ones within the same offsets; if a producer
appended meanwhile it rebases, if another job already replaced any of its
segments it gives up with :class:`MaintenanceConflict`. A crash at any step
leaves at most unnamed files (segments, ``.tmp-*``), which
:meth:`PartitionLog.orphans` reports and :meth:`PartitionLog.vacuum` deletes
after ``file.delete.delay.ms``.

Races with vacuum, and the rules that make them safe:

* vacuum judges an unnamed segment by its age, so a writer never commits a
  segment it wrote more than half of ``file.delete.delay.ms`` ago (after many
  lost races it writes it again under a new name); vacuum's ``now_ms`` must be
  the real clock for this to hold against live writers;
* a reader holding an older snapshot may meet a superseded segment that vacuum
  already deleted: :meth:`PartitionLog.read` and
  :meth:`PartitionLog.offset_for_timestamp` then re-plan on the newest
  snapshot; :class:`MissingSegment` is raised only for a file the newest
  manifest still names;
* old manifest versions are deleted oldest first, so :meth:`snapshot` may
  trust a cached version N while N+1 does not exist and the checkpoint version
  at or before N does (versions in the retained window have no gaps, and a
  checkpoint never carries a segment, so it is never kept past its turn);
  otherwise it lists the ``_log`` folder.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

S = TypeVar("S")  # a snapshot of what is committed
P = TypeVar("P")  # the plan of the next version
R = TypeVar("R")  # what a won attempt gives back


def wall_clock_ms() -> int:
    """The real clock, in ms since the epoch (what vacuum's ages are judged by)."""
    return time.time_ns() // 1_000_000


def run(snapshot: Callable[[], S], build: Callable[[S], P | None],
        attempt: Callable[[S, P], R | None], *, first: S | None = None) -> R | None:
    """Commit optimistically: build the next version on a snapshot, try it, and on a lost
    race re-read and build again (a rebase) until a try wins.

    ``snapshot()`` reads the newest committed state; ``first``, if given, is used
    before it (a cached snapshot: an append reads nothing before its first try).
    ``build(m)`` plans the next version on top of ``m``, or returns None when there
    is nothing to do; it raises to stop (Fenced, MaintenanceConflict, ...).
    ``attempt(m, plan)`` tries to create the version after ``m``: what it gives back
    if it won, None if another commit took that version first.

    Returns the winning attempt's result, or None if ``build`` found nothing to do;
    raises whatever ``build`` or ``attempt`` raise (a failed attempt's outcome is
    unknown: what it wrote is left for vacuum to judge, see segment_commit.py).
    """
    m = snapshot() if first is None else first
    while True:
        plan = build(m)
        if plan is None:
            return None
        won = attempt(m, plan)
        if won is not None:
            return won
        m = snapshot()
