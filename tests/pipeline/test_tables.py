"""Topics as Delta tables: append for event topics, MERGE for compacted ones, exactly once
across restarts (including a crash between the Delta commit and the checkpoint commit)."""

from __future__ import annotations

import json
import os

import pytest
from chispa import assert_df_equality

from jobs.cli import main
from pipeline import tables
from pipeline.errors import TableError, UnusableSchema
from tests.pipeline.conftest import append

pytestmark = pytest.mark.spark


def forget_last_commit(checkpoint: str) -> int:
    """Make the last micro-batch look uncommitted, as if the driver died after the sink
    wrote it and before the checkpoint recorded it: Spark replays it on restart."""
    folder = os.path.join(checkpoint, "commits")
    batches = sorted(int(n) for n in os.listdir(folder) if n.isdigit())
    os.remove(os.path.join(folder, str(batches[-1])))
    crc = os.path.join(folder, f".{batches[-1]}.crc")
    if os.path.exists(crc):
        os.remove(crc)
    return batches[-1]


def check(actual, wanted):
    assert_df_equality(actual, wanted, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.slow
def test_event_topic_appends_json_columns_exactly_once(spark, local_log, tmp_path):
    local_log.create_topic("clicks", {"partitions": 2})
    events = [("u1", 1), ("u2", 2), ("u1", 3), ("u3", 4), ("u2", 5)]

    def produce(rows, p):
        append(local_log, "clicks", p, [json.dumps({"user": u, "n": n}) for u, n in rows],
               keys=[u for u, _ in rows])

    produce(events[:3], 0)
    produce(events[3:], 1)
    warehouse = str(tmp_path / "wh")
    kwargs = dict(log=local_log, value_format="json", warehouse=warehouse,
                  options={"maxOffsetsPerTrigger": "3"})
    q = tables.materialize(spark, "clicks", "clicks_t", **kwargs)  # schema inferred
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [3, 2]
    more = [("u4", 6), ("u1", 7)]
    produce(more, 0)
    forget_last_commit(os.path.join(warehouse, "_checkpoints", "clicks_t"))
    tables.materialize(spark, "clicks", "clicks_t", **kwargs)  # restart: replays one batch

    got = spark.table("clicks_t")
    assert got.columns == ["key", "n", "user", "topic", "partition", "offset", "timestamp",
                           "timestampType"]
    want = spark.createDataFrame([(u, n, u) for u, n in events + more], "key string, n long, user string")
    check(got.select("key", "n", "user"), want)
    assert got.select("partition", "offset").distinct().count() == 7


@pytest.mark.slow
def test_compacted_topic_keeps_latest_value_per_key_and_tombstones_delete(spark, local_log,
                                                                        tmp_path):
    local_log.create_topic("users", {"partitions": 1, "cleanup.policy": "compact"})
    append(local_log, "users", 0, ["a", "b", "c", "d"], keys=["k1", "k2", "k1", "k3"])
    warehouse = str(tmp_path / "wh")
    kwargs = dict(log=local_log, value_format="string", warehouse=warehouse)
    tables.materialize(spark, "users", "users_t", **kwargs)  # one batch: k1 twice in it
    check(spark.table("users_t").select("key", "value", "offset"),
          spark.createDataFrame([("k1", "c", 2), ("k2", "b", 1), ("k3", "d", 3)],
                                "key string, value string, offset long"))
    # in one batch: a tombstone, an update, a key deleted then re-added, a new key then
    # its tombstone; then a crash after the MERGE and before the checkpoint commit
    append(local_log, "users", 0, [None, "e", "f", None, "g"], keys=["k2", "k3", "k4", "k1", "k1"])
    append(local_log, "users", 0, [None], keys=["k4"])
    tables.materialize(spark, "users", "users_t", **kwargs)
    forget_last_commit(os.path.join(warehouse, "_checkpoints", "users_t"))
    tables.materialize(spark, "users", "users_t", **kwargs)
    check(spark.table("users_t").select("key", "value", "offset"),
          spark.createDataFrame([("k1", "g", 8), ("k3", "e", 5)],
                                "key string, value string, offset long"))


def test_sql_command_sees_topics_and_tables_in_a_new_catalog(spark, local_log, tmp_path, capsys):
    local_log.create_topic("orders", {"partitions": 1})
    append(local_log, "orders", 0, ['{"sku": "x", "qty": 2}', '{"sku": "y", "qty": 5}'])
    store = local_log.store.describe()["url"]
    assert main(["--store", store, "materialize", "orders", "--table", "orders_t", "--once",
                 "--value-format", "json", "--schema", "sku STRING, qty INT"]) == 0
    spark.sql("DROP TABLE orders_t")  # an external table: the data stays, the name goes
    assert main(["--store", store, "sql",
                 "SELECT t.sku, t.qty, o.offset FROM orders_t t JOIN orders o "
                 "ON t.offset = o.offset ORDER BY t.qty"]) == 0
    out = capsys.readouterr().out
    assert "x" in out and "y" in out and "5" in out
    assert tables.register_tables(spark, tables.default_warehouse(local_log)) == ["orders_t"]


def test_bad_names_and_formats_are_refused(spark, local_log):
    local_log.create_topic("t", {"partitions": 1})
    with pytest.raises(TableError, match="letters, digits and underscores"):
        tables.materialize(spark, "t", "no-dashes", log=local_log)
    with pytest.raises(TableError, match="value_format must be one of"):
        tables.materialize(spark, "t", "ok", log=local_log, value_format="thrift")
    with pytest.raises(UnusableSchema, match="'t-value': no such subject"):  # before Spark
        tables.materialize(spark, "t", "ok", log=local_log, value_format="avro")
    with pytest.raises(TableError, match="cannot infer a JSON schema"):
        tables.materialize(spark, "t", "ok", log=local_log, value_format="json")


def test_continuous_materialization_follows_the_topic(spark, local_log, tmp_path):
    local_log.create_topic("feed", {"partitions": 1})
    append(local_log, "feed", 0, ["a", "b"])
    query = tables.materialize(spark, "feed", "feed_t", log=local_log, once=False,
                               value_format="string", warehouse=str(tmp_path / "wh"))
    try:
        query.processAllAvailable()  # waits for the condition, not for time
        append(local_log, "feed", 0, ["c"])
        query.processAllAvailable()
        check(spark.table("feed_t").select("value", "offset"),
              spark.createDataFrame([("a", 0), ("b", 1), ("c", 2)], "value string, offset long"))
    finally:
        query.stop()


def test_materialize_command_refuses_an_unknown_topic_before_starting_spark(local_log, capsys):
    store = local_log.store.describe()["url"]
    assert main(["--store", store, "materialize", "nope", "--table", "t", "--once"]) == 2
    assert "topic 'nope' does not exist" in capsys.readouterr().err
