"""What the broker application asks of the store when nothing happens (issue 33).

The driver's keeper over a local store that counts its calls (liveness comes from
Spark and /healthz, so an idle driver reads only what changes rarely, each on its
own interval, and never lists the gateways); and a real gateway slot that learns a
new assignment from the driver's word (``/healthz?assignment=<name>``) rather than
from polling the store. ``bench/idle_requests.py`` counts the requests at an S3
endpoint.
"""

from __future__ import annotations

import collections
import json
import time
import urllib.request

import pytest

from jobs.broker_app import SlotState
from jobs.leadership import (HEARTBEAT_S, REGISTRATIONS_EVERY_S, TOPICS_EVERY_S,
                             LeadershipKeeper)
from log_layout import Log
from log_layout.brokers import (ASSIGNMENTS_FOLDER, OFFSETS_PARTITIONS, OFFSETS_TOPIC,
                                Assignment, BrokerRegistry)
from log_layout.local_store import LocalStore


class CountingStore(LocalStore):
    """A local store that counts calls by primitive."""

    def __init__(self, root: str):
        super().__init__(root, fsync=False)
        self.calls: collections.Counter[str] = collections.Counter()

    def read(self, path):
        self.calls["read"] += 1
        return super().read(path)

    def read_if_changed(self, path, tag):
        data, new = super().read_if_changed(path, tag)
        self.calls["read_if_changed" if data is not None else "not_modified"] += 1
        return data, new

    def list(self, folder):
        self.calls["list"] += 1
        return super().list(folder)

    def list_folders(self, folder):
        self.calls["list"] += 1
        return super().list_folders(folder)

    def put_replace(self, path, data):
        self.calls["put_replace"] += 1
        return super().put_replace(path, data)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_idle_driver_reads_little_and_lists_nothing(tmp_path):
    store = CountingStore(str(tmp_path / "store"))
    log = Log(store)
    for i in range(3):
        log.create_topic(f"t{i}", {"partitions": 400})
    clock = Clock()
    k = LeadershipKeeper(log, 2, clock=clock, out=lambda line: None, failover_s=3)
    k.start({"application": "app-test"})
    slots = [SlotState(s, 9000 + s, host="127.0.0.1", url=f"http://127.0.0.1:{9000 + s}",
                       up=True) for s in range(2)]
    assert k.tick(slots) is not None  # the first assignment: topics read, written
    store.calls.clear()
    ticks, tick_s = 40, 0.5  # 20 s of the monitor's ticks with nothing changing
    for _ in range(ticks):
        clock.now += tick_s
        assert k.tick(slots) is None
    seconds = ticks * tick_s
    assert seconds < TOPICS_EVERY_S and store.calls["list"] == 0, store.calls
    assert store.calls["read"] == 0, store.calls  # no plain reads: conditional ones
    # each slot's registration every REGISTRATIONS_EVERY_S, the copy every 10 s, the
    # driver document at each heartbeat: however many partitions
    conditional = store.calls["read_if_changed"] + store.calls["not_modified"]
    assert conditional <= 2 * seconds / REGISTRATIONS_EVERY_S + seconds / 10 + \
        seconds / HEARTBEAT_S + 2, store.calls
    assert store.calls["put_replace"] <= seconds / HEARTBEAT_S + 1, store.calls
    # past the topics interval, one listing of the store's root: no topic read again
    clock.now += TOPICS_EVERY_S
    store.calls.clear()
    assert k.tick(slots) is None
    assert store.calls["list"] == 1 and store.calls["read"] == 0, store.calls


def test_a_new_topic_is_read_at_the_next_listing(tmp_path):
    store = CountingStore(str(tmp_path / "store"))
    log = Log(store)
    log.create_topic("old", {"partitions": 2})
    clock = Clock()
    k = LeadershipKeeper(log, 2, clock=clock, out=lambda line: None)
    k.start({"application": "app-test"})
    slots = [SlotState(s, 9000 + s, url=f"http://127.0.0.1:{9000 + s}", up=True)
             for s in range(2)]
    k.tick(slots)
    log.create_topic("new", {"partitions": 3})
    clock.now += TOPICS_EVERY_S
    a = k.tick(slots)
    assert a is not None and len(a.partitions["new"]) == 3


@pytest.mark.slow
def test_a_gateway_slot_takes_the_assignment_the_driver_names(tmp_path):
    """An assignment written without its copy (``assignment.json``) would wait for the
    gateway's listing (once a minute); named in a /healthz probe it is read at once."""
    from jobs.gateway_process import GatewayProcess, free_port
    from log_layout import open_log

    store = str(tmp_path / "store")
    log = open_log(store, fsync=False)
    log.create_topic("t", {"partitions": 2})
    registry = BrokerRegistry(log.store)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    first = Assignment(1, 1, {0: url}, (0,), {"t": (0, 0), OFFSETS_TOPIC: (0,) * OFFSETS_PARTITIONS})
    assert registry.publish(first)
    with GatewayProcess(store, port=port, settings={
            "gateway.broker.id": "0", "gateway.advertised.listeners": url}) as gw:
        assert _generation(url) == 1
        second = Assignment(1, 2, {0: url}, (0,), {"t": (0, 0), OFFSETS_TOPIC: (0,) * OFFSETS_PARTITIONS})
        log.store.put_exclusive(f"{ASSIGNMENTS_FOLDER}/{second.name}",
                                json.dumps(second.to_json()).encode())
        for bogus in ("../driver.json", "9999999999-9999999999.json"):  # ignored
            urllib.request.urlopen(f"{url}/healthz?assignment={bogus}", timeout=5).read()
        urllib.request.urlopen(f"{url}/healthz?assignment={second.name}", timeout=5).read()
        deadline = time.monotonic() + 5
        while _generation(url) != 2:
            assert time.monotonic() < deadline, "the named assignment was not taken"
            time.sleep(0.05)
        assert gw.proc.poll() is None


def _generation(url: str) -> int | None:
    with urllib.request.urlopen(f"{url}/metadata?topics=t", timeout=5) as r:
        return json.load(r).get("generation")
