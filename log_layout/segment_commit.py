"""How a new segment is written and committed: the seam between a commit and a store.

Two ways, one small interface (an object made per append, used as a context
manager, whose ``attempt(m, plan)`` is ``commit.run``'s attempt):

* :class:`LinkedAppend` (stores with links: local): one file with two names. The
  segment, then the version's JSON as a trailer, under the segment's unique name;
  a hard link to the version's name commits both (``store.linked_file``). A lost
  race deletes the file at once; nothing is ever left but a crash's orphan.
* :class:`CarriedAppend` (every other store: S3, HDFS, memory): one file with one
  name, the version's. The segment, then the version's JSON as a trailer, put
  exclusively under the version's name (``store.put_exclusive``: S3's conditional
  PUT, HDFS's temp file and rename); the manifest names the segment by that file
  (``paths.carried_segment_file``). Vacuum keeps such a version file while its
  segment lives (see vacuum.py). Checkpoint versions (multiples of
  ``CHECKPOINT_INTERVAL``) are never carried: a reader trusts that those are
  deleted oldest first (``Versions._follow``), so they take the plain way.
* :class:`PlainAppend` (checkpoint versions of those stores): two files. The
  segment is put under a unique name (``store.put_new``), then the version is put
  exclusively. Where that is a write then a rename (HDFS,
  ``store.stages_exclusive``), the version's file is written beside the segment's
  and renamed once both are complete. The segment is kept across lost races and
  written again only when rebased to other offsets or older than half of
  ``file.delete.delay.ms`` (vacuum judges unnamed files by age: see commit.py).

:class:`SegmentPuts` is the plain commit's bookkeeping, also used by maintenance
swaps (which put every new segment before their version). Leaving either commit
by an error deletes the segments it wrote, except after a failed try of the
version itself: its outcome is unknown, so the files stay for vacuum to judge.

A ``plan`` is ``(stats, changes)``: the new segment's ``segment.stats`` (offsets
from the snapshot's ``next_offset``) and the ``Manifest.next`` changes besides
its segments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from log_layout import paths, segment, workers
from log_layout.commit import wall_clock_ms
from log_layout.manifest import CHECKPOINT_INTERVAL, Manifest, SegmentInfo
from log_layout.versions import StagedVersion, Versions, version_json

if TYPE_CHECKING:
    from conf.topic import TopicConfig

#: segments at least this big have their CRC-32 taken on a helper thread, if this
#: process may run on more than one CPU (see LinkedAppend.attempt)
BACKGROUND_CRC_BYTES = 256 << 10

Plan = tuple[dict, dict]


class SegmentPuts:
    """Segments put under unique names before the version that names them (the plain
    two-file commit). As a context manager: an error deletes the segments put, unless
    it came from the version's put (see ``try_version``)."""

    def __init__(self, versions: Versions, compression: str | None):
        self.versions, self.compression = versions, compression
        self.written: list[SegmentInfo] = []
        self._outcome_unknown = False

    def put(self, table: pa.Table, stats: dict | None = None) -> SegmentInfo:
        """Store ``table`` as a new segment; ``stats`` (segment.stats) if already known."""
        return self.store(*self.encode(table, stats))

    def encode(self, table: pa.Table, stats: dict | None = None) -> tuple[SegmentInfo, Any]:
        """``table`` as a new segment's SegmentInfo and bytes, not yet stored."""
        buf, crc = segment.encode(table, compression=self.compression)
        stats = stats or segment.stats(table)
        name = paths.new_segment_name(stats["base_offset"])
        return SegmentInfo(file=name, bytes=buf.size, crc32=crc, **stats), buf

    def store(self, info: SegmentInfo, buf: Any) -> SegmentInfo:
        """Store an encoded segment under its unique name."""
        v = self.versions
        v.store.put_new(f"{v.folder}/{info.file}", buf)  # unique name: never exists
        self.written.append(info)
        return info

    def drop(self, info: SegmentInfo) -> None:
        """Delete a segment put here that no version will name."""
        self.versions.store.delete([f"{self.versions.folder}/{info.file}"])
        self.written.remove(info)

    def try_version(self, new: Manifest, parent: Manifest | None = None, *,
                    topic_id: str | None = None) -> bool:
        """``Versions.try_commit``; if it raises, the put segments are kept (a commit
        call that failed may have won: we cannot know)."""
        return self.commit_staged(self.versions.stage(new, parent, topic_id=topic_id))

    def commit_staged(self, staged: StagedVersion) -> bool:
        """``staged.commit()``, keeping the put segments if it raises (as ``try_version``)."""
        self._outcome_unknown = True  # if the commit call fails, the outcome is unknown
        won = staged.commit()
        self._outcome_unknown = False
        return won

    def __enter__(self) -> "SegmentPuts":
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        # A segment no manifest names is deleted at once; after a commit call that
        # failed we cannot know, so the file stays for vacuum to judge.
        if exc_type is not None and self.written and not self._outcome_unknown:
            v = self.versions
            v.store.delete(f"{v.folder}/{i.file}" for i in self.written)


