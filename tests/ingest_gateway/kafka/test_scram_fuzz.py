"""Hostile SCRAM exchanges against a gateway process (the target in its own process: a
native abort or a hang fails the test, not the run).

Seeded cases, each on its own connection after a SaslHandshake (v1, or v0 with bare
tokens): the client-first message mutated from a valid one (bytes flipped, cut,
grown, spliced with ``=``, ``,``, NUL, non-UTF-8, huge attribute values, extensions,
channel-binding flags), or a valid client-first followed by a mutated client-final
(its nonce, proof, channel binding or attributes bent, truncated, repeated), a third
message, or bare frames of hostile sizes. The gateway must answer each with
SASL_AUTHENTICATION_FAILED or ILLEGAL_SASL_STATE and close (or close a bare-token
connection), never log anyone in without the password, and after every batch still
be alive, answer ApiVersions, log a real client in with SCRAM and carry its records,
within an RSS bound.

``SPARKLOG_SCRAM_FUZZ_CASES`` sets the cases (default 600; 3,000 more in the slow run).
"""

from __future__ import annotations

import os
import random
import socket
import struct
import time

import pytest
import scramp

from ingest_gateway.security.scram import credential
from log_layout import open_log, scram as scram_docs
from tests.ingest_gateway.kafka.fuzz_cases import framed
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess, call, connect

ck = pytest.importorskip("confluent_kafka")

PASSWORD = "fuzz-pw"
TOPIC = "scram-fuzz"
BATCH = 100
RSS_GROWTH_BYTES = 150 * 2**20
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_SPLICE = (b"=", b",", b"\0", b"\xff\xfe", b"=2C", b"=3D", b"=ZZ", b"r=", b"p=", b"c=",
           b"n=", b"s=", b"i=999999999", b"m=ext", b"tokenauth=true", b"a" * 5000)


@pytest.fixture
def scram_target(tmp_path):
    store = f"file://{tmp_path / 'store'}"
    log = open_log(store)
    log.create_topic(TOPIC, {"partitions": 1})
    scram_docs.alter(log.store, upsert={("alice", m): credential(m, PASSWORD)
                                        for m in MECHANISMS})
    gw = KafkaGatewayProcess(store, settings={"authentication.method": "scram",
                                              "gateway.request.read.timeout.ms": "2000"})
    gw.settings["gateway.kafka.listeners"] = f"SASL_PLAINTEXT://127.0.0.1:{gw.kafka_port}"
    with gw:
        yield gw


def _mutate(rnd: random.Random, text: bytes) -> bytes:
    out = bytearray(text)
    for _ in range(rnd.randint(1, 4)):
        what = rnd.randrange(6)
        pos = rnd.randint(0, len(out))
        if what == 0 and out:
            out[min(pos, len(out) - 1)] = rnd.randrange(256)
        elif what == 1:
            del out[pos:pos + rnd.randint(1, 40)]
        elif what == 2:
            out[pos:pos] = rnd.choice(_SPLICE)
        elif what == 3:
            out = out[:pos]
        elif what == 4:
            out[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 30)))
        else:
            out += out[:rnd.randint(0, len(out))]
    return bytes(out)


def _handshake(version: int, mechanism: str) -> bytes:
    from kio.index import load_request_schema
    from kio.serial import entity_writer
    import io

    body = io.BytesIO()
    cls = load_request_schema(17, version)
    entity_writer(cls)(body, cls(mechanism=mechanism))
    return framed(17, version, body.getvalue())


