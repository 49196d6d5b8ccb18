"""``df.write.format("sparklog")``: the sink's columns and options, partitioning, atomicity.

Rows written with the sink are read back with ``format("sparklog")`` and compared with
chispa; the store is a local folder (Spark's Python workers must reach it).
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from log_layout import open_log
from log_layout import transactions
from log_layout.partitioner import key_partitions, murmur2_column, partition_for_key
from log_layout.partitioner import murmur2 as scalar_murmur2
from pipeline.errors import InvalidSinkOption
from pipeline.sink import FLUSH_ROWS
from pipeline.sink_options import parse_sink
from pipeline.sink_partition import Assigner
from tests.pipeline.conftest import source_options

HEADERS = "array<struct<key: string, value: binary>>"


@pytest.fixture
def flog(tmp_path):
    return open_log(str(tmp_path / "store"))


def sink_options(log, **more) -> dict[str, str]:
    return source_options(log, **more)


def write(df, log, **options):
    df.write.format("sparklog").options(**sink_options(log, **options)).mode("append").save()


def read_back(spark, log, topic: str, headers: bool = False):
    cols = "key, value, partition" + (", headers" if headers else "")
    return (spark.read.format("sparklog")
            .options(**source_options(log, subscribe=topic,
                                      includeHeaders=str(headers).lower()))
            .load().selectExpr(*cols.split(", ")))


def check(actual, wanted):
    assert_df_equality(actual, wanted, ignore_row_order=True, ignore_nullable=True)


# -- the partitioner (no Spark) -------------------------------------------------------------
def test_vectorised_murmur2_is_kafkas_bit_for_bit():
    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 41))) for _ in range(2000)]
    keys += [b"", b"a", b"ab", b"abc", b"abcd", b"hello world", None]
    got = murmur2_column(pa.array(keys, pa.binary()))
    assert [int(g) for g, k in zip(got, keys) if k is not None] == \
        [scalar_murmur2(k) for k in keys if k is not None]
    sliced = pa.array(keys, pa.binary()).slice(100, 50)
    assert murmur2_column(sliced).tolist() == [scalar_murmur2(k) for k in keys[100:150]]
    assert key_partitions(pa.array(keys[:-1], pa.binary()), 7).tolist() == \
        [partition_for_key(k, 7) for k in keys[:-1]]


def test_keyless_rows_are_sticky_per_batch_and_move_on():
    a = Assigner(first_sticky=1)
    nulls = pa.nulls(5, pa.binary())
    assert a.assign("t", 3, nulls, None).tolist() == [1] * 5
    assert a.assign("t", 3, nulls, None).tolist() == [2] * 5
    assert a.assign("t", 3, nulls, None).tolist() == [0] * 5
    explicit = pa.array([None, 2, None, 0, None], pa.int32())
    keys = pa.array([b"k", None, None, b"k", b"x"], pa.binary())
    got = a.assign("t", 3, keys, explicit).tolist()
    assert got == [partition_for_key(b"k", 3), 2, 1, 0, partition_for_key(b"x", 3)]


# -- options (no Spark) ------------------------------------------------------------------------
def test_sink_options_take_topic_store_and_kafka_options(flog):
    opts = parse_sink({"topic": "t", "store": "/x", "kafka.bootstrap.servers": "h:9092",
                       "checkpointLocation": "/ck", "transaction.timeout.ms": "60000"})
    assert (opts.topic, opts.store_url, opts.transaction_timeout_ms,
            opts.checkpoint_location) == ("t", "/x", 60000, "/ck")
    with pytest.raises(InvalidSinkOption,
                       match="'subscribe': is not an option of the sparklog sink"):
        parse_sink({"store": "/x", "subscribe": "t"})
    with pytest.raises(InvalidSinkOption, match="transaction.timeout.ms"):
        parse_sink({"store": "/x", "transaction.timeout.ms": "soon"})
    with pytest.raises(InvalidSinkOption, match="'topic' '  ': names no topic"):
        parse_sink({"store": "/x", "topic": "  "})


# -- Spark ---------------------------------------------------------------------------------
@pytest.mark.spark
def test_round_trip_keys_values_headers_partitions(spark, flog):
    flog.create_topic("out", {"partitions": 3})
    rows = [(b"k1", b"v1", 2, [("h", b"1")]), (None, b"v2", 0, []), (b"k3", None, 1, None),
            (b"k4", b"v4", 2, [("a", b"x"), ("b", None)])]
    schema = f"key binary, value binary, partition int, headers {HEADERS}"
    write(spark.createDataFrame(rows, schema), flog, topic="out")
    # no headers reads as null, written [] or null: Kafka has no difference between them,
    # and Spark's Kafka source gives null
    wanted = [(k, v, p, h or None) for k, v, p, h in rows]
    check(read_back(spark, flog, "out", headers=True), spark.createDataFrame(wanted, schema))


@pytest.mark.spark
def test_default_partitioner_is_kafkas_murmur2_and_strings_are_utf8(spark, flog):
    flog.create_topic("keyed", {"partitions": 5})
    keys = [f"user-{i}" for i in range(40)]
    df = spark.createDataFrame([(k, f"v{i}") for i, k in enumerate(keys)],
                               "key string, value string")
    write(df, flog, topic="keyed")
    wanted = spark.createDataFrame(
        [(k.encode(), f"v{i}".encode(), partition_for_key(k.encode(), 5))
         for i, k in enumerate(keys)], "key binary, value binary, partition int")
    check(read_back(spark, flog, "keyed"), wanted)


@pytest.mark.spark
def test_topic_column_routes_rows_and_the_option_wins(spark, flog):
    flog.create_topic("a", {"partitions": 1})
    flog.create_topic("b", {"partitions": 2})
    df = spark.createDataFrame([("a", "1", 0), ("b", "2", 1), ("b", "3", 0)],
                               "topic string, value string, partition int")
    write(df, flog)
    check(read_back(spark, flog, "a").select("value"),
          spark.createDataFrame([(b"1",)], "value binary"))
    check(read_back(spark, flog, "b").select("value", "partition"),
          spark.createDataFrame([(b"2", 1), (b"3", 0)], "value binary, partition int"))
    write(df.select("topic", "value"), flog, topic="a")  # every row to a, column ignored
    check(read_back(spark, flog, "a").select("value"),
          spark.createDataFrame([(b"1",), (b"1",), (b"2",), (b"3",)], "value binary"))


def failure(excinfo) -> str:
    return str(excinfo.value)


@pytest.mark.spark
@pytest.mark.parametrize("ddl, options, column, says", [
    ("key string", {"topic": "t"}, "value", "is required"),
    ("value int", {"topic": "t"}, "value", "must be binary or string, not int"),
    ("key int, value string", {"topic": "t"}, "key", "must be binary or string, not int"),
    ("value string", {}, "topic", "is required when the topic option is not set"),
    ("topic int, value string", {}, "topic", "must be string, not int"),
    ("value string, partition bigint", {"topic": "t"}, "partition", "must be int, not bigint"),
    ("value string, headers array<string>", {"topic": "t"}, "headers",
     "must be array<struct<key:string,value:binary>>"),
])
def test_bad_columns_are_refused_before_anything_is_written(spark, flog, ddl, options, column,
                                                            says):
    flog.create_topic("t", {"partitions": 2})
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception) as e:
        write(df, flog, **options)
    assert f"sparklog sink column '{column}'" in failure(e) and says in failure(e)


@pytest.mark.spark
def test_unknown_topic_bad_partition_and_overwrite_are_refused(spark, flog):
    flog.create_topic("t", {"partitions": 2})
    df = spark.createDataFrame([("v", 0)], "value string, partition int")
    with pytest.raises(Exception, match="nope"):
        write(df, flog, topic="nope")
    with pytest.raises(Exception, match="'partition': 5 is out of range: topic 't' has "
                                        "partitions 0 to 1"):
        write(df.selectExpr("value", "5 as partition"), flog, topic="t")
    both = spark.createDataFrame([("t", "v"), ("ghost", "w")], "topic string, value string")
    with pytest.raises(Exception, match="ghost"):
        write(both.coalesce(1), flog)  # an unknown topic in the column: the task fails
    with pytest.raises(Exception, match="sparklog sink option 'mode' 'overwrite'"):
        df.write.format("sparklog").options(**sink_options(flog, topic="t")) \
            .mode("overwrite").save()
    with pytest.raises(Exception, match="'subscribe'.*not an option of the sparklog sink"):
        write(df, flog, topic="t", subscribe="t")
    assert committed_rows(flog, "t", 0) == committed_rows(flog, "t", 1) == 0


def committed_rows(log, topic: str, partition: int) -> int:
    return log.partition(topic, partition).read_table(
        0, isolation_level="read_committed").num_rows


@pytest.mark.spark
def test_a_failed_job_leaves_nothing_visible_to_read_committed(spark, flog):
    flog.create_topic("t", {"partitions": 1})
    # one task: its first FLUSH_ROWS rows are appended (a segment), then a later
    # batch holds a partition out of range and the task, so the job, fails
    n = FLUSH_ROWS + 1000
    df = spark.range(0, n, 1, 1).selectExpr(
        "cast(id as string) as value", f"if(id = {n - 1}, 7, 0) as partition")
    with pytest.raises(Exception, match="out of range"):
        write(df, flog, topic="t")
    part = flog.partition("t", 0)
    assert part.high_watermark() >= FLUSH_ROWS  # the rows were appended ...
    assert committed_rows(flog, "t", 0) == 0     # ... and aborted with the job
    assert part.read_table(0).num_rows == FLUSH_ROWS  # read_uncommitted: aborted rows too
    write(spark.createDataFrame([("after",)], "value string"), flog, topic="t")
    assert committed_rows(flog, "t", 0) == 1


@pytest.mark.spark
def test_a_job_is_one_transaction_committed_at_the_end(spark, flog):
    flog.create_topic("t", {"partitions": 3})
    df = spark.range(0, 3000, 1, 3).selectExpr("cast(id as string) as key",
                                                "cast(id as string) as value")
    write(df, flog, topic="t")
    assert sum(committed_rows(flog, "t", p) for p in range(3)) == 3000
    tids = [t for t in transactions.list_transactions(flog) if t.startswith("spark-")]
    assert len(tids) == 1 and transactions.describe(flog, tids[0])["state"] == "CompleteCommit"


@pytest.mark.spark
def test_the_default_save_mode_is_refused_by_spark_with_a_clear_message(spark, flog):
    """Spark's Kafka sink appends under ErrorIfExists; Spark refuses that mode for every
    Python data source before asking it (UNSUPPORTED_DATA_SOURCE_SAVE_MODE)."""
    flog.create_topic("t", {"partitions": 1})
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match='Please use either the "Append"'):
        df.write.format("sparklog").options(**sink_options(flog, topic="t")).save()
    assert committed_rows(flog, "t", 0) == 0


@pytest.mark.spark
def test_tasks_append_beside_a_live_gateway_without_fencing_it(spark, flog):
    """The sink appends at the current leader epoch: the gateway's claimed writer goes on."""
    flog.create_topic("t", {"partitions": 1})
    gateway = flog.partition("t", 0).claim("gateway-1")
    gateway.append(pa.table({"value": [b"before"]}))
    write(spark.createDataFrame([("spark",)], "value string"), flog, topic="t")
    gateway.append(pa.table({"value": [b"after"]}))  # not fenced
    values = flog.partition("t", 0).read_table(0, isolation_level="read_committed")
    assert values.column("value").to_pylist() == [b"before", b"spark", b"after"]


@pytest.mark.spark
def test_many_tasks_of_one_job_into_one_partition(spark, flog):
    """Tasks share the job's producer: each append takes the producer's next sequence
    number, and one that lost it to another task's append takes the one after."""
    flog.create_topic("t", {"partitions": 1})
    df = spark.range(0, 4000, 1, 8).selectExpr("cast(id as string) as value")
    write(df, flog, topic="t")
    got = flog.partition("t", 0).read_table(0, isolation_level="read_committed")
    assert sorted(int(v) for v in got.column("value").to_pylist()) == list(range(4000))


@pytest.mark.spark
def test_round_trip_on_every_store(spark, slog):
    """The local folder, the SeaweedFS S3 server and HDFS (marked s3 / hdfs)."""
    slog.create_topic("t", {"partitions": 2})
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(50)],
                               "key string, value string")
    write(df, slog, topic="t")
    wanted = spark.createDataFrame([(f"k{i}".encode(), f"v{i}".encode(),
                                     partition_for_key(f"k{i}".encode(), 2)) for i in range(50)],
                                   "key binary, value binary, partition int")
    check(read_back(spark, slog, "t"), wanted)
