"""Transactional log cleaning: what the cleaner does with transactions.

Kafka's rules (``LogCleaner`` with KIP-98's transactions), on sparklog's
manifest (the format: log_layout/manifest.py):

* the cleanable range ends at the **last stable offset**: records of an open
  transaction are never cleaned (``cleaner.plan_clean``). Below the LSO every
  transaction has ended, so each transactional record is committed or aborted;
* **aborted** transactions' records are removed (their segments are not even
  read): a read_committed reader never saw them, and a read_uncommitted one
  sees them until this pass only -- as in Kafka, whose cleaner discards the
  batches of aborted transactions;
* **committed** transactional records take part in key dedup like any record;
* a **control marker** stays while any record of its transaction is in the
  log; after that it goes like a tombstone: in a pass that finds it already in
  the clean head (below the checkpoint before the pass), with no record of its
  transaction in the pass's input, and its timestamp at least
  ``delete.retention.ms`` before ``now_ms``. So the pass that removes a
  transaction's last record keeps its marker, and a later one drops it. (Kafka
  stamps a delete horizon on the marker's batch when it first finds it empty,
  KIP-534; the marker's own timestamp and the two-pass rule stand for that
  horizon here, as they do for tombstones.)

Each record carries a **label** (column :data:`LABEL`) naming its kind -- not
transactional, or one producer's one transaction, or one marker -- so the output
is cut where the kind changes: ``replace_segments`` then flags each output
segment exactly (log_layout/txn_maintenance.py), and the ``aborted`` entries whose
records are gone leave the manifest there.
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from log_layout import Manifest, PartitionLog, SegmentInfo
from log_layout.manifest import NO_PRODUCER

#: the column naming each record's kind while the cleaner works (never written)
LABEL = "__kind"


@dataclasses.dataclass(frozen=True)
class Kind:
    """The kind of a segment's records: ``txn`` is the offset of the marker that ends
    their transaction (-1: not transactional, or no marker in the log)."""

    producer_id: int = NO_PRODUCER
    control: bool = False
    txn: int = -1


@dataclasses.dataclass
class RangeKinds:
    """The cleanable range's segments sorted for the cleaner."""

    #: segments whose records are deduplicated, with their label
    records: list[tuple[SegmentInfo, int]]
    #: marker segments, with their label
    markers: list[tuple[SegmentInfo, int]]
    #: label -> kind
    kinds: list[Kind]
    #: (producer, marker offset) of transactions with a record in the pass's input
    had_records: set[tuple[int, int]]
    #: aborted segments, dropped unread
    aborted: list[SegmentInfo]


def classify(m: Manifest, segments: tuple[SegmentInfo, ...]) -> RangeKinds:
    """Label each live segment of ``segments`` (those at or above the log start)."""
    markers_of: dict[int, list[int]] = {}  # producer -> its marker offsets, in order
    for s in m.segments:
        if s.control:
            markers_of.setdefault(s.producer_id, []).append(s.base_offset)
    labels: dict[Kind, int] = {}
    out = RangeKinds([], [], [], set(), [])
    for info in segments:
        if info.last_offset < m.log_start_offset:
            continue
        kind = _kind(info, markers_of)
        if info.producer_id != NO_PRODUCER and not info.control:
            out.had_records.add((kind.producer_id, kind.txn))
            if m.is_aborted(info):
                out.aborted.append(info)
                continue
        label = labels.setdefault(kind, len(labels))
        (out.markers if info.control else out.records).append((info, label))
    out.kinds = list(labels)
    return out


def _kind(info: SegmentInfo, markers_of: dict[int, list[int]]) -> Kind:
    if info.producer_id == NO_PRODUCER:
        return Kind()
    if info.control:
        return Kind(info.producer_id, True, info.base_offset)
    # the transaction ends at its producer's first marker after the records (a marker
    # before them that compaction removed had no records left: it cannot be theirs)
    ends = markers_of.get(info.producer_id, [])
    i = bisect.bisect_right(ends, info.base_offset)
    return Kind(info.producer_id, False, ends[i] if i < len(ends) else -1)


def labelled(table: pa.Table, label: int) -> pa.Table:
    """``table`` with every record labelled ``label``."""
    return table.append_column(LABEL, pa.array(np.full(table.num_rows, label, np.int32)))


def read_labelled(plog: PartitionLog, m: Manifest,
                  segments: list[tuple[SegmentInfo, int]]) -> pa.Table:
    """The live records of ``segments``, labelled, in offset order."""
    tables = [labelled(plog.read_segment(info, m.log_start_offset, version=m.version), label)
              for info, label in segments]
    if not tables:
        return empty(plog, m)
    return pa.concat_tables(tables).combine_chunks()


def empty(plog: PartitionLog, m: Manifest) -> pa.Table:
    """No records, labelled (the schema of :func:`read_labelled`)."""
    return labelled(plog.read_segment(m.segments[0], version=m.version).slice(0, 0), 0)


def kept_markers(plog: PartitionLog, m: Manifest, kinds: RangeKinds, kept: pa.Table, *,
                 cleaned_before: int, now_ms: int, delete_retention_ms: int) -> list[pa.Table]:
    """The marker records that survive a pass whose surviving records are ``kept``
    (labelled), each labelled (the rules: the module docstring)."""
    surviving = {(kinds.kinds[label].producer_id, kinds.kinds[label].txn)
                 for label in pc.unique(kept.column(LABEL)).to_pylist()}
    out = []
    for info, label in kinds.markers:
        txn = (info.producer_id, info.base_offset)
        expired = txn not in surviving and txn not in kinds.had_records \
            and info.base_offset < cleaned_before \
            and info.max_ts <= now_ms - delete_retention_ms
        if not expired:
            out.append(labelled(plog.read_segment(info, m.log_start_offset,
                                                  version=m.version), label))
    return out


def cut_by_kind(table: pa.Table) -> list[pa.Table]:
    """``table`` (labelled, in offset order) cut where the label changes, unlabelled."""
    if table.num_rows == 0:
        return []
    labels = table.column(LABEL).to_numpy()
    edges = [0, *(np.flatnonzero(np.diff(labels)) + 1).tolist(), table.num_rows]
    plain = table.drop_columns([LABEL])
    return [plain.slice(a, b - a) for a, b in zip(edges, edges[1:])]
