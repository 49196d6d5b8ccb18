"""``sparklog broker-app`` on a real Spark standalone cluster (issue 13, phase 1).

One module-wide cluster (a master and 2 one-core workers on 127.0.0.1: the gateway
takes one core, the other is the spare a lost executor's gateway moves to) and one
broker app, started as ``python -m jobs.cli broker-app`` so it can be signalled.
Each failover test produces with the idempotent ``Producer`` at ``acks=all``,
SIGKILLs one process, and checks the log read back through ``log_layout``: every
acknowledged record exactly once, at its acknowledged offset, no offset twice.
Recovery times are printed (``-s`` shows them); the bounds asserted are generous,
since the machine is shared: the figures themselves are for ``bench/scale.py``.
"""

from __future__ import annotations

import signal

import pytest

from jobs.broker_app_process import BrokerAppProcess, listener_pid, measure_failover
from jobs.spark_standalone import StandaloneCluster
from log_layout import open_log
from tests.jobs.cli_proc import assert_one_line_error, sparklog

pytestmark = [pytest.mark.slow, pytest.mark.spark]

#: generous bounds for a shared 2-core machine (issue 13's targets: 5 s and 15 s)
TASK_CRASH_BOUND_S = 30
EXECUTOR_CRASH_BOUND_S = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """(the broker app, its store) on a fresh standalone cluster; stopped cleanly after."""
    work = tmp_path_factory.mktemp("broker-app")
    store = str(work / "store")
    log = open_log(store)
    for topic in ("task_crash", "executor_crash"):
        log.create_topic(topic, {"partitions": 2})
    with StandaloneCluster(str(work / "cluster"), workers=2) as cluster:
        app = BrokerAppProcess(store, cluster.master_url, str(work / "app"))
        try:
            app.start()
            yield app, store
        finally:
            status = app.stop()
        # after the test: SIGTERM stops the app cleanly and its gateway with it
        assert status == 0, app.log_text()[-3000:]
        assert "broker-app stopped" in app.log_text()
        assert listener_pid(app.port) is None, "a gateway outlived its application"


def check(result, bound_s: float) -> None:
    print(f"\nFAILOVER {result.line()}")
    assert result.acknowledged > 0
    assert (result.lost, result.duplicated, result.misplaced, result.offsets_taken_twice) == \
        (0, 0, 0, 0), result
    assert result.answers_s < bound_s, result
    assert result.first_ack_s < bound_s, result
    assert result.old_gone_s is not None, "the killed gateway's Python kept running"


def test_gateway_python_killed(broker):
    app, store = broker
    before = app.slot()
    result = measure_failover(app, store, "task_crash", "task-crash")
    check(result, TASK_CRASH_BOUND_S)
    assert app.wait_up(30) >= 0
    assert app.slot()["task_attempt"] != before["task_attempt"]  # Spark re-ran the task


def test_executor_jvm_killed(broker):
    app, store = broker
    before = app.slot()
    result = measure_failover(app, store, "executor_crash", "executor-crash")
    check(result, EXECUTOR_CRASH_BOUND_S)
    assert app.wait_up(30) >= 0
    assert app.slot()["executor"] != before["executor"]  # the task moved to the spare


def test_local_mode_serves_and_stops_on_sigint(tmp_path):
    """No cluster: ``local[2,F]``, the default master. SIGINT stops it like SIGTERM."""
    from ingest_gateway.client import Producer

    store = str(tmp_path / "store")
    open_log(store).create_topic("local", {"partitions": 1})
    app = BrokerAppProcess(store, None, str(tmp_path / "app"))
    try:
        app.start()
        assert app.slot()["executor"] == "driver"
        with Producer(app.url, acks="all") as producer:
            handles = [producer.send("local", str(i).encode()) for i in range(100)]
            producer.flush()
        assert [h.result().offset for h in handles] == list(range(100))
    finally:
        status = app.stop(sig=signal.SIGINT)
    assert status == 0, app.log_text()[-3000:]
    assert "SIGINT: stopping" in app.log_text() and "broker-app stopped" in app.log_text()
    assert listener_pid(app.port) is None
    table = open_log(store).partition("local", 0).read_table(0)
    assert table.column("value").to_pylist() == [str(i).encode() for i in range(100)]


def test_more_than_one_gateway_is_refused(tmp_path):
    run = sparklog("--store", str(tmp_path / "store"), "broker-app", "--gateways", "2")
    assert_one_line_error(run, "--gateways", "leadership", "not built yet")
