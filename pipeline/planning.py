"""Driver-side planning of ``sparklog`` reads: which partitions, which offsets, which slices.

Everything here works on partition manifests only (no record is read, except
by a timestamp lookup); the plan is a list of tasks, each a few consecutive
:class:`Slice` s of one partition (a slice is one segment, or an offset range
of one, read with ``PartitionLog.read_segment``). Offsets are always ``[start, end)``: ``end`` is
the next offset to read, as in Kafka and in the streaming offsets
``{topic: {"partition": next_offset}}``.

Isolation (``kafka.isolation.level``): read_uncommitted reads up to each
partition's high watermark; read_committed up to its last stable offset (the
first offset of its earliest open transaction: "latest" resolves there, and
a planned end above it is lowered to it) and plans no segment of an aborted
transaction (``Manifest.is_aborted``). Neither plans a control marker, and
offsets keep their gaps.

Data loss means a needed offset lies below the partition's log start offset
(retention deleted it). Offsets that compaction removed are gaps inside the
segments' ranges and are simply not there; they are never data loss.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re

from log_layout import Log, Manifest, SegmentInfo, UnknownTopic
from pipeline.errors import DataLoss, InvalidSourceOption, NoOffsetForTimestamp
from pipeline.options import EARLIEST, LATEST, SourceOptions

log_ = logging.getLogger("sparklog.source")

TP = tuple[str, int]

@dataclasses.dataclass(frozen=True)
class Slice:
    """One Spark input partition: offsets ``[start, end)`` of one segment (picklable)."""

    topic: str
    partition: int
    segment: SegmentInfo
    start: int
    end: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime (Kafka's timestampType codes)

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def est_bytes(self) -> int:
        """Bytes of the segment this slice covers, in proportion to its offsets."""
        span = max(1, self.segment.end_offset - self.segment.base_offset)
        return self.segment.bytes * self.size // span


#: a Spark input partition reads consecutive slices of one partition up to this many
#: bytes, as Spark packs small files (``spark.sql.files.maxPartitionBytes``): each task
#: costs a Python-worker round trip, so a task per small segment is slow.
MAX_TASK_BYTES = 128 << 20
MIN_TASKS = 8  # ... but data is spread over at least this many tasks where it can be


def pack(slices: list[Slice], *, max_bytes: int = MAX_TASK_BYTES,
         min_tasks: int = MIN_TASKS) -> list[tuple[Slice, ...]]:
    """Group consecutive slices of the same partition into tasks of about equal size,
    at most ``max_bytes`` each (less when that would leave fewer than ``min_tasks``)."""
    total = sum(s.est_bytes for s in slices)
    budget = max(1, min(max_bytes, total // min_tasks))
    runs: list[list[Slice]] = []
    for s in slices:
        last = runs[-1][-1] if runs else None
        if last is not None and (last.topic, last.partition, last.end) == \
                (s.topic, s.partition, s.start):
            runs[-1].append(s)
        else:
            runs.append([s])
    tasks: list[tuple[Slice, ...]] = []
    for run in runs:
        k = min(len(run), max(1, math.ceil(sum(s.est_bytes for s in run) / budget)))
        bounds = [round(i * len(run) / k) for i in range(k + 1)]
        tasks.extend(tuple(run[a:b]) for a, b in zip(bounds, bounds[1:]))
    return tasks


# -- which partitions ----------------------------------------------------------
def topic_partitions(log: Log, opts: SourceOptions) -> list[TP]:
    """The (topic, partition) pairs the options select, sorted.

    ``subscribe`` and ``assign`` name topics that must exist (UnknownTopic,
    UnknownPartition otherwise); ``subscribePattern`` matches whole names of
    the topics there are now (none is fine: a stream waits for them).
    """
    if opts.assign is not None:
        out = []
        for topic, parts in opts.assign.items():
            for p in parts:
                log.partition(topic, p)  # raises UnknownTopic / UnknownPartition
                out.append((topic, p))
        return sorted(out)
    if opts.subscribe is not None:
        topics = list(opts.subscribe)
    else:
        pattern = re.compile(opts.subscribe_pattern or "")
        topics = [t for t in log.topics() if pattern.fullmatch(t)]
    out = []
    for topic in topics:
        out.extend((topic, p) for p in range(log.topic(topic, refresh=True).partitions))
    return sorted(out)


def timestamp_type(log: Log, topic: str) -> int:
    return 1 if log.log_append_time(topic) else 0


# -- which offsets -------------------------------------------------------------
def _specific(spec: dict[str, dict[int, int]], tps: list[TP], option: str) -> dict[TP, int]:
    given = {(t, p): v for t, parts in spec.items() for p, v in parts.items()}
    missing = sorted(set(tps) - set(given))
    extra = sorted(set(given) - set(tps))
    if missing or extra:
        problems = []
        if missing:
            problems.append("it does not name " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            problems.append("it names partitions the query does not read: "
                            + ", ".join(f"{t}-{p}" for t, p in extra))
        raise InvalidSourceOption(option, json.dumps(spec), "must give every partition the "
                                  "query reads, and no other; " + "; ".join(problems))
    return given


def _by_timestamp(log: Log, tps: list[TP], stamps: dict[TP, int], *, strategy: str,
                  starting: bool) -> dict[TP, int]:
    out = {}
    for tp in tps:
        part = log.partition(*tp)
        m = part.snapshot()
        offset = part.offset_for_timestamp(stamps[tp], manifest=m)
        if offset is None:
            if starting and strategy == "error":
                raise NoOffsetForTimestamp(tp[0], tp[1], stamps[tp])
            offset = m.next_offset
        out[tp] = offset
    return out


def resolve_starts(log: Log, opts: SourceOptions, tps: list[TP], *, default: str) -> dict[TP, int]:
    """Starting offset per partition (-2/-1 resolved), by Kafka's precedence of options."""
    if opts.starting_timestamp is not None:
        return _by_timestamp(log, tps, {tp: opts.starting_timestamp for tp in tps},
                             strategy=opts.timestamp_strategy, starting=True)
    if opts.starting_by_timestamp is not None:
        stamps = _specific(opts.starting_by_timestamp, tps, "startingOffsetsByTimestamp")
        return _by_timestamp(log, tps, stamps, strategy=opts.timestamp_strategy, starting=True)
    spec = opts.starting_offsets or default
    if isinstance(spec, str):
        spec_of = {tp: EARLIEST if spec == "earliest" else LATEST for tp in tps}
    else:
        spec_of = _specific(spec, tps, "startingOffsets")
    return {tp: _resolve(log, tp, v, opts) for tp, v in spec_of.items()}


