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


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["s3"], indirect=True)
def test_the_spark_job_rolls_up_hot_segments_and_sweeps_their_objects(log, store, spark):
    """A gateway on S3 writes through the hot tier by default (gateway.hot.enable=auto):
    the maintenance job, its roll-up in Spark tasks that reopen the store, rewrites the
    journal's segments into per-partition files while the writer goes on, and the pass's
    sweep deletes the shared objects it freed."""
    from log_layout import open_log, paths, wall_clock_ms
    from log_layout.hot_writer import JournalWriter

    log.create_topic("hot", {"partitions": 3, "file.delete.delay.ms": 0})
    journal = JournalWriter(log.journals, "gw-spark")
    try:
        writers = [log.partition("hot", p).claim("gw-spark", journal) for p in range(3)]
        for r in range(3):
            for f in [w.append_async(pa.table({"value": [b"r%d-%d" % (r, p)]}))
                      for p, w in enumerate(writers)]:
                f.result(timeout=60)
        objects = {f.name for f in log.store.list(paths.journal_folder(journal.name))
                   if f.name.endswith(".wal")}
        assert objects
        summary = run(log, now_ms=wall_clock_ms() + 3_600_000, spark=spark)
        assert not summary.errors
        assert {r.partition for r in summary.results if r.changed} == {0, 1, 2}
        for p, w in enumerate(writers):  # the writer goes on after the roll-up
            w.append_async(pa.table({"value": [b"after-%d" % p]})).result(timeout=60)
        reader = open_log(store[0], storage_options=store[1])
        for p in range(3):
            plog = reader.partition("hot", p)
            assert plog.read_table(0).column("value").to_pylist() == \
                [b"r0-%d" % p, b"r1-%d" % p, b"r2-%d" % p, b"after-%d" % p]
            cold = plog.versions.cold_snapshot()
            assert not any(paths.is_hot_file(s.file) for s in cold.segments)
        left = {f.name for f in log.store.list(paths.journal_folder(journal.name))
                if f.name.endswith(".wal")}
        assert not objects & left
    finally:
        journal.close()
