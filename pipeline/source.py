"""The ``sparklog`` Spark data source (Python Data Source API, pyspark 4.2).

Reads topics straight from the store through ``log_layout`` (the gateway is
not on the read path) with the schema and options of Spark's Kafka source::

    spark.read.format("sparklog").option("subscribe", "clicks").load()
    spark.readStream.format("sparklog").option("subscribe", "clicks") \\
        .option("maxOffsetsPerTrigger", 100000).load()

Schema: ``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp, timestampType int`` (0 CreateTime, 1 LogAppendTime, from
the topic's ``message.timestamp.type``), plus ``headers
array<struct<key string, value binary>>`` with ``includeHeaders=true``.
Options: see :mod:`pipeline.options`. With ``valueFormat`` / ``keyFormat`` (``avro``,
``jsonschema``, ``protobuf``) the value / key is decoded by the store's Schema Registry into a typed
column and ``valueSchemaId`` / ``keySchemaId`` follow (:mod:`pipeline.registry_decode`);
``valueProtobufMessage`` / ``keyProtobufMessage`` choose a Protobuf file's message by its
full name (default: its first).

Batch: the driver plans from the partition manifests (:mod:`pipeline.planning`):
an input partition reads consecutive segments of one partition (about 128 MB,
at least 8 tasks where there is enough data), or offset slices of segments
when ``minPartitions`` / ``maxRecordsPerPartition`` ask for more. Tasks reopen the store from
its picklable description and yield ``pyarrow.RecordBatch`` es already in
Spark's types (a tuple-yielding reader is about 5 times slower).

Isolation: ``kafka.isolation.level`` (or ``isolation.level``) ``read_committed``
ends batch and streaming reads at each partition's last stable offset (so a
micro-batch never holds an open transaction's records; it reads them after the
commit) and skips aborted transactions' segments; ``read_uncommitted`` (the
default) reads to the high watermark, aborted records included. Neither
returns a control marker; offsets keep their gaps (:mod:`pipeline.planning`).

Streaming: offsets are ``{topic: {"partition": next_offset}}``.
``latestOffset`` reads the manifests' high watermarks (last stable offsets), capped by admission
control (``maxOffsetsPerTrigger`` -> ``ReadMaxRows``; ``minOffsetsPerTrigger``
with ``maxTriggerDelay``); ``Trigger.AvailableNow`` reads up to the high
watermarks (LSOs) seen when the query started. Partitions that appear later (a
topic grew, a new topic matches the pattern) are read from their earliest
offset, as Kafka does. Retention passing a needed offset is data loss
(:class:`~pipeline.errors.DataLoss`, or skip with a warning when
``failOnDataLoss=false``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    InputPartition)
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                              ReadMinRows, SupportsTriggerAvailableNow)
from pyspark.sql.types import StructType

from log_layout import MissingSegment, OffsetOutOfRange, shared_log
from pipeline import planning
from pipeline.errors import PartitionsRemoved
from pipeline.options import SourceOptions, parse
from pipeline.planning import TP, Slice
from pipeline.registry_decode import ColumnPlan, decode_batch, plan_column

SCHEMA_DDL = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, timestampType int")
HEADERS_DDL = "headers array<struct<key: string, value: binary>>"

_HEADER_TYPE = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()),
                                                       pa.field("value", pa.binary())])))
_TS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", _TS),
    ("timestampType", pa.int32()),
])
ARROW_SCHEMA_HEADERS = ARROW_SCHEMA.append(pa.field("headers", _HEADER_TYPE))


class SparklogDataSource(DataSource):
    """``format("sparklog")``: topics of a sparklog store, as Spark's Kafka source shows them."""

    def __init__(self, options):
        super().__init__(options)
        self._parsed: SourceOptions | None = None
        self._plans: tuple[ColumnPlan, ...] | None = None
        # Spark's planner constructs the data source it asks for a writer; its streaming
        # commit runner unpickles one (see __setstate__ and pipeline.sink_stream).
        self._planning = True

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._planning = False

    @property
    def parsed(self) -> SourceOptions:
        """The read options, parsed on first use: ``schema()`` asks at ``load()``, so a
        bad option fails there, naming the option (a write parses its own, see sink)."""
        if self._parsed is None:
            self._parsed = parse(dict(self.options))
        return self._parsed

    @property
    def plans(self) -> tuple[ColumnPlan, ...]:
        """How keys and values are decoded by the registry (none without ``keyFormat`` /
        ``valueFormat``): the reader schemas, chosen once, in ``schema()`` at ``load()``;
        Spark pickles this object after it, so the readers decode to the same type.
        Raises InvalidSourceOption, UnusableSchema."""
        if self._plans is None:
            opts = self.parsed
            self._plans = tuple(
                plan_column(opts.store_description, column, fmt,
                            subject or f"{opts.subject_topic()}-{column}", version, opts.mode,
                            message)
                for column, fmt, subject, version, message in opts.decode)
        return self._plans

    @classmethod
    def name(cls) -> str:
        return "sparklog"

    def schema(self) -> str | StructType:
        if not self.plans:
            return SCHEMA_DDL + (", " + HEADERS_DDL if self.parsed.include_headers else "")
        from pipeline.registry_types import spark_type

        return spark_type(pa.struct(list(typed_schema(self.plans,
                                                      self.parsed.include_headers))))

    def reader(self, schema: StructType) -> "BatchReader":
        self.parsed.check_batch()
        return BatchReader(self.parsed, self.plans)

    def streamReader(self, schema: StructType) -> "StreamReader":
        self.parsed.check_stream()
        return StreamReader(self.parsed, plans=self.plans)

    def writer(self, schema: StructType, overwrite: bool):
        """``df.write``: the sink (pipeline.sink), one transaction per job."""
        from pipeline.sink import BatchWriter
        from pipeline.sink_options import parse_sink

        return BatchWriter.plan(parse_sink(dict(self.options)), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
        """``writeStream``: the sink (pipeline.sink_stream), one transaction per batch.
        Only the planner's call opens the query's transactions; the commit runner's
        writer commits with the tasks' producer."""
        from pipeline.sink_options import parse_sink
        from pipeline.sink_stream import StreamWriter

        opts = parse_sink(dict(self.options))
        if self._planning:
            return StreamWriter.plan(opts, schema, overwrite)
        return StreamWriter.for_commit(opts)


def typed_schema(plans: tuple[ColumnPlan, ...], include_headers: bool) -> pa.Schema:
    """The source's Arrow schema with the planned columns typed and their
    ``<column>SchemaId`` columns appended."""
    schema = ARROW_SCHEMA_HEADERS if include_headers else ARROW_SCHEMA
    for plan in plans:
        i = schema.get_field_index(plan.column)
        schema = schema.set(i, pa.field(plan.column, plan.arrow_type))
    for plan in plans:
        schema = schema.append(pa.field(plan.id_column, pa.int32()))
    return schema


# -- the executor side ------------------------------------------------------------
def _constant_strings(text: str, n: int) -> pa.Array:
    """``n`` copies of ``text`` as a Spark string column, without a Python loop."""
    raw = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def _headers(column: pa.Array) -> pa.Array:
    """Headers in Spark's type, a record without any as null, as Spark's Kafka source
    gives it (a segment stores ``[]`` for it when other records of the segment have
    headers)."""
    column = column.cast(_HEADER_TYPE)
    if column.null_count == len(column):
        return column
    empty = pc.equal(pc.list_value_length(column), 0)
    return pc.if_else(empty, pa.scalar(None, _HEADER_TYPE), column)


def to_spark(batch: pa.RecordBatch, s: Slice, *, include_headers: bool) -> pa.RecordBatch:
    """A segment record batch in the data source's Arrow schema (Spark's exact types)."""
    n = batch.num_rows
    columns = [
        batch.column("key"), batch.column("value"), _constant_strings(s.topic, n),
        pa.array(np.full(n, s.partition, dtype=np.int32)), batch.column("offset"),
        batch.column("timestamp"), pa.array(np.full(n, s.timestamp_type, dtype=np.int32)),
    ]
    if include_headers:
        columns.append(_headers(batch.column("headers")))
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA_HEADERS)
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def read_task(opts: SourceOptions, slices: tuple[Slice, ...] | None,
              plans: tuple[ColumnPlan, ...] = ()) -> Iterator[pa.RecordBatch]:
    """The records of one task's slices as Spark batches (runs in a Python worker),
    keys and values decoded as ``plans`` say (raises UndecodableRecord in FAILFAST mode).

    ``None`` reads nothing: Spark plans one ``InputPartition(None)`` when the
    reader planned none.
    """
    for s in slices or ():
        for batch in read_slice(opts, s):
            yield decode_batch(batch, plans, opts.store_description, s.topic, s.partition) \
                if plans else batch


