"""One partition: snapshots, reads by offset and time, appends, maintenance, garbage.

:class:`PartitionLog` is the face of a partition; each job is its own module:

* ``versions`` -- the manifest version files: reading one (and a carried
  trailer), applying deltas, the newest version and the snapshot cache;
* ``commit`` -- **the commit protocol** (the format spec of how a partition
  changes: exclusive versions, fencing, rebasing, crash recovery, the races with
  vacuum) and the one optimistic loop every commit runs;
* ``segment_commit`` -- how an append's segment is written and committed (one
  linked file on local stores, segment then version elsewhere);
* ``reader`` -- reads by offset and by time, read_uncommitted or read_committed;
  ``writer`` -- claims, appends (transactional ones and control markers: the rules
  are ``txn_writes``), maintenance swaps; ``vacuum`` -- unreferenced files and
  their deletion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa

from conf.topic import TopicConfig
from log_layout import reader, vacuum as garbage, writer as writes
from log_layout.commit import wall_clock_ms
from log_layout.hot_journal import Journals
from log_layout.hot_writer import JournalWriter
from log_layout.manifest import Manifest, SegmentInfo
from log_layout.store import Store
from log_layout.vacuum import UnreferencedFile, VacuumReport
from log_layout.versions import Versions
from log_layout.writer import AppendResult, PartitionWriter

__all__ = ["PartitionLog", "PartitionWriter", "AppendResult", "UnreferencedFile",
           "VacuumReport", "wall_clock_ms"]


class PartitionLog:
    """Reads and commits of one partition. Thread-safe; cheap to keep around.

    It is given what it needs of its topic, and never asks the log: the topic's
    ``config`` (the :class:`log_layout.topics.Log` that made it hands it each newer
    config it reads, see :meth:`use_config`), the incarnation ``topic_id`` it reads,
    ``current_topic_id()`` (the topic's id now, read from the store: a reader follows
    a re-created topic, see ``versions``) and how many manifest versions vacuum keeps.
    """

    def __init__(self, store: Store, topic: str, partition: int, topic_id: str = "", *,
                 config: TopicConfig, current_topic_id: Callable[[], str],
                 manifest_versions_retained: int = 100, journals: Journals | None = None):
        self.store = store
        self.topic, self.partition = topic, partition
        self.manifest_versions_retained = manifest_versions_retained
        self._config = config
        #: the partition's manifest versions (paths, reads, the newest, the next)
        self.versions = Versions(store, topic, partition, topic_id, current_topic_id,
                                 journals)
        self.folder = self.versions.folder
        self.manifest_folder = self.versions.manifest_folder
        #: this process's writer through a hot journal, while it has one
        self.hot_writer: PartitionWriter | None = None

    def __repr__(self) -> str:
        return f"PartitionLog({self.topic}-{self.partition} @ {self.store.url})"

    @property
    def topic_id(self) -> str:
        """The topic incarnation read: a reader follows a re-created topic."""
        return self.versions.topic_id

    def config(self) -> TopicConfig:
        """The topic's config, as the log that made this partition last read it."""
        return self._config

    def use_config(self, config: TopicConfig) -> None:
        """Take ``config`` as the topic's config from now on (an append reads it once)."""
        self._config = config

    # -- snapshots ---------------------------------------------------------
    def snapshot(self, *, refresh: bool = True) -> Manifest:
        """The newest committed manifest. ``refresh=False`` may return a cached one."""
        return self.versions.snapshot(refresh=refresh)

    def high_watermark(self) -> int:
        return self.snapshot().next_offset

    def log_start_offset(self) -> int:
        return self.snapshot().log_start_offset

    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, else the high watermark."""
        return self.snapshot().last_stable_offset

    def version(self, version: int) -> Manifest:
        """A specific manifest version (FileNotFoundError once vacuumed)."""
        return self.versions.load(version)

    # -- reads (reader.py) ---------------------------------------------------
    def read_segment(self, info: SegmentInfo, start: int | None = None,
                     end: int | None = None, *, version: int = -1) -> pa.Table:
        """The records of one segment with offsets in ``[start, end)``; raises
        MissingSegment or CorruptSegment."""
        return reader.read_segment(self.versions, info, start, end, version=version)

    def read_segments(self, infos: list[SegmentInfo], *, version: int = -1) -> list[pa.Table]:
        """The whole tables of ``infos``, in order, read in passes (``reader.read_segments``:
        a missing segment after the first ends the list); raises MissingSegment or
        CorruptSegment."""
        return reader.read_segments(self.versions, infos, version=version)

    def read(self, start: int, end: int | None = None, *, manifest: Manifest | None = None,
             isolation_level: str = reader.READ_UNCOMMITTED) -> Iterator[pa.RecordBatch]:
        """Record batches with offsets in ``[start, end)`` (``end`` = high watermark;
        read_committed: at most the last stable offset, without aborted records);
        raises OffsetOutOfRange (see ``reader.read``)."""
        return reader.read(self.versions, start, end, manifest=manifest,
                           isolation_level=isolation_level)

    def read_table(self, start: int, end: int | None = None, *,
                   manifest: Manifest | None = None,
                   isolation_level: str = reader.READ_UNCOMMITTED) -> pa.Table:
        return reader.read_table(self.versions, start, end, manifest=manifest,
                                 isolation_level=isolation_level)

    def offset_for_timestamp(self, timestamp_ms: int, *,
                             manifest: Manifest | None = None) -> int | None:
        """The first offset whose timestamp is at or after ``timestamp_ms``; None if no
        record is that new."""
        return reader.offset_for_timestamp(self.versions, timestamp_ms, manifest=manifest)

    # -- writes (writer.py) ----------------------------------------------------
    def claim(self, leader: str, journal: JournalWriter | None = None) -> PartitionWriter:
        """Become the partition's writer: bump the leader epoch, fencing the last one;
        with ``journal``, a writer through that hot journal (``writer.claim``)."""
        writer = writes.claim(self, leader, journal)
        if journal is not None:
            self.hot_writer = writer
        return writer

    def writer(self) -> PartitionWriter:
        """A writer at the current leader epoch, without claiming (fenced by any claim):
        this process's hot writer of the partition while it leads it, else one that
        commits to ``_log`` (taking the partition over from a hot writer elsewhere:
        ``writer.sealing_snapshot``)."""
        hot = self.hot_writer
        if hot is not None and hot.fenced is None:
            return hot
        return PartitionWriter(self, self.snapshot())

    def replace_segments(self, remove: Sequence[SegmentInfo], add: Sequence[pa.Table], *,
                         committer: str, now_ms: int, log_start_offset: int | None = None,
                         cleaned_offset: int | None = None) -> Manifest:
        """Maintenance commit: swap ``remove`` for segments made of ``add``.

        ``remove`` must be consecutive segments of the newest manifest; ``add``
        are tables of the segment schema whose offsets lie inside the removed
        range, in order (compaction output, a roll-up, or nothing for
        retention). The new segments tile the removed offset range, so
        compacted-away offsets become gaps. ``log_start_offset`` may only move
        forward, and so may ``cleaned_offset`` (the compaction checkpoint, see
        manifest.py). Rebases over appends; raises MaintenanceConflict if another
        job changed any of ``remove`` first, InvalidMaintenance or InvalidRecords
        for a bad request.
        """
        return writes.replace_segments(self.versions, self.config, remove, add,
                                       committer=committer, now_ms=now_ms,
                                       log_start_offset=log_start_offset,
                                       cleaned_offset=cleaned_offset)

    # -- garbage (vacuum.py) -------------------------------------------------
    def unreferenced(self, now: int) -> list[UnreferencedFile]:
        """Files of this partition no current manifest names, with their age.

        ``superseded`` files were named until a commit removed them (age counts
        from that commit); ``orphan`` segments and ``temp`` files were left by a
        writer that crashed or lost a race; ``manifest`` versions are older than
        the retained window; ``foreign`` manifests belong to another incarnation
        of the topic (a writer that outlived a delete and re-create).
        """
        return garbage.unreferenced(self.versions, now,
                                    retained=self.manifest_versions_retained)

    def orphans(self, now: int | None = None) -> list[UnreferencedFile]:
        """Files left by crashed writers (unnamed segments, temp files) and by writers of
        an earlier incarnation of the topic (foreign manifests)."""
        return garbage.orphans(self.versions, now, retained=self.manifest_versions_retained)

    def vacuum(self, *, now_ms: int, delay_ms: int, dry_run: bool = False) -> VacuumReport:
        """Delete unreferenced files older than ``delay_ms``; old manifests go oldest first.

        Superseded files are then dropped from the manifest's ``removed`` list.
        ``dry_run`` reports without deleting.
        """
        return garbage.vacuum(self.versions, now_ms=now_ms, delay_ms=delay_ms,
                              retained=self.manifest_versions_retained, dry_run=dry_run)
