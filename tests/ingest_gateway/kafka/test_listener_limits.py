"""Slow, idle and too many clients of the Kafka listener (a real gateway process with
small limits): a request trickling in past ``request.read.timeout.ms`` and a connection
idle past ``gateway.kafka.connections.max.idle.ms`` are closed, a connection beyond
``gateway.max.connections`` is refused, and the gateway serves on after each."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from jobs.gateway_process import wait_for
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess, call, connect, \
    read_frame

pytest.importorskip("kio")


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    store = f"file://{tmp_path_factory.mktemp('kafka-limits')}"
    with KafkaGatewayProcess(store, settings={
            "gateway.request.read.timeout.ms": "800",
            "gateway.kafka.connections.max.idle.ms": "1500",
            "gateway.max.connections": "4"}) as gw:
        yield gw


def _serves(gw) -> None:
    assert _answers(gw)


def _answers(gw) -> bool:
    """Whether a new connection's ApiVersions is answered."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    with connect(gw) as s:
        req = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        try:
            return call(s, req, 3)[1].error_code == 0
        except (AssertionError, OSError):
            return False


def _closed_within(s: socket.socket, seconds: float) -> None:
    """The gateway closes ``s`` unanswered (a guard of ``seconds`` against a hang)."""
    s.settimeout(seconds)
    assert read_frame(s) is None  # EOF: closed, no answer


def test_a_request_trickling_in_is_cut_off(limited):
    with connect(limited) as s:
        s.sendall(struct.pack(">i", 100) + b"\0" * 10)  # 10 of 100 bytes, then nothing
        _closed_within(s, 20)
    with connect(limited) as s:  # one byte of a size prefix
        s.sendall(b"\0")
        _closed_within(s, 20)
    _serves(limited)


def test_an_idle_connection_is_closed(limited):
    with connect(limited) as idle:
        _closed_within(idle, 20)
    _serves(limited)


def test_connections_beyond_max_connections_are_refused(limited):
    held = [connect(limited) for _ in range(4)]
    try:
        from kio.schema.api_versions.v3.request import ApiVersionsRequest
        req = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        assert call(held[0], req, 3)[1].error_code == 0  # the four are served
        assert not _answers(limited)  # a fifth: closed unanswered
    finally:
        for s in held:
            s.close()
    # served again once the gateway has seen the four go (their ends arrive as EOFs)
    wait_for(lambda: _answers(limited), timeout=20, what="a connection served again")


def test_a_long_poll_in_hand_is_not_idle(limited):
    """A Fetch waiting longer than the idle limit for records is answered, not cut off:
    a connection with a request in hand is not idle."""
    import datetime

    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    from log_layout import open_log

    open_log(limited.store_url).create_topic("quiet", {"partitions": 1})
    wait_ms = 3000  # twice the idle limit
    req = FetchRequest(replica_id=-1, max_wait=datetime.timedelta(milliseconds=wait_ms),
                       min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                       session_epoch=-1, topics=(FetchTopic(topic="quiet", partitions=(
                           FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                          log_start_offset=-1, partition_max_bytes=1 << 20),)),),
                       forgotten_topics_data=(), rack_id="")
    with connect(limited) as s:
        s.settimeout(30)
        _, resp = call(s, req, 12)  # answered when max_wait ends: not cut off as idle
    assert resp.responses[0].partitions[0].error_code == 0


@pytest.fixture(scope="module")
def queued(tmp_path_factory):
    """A gateway whose listener holds at most one 64 KiB request at a time."""
    store = f"file://{tmp_path_factory.mktemp('kafka-queued')}"
    with KafkaGatewayProcess(store, settings={
            "gateway.socket.request.max.bytes": "65536",
            "gateway.kafka.queued.max.request.bytes": "65536",
            "gateway.kafka.connection.queued.max.request.bytes": "65536"}) as gw:
        yield gw


def _api_versions_frame() -> bytes:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    from tests.ingest_gateway.kafka.kafka_gateway import frame
    return frame(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)


def _answered_within(s: socket.socket, seconds: float) -> bool:
    s.settimeout(seconds)
    try:
        return read_frame(s) is not None
    except TimeoutError:
        return False


def test_requests_in_hand_are_bounded_over_the_listener(queued):
    """A request announced at the whole budget holds it while it arrives: another
    connection's request is not read until the first is whole and handled."""
    with connect(queued) as big, connect(queued) as other:
        big.sendall(struct.pack(">i", 65536) + b"\0" * 1000)  # announced, partly sent
        time.sleep(0.5)  # an order, not a timing: the size is read before the other's
        other.sendall(_api_versions_frame())
        assert not _answered_within(other, 1.5)  # waits for memory, not refused
        big.close()  # the first request ends unread: its bytes are given back
        assert _answered_within(other, 20)
    _serves(queued)



def test_a_byte_budget_waits_until_bytes_are_given_back():
    """The per-connection and per-listener bound: ``take`` waits while the bytes do not
    fit, wakes when enough are given back, and a cancelled wait takes nothing."""
    import asyncio

    from ingest_gateway.kafka.listener import ByteBudget

    async def scenario():
        budget = ByteBudget(100)
        await budget.take(60)
        second = asyncio.ensure_future(budget.take(50))
        third = asyncio.ensure_future(budget.take(70))
        await asyncio.sleep(0)
        assert not second.done() and not third.done()
        third.cancel()
        budget.give(60)
        await second
        assert budget.used == 50
        assert third.cancelled()
        budget.give(50)
        assert budget.used == 0

    asyncio.run(scenario())
