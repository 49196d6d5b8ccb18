"""KIP-848 with Kafka's own Java client: Kafka's system-test consumer
``org.apache.kafka.tools.VerifiableConsumer`` (kafka-tools from Maven Central, the
newest 4.x served, unchanged) against a gateway subprocess's Kafka listener, with
``--group-protocol consumer``, and a mixed group of one classic and one consumer-protocol
member (Kafka 4 allows it). Each consumer's JSON events (partitions assigned and revoked,
records consumed, offsets committed) are what is checked.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

from jobs.gateway_process import wait_for
from log_layout import open_log
from tests import jvm
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess
from tests.ingest_gateway.support import produce

pytestmark = [pytest.mark.slow, pytest.mark.kafka_broker]

TOPIC, PARTITIONS, RECORDS = "kip848-java", 6, 600
SETTINGS = {"gateway.group.consumer.heartbeat.interval.ms": 300,
            "gateway.group.consumer.session.timeout.ms": 6000,
            "gateway.group.min.session.timeout.ms": 1000}


@pytest.fixture(scope="module")
def tools():
    """kafka-tools jars: the newest 4.x version Maven Central serves (cached)."""
    from bench.kafka_side.fetch import TOOLS_VERSIONS, maven_fetch

    if shutil.which("java") is None:
        pytest.skip("no java on PATH")
    errors = []
    for version in TOOLS_VERSIONS:
        try:
            return maven_fetch("org.apache.kafka", "kafka-tools", version)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            errors.append(str(e)[:200])
    pytest.fail(f"no kafka-tools could be fetched: {errors}")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    url = str(tmp_path_factory.mktemp("kip848-java") / "store")
    open_log(url, fsync=False).create_topic(TOPIC, {"partitions": PARTITIONS})
    with KafkaGatewayProcess(url, SETTINGS) as gw:
        for p in range(PARTITIONS):
            produce(gw, TOPIC, p, [b"v%d" % i for i in range(p, RECORDS, PARTITIONS)])
        yield gw


class Verifiable:
    """One VerifiableConsumer process; ``events`` are its JSON lines as they come."""

    def __init__(self, tools, gw, group: str, protocol: str, log_path: str):
        cmd = jvm.java("-cp", tools.classpath,
               "org.apache.kafka.tools.VerifiableConsumer",
               "--bootstrap-server", gw.bootstrap, "--topic", TOPIC, "--group-id", group,
               "--group-protocol", protocol, "--reset-policy", "earliest")
        if protocol == "classic":
            cmd += ["--session-timeout", "6000"]
        self.events: list[dict] = []
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                self.events.append(json.loads(line))
            except ValueError:
                continue

    def owned(self) -> set[int]:
        """Partitions it holds now, from its assigned/revoked events."""
        held: set[int] = set()
        for e in list(self.events):
            parts = {p["partition"] for p in e.get("partitions", ())}
            if e["name"] == "partitions_assigned":
                held |= parts
            elif e["name"] == "partitions_revoked":
                held -= parts
        return held

    def consumed(self) -> int:
        return sum(e["count"] for e in list(self.events) if e["name"] == "records_consumed")

    def commits(self) -> list[dict]:
        return [e for e in list(self.events) if e["name"] == "offsets_committed"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # its shutdown hook closes: a clean leave
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _split(members) -> bool:
    owned = [m.owned() for m in members]
    return all(owned) and sum(map(len, owned)) == PARTITIONS \
        and set().union(*owned) == set(range(PARTITIONS))


@pytest.mark.parametrize("protocols", [("consumer", "consumer"), ("classic", "consumer")],
                         ids=["consumer", "mixed"])
def test_verifiable_consumers_share_a_group(tools, gateway, tmp_path, protocols):
    group = f"java-{'-'.join(protocols)}"
    members = [Verifiable(tools, gateway, group, p, str(tmp_path / f"{i}-{p}.log"))
               for i, p in enumerate(protocols)]
    try:
        wait_for(lambda: _split(members), timeout=60, interval=0.2,
                 what=f"{protocols} members splitting the partitions")
        wait_for(lambda: sum(m.consumed() for m in members) >= RECORDS, timeout=60,
                 interval=0.2, what="every record consumed")
        # VerifiableConsumer commits after each batch: every commit succeeded
        wait_for(lambda: all(m.commits() for m in members if m.consumed()), timeout=30,
                 interval=0.2, what="commits")
        failed = [c for m in members for c in m.commits() if not c["success"]]
        assert not failed, failed
        first, second = members
        kept = second.owned()
        first.stop()  # leaves: the other one takes every partition
        wait_for(lambda: second.owned() == set(range(PARTITIONS)), timeout=60, interval=0.2,
                 what="the remaining member owning every partition")
        assert kept <= second.owned()
    finally:
        for m in members:
            m.stop()
    logs = {p.name: p.read_text(errors="replace")[-2000:] for p in tmp_path.iterdir()}
    assert not any("Exception" in text and "FATAL" in text for text in logs.values()), logs


def test_describe_groups_from_kafka_consumer_groups_tool(tools, gateway, tmp_path):
    """``kafka-consumer-groups --describe`` (ConsumerGroupDescribe) shows a
    consumer-protocol member and its partitions."""
    m = Verifiable(tools, gateway, "java-describe", "consumer", str(tmp_path / "c.log"))
    try:
        wait_for(lambda: m.owned() == set(range(PARTITIONS)), timeout=60, interval=0.2,
                 what="the member owning every partition")
        out = subprocess.run(
            jvm.java("-cp", tools.classpath, "org.apache.kafka.tools.consumer.group"
             ".ConsumerGroupCommand", "--bootstrap-server", gateway.bootstrap, "--describe",
             "--group", "java-describe", "--members", "--verbose"),
            capture_output=True, text=True, timeout=120, env={**os.environ})
        assert out.returncode == 0, out.stderr[-2000:]
        assert "java-describe" in out.stdout and TOPIC in out.stdout, out.stdout
        assert "consumer" in out.stdout.lower(), out.stdout
    finally:
        m.stop()
    time.sleep(0)
