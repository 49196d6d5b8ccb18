"""Topics as Delta tables on S3 (S3A, SeaweedFS) and on HDFS (a MiniDFSCluster).

The user's way, end to end: a compacted topic on a store on S3 or HDFS,
``sparklog materialize --once`` (its own Spark, which writes the Delta table beside
the log, ``<store>/_tables``), then ``sparklog sql --output json`` in another
process, whose rows must equal the topic's latest value per key (tombstones
deleting keys), computed here from the topic itself through the ``sparklog``
source and compared with chispa. Each CLI command starts a JVM, so these are slow;
the S3 case also fetches S3A's jars (hadoop-aws and the AWS SDK bundle) on the
machine's first run.
"""

from __future__ import annotations

import json
import uuid

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from log_layout import open_log
from tests.conftest import make_log_url
from tests.jobs.cli_proc import sparklog, text
from tests.pipeline.conftest import append, read

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _cli_env(backend: str, request) -> dict[str, str]:
    """What the CLI needs to reach the store and Spark the tables (settings and the
    environment, as a user would give them)."""
    if backend == "s3":
        s3 = request.getfixturevalue("s3_server")
        return {"SPARKLOG_STORE_S3_ENDPOINT_URL": s3.endpoint_url,
                "AWS_ACCESS_KEY_ID": s3.key, "AWS_SECRET_ACCESS_KEY": s3.secret,
                "AWS_DEFAULT_REGION": "us-east-1"}
    hdfs = request.getfixturevalue("hdfs_server")
    return {"SPARKLOG_STORE_HDFS_HTTP_PORT": str(hdfs.http_port),
            "SPARKLOG_STORE_HDFS_USER": "sparklog"}


@pytest.mark.parametrize("backend", ["s3", "hdfs"])
def test_a_compacted_topic_as_a_delta_table_beside_the_log(backend, request, tmp_path, spark,
                                                           monkeypatch):
    url, options = make_log_url(backend, request, tmp_path)
    log = open_log(url, storage_options=options)
    topic = f"kv_{uuid.uuid4().hex[:8]}"
    log.create_topic(topic, {"partitions": 2, "cleanup.policy": "compact"})
    append(log, topic, 0, ["a1", "b1", "c1"], keys=["a", "b", "c"])
    append(log, topic, 1, ["x1", "y1"], keys=["x", "y"])
    # updates, a tombstone, a key deleted then written again
    append(log, topic, 0, ["a2", None, "c2"], keys=["a", "b", "c"])
    append(log, topic, 1, [None, "x2", None, "z1"], keys=["y", "x", "x", "z"])
    append(log, topic, 1, ["x3"], keys=["x"])

    for key, value in _cli_env(backend, request).items():
        monkeypatch.setenv(key, value)
    run = sparklog("--store", url, "materialize", topic, "--table", topic, "--once",
                   "--value-format", "string", timeout=900)
    out, err = text(run)
    assert run.returncode == 0, err[-3000:]
    assert f"{topic}: 4 rows" in err  # a c x z

    # the table is a Delta table on the store itself, beside the log
    store = log.store
    assert store.list(f"_tables/{topic}/_delta_log"), "no Delta log on the store"

    run = sparklog("--store", url, "sql", f"SELECT key, value FROM {topic}", "--output", "json",
                   timeout=900)
    out, err = text(run)
    assert run.returncode == 0, err[-3000:]
    got = spark.createDataFrame([json.loads(line) for line in out.splitlines() if line],
                                "key string, value string")

    records = read(spark, log, subscribe=topic).selectExpr(
        "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "offset", "partition")
    # keys never span partitions here, so the highest offset is the newest record
    latest = records.groupBy("key").agg(F.max_by("value", "offset").alias("value"),
                                        F.max_by(F.col("value").isNull(), "offset").alias("gone"))
    want = latest.where("NOT gone").select("key", "value")
    assert sorted(want.toPandas()["key"]) == ["a", "c", "x", "z"]
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