def resolve_ends(log: Log, opts: SourceOptions, tps: list[TP]) -> dict[TP, int]:
    """Ending offset (exclusive) per partition of a batch query."""
    if opts.ending_timestamp is not None:
        return _by_timestamp(log, tps, {tp: opts.ending_timestamp for tp in tps},
                             strategy="latest", starting=False)
    if opts.ending_by_timestamp is not None:
        stamps = _specific(opts.ending_by_timestamp, tps, "endingOffsetsByTimestamp")
        return _by_timestamp(log, tps, stamps, strategy="latest", starting=False)
    spec = opts.ending_offsets
    spec_of = {tp: LATEST for tp in tps} if isinstance(spec, str) \
        else _specific(spec, tps, "endingOffsets")
    return {tp: _resolve(log, tp, v, opts) for tp, v in spec_of.items()}


def _resolve(log: Log, tp: TP, value: int, opts: SourceOptions) -> int:
    if value == EARLIEST:
        return log.partition(*tp).log_start_offset()
    if value == LATEST:
        return latest_offset(log.partition(*tp).snapshot(), opts)
    return value


def latest_offset(m: Manifest, opts: SourceOptions) -> int:
    """Where "latest" is: the high watermark, or the last stable offset for read_committed."""
    return m.last_stable_offset if opts.read_committed else m.next_offset


def latest_offsets(log: Log, tps: list[TP], opts: SourceOptions) -> dict[TP, int]:
    """:func:`latest_offset` of each partition."""
    return {tp: latest_offset(log.partition(*tp).snapshot(), opts) for tp in tps}