def read_slice(opts: SourceOptions, s: Slice) -> Iterator[pa.RecordBatch]:
    """The records of one slice as Spark batches.

    If the planned segment was superseded (compaction) and deleted since, the
    range is re-read through the newest manifest; if retention deleted it,
    that is data loss.
    """
    log = shared_log(**opts.store_description)
    part = log.partition(s.topic, s.partition)
    try:
        batches = part.read_segment(s.segment, s.start, s.end).to_batches()
    except MissingSegment:
        m = part.snapshot()
        start = planning.clamp_start((s.topic, s.partition), s.start, m.log_start_offset,
                                     fail_on_data_loss=opts.fail_on_data_loss)
        batches = part.read(start, s.end, manifest=m, isolation_level=opts.isolation_level) \
            if start < s.end else iter(())
    for batch in batches:
        if batch.num_rows:
            yield to_spark(batch, s, include_headers=opts.include_headers)


# -- batch ----------------------------------------------------------------------------
class BatchReader(DataSourceReader):
    """A batch query: offsets resolved once on the driver, one task per group of slices."""

    def __init__(self, opts: SourceOptions, plans: tuple[ColumnPlan, ...] = ()):
        self.opts = opts
        self.plans = plans

    def partitions(self) -> list["SliceInput"]:
        log = shared_log(**self.opts.store_description)
        tps = planning.topic_partitions(log, self.opts)
        starts = planning.resolve_starts(log, self.opts, tps, default="earliest")
        ends = planning.resolve_ends(log, self.opts, tps)
        tasks = planning.plan(log, {tp: (starts[tp], ends[tp]) for tp in tps}, self.opts)
        return [SliceInput(t) for t in tasks]

    def read(self, partition: "SliceInput") -> Iterator[pa.RecordBatch]:
        return read_task(self.opts, partition.value, self.plans)


