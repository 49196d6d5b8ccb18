"""The clients across gateways of the broker application (issue 13), over real sockets.

Three gateway processes are slots 0, 1 and 2 of one application on one local store;
the test plays the driver and publishes the assignments (``BrokerRegistry.publish``).
The Producer and the Consumer are given a bootstrap list naming ONE gateway and
must find the rest through ``GET /metadata``: each batch goes to its partition's
leader, follows it when an assignment moves it or its gateway is SIGKILLed, and
no acknowledged record is lost or written twice (read back from the store).
"""

from __future__ import annotations

import time

import pytest

from ingest_gateway.client import Consumer, Producer
from ingest_gateway.client.cluster import ClusterRouter
from jobs.gateway_process import GatewayProcess, free_port, wait_for
from log_layout import open_log
from log_layout.brokers import (
    OFFSETS_PARTITIONS,
)
from tests.ingest_gateway.slots import SlotApplication
from tests.jobs.cli_proc import sparklog, text

pytestmark = pytest.mark.slow

TOPIC = "orders"
PARTITIONS = 6
SLOTS = (0, 1, 2)


class Application(SlotApplication):
    """Three gateway slots over one store, and the test as their driver."""

    def __init__(self, store_url: str, slots: tuple[int, ...] = SLOTS):
        super().__init__(store_url, slots)

    def publish(self, leaders: list[int], *, coordinator: int = 0,
                live: tuple[int, ...] | None = None) -> None:
        """A new assignment: partition p of TOPIC led by ``leaders[p]``, every group
        coordinated by ``coordinator``."""
        self.publish_assignment({TOPIC: leaders}, offsets=(coordinator,) * OFFSETS_PARTITIONS,
                                live=live)

    def wait_applied(self, leaders: list[int], coordinator: int = 0) -> None:
        """Until every live gateway's metadata names this assignment's leaders."""
        def applied() -> bool:
            for gw in self.gateways.values():
                if gw.proc is None or gw.proc.poll() is not None:
                    continue
                status, doc, _ = gw.request("GET", f"/metadata?topics={TOPIC}&groups=g")
                if status != 200 or doc["generation"] != self.generation:
                    return False
                got = [p["leader"]["slot"] for p in doc["topics"][0]["partitions"]]
                if got != leaders or doc["groups"][0]["coordinator"]["slot"] != coordinator:
                    return False
            return True
        wait_for(applied, timeout=20, what=f"assignment {self.generation} applied")



@pytest.fixture
def app(tmp_path):
    a = Application(str(tmp_path / "store"))
    a.log.create_topic(TOPIC, {"partitions": PARTITIONS})
    with a.running():
        yield a


class Sent:
    """What a test produced: per partition the values in send order, and the handles."""

    def __init__(self) -> None:
        self.values: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.handles: list = []

    def send(self, producer: Producer, rounds: int, pause_s: float = 0.0) -> None:
        """``rounds`` records to every partition, round-robin."""
        for _ in range(rounds):
            for p in range(PARTITIONS):
                value = b"%d-%d" % (p, len(self.values[p]))
                self.values[p].append(value)
                self.handles.append(producer.send(TOPIC, value, partition=p))
            if pause_s:
                time.sleep(pause_s)

    def check(self, log) -> None:
        """Every handle acknowledged, and each partition holds exactly what was sent, in
        order: nothing lost, nothing twice, at the offsets the handles gave."""
        metas = [h.result(timeout=120) for h in self.handles]
        for p in range(PARTITIONS):
            rows = log.partition(TOPIC, p).read_table(0).column("value").to_pylist()
            assert rows == self.values[p], f"partition {p}: {len(rows)} rows, " \
                f"{len(self.values[p])} sent"
        offsets = {}
        for m in metas:
            assert m.offset == offsets.get(m.partition, 0), m  # consecutive, once each
            offsets[m.partition] = m.offset + 1


def refusals(app: Application, code: str) -> float:
    """How many requests the live gateways refused with ``code`` (their /metrics)."""
    total = 0.0
    for gw in app.gateways.values():
        if gw.proc is not None and gw.proc.poll() is None:
            _status, text, _ = gw.request("GET", "/metrics")
            for line in text.decode().splitlines():
                if line.startswith(f'sparklog_gateway_errors_total{{code="{code}"}}'):
                    total += float(line.split()[-1])
    return total


def leaders_seen(producer: Producer) -> list[str | None]:
    return [(s.base if (s := producer._router.leader(TOPIC, p)) else None)
            for p in range(PARTITIONS)]