# -- which slices ----------------------------------------------------------------
def clamp_start(tp: TP, start: int, log_start: int, *, fail_on_data_loss: bool) -> int:
    """``start``, or the log start if retention passed it (DataLoss if that is not allowed)."""
    if start >= log_start:
        return start
    if fail_on_data_loss:
        raise DataLoss(tp[0], tp[1], start, log_start)
    log_.warning("sparklog: offsets %d to %d of %s-%d were deleted by retention before they "
                 "were read; skipping to %d (failOnDataLoss=false)", start, log_start - 1,
                 tp[0], tp[1], log_start)
    return log_start


def plan(log: Log, ranges: dict[TP, tuple[int, int]],
         opts: SourceOptions) -> list[tuple[Slice, ...]]:
    """Tasks covering each partition's ``[start, end)``: slices of one segment each,
    split as ``minPartitions`` / ``maxRecordsPerPartition`` ask, else packed (:func:`pack`).

    A start below the log start is data loss (see :func:`clamp_start`); an end
    above the high watermark, or an end before the start, is an error naming
    the partition (OffsetOutOfRange from ``log_layout``). read_committed lowers
    an end to the last stable offset and skips aborted segments.
    """
    from log_layout import OffsetOutOfRange

    slices: list[Slice] = []
    for tp, (start, end) in sorted(ranges.items()):
        part = log.partition(*tp)
        m = part.snapshot()
        if end > m.next_offset:
            raise OffsetOutOfRange(tp[0], tp[1], end, m.log_start_offset, m.next_offset)
        start = clamp_start(tp, start, m.log_start_offset, fail_on_data_loss=opts.fail_on_data_loss)
        if opts.read_committed and end > m.last_stable_offset:
            # an open transaction's records are never read (the LSO only grows, so a
            # stream's planned end, taken from an older snapshot, is never lowered)
            end = max(start, m.last_stable_offset)
        if end < start:
            if opts.fail_on_data_loss:
                raise OffsetOutOfRange(tp[0], tp[1], start, m.log_start_offset, end)
            continue
        ts_type = timestamp_type(log, tp[0])
        for info in m.segments_between(start, end):
            if info.control or (opts.read_committed and m.is_aborted(info)):
                continue  # a marker (never a record), an aborted transaction's records
            lo, hi = max(start, info.base_offset), min(end, info.end_offset)
            if hi > lo:
                slices.append(Slice(tp[0], tp[1], info, lo, hi, ts_type))
    if opts.min_partitions or opts.max_records_per_partition:
        return [(s,) for s in split(slices, min_partitions=opts.min_partitions,
                                    max_records=opts.max_records_per_partition)]
    return pack(slices)


def split(slices: list[Slice], *, min_partitions: int | None,
          max_records: int | None) -> list[Slice]:
    """Split slices by offset range so there are at least ``min_partitions`` of them
    (each in proportion to its size, as Kafka's offset-range calculator does) and
    none holds more than ``max_records`` offsets."""
    total = sum(s.size for s in slices)
    if not total:
        return slices
    out = []
    for s in slices:
        parts = 1
        if min_partitions and len(slices) < min_partitions:
            parts = max(1, math.ceil(s.size * min_partitions / total))
        if max_records:
            parts = max(parts, math.ceil(s.size / max_records))
        parts = min(parts, s.size)
        if parts == 1:
            out.append(s)
            continue
        step = s.size / parts
        bounds = [s.start + round(i * step) for i in range(parts)] + [s.end]
        out.extend(dataclasses.replace(s, start=a, end=b)
                   for a, b in zip(bounds, bounds[1:]) if b > a)
    return out


# -- streaming offsets -------------------------------------------------------------
def to_json_offsets(offsets: dict[TP, int]) -> dict[str, dict[str, int]]:
    """{(topic, p): n} -> {"topic": {"p": n}} (the streaming offset Spark checkpoints)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, p), n in sorted(offsets.items()):
        out.setdefault(topic, {})[str(p)] = int(n)
    return out


def from_json_offsets(doc: dict[str, dict[str, int]]) -> dict[TP, int]:
    return {(topic, int(p)): int(n) for topic, parts in doc.items() for p, n in parts.items()}


def exists(log: Log, tp: TP) -> bool:
    try:
        return tp[1] < log.topic(tp[0], refresh=True).partitions
    except UnknownTopic:
        return False
