"""The maintenance Spark job: one task per partition, results equal to the reference model."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from jobs.maintain import run
from tests.compaction.model import ModelLog, Seg, records_of

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000
SCHEMA = "topic string, partition int, offset long, key binary, value binary, ts long"


def produce(log, topic, partitions, rng, models):
    for p in range(partitions):
        w = log.partition(topic, p).claim("test")
        model = models[(topic, p)] = ModelLog()
        for i in range(6):
            rows = [(f"k{rng.randrange(30)}".encode(),
                     None if rng.random() < 0.1 else f"v{i}-{j}".encode(), T0 + i * 10)
                    for j in range(rng.randrange(20, 60))]
            w.append(pa.table({"key": pa.array([r[0] for r in rows], pa.binary()),
                               "value": pa.array([r[1] for r in rows], pa.binary()),
                               "timestamp": pa.array([r[2] for r in rows], pa.int64())}),
                     now_ms=T0)
            model.append(rows)


def as_df(spark, logs):
    """One DataFrame of every partition's records: {(topic, partition): [Rec]}."""
    return spark.createDataFrame([(t, p, r.offset, r.key, r.value, r.ts)
                                  for (t, p), recs in sorted(logs.items()) for r in recs], SCHEMA)


@pytest.mark.parametrize("backend", ["file", "s3", "hdfs"], indirect=True)
def test_compaction_job_matches_model(log, spark):
    rng = random.Random(7)
    models: dict[tuple[str, int], ModelLog] = {}
    log.create_topic("users", {"cleanup.policy": "compact", "partitions": 3,
                               "delete.retention.ms": 100, "min.cleanable.dirty.ratio": 0.2})
    log.create_topic("orders", {"cleanup.policy": "compact,delete", "partitions": 2,
                                "segment.bytes": 1500, "min.cleanable.dirty.ratio": 0.2})
    log.create_topic("events", {"partitions": 2})  # delete only: never compacted
    produce(log, "users", 3, rng, models)
    produce(log, "orders", 2, rng, models)
    produce(log, "events", 2, rng, {})
    events_before = log.partition("events", 0).snapshot()

    for cycle, now in enumerate((T0 + 100, T0 + 10_000)):
        if cycle:  # more dirty data between the passes
            produce_more = random.Random(cycle)
            for (topic, p), model in models.items():
                rows = [(f"k{produce_more.randrange(30)}".encode(), None, now)
                        for _ in range(5)] + [(b"fresh", b"x", now)]
                log.partition(topic, p).claim(f"t{cycle}").append(
                    pa.table({"key": pa.array([r[0] for r in rows], pa.binary()),
                              "value": pa.array([r[1] for r in rows], pa.binary()),
                              "timestamp": pa.array([r[2] for r in rows], pa.int64())}),
                    now_ms=now)
                model.append(rows)
        expected_clean = set()
        for (topic, p), model in models.items():
            config = log.topic(topic).config
            segs = [Seg(s.base_offset, s.last_offset, s.bytes)
                    for s in log.partition(topic, p).snapshot().segments]
            if model.clean(segs, now=now, lag_ms=config.min_compaction_lag_ms,
                           min_ratio=config.min_cleanable_dirty_ratio,
                           delete_retention_ms=config.delete_retention_ms):
                expected_clean.add((topic, p))
        summary = run(log, command="compact", now_ms=now, spark=spark)
        cleaned = {(r.topic, r.partition) for r in summary.results if r.changed}
        assert cleaned == expected_clean
        assert not summary.errors
        actual = {}
        for topic, p in models:
            plog = log.partition(topic, p)
            actual[(topic, p)] = records_of(plog.read_table(plog.log_start_offset()))
        assert_df_equality(as_df(spark, actual),
                           as_df(spark, {tp: m.records for tp, m in models.items()}))
    assert log.partition("events", 0).snapshot() == events_before
    assert log.history()[-1]["partitions_cleaned"] == len(expected_clean)
