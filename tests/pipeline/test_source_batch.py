"""Batch reads through ``format("sparklog")``, compared with chispa to what was written.

Each partition holds two segments: offsets 0-2 (timestamps 1000-1002 ms) and
3-4 (timestamps 2000-2001 ms); topics ``a`` (2 partitions), ``b`` (1) and
``other`` (1).
"""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from pipeline.source import HEADERS_DDL, SCHEMA_DDL
from tests.pipeline.conftest import append, read, ts

pytestmark = pytest.mark.spark

TOPICS = {"a": 2, "b": 1, "other": 1}


def _records(topic: str, p: int) -> list[tuple[int, str, str, int]]:
    """(offset, key, value, timestamp ms) of one partition of the fixture."""
    stamps = [1000, 1001, 1002, 2000, 2001]
    return [(i, f"k{i}", f"{topic}{p}-{i}", stamps[i]) for i in range(5)]


@pytest.fixture
def world(slog):
    for topic, n in TOPICS.items():
        slog.create_topic(topic, {"partitions": n})
        for p in range(n):
            recs = _records(topic, p)
            for chunk in (recs[:3], recs[3:]):
                append(slog, topic, p, [r[2] for r in chunk], keys=[r[1] for r in chunk],
                       timestamps=[r[3] for r in chunk])
    return slog


def expected(spark, ranges: dict[tuple[str, int], tuple[int, int]]):
    """The rows of ``[start, end)`` of each partition, as the source must return them."""
    rows = [(k.encode(), v.encode(), t, p, o, ts(ms), 0)
            for (t, p), (start, end) in ranges.items()
            for o, k, v, ms in _records(t, p) if start <= o < end]
    return spark.createDataFrame(rows, SCHEMA_DDL)


def check(actual, wanted):
    assert_df_equality(actual, wanted, ignore_row_order=True, ignore_nullable=True)


def test_default_reads_everything_with_kafka_schema(spark, world):
    df = read(spark, world, subscribe="a")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
    check(df, expected(spark, {("a", 0): (0, 5), ("a", 1): (0, 5)}))
    # earliest/latest spelled out mean the same; kafka.* options are accepted and ignored
    df = read(spark, world, subscribe="a", startingOffsets="earliest", endingOffsets="latest",
              **{"kafka.bootstrap.servers": "localhost:9092"})
    check(df, expected(spark, {("a", 0): (0, 5), ("a", 1): (0, 5)}))


def test_offsets_json_with_specific_earliest_and_latest(spark, world):
    df = read(spark, world, subscribe="a",
              startingOffsets='{"a": {"0": 1, "1": -2}}', endingOffsets='{"a": {"0": 4, "1": -1}}')
    check(df, expected(spark, {("a", 0): (1, 4), ("a", 1): (0, 5)}))
    # a range inside one segment, and an empty one
    df = read(spark, world, subscribe="b",
              startingOffsets='{"b": {"0": 3}}', endingOffsets='{"b": {"0": 4}}')
    check(df, expected(spark, {("b", 0): (3, 4)}))
    assert read(spark, world, subscribe="b", startingOffsets='{"b": {"0": 5}}').count() == 0


def test_by_timestamp(spark, world):
    # the first record at or after 1001 ms is offset 1; at or after 1500 ms offset 3
    df = read(spark, world, subscribe="a", startingTimestamp=1001, endingTimestamp=2001)
    check(df, expected(spark, {("a", 0): (1, 4), ("a", 1): (1, 4)}))
    df = read(spark, world, subscribe="a",
              startingOffsetsByTimestamp='{"a": {"0": 1500, "1": 0}}',
              endingOffsetsByTimestamp='{"a": {"0": 9999, "1": 1002}}')
    check(df, expected(spark, {("a", 0): (3, 5), ("a", 1): (0, 2)}))
    # startingTimestamp wins over startingOffsets, as in Kafka
    df = read(spark, world, subscribe="b", startingTimestamp=2000, startingOffsets="earliest")
    check(df, expected(spark, {("b", 0): (3, 5)}))
    # no record that new: an error by default, the high watermark with strategy=latest
    with pytest.raises(Exception, match="no record with a timestamp at or after 5000"):
        read(spark, world, subscribe="b", startingTimestamp=5000).collect()
    assert read(spark, world, subscribe="b", startingTimestamp=5000,
                startingOffsetsByTimestampStrategy="latest").count() == 0