class PlainAppend:
    """An append as two files: the segment put first, then the version exclusively."""

    def __init__(self, versions: Versions, records: segment.Records, config: "TopicConfig",
                 topic_id: str):
        self.records, self.topic_id = records, topic_id
        self.delay_ms = config.file_delete_delay_ms
        self.puts = SegmentPuts(versions, config.compression)
        self.info: SegmentInfo | None = None
        self.written_ms = 0

    def attempt(self, m: Manifest, plan: Plan) -> Manifest | None:
        stats, changes = plan
        base, info = stats["base_offset"], self.info
        # Rewrite when rebased past someone else's records (renumber), and when the file
        # has waited so long that vacuum may judge it an orphan (retries under heavy
        # contention): vacuum deletes unnamed files older than file.delete.delay.ms, so
        # never commit one older than half of it.
        if info is None or info.base_offset != base \
                or wall_clock_ms() - self.written_ms > self.delay_ms // 2:
            self.drop()
            self.written_ms = wall_clock_ms()
            info, buf = self.puts.encode(segment.with_offsets(self.records, base), stats)
            new = m.next(segments=m.segments + (info,), **changes)
            if self.puts.versions.store.stages_exclusive:
                return new if self._beside_version(info, buf, new, m) else None
            self.info = self.puts.store(info, buf)
        new = m.next(segments=m.segments + (info,), **changes)
        return new if self.puts.try_version(new, m, topic_id=self.topic_id) else None

    def _beside_version(self, info: SegmentInfo, buf: Any, new: Manifest, m: Manifest) -> bool:
        """Store the segment on a helper thread while this one stages the version (on
        HDFS both are file writes of similar cost), then commit the version: never
        before the segment is complete. An error in either discards the staged version;
        a segment stored is deleted by ``SegmentPuts`` on the way out."""
        segment_put = workers.submit(self.puts.store, info, buf, kind="remote")
        staged = None
        try:
            staged = self.puts.versions.stage(new, m, topic_id=self.topic_id)
        finally:
            try:
                segment_put.result()
            except BaseException:
                if staged is not None:
                    staged.discard()
                raise
        self.info = info
        return self.puts.commit_staged(staged)

    def drop(self) -> None:
        """Delete the segment an earlier try put, if any (the append went another way)."""
        if self.info is not None:
            self.puts.drop(self.info)
            self.info = None

    def __enter__(self) -> "PlainAppend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.puts.__exit__(*exc)


class LinkedAppend:
    """An append as one file with two names: the segment carrying its version."""

    def __init__(self, versions: Versions, records: segment.Records, config: "TopicConfig",
                 topic_id: str):
        self.versions, self.records, self.topic_id = versions, records, topic_id
        self.compression = config.compression

    def attempt(self, m: Manifest, plan: Plan) -> Manifest | None:
        """Commit ``m`` plus a new segment of the records (offsets from the plan) as the
        next version, segment and version in one file. None if that version exists
        (nothing is left behind then)."""
        stats, changes = plan
        v = self.versions
        name = paths.new_segment_name(stats["base_offset"])
        encoded = segment.encode_append(self.records, stats["base_offset"],
                                        compression=self.compression)
        # A large segment's CRC-32 is taken on a helper thread while this one is in the
        # kernel copying the same bytes into the file (both only read them): that hides
        # ~0.05 ms of a 1.2 MB append. For a small one the handoff costs more than it hides.
        crc = workers.submit(encoded.checksum, kind="cpu") \
            if encoded.size >= BACKGROUND_CRC_BYTES and workers.PARALLEL else None
        with v.store.linked_file(f"{v.folder}/{name}") as f:  # deleted unless committed
            f.writev(encoded.chunks)
            info = SegmentInfo(file=name, bytes=encoded.size,
                               crc32=encoded.checksum() if crc is None else crc.result(), **stats)
            new = m.next(segments=m.segments + (info,), **changes)
            f.writev(segment.trailer(version_json(new, m, adds_only=True), encoded))
            if not f.commit(v.path(new.version, self.topic_id)):
                return None
        v.remember(new, self.topic_id)
        return new

    def __enter__(self) -> "LinkedAppend":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass  # each attempt's file deletes itself unless committed


class CarriedAppend:
    """An append as one file under the version's name: the segment carrying its version
    (a checkpoint version: two files, as :class:`PlainAppend`)."""

    def __init__(self, versions: Versions, records: segment.Records, config: "TopicConfig",
                 topic_id: str):
        self.versions, self.records, self.topic_id = versions, records, topic_id
        self.compression = config.compression
        self.plain = PlainAppend(versions, records, config, topic_id)

    def attempt(self, m: Manifest, plan: Plan) -> Manifest | None:
        """Commit ``m`` plus a new segment of the records (offsets from the plan) as the
        next version, in one file under the version's name. None if that version exists
        (nothing is left behind then: a lost exclusive put writes nothing)."""
        if (m.version + 1) % CHECKPOINT_INTERVAL == 0:
            return self.plain.attempt(m, plan)
        self.plain.drop()  # an earlier try's, at a checkpoint this try is not
        stats, changes = plan
        v = self.versions
        name = paths.manifest_name(m.version + 1, self.topic_id)
        encoded = segment.encode_append(self.records, stats["base_offset"],
                                        compression=self.compression)
        info = SegmentInfo(file=paths.carried_segment_file(name), bytes=encoded.size,
                           crc32=encoded.checksum(), **stats)
        new = m.next(segments=m.segments + (info,), **changes)
        data = b"".join([*encoded.chunks,
                         *segment.trailer(version_json(new, m, adds_only=True), encoded)])
        if not v.store.put_exclusive(f"{v.manifest_folder}/{name}", data):
            return None
        v.remember(new, self.topic_id)
        return new

    def __enter__(self) -> "CarriedAppend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.plain.__exit__(*exc)


def append_commit(store: Any) -> type[LinkedAppend] | type[CarriedAppend]:
    """How appends to ``store`` commit: in one linked file where the store has links,
    else in one file under the version's name."""
    return LinkedAppend if store.supports_links else CarriedAppend
