"""``writeStream.format("sparklog")``: each micro-batch one transaction, exactly once.

The transactional id is the query's: ``tid = "spark-<queryId>"`` (the query id is kept
in the checkpoint, so a restarted query has the same one). Step by step:

1. **Each micro-batch b, on the driver, before its tasks** -- Spark plans the batch's
   write and asks a freshly made data source for a writer
   (``SparklogDataSource.streamWriter``; measured: once per micro-batch, epochs 0, 1,
   2 for three batches): it reads the query id from ``<checkpointLocation>/metadata``
   and calls ``init_transactions(tid)``. The new epoch fences every producer of the
   query before it -- a task of an earlier batch or of a run that died -- and aborts
   an open transaction: the rows of a micro-batch that was being written when the
   last run died never become visible. That writer, with the producer id and epoch,
   is what Spark ships to b's tasks.
2. **Each task of batch b** reads the query id and ``b`` from the task's local
   properties (``sql.streaming.queryId``, ``streaming.sql.batchId``), and the batch id
   the query's last committed transaction recorded (``sink_txn.last_batch``). If it is
   ``>= b``, batch b was committed before Spark wrote it to its commit log (a crash
   between steps 3 and 4): the task writes nothing (``skipped``). Otherwise it adds its
   partitions and appends its rows transactionally (``sink.write_rows``).
3. **Driver, ``commit(messages, b)``** -- Spark's commit runner makes its writer from
   an *unpickled* data source, which does not call ``init_transactions`` (that would
   fence b's own tasks; see ``SparklogDataSource.__setstate__``). If every task
   skipped, nothing; else ``add_offsets(group=tid, b)`` then
   ``end_transaction(commit=True)`` under the tasks' producer id and epoch
   (``sink_txn.end``): b is recorded exactly when its rows commit.
4. **Spark** writes b to the checkpoint's commit log, and goes on with b + 1 (step 1).

What a crash leaves (the query is restarted from its checkpoint each time):

* during step 2 (tasks writing): an open transaction; step 1 after the restart aborts it;
  Spark replays b (its offsets are in the offset log), written again, committed once.
* in step 3 before the commit decision (PrepareCommit): the same. After it: step 1 after
  the restart completes the commit (markers, then the batch id), and the replay of b
  is recognised in step 2 and skipped.
* after step 3, before step 4: the replayed b is recognised in step 2 and skipped.
* a task retried by Spark within a run: its earlier attempt's appends are already in
  the open transaction, and the retry appends them again (as Spark's Kafka sink does;
  exactly once per *batch*, rows of a retried task twice). Spark's task retries are
  off in local mode; on a cluster set ``spark.task.maxFailures=1`` for exactly once,
  the query then fails and restarts, which is step 1.

Readers must read ``read_committed`` to see batches whole: read_uncommitted readers
see a batch's rows as they are appended, and an aborted batch's rows too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from log_layout import StoreError, open_store, shared_log
from pipeline import sink_txn
from pipeline.errors import InvalidSinkOption
from pipeline.sink import TaskResult, plan_checks, reported_segments, write_rows
from pipeline.sink_options import SinkOptions
from pipeline.sink_txn import Txn


def query_id_from_checkpoint(location: str | None,
                             storage_options: dict | None = None) -> str | None:
    """The query id Spark keeps in ``<location>/metadata`` (``{"id": ...}``), or None.

    The checkpoint is read through ``log_layout``'s stores: Hadoop's ``s3a://`` is read
    as ``s3://``, with ``storage_options`` (the sink store's, when it is on S3 too).
    """
    if not location:
        return None
    if location.startswith("s3a://"):
        location = "s3://" + location[len("s3a://"):]
    same_kind = storage_options if location.startswith("s3://") else None
    try:
        store = open_store(location, storage_options=same_kind)
        doc = json.loads(store.read("metadata").decode().splitlines()[0])
    except (FileNotFoundError, ValueError, IndexError, StoreError):
        return None
    return doc.get("id")


class StreamWriter(DataSourceStreamArrowWriter):
    """One micro-batch one transaction (see the module docstring). ``txn`` is the
    batch's producer (step 1); None in the writer Spark makes to commit."""

    def __init__(self, opts: SinkOptions, txn: Txn | None):
        self.opts, self.txn = opts, txn

    @classmethod
    def plan(cls, opts: SinkOptions, schema: StructType, overwrite: bool) -> "StreamWriter":
        """Step 1, on the driver before any task of the micro-batch."""
        plan_checks(opts, schema, overwrite)
        query_id = query_id_from_checkpoint(opts.checkpoint_location, opts.storage_options)
        if query_id is None:
            raise InvalidSinkOption("checkpointLocation", opts.checkpoint_location,
                                    "the sparklog sink needs the query's checkpoint "
                                    "location as an option of writeStream, to find its "
                                    "query id (exactly once)")
        log = shared_log(**opts.store_description)
        return cls(opts, sink_txn.begin(log, f"spark-{query_id}", opts.transaction_timeout_ms))

    @classmethod
    def for_commit(cls, opts: SinkOptions) -> "StreamWriter":
        return cls(opts, None)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskResult:
        """Step 2, in a task."""
        from pyspark import TaskContext

        tc = TaskContext.get()
        query_id = tc.getLocalProperty("sql.streaming.queryId")
        batch_id = int(tc.getLocalProperty("streaming.sql.batchId"))
        tid = f"spark-{query_id}"
        txn = self.txn if self.txn is not None and self.txn.tid == tid else Txn(tid)
        if not txn.transactional:
            # never fall back to plain appends: the batch would not be one transaction
            raise InvalidSinkOption("checkpointLocation", self.opts.checkpoint_location,
                                    f"the query's transactions were opened for "
                                    f"{self.txn.tid if self.txn else 'no query'}, but this "
                                    f"task belongs to query {query_id}")
        log = shared_log(**self.opts.store_description)
        last = sink_txn.last_batch(log, tid)
        if last is not None and last >= batch_id:
            return TaskResult({}, tid, txn.producer_id, txn.epoch, query_id, batch_id, True)
        written, segments = write_rows(self.opts, txn, iterator)
        return TaskResult(written, tid, txn.producer_id, txn.epoch, query_id, batch_id,
                          segments=segments)

    def _txn(self, messages: list[TaskResult | None]) -> tuple[Txn, str] | None:
        done = [m for m in messages if m is not None and not m.skipped and m.written]
        if not done:
            return None
        m = done[0]
        return Txn(m.tid, m.producer_id, m.epoch), m.query_id

    def commit(self, messages: list[TaskResult | None], batchId: int) -> None:
        """Step 3."""
        found = self._txn(messages)
        if found is None:
            return  # every task found the batch committed, or there was no task
        txn, query_id = found
        log = shared_log(**self.opts.store_description)
        sink_txn.discard_unreported(log, txn, reported_segments(messages))
        sink_txn.end(log, txn, commit=True, batch=batchId)

    def abort(self, messages: list[TaskResult | None], batchId: int) -> None:
        found = self._txn(messages)
        if found is not None:
            sink_txn.end(shared_log(**self.opts.store_description), found[0], commit=False)


__all__ = ["StreamWriter", "TaskResult"]