def test_producer_follows_leaders_moves_and_a_killed_gateway(app):
    first = [0, 1, 2, 0, 1, 2]
    app.publish(first)
    app.wait_applied(first)
    sent = Sent()
    bootstrap = app.url(0).removeprefix("http://")  # one gateway, HOST:PORT
    with Producer(bootstrap, linger_ms=2, retry_backoff_ms=20) as producer:
        sent.send(producer, 50)
        producer.flush()
        # each partition's batches went to its leader, found from one bootstrap gateway
        assert leaders_seen(producer) == [app.url(s) for s in first]
        assert producer._router.gateways() == [app.url(s) for s in SLOTS]

        # every partition moves while records keep coming
        moved = [1, 2, 0, 2, 0, 1]
        sent.send(producer, 20, pause_s=0.005)
        app.publish(moved)
        sent.send(producer, 150, pause_s=0.005)
        app.wait_applied(moved)
        sent.send(producer, 20)
        producer.flush()
        assert leaders_seen(producer) == [app.url(s) for s in moved]
        assert refusals(app, "not_leader") > 0  # batches were in flight when they moved

        # the bootstrap gateway dies (SIGKILL) mid-stream; its partitions move away
        sent.send(producer, 20, pause_s=0.005)
        app.gateways[0].kill()
        sent.send(producer, 20, pause_s=0.005)
        survivors = [1, 2, 1, 2, 2, 1]
        app.publish(survivors, coordinator=1, live=(1, 2))
        sent.send(producer, 100, pause_s=0.005)
        producer.flush()
        assert leaders_seen(producer) == [app.url(s) for s in survivors]
    assert producer.records_failed == 0, producer.first_errors
    sent.check(app.log)


def test_consumer_group_reads_through_moves_and_a_killed_gateway(app):
    first = [0, 1, 2, 0, 1, 2]
    app.publish(first, coordinator=1)
    app.wait_applied(first, coordinator=1)
    sent = Sent()
    with Producer(app.url(2), linger_ms=1) as producer:
        sent.send(producer, 30)
        producer.flush()
        seen: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        consumer = Consumer(gateway=[app.url(0)], group_id="g", auto_offset_reset="earliest",
                            fetch_max_wait_ms=200, heartbeat_interval_ms=200,
                            session_timeout_ms=10_000, request_timeout_ms=20_000,
                            retry_backoff_ms=20)

        def read_until(count: int) -> None:
            def enough() -> bool:
                for r in consumer.poll(0.2):
                    seen[r.partition].append(r.value)
                return sum(len(set(v)) for v in seen.values()) >= count
            wait_for(enough, timeout=60, what=f"{count} records read")

        with consumer:
            consumer.subscribe([TOPIC])
            read_until(30 * PARTITIONS)
            consumer.commit()
            # the group's coordinator and every partition move
            moved = [2, 0, 1, 2, 0, 1]
            app.publish(moved, coordinator=2)
            sent.send(producer, 10, pause_s=0.005)
            read_until(40 * PARTITIONS)
            app.wait_applied(moved, coordinator=2)
            consumer.commit()  # at the new coordinator (the old one refuses: followed)
            assert refusals(app, "not_coordinator") > 0
            # gateway 0 is killed; its partitions go to the others
            app.gateways[0].kill()
            survivors = [2, 1, 1, 2, 1, 2]
            app.publish(survivors, coordinator=2, live=(1, 2))
            sent.send(producer, 10, pause_s=0.005)
            producer.flush()
            read_until(50 * PARTITIONS)
            consumer.commit()
            committed = {p: consumer.committed((TOPIC, p)) for p in range(PARTITIONS)}
    sent.check(app.log)
    # at least once, in order (a record read again after a rebalance adds nothing new)
    for p in range(PARTITIONS):
        assert list(dict.fromkeys(seen[p])) == sent.values[p], p
    assert committed == {p: 50 for p in range(PARTITIONS)}


def test_a_standalone_gateway_is_the_whole_cluster(tmp_path):
    """No broker.id: the metadata names no gateway (url null = the one asked), and the
    clients behave as they always did."""
    store = str(tmp_path / "store")
    open_log(store).create_topic(TOPIC, {"partitions": 2})
    with GatewayProcess(store) as gw, ClusterRouter(gw.url) as router:
        assert router.leader(TOPIC, 1).base == gw.url
        assert router.coordinator("g").base == gw.url
        assert router.generation is None and router.gateways() == [gw.url]
        with Producer(f"http://127.0.0.1:{free_port()},{gw.url}") as producer:
            assert producer.send(TOPIC, b"x", partition=1).result(30).offset == 0


def test_the_cli_takes_a_bootstrap_list(app):
    leaders = [0, 1, 2, 0, 1, 2]
    app.publish(leaders, coordinator=2)
    app.wait_applied(leaders, coordinator=2)
    store, dead = app.store_url, f"127.0.0.1:{free_port()}"
    servers = f"{dead},{app.url(1).removeprefix('http://')}"  # a dead one first
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(60))
    run = sparklog("--store", store, "produce", TOPIC, "--bootstrap-server", servers,
                   "--key-separator", ":", stdin=lines)
    assert run.returncode == 0, text(run)
    stored = [v for p in range(PARTITIONS)
              for v in app.log.partition(TOPIC, p).read_table(0).column("value").to_pylist()]
    assert sorted(stored) == sorted(b"v%d" % i for i in range(60))
    run = sparklog("--store", store, "consume", TOPIC, "--group", "g", "--via-gateway",
                   "--from-beginning", "--bootstrap-server", servers, "--max-messages", "60")
    out, err = text(run)
    assert run.returncode == 0, err
    assert sorted(line.split("\t")[4] for line in out.splitlines()) == \
        sorted(f"v{i}" for i in range(60))
    run = sparklog("--store", store, "groups", "--bootstrap-server", servers, "list")
    assert run.returncode == 0 and "g" in text(run)[0].split(), text(run)
    run = sparklog("--store", store, "topics", "describe", TOPIC, "--bootstrap-server", servers)
    out, _ = text(run)
    assert run.returncode == 0 and all(app.url(s) in out for s in SLOTS), out
