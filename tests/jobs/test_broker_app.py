"""``sparklog broker-app`` on a real Spark standalone cluster (issue 13).

One module-wide cluster (a master and 3 one-core workers on 127.0.0.1: the two
gateway slots take one core each, the third is the spare a lost executor's gateway
moves to) runs two broker apps of 2 slots in turn, the S3 store's and then the local
store's, each started as ``python -m jobs.cli broker-app`` so it can be signalled.
Each failover test produces with the idempotent ``Producer`` at ``acks=all`` over the
bootstrap list, while a consumer group member reads and commits after every poll; it
hits the gateway leading partition 0 (SIGKILL of its Python, of its executor JVM,
SIGSTOP of its whole host, SIGKILL of its worker), and checks the log read back
through ``log_layout``: every acknowledged record exactly once, at its acknowledged
offset, no offset twice, and read exactly once by the group.
Recovery times are printed (``-s`` shows them); the bounds asserted are generous,
since the machine is shared: the figures themselves are for ``bench/scale.py``.
"""

from __future__ import annotations

import signal
import time

import pytest

from jobs.broker_app_process import BrokerAppProcess, listener_pid
from jobs.failover_measure import measure_failover
from jobs.spark_standalone import StandaloneCluster
from log_layout import open_log

pytestmark = [pytest.mark.slow, pytest.mark.spark]

#: generous bounds for a shared 2-core machine (issue 13's targets: 5 s, 15 s and
#: spark.network.timeout + 10 s = 35 s); bench/scale.py has the figures
TASK_CRASH_BOUND_S = 30
EXECUTOR_CRASH_BOUND_S = 60
FROZEN_HOST_BOUND_S = 60
#: the producer's load in every failover: up to 1,000 records a second (the benchmark's
#: 4,000 flooded a loaded machine's gateways), at most 1,000 unanswered, so a record sent
#: after the fault does not queue behind a backlog the machine cannot drain
#: (``jobs.failover_measure.ProduceLoad``)
LOAD = {"per_tick": 5, "max_pending": 1000}


def check(result, bound_s: float, *, gone: bool = True) -> None:
    print(f"\nFAILOVER {result.line()}")
    assert result.acknowledged > 0 and result.partitions
    assert (result.lost, result.duplicated, result.misplaced, result.offsets_taken_twice) == \
        (0, 0, 0, 0), result
    assert (result.group_missed, result.group_read_twice) == (0, 0), result
    assert result.answers_s < bound_s, result
    assert result.first_ack_s < bound_s, result
    if gone:
        assert result.old_gone_s is not None, "the killed gateway's Python kept running"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One standalone cluster of 3 one-core workers (2 for the gateways, 1 spare) for the
    module's two applications, one after the other: the S3 store's (its test runs first),
    then the local store's (:func:`broker`). Its 4 JVMs start once instead of twice."""
    with StandaloneCluster(str(tmp_path_factory.mktemp("cluster")), workers=3) as c:
        yield c


def idle(cluster: StandaloneCluster, workers: int = 3, timeout: float = 120.0) -> None:
    """Wait until the master runs no application and ``workers`` workers are ALIVE with
    every core free: the previous application's executors are gone, so a new one gets
    two gateway cores and the spare. A worker lost meanwhile is replaced."""
    if sum(w.alive() for w in cluster.workers) < workers:
        cluster.add_worker()
    deadline = time.monotonic() + timeout
    while True:
        state = cluster.state()
        free = [w for w in state.get("workers", [])
                if w.get("state") == "ALIVE" and w.get("coresused") == 0]
        if state and not state.get("activeapps") and len(free) >= workers:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster not idle after {timeout:.0f} s: {state}")
        time.sleep(0.25)


def test_failover_on_the_s3_store(tmp_path, cluster, s3_server):
    """The same application on the SeaweedFS S3 server: a gateway's executor killed, then
    a frozen host; leadership, fencing and group state all live in S3 objects. First in
    the module: its application leaves the shared cluster before :func:`broker`'s starts."""
    import json
    import uuid

    idle(cluster)
    options = s3_server.storage_options()
    store = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
    log = open_log(store, storage_options=options)
    for topic in ("s3_executor", "s3_freeze"):
        log.create_topic(topic, {"partitions": 4})
    app = BrokerAppProcess(store, cluster.master_url, str(tmp_path / "app"), gateways=2,
                           storage_options=json.dumps(options))
    try:
        app.start()
        check(measure_failover(app, store, "s3_executor", "executor-crash",
                               group="g-s3-executor", storage_options=options, **LOAD),
              EXECUTOR_CRASH_BOUND_S)
        app.wait_up(120)
        result = measure_failover(app, store, "s3_freeze", "host-freeze", group="g-s3-freeze",
                                  storage_options=options, freeze_s=3.0, **LOAD)
        check(result, FROZEN_HOST_BOUND_S, gone=False)
        assert result.zombie_fenced is not False, result
    finally:
        status = app.stop()
    assert status == 0, app.log_text()[-3000:]
    # the gateways wrote through the hot tier, on by default on S3 (gateway.hot.enable=auto)
    from log_layout import paths
    assert log.store.list_folders(paths.HOT_FOLDER)
    assert any(paths.is_hot_file(s.file) for p in log.partitions("s3_executor")
               for s in p.snapshot().segments)


