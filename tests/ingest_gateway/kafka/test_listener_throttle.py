"""The listener's KIP-219 mute, driven by a clock the test holds: the real listener on a
real socket, with a quota manager that throttles every Produce 5000 ms and a Produce
handler that answers without a store. Produce v9: the answer goes at once with
``throttle_time_ms`` 5000, and the next request is not handled until the mute's sleep
(of exactly 5 s on the test's clock) returns. Produce v5 (a client that does not
throttle itself): the answer itself waits for the sleep. Nothing here waits on wall
time: the sleep is the test's, released when the test says."""

from __future__ import annotations

import asyncio
import datetime
import struct
import sys
import types

import pytest

import conf
from ingest_gateway.kafka import produce, throttle
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import KafkaContext
from ingest_gateway.kafka.listener import KafkaListener
from ingest_gateway.kafka.wire import API_PRODUCE, API_VERSIONS
from ingest_gateway.server.gateway import Gateway
from tests.ingest_gateway.kafka.kafka_gateway import frame

pytest.importorskip("kio")

THROTTLE_MS = 5000


class Quotas:
    """Every Produce is over its quota by THROTTLE_MS; the calls are kept."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []

    def record(self, principal: str, kind: str, nbytes: int, now_s: float,
               client_id: str = "") -> int:
        if kind != "request":  # the byte quotas' calls (each request's time counts too)
            self.calls.append((principal, kind, nbytes))
        return THROTTLE_MS if kind == "produce" else 0


class Clock:
    """The mute's clock and sleep: a sleep is recorded, then waits for ``release``."""

    def __init__(self) -> None:
        self.now, self.slept = 100.0, []
        self.entered, self.release = asyncio.Event(), asyncio.Event()

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.entered.set()
        await self.release.wait()
        self.now += seconds


async def _listener(monkeypatch) -> tuple[KafkaListener, Quotas, Clock, dict]:
    settings = conf.load({"gateway.kafka.listeners": "PLAINTEXT://127.0.0.1:0"}, environ={})
    quotas, clock, handled = Quotas(), Clock(), {API_PRODUCE: 0, API_VERSIONS: 0}
    # no store: the handlers below answer without one
    gateway = Gateway(settings=settings, log=None, batcher=None, topics=None, quotas=quotas,
                      metrics=types.SimpleNamespace(registry=None))
    listener = KafkaListener(KafkaContext(gateway, "127.0.0.1", 0), settings.gateway,
                             sec.ListenerSecurity("PLAINTEXT", settings, None))
    real = throttle.Mute
    monkeypatch.setattr(throttle, "Mute", lambda: real(clock.clock, clock.sleep))
    versions = listener.handlers[API_VERSIONS]

    async def produced(broker, head, req):  # no store: offset 0 for each partition
        handled[API_PRODUCE] += 1
        return produce.answer(head, int(req.acks), [
            (t.name, p.index, 0, 0, None) for t in req.topic_data for p in t.partition_data])

    async def api_versions(broker, head, req):
        handled[API_VERSIONS] += 1
        return await versions(broker, head, req)

    listener.handlers.update({API_PRODUCE: produced, API_VERSIONS: api_versions})
    listener.server = await asyncio.start_server(listener._connection, "127.0.0.1", 0)
    return listener, quotas, clock, handled


def _produce(version: int):
    from kio.index import load_request_schema

    cls = load_request_schema(API_PRODUCE, version)
    mod = sys.modules[cls.__module__]
    return cls(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
               topic_data=(mod.TopicProduceData(name="t", partition_data=(
                   mod.PartitionProduceData(index=0, records=None),)),))


def _versions():
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    return ApiVersionsRequest(client_software_name="t", client_software_version="1")


async def _answer(reader: asyncio.StreamReader, api_key: int, version: int):
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    (size,) = struct.unpack(">i", await reader.readexactly(4))
    data = await reader.readexactly(size)
    cls = load_response_schema(api_key, version)
    pos = 4 + (1 if cls.__flexible__ and api_key != API_VERSIONS else 0)
    return entity_reader(cls)(data, pos)[0]


def _run(monkeypatch, scenario) -> None:
    async def main() -> None:
        listener, quotas, clock, handled = await _listener(monkeypatch)
        port = listener.server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await asyncio.wait_for(scenario(reader, writer, quotas, clock, handled), 60)
        finally:
            writer.close()
            await listener.close()

    asyncio.run(main())


def test_a_throttled_answer_goes_at_once_and_mutes_the_connection(monkeypatch):
    async def scenario(reader, writer, quotas, clock, handled):
        request = frame(_produce(9), 9)
        writer.write(request)
        answer = await _answer(reader, API_PRODUCE, 9)
        assert answer.throttle_time == datetime.timedelta(milliseconds=THROTTLE_MS)
        assert quotas.calls == [("User:ANONYMOUS", "produce", len(request) - 4)]
        assert clock.slept == []  # not held back: Produce v9's client throttles itself
        writer.write(frame(_versions(), 3))
        await clock.entered.wait()
        assert clock.slept == [THROTTLE_MS / 1000]
        assert handled[API_VERSIONS] == 0  # muted: the next request is not handled
        clock.release.set()
        assert int((await _answer(reader, API_VERSIONS, 3)).error_code) == 0
        assert handled == {API_PRODUCE: 1, API_VERSIONS: 1}

    _run(monkeypatch, scenario)


def test_an_old_clients_throttled_answer_is_held_back(monkeypatch):
    async def scenario(reader, writer, quotas, clock, handled):
        writer.write(frame(_produce(5), 5))
        answering = asyncio.ensure_future(_answer(reader, API_PRODUCE, 5))
        await clock.entered.wait()
        assert clock.slept == [THROTTLE_MS / 1000] and handled[API_PRODUCE] == 1
        assert not answering.done()  # the answer waits for the mute's sleep
        clock.release.set()
        answer = await answering
        assert answer.throttle_time == datetime.timedelta(milliseconds=THROTTLE_MS)

    _run(monkeypatch, scenario)


def test_mute_extends_to_the_later_deadline():
    clock = Clock()
    mute = throttle.Mute(clock.clock, clock.sleep)
    mute.extend(2000)
    mute.extend(500)  # an earlier deadline does not shorten it
    assert mute.until == clock.now + 2.0
