"""The hot tier's garbage: shared objects and journal entries nothing reads any more.

(The format is ``hot_journal``'s docstring.) Shared objects belong to many
partitions, so no partition's vacuum deletes one (``vacuum`` only drops it from its
``removed`` list). :func:`sweep` runs over the whole log, after roll-up:

* an **object** is kept while the newest state of any partition (``_log`` merged
  with its journal) names it, as a segment or in ``removed``; otherwise it goes once
  older than ``delay_ms``: rolled up everywhere, of a deleted topic, or uploaded by
  a writer that died before its entry (never committed, never served);
* an **entry** is kept from the smallest ``hot_from`` of the partitions whose
  ``_log`` follows its journal (a reader or a claimant reads from there); the ones
  before it, and every entry of a journal no partition follows, go once older than
  ``delay_ms`` (a reader that planned on an older ``_log`` version may still be
  reading them; it re-reads ``_log`` when one is gone) -- but never an entry at or
  after the newest one the journal's own writer made (not a seal): a writer frozen
  since then tries the numbers after it, and must find the seals there, not a gap it
  could take and believe itself committed. After :data:`LAST_ENTRY_KEEP_MS` a journal
  no partition follows goes whole.
* a journal's **checkpoint** (``hot_checkpoint``) drops by itself what entries before
  the oldest one left added; it goes once no partition follows its journal;
* a **temp file** (``store.TMP_PREFIX``) a write killed midway left goes once older
  than ``delay_ms``.

Journal writers commit no object uploaded more than ``hot_writer.STALE_UPLOAD_S``
ago, which the delay must exceed (:data:`MIN_DELAY_MS`): an object the sweeper
judged unnamed by its age is never named later.
"""

from __future__ import annotations

import dataclasses

from log_layout import hot_checkpoint, paths
from log_layout.hot_writer import STALE_UPLOAD_S
from log_layout.store import TMP_PREFIX

#: the least delay the sweeper waits before deleting an unnamed hot file
MIN_DELAY_MS = int(STALE_UPLOAD_S * 2000)
#: how long the seals of a journal no partition follows are kept (module docstring)
LAST_ENTRY_KEEP_MS = 7 * 24 * 3600 * 1000


@dataclasses.dataclass(frozen=True)
class SweepReport:
    """What a sweep deleted (or would: ``dry_run``) and kept, in files and bytes."""

    deleted_objects: int = 0
    deleted_entries: int = 0
    deleted_bytes: int = 0
    kept_objects: int = 0
    kept_entries: int = 0


def sweep(log, *, now_ms: int, delay_ms: int, dry_run: bool = False) -> SweepReport:
    """Delete the hot files nothing needs (see the module docstring); ``delay_ms`` is
    raised to at least MIN_DELAY_MS."""
    delay_ms = max(delay_ms, MIN_DELAY_MS)
    store = log.store
    journals = store.list_folders(paths.HOT_FOLDER)
    if not journals:
        return SweepReport()
    named: set[str] = set()
    follow_from: dict[str, int] = {}
    for topic in log.topics():
        for plog in log.partitions(topic):
            m = plog.snapshot()
            cold = plog.versions.cold_snapshot(refresh=False)  # the version m merged
            named.update(s.file for s in m.segments if paths.is_hot_file(s.file))
            named.update(name for name, _ in m.removed if paths.is_hot_file(name))
            j = cold.hot_journal
            if j is not None:
                follow_from[j] = min(follow_from.get(j, cold.hot_from), cold.hot_from)
    doomed: list[str] = []
    deleted_objects = deleted_entries = deleted_bytes = kept_objects = kept_entries = 0
    for journal in journals:
        journal = journal.rstrip("/").rsplit("/", 1)[-1]
        try:
            folder = paths.journal_folder(journal)
        except ValueError:
            continue  # not a journal's folder: not ours to judge
        first_needed = follow_from.get(journal)
        files = store.list(folder)
        seqs = sorted((s for f in files if (s := paths.hot_entry_seq(f.name)) is not None),
                      reverse=True)
        writers_last = _writers_last(log.journals, journal, seqs)
        for f in files:
            old = now_ms - f.mtime_ms >= delay_ms
            path = f"{folder}/{f.name}"
            seq = paths.hot_entry_seq(f.name)
            if seq is not None:
                dead = first_needed is None and now_ms - f.mtime_ms >= LAST_ENTRY_KEEP_MS
                if dead or old and writers_last is not None and seq < writers_last \
                        and (first_needed is None or seq < first_needed):
                    doomed.append(path)
                    deleted_entries += 1
                    deleted_bytes += f.size
                else:
                    kept_entries += 1
            elif f.name.startswith(TMP_PREFIX):
                # a temp file of a write killed midway (a checkpoint's replace, an entry's
                # create on a local store or HDFS): no write takes this long
                if old:
                    doomed.append(path)
                    deleted_bytes += f.size
            elif f.name == hot_checkpoint.NAME:
                # the checkpoint bounds itself (its floor follows the entries swept);
                # it goes with its journal: no partition follows it any more
                if first_needed is None and old:
                    doomed.append(path)
                    deleted_bytes += f.size
            elif paths.is_hot_object(path):
                if old and path not in named:
                    doomed.append(path)
                    deleted_objects += 1
                    deleted_bytes += f.size
                else:
                    kept_objects += 1
    if doomed and not dry_run:
        store.delete(doomed)
    return SweepReport(deleted_objects, deleted_entries, deleted_bytes, kept_objects,
                       kept_entries)


def _writers_last(journals, journal: str, seqs_newest_first: list[int]) -> int | None:
    """The newest entry of ``journal`` its own writer made (one with an object or
    partitions, not a seal); None if there is none."""
    for seq in seqs_newest_first:
        try:
            entry = journals.entry(journal, seq, trust_own=False)
        except Exception:  # a corrupt entry is not the writer's: keep looking
            continue
        if entry is not None and (entry.object is not None or entry.partitions):
            return seq
    return None
