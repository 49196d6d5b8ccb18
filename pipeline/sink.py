"""The ``sparklog`` sink: ``df.write`` and ``writeStream`` into topics, as Spark's Kafka sink.

    df.write.format("sparklog").option("topic", "clicks").mode("append").save()
    df.writeStream.format("sparklog").option("checkpointLocation", ck).start()

Columns and options: :mod:`pipeline.sink_options`; partitioning: :mod:`pipeline.sink_partition`;
transactions: :mod:`pipeline.sink_txn`; the streaming protocol: :mod:`pipeline.sink_stream`.

**How a task appends.** Executors write their rows straight into the partitions
through ``log_layout`` (the gateway is not on the write path, as it is not on the read
path), with ``PartitionLog.writer()``: a writer at the partition's *current* leader
epoch, never ``claim()``. A claim bumps the leader epoch, which is how a gateway that
owns a partition fences the writer before it; a Spark task that claimed would fence
the live gateway, whose next append would fail (Fenced) and make it re-claim, fencing
the task in turn. Appending at the current epoch instead goes through the manifest
commit protocol like any append: each append is one exclusive manifest version, and a
concurrent gateway append makes ours rebase onto it (commit.py), so the two interleave
safely, as maintenance commits interleave with the gateway's. A gateway that claims in
the meantime fences our writer *before* its version exists; the task then appends
again at the new epoch (``sink_txn.append``). Each task gathers its rows per target
partition and appends them as one segment per partition (more above ``FLUSH_ROWS``
rows in a partition or ``PENDING_BYTES`` held in all).

**Batch writes are atomic per job.** The driver opens one transaction for the job when
it plans the write (``writer()``: ``init_transactions(tid="spark-<job uuid>")``); each
task adds its partitions (``add_partitions``) before its first append there and appends
transactionally under the job's producer id and epoch; the driver's ``commit`` ends the
transaction with a commit, ``abort`` (a task failed for good, the job was cancelled)
with an abort. Read-committed readers see all of the job's rows or none; a driver that
dies leaves the transaction open until ``transaction.timeout.ms`` aborts it.

**A retried task writes its rows once.** A task that Spark *retries* inside the job
(a cluster's ``spark.task.maxFailures`` > 1) appends its rows again in the same
transaction; each task's commit message lists its appends, Spark hands the driver
the messages of the successful attempts only, and the driver discards every other
segment of the transaction before committing (``sink_txn.discard_unreported``), so
read-committed readers see each row once (Spark's Kafka sink writes them twice).
What remains: an attempt still appending when the driver commits (a speculative
copy Spark has not killed yet) can add a segment after the discard.

Save modes: ``append`` only. ``overwrite`` is refused here (InvalidSinkOption); the
default ``errorifexists`` and ``ignore``, which Spark's Kafka sink treats as append,
Spark itself refuses for every Python data source (UNSUPPORTED_DATA_SOURCE_SAVE_MODE),
so ``.mode("append")`` is needed.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from log_layout import shared_log
from log_layout.partitioner import key_partitions
from pipeline import sink_txn
from pipeline.errors import InvalidSinkColumn, InvalidSinkOption
from pipeline.sink_options import SinkOptions, check_schema
from pipeline.sink_partition import Assigner
from pipeline.sink_txn import Txn

#: a task appends a partition's gathered rows once it holds this many (one segment) ...
FLUSH_ROWS = 500_000
#: ... or its largest partition's once all it holds passes this size (a task's memory)
PENDING_BYTES = 256 << 20
_SEGMENT_COLUMNS = ("key", "value", "headers")


@dataclasses.dataclass(frozen=True)
class TaskResult(WriterCommitMessage):
    """What one task wrote: rows per (topic, partition), under which producer."""

    written: dict[tuple[str, int], int]
    tid: str
    producer_id: int | None
    epoch: int | None
    #: streaming: the batch this task saw, and whether it found it already committed
    query_id: str | None = None
    batch_id: int | None = None
    skipped: bool = False
    #: each append: (topic, partition, base offset, last offset); the driver keeps
    #: these and discards what failed attempts appended (``sink_txn.discard_unreported``)
    segments: tuple[tuple[str, int, int, int], ...] = ()


def _task_partition_id() -> int:
    from pyspark import TaskContext

    tc = TaskContext.get()
    return tc.partitionId() if tc is not None else 0


def _binary(column: pa.Array) -> pa.Array:
    return column if column.type == pa.binary() else column.cast(pa.binary())


def _topics(batch: pa.RecordBatch) -> pa.Array:
    topics = batch.column("topic")
    if topics.null_count:
        raise InvalidSinkColumn("topic", f"is null in {topics.null_count} row(s) and no topic "
                                f"option is set")
    return topics


def _split(rows: pa.Table, target: np.ndarray, count: int) -> Iterator[tuple[int, pa.Table]]:
    """``rows`` by target partition, in order within each: one stable sort and one
    ``take``, then zero-copy slices (a ``filter`` per partition scans every row again)."""
    counts = np.bincount(target, minlength=count)
    present = np.nonzero(counts)[0].tolist()
    if len(present) == 1:
        yield present[0], rows
        return
    ordered = rows.take(pa.array(np.argsort(target, kind="stable")))
    at = 0
    for p in present:
        n = int(counts[p])
        yield p, ordered.slice(at, n)
        at += n


class _Gatherer:
    """One task's rows, gathered per target partition and appended in ``txn``."""

    def __init__(self, opts: SinkOptions, txn: Txn):
        self.opts, self.txn = opts, txn
        self.log = shared_log(**opts.store_description)
        self.assigner = Assigner(_task_partition_id())
        self.pending: dict[tuple[str, int], list[pa.Table]] = {}
        self.pending_rows: dict[tuple[str, int], int] = {}
        self.pending_bytes = 0
        self.written: dict[tuple[str, int], int] = {}
        self.segments: list[tuple[str, int, int, int]] = []
        self.registered: set[tuple[str, int]] = set()

    def add(self, batch: pa.RecordBatch) -> None:
        """Validate ``batch`` and place its rows; append partitions that filled up."""
        if batch.num_rows == 0:
            return
        topics = _topics(batch) if self.opts.topic is None else None
        names = batch.schema.names
        table = pa.table({
            "key": _binary(batch.column("key")) if "key" in names
            else pa.nulls(batch.num_rows, pa.binary()),
            "value": _binary(batch.column("value")),
            **({"headers": batch.column("headers")} if "headers" in names else {}),
        })
        explicit = batch.column("partition") if "partition" in names else None
        if self.opts.topic is not None:  # the option wins over a topic column
            self._place(self.opts.topic, table, explicit)
            return
        for topic in pc.unique(topics).to_pylist():
            mine = pc.equal(topics, topic)
            self._place(topic, table.filter(mine),
                        None if explicit is None else explicit.filter(mine))

    def _place(self, topic: str, rows: pa.Table, explicit: pa.Array | None) -> None:
        count = self.log.topic(topic).partitions  # UnknownTopic names the topic
        if explicit is not None and explicit.null_count < len(explicit):
            lo, hi = pc.min(explicit).as_py(), pc.max(explicit).as_py()
            if lo < 0 or hi >= count:
                bad = lo if lo < 0 else hi
                raise InvalidSinkColumn("partition", f"{bad} is out of range: topic {topic!r} "
                                        f"has partitions 0 to {count - 1}")
        keys = rows.column("key").combine_chunks()
        if explicit is None and keys.null_count == 0:
            # every row keyed: Kafka's hash alone decides. Not through Assigner.assign,
            # whose BooleanArray -> numpy conversion imports pandas: 1.2 s of each new
            # Python worker's first task (measured under Spark, 2 cores)
            target = key_partitions(keys, count)
        else:
            target = self.assigner.assign(topic, count, keys, explicit)
        for p, part in _split(rows, target, count):
            key = (topic, p)
            self.pending.setdefault(key, []).append(part)
            self.pending_rows[key] = self.pending_rows.get(key, 0) + part.num_rows
            self.pending_bytes += part.nbytes
            if self.pending_rows[key] >= FLUSH_ROWS:
                self._flush(key)
        while self.pending and self.pending_bytes > PENDING_BYTES:
            self._flush(max(self.pending, key=self.pending_rows.__getitem__))

    def _flush(self, key: tuple[str, int]) -> None:
        tables = self.pending.pop(key, [])
        self.pending_rows.pop(key, None)
        self.pending_bytes -= sum(t.nbytes for t in tables)
        if not tables:
            return
        if key not in self.registered:
            sink_txn.register(self.log, self.txn, [key])
            self.registered.add(key)
        table = pa.concat_tables(tables, promote_options="default")
        base = sink_txn.append(self.log, self.txn, key[0], key[1], table)
        self.written[key] = self.written.get(key, 0) + table.num_rows
        self.segments.append((key[0], key[1], base, base + table.num_rows - 1))

    def finish(self) -> dict[tuple[str, int], int]:
        for key in sorted(self.pending):
            self._flush(key)
        return self.written


