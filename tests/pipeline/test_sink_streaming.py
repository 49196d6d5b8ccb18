"""``writeStream.format("sparklog")``: each micro-batch one transaction, exactly once.

Queries read topic ``in`` of a local store (or a memory source) and write topic ``out``
with ``Trigger.AvailableNow`` and a checkpoint; output is read ``read_committed``
(through ``log_layout``: the Spark source reads uncommitted) and compared with chispa.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from log_layout import open_log, transactions
from pipeline import sink_txn
from tests.pipeline.conftest import append, source_options

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.spark


def with_topics(log):
    log.create_topic("in", {"partitions": 2})
    log.create_topic("out", {"partitions": 3})
    return log


@pytest.fixture
def flog(tmp_path):
    return with_topics(open_log(str(tmp_path / "store")))


@pytest.fixture
def any_log(slog):
    """The local folder, the SeaweedFS S3 server and HDFS (marked s3 / hdfs)."""
    return with_topics(slog)


def run(spark, log, checkpoint: Path, **reader):
    """One AvailableNow run of the in -> out query (same checkpoint = a restart)."""
    opts = source_options(log, subscribe="in", startingOffsets="earliest", **reader)
    q = (spark.readStream.format("sparklog").options(**opts).load().select("key", "value")
         .writeStream.format("sparklog").options(**source_options(log, topic="out"))
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination()
    return q


def committed(spark, log, topic: str = "out"):
    """key, value of every read_committed record of ``topic``."""
    tables = [p.read_table(0, isolation_level="read_committed").select(["key", "value"])
              for p in log.partitions(topic)]
    return spark.createDataFrame(pa.concat_tables(tables).to_pandas(), "key binary, value binary")


def rows(spark, values):
    return spark.createDataFrame([(f"k{v}".encode(), f"v{v}".encode()) for v in values],
                                 "key binary, value binary")


def fill(log, partition: int, values):
    append(log, "in", partition, [f"v{v}" for v in values], keys=[f"k{v}" for v in values])


def check(actual, wanted):
    assert_df_equality(actual, wanted, ignore_row_order=True, ignore_nullable=True)


def query_tid(checkpoint: Path) -> str:
    from pipeline.sink_stream import query_id_from_checkpoint

    return f"spark-{query_id_from_checkpoint(str(checkpoint))}"


def test_restarts_write_each_row_once_one_transaction_per_batch(spark, any_log, tmp_path):
    flog, ck = any_log, tmp_path / "ck"
    fill(flog, 0, range(0, 30))
    fill(flog, 1, range(30, 50))
    q = run(spark, flog, ck, maxOffsetsPerTrigger=20)
    check(committed(spark, flog), rows(spark, range(50)))
    batches = [p["batchId"] for p in q.recentProgress if p["numInputRows"]]
    assert len(batches) == 3  # 50 offsets, 20 a batch
    assert sink_txn.last_batch(flog, query_tid(ck)) == batches[-1]
    fill(flog, 1, range(50, 60))
    run(spark, flog, ck)
    run(spark, flog, ck)  # nothing new: no batch, nothing written
    check(committed(spark, flog), rows(spark, range(60)))
    assert transactions.describe(flog, query_tid(ck))["state"] == "CompleteCommit"


def test_a_batch_replayed_after_its_commit_is_recognised_and_not_written_again(
        spark, flog, tmp_path):
    """A crash after the transaction committed and before Spark wrote its commit log:
    made here by deleting the last entry of the checkpoint's commit log."""
    ck = tmp_path / "ck"
    fill(flog, 0, range(10))
    run(spark, flog, ck)
    fill(flog, 1, range(10, 25))
    run(spark, flog, ck)
    last = max(int(f.name) for f in (ck / "commits").iterdir() if f.name.isdigit())
    (ck / "commits" / str(last)).unlink()
    (ck / "commits" / f".{last}.crc").unlink(missing_ok=True)  # Hadoop's checksum beside it
    q = run(spark, flog, ck)  # Spark replays batch `last` (its offsets are in the offset log)
    assert [p["batchId"] for p in q.recentProgress if p["numInputRows"]] == [last]
    check(committed(spark, flog), rows(spark, range(25)))


def test_memory_source_to_topic(spark, flog, tmp_path):
    """A streaming DataFrame that is not a sparklog topic (string key and value)."""
    df = spark.readStream.format("rate").option("rowsPerSecond", 1000).load() \
        .selectExpr("cast(value as string) as key", "cast(value as string) as value")
    q = (df.writeStream.format("sparklog").options(**source_options(flog, topic="out"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    out = committed(spark, flog)
    assert out.count() == out.distinct().count()  # nothing twice


def _wait_for(condition, proc, what: str, timeout_s: float = 240) -> None:
    """Poll ``condition`` until it holds (the child's progress is only observable in
    the store); fail if the child exits or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the query process exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        pause.wait(0.05)


@pytest.mark.slow
def test_query_killed_mid_batch_and_restarted_writes_each_row_once(spark, flog, tmp_path):
    ck = tmp_path / "ck"
    fill(flog, 0, range(40))
    append(flog, "in", 1, ["block"], keys=[b"blocker"])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "tests.pipeline.sink_stream_child",
                             flog.store.describe()["url"], str(ck)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        # mid-batch: partition 0's task appended all its rows (in more than one append)
        # in the open transaction while partition 1's task hangs on "block"
        _wait_for(lambda: sum(p.high_watermark() for p in flog.partitions("out")) >= 40,
                  proc, "rows appended")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert committed(spark, flog).count() == 0  # nothing of the open batch is visible
    assert any(p.snapshot().last_stable_offset < p.high_watermark()
               for p in flog.partitions("out"))  # the rows are there, held by the transaction
    run(spark, flog, ck)  # the restart aborts the killed run's transaction, replays
    wanted = rows(spark, range(40)).union(
        spark.createDataFrame([(b"blocker", b"block")], "key binary, value binary"))
    check(committed(spark, flog), wanted)
