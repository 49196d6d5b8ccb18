"""``sparklog broker-app`` without a cluster: its Spark settings, its tasks' command
line, and the refusals that must come before Spark starts (no JVM in these tests)."""

from __future__ import annotations

import socket

import pytest

from conf.errors import ConfigError
from jobs.broker_app import MAX_GATEWAYS, TASK_MAX_FAILURES, GatewayTask, check_gateways, spark_conf
from jobs.cli import main


def test_spark_settings_keep_a_gateway_task_alive():
    conf = spark_conf("spark://127.0.0.1:7077", 1)
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert conf["spark.speculation"] == "false"  # a second copy would fight for the port
    assert conf["spark.excludeOnFailure.enabled"] == "false"
    assert int(conf["spark.task.maxFailures"]) > 4
    timeout_s = int(conf["spark.network.timeout"].rstrip("s"))
    assert 20 <= timeout_s <= 30
    assert int(conf["spark.network.timeoutInterval"].rstrip("s")) < timeout_s


def test_local_mode_retries_tasks_too():
    # local[N] ignores spark.task.maxFailures: local[N,F] is how it retries a task
    assert spark_conf(None, 1)["spark.master"] == f"local[3,{TASK_MAX_FAILURES}]"


def test_a_slot_runs_the_cli_gateway_on_base_port_plus_slot():
    task = GatewayTask("/data/log", 9000, settings=(("store.fsync", "false"),),
                       storage_options='{"anon": true}')
    assert task.argv(0, "10.0.0.5") == [
        "--store", "/data/log", "--set", "store.fsync=false",
        "--set", "gateway.broker.id=0", "--set", "gateway.advertised.listeners=http://10.0.0.5:9000",
        "gateway", "--host", "10.0.0.5",
        "--port", "9000", "--log-level", "warning", "--storage-options", '{"anon": true}']
    assert "9003" in task.argv(3, "h")
    # bound to every interface, it tells clients the name they can reach
    assert "gateway.advertised.listeners=http://node-7:9001" in task.argv(1, "0.0.0.0", "node-7")


def test_gateway_counts_outside_the_bounds_are_refused_with_the_reason():
    check_gateways(1)
    check_gateways(MAX_GATEWAYS)
    with pytest.raises(ConfigError, match="expected 1 to"):
        check_gateways(MAX_GATEWAYS + 1)


@pytest.mark.parametrize("args, needle", [
    (["--gateways", "65"], "--gateways"),
    (["--storage-options", "[1]"], "--storage-options"),
    (["--set", "gateway.port=x"], "gateway.port"),
    (["--port", "65536"], "65535"),
])
def test_bad_values_fail_before_spark_starts(tmp_path, capsys, args, needle):
    assert main(["--store", str(tmp_path / "s"), "broker-app", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sparklog: error: ") and needle in err, err


def test_a_gateway_count_below_one_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        main(["broker-app", "--gateways", "0"])
    assert "expected an integer >= 1" in capsys.readouterr().err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_s3_endpoint_the_driver_cannot_reach_stops_it_naming_the_key(capsys, monkeypatch):
    """Issue 33: before Spark starts, one line with the key and its value."""
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("SPARKLOG_STORE_S3_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert main(["--store", "s3://bucket/prefix", "broker-app"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sparklog: error: ") and err.count("\n") == 1, err
    assert "store.s3.endpoint.url" in err and endpoint in err, err


def test_hdfs_settings_that_do_not_reach_the_namenode_name_the_port(capsys):
    port = _closed_port()
    assert main(["--store", f"hdfs://127.0.0.1:{_closed_port()}/x", "--set",
                 f"store.hdfs.http.port={port}", "broker-app"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sparklog: error: ") and err.count("\n") == 1, err
    assert "store.hdfs.http.port" in err and str(port) in err, err


def test_every_task_gets_the_drivers_store_settings(monkeypatch):
    """An executor on another host has neither the driver's environment nor its --set
    pairs: the tasks are given both, and the resolved store settings."""
    import conf
    from jobs.commands.broker_app import task_settings

    monkeypatch.setenv("SPARKLOG_STORE_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("SPARKLOG_GATEWAY_KAFKA_LISTENERS", "PLAINTEXT://h:9092")
    settings = conf.load({"store.url": "s3://b/p", "store.hdfs.user": "hd"})
    pairs = task_settings(settings, {"gateway.linger.ms": "2", "gateway.broker.id": "7"})
    assert pairs["store.s3.endpoint.url"] == "http://127.0.0.1:9"
    assert pairs["store.hdfs.user"] == "hd" and pairs["store.fsync"] == "true"
    assert pairs["gateway.linger.ms"] == "2"
    # each slot sets these for itself; an unset secret is not passed at all
    assert not {"gateway.broker.id", "gateway.kafka.listeners", "store.url",
                "store.hdfs.delegation.token"} & set(pairs)
    task = GatewayTask("s3://b/p", 9000, settings=tuple(sorted(pairs.items())))
    assert "store.s3.endpoint.url=http://127.0.0.1:9" in task.argv(0, "h")