class SliceInput(InputPartition):
    """One Spark input partition: ``value`` is a tuple of consecutive
    :class:`~pipeline.planning.Slice` s of one partition."""

    def __init__(self, slices: tuple[Slice, ...]):
        super().__init__(slices)

    def __repr__(self) -> str:
        first, last = self.value[0], self.value[-1]
        return (f"SliceInput({first.topic}-{first.partition} [{first.start}, {last.end}) "
                f"in {len(self.value)} slices)")


# -- streaming -------------------------------------------------------------------------
def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A Structured Streaming query by offset watermark (runs in a long-lived driver worker).

    ``clock`` returns milliseconds; it decides ``maxTriggerDelay`` and is a
    parameter so tests need not wait.
    """

    def __init__(self, opts: SourceOptions, clock=_now_ms, plans: tuple[ColumnPlan, ...] = ()):
        self.opts = opts
        self.clock = clock
        self.plans = plans
        self._target: dict[TP, int] | None = None  # Trigger.AvailableNow stops here
        self._last_trigger_ms: int | None = None

    @property
    def log(self):
        return shared_log(**self.opts.store_description)

    def initialOffset(self) -> dict:
        tps = planning.topic_partitions(self.log, self.opts)
        starts = planning.resolve_starts(self.log, self.opts, tps, default="latest")
        return planning.to_json_offsets(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = planning.topic_partitions(self.log, self.opts)
        self._target = planning.latest_offsets(self.log, tps, self.opts)

    def _begin(self, start: dict) -> dict[TP, int]:
        """The start offsets, plus partitions that appeared since (from their earliest)."""
        begin = planning.from_json_offsets(start)
        log = self.log
        for tp in planning.topic_partitions(log, self.opts):
            if tp not in begin:
                begin[tp] = log.partition(*tp).log_start_offset()
        return begin

    def _available(self, begin: dict[TP, int]) -> dict[TP, int]:
        """The newest offsets the query may read: high watermarks (read_committed: last
        stable offsets), or the AvailableNow target.

        A partition that no longer exists fails the query (PartitionsRemoved) or,
        with ``failOnDataLoss=false``, is dropped.
        """
        log = self.log
        if self._target is not None:
            latest = {tp: o for tp, o in self._target.items() if tp in begin}
        else:
            latest = planning.latest_offsets(log, planning.topic_partitions(log, self.opts),
                                             self.opts)
        gone = [tp for tp in begin if tp not in latest and not planning.exists(log, tp)]
        if gone and self.opts.fail_on_data_loss:
            raise PartitionsRemoved([f"{t}-{p}" for t, p in gone])
        for tp, offset in begin.items():
            if self._target is None and tp in latest and latest[tp] < offset \
                    and log.partition(*tp).high_watermark() < offset:
                # the log is shorter than what was read: the topic was deleted and created
                # again (the high watermark: a read_committed query's LSO may lag a start
                # a read_uncommitted run of the same checkpoint took)
                if self.opts.fail_on_data_loss:
                    part = log.partition(*tp).snapshot()
                    raise OffsetOutOfRange(tp[0], tp[1], offset, part.log_start_offset,
                                           part.next_offset)
                begin[tp] = log.partition(*tp).log_start_offset()  # Kafka resets to earliest
                continue
            if tp in latest or tp not in gone:
                # never behind the start (a start past the AvailableNow target is done)
                latest[tp] = max(latest.get(tp, offset), offset)
        return latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = self._begin(start)
        latest = self._available(begin)
        backlog = {tp: end - begin.get(tp, end) for tp, end in latest.items()}
        total = sum(backlog.values())
        if not isinstance(limit, ReadAllAvailable) and self._target is None:
            minimum = self.opts.min_offsets_per_trigger
            if isinstance(limit, ReadMinRows):
                minimum = limit.min_rows
            now = self.clock()
            if self._last_trigger_ms is None:
                self._last_trigger_ms = now
            if minimum and total < minimum \
                    and now - self._last_trigger_ms < self.opts.max_trigger_delay_ms:
                return start  # not enough yet: wait for more, or for maxTriggerDelay
        maximum = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if maximum is None and self._target is not None:
            maximum = self.opts.max_offsets_per_trigger
        if maximum is not None and total > maximum:
            latest = _rate_limit(begin, backlog, maximum)
        if total:
            self._last_trigger_ms = self.clock()
        return planning.to_json_offsets(latest)

    def reportLatestOffset(self) -> dict | None:
        log = self.log
        return planning.to_json_offsets(
            planning.latest_offsets(log, planning.topic_partitions(log, self.opts), self.opts))

    def partitions(self, start: dict, end: dict) -> list[SliceInput]:
        begin, finish = planning.from_json_offsets(start), planning.from_json_offsets(end)
        log = self.log
        ranges = {}
        for tp, stop in finish.items():
            # a partition missing from start appeared after it was taken: from its earliest
            first = begin[tp] if tp in begin else log.partition(*tp).log_start_offset()
            if first > stop and not self.opts.fail_on_data_loss:
                first = log.partition(*tp).log_start_offset()  # the log restarted (see _available)
            if stop > first:
                ranges[tp] = (first, stop)
        return [SliceInput(t) for t in planning.plan(log, ranges, self.opts)]

    def read(self, partition: "SliceInput") -> Iterator[pa.RecordBatch]:
        return read_task(self.opts, partition.value, self.plans)

    def commit(self, end: dict) -> None:
        """Nothing to do: the store keeps no per-consumer state (Spark's checkpoint does)."""


def _rate_limit(begin: dict[TP, int], backlog: dict[TP, int], maximum: int) -> dict[TP, int]:
    """End offsets admitting ``maximum`` offsets, shared in proportion to each backlog
    (largest remainders get the leftovers), as Kafka's ``maxOffsetsPerTrigger`` does."""
    total = sum(backlog.values())
    shares = {tp: b * maximum / total for tp, b in backlog.items()}
    take = {tp: int(v) for tp, v in shares.items()}
    left = maximum - sum(take.values())
    for tp in sorted(shares, key=lambda t: (take[t] - shares[t], t))[:left]:
        take[tp] += 1
    return {tp: begin[tp] + min(take[tp], backlog[tp]) for tp in backlog}
