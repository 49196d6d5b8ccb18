"""A real gateway subprocess with its Kafka listener, and a raw Kafka request helper.

``kafka_gateway`` (session fixture: tests/conftest.py's ``shared_gateway`` on a local
store): ``gw.bootstrap`` is ``127.0.0.1:<port>`` of the Kafka listener, ``gw.url`` the
HTTP one; ``own_kafka_gateway`` (module fixture) is a default one on a fresh store, for a
module whose tests may not share one.
``call(sock, request, version)`` sends one kio request over a plain socket and reads
its answer: for hostile-input tests and for answers a client library hides.
"""

from __future__ import annotations

import io
import socket
import struct

import pytest

from jobs.gateway_process import GatewayProcess, free_port
from log_layout import open_log


class KafkaGatewayProcess(GatewayProcess):
    """A gateway child process with ``gateway.kafka.listeners`` on a free port."""

    def __init__(self, store_url: str, settings: dict | None = None, **kw):
        self.kafka_port = free_port()
        super().__init__(store_url, settings={
            "gateway.kafka.listeners": f"PLAINTEXT://127.0.0.1:{self.kafka_port}",
            **(settings or {})}, **kw)
        self.bootstrap = f"127.0.0.1:{self.kafka_port}"


@pytest.fixture(scope="session")
def kafka_store(shared_log):
    """The URL of :func:`kafka_gateway`'s store (``file://`` and the folder), as the
    gateway names it."""
    return shared_log.url


@pytest.fixture(scope="session")
def kafka_gateway(shared_gateway):
    """tests/conftest.py's ``shared_gateway``: one per session (per xdist worker), so a
    test names its topics, groups and transactional ids uniquely."""
    return shared_gateway


@pytest.fixture(scope="session")
def kafka_log(shared_log):
    return shared_log


@pytest.fixture(scope="module")
def own_kafka_store(tmp_path_factory):
    return f"file://{tmp_path_factory.mktemp('kafka-gw')}"


@pytest.fixture(scope="module")
def own_kafka_gateway(own_kafka_store):
    """A default gateway of the module's own, on a fresh store: for a module whose tests
    change what every test of the store sees (client quotas, ACLs) and so may not share
    :func:`kafka_gateway`; such a module overrides ``kafka_gateway`` (and ``kafka_log``)
    with ``own_kafka_gateway`` (``own_kafka_log``)."""
    with KafkaGatewayProcess(own_kafka_store) as gw:
        yield gw


@pytest.fixture(scope="module")
def own_kafka_log(own_kafka_store):
    return open_log(own_kafka_store)


def connect(gw: KafkaGatewayProcess, timeout: float = 10) -> socket.socket:
    """A raw connection to the Kafka listener; ``timeout`` bounds each send and receive."""
    return socket.create_connection(("127.0.0.1", gw.kafka_port), timeout=timeout)


def frame(request, version: int, correlation_id: int = 7, client_id: str = "raw") -> bytes:
    """A framed request: header v1, or v2 (tagged fields) for a flexible version."""
    from kio.serial import entity_writer

    cid = client_id.encode()
    head = struct.pack(">hhih", type(request).__api_key__, version, correlation_id,
                       len(cid)) + cid
    if type(request).__flexible__:
        head += b"\0"
    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    payload = head + body.getvalue()
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes | None:
    """One answer's bytes after the size, or None if the gateway closed the connection."""
    def exactly(n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    head = exactly(4)
    if head is None:
        return None
    return exactly(struct.unpack(">i", head)[0])


def call(sock: socket.socket, request, version: int, correlation_id: int = 7):
    """Send ``request`` at ``version``; (correlation id, kio response)."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    sock.sendall(frame(request, version, correlation_id))
    data = read_frame(sock)
    assert data is not None, "the gateway closed the connection"
    cls = load_response_schema(type(request).__api_key__, version)
    pos = 4 + (1 if cls.__flexible__ and type(request).__api_key__ != 18 else 0)
    body, _ = entity_reader(cls)(data, pos)
    return struct.unpack(">i", data[:4])[0], body


def read_in_group(bootstrap: str, topic: str, group: str, count: int, *, timeout: float = 20,
                  committed_partitions: int = 0) -> tuple[set, list]:
    """Subscribe a confluent-kafka consumer of ``group`` to ``topic`` from the earliest
    offsets, read ``count`` records as (partition, value) and commit them; returns them
    and, for partitions 0..``committed_partitions``-1, the offsets the group committed."""
    import confluent_kafka as ck

    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got: set = set()
    try:
        while len(got) < count:
            msg = c.poll(timeout)
            assert msg is not None, f"only {len(got)} of {count} records within the timeout"
            assert not msg.error(), msg.error()
            got.add((msg.partition(), msg.value()))
        c.commit(asynchronous=False)
        committed = c.committed([ck.TopicPartition(topic, q)
                                 for q in range(committed_partitions)], timeout=timeout) \
            if committed_partitions else []
    finally:
        c.close()
    return got, [tp.offset for tp in committed]


@pytest.fixture(scope="module")
def tools():
    """kafka-tools' class path (newest served version), or skip when Maven cannot fetch it."""
    from bench.kafka_side.fetch import TOOLS_VERSIONS, _newest

    notes: list[str] = []
    jars = _newest("kafka-tools", TOOLS_VERSIONS, notes, log=lambda *_: None)
    if jars is None:
        pytest.skip(f"kafka-tools not fetched: {notes}")
    return jars
