"""The clients' HTTP connection writes a small request in one piece (head and body)."""

from __future__ import annotations

import pytest

from ingest_gateway.protocol.session import COALESCE_MAX_BYTES, OneWriteConnection, Session


class Recorder:
    """A connected socket that records each write."""

    def __init__(self):
        self.writes: list[bytes] = []

    def sendall(self, data) -> None:
        self.writes.append(bytes(data))

    def settimeout(self, _t) -> None:
        pass

    def close(self) -> None:
        pass


def connection() -> tuple[OneWriteConnection, Recorder]:
    c = OneWriteConnection("127.0.0.1", 1)
    c.sock = rec = Recorder()
    return c, rec


@pytest.mark.parametrize("body", [b"x" * 100, memoryview(b"y" * 1000)])
def test_a_small_body_goes_with_the_head_in_one_write(body):
    c, rec = connection()
    c.request("POST", "/topics/t/partitions/0", body=body, headers={"Content-Type": "a/b"})
    assert len(rec.writes) == 1
    head, sent = rec.writes[0].split(b"\r\n\r\n", 1)
    assert head.startswith(b"POST /topics/t/partitions/0 HTTP/1.1")
    assert b"Content-Length: %d" % len(body) in head
    assert sent == bytes(body)


def test_no_body_sends_the_head():
    c, rec = connection()
    c.request("GET", "/metadata")
    assert len(rec.writes) == 1 and rec.writes[0].endswith(b"\r\n\r\n")
    c, rec2 = connection()
    c.request("POST", "/x", body=b"", headers={"Content-Type": "a/b"})
    assert len(rec2.writes) == 1 and rec2.writes[0].endswith(b"\r\n\r\n")
    assert b"Content-Length: 0\r\n" in rec2.writes[0]


def test_a_large_body_keeps_urllib3s_writes():
    c, rec = connection()
    body = b"z" * (COALESCE_MAX_BYTES + 1)
    c.request("POST", "/x", body=body, headers={"Content-Type": "a/b"})
    assert len(rec.writes) >= 2 and b"".join(rec.writes).endswith(body)


def test_sessions_use_it_for_http_only():
    assert Session("http://127.0.0.1:1").pool.ConnectionCls is OneWriteConnection
    assert Session("https://127.0.0.1:1").pool.ConnectionCls is not OneWriteConnection
