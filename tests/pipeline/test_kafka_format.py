"""Spark's own Kafka connector (``format("kafka")``, kafka-clients 3.9) against the Kafka
listener of a real gateway process: batch write, batch read with headers, ``readStream``
with ``availableNow``, ``writeStream`` from a sparklog stream, starting and ending offsets
as JSON and by timestamp, records deleted (DeleteRecords) seen as data loss; each compared
with chispa to what ``format("sparklog")`` reads from the same store, or to the exact
records produced.
And the issue's cross test: one record produced over the Kafka protocol is read the same
over REST, by sparklog's ``Consumer``, by ``format("sparklog")`` and by ``format("kafka")``,
and the reverse (produced over HTTP).

The session's shared gateway; topics are fresh per test. The connector's jars are on every
session's classpath (``pipeline.spark.packages``).
"""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from chispa import assert_df_equality

from ingest_gateway.client import Consumer
from jobs.gateway_process import wait_for
from tests.pipeline.conftest import read, source_options, ts

pytestmark = pytest.mark.spark
ck = pytest.importorskip("confluent_kafka")

BASE_TS = 1_700_000_000_000
#: the columns ``format("kafka")`` and ``format("sparklog")`` share (with headers)
COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
           "headers"]


@pytest.fixture(scope="session")
def gateway(shared_gateway):
    """The session's shared gateway with its Kafka listener (topics are per test)."""
    return shared_gateway


@pytest.fixture(scope="session")
def klog(shared_log):
    return shared_log


def new_topic(log, partitions: int) -> str:
    name = f"sk-{uuid.uuid4().hex[:10]}"
    log.create_topic(name, {"partitions": partitions})
    return name


def kafka_read(spark, gw, topic: str, **options):
    """``spark.read.format("kafka")`` of ``topic`` on the gateway's listener."""
    options = {"subscribe": topic, **options}
    return (spark.read.format("kafka").option("kafka.bootstrap.servers", gw.bootstrap)
            .options(**{k: str(v) for k, v in options.items() if v is not None}).load())


def produce(gw, topic: str, recs: list[tuple]) -> list[tuple[int, int]]:
    """confluent-kafka at acks=all, idempotent; (partition, offset) of each record."""
    p = ck.Producer({"bootstrap.servers": gw.bootstrap, "acks": "all",
                     "enable.idempotence": True, "linger.ms": 5})
    placed: list = [None] * len(recs)

    def report(i: int):
        def done(err, m):
            assert err is None, err
            placed[i] = (m.partition(), m.offset())
        return done

    for i, (part, key, value, headers, stamp) in enumerate(recs):
        p.produce(topic, key=key, value=value, headers=headers, timestamp=stamp,
                  partition=part, on_delivery=report(i))
    assert p.flush(30) == 0
    return placed


def rows(topic: str, recs, placed) -> list[tuple]:
    """The rows both Spark sources must return for ``recs`` placed at ``placed``: Spark's
    Kafka source gives no headers as null, not as an empty list."""
    return [(k, v, topic, p, o, ts(stamp), 0, [(hk, hv) for hk, hv in h] or None)
            for (_, k, v, h, stamp), (p, o) in zip(recs, placed)]


SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int, "
          "headers array<struct<key: string, value: binary>>")


def sparklog_read(spark, log, topic: str, **options):
    """``format("sparklog")`` of ``topic`` with headers."""
    return read(spark, log, subscribe=topic, includeHeaders="true", **options)


def check(actual, spark, wanted_rows) -> None:
    wanted = spark.createDataFrame(wanted_rows, SCHEMA)
    assert_df_equality(actual.select(*COLUMNS), wanted, ignore_row_order=True,
                       ignore_nullable=True)


def sample(n: int, partitions: int) -> list[tuple]:
    """(partition, key, value, headers, timestamp ms): a null key, a tombstone, repeated
    and null-valued headers, and no headers."""
    out = []
    for i in range(n):
        key = None if i == 3 else b"k%d" % i
        value = None if i == 5 else b"v%d-" % i + bytes(range(i % 7))
        headers = [] if i % 3 == 0 else [("h", b"x%d" % i), ("h", None), ("e", b"")]
        out.append((i % partitions, key, value, headers, BASE_TS + i))
    return out


def test_batch_write_lands_in_sparklog(spark, gateway, klog):
    topic = new_topic(klog, 2)
    data = [(b"k%d" % i, b"v%d" % i, i % 2, [("src", b"spark")]) for i in range(12)]
    df = spark.createDataFrame(data, "key binary, value binary, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    (df.write.format("kafka").option("kafka.bootstrap.servers", gateway.bootstrap)
     .option("topic", topic).save())
    got = read(spark, klog, subscribe=topic, includeHeaders="true")
    # per partition the offsets follow Spark's write order; compare what was written
    assert sorted(r.offset for r in got.collect() if r.partition == 0) == list(range(6))
    assert_df_equality(
        got.select("key", "value", "partition", "headers"),
        spark.createDataFrame(data, "key binary, value binary, partition int, "
                                    "headers array<struct<key: string, value: binary>>"),
        ignore_row_order=True, ignore_nullable=True)
    # and Spark reads back over the protocol exactly what sparklog's source reads
    assert_df_equality(kafka_read(spark, gateway, topic, includeHeaders="true")
                       .select(*COLUMNS), got.select(*COLUMNS), ignore_row_order=True,
                       ignore_nullable=True)


