"""``gateway.kafka.advertised.listeners`` (Kafka's advertised.listeners): the address
Metadata tells clients, where the listener binds elsewhere (a wildcard, a NAT, the
broker application's per-slot addresses); a bad one stops the gateway at start-up."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jobs.gateway_process import ROOT
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess, call, connect

pytest.importorskip("kio")
from kio.schema.metadata.v12 import request as md12  # noqa: E402


def _brokers(gw):
    with connect(gw) as s:
        req = md12.MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False)
        return [(b.node_id, b.host, b.port) for b in call(s, req, 12)[1].brokers]


def test_metadata_names_the_advertised_address(tmp_path):
    gw = KafkaGatewayProcess(f"file://{tmp_path}", settings={
        "gateway.kafka.advertised.listeners": "PLAINTEXT://kafka-0.example:19092"})
    with gw:
        assert _brokers(gw) == [(0, "kafka-0.example", 19092)]
    with KafkaGatewayProcess(f"file://{tmp_path}") as plain:  # unset: its own address
        assert _brokers(plain) == [(0, "127.0.0.1", plain.kafka_port)]


@pytest.mark.parametrize("advertised, reason", [
    ("SSL://h:9093", "must be the listener's, PLAINTEXT"),
    ("PLAINTEXT://h", "expected one PLAINTEXT"),
    ("h:9092", "expected one PLAINTEXT"),
])
def test_a_bad_advertised_listener_stops_the_gateway_naming_it(tmp_path, advertised, reason):
    out = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "--store", str(tmp_path), "--set",
         "gateway.kafka.listeners=PLAINTEXT://127.0.0.1:0", "--set",
         f"gateway.kafka.advertised.listeners={advertised}", "gateway", "--port", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "gateway.kafka.advertised.listeners" in out.stderr and reason in out.stderr