def write_rows(opts: SinkOptions, txn: Txn, batches: Iterator[pa.RecordBatch]
               ) -> tuple[dict, tuple]:
    """Append one task's rows in ``txn``; returns rows written per (topic, partition)
    and the appends (``TaskResult.segments``). Raises InvalidSinkColumn, UnknownTopic,
    or what the append raises."""
    gatherer = _Gatherer(opts, txn)
    for batch in batches:
        gatherer.add(batch)
    return gatherer.finish(), tuple(gatherer.segments)


def reported_segments(messages: list[TaskResult | None]) -> list[tuple[str, int, int, int]]:
    """The appends of the task attempts Spark reports as successful."""
    return [seg for m in messages if m is not None for seg in m.segments]


def check_topic(opts: SinkOptions) -> None:
    """The ``topic`` option names an existing topic (UnknownTopic otherwise)."""
    if opts.topic is not None:
        shared_log(**opts.store_description).topic(opts.topic)


def plan_checks(opts: SinkOptions, schema: StructType, overwrite: bool) -> None:
    """What the driver refuses before any task runs."""
    if overwrite:
        raise InvalidSinkOption("mode", "overwrite", "a topic is only appended to: use "
                                "mode('append')")
    check_schema(schema, opts)
    check_topic(opts)


class BatchWriter(DataSourceArrowWriter):
    """``df.write``: one transaction for the whole job (see the module docstring)."""

    def __init__(self, opts: SinkOptions, txn: Txn):
        self.opts, self.txn = opts, txn

    @classmethod
    def plan(cls, opts: SinkOptions, schema: StructType, overwrite: bool) -> "BatchWriter":
        """On the driver, before any task: check, then open the job's transaction."""
        plan_checks(opts, schema, overwrite)
        log = shared_log(**opts.store_description)
        return cls(opts, sink_txn.begin(log, f"spark-{uuid.uuid4()}",
                                        opts.transaction_timeout_ms))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskResult:
        written, segments = write_rows(self.opts, self.txn, iterator)
        return TaskResult(written, self.txn.tid, self.txn.producer_id, self.txn.epoch,
                          segments=segments)

    def commit(self, messages: list[TaskResult | None]) -> None:
        if not any(m is not None and m.written for m in messages):
            return  # nothing was added to the transaction: there is none to end
        log = shared_log(**self.opts.store_description)
        sink_txn.discard_unreported(log, self.txn, reported_segments(messages))
        sink_txn.end(log, self.txn, commit=True)

    def abort(self, messages: list[TaskResult | None]) -> None:
        sink_txn.end(shared_log(**self.opts.store_description), self.txn, commit=False)
