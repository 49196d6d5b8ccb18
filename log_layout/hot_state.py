"""A partition's state in the hot tier: its ``_log`` version plus its journal's entries.

(The journal's format is ``hot_journal``; the manifest fields, ``manifest``.)

A ``_log`` version ``C`` that names a journal (``C.hot_journal``) is followed by the
entries of that journal from ``C.hot_from`` on. :func:`merge` applies, in order, each
entry's delta for the partition at ``C``'s topic id and leader epoch, and stops at an
entry sealing the partition at a higher epoch (a claim is under way: the next ``_log``
version takes over). What each side owns:

* the journal's writer (the partition's leader): the offsets (``next_offset``), the
  segments it adds, the producers' sequences, open and aborted transactions, the
  leader epochs;
* ``_log`` (claims and maintenance): every segment before ``hot_from``, the
  ``removed`` list and the cleaner's checkpoint; the log start offset is the larger
  of the two (a leader never moves it, DeleteRecords and retention do).

A reader new to the journal (nothing merged, the entry at ``hot_from`` not read yet)
starts from the journal's checkpoint when it covers ``hot_from``: the same merge, of
the entries before its end, without reading them (``hot_checkpoint``).

The merged manifest keeps ``C``'s version number and sets ``hot_from`` to the first
entry not merged, so a ``_log`` commit built on it (``Manifest.next``) carries every
merged entry along: that is how a claim or a maintenance run rolls the journal up.
"""

from __future__ import annotations

import time

from log_layout import hot_checkpoint
from log_layout.errors import CorruptManifest
from log_layout.hot_journal import Journals
from log_layout.manifest import Manifest


def merge(cold: Manifest, journals: Journals, topic_id: str, *, refresh: bool = True,
          start: Manifest | None = None) -> Manifest:
    """``cold`` with its journal's entries applied (see the module docstring). ``start``
    is an earlier merge of the same ``cold`` to continue from. ``refresh=False`` reads
    only entries already cached. Raises CorruptHotEntry, or CorruptManifest if an
    entry's segments do not follow the partition's."""
    journal = cold.hot_journal
    if journal is None:
        return cold
    m = start if start is not None else cold
    key = (cold.topic, cold.partition)
    seq = m.hot_from
    if start is None and refresh and journals.entry(journal, seq, refresh=False) is None:
        # a reader new to this journal: its checkpoint, then the entries after it
        got = _from_checkpoint(cold, journals, topic_id)
        if got is not None:
            m, seq, stopped = got
            if stopped:
                return m
    while True:
        entry = journals.entry(journal, seq, refresh=refresh)
        if entry is None:
            break
        sealed = entry.seals.get(key)
        if sealed is not None and sealed[0] == topic_id and sealed[1] > cold.leader_epoch:
            break  # claimed: nothing from here on is this partition's
        delta = entry.record(key, topic_id, cold.leader_epoch)
        if delta is not None:
            m = _apply(m, delta, entry.path)
        seq += 1
    if seq == m.hot_from:
        return m
    return m.with_fields(hot_from=seq)


def _from_checkpoint(cold: Manifest, journals: Journals,
                     topic_id: str) -> tuple[Manifest, int, bool] | None:
    """The merge up to the journal's checkpoint (``hot_checkpoint``), or None: no
    checkpoint covers ``cold.hot_from``, or it is corrupt (counted; the entries are
    read instead: they are the truth, the checkpoint only saves reading them)."""
    cp = hot_checkpoint.cached(journals, cold.hot_journal, cold.hot_from)
    if cp is None:
        return None
    try:
        got = cp.merge(cold, topic_id)
        if got is not None:
            journals.stats["checkpoint_merges"] += 1
        return got
    except CorruptManifest:  # CorruptHotCheckpoint too
        journals.stats["corrupt_checkpoints"] += 1
        with journals.checkpoints_lock:
            journals.checkpoints[cold.hot_journal] = (time.monotonic(), None)
        return None


def _apply(m: Manifest, delta: Manifest, path: str) -> Manifest:
    added = delta.segments
    if added and added[0].base_offset != m.next_offset:
        raise CorruptManifest(path, f"its segment of {m.topic}-{m.partition} starts at "
                                    f"{added[0].base_offset}, not at the partition's next "
                                    f"offset {m.next_offset}")
    start = max(m.log_start_offset, delta.log_start_offset)
    return delta.with_fields(segments=m.segments + added, removed=m.removed,
                             version=m.version, cleaned_offset=m.cleaned_offset,
                             log_start_offset=start, hot=True, hot_journal=m.hot_journal,
                             hot_from=m.hot_from,
                             aborted=tuple(a for a in delta.aborted if a[2] >= start))
