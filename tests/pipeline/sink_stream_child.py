"""A streaming query into a sparklog topic, run as its own process so a test can SIGKILL it.

    python -m tests.pipeline.sink_stream_child STORE CHECKPOINT

Reads topic ``in`` and writes topic ``out`` of the local store at STORE. A row whose
value is ``block`` hangs its task for ever (a Python UDF waiting on an event nobody
sets), so the other task's rows are appended in the batch's open transaction and the
batch never commits: the test kills the process group there.
"""

from __future__ import annotations

import sys
import threading


def passthrough(value: bytes | None) -> bytes | None:
    if value == b"block":
        threading.Event().wait()  # never set: the task hangs until the process is killed
    return value


def main(store: str, checkpoint: str) -> None:
    from pyspark.sql.functions import udf

    from pipeline.spark import session

    spark = session(master="local[2]", extra={"spark.sql.shuffle.partitions": "2"})
    block = udf(passthrough, "binary")
    q = (spark.readStream.format("sparklog").option("store", store).option("subscribe", "in")
         .option("startingOffsets", "earliest").load()
         .select("key", block("value").alias("value"))
         .writeStream.format("sparklog").option("store", store).option("topic", "out")
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    print("started", q.id, flush=True)
    q.awaitTermination()


if __name__ == "__main__":
    main(*sys.argv[1:3])
