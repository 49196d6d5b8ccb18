"""Hostile Kafka requests against a real gateway process: it must not die, hang or grow.

For every (API, version) the listener offers: a valid request header followed by a
random, truncated or mutated-from-valid body (``fuzz_cases``, seeded; the kept crashes
first), sent in batches of concurrent connections. After each batch the gateway
process must still be alive (a native abort kills it without a Python exception),
answer ApiVersions on a new connection (no hang), stay within an RSS bound, and carry
a confluent-kafka producer's records to a consumer.

``SPARKLOG_KAFKA_FUZZ_CASES`` sets the cases of the default run (3,000);
``SPARKLOG_KAFKA_FUZZ_CASES_SLOW`` those of the ``slow`` run (8,000; the README says
how to run many more).
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from jobs.gateway_process import wait_for
from log_layout import open_log
from tests.ingest_gateway.kafka import fuzz_cases
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess, call, connect

ck = pytest.importorskip("confluent_kafka")

BATCH = 250
#: RSS the gateway may gain over the run, after its first batch has warmed it up
RSS_GROWTH_BYTES = 200 * 2**20
CANARY = "fuzz-canary"


@pytest.fixture
def fuzzed_gateway(tmp_path):
    store = f"file://{tmp_path / 'store'}"
    open_log(store).create_topic(CANARY, {"partitions": 1})
    # a short read timeout: truncated bodies are cut off within the batch
    with KafkaGatewayProcess(store, settings={"gateway.request.read.timeout.ms": "2000"}) as gw:
        yield gw


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _send_batch(gw, batch: list[tuple[int, int, bytes]]) -> None:
    """Each case on its own connection, all at once; then wait (bounded) for each to
    be answered or closed."""
    socks = []
    for api_key, version, body in batch:
        try:
            s = socket.create_connection(("127.0.0.1", gw.kafka_port), timeout=10)
        except ConnectionRefusedError:
            gw.proc.wait(5)
            pytest.fail(f"the gateway died ({gw.proc.returncode}) within a batch, "
                        f"by api {api_key} v{version} at the latest")
        try:
            s.sendall(fuzz_cases.framed(api_key, version, body))
        except OSError:  # closed already: a refusal
            pass
        socks.append(s)
    deadline = time.monotonic() + 10
    for s in socks:
        s.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            s.recv(1 << 16)
        except OSError:  # timeout or reset: the gateway's check is what counts
            pass
        s.close()


def _still_serves(gw, batch_no: int, seed: int) -> None:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    where = f"after batch {batch_no} of seed {seed}"
    assert gw.proc.poll() is None, f"the gateway died ({gw.proc.returncode}) {where}"
    with connect(gw) as s:
        req = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        assert call(s, req, 3)[1].error_code == 0, f"ApiVersions refused {where}"


def _client_round_trip(gw, n: int) -> None:
    """A well-formed client still produces and consumes through the gateway."""
    p = ck.Producer({"bootstrap.servers": gw.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(10):
        p.produce(CANARY, value=f"{n}-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = ck.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "fuzz-check",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    c.assign([ck.TopicPartition(CANARY, 0, ck.OFFSET_BEGINNING)])
    seen: set = set()
    want = {f"{n}-{i}".encode() for i in range(10)}
    try:
        def read() -> bool:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                seen.add(m.value())
            return want <= seen
        wait_for(read, timeout=30, interval=0, what=f"the canary's records of round {n}")
    finally:
        c.close()


def _fuzz(gw, seed: int, count: int) -> None:
    cases = list(fuzz_cases.cases(seed, count))
    rss_base = None
    for batch_no, start in enumerate(range(0, len(cases), BATCH)):
        _send_batch(gw, cases[start:start + BATCH])
        _still_serves(gw, batch_no, seed)
        rss = _rss(gw.proc.pid)
        if rss_base is None:
            rss_base = rss
        assert rss - rss_base < RSS_GROWTH_BYTES, \
            f"RSS grew {(rss - rss_base) >> 20} MiB by batch {batch_no} of seed {seed}"
        if batch_no % 4 == 0:
            _client_round_trip(gw, batch_no)
    _client_round_trip(gw, -1)


def test_hostile_requests_leave_the_gateway_serving(fuzzed_gateway):
    # 1,000 in the inner loop (make test-fast); the slow run below sends 8,000 more
    _fuzz(fuzzed_gateway, seed=11,
          count=int(os.environ.get("SPARKLOG_KAFKA_FUZZ_CASES", "1000")))


@pytest.mark.slow
def test_many_hostile_requests_leave_the_gateway_serving(fuzzed_gateway):
    _fuzz(fuzzed_gateway, seed=12,
          count=int(os.environ.get("SPARKLOG_KAFKA_FUZZ_CASES_SLOW", "8000")))
