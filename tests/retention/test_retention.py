"""Retention by time and by size across topics; log start; data loss; vacuum."""

from __future__ import annotations

import json

import pytest

from jobs.maintain import maintain_partition, run
from log_layout import OffsetOutOfRange
from retention.policy import plan_retention, retain_partition
from retention.vacuum import vacuum_partition
from tests.compaction.helpers import T0, keyed, rows
from tests.conftest import on_local_store

HOUR = 3_600_000


def fill(log, topic, configs, *, segments=5, per=10, step_ms=HOUR, pad=0):
    log.create_topic(topic, configs)
    plog = log.partition(topic, 0)
    w = plog.claim("t")
    for i in range(segments):
        w.append(keyed([(f"k{j}", f"v{i}") for j in range(per)], T0 + i * step_ms, pad=pad),
                 now_ms=T0)
    return plog, log.topic(topic).config


@on_local_store
def test_time_retention_drops_whole_old_segments_and_moves_log_start(log):
    plog, config = fill(log, "t1", {"retention.ms": 2 * HOUR})
    now = T0 + 4 * HOUR  # segments at 0..4 h; > 2 h old: 0 h and 1 h
    dry = retain_partition(plog, config, now, dry_run=True)
    assert dry.changed and dry.segments_before == 2 and plog.log_start_offset() == 0
    r = retain_partition(plog, config, now)
    assert r.changed and r.records_before == 20 and r.log_start_offset == 20
    assert plog.log_start_offset() == 20 and plog.high_watermark() == 50
    assert rows(plog)[0][0] == 20
    # exactly retention.ms old is kept (Kafka: older than retention.ms)
    assert plan_retention(plog.snapshot(), config, T0 + 4 * HOUR) is None
    # a consumer positioned below the log start gets OffsetOutOfRange
    with pytest.raises(OffsetOutOfRange) as e:
        list(plog.read(5))
    assert e.value.offset == 5 and e.value.log_start == 20


@on_local_store
def test_active_segment_survives_any_retention(log):
    plog, config = fill(log, "t1", {"retention.ms": 0, "retention.bytes": 0}, segments=3)
    retain_partition(plog, config, T0 + 100 * HOUR)
    m = plog.snapshot()
    assert len(m.segments) == 1 and m.log_start_offset == 20 and m.next_offset == 30


@on_local_store
def test_size_retention_keeps_at_least_retention_bytes(log):
    plog, config = fill(log, "s1", {"retention.bytes": 1, "retention.ms": -1}, pad=100)
    size = plog.snapshot().segments[0].bytes
    log.alter_topic("s1", {"retention.bytes": 2 * size + size // 2})
    config = log.topic("s1", refresh=True).config
    plan = plan_retention(plog.snapshot(), config, T0)
    assert plan.by_time == 0 and plan.by_size == 2  # 5 -> 3 segments (2.5 kept at least)
    retain_partition(plog, config, T0)
    m = plog.snapshot()
    assert len(m.segments) == 3 and m.size_bytes >= config.retention_bytes
    assert m.log_start_offset == 20


@on_local_store
def test_topics_with_different_configs_in_one_run(log):
    fill(log, "keep-forever", {"retention.ms": -1})
    fill(log, "short", {"retention.ms": HOUR})
    fill(log, "small", {"retention.bytes": 0, "retention.ms": -1})
    fill(log, "compacted", {"cleanup.policy": "compact", "retention.ms": HOUR})
    summary = run(log, command="retention", now_ms=T0 + 10 * HOUR)
    starts = {t: log.partition(t, 0).log_start_offset() for t in log.topics()}
    assert starts == {"keep-forever": 0, "short": 40, "small": 40, "compacted": 0}
    changed = {r.topic for r in summary.results if r.action == "retention" and r.changed}
    assert changed == {"short", "small"}
    record = log.history()[-1]
    assert record["command"] == "retention" and record["records_removed"] == 80
    json.dumps(record)  # the history is JSON
    only = run(log, command="retention", topics=["sh*"], now_ms=T0 + 10 * HOUR, dry_run=True)
    assert only.topics == ["short"]


def test_vacuum_deletes_dropped_files_after_the_grace_period(log):
    plog, config = fill(log, "v", {"retention.ms": HOUR, "file.delete.delay.ms": 60_000})
    retain_partition(plog, config, T0 + 10 * HOUR)
    kept = vacuum_partition(plog, config, T0 + 10 * HOUR + 59_999)
    assert kept.files_deleted == 0
    dry = vacuum_partition(plog, config, T0 + 10 * HOUR + 60_000, dry_run=True)
    assert dry.files_deleted == 4
    done = vacuum_partition(plog, config, T0 + 10 * HOUR + 60_000)
    assert done.files_deleted == 4 and not plog.snapshot().removed
    assert [r[0] for r in rows(plog)] == list(range(40, 50))


@on_local_store
def test_maintain_partition_rejects_unknown_steps(log):
    plog, config = fill(log, "x", {}, segments=1)
    from jobs.maintain import InvalidMaintenanceRequest

    with pytest.raises(InvalidMaintenanceRequest, match="unknown maintenance steps"):
        maintain_partition(plog, config, T0, steps=["shrink"])
    with pytest.raises(InvalidMaintenanceRequest, match="no such topic: nope"):
        run(log, topics=["nope"], now_ms=T0)


@pytest.mark.spark
@pytest.mark.parametrize("backend", ["file", "s3", "hdfs"], indirect=True)
def test_spark_read_below_log_start_is_data_loss(log, store, spark):
    pytest.importorskip("pipeline.source")
    from pyspark.errors import PySparkException

    plog, config = fill(log, "lost", {"retention.ms": HOUR})
    run(log, command="retention", now_ms=T0 + 10 * HOUR, spark=spark,
        storage_options=store[1])
    assert plog.log_start_offset() == 40
    url, options = store

    def read(fail: bool):
        reader = (spark.read.format("sparklog").option("subscribe", "lost")
                  .option("store", url).option("startingOffsets", '{"lost": {"0": 10}}')
                  .option("failOnDataLoss", str(fail).lower()))
        if options:
            reader = reader.option("storageOptions", json.dumps(options))
        return reader.load()

    with pytest.raises((PySparkException, Exception), match="(?i)data ?loss|retention"):
        read(True).collect()
    assert sorted(r.offset for r in read(False).collect()) == list(range(40, 50))