def test_several_topics_pattern_and_assign(spark, world):
    both = {("a", 0): (0, 5), ("a", 1): (0, 5), ("b", 0): (0, 5)}
    check(read(spark, world, subscribe="a, b"), expected(spark, both))
    check(read(spark, world, subscribePattern="[ab]"), expected(spark, both))
    check(read(spark, world, subscribePattern="o.*"), expected(spark, {("other", 0): (0, 5)}))
    df = read(spark, world, assign='{"a": [1], "b": [0]}',
              startingOffsets='{"a": {"1": 2}, "b": {"0": -2}}')
    check(df, expected(spark, {("a", 1): (2, 5), ("b", 0): (0, 5)}))


def test_min_partitions_splits_segments(spark, world):
    plain = read(spark, world, subscribe="a")
    assert plain.rdd.getNumPartitions() == 4  # one per segment
    split = read(spark, world, subscribe="a", minPartitions=8)
    assert split.rdd.getNumPartitions() >= 8
    check(split, expected(spark, {("a", 0): (0, 5), ("a", 1): (0, 5)}))
    capped = read(spark, world, subscribe="a", maxRecordsPerPartition=1)
    assert capped.rdd.getNumPartitions() == 10
    check(capped, expected(spark, {("a", 0): (0, 5), ("a", 1): (0, 5)}))


def test_headers_and_log_append_time(spark, slog):
    slog.create_topic("h", {"partitions": 1, "message.timestamp.type": "LogAppendTime"})
    append(slog, "h", 0, ["x", None], keys=["k", None], now_ms=7000,
           headers=[[{"key": "trace", "value": b"1"}, {"key": "n", "value": None}], None])
    df = read(spark, slog, subscribe="h", includeHeaders="true")
    assert df.columns[-1] == "headers"
    want = spark.createDataFrame(
        [(b"k", b"x", "h", 0, 0, ts(7000), 1, [("trace", b"1"), ("n", None)]),
         (None, None, "h", 0, 1, ts(7000), 1, None)], SCHEMA_DDL + ", " + HEADERS_DDL)
    check(df, want)
    assert "headers" not in read(spark, slog, subscribe="h").columns


def test_compaction_gaps_are_not_data_loss(spark, slog):
    slog.create_topic("c", {"partitions": 1, "cleanup.policy": "compact"})
    append(slog, "c", 0, ["1", "2", "3"], keys=["x", "y", "x"])
    append(slog, "c", 0, ["4"], keys=["z"])
    part = slog.partition("c", 0)
    first = part.snapshot().segments[0]
    kept = part.read_segment(first).filter([False, True, True])  # offset 0 compacted away
    part.replace_segments([first], [kept], committer="test", now_ms=2000)
    df = read(spark, slog, subscribe="c", startingOffsets='{"c": {"0": 0}}')
    assert sorted(r.offset for r in df.select("offset").collect()) == [1, 2, 3]


def test_data_loss_both_ways(spark, world):
    part = world.partition("b", 0)
    first = part.snapshot().segments[0]
    part.replace_segments([first], [], committer="retention", now_ms=5000,
                          log_start_offset=first.end_offset)
    # earliest is the log start: nothing lost
    check(read(spark, world, subscribe="b"), expected(spark, {("b", 0): (3, 5)}))
    start = '{"b": {"0": 1}}'
    with pytest.raises(Exception, match=r"data loss in b-0: offsets 1 to 2 were deleted"):
        read(spark, world, subscribe="b", startingOffsets=start).collect()
    df = read(spark, world, subscribe="b", startingOffsets=start, failOnDataLoss="false")
    check(df, expected(spark, {("b", 0): (3, 5)}))


def test_bad_options_fail_at_load_naming_the_option(spark, world):
    with pytest.raises(Exception, match="'maxoffsetspertrigger'.*only valid for streaming"):
        read(spark, world, subscribe="a", maxOffsetsPerTrigger=5).collect()
    with pytest.raises(Exception, match="'fetch.max.bytes'.*is not an option"):
        read(spark, world, subscribe="a", **{"fetch.max.bytes": "1"})
    with pytest.raises(Exception, match="does not name a-1"):
        read(spark, world, subscribe="a", startingOffsets='{"a": {"0": 0}}').collect()
    with pytest.raises(Exception, match="topic 'nope' does not exist"):
        read(spark, world, subscribe="nope").collect()
