"""Structured Streaming through ``format("sparklog")``: offsets, restarts, admission, data loss.

Queries write to a Parquet sink with a checkpoint and run ``Trigger.AvailableNow``;
each run is a restart from the checkpoint, so "no record missing or repeated"
is checked across restarts.
"""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from pipeline.errors import InvalidSourceOption
from pipeline.options import parse
from pipeline.planning import TP
from pipeline.source import SCHEMA_DDL, StreamReader, _rate_limit
from tests.pipeline.conftest import append, source_options, ts


def run(spark, log, tmp_path, name: str, **options):
    """One AvailableNow run of a query named ``name`` (same name = same checkpoint)."""
    q = (spark.readStream.format("sparklog").options(**source_options(log, **options)).load()
         .writeStream.format("parquet").option("path", str(tmp_path / name / "out"))
         .option("checkpointLocation", str(tmp_path / name / "checkpoint"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    return q


def output(spark, tmp_path, name: str):
    return spark.read.parquet(str(tmp_path / name / "out"))


def rows_of(spark, records):
    """records: (topic, partition, offset, value, ts ms)."""
    return spark.createDataFrame([(None, v.encode(), t, p, o, ts(ms), 0)
                                  for t, p, o, v, ms in records], SCHEMA_DDL)


def check(actual, wanted):
    assert_df_equality(actual, wanted, ignore_row_order=True, ignore_nullable=True)


def batch_sizes(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


@pytest.mark.spark
def test_three_available_now_runs_with_appends_between(spark, slog, tmp_path):
    slog.create_topic("s", {"partitions": 2})
    written = []

    def produce(p, values, now):
        base = append(slog, "s", p, values, now_ms=now)
        written.extend(("s", p, base + i, v, now) for i, v in enumerate(values))

    produce(0, ["a", "b"], 1000)
    produce(1, ["c"], 1000)
    run(spark, slog, tmp_path, "q", subscribe="s", startingOffsets="earliest")
    run(spark, slog, tmp_path, "latest", subscribe="s")  # default start: latest
    check(output(spark, tmp_path, "q"), rows_of(spark, written))

    produce(0, ["d"], 2000)
    produce(1, ["e", "f"], 2000)
    q = run(spark, slog, tmp_path, "q", subscribe="s", startingOffsets="earliest")
    assert batch_sizes(q) == [3]  # only the new records
    check(output(spark, tmp_path, "q"), rows_of(spark, written))
    run(spark, slog, tmp_path, "latest", subscribe="s")
    check(output(spark, tmp_path, "latest"), rows_of(spark, written[3:]))

    # the topic grows a partition: read from its earliest offset
    slog.alter_topic("s", {"partitions": 3})
    produce(2, ["g", "h"], 3000)
    produce(0, ["i"], 3000)
    run(spark, slog, tmp_path, "q", subscribe="s", startingOffsets="earliest")
    check(output(spark, tmp_path, "q"), rows_of(spark, written))
    # nothing new: a run adds nothing
    q = run(spark, slog, tmp_path, "q", subscribe="s", startingOffsets="earliest")
    assert batch_sizes(q) == []
    assert output(spark, tmp_path, "q").count() == len(written)


@pytest.mark.spark
def test_max_offsets_per_trigger_bounds_each_batch(spark, slog, tmp_path):
    slog.create_topic("m", {"partitions": 2})
    append(slog, "m", 0, [str(i) for i in range(6)])
    append(slog, "m", 1, [str(i) for i in range(4)])
    q = run(spark, slog, tmp_path, "q", subscribe="m", startingOffsets="earliest",
            maxOffsetsPerTrigger=3)
    assert batch_sizes(q) == [3, 3, 3, 1]
    out = output(spark, tmp_path, "q")
    assert sorted((r.partition, r.offset) for r in out.select("partition", "offset").collect()) \
        == [(0, i) for i in range(6)] + [(1, i) for i in range(4)]


@pytest.mark.spark
def test_data_loss_fails_naming_the_range_or_skips(spark, slog, tmp_path):
    slog.create_topic("r", {"partitions": 1})
    for i in range(3):
        append(slog, "r", 0, [f"{i}a", f"{i}b"], now_ms=1000 * (i + 1))
    run(spark, slog, tmp_path, "strict", subscribe="r", startingOffsets='{"r": {"0": 0}}',
        maxOffsetsPerTrigger=100)
    run(spark, slog, tmp_path, "lenient", subscribe="r", startingOffsets="earliest",
        failOnDataLoss="false")
    # both queries have read offsets 0-5; two more segments arrive, then retention
    # deletes offsets 0-7 before the queries read 6 and 7
    append(slog, "r", 0, ["3a", "3b"], now_ms=4000)  # offsets 6-7
    append(slog, "r", 0, ["4a"], now_ms=5000)  # offset 8
    part = slog.partition("r", 0)
    gone = part.snapshot().segments[:4]  # offsets 0-7
    part.replace_segments(gone, [], committer="retention", now_ms=9000,
                          log_start_offset=gone[-1].end_offset)
    with pytest.raises(Exception, match=r"data loss in r-0: offsets 6 to 7 were deleted by "
                                         r"retention"):
        run(spark, slog, tmp_path, "strict", subscribe="r")
    run(spark, slog, tmp_path, "lenient", subscribe="r", failOnDataLoss="false")
    values = sorted(r.value.decode() for r in output(spark, tmp_path, "lenient").collect())
    assert values == ["0a", "0b", "1a", "1b", "2a", "2b", "4a"]


@pytest.mark.spark
def test_compaction_gaps_are_not_data_loss_in_a_stream(spark, slog, tmp_path):
    slog.create_topic("c", {"partitions": 1, "cleanup.policy": "compact"})
    append(slog, "c", 0, ["1", "2", "3"], keys=["x", "y", "x"])
    run(spark, slog, tmp_path, "q", subscribe="c", startingOffsets="earliest")
    append(slog, "c", 0, ["4", "5"], keys=["y", "y"])
    part = slog.partition("c", 0)
    second = part.snapshot().segments[1]
    part.replace_segments([second], [part.read_segment(second).slice(1)], committer="cleaner",
                          now_ms=5000)  # offset 3 compacted away
    run(spark, slog, tmp_path, "q", subscribe="c", startingOffsets="earliest")
    assert sorted(r.offset for r in output(spark, tmp_path, "q").collect()) == [0, 1, 2, 4]


# -- admission control without Spark: the reader's decisions, time as a parameter ----------
class Clock:
    def __init__(self):
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


def _reader(log, **options) -> tuple[StreamReader, Clock]:
    clock = Clock()
    return StreamReader(parse(source_options(log, **options)), clock=clock), clock


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(local_log):
    from pyspark.sql.streaming.datasource import ReadMinRows

    local_log.create_topic("w", {"partitions": 1})
    append(local_log, "w", 0, ["a", "b"])
    reader, clock = _reader(local_log, subscribe="w", startingOffsets="earliest",
                            minOffsetsPerTrigger=5, maxTriggerDelay="10s")
    start = reader.initialOffset()
    assert start == {"w": {"0": 0}}
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(5)
    assert reader.latestOffset(start, limit) == start  # 2 < 5: wait
    clock.ms = 9_999
    assert reader.latestOffset(start, limit) == start
    clock.ms = 10_000  # maxTriggerDelay passed: take what there is
    assert reader.latestOffset(start, limit) == {"w": {"0": 2}}
    append(local_log, "w", 0, ["c", "d", "e", "f", "g"])
    assert reader.latestOffset({"w": {"0": 2}}, limit) == {"w": {"0": 7}}  # 5 >= 5: go


def test_available_now_stops_at_the_high_watermark_seen_at_start(local_log):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    local_log.create_topic("n", {"partitions": 1})
    append(local_log, "n", 0, ["a", "b", "c"])
    reader, _ = _reader(local_log, subscribe="n", startingOffsets="earliest",
                        maxOffsetsPerTrigger=2)
    reader.prepareForTriggerAvailableNow()
    append(local_log, "n", 0, ["d"])  # after the trigger started: not in this run
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadMaxRows(2))
    assert first == {"n": {"0": 2}}
    second = reader.latestOffset(first, ReadMaxRows(2))
    assert second == {"n": {"0": 3}}
    assert reader.latestOffset(second, ReadMaxRows(2)) == second  # done
    assert reader.reportLatestOffset() == {"n": {"0": 4}}


def test_rate_limit_shares_in_proportion_to_backlog():
    a, b, c = ("t", 0), ("t", 1), ("u", 0)
    begin: dict[TP, int] = {a: 10, b: 0, c: 5}
    ends = _rate_limit(begin, {a: 90, b: 10, c: 0}, 20)
    assert ends == {a: 28, b: 2, c: 5}
    assert sum(ends[tp] - begin[tp] for tp in begin) == 20


def test_streaming_rejects_batch_only_options(local_log):
    opts = parse(source_options(local_log, subscribe="x", endingOffsets="latest"))
    with pytest.raises(InvalidSourceOption, match="'endingoffsets'.*not valid for streaming"):
        opts.check_stream()