@pytest.fixture(scope="module")
def broker(tmp_path_factory, cluster):
    """(the broker app with 2 gateway slots, its store) on the module's cluster (once the
    S3 test's application left it); stopped cleanly after."""
    work = tmp_path_factory.mktemp("broker-app")
    store = str(work / "store")
    log = open_log(store)
    for topic in ("task_crash", "executor_crash", "host_freeze", "worker_crash"):
        log.create_topic(topic, {"partitions": 4})
    idle(cluster)
    app = BrokerAppProcess(store, cluster.master_url, str(work / "app"), gateways=2)
    try:
        app.start()
        yield app, store
    finally:
        status = app.stop()
    # after the test: SIGTERM stops the app cleanly and its gateways with it
    assert status == 0, app.log_text()[-3000:]
    assert "broker-app stopped" in app.log_text()
    assert all(listener_pid(app.port_of(s)) is None for s in range(2)), \
        "a gateway outlived its application"


def test_gateway_python_killed(broker):
    app, store = broker
    result = measure_failover(app, store, "task_crash", "task-crash", group="g-task", **LOAD)
    check(result, TASK_CRASH_BOUND_S)
    assert app.wait_up(60) >= 0


def test_executor_jvm_killed(broker):
    app, store = broker
    result = measure_failover(app, store, "executor_crash", "executor-crash",
                              group="g-executor", **LOAD)
    check(result, EXECUTOR_CRASH_BOUND_S)
    assert app.wait_up(120) >= 0


def test_frozen_host_loses_its_partitions_and_the_zombie_is_fenced(broker):
    """SIGSTOP of a worker, its executor and the gateway: the driver moves the partitions
    after --failover-ms (3 s), the new leader's claim fences the zombie's pending commits;
    after SIGCONT nothing it had accepted is lost or doubled."""
    app, store = broker
    result = measure_failover(app, store, "host_freeze", "host-freeze", group="g-freeze",
                              freeze_s=3.0, **LOAD)
    check(result, FROZEN_HOST_BOUND_S, gone=False)
    assert result.zombie_fenced is not False, result
    assert app.wait_up(180) >= 0


def test_worker_killed_with_a_spare(broker):
    """SIGKILL of the worker under a gateway (last of the module: it uses up the spare)."""
    app, store = broker
    result = measure_failover(app, store, "worker_crash", "worker-crash", group="g-worker", **LOAD)
    check(result, EXECUTOR_CRASH_BOUND_S)
    assert app.wait_up(180) >= 0  # Spark ran the slot on the spare worker


def test_local_mode_serves_and_stops_on_sigint(tmp_path):
    """No cluster: ``local[3,F]``, the default master. SIGINT stops it like SIGTERM."""
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


def test_a_restarted_driver_takes_the_application_over(tmp_path, capsys):
    """Local mode, 2 slots, under load (producer and group reader over the bootstrap
    list): SIGKILL of the driver takes every gateway with it; a new driver on the same
    store and ports claims the next driver epoch and the clients carry on, with no
    acknowledged record lost or written twice."""
    from jobs.failover_measure import GroupReader, ProduceLoad, check_log
    from log_layout.brokers import BrokerRegistry

    store = str(tmp_path / "store")
    log = open_log(store)
    log.create_topic("restart", {"partitions": 4})
    first = BrokerAppProcess(store, None, str(tmp_path / "app1"), gateways=2)
    second = BrokerAppProcess(store, None, str(tmp_path / "app2"), gateways=2, port=first.port)
    load = reader = None
    try:
        first.start()
        epoch = BrokerRegistry(log.store).driver()["driver_epoch"]
        load = ProduceLoad(first.bootstrap, "restart", "restart", 10, 0.01, 4,
                           max_pending=LOAD["max_pending"]).start()
        reader = GroupReader(first.bootstrap, "restart", "g-restart").start()
        wait_for(lambda: len(load.acked_at) >= 200, 60, "records acknowledged before the kill")
        first.proc.kill()  # SIGKILL: no clean stop, its JVM and gateways go with it
        first.proc.wait(30)
        wait_for(lambda: all(listener_pid(first.port_of(s)) is None for s in range(2)), 60,
                 "the killed driver's gateways to go")
        second.start()
        load.first_ack_after(time.monotonic(), 120, {0, 1, 2, 3})  # writes go on
        acked, failed, errors = load.finish()
        load = None
        missed, twice = reader.finish(set(acked), 120)
        reader = None
    finally:
        for leftover in (load, reader):
            if leftover is not None:
                leftover.stopping.set()
        status = second.stop()
        first.stop()
    assert status == 0, second.log_text()[-3000:]
    driver = BrokerRegistry(log.store).driver()
    assert driver["driver_epoch"] == epoch + 1 and driver["state"] == "stopped"
    assert len(acked) > 0 and failed == 0, errors
    assert check_log(store, "restart", acked) == {
        "lost": 0, "duplicated": 0, "misplaced": 0, "offsets_taken_twice": 0}
    assert (missed, twice) == (0, 0)
    # what `sparklog cluster status` makes of the real documents the application left
    import json

    from jobs.cli import main

    capsys.readouterr()
    assert main(["--store", store, "cluster", "status", "--json"]) == 0
    status_doc = json.loads(capsys.readouterr().out)
    assert status_doc["ran"] and status_doc["application"]["state"] == "stopped"
    assert status_doc["application"]["driver_epoch"] == epoch + 1
    assert sorted(g["slot"] for g in status_doc["gateways"]) == [0, 1]
    assert status_doc["assignment"]["driver_epoch"] == epoch + 1
    assert [g["group"] for g in status_doc["groups"]] == ["g-restart"]
    assert status_doc["groups"][0]["coordinator_slot"] in (0, 1)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout} s for {what}")
        time.sleep(0.1)

