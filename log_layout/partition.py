"""One partition: snapshots, reads by offset and time, appends, maintenance.

The commit protocol (see manifest.py for the manifest format):

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
   from the file's end (``_read_version_file``), and vacuum cuts the trailer
   off when the version is old (``_delete_version_file``).
3. If it loses, it re-reads the newest version. A higher ``leader_epoch``
   means another writer claimed the partition: the writer deletes its
   unnamed segment, raises :class:`Fenced` and never writes again. The same
   epoch means a maintenance job (or another writer of the same epoch)
   committed: the writer rebases (renumbering its segment if the offsets
   moved) and tries N+2.

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
  trust a cached version N while N exists and N+1 does not (versions have no
  gaps); otherwise it lists the ``_log`` folder.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from log_layout import paths, segment, workers
from log_layout.errors import (CorruptManifest, Fenced, InvalidMaintenance, InvalidRecords,
                               MaintenanceConflict,
                               MissingSegment, OffsetOutOfRange, OutOfOrderSequence,
                               TopicRecreated)
from log_layout.manifest import (CHECKPOINT_INTERVAL, Manifest, ProducerBatch, SegmentInfo,
                                  check_sequence, segments_after_replace)
from log_layout.store import TMP_PREFIX

if TYPE_CHECKING:
    from log_layout.topics import Log


#: bytes first read from the end of a manifest version file: all of a JSON manifest of a
#: few hundred segments, or the trailer of an append's file (see _read_version_file)
MANIFEST_TAIL_BYTES = 64 << 10
#: segments at least this big have their CRC-32 taken on a helper thread, if this
#: process may run on more than one CPU (see _commit_with_segment)
BACKGROUND_CRC_BYTES = 256 << 10


def _version_json(new: Manifest, parent: Manifest | None) -> bytes:
    """``new``'s JSON: a delta of ``parent`` when it may be one (it only adds segments
    and its version is not a checkpoint, see manifest.py), else whole."""
    delta = parent is not None and new.version % CHECKPOINT_INTERVAL != 0 \
        and new.is_delta_of(parent)
    return new.to_json(delta_of=parent if delta else None)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclasses.dataclass(frozen=True)
class AppendResult:
    """Where an append landed: offsets ``base_offset..last_offset`` inclusive."""

    base_offset: int
    last_offset: int
    version: int
    #: for each producer batch, its (base_offset, last_offset)
    batch_offsets: tuple[tuple[int, int], ...] = ()

    @property
    def count(self) -> int:
        return self.last_offset - self.base_offset + 1


@dataclasses.dataclass(frozen=True)
class UnreferencedFile:
    """A file in a partition folder that the newest manifest does not name."""

    name: str
    size: int
    age_ms: int
    reason: str  # "superseded" | "orphan" | "temp" | "manifest"


@dataclasses.dataclass(frozen=True)
class VacuumReport:
    deleted: tuple[UnreferencedFile, ...]
    kept: tuple[UnreferencedFile, ...]

    @property
    def deleted_bytes(self) -> int:
        return sum(f.size for f in self.deleted)


class PartitionLog:
    """Reads and commits of one partition. Thread-safe; cheap to keep around."""

    def __init__(self, log: "Log", topic: str, partition: int, topic_id: str = ""):
        self.log, self.store = log, log.store
        self.topic, self.partition, self.topic_id = topic, partition, topic_id
        self.folder = paths.partition_folder(topic, partition)
        self.manifest_folder = paths.manifest_folder(topic, partition)
        self._latest: Manifest | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PartitionLog({self.topic}-{self.partition} @ {self.store.url})"

    # -- snapshots ---------------------------------------------------------
    def _manifest_path(self, version: int, topic_id: str | None = None) -> str:
        name = paths.manifest_name(version, self.topic_id if topic_id is None else topic_id)
        return f"{self.manifest_folder}/{name}"

    def _version_tail(self, path: str) -> tuple[bytes, int, int | None]:
        """The end of a manifest version file, its size, and how many bytes a carried
        trailer takes (``segment.trailer_extent``; None for none, or a damaged one).
        Read from the end, again as far as the trailer says until it is all read, and
        never memory-mapped: vacuum cuts a carried trailer off once the version is old."""
        want = MANIFEST_TAIL_BYTES
        while True:
            tail, size = self.store.read_tail(path, want)
            try:
                extent = segment.trailer_extent(tail)
            except ValueError:
                return tail, size, None  # Manifest.from_file names the damage
            if extent is None or extent <= len(tail) or len(tail) == size:
                return tail, size, extent
            want = extent  # more than we read: read again, as much as it says

    def _read_version_file(self, path: str) -> bytes:
        """The bytes of a manifest version file that hold the manifest: all of a JSON
        one, the end of a segment that carries one."""
        tail, size, extent = self._version_tail(path)
        return self.store.read(path) if extent is None and len(tail) < size else tail

    def _read_version(self, version: int) -> tuple[Manifest, int | None]:
        """Version ``version`` as stored: a whole manifest, or a delta and the version
        it is a delta of (see ``Manifest.from_file``)."""
        path = self._manifest_path(version)
        try:
            m, delta_of = Manifest.from_file(self._read_version_file(path), path=path)
        except CorruptManifest:
            if not self.store.exists(path):  # vacuumed while we read it (and its trailer cut)
                raise FileNotFoundError(path) from None
            raise
        if (m.version, m.topic, m.partition) != (version, self.topic, self.partition):
            raise CorruptManifest(path, f"it says it is version {m.version} of "
                                  f"{m.topic}-{m.partition}")
        return m, delta_of

    def _load(self, version: int) -> Manifest:
        """Version ``version`` as a whole snapshot: a delta is applied to the version
        before it, the cached snapshot if that is the one, else read back to the last
        whole version (at most CHECKPOINT_INTERVAL - 1 deltas: see manifest.py).
        FileNotFoundError if a version needed was vacuumed meanwhile."""
        deltas: list[Manifest] = []
        while True:
            m, delta_of = self._read_version(version)
            if delta_of is None:
                break
            deltas.append(m)
            if len(deltas) >= CHECKPOINT_INTERVAL:
                raise CorruptManifest(self._manifest_path(m.version),
                                      f"more than {CHECKPOINT_INTERVAL - 1} deltas in a row")
            version = delta_of
            with self._lock:
                cached = self._latest
            if cached is not None and cached.version == version:
                m = cached
                break
        for delta in reversed(deltas):
            m = delta.on_top_of(m, path=self._manifest_path(delta.version))
        return m

    def _latest_version(self) -> int:
        while True:
            topic_id = self.topic_id
            versions = [v for f in self.store.list(self.manifest_folder)
                        if (v := paths.manifest_version(f.name, topic_id)) is not None]
            if versions:
                return max(versions)
            # None of ours: the topic may have been deleted (UnknownTopic) or created
            # again; a reader follows the new incarnation (writers never do: see
            # PartitionWriter), anything else is a broken partition.
            current = self.log.topic(self.topic, refresh=True).topic_id
            if current == topic_id:
                raise CorruptManifest(self.manifest_folder, "the partition has no manifest")
            with self._lock:
                self.topic_id, self._latest = current, None

    def snapshot(self, *, refresh: bool = True) -> Manifest:
        """The newest committed manifest. ``refresh=False`` may return a cached one."""
        with self._lock:
            cached = self._latest
        if cached is not None and not refresh:
            return cached
        if cached is not None and not self.store.exists(self._manifest_path(cached.version + 1)) \
                and self.store.exists(self._manifest_path(cached.version)):
            # Old versions are deleted oldest first, so if ours is still there and the
            # next is not, ours is the newest.
            return cached
        while True:
            version = self._latest_version()
            try:
                latest = self._load(version)
                break
            except FileNotFoundError:  # deleted by vacuum between list and read
                continue
        with self._lock:
            # Never backwards: a listing that raced a commit (ours, remembered meanwhile)
            # may miss the newest version, and a writer handed that older snapshot would
            # take its leader epoch for a fence. A re-created topic is not older but
            # another incarnation: other names (paths), and following it resets the cache.
            if self._latest is None or latest.version > self._latest.version:
                self._latest = latest
            return self._latest

    def _remember(self, manifest: Manifest) -> None:
        with self._lock:
            if self._latest is None or manifest.version > self._latest.version:
                self._latest = manifest

    def high_watermark(self) -> int:
        return self.snapshot().next_offset

    def log_start_offset(self) -> int:
        return self.snapshot().log_start_offset

    def version(self, version: int) -> Manifest:
        """A specific manifest version (FileNotFoundError once vacuumed)."""
        return self._load(version)

    # -- reads -------------------------------------------------------------
    def _check_range(self, m: Manifest, start: int, end: int) -> None:
        for offset in (start, end):
            if offset < m.log_start_offset or offset > m.next_offset:
                raise OffsetOutOfRange(self.topic, self.partition, offset, m.log_start_offset,
                                       m.next_offset)
        if end < start:
            raise OffsetOutOfRange(self.topic, self.partition, end, start, m.next_offset)

    def read_segment(self, info: SegmentInfo, start: int | None = None,
                     end: int | None = None, *, version: int = -1) -> pa.Table:
        """The records of one segment with offsets in ``[start, end)``.

        Raises MissingSegment if the file is gone and CorruptSegment if its
        bytes do not match the manifest's checksum.
        """
        path = f"{self.folder}/{info.file}"
        try:
            data = self.store.read_buffer(path, info.bytes)  # not a trailer after it
        except FileNotFoundError:
            raise MissingSegment(path, version) from None
        table = segment.decode(data, path=path, crc32=info.crc32, size=info.bytes)
        lo = start is not None and start > info.base_offset
        hi = end is not None and end <= info.last_offset
        if lo or hi:
            offsets = table.column("offset").to_numpy()
            i = int(np.searchsorted(offsets, start, "left")) if lo else 0
            j = int(np.searchsorted(offsets, end, "left")) if hi else len(offsets)
            table = table.slice(i, j - i)
        return table

    def read(self, start: int, end: int | None = None, *,
             manifest: Manifest | None = None) -> Iterator[pa.RecordBatch]:
        """Record batches with offsets in ``[start, end)`` (``end`` = high watermark).

        Raises OffsetOutOfRange if ``start`` or ``end`` lies outside
        ``[log_start_offset, high_watermark]``. If vacuum removed a segment of
        an old snapshot meanwhile, continues from the newest one.
        """
        m = manifest or self.snapshot()
        end = m.next_offset if end is None else end
        # Checked here, not in the generator, so a bad range raises at the call.
        self._check_range(m, start, end)
        return self._read(m, start, end)

    def _read(self, m: Manifest, start: int, end: int) -> Iterator[pa.RecordBatch]:
        position = start
        while position < end:
            for info in m.segments_between(position, end):
                try:
                    table = self.read_segment(info, position, end, version=m.version)
                except MissingSegment:
                    latest = self.snapshot()
                    if any(s.file == info.file for s in latest.segments):
                        raise
                    m = latest  # superseded and vacuumed: re-plan on the newest snapshot
                    self._check_range(m, position, end)
                    break
                yield from table.to_batches()
                position = info.end_offset
            else:
                return

    def read_table(self, start: int, end: int | None = None, *,
                   manifest: Manifest | None = None) -> pa.Table:
        return pa.Table.from_batches(list(self.read(start, end, manifest=manifest)),
                                     schema=segment.SCHEMA)

    def offset_for_timestamp(self, timestamp_ms: int, *,
                             manifest: Manifest | None = None) -> int | None:
        """The first offset whose timestamp is at or after ``timestamp_ms``.

        None if no record is that new (Kafka's ``offsetsForTimes`` answers null).
        """
        m = manifest or self.snapshot()
        for info in m.segments:
            if info.max_ts < timestamp_ms:
                continue
            try:
                table = self.read_segment(info, version=m.version)
            except MissingSegment:
                latest = self.snapshot()
                if latest.version == m.version or any(s.file == info.file
                                                       for s in latest.segments):
                    raise
                # superseded and vacuumed since our snapshot: ask the newest one
                return self.offset_for_timestamp(timestamp_ms, manifest=latest)
            ts = table.column("timestamp").cast(pa.int64()).to_numpy() // 1000
            hits = np.flatnonzero(ts >= timestamp_ms)
            if len(hits):
                return max(int(table.column("offset")[int(hits[0])].as_py()), m.log_start_offset)
        return None

    # -- writes ------------------------------------------------------------
    def claim(self, leader: str) -> "PartitionWriter":
        """Become the partition's writer: bump the leader epoch, fencing the last one."""
        while True:
            m = self.snapshot()
            new = m.next(leader_epoch=m.leader_epoch + 1, leader=leader, committer="claim",
                         committed_ms=wall_clock_ms())
            if self._commit(new):
                return PartitionWriter(self, new)

    def writer(self) -> "PartitionWriter":
        """A writer at the current leader epoch, without claiming (fenced by any claim)."""
        return PartitionWriter(self, self.snapshot())

    def _commit(self, new: Manifest, topic_id: str | None = None, *,
                parent: Manifest | None = None) -> bool:
        """Create version ``new.version`` of the topic incarnation ``topic_id`` (default:
        the one this object follows now); False if that version exists. With
        ``parent`` (the version before) it may be stored as a delta of it."""
        won = self.store.put_exclusive(self._manifest_path(new.version, topic_id),
                                       _version_json(new, parent))
        if won and (topic_id is None or topic_id == self.topic_id):
            self._remember(new)
        return won

    def _commit_with_segment(self, m: Manifest, table: pa.Table, stats: dict,
                             topic_id: str | None, **changes: Any) -> Manifest | None:
        """Commit ``m`` plus a new segment of ``table`` (``stats`` as segment.stats) as
        the next version, segment and version in one file (``store.linked_file``: a
        store with links only); ``changes`` go to ``Manifest.next``. None if that
        version exists (nothing is left behind then)."""
        name = paths.new_segment_name(stats["base_offset"])
        encoded = segment.encode_chunks(table, compression=self.log.compression(self.topic))
        # A large segment's CRC-32 is taken on a helper thread while this one is in the
        # kernel copying the same bytes into the file (both only read them): that hides
        # ~0.05 ms of a 1.2 MB append. For a small one the handoff costs more than it hides.
        crc = workers.submit(encoded.checksum, kind="cpu") \
            if encoded.size >= BACKGROUND_CRC_BYTES and workers.PARALLEL else None
        with self.store.linked_file(f"{self.folder}/{name}") as f:
            f.writev(encoded.chunks)
            info = SegmentInfo(file=name, bytes=encoded.size,
                               crc32=encoded.checksum() if crc is None else crc.result(), **stats)
            new = m.next(segments=m.segments + (info,), **changes)
            f.writev(segment.trailer(_version_json(new, m), encoded))
            if not f.commit(self._manifest_path(new.version, topic_id)):
                return None
        if topic_id is None or topic_id == self.topic_id:
            self._remember(new)
        return new

    def _write_segment(self, table: pa.Table, stats: dict | None = None) -> SegmentInfo:
        """Store ``table`` as a new segment; ``stats`` (segment.stats) if already known."""
        buf, crc = segment.encode(table, compression=self.log.compression(self.topic))
        stats = stats or segment.stats(table)
        name = paths.new_segment_name(stats["base_offset"])
        self.store.put_new(f"{self.folder}/{name}", buf)  # unique name: never exists
        return SegmentInfo(file=name, bytes=buf.size, crc32=crc, **stats)

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
        job changed any of ``remove`` first.
        """
        if not remove:
            raise InvalidMaintenance(self.topic, self.partition,
                                     "replace_segments needs at least one segment to remove")
        if len({s.file for s in remove}) != len(remove):
            raise InvalidMaintenance(self.topic, self.partition,
                                     "the segments to remove must be consecutive segments "
                                     "of the newest manifest, each once")
        lo, hi = remove[0].base_offset, remove[-1].last_offset
        tables = []
        for t in add:
            if not t.num_rows:
                continue
            try:
                tables.append(t if t.schema == segment.SCHEMA else t.cast(segment.SCHEMA))
            except (ValueError, TypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise InvalidRecords(f"maintenance output must have the segment schema, "
                                     f"not {t.schema}") from None
        previous = lo - 1
        for t in tables:
            offsets = t.column("offset").to_numpy()
            if offsets[0] <= previous or offsets[-1] > hi or np.any(np.diff(offsets) <= 0):
                raise InvalidRecords(f"maintenance output offsets {offsets[0]}..{offsets[-1]} "
                                     f"must increase strictly inside the replaced range "
                                     f"{lo}..{hi}")
            previous = int(offsets[-1])
        infos: list[SegmentInfo] = []
        committing = False
        try:
            for i, t in enumerate(tables):
                info = self._write_segment(t)
                base = lo if i == 0 else infos[-1].last_offset + 1
                last = hi if i == len(tables) - 1 else info.last_offset
                infos.append(dataclasses.replace(info, base_offset=base, last_offset=last))
            names = {s.file for s in remove}
            while True:
                m = self.snapshot()
                where = [i for i, s in enumerate(m.segments) if s.file in names]
                if len(where) != len(remove):
                    raise MaintenanceConflict(self.topic, self.partition,
                                              "another job replaced some of its segments first")
                if where[-1] - where[0] + 1 != len(where):
                    # the new segments tile lo..hi: a kept segment inside would overlap them
                    raise InvalidMaintenance(self.topic, self.partition,
                                             "the segments to remove must be consecutive "
                                             "segments of the newest manifest")
                start = m.log_start_offset if log_start_offset is None \
                    else max(m.log_start_offset, log_start_offset)
                new = m.next(segments=segments_after_replace(m.segments, remove, infos),
                             removed=m.removed + tuple((s.file, now_ms) for s in remove),
                             log_start_offset=min(start, m.next_offset),
                             cleaned_offset=m.cleaned_offset if cleaned_offset is None
                             else max(m.cleaned_offset, cleaned_offset),
                             committer=committer, committed_ms=now_ms)
                committing = True
                won = self._commit(new)
                committing = False
                if won:
                    return new
        except BaseException:
            if not committing:
                self.store.delete(f"{self.folder}/{i.file}" for i in infos)
            raise

    # -- garbage -------------------------------------------------------------
    def unreferenced(self, now: int) -> list[UnreferencedFile]:
        """Files of this partition no current manifest names, with their age.

        ``superseded`` files were named until a commit removed them (age counts
        from that commit); ``orphan`` segments and ``temp`` files were left by a
        writer that crashed or lost a race; ``manifest`` versions are older than
        the retained window; ``foreign`` manifests belong to another incarnation
        of the topic (a writer that outlived a delete and re-create).
        """
        listed = self.store.list(self.folder)
        m = self.snapshot()  # after listing: a file committed meanwhile is named here
        named = {s.file for s in m.segments}
        removed_at = dict(m.removed)
        out = []
        for f in listed:
            if f.name in named:
                continue
            if f.name in removed_at:
                out.append(UnreferencedFile(f.name, f.size, now - removed_at[f.name], "superseded"))
            elif f.name.startswith(TMP_PREFIX):
                out.append(UnreferencedFile(f.name, f.size, now - f.mtime_ms, "temp"))
            elif paths.is_segment_name(f.name):
                out.append(UnreferencedFile(f.name, f.size, now - f.mtime_ms, "orphan"))
        # from a whole version on: a kept delta must stay readable, and deltas reach back
        # at most to the last version that is a multiple of CHECKPOINT_INTERVAL (manifest.py)
        keep_from = m.version - self.log.manifest_versions_retained
        keep_from -= keep_from % CHECKPOINT_INTERVAL
        for f in self.store.list(self.manifest_folder):
            v = paths.manifest_version(f.name, self.topic_id)
            if v is not None:
                reason = "manifest" if v < keep_from else None
            elif f.name.startswith(TMP_PREFIX):
                reason = "temp"
            else:
                reason = "foreign" if paths.any_manifest_version(f.name) is not None else None
            if reason is not None:
                out.append(UnreferencedFile(f"{paths.MANIFEST_FOLDER}/{f.name}", f.size,
                                            now - f.mtime_ms, reason))
        return out

    def orphans(self, now: int | None = None) -> list[UnreferencedFile]:
        """Files left by crashed writers (unnamed segments, temp files) and by writers of
        an earlier incarnation of the topic (foreign manifests)."""
        now = wall_clock_ms() if now is None else now
        return [f for f in self.unreferenced(now) if f.reason in ("orphan", "temp", "foreign")]

    def _delete_version_file(self, path: str) -> None:
        """Delete an old manifest version; if its file is also a live segment (an append's,
        see ``_commit_with_segment``), the segment keeps its bytes and loses the carried
        manifest."""
        try:
            _tail, size, extent = self._version_tail(path)
        except FileNotFoundError:
            return
        if extent is None or extent > size:  # none, or damaged: leave the bytes alone
            self.store.delete([path])
        else:
            self.store.delete_linked(path, size - extent)

    def vacuum(self, *, now_ms: int, delay_ms: int, dry_run: bool = False) -> VacuumReport:
        """Delete unreferenced files older than ``delay_ms``; old manifests go oldest first.

        Superseded files are then dropped from the manifest's ``removed`` list.
        ``dry_run`` reports without deleting.
        """
        files = self.unreferenced(now_ms)
        due = [f for f in files if f.age_ms >= delay_ms or f.reason == "manifest"]
        kept = [f for f in files if f not in due]
        if dry_run or not due:
            return VacuumReport(tuple(due), tuple(kept))
        due.sort(key=lambda f: (f.reason != "manifest", f.name))  # manifests ascending
        versions = [f"{self.folder}/{f.name}" for f in due if f.reason == "manifest"]
        if self.store.supports_links:
            for path in versions:
                self._delete_version_file(path)
        else:
            self.store.delete(versions)
        self.store.delete(f"{self.folder}/{f.name}" for f in due if f.reason != "manifest")
        gone = {f.name for f in due if f.reason == "superseded"}
        while gone:
            m = self.snapshot()
            if not any(name in gone for name, _ in m.removed):
                break
            new = m.next(removed=tuple(r for r in m.removed if r[0] not in gone),
                         committer="vacuum", committed_ms=now_ms)
            if self._commit(new):
                break
        return VacuumReport(tuple(due), tuple(kept))


class PartitionWriter:
    """Appends to one partition at one leader epoch until fenced."""

    def __init__(self, partition: PartitionLog, manifest: Manifest):
        self.partition = partition
        self.epoch = manifest.leader_epoch
        #: the topic incarnation this writer was made for: it commits under no other
        self.topic_id = partition.topic_id
        self.fenced: Fenced | None = None

    def __repr__(self) -> str:
        return f"PartitionWriter({self.partition.topic}-{self.partition.partition}, epoch {self.epoch})"

    def _check_epoch(self, m: Manifest) -> None:
        current_id = self.partition.topic_id
        if current_id != self.topic_id:
            self.fenced = TopicRecreated(m.topic, m.partition, self.topic_id, current_id)
        elif m.leader_epoch != self.epoch:
            self.fenced = Fenced(m.topic, m.partition, self.epoch, m.leader_epoch)
        if self.fenced is not None:
            raise self.fenced

    def append(self, records: pa.Table | pa.RecordBatch, *, now_ms: int | None = None,
               producer_batches: Sequence[tuple[ProducerBatch, int]] = ()) -> AppendResult:
        """Commit ``records`` as one new segment; return their offsets.

        ``producer_batches`` lists idempotent batches in the records as
        ``(batch, first_row)``; their sequences are checked against the
        committed state at commit time. Raises Fenced (this writer is done),
        InvalidRecords, InvalidProducerEpoch or OutOfOrderSequence (a duplicate
        here means the caller skipped its own duplicate check).
        """
        p = self.partition
        ts = wall_clock_ms() if now_ms is None else now_ms
        table = segment.normalize(records, default_ts_ms=ts,
                                  log_append_time=p.log.log_append_time(p.topic))
        if table.num_rows == 0:
            raise InvalidRecords("nothing to append: no records")
        m = p.snapshot(refresh=False)
        # With links, the segment is written by the commit itself, in the version's file
        # (one file creation per append, not two); otherwise it is written first.
        linked = p.store.supports_links
        info: SegmentInfo | None = None
        written_ms = 0
        committing = False
        try:
            while True:
                self._check_epoch(m)
                base = m.next_offset
                # Checked one after the other: a flush may hold several batches of one producer.
                producers = m.producers
                for batch, row in producer_batches:
                    entry = producers.get(batch.producer_id)
                    if check_sequence(entry, batch, p.partition) is not None:
                        raise OutOfOrderSequence(batch.producer_id, p.partition,
                                                 entry.last_sequence + 1, batch.first_sequence)
                    producers = dataclasses.replace(m, producers=producers).with_producers(
                        [(batch, base + row)])
                stats = {"base_offset": base, "last_offset": base + table.num_rows - 1,
                         "count": table.num_rows, "min_ts": table.min_ts, "max_ts": table.max_ts}
                changes = {"next_offset": base + table.num_rows, "producers": producers,
                           "committer": "append", "committed_ms": ts}
                if linked:
                    new = p._commit_with_segment(m, segment.with_offsets(table, base), stats,
                                                 self.topic_id, **changes)
                else:
                    # Rewrite when rebased past someone else's records (renumber), and when
                    # the file has waited so long that vacuum may judge it an orphan
                    # (retries under heavy contention): vacuum deletes unnamed files older
                    # than file.delete.delay.ms, so never commit one older than half of it.
                    if info is None or info.base_offset != base or wall_clock_ms() - written_ms \
                            > p.log.file_delete_delay_ms(p.topic) // 2:
                        if info is not None:
                            p.store.delete([f"{p.folder}/{info.file}"])
                            info = None
                        written_ms = wall_clock_ms()
                        info = p._write_segment(segment.with_offsets(table, base), stats)
                    new = m.next(segments=m.segments + (info,), **changes)
                    committing = True  # if the commit call fails, the outcome is unknown
                    new = new if p._commit(new, self.topic_id, parent=m) else None
                    committing = False
                if new is not None:
                    return AppendResult(base, base + table.num_rows - 1, new.version,
                                        tuple((base + r, base + r + b.count - 1)
                                              for b, r in producer_batches))
                m = p.snapshot()
        except BaseException:
            # A segment no manifest names is deleted at once; after a commit call that
            # failed we cannot know, so the file stays for vacuum to judge.
            if info is not None and not committing:
                p.store.delete([f"{p.folder}/{info.file}"])
            raise
