"""``sparklog cluster status``: the ``_brokers/`` documents read back as tables and JSON."""

from __future__ import annotations

import json

import pytest

from jobs.cli import main
from jobs.commands import cluster
from log_layout import open_log
from log_layout.brokers import (
    OFFSETS_PARTITIONS,
    OFFSETS_TOPIC,
    Assignment,
    BrokerRegistry,
    GatewayInfo,
)

NOW = 1_763_800_000_000
URLS = {0: "http://10.0.0.7:8082", 1: "http://10.0.0.8:8083"}
MAINTENANCE = {"interval_ms": 300_000, "last_run_ms": NOW - 42_000,
               "last_result": {"ok": True, "partitions": 3, "records_removed": 10, "errors": []}}


@pytest.fixture
def frozen_clock(monkeypatch):
    monkeypatch.setattr(cluster, "_now_ms", lambda: NOW)


@pytest.fixture
def cluster_store(tmp_path, frozen_clock):
    """A store as a two-slot application left it: slot 0 alive, slot 1's gateway
    silent for a minute and out of the assignment; two groups."""
    path = str(tmp_path / "s")
    log = open_log(path)
    registry = BrokerRegistry(log.store)
    registry.write_driver({
        "driver_epoch": 3, "application": "app-20261122-0001", "master": "spark://m:7077",
        "ui": "http://m:4040", "host": "m", "pid": 4242, "started_ms": NOW - 600_000,
        "heartbeat_ms": NOW - 1_500, "state": "running", "maintenance": MAINTENANCE,
        "slots": [{"slot": 0, "port": 8082, "host": "10.0.0.7", "url": URLS[0],
                   "executor": "1", "task_attempt": 0, "up": True, "since_ms": NOW - 90_000,
                   "runs": 1},
                  {"slot": 1, "port": 8083, "host": None, "url": None, "executor": None,
                   "task_attempt": None, "up": False, "since_ms": NOW - 60_000, "runs": 2}]})
    registry.write_gateway(GatewayInfo(
        slot=0, gateway_id="gw0-1a2b", epoch=5, url=URLS[0], host="10.0.0.7", pid=777,
        started_ms=NOW - 90_000, heartbeat_ms=NOW - 800, bytes_in_per_s=1_234_567.0,
        partitions={"clicks/0": 1e6, "clicks/1": 234_567.0}, leader_epochs={"clicks/0": 12}))
    registry.write_gateway(GatewayInfo(
        slot=1, gateway_id="gw1-9f8e", epoch=2, url=URLS[1], host="10.0.0.8", pid=778,
        started_ms=NOW - 900_000, heartbeat_ms=NOW - 60_000, bytes_in_per_s=512.0))
    # the offsets topic's partitions alternate between the slots, so groups land on both
    offsets = tuple(p % 2 for p in range(OFFSETS_PARTITIONS))
    assignment = Assignment(driver_epoch=3, generation=41, slots={0: URLS[0], 1: None},
                            live=(0,), partitions={"clicks": (0, 0, 0), OFFSETS_TOPIC: offsets},
                            application="app-20261122-0001", written_ms=NOW - 2_000)
    assert registry.publish(assignment)
    for group in ("billing", "search"):
        log.write_group_offsets(group, {"group": group, "generation": 1, "offsets": {}})
    return path, assignment


def run_status(capsys, *argv: str) -> str:
    assert main(["cluster", "status", *argv]) == 0
    return capsys.readouterr().out


