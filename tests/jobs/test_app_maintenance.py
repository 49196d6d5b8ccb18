"""Maintenance scheduled from the broker application's driver (``jobs.app_maintenance``)."""

from __future__ import annotations

import threading
import time

import pytest

import conf
from jobs.app_maintenance import (
    MaintenanceScheduler,
    maintenance_pass,
    start_maintenance,
)
from log_layout import open_log
from tests.compaction.helpers import T0, keyed

WAIT_S = 120.0  # the bound of every wait: a cold Spark job on 2 cores takes seconds


def wait_for(condition, what: str) -> None:
    """Poll ``condition`` until true; fail naming ``what`` after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"still waiting after {WAIT_S:g} s for {what}")
        time.sleep(0.02)


def old_segments(path: str):
    """A topic with three one-record segments written at T0 (years before the wall
    clock), ``retention.ms`` 1 s: retention drops all but the active one."""
    log = open_log(path)
    log.create_topic("clicks", {"retention.ms": 1000})
    w = log.partition("clicks", 0).claim("t")
    for i in range(3):
        w.append(keyed([("x", str(i))], T0), now_ms=T0)
    return log


@pytest.mark.spark
def test_a_scheduled_pass_runs_retention_as_a_spark_job(tmp_path, spark):
    log = old_segments(str(tmp_path / "s"))
    plog = log.partition("clicks", 0)
    assert len(plog.snapshot().segments) == 3
    lines: list[str] = []
    # the broker application hands over its SparkContext, not a session
    scheduler = MaintenanceScheduler(lambda: maintenance_pass(spark.sparkContext, log),
                                     0.05, out=lines.append).start()
    try:
        wait_for(lambda: scheduler.status()["runs"] >= 1, "the first pass")
    finally:
        assert scheduler.stop(WAIT_S)
    status = scheduler.status()
    assert status["failures"] == 0 and status["interval_ms"] == 50
    assert status["last_run_ms"] is not None
    result = status["last_result"]
    assert result["ok"] and result["errors"] == [] and result["records_removed"] == 2
    snapshot = plog.snapshot()
    assert len(snapshot.segments) == 1 and snapshot.log_start_offset == 2
    assert log.history()[-1]["run_id"] == result["run_id"]  # recorded like `sparklog maintain`
    assert lines[0].startswith("maintenance pass done")


def test_start_maintenance_reads_the_interval_and_store_from_the_settings(tmp_path):
    old_segments(str(tmp_path / "s"))
    settings = conf.load({"store.url": str(tmp_path / "s"), "maintenance.interval.ms": 20})
    lines: list[str] = []
    scheduler = start_maintenance(None, settings, out=lines.append)  # None: in this process
    try:
        wait_for(lambda: scheduler.status()["runs"] >= 1, "the first pass")
    finally:
        assert scheduler.stop(WAIT_S)
    assert scheduler.status()["interval_ms"] == 20
    assert open_log(str(tmp_path / "s")).partition("clicks", 0).log_start_offset() == 2


def test_a_failed_pass_is_logged_counted_and_tried_again():
    calls: list[int] = []

    def flaky():
        calls.append(1)
        if len(calls) <= 2:
            raise OSError(f"store unreachable (call {len(calls)})")
        return {"partitions": 1}

    lines: list[str] = []
    scheduler = MaintenanceScheduler(flaky, 0.01, out=lines.append, clock_ms=lambda: 42).start()
    try:
        wait_for(lambda: scheduler.status()["runs"] >= 3, "a pass after two failures")
    finally:
        assert scheduler.stop(WAIT_S)
    status = scheduler.status()
    assert status["failures"] == 2 and status["runs"] >= 3 and status["last_run_ms"] == 42
    assert status["last_result"]["ok"] is True
    assert lines[0].startswith("maintenance pass failed")
    assert "OSError: store unreachable (call 1)" in lines[0]


def test_passes_never_overlap_and_stop_waits_for_the_one_under_way():
    inside = threading.Event()
    release = threading.Event()
    active, most = [0], [0]

    def slow():
        active[0] += 1
        most[0] = max(most[0], active[0])
        inside.set()
        release.wait(WAIT_S)
        active[0] -= 1
        return {}

    scheduler = MaintenanceScheduler(slow, 0.001, out=lambda _line: None).start()
    wait_for(inside.is_set, "a pass to start")
    caller = threading.Thread(target=scheduler.run_pass)  # asked for while one runs
    caller.start()
    assert scheduler.stop(0.05) is False  # bounded: the pass is still under way
    release.set()
    caller.join(WAIT_S)
    assert scheduler.stop(WAIT_S) is True
    assert most[0] == 1 and scheduler.status()["runs"] == 2


def test_a_non_positive_interval_is_refused():
    with pytest.raises(ValueError, match="must be positive"):
        MaintenanceScheduler(dict, 0)
