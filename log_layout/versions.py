"""A partition's manifest versions: where they are, how they are read, which is newest.

Version N of a partition is the file ``_log/<N:020d>-<topic_id>.json`` (``paths``):
JSON text, or an append's segment carrying the JSON in a trailer (``segment``),
whole or a delta of version N-1 (``manifest``). :class:`Versions` reads them --
from the file's end, as far as a trailer says -- applies deltas to a whole
version, finds the newest (following a re-created topic for readers), keeps the
newest it has seen (the snapshot cache) and creates the next one exclusively
(:meth:`Versions.try_commit`). The protocol those commits follow is in
``commit.py``. A version that names a hot journal is followed by that journal's
entries for the partition: :meth:`Versions.snapshot` merges them (``hot_state``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from log_layout import hot_state, paths, segment
from log_layout.errors import CorruptManifest
from log_layout.hot_journal import Journals
from log_layout.manifest import CHECKPOINT_INTERVAL, Manifest

#: bytes first read from the end of a manifest version file: all of a JSON manifest of a
#: few hundred segments, or the trailer of an append's file (see Versions.read_file)
MANIFEST_TAIL_BYTES = 64 << 10
#: newer versions a snapshot refresh reads one by one before it lists the folder instead
#: (see Versions._follow)
FOLLOW_MAX = 8


def version_json(new: Manifest, parent: Manifest | None, *, adds_only: bool = False) -> bytes:
    """``new``'s JSON: a delta of ``parent`` when it may be one (it only adds segments
    and its version is not a checkpoint, see manifest.py), else whole. ``adds_only``:
    the caller built ``new`` from ``parent`` by adding segments (an append), so the
    check, O(segments), is skipped."""
    # a parent that follows a hot journal is a merge of its stored version and the
    # journal's entries (hot_state): a delta of it would drop what the journal added
    delta = parent is not None and new.version % CHECKPOINT_INTERVAL != 0 \
        and parent.hot_journal is None and (adds_only or new.is_delta_of(parent))
    return new.to_json(delta_of=parent if delta else None)


def version_path(topic: str, partition: int, version: int, topic_id: str) -> str:
    """The store path of version ``version`` of incarnation ``topic_id`` of a partition."""
    return f"{paths.manifest_folder(topic, partition)}/{paths.manifest_name(version, topic_id)}"


def create_first_version(store, topic: str, partition: int, topic_id: str,
                         committed_ms: int) -> bool:
    """Create a new partition's version 0, empty; False if it exists (a crashed create
    left it, and it is just as good)."""
    m = Manifest(topic=topic, partition=partition, version=0, committed_ms=committed_ms)
    return store.put_exclusive(version_path(topic, partition, 0, topic_id),
                               version_json(m, None))


class Versions:
    """The manifest versions of one partition, and the newest one seen. Thread-safe.

    ``current_topic_id()`` asks the topic's metadata for its id now (raising
    UnknownTopic once deleted): a reader that finds no version of its incarnation
    follows a re-created topic (writers never do: they commit under their own id).
    """

    def __init__(self, store, topic: str, partition: int, topic_id: str,
                 current_topic_id: Callable[[], str], journals: Journals | None = None):
        self.store, self.topic, self.partition, self.topic_id = store, topic, partition, topic_id
        #: the hot journals' entries this process has read (shared by its partitions)
        self.journals = journals if journals is not None else Journals(store)
        #: the last merge of a hot partition: (the _log version merged, the result)
        self._merged: tuple[Manifest, Manifest] | None = None
        self.folder = paths.partition_folder(topic, partition)
        self.manifest_folder = paths.manifest_folder(topic, partition)
        self._current_topic_id = current_topic_id
        self._latest: Manifest | None = None
        self._lock = threading.Lock()

    def path(self, version: int, topic_id: str | None = None) -> str:
        """The store path of version ``version`` of incarnation ``topic_id`` (default:
        the one followed now)."""
        # the folder is kept, not rebuilt: this runs several times per append
        name = paths.manifest_name(version, self.topic_id if topic_id is None else topic_id)
        return f"{self.manifest_folder}/{name}"

    # -- reading one version -------------------------------------------------
    def tail(self, path: str) -> tuple[bytes, int, int | None]:
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

    def read_file(self, path: str) -> bytes:
        """The bytes of a manifest version file that hold the manifest: all of a JSON
        one, the end of a segment that carries one."""
        tail, size, extent = self.tail(path)
        return self.store.read(path) if extent is None and len(tail) < size else tail

    def read(self, version: int) -> tuple[Manifest, int | None]:
        """Version ``version`` as stored: a whole manifest, or a delta and the version
        it is a delta of (see ``Manifest.from_file``). FileNotFoundError if absent,
        CorruptManifest if it does not parse or is not this partition's version."""
        path = self.path(version)
        try:
            m, delta_of = Manifest.from_file(self.read_file(path), path=path)
        except CorruptManifest:
            if not self.store.exists(path):  # vacuumed while we read it (and its trailer cut)
                raise FileNotFoundError(path) from None
            raise
        if (m.version, m.topic, m.partition) != (version, self.topic, self.partition):
            raise CorruptManifest(path, f"it says it is version {m.version} of "
                                  f"{m.topic}-{m.partition}")
        return m, delta_of

    def load(self, version: int) -> Manifest:
        """Version ``version`` as a whole snapshot: a delta is applied to the version
        before it, the cached snapshot if that is the one, else read back to the last
        whole version (at most CHECKPOINT_INTERVAL - 1 deltas: see manifest.py).
        FileNotFoundError if a version needed was vacuumed meanwhile."""
        deltas: list[Manifest] = []
        while True:
            m, delta_of = self.read(version)
            if delta_of is None:
                break
            deltas.append(m)
            if len(deltas) >= CHECKPOINT_INTERVAL:
                raise CorruptManifest(self.path(m.version),
                                      f"more than {CHECKPOINT_INTERVAL - 1} deltas in a row")
            version = delta_of
            with self._lock:
                cached = self._latest
            if cached is not None and cached.version == version:
                m = cached
                break
        for delta in reversed(deltas):
            m = delta.on_top_of(m, path=self.path(delta.version))
        return m

    # -- the newest version ----------------------------------------------------
    def latest_version(self) -> int:
        """The highest version number of the incarnation followed (listed)."""
        while True:
            topic_id = self.topic_id
            versions = [v for f in self.store.list(self.manifest_folder)
                        if (v := paths.manifest_version(f.name, topic_id)) is not None]
            if versions:
                return max(versions)
            # None of ours: the topic may have been deleted (UnknownTopic) or created
            # again; a reader follows the new incarnation (writers never do: see
            # PartitionWriter), anything else is a broken partition.
            current = self._current_topic_id()
            if current == topic_id:
                raise CorruptManifest(self.manifest_folder, "the partition has no manifest")
            with self._lock:
                self.topic_id, self._latest = current, None

    def snapshot(self, *, refresh: bool = True) -> Manifest:
        """The newest committed manifest: the newest ``_log`` version and, if it names a
        hot journal, the journal's entries for this partition after it (``hot_state``).
        ``refresh=False`` may return a cached one (and reads no journal entry that is
        not cached)."""
        cold = self.cold_snapshot(refresh=refresh)
        if cold.hot_journal is None:
            return cold
        with self._lock:
            done = self._merged
        start = done[1] if done is not None and done[0] is cold else None
        merged = hot_state.merge(cold, self.journals, self.topic_id, refresh=refresh,
                                 start=start)
        with self._lock:
            if self._latest is cold:
                self._merged = (cold, merged)
        return merged

    def cold_snapshot(self, *, refresh: bool = True) -> Manifest:
        """The newest ``_log`` version, without the hot journal entries after it."""
        with self._lock:
            cached = self._latest
        if cached is not None and not refresh:
            return cached
        if cached is not None:
            newest = self._follow(cached)
            if newest is not None:
                return newest
        while True:
            version = self.latest_version()
            try:
                latest = self.load(version)
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

    def _follow(self, cached: Manifest) -> Manifest | None:
        """The newest version, reached from ``cached`` by reading the versions after it
        one by one; None if that takes more than FOLLOW_MAX reads or ``cached`` is gone
        (vacuumed, or the topic re-created): then the caller lists the folder.

        A reader that keeps up (a consumer polling a busy partition) finds a version or
        two more at each poll; a listing costs as much as the folder is long (a stat
        per file locally, a LIST page per 1,000 names on S3): listing at every new
        version made a direct consumer's latency grow with the folder, to ~200 ms.
        """
        m = cached
        for _ in range(FOLLOW_MAX + 1):
            if not self.store.exists(self.path(m.version + 1)):
                # Old versions are deleted oldest first, so if the checkpoint version at
                # or before ours is still there and the next is not, ours is the newest.
                # (Not ours itself: a version file carrying a live segment outlives the
                # versions after it, see vacuum.py; a checkpoint never carries one.)
                checkpoint = m.version - m.version % CHECKPOINT_INTERVAL
                return m if self.store.exists(self.path(checkpoint)) else None
            if m.version - cached.version >= FOLLOW_MAX:
                return None
            try:
                m = self.load(m.version + 1)  # a delta applies to m, the cached snapshot
            except FileNotFoundError:  # vacuumed meanwhile: so many versions, list them
                return None
            self.remember(m)
        return None

    def remember(self, manifest: Manifest, topic_id: str | None = None) -> None:
        """Cache ``manifest``, just committed for incarnation ``topic_id`` (default:
        the one followed), as the newest if it is newer and of the incarnation followed."""
        if topic_id is not None and topic_id != self.topic_id:
            return
        with self._lock:
            if self._latest is None or manifest.version > self._latest.version:
                self._latest = manifest

    # -- the next version ----------------------------------------------------
    def try_commit(self, new: Manifest, parent: Manifest | None = None, *,
                   topic_id: str | None = None) -> bool:
        """Create version ``new.version`` of the topic incarnation ``topic_id`` (default:
        the one followed now) exclusively; False if that version exists. With ``parent``
        (the version before) it may be stored as a delta of it."""
        return self.stage(new, parent, topic_id=topic_id).commit()

    def stage(self, new: Manifest, parent: Manifest | None = None, *,
              topic_id: str | None = None) -> "StagedVersion":
        """``try_commit`` in two steps: the version staged now (``Store.stage_exclusive``:
        on HDFS its file is written), committed by ``commit()``."""
        staged = self.store.stage_exclusive(self.path(new.version, topic_id),
                                            version_json(new, parent))
        return StagedVersion(self, new, topic_id, staged)

    def attempt(self, parent: Manifest, new: Manifest) -> Manifest | None:
        """``new``, stored whole as the version after ``parent``, if it wins; None if
        another commit took that version (``commit.run``'s ``attempt`` for a commit
        that writes no segment: claims, maintenance, vacuum)."""
        return new if self.try_commit(new) else None


class StagedVersion:
    """A version staged by ``Versions.stage``: ``commit()`` is True if it won (and
    then it is remembered as the newest), ``discard()`` drops it."""

    def __init__(self, versions: Versions, new: Manifest, topic_id: str | None, staged: Any):
        self.versions, self.new, self.topic_id, self.staged = versions, new, topic_id, staged

    def commit(self) -> bool:
        won = self.staged.commit()
        if won:
            self.versions.remember(self.new, self.topic_id)
        return won

    def discard(self) -> None:
        self.staged.discard()
