"""A Spark job whose one task fails after the sink appended part of its rows, and is
retried (``local[2,2]``: two attempts per task). Run by test_sink_retry.py in a process
of its own, since a session's task retries are fixed when it starts.

Usage: ``python -m tests.pipeline.sink_retry_job STORE TOPIC ROWS FAIL_AFTER``.
"""

from __future__ import annotations

import sys

import pyarrow as pa


def rows(fail_after: int):
    """mapInArrow: partition 0's first attempt raises after ``fail_after`` rows."""
    def gen(batches):
        from pyspark import TaskContext

        tc = TaskContext.get()
        failing = tc.partitionId() == 0 and tc.attemptNumber() == 0
        seen = 0
        for b in batches:
            ids = b.column(0)
            yield pa.RecordBatch.from_arrays(
                [pa.compute.cast(ids, pa.string()).cast(pa.binary()),
                 pa.array([0] * len(b), pa.int32())], names=["value", "partition"])
            seen += len(b)
            if failing and seen >= fail_after:
                raise RuntimeError("injected failure of the first attempt")
    return gen


def main() -> None:
    store, topic, n, fail_after = sys.argv[1:5]
    from pipeline.spark import session

    spark = session(master="local[2,2]", extra={"spark.sql.shuffle.partitions": "2"})
    df = spark.range(0, int(n), numPartitions=2).mapInArrow(
        rows(int(fail_after)), "value binary, partition int")
    df.write.format("sparklog").option("store", store).option("topic", topic) \
        .mode("append").save()
    spark.stop()


if __name__ == "__main__":
    main()