def test_batch_read_with_headers_and_offset_json(spark, gateway, klog):
    topic = new_topic(klog, 2)
    recs = sample(10, 2)
    placed = produce(gateway, topic, recs)
    check(kafka_read(spark, gateway, topic, includeHeaders="true"), spark,
          rows(topic, recs, placed))
    # offsets as JSON: partition 0 from 1 to 3, partition 1 from earliest (-2) to latest (-1)
    ranged = kafka_read(spark, gateway, topic, includeHeaders="true",
                        startingOffsets=json.dumps({topic: {"0": 1, "1": -2}}),
                        endingOffsets=json.dumps({topic: {"0": 3, "1": -1}}))
    wanted = [r for r in rows(topic, recs, placed)
              if (r[3] == 0 and 1 <= r[4] < 3) or r[3] == 1]
    check(ranged, spark, wanted)
    check(sparklog_read(spark, klog, topic,
                        startingOffsets=json.dumps({topic: {"0": 1, "1": -2}}),
                        endingOffsets=json.dumps({topic: {"0": 3, "1": -1}})), spark, wanted)


def test_read_stream_available_now_into_parquet(spark, gateway, klog, tmp_path):
    topic = new_topic(klog, 2)
    recs = sample(8, 2)
    placed = produce(gateway, topic, recs)
    stream = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", gateway.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("includeHeaders", "true").load())
    out = str(tmp_path / "out")

    def run_available_now() -> None:
        query = (stream.writeStream.format("parquet").option("path", out)
                 .option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None

    run_available_now()
    check(spark.read.parquet(out), spark, rows(topic, recs, placed))
    # a second run from the checkpoint adds only what came after: exactly once in all
    more = [(p, k, v, h, s + 100) for p, k, v, h, s in sample(4, 2)]
    placed_more = produce(gateway, topic, more)
    run_available_now()
    check(spark.read.parquet(out), spark,
          rows(topic, recs, placed) + rows(topic, more, placed_more))


def test_stream_write_from_sparklog_and_read_by_timestamp(spark, gateway, klog, tmp_path):
    # a sparklog topic copied into another through the Kafka listener by a Spark stream
    # (readStream sparklog -> writeStream kafka); the first read back with assign and
    # startingOffsetsByTimestamp
    source, target = new_topic(klog, 2), new_topic(klog, 2)
    recs = sample(10, 2)
    placed = produce(gateway, source, recs)
    query = (spark.readStream.format("sparklog")
             .options(**source_options(klog, subscribe=source, includeHeaders="true",
                                     startingOffsets="earliest")).load()
             .select("key", "value", "partition", "headers", "timestamp")
             .writeStream.format("kafka")
             .option("kafka.bootstrap.servers", gateway.bootstrap).option("topic", target)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None
    # Spark's Kafka sink writes no timestamp column (the producer stamps CreateTime):
    # all else is the same, partition for partition, offset for offset
    copied = kafka_read(spark, gateway, target, includeHeaders="true")
    assert_df_equality(copied.select(*[c for c in COLUMNS if c != "timestamp"]),
                       spark.createDataFrame([(k, v, target, p, o, 0, h) for k, v, _, p, o, _, _, h
                                              in rows(source, recs, placed)],
                                             SCHEMA.replace("timestamp timestamp, ", "")),
                       ignore_row_order=True, ignore_nullable=True)
    # assign both partitions from the first offset at or after a time (ListOffsets by time)
    later = kafka_read(spark, gateway, source, includeHeaders="true", subscribe=None,
                       assign=json.dumps({source: [0, 1]}),
                       startingOffsetsByTimestamp=json.dumps(
                           {source: {"0": BASE_TS + 5, "1": BASE_TS + 5}}))
    check(later, spark, [r for r in rows(source, recs, placed) if r[5] >= ts(BASE_TS + 5)])


def test_deleted_records_are_data_loss_to_spark(spark, gateway, klog):
    # DeleteRecords (confluent-kafka's AdminClient) moves the log start to 3: Spark's
    # earliest is 3, an older start is data loss (an error, or skipped when allowed)
    topic = new_topic(klog, 1)
    recs = [(0, b"k%d" % i, b"v%d" % i, [("i", b"%d" % i)], BASE_TS + i) for i in range(6)]
    placed = produce(gateway, topic, recs)
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": gateway.bootstrap})
    (done,) = admin.delete_records([ck.TopicPartition(topic, 0, 3)]).values()
    assert done.result(timeout=30).low_watermark == 3
    kept = rows(topic, recs, placed)[3:]
    check(kafka_read(spark, gateway, topic, includeHeaders="true"), spark, kept)
    old = json.dumps({topic: {"0": 1}})
    check(kafka_read(spark, gateway, topic, includeHeaders="true", startingOffsets=old,
                     failOnDataLoss="false"), spark, kept)
    with pytest.raises(Exception, match=r"Some data may have been lost(.|\n)*offset \[1, 6\)"):
        kafka_read(spark, gateway, topic, startingOffsets=old).collect()


def _rest_records(gw, topic: str, count: int) -> list[tuple]:
    status, body, _ = gw.request(
        "GET", f"/topics/{topic}/partitions/0/messages?offset=0&count={count}",
        headers={"Accept": "application/vnd.kafka.binary.v2+json"})
    assert status == 200, body

    def b64(v):
        return None if v is None else base64.b64decode(v)

    return [(r["offset"], b64(r["key"]), b64(r["value"]),
             [(h["key"], b64(h["value"])) for h in r["headers"]], r["timestamp"])
            for r in body]


def _consumer_records(gw, topic: str, count: int) -> list[tuple]:
    consumer = Consumer(gateway=gw.url, auto_offset_reset="earliest", enable_auto_commit=False)
    seen: list = []
    try:
        consumer.assign([(topic, 0)])
        wait_for(lambda: seen.extend(consumer.poll(0.5)) or len(seen) >= count, timeout=30,
                 interval=0, what="the Consumer's records")
    finally:
        consumer.close()
    return [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in seen]


def _spark_records(df) -> list[tuple]:
    return sorted((r.offset, r.key and bytes(r.key), r.value and bytes(r.value),
                   [(h.key, h.value and bytes(h.value)) for h in r.headers or ()],
                   int((r.timestamp - ts(0)).total_seconds() * 1000)) for r in df.collect())


def _read_everywhere(spark, gw, log, topic: str, count: int) -> dict[str, list]:
    return {"rest": _rest_records(gw, topic, count),
            "consumer": _consumer_records(gw, topic, count),
            "sparklog": _spark_records(sparklog_read(spark, log, topic)),
            "kafka": _spark_records(kafka_read(spark, gw, topic, includeHeaders="true"))}


def test_kafka_produced_read_identically_everywhere(spark, gateway, klog):
    topic = new_topic(klog, 1)
    recs = [(0, b"k%d" % i, b"v%d" % i, [("h", b"%d" % i), ("h", b"again")], BASE_TS + i)
            for i in range(3)]
    produce(gateway, topic, recs)
    wanted = [(i, k, v, h, stamp) for i, (_, k, v, h, stamp) in enumerate(recs)]
    assert _read_everywhere(spark, gateway, klog, topic, 3) == \
        {"rest": wanted, "consumer": wanted, "sparklog": wanted, "kafka": wanted}


def test_rest_produced_read_identically_everywhere(spark, gateway, klog):
    topic = new_topic(klog, 1)
    wanted = [(i, b"rk%d" % i, b"rv%d" % i, [("src", b"rest")], BASE_TS + i) for i in range(3)]
    body = {"records": [{"key": base64.b64encode(k).decode(), "value": base64.b64encode(v).decode(),
                         "timestamp": stamp,
                         "headers": [{"key": "src", "value": base64.b64encode(b"rest").decode()}]}
                        for _, k, v, _, stamp in wanted]}
    status, answer, _ = gateway.request(
        "POST", f"/topics/{topic}/partitions/0", body=body,
        content_type="application/vnd.kafka.binary.v2+json")
    assert status == 200, answer
    got = _read_everywhere(spark, gateway, klog, topic, 3)
    # and a Kafka client reads the same
    c = ck.Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "unused",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    seen: list = []
    try:
        def more() -> bool:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                seen.append((m.offset(), m.key(), m.value(), list(m.headers() or []),
                             m.timestamp()[1]))
            return len(seen) >= 3
        wait_for(more, timeout=30, interval=0, what="confluent-kafka's records")
    finally:
        c.close()
    got["confluent"] = seen
    assert got == {name: wanted for name in ("rest", "consumer", "sparklog", "kafka",
                                             "confluent")}


def test_sparklog_gives_no_headers_as_null(spark, gateway, klog):
    topic = new_topic(klog, 1)
    # one batch, so one segment: a record with headers beside one without (a segment of
    # records none of which has headers stores null, and reads as null)
    produce(gateway, topic, [(0, b"k0", b"v", [("h", b"1")], BASE_TS),
                                   (0, b"k1", b"v", [], BASE_TS)])
    kafka = sorted((r.offset, r.headers) for r in kafka_read(
        spark, gateway, topic, includeHeaders="true").collect())
    assert kafka[1] == (1, None)
    sparklog = sorted((r.offset, r.headers) for r in read(
        spark, klog, subscribe=topic, includeHeaders="true").collect())
    assert sparklog == kafka
