"""Garbage of one partition: files no current manifest names, and deleting them.

``superseded`` segments were named until a commit removed them (their age
counts from that commit, kept in the manifest's ``removed`` list; a segment
carried by a version file is cut to the version's JSON while that version is in
the retained window and deleted once it is older, and a version file carrying a
live segment is kept whatever its age: ``segment_commit.CarriedAppend``); ``orphan``
segments and ``temp`` files were left by a writer that crashed or lost a race
(age from the file's mtime); ``manifest`` versions are older than the retained
window; ``foreign`` manifests belong to another incarnation of the topic. The
rules that make deleting them safe against live writers and readers are in
commit.py.
"""

from __future__ import annotations

import dataclasses

from log_layout import commit, paths, segment, versions, workers
from log_layout.manifest import Manifest
from log_layout.store import TMP_PREFIX
from log_layout.versions import Versions


@dataclasses.dataclass(frozen=True)
class UnreferencedFile:
    """A file in a partition folder that the newest manifest does not name."""

    name: str
    size: int
    age_ms: int
    reason: str  # "superseded" | "orphan" | "temp" | "manifest" | "foreign"
    #: a superseded segment carried by a version file still in the retained window:
    #: the file is cut to its version's JSON rather than deleted (see cut_to_version)
    cut: bool = False


@dataclasses.dataclass(frozen=True)
class VacuumReport:
    deleted: tuple[UnreferencedFile, ...]
    kept: tuple[UnreferencedFile, ...]

    @property
    def deleted_bytes(self) -> int:
        return sum(f.size for f in self.deleted)


def unreferenced(v: Versions, now: int, *, retained: int) -> list[UnreferencedFile]:
    """Files of this partition no current manifest names, with their age (see the
    module docstring); manifest versions before the newest ``retained`` count."""
    listed = v.store.list(v.folder)
    m = v.snapshot()  # after listing: a file committed meanwhile is named here
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
    keep_from = m.version - retained
    keep_from -= keep_from % versions.CHECKPOINT_INTERVAL
    for f in v.store.list(v.manifest_folder):
        name, age = paths.carried_segment_file(f.name), now - f.mtime_ms
        version = paths.manifest_version(f.name, v.topic_id)
        if version is not None:
            # A version file that carries a live segment stays (segment_commit); one whose
            # segment was removed goes as a superseded segment: deleted once an old
            # version, else cut to its version (the versions kept must have no gaps).
            reason = None if name in named else "superseded" if name in removed_at \
                else "manifest" if version < keep_from else None
            if reason == "superseded":
                out.append(UnreferencedFile(name, f.size, now - removed_at[name], reason,
                                            cut=version >= keep_from))
                continue
        elif f.name.startswith(TMP_PREFIX):
            reason = "temp"
        else:
            reason = "foreign" if paths.any_manifest_version(f.name) is not None else None
        if reason is not None:
            out.append(UnreferencedFile(name, f.size, age, reason))
    return out


def orphans(v: Versions, now: int | None = None, *, retained: int) -> list[UnreferencedFile]:
    """Files left by crashed writers (unnamed segments, temp files) and by writers of
    an earlier incarnation of the topic (foreign manifests)."""
    now = commit.wall_clock_ms() if now is None else now
    return [f for f in unreferenced(v, now, retained=retained)
            if f.reason in ("orphan", "temp", "foreign")]


def delete_version_file(v: Versions, path: str) -> None:
    """Delete an old manifest version; if its file is also a live segment (an append's,
    see ``segment_commit.LinkedAppend``), the segment keeps its bytes and loses the
    carried manifest."""
    try:
        _tail, size, extent = v.tail(path)
    except FileNotFoundError:
        return
    if extent is None or extent > size:  # none, or damaged: leave the bytes alone
        v.store.delete([path])
    else:
        v.store.delete_linked(path, size - extent)


def cut_to_version(v: Versions, path: str) -> None:
    """Replace a version file that carries a segment by its version's JSON alone (an
    atomic replace): the segment's bytes go, the version stays readable. A reader of the
    segment then finds it missing (``reader.read_segment``)."""
    try:
        tail, _size, extent = v.tail(path)
    except FileNotFoundError:
        return
    if extent is not None:
        v.store.put_replace(path, segment.read_trailer(tail))


def vacuum(v: Versions, *, now_ms: int, delay_ms: int, retained: int,
           dry_run: bool = False) -> VacuumReport:
    """Delete unreferenced files older than ``delay_ms``; old manifests go oldest first.

    Superseded files are then dropped from the manifest's ``removed`` list.
    ``dry_run`` reports without deleting.
    """
    files = unreferenced(v, now_ms, retained=retained)
    due = [f for f in files if f.age_ms >= delay_ms or f.reason == "manifest"]
    kept = [f for f in files if f not in due]
    # a shared hot object is not this partition's to delete (hot_sweep deletes it once
    # no partition names it): past the delay it only leaves the removed list
    hot_gone = {name for name, at in v.snapshot(refresh=False).removed
                if paths.is_hot_file(name) and now_ms - at >= delay_ms}
    if dry_run or (not due and not hot_gone):
        return VacuumReport(tuple(due), tuple(kept))
    due.sort(key=lambda f: (f.reason != "manifest", f.name))  # manifests ascending
    old_versions = [f"{v.folder}/{f.name}" for f in due if f.reason == "manifest"]
    if v.store.supports_links:
        for path in old_versions:
            delete_version_file(v, path)
    else:
        v.store.delete(old_versions)
    # The rest in any order: on a remote store many at once (a WebHDFS delete is a
    # NameNode round trip, a cut a read and a replace, ~15 ms on HDFS).
    rest = [f for f in due if f.reason != "manifest"]
    if v.store.supports_links:
        v.store.delete(f"{v.folder}/{f.name}" for f in rest)
    else:
        _at_once([(cut_to_version, v, f"{v.folder}/{f.name}") if f.cut else
                  (v.store.delete, [f"{v.folder}/{f.name}"]) for f in rest])
    gone = {f.name for f in due if f.reason == "superseded"} | hot_gone
    if gone:
        commit.run(v.snapshot, lambda m: _forget_removed(m, gone, now_ms), v.attempt)
    return VacuumReport(tuple(due), tuple(kept))


def _at_once(calls: list[tuple]) -> None:
    """Run each ``(fn, *args)`` on the remote-store helper threads; raise the first error
    once all have ended."""
    futures = [workers.submit(*call, kind="remote") for call in calls]
    errors = [e for f in futures if (e := f.exception()) is not None]
    if errors:
        raise errors[0]


def _forget_removed(m: Manifest, gone: set[str], now_ms: int) -> Manifest | None:
    """The next version without ``gone`` in its ``removed`` list; None if none is there."""
    if not any(name in gone for name, _ in m.removed):
        return None
    return m.next(removed=tuple(r for r in m.removed if r[0] not in gone),
                  committer="vacuum", committed_ms=now_ms)
