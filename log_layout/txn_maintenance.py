"""What a maintenance rewrite (compaction, roll-up) must keep of transactions.

The format is manifest.py's: a segment's ``producer_id`` and ``control`` flags, and
``aborted`` ranges per producer, decide what a reader sees. A rewrite replaces
consecutive segments by new ones made of their records; these rules keep every
new segment's flags exact, so nothing aborted becomes visible and nothing
committed is hidden:

* each output segment holds records of **one kind** only: non-transactional
  records, or one producer's records of one transaction (no marker of that
  producer between its first and last record), or one control marker (a
  one-record segment). The kind is read from the removed segment each record
  came from (:func:`output_kinds`), so callers pass plain tables;
* a transactional output segment must be read as aborted exactly when its
  records were (:func:`check_aborted_status`, on the manifest the swap
  commits on): a base offset moved by tiling into an older aborted range of its
  producer is refused, not committed;
* an ``aborted`` entry goes once no record of its range is left in the log
  (:func:`pruned_aborted`): it only ever hides records, and Kafka's cleaner
  drops the ``.txnindex`` entries of transactions it has removed. A new
  segment's base may lie before its first record (the tiling); an entry it then
  starts inside, with no record left in it, goes too -- else the segment's
  committed records would read as aborted.

Every check raises InvalidMaintenance (or InvalidRecords for a record that no
removed segment covers) saying what is wrong.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from log_layout.errors import InvalidMaintenance, InvalidRecords
from log_layout.manifest import NO_PRODUCER, Manifest, SegmentInfo


@dataclasses.dataclass(frozen=True)
class OutputKind:
    """The flags an output segment carries, and the removed segments its records
    came from (indexes into ``remove``)."""

    producer_id: int = NO_PRODUCER
    control: bool = False
    sources: tuple[int, ...] = ()


def output_kinds(topic: str, partition: int, remove: Sequence[SegmentInfo],
                 tables: Sequence[pa.Table]) -> list[OutputKind]:
    """The kind of each of ``tables`` (offsets inside ``remove``'s range, increasing).

    Raises InvalidRecords for a record in no removed segment, InvalidMaintenance
    for a table that mixes kinds, spans one of its producer's markers, or holds a
    marker with other records.
    """
    bases = np.array([s.base_offset for s in remove], dtype=np.int64)
    lasts = np.array([s.last_offset for s in remove], dtype=np.int64)
    pids = np.array([s.producer_id for s in remove], dtype=np.int64)
    ctls = np.array([s.control for s in remove], dtype=bool)
    kinds = []
    for t in tables:
        offsets = t.column("offset").to_numpy()
        where = np.searchsorted(bases, offsets, "right") - 1
        outside = (where < 0) | (offsets > lasts[np.maximum(where, 0)])
        if outside.any():
            raise InvalidRecords(f"maintenance output offset {offsets[outside][0]} lies in "
                                 f"no segment it replaces")
        sources = np.unique(where)
        pid, ctl = int(pids[sources[0]]), bool(ctls[sources[0]])
        first, last = int(offsets[0]), int(offsets[-1])
        if np.any(pids[sources] != pid) or np.any(ctls[sources] != ctl):
            raise InvalidMaintenance(topic, partition, (
                f"output records {first}..{last} mix transactional and other records (or "
                f"several producers' or markers): a segment holds one kind only"))
        if ctl and len(offsets) != 1:
            raise InvalidMaintenance(topic, partition, f"output records {first}..{last} put "
                                     f"a control marker with other records")
        if pid != NO_PRODUCER and not ctl:
            inside = [s.base_offset for s in remove
                      if s.control and s.producer_id == pid and first < s.base_offset < last]
            if inside:
                raise InvalidMaintenance(topic, partition, (
                    f"output records {first}..{last} span producer {pid}'s marker at "
                    f"{inside[0]}: a segment holds one transaction only"))
        kinds.append(OutputKind(pid, ctl, tuple(int(i) for i in sources)))
    return kinds


def check_aborted_status(old: Manifest, new: Manifest, remove: Sequence[SegmentInfo],
                         outputs: Sequence[tuple[SegmentInfo, OutputKind]]) -> None:
    """Raise InvalidMaintenance unless each transactional output segment is read as
    aborted in ``new`` exactly when the removed segments its records came from were
    in ``old``."""
    for info, kind in outputs:
        if kind.producer_id == NO_PRODUCER or kind.control:
            continue  # not hidden by an aborted range; markers are never read
        was = {old.is_aborted(remove[i]) for i in kind.sources}
        if len(was) != 1:
            raise InvalidMaintenance(old.topic, old.partition, (
                f"output segment {info.base_offset}..{info.last_offset} mixes aborted and "
                f"committed records of producer {kind.producer_id}"))
        if new.is_aborted(info) != was.pop():
            raise InvalidMaintenance(old.topic, old.partition, (
                f"output segment {info.base_offset}..{info.last_offset} of producer "
                f"{kind.producer_id} would change whether its records read as aborted "
                f"(its base offset moved across an aborted range)"))


def pruned_aborted(aborted: Sequence[tuple[int, int, int]], segments: Sequence[SegmentInfo],
                   log_start_offset: int, first_records: Mapping[str, int] | None = None
                   ) -> tuple[tuple[int, int, int], ...]:
    """The entries of ``aborted`` still hiding a record of ``segments``: their marker
    is at or above the log start and a record segment of their producer starts
    inside their range -- at its first record for the segments in ``first_records``
    (file -> offset: a rewrite's new segments, whose base may lie before it), else at
    its base offset."""
    first_records = first_records or {}
    if not aborted:
        return ()
    starts: dict[int, list[int]] = {}
    for s in segments:
        if s.producer_id != NO_PRODUCER and not s.control:
            starts.setdefault(s.producer_id, []).append(  # in offset order
                first_records.get(s.file, s.base_offset))
    kept = []
    for entry in aborted:
        pid, first, last = entry
        bases = starts.get(pid, ())
        i = bisect.bisect_left(bases, first)
        if last >= log_start_offset and i < len(bases) and bases[i] <= last:
            kept.append(entry)
    return tuple(kept)