def test_json_has_the_facts(cluster_store, capsys):
    path, assignment = cluster_store
    doc = json.loads(run_status(capsys, "--store", path, "--json"))
    assert doc["ran"] is True and doc["now_ms"] == NOW and doc["stale_after_ms"] == 12_500
    app = doc["application"]
    assert (app["id"], app["master"], app["ui"], app["host"], app["pid"]) == (
        "app-20261122-0001", "spark://m:7077", "http://m:4040", "m", 4242)
    assert app["driver_epoch"] == 3 and app["state"] == "running"
    assert app["heartbeat_age_ms"] == 1_500 and app["stale"] is False
    assert app["maintenance"] == MAINTENANCE
    gw0, gw1 = doc["gateways"]
    assert (gw0["slot"], gw0["gateway_id"], gw0["url"], gw0["epoch"], gw0["pid"]) == (
        0, "gw0-1a2b", URLS[0], 5, 777)
    assert gw0["heartbeat_age_ms"] == 800 and gw0["stale"] is False and gw0["live"] is True
    assert gw0["partitions_led"] == 2 and gw0["partitions_assigned"] == 3
    assert gw1["heartbeat_age_ms"] == 60_000 and gw1["stale"] is True and gw1["live"] is False
    assert gw1["partitions_led"] == 0 and gw1["partitions_assigned"] == 0
    assert doc["assignment"] == {"driver_epoch": 3, "generation": 41, "written_ms": NOW - 2_000,
                                 "age_ms": 2_000, "live": [0],
                                 "slots": {"0": URLS[0], "1": None}}
    assert [s["slot"] for s in doc["slots"]] == [0, 1] and doc["slots"][1]["up"] is False
    expected = {g: assignment.coordinator_slot(g) for g in ("billing", "search")}
    assert set(expected.values()) == {0, 1}  # the fixture puts one group on each slot
    assert doc["groups"] == [{"group": g, "coordinator_slot": s, "coordinator_url": URLS[0]
                              if s == 0 else None} for g, s in sorted(expected.items())]


def test_tables_show_the_application_gateways_and_coordinators(cluster_store, capsys):
    path, assignment = cluster_store
    out = run_status(capsys, "--store", path)
    for fact in ("app-20261122-0001", "spark://m:7077", "http://m:4040", "m pid 4242",
                 "running", "1.5 s ago", "generation 41 of driver epoch 3",
                 "every 300.0 s, last pass started 42.0 s ago", "10 records removed"):
        assert fact in out, fact
    gateway0 = next(line for line in out.splitlines() if "gw0-1a2b" in line)
    gateway1 = next(line for line in out.splitlines() if "gw1-9f8e" in line)
    assert "0.8 s ago" in gateway0 and "stale" not in gateway0 and "1.2 MB/s" in gateway0
    assert "60.0 s ago (stale)" in gateway1 and "512 B/s" in gateway1
    assert gateway0.split()[6] == "yes" and gateway1.split()[6] == "no"
    assert "slots (the driver's view)" in out
    assert any(line.split()[1] == "down" and "60.0 s ago" in line for line in out.splitlines()
               if line[:1].isdigit())
    billing = next(line for line in out.splitlines() if "billing" in line)
    search = next(line for line in out.splitlines() if "search" in line)
    slot_of = {"billing": assignment.coordinator_slot("billing"),
               "search": assignment.coordinator_slot("search")}
    for line, group in ((billing, "billing"), (search, "search")):
        assert line.split()[1] == str(slot_of[group])
        assert (URLS[0] in line) == (slot_of[group] == 0)


def test_an_unused_store_says_so(tmp_path, capsys, frozen_clock):
    path = str(tmp_path / "empty")
    open_log(path)
    out = run_status(capsys, "--store", path)
    assert "no broker application has run on this store" in out
    doc = json.loads(run_status(capsys, "--store", path, "--json"))
    assert doc["ran"] is False and doc["application"] is None and doc["assignment"] is None
    assert doc["gateways"] == [] and doc["slots"] == [] and doc["groups"] == []


def test_bad_storage_options_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["cluster", "status", "--store", str(tmp_path), "--storage-options", "[1]"])
    assert "expected a JSON object" in capsys.readouterr().err


def test_human_rate():
    assert [cluster.human_rate(v) for v in (0, 812, 31_200, 4e6, 1.2e9)] == [
        "0 B/s", "812 B/s", "31.2 kB/s", "4.0 MB/s", "1.2 GB/s"]
