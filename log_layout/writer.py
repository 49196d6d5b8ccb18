"""Writes to one partition: claims, appends, maintenance swaps.

Each is one ``commit.run``: a builder that plans the next version on a snapshot
(and fences, or gives up on a conflict) and an attempt that creates it -- for an
append through the segment seam (``segment_commit``), for a swap after putting
the new segments (``SegmentPuts``), for a claim as a plain version. The
protocol, and why it is safe against crashes and vacuum, is in commit.py.

A writer claimed with a hot journal (``hot_writer.JournalWriter``) commits its
appends and markers through the journal instead: the same plans, on the state its
last commit left, gathered with every other partition's into one object per flush.
Every claim seals the journal the partition's newest version names first
(``hot_journal.seal``), whether the claimant writes hot or not.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa

from log_layout import commit, hot_journal, leader_epochs, segment, txn_maintenance, txn_writes
from log_layout.commit import run as run_commit
from log_layout.commit import wall_clock_ms
from log_layout.hot_writer import Pending, without_segments
from log_layout.errors import (Fenced, InvalidMaintenance, InvalidRecords, LogEndMoved,
                               MaintenanceConflict, TopicRecreated)
from log_layout.manifest import NO_PRODUCER, Manifest, ProducerBatch, SegmentInfo
from log_layout.segment_commit import SegmentPuts, append_commit
from log_layout.versions import Versions

if TYPE_CHECKING:
    from conf.topic import TopicConfig
    from log_layout.hot_writer import JournalWriter


class Partition(Protocol):
    """What a writer needs of its partition (``PartitionLog``)."""

    topic: str
    partition: int
    store: Any
    versions: Versions

    @property
    def topic_id(self) -> str: ...

    def config(self) -> "TopicConfig": ...


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


def claim(partition: Partition, leader: str,
          journal: "JournalWriter | None" = None) -> "PartitionWriter":
    """Become the partition's writer: bump the leader epoch, fencing the last one. With
    ``journal``, its appends go through that hot journal (see the module docstring).
    Raises JournalBroken if ``journal`` is."""
    v = partition.versions
    snapshot = sealing_snapshot(v)

    def build(m: Manifest) -> Manifest:
        if journal is not None and journal.broken is not None:
            raise journal.broken
        return m.next(leader_epoch=m.leader_epoch + 1, leader=leader, committer="claim",
                      committed_ms=wall_clock_ms(),
                      epochs=leader_epochs.assign(m.epochs, m.leader_epoch + 1, m.next_offset,
                                                  m.log_start_offset),
                      hot=m.hot or journal is not None,
                      hot_journal=journal.name if journal is not None else None,
                      hot_from=journal.next_seq if journal is not None else 0)

    new = commit.run(snapshot, build, v.attempt)
    writer = PartitionWriter(partition, new, journal)
    if journal is not None:
        journal.register(writer)
    return writer


def _result(new: Manifest, rows: int,
            producer_batches: Sequence[tuple[ProducerBatch, int]]) -> AppendResult:
    """Where an append of ``rows`` records that made ``new`` landed."""
    base = new.next_offset - rows
    return AppendResult(base, new.next_offset - 1, new.version,
                        tuple((base + r, base + r + b.count - 1) for b, r in producer_batches))


def sealing_snapshot(v: Versions, epoch: int | None = None) -> Callable[[], Manifest]:
    """A ``commit.run`` snapshot for a commit that takes a partition from its hot
    writer (a claim, or an append to ``_log`` at the same ``epoch``): the newest
    snapshot, after sealing the journal it names (once per journal and epoch), so it
    holds every entry committed before the seal and the hot writer commits nothing
    after it. A writer of another epoch seals nothing (its commit is fenced)."""
    sealed: set[tuple[str, int]] = set()

    def snapshot() -> Manifest:
        m = v.snapshot()
        if m.hot_journal is not None and (m.hot_journal, m.leader_epoch) not in sealed \
                and (epoch is None or epoch == m.leader_epoch):
            hot_journal.seal(v.journals, m.hot_journal, v.topic, v.topic_id, v.partition,
                             m.leader_epoch + 1, m.hot_from, wall_clock_ms())
            sealed.add((m.hot_journal, m.leader_epoch))
            m = v.snapshot()
        return m

    return snapshot


class PartitionWriter:
    """Appends to one partition at one leader epoch until fenced."""

    def __init__(self, partition: Partition, manifest: Manifest,
                 journal: "JournalWriter | None" = None):
        self.partition = partition
        self.epoch = manifest.leader_epoch
        #: the topic incarnation this writer was made for: it commits under no other
        self.topic_id = partition.topic_id
        self.fenced: Fenced | None = None
        self._segment_commit = append_commit(partition.store)
        #: the hot journal this writer commits through (None: to ``_log``)
        self.journal = journal
        #: in hot mode, the partition's state after this writer's last commit (without
        #: its segments: plans need the rest)
        self.head = without_segments(manifest) if journal is not None else manifest

    def __repr__(self) -> str:
        p = self.partition
        return f"PartitionWriter({p.topic}-{p.partition}, epoch {self.epoch})"

    def _check_epoch(self, m: Manifest) -> None:
        current_id = self.partition.versions.topic_id  # the incarnation read now
        if current_id != self.topic_id:
            self.fenced = TopicRecreated(m.topic, m.partition, self.topic_id, current_id)
        elif m.leader_epoch != self.epoch:
            self.fenced = Fenced(m.topic, m.partition, self.epoch, m.leader_epoch)
        if self.fenced is not None:
            raise self.fenced

    def append(self, records: pa.Table | pa.RecordBatch, *, now_ms: int | None = None,
               producer_batches: Sequence[tuple[ProducerBatch, int]] = (),
               transactional: bool = False, if_next_offset: int | None = None) -> AppendResult:
        """Commit ``records`` as one new segment; return their offsets.

        ``producer_batches`` lists idempotent batches in the records as
        ``(batch, first_row)``; their sequences are checked against the
        committed state at commit time. ``transactional``: the records are one
        transactional producer's, its batches covering them all; the segment is
        flagged with its producer id and the first opens its transaction here
        (see ``txn_writes``). ``if_next_offset``: commit only if the log still ends
        there (its records then start at it), else raise LogEndMoved -- a
        compare-and-swap on the log end, as the Schema Registry's ``_schemas`` topic
        needs (a rebase over another append would put the records after state their
        writer never read). Raises Fenced (this writer is done), InvalidRecords,
        InvalidProducerEpoch or OutOfOrderSequence (a duplicate here means the
        caller skipped its own duplicate check).
        """
        p = self.partition
        config = p.config()
        table, ts, txn_pid = self._records(records, now_ms, producer_batches, transactional)
        if self.journal is not None:
            return self._hot_append(table, producer_batches, ts, txn_pid,
                                    if_next_offset).result()
        v = p.versions
        first = v.snapshot(refresh=False)
        snapshot = v.snapshot
        if first.hot_journal is not None:  # written hot until now: take it over (sealed)
            snapshot, first = sealing_snapshot(v, self.epoch), None
        with self._segment_commit(v, table, config, self.topic_id) as seg:
            new = commit.run(snapshot,
                             lambda m: self._plan(m, table, producer_batches, ts, txn_pid,
                                                  if_next_offset),
                             seg.attempt, first=first)
        return _result(new, table.num_rows, producer_batches)

    def append_async(self, records: pa.Table | pa.RecordBatch, *, now_ms: int | None = None,
                     producer_batches: Sequence[tuple[ProducerBatch, int]] = (),
                     transactional: bool = False, caller_flushes: bool = False,
                     ) -> "concurrent.futures.Future[AppendResult]":
        """``append`` through the hot journal, without waiting for its flush: the future
        gives the AppendResult or raises what ``append`` would (``caller_flushes``: the
        caller calls ``journal.flush_here()`` before it waits; ``JournalWriter.submit``).
        Raises ValueError on a writer without a journal."""
        if self.journal is None:
            raise ValueError(f"{self} has no hot journal: use append()")
        table, ts, txn_pid = self._records(records, now_ms, producer_batches, transactional)
        return self._hot_append(table, producer_batches, ts, txn_pid,
                                caller_flushes=caller_flushes)

    def _records(self, records: pa.Table | pa.RecordBatch, now_ms: int | None,
                 producer_batches: Sequence[tuple[ProducerBatch, int]],
                 transactional: bool) -> tuple[segment.Records, int, int | None]:
        """An append's records in the segment schema, its timestamp and transactional
        producer id (None: not transactional). Raises InvalidRecords."""
        ts = wall_clock_ms() if now_ms is None else now_ms
        table = segment.normalize(records, default_ts_ms=ts, log_append_time=(
            self.partition.config().message_timestamp_type == "LogAppendTime"))
        if table.num_rows == 0:
            raise InvalidRecords("nothing to append: no records")
        txn_pid = txn_writes.check_transactional(producer_batches, table.num_rows) \
            if transactional else None
        return table, ts, txn_pid

    def _hot_append(self, table: segment.Records,
                    producer_batches: Sequence[tuple[ProducerBatch, int]], ts: int,
                    txn_pid: int | None, if_next_offset: int | None = None,
                    caller_flushes: bool = False,
                    ) -> "concurrent.futures.Future[AppendResult]":
        assert self.journal is not None
        rows = table.num_rows
        pending = Pending(self, lambda m: self._plan(m, table, producer_batches, ts, txn_pid,
                                                     if_next_offset),
                          table, self.partition.config().compression)
        done: concurrent.futures.Future = concurrent.futures.Future()

        def resolved(fut: concurrent.futures.Future) -> None:
            exc = fut.exception()
            if exc is not None:
                done.set_exception(exc)
                return
            done.set_result(_result(fut.result(), rows, producer_batches))

        self.journal.submit(pending, caller_flushes=caller_flushes).add_done_callback(resolved)
        return done

    def _plan(self, m: Manifest, table: segment.Records,
              producer_batches: Sequence[tuple[ProducerBatch, int]],
              ts: int, txn_pid: int | None = None,
              if_next_offset: int | None = None) -> tuple[dict, dict]:
        """The append's next version on ``m``: its segment's stats and the other
        changes (segment_commit's plan). Raises Fenced, LogEndMoved or
        OutOfOrderSequence."""
        self._check_epoch(m)
        base = m.next_offset
        if if_next_offset is not None and base != if_next_offset:
            raise LogEndMoved(m.topic, m.partition, if_next_offset, base)
        producers = txn_writes.plan_producers(m, producer_batches, base,
                                              self.partition.partition) \
            if producer_batches else m.producers
        stats = {"base_offset": base, "last_offset": base + table.num_rows - 1,
                 "count": table.num_rows, "min_ts": table.min_ts, "max_ts": table.max_ts}
        changes = {"next_offset": base + table.num_rows, "producers": producers,
                   "committer": "append", "committed_ms": ts}
        if self.journal is None and m.hot_journal is not None:
            changes["hot_journal"] = None  # an append to _log ends the hot writer's turn
        if txn_pid is not None:
            stats["producer_id"] = txn_pid
            changes.update(txn_writes.transactional_changes(m, txn_pid, base))
        return stats, changes

    def write_marker(self, producer_id: int, epoch: int, commit: bool, *,
                     now_ms: int | None = None, strict: bool = False,
                     before: int | None = None) -> Manifest | None:
        """End ``producer_id``'s transaction here with a COMMIT or ABORT control marker
        (one offset), recording ``epoch`` as the producer's (see ``txn_writes``;
        ``strict``: a transactions v2 marker, ending only records of older epochs;
        ``before``: ending only a transaction opened below that offset).
        Returns the version committed, None if there was nothing to do (no open
        transaction, epoch already recorded). Raises Fenced or InvalidProducerEpoch."""
        p = self.partition
        ts = wall_clock_ms() if now_ms is None else now_ms
        config = p.config()
        table = segment.normalize(txn_writes.marker_records(commit), default_ts_ms=ts)
        v = p.versions

        def build(m: Manifest) -> tuple[dict, dict] | dict | None:
            self._check_epoch(m)
            return txn_writes.plan_marker(m, producer_id, epoch, commit, ts, strict=strict,
                                          before=before)

        if self.journal is not None:
            return self.journal.submit(Pending(self, build, table, config.compression)).result()

        def build_cold(m: Manifest) -> tuple[dict, dict] | dict | None:
            plan = build(m)
            if plan is not None and m.hot_journal is not None:  # taken over from the journal
                (plan[1] if isinstance(plan, tuple) else plan)["hot_journal"] = None
            return plan

        def attempt(m: Manifest, plan: tuple[dict, dict] | dict) -> Manifest | None:
            if isinstance(plan, dict):  # the epoch only: a version without a segment
                return v.attempt(m, m.next(**plan))
            return seg.attempt(m, plan)

        with self._segment_commit(v, table, config, self.topic_id) as seg:
            return run_commit(sealing_snapshot(v, self.epoch), build_cold, attempt)


def replace_segments(v: Versions, config: Callable[[], "TopicConfig"],
                     remove: Sequence[SegmentInfo], add: Sequence[pa.Table], *,
                     committer: str, now_ms: int, log_start_offset: int | None = None,
                     cleaned_offset: int | None = None) -> Manifest:
    """Maintenance commit: swap ``remove`` for segments made of ``add`` (see
    ``PartitionLog.replace_segments``; ``config()`` gives the topic's compression).
    Raises InvalidMaintenance, InvalidRecords or MaintenanceConflict."""
    tables = _maintenance_output(v, remove, add)
    # each output's producer and marker flags, from the segments its records came from
    kinds = txn_maintenance.output_kinds(v.topic, v.partition, remove, tables)
    lo, hi = remove[0].base_offset, remove[-1].last_offset
    with SegmentPuts(v, config().compression if tables else None) as puts:
        put = [puts.put(t) for t in tables]
        spans = _tile(lo, hi, [(i.base_offset, i.last_offset) for i in put],
                      [k.control or k.producer_id != NO_PRODUCER for k in kinds])
        firsts = {i.file: i.base_offset for i in put}  # each new segment's first record
        infos = [dataclasses.replace(info, base_offset=base, last_offset=last,
                                     producer_id=kind.producer_id, control=kind.control)
                 for info, (base, last), kind in zip(put, spans, kinds)]
        names = {s.file for s in remove}

        def swap(m: Manifest) -> Manifest:
            where = [i for i, s in enumerate(m.segments) if s.file in names]
            if len(where) != len(remove):
                raise MaintenanceConflict(v.topic, v.partition,
                                          "another job replaced some of its segments first")
            if where[-1] - where[0] + 1 != len(where):
                # the new segments tile lo..hi: a kept segment inside would overlap them
                raise InvalidMaintenance(v.topic, v.partition,
                                         "the segments to remove must be consecutive "
                                         "segments of the newest manifest")
            start = m.log_start_offset if log_start_offset is None \
                else max(m.log_start_offset, log_start_offset)
            segments = segments_after_replace(m.segments, remove, infos)
            # an aborted range goes with the last of its records (Kafka's .txnindex
            # entries go with their segments, and the cleaner drops aborted records)
            aborted = txn_maintenance.pruned_aborted(m.aborted, segments,
                                                     min(start, m.next_offset), firsts)
            new = m.next(segments=segments, aborted=aborted,
                         removed=m.removed + tuple((s.file, now_ms) for s in remove),
                         log_start_offset=min(start, m.next_offset),
                         cleaned_offset=m.cleaned_offset if cleaned_offset is None
                         else max(m.cleaned_offset, cleaned_offset),
                         committer=committer, committed_ms=now_ms)
            if m.transactional:
                txn_maintenance.check_aborted_status(m, new, remove, list(zip(infos, kinds)))
            return new

        return commit.run(v.snapshot, swap,
                          lambda m, new: new if puts.try_version(new) else None)


def _tile(lo: int, hi: int, spans: Sequence[tuple[int, int]],
          exact: Sequence[bool]) -> list[tuple[int, int]]:
    """``spans`` (each output's first and last record offset, in order) widened to tile
    ``lo..hi``: the offsets compaction removed become gaps inside a segment. A gap
    goes to the segment after it, as it always has, unless that one is ``exact`` (a
    marker, or transactional): a marker keeps its one offset, and a transactional
    segment's base stays its first record, out of an aborted range before it
    (``Manifest.is_aborted`` reads a segment's base), where a neighbour can take it."""
    out = [list(s) for s in spans]
    for i in range(1, len(out)):
        if exact[i]:
            out[i - 1][1] = out[i][0] - 1
        else:
            out[i][0] = out[i - 1][1] + 1
    if out:
        out[0][0], out[-1][1] = lo, hi
    return [(a, b) for a, b in out]


def _maintenance_output(v: Versions, remove: Sequence[SegmentInfo],
                        add: Sequence[pa.Table]) -> list[pa.Table]:
    """``add``'s non-empty tables in the segment schema, checked against ``remove``.
    Raises InvalidMaintenance or InvalidRecords saying what is wrong."""
    if not remove:
        raise InvalidMaintenance(v.topic, v.partition,
                                 "replace_segments needs at least one segment to remove")
    if len({s.file for s in remove}) != len(remove):
        raise InvalidMaintenance(v.topic, v.partition,
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
    return tables


def segments_after_replace(segments: Iterable[SegmentInfo], remove: Iterable[SegmentInfo],
                           add: Iterable[SegmentInfo]) -> tuple[SegmentInfo, ...]:
    """``segments`` minus ``remove`` plus ``add``, in offset order."""
    gone = {s.file for s in remove}
    kept = [s for s in segments if s.file not in gone]
    return tuple(sorted(kept + list(add), key=lambda s: s.base_offset))