def _authenticate(token: bytes) -> bytes:
    # SaslAuthenticate v2 (flexible): compact bytes + tagged fields
    return framed(36, 2, _uvarint(len(token) + 1) + token + b"\0")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read(s: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    size = struct.unpack(">i", head)[0]
    data = b""
    while len(data) < size:
        chunk = s.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _decode(answer: bytes):
    """A SaslAuthenticate v2 answer: correlation id, header tags, then the body."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    return entity_reader(load_response_schema(36, 2))(answer, 5)[0]


def _case(gw, rnd: random.Random) -> str:
    """One hostile exchange; what it reached (``first``, ``size``, ``final``, ``done``:
    refused before). Raises AssertionError if the gateway logs the fuzzer in."""
    mechanism = rnd.choice(MECHANISMS)
    bare = rnd.random() < 0.25
    client = scramp.ScramClient([mechanism], rnd.choice(["alice", "bob", "al=2Cice"]),
                                rnd.choice([PASSWORD, "wrong", "x" * 200]))
    first = client.get_client_first().encode()
    s = socket.create_connection(("127.0.0.1", gw.kafka_port), timeout=10)
    try:
        s.sendall(_handshake(0 if bare else 1, mechanism))
        if _read(s) is None:
            return "done"

        def send(token: bytes) -> bytes | None:
            if bare:
                s.sendall(struct.pack(">i", len(token)) + token)
                return _read(s)
            s.sendall(_authenticate(token))
            answer = _read(s)
            if answer is None:
                return None
            body = _decode(answer)
            if int(body.error_code) != 0:
                assert int(body.error_code) in (58, 34), body
                return None
            return body.auth_bytes

        kind = rnd.randrange(4)
        if kind == 0:  # a bent client-first
            send(_mutate(rnd, first))
            return "first"
        if kind == 1 and bare:  # a hostile bare frame size
            s.sendall(struct.pack(">i", rnd.choice([-1, 1 << 20, 1 << 31 - 1, 70_000])))
            s.settimeout(3)
            assert _read(s) is None
            return "size"
        server_first = send(first)
        if server_first is None:
            return "done"
        try:
            client.set_server_first(server_first.decode("utf-8", "replace"))
            final = client.get_client_final().encode()
        except Exception:  # noqa: BLE001 - a server-first the client refuses: done
            return "done"
        bent = _mutate(rnd, final)
        if bent == final:
            return "done"
        answer = send(bent)
        assert answer is None or b"v=" not in answer, "a bent proof was accepted"
        return "final"
    except (ConnectionError, socket.timeout):
        return "done"
    finally:
        s.close()


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _still_serves(gw, n: int) -> None:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    assert gw.proc.poll() is None, f"the gateway died ({gw.proc.returncode}) by batch {n}"
    with connect(gw) as s:
        req = ApiVersionsRequest(client_software_name="t", client_software_version="1")
        assert call(s, req, 3)[1].error_code == 0
    p = ck.Producer({"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                     "sasl.mechanism": MECHANISMS[n % 2], "sasl.username": "alice",
                     "sasl.password": PASSWORD, "message.timeout.ms": 20_000})
    errors: list = []
    p.produce(TOPIC, f"batch-{n}".encode(), partition=0,
              on_delivery=lambda err, _m: errors.append(err))
    assert p.flush(30) == 0 and errors == [None], errors


def _fuzz(gw, seed: int, count: int) -> None:
    rnd = random.Random(seed)
    base = None
    reached: dict[str, int] = {}
    for n, start in enumerate(range(0, count, BATCH)):
        for _ in range(min(BATCH, count - start)):
            kind = _case(gw, rnd)
            reached[kind] = reached.get(kind, 0) + 1
        _still_serves(gw, n)
        rss = _rss(gw.proc.pid)
        base = rss if base is None else base
        assert rss - base < RSS_GROWTH_BYTES, f"RSS grew {(rss - base) >> 20} MiB by batch {n}"
    # the cases reached each stage of the exchange (a fuzzer refused at the door tests
    # nothing past it)
    assert reached.get("first", 0) > count / 8 and reached.get("final", 0) > count / 8, reached


def test_hostile_scram_exchanges_leave_the_gateway_serving(scram_target):
    started = time.monotonic()
    _fuzz(scram_target, seed=31, count=int(os.environ.get("SPARKLOG_SCRAM_FUZZ_CASES", "600")))
    assert time.monotonic() - started < 600


@pytest.mark.slow
def test_many_hostile_scram_exchanges_leave_the_gateway_serving(scram_target):
    _fuzz(scram_target, seed=32, count=3000)
