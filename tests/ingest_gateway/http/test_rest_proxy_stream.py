"""REST Proxy v3 streamed produce over a raw socket: records written and reports read
interleaved on one chunked connection, as Confluent's ``examples/produce_v3`` does.

The client writes a record, then waits for its delivery report before writing the
next, so a gateway that answered only at the body's end would never answer. The
gateway here has ``request.read.timeout.ms`` = 1 s: a stream lasts longer than that
while it is busy, and is closed after 1 s of silence.
"""

from __future__ import annotations

import base64
import json
import socket
import time

import pytest

from ingest_gateway.http.v3_stream import Splitter
from jobs.gateway_process import GatewayProcess
from log_layout import open_log

READ_TIMEOUT_MS = 1000


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    url = str(tmp_path_factory.mktemp("stream") / "store")
    open_log(url, fsync=False).create_topic("s", {"partitions": 2})
    with GatewayProcess(url, settings={"gateway.request.read.timeout.ms": READ_TIMEOUT_MS}) as g:
        g.cluster = g.request("GET", "/v3/clusters")[1]["data"][0]["cluster_id"]
        yield g


class Stream:
    """One streamed produce request on a raw socket: ``send`` writes a chunk of the
    body, ``report`` reads the next delivery report line of the chunked answer."""

    def __init__(self, gw, topic: str = "s"):
        self.sock = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
        self.sock.sendall(f"POST /v3/clusters/{gw.cluster}/topics/{topic}/records HTTP/1.1\r\n"
                          "Host: gateway\r\nContent-Type: application/json\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n".encode())
        self.reader = self.sock.makefile("rb")
        self.status: int | None = None
        self.pending = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))

    def _head(self) -> None:
        self.status = int(self.reader.readline().split()[1])
        length = None
        while (line := self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":  # an answer whole: not a stream
                length = int(value)
        if length is not None:
            self.pending = self.reader.read(length) + b"\n"

    def _chunk(self) -> bytes:
        size = int(self.reader.readline().strip(), 16)
        data = self.reader.read(size + 2)[:size]
        return data

    def report(self) -> dict:
        if self.status is None:
            self._head()
        while b"\n" not in self.pending:
            data = self._chunk()
            assert data, "the answer ended before the report"
            self.pending += data
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def end(self) -> bytes:
        """Close the body; what the answer still holds, to its end."""
        self.sock.sendall(b"0\r\n\r\n")
        rest = self.pending
        while data := self._chunk():  # the last, empty, chunk ends the answer
            rest += data
        return rest

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def _record(data: str, partition: int = 0) -> bytes:
    return json.dumps({"partition_id": partition,
                       "value": {"type": "STRING", "data": data}}).encode()


def test_each_report_arrives_before_the_next_record_is_sent(gw):
    s = Stream(gw)
    try:
        s.send(_record("one"))
        first = s.report()  # the body is still open: answered anyway
        assert s.status == 200 and first["error_code"] == 200
        text = 'tw{o} "\\\\ quoted"'  # braces, quotes and backslashes inside a string
        whole = _record(text)
        bad = json.dumps({"partition_id": 0, "value": {"type": "BINARY", "data": "!!"}})
        s.send(whole[:17])
        s.send(whole[17:] + b"  \r\n" + bad[:30].encode())
        s.send(bad[30:].encode() + _record("three"))  # ends the bad one, then a whole record
        second, refused, third = s.report(), s.report(), s.report()
        assert (second["error_code"], second["offset"]) == (200, first["offset"] + 1)
        assert second["value"] == {"type": "STRING", "size": len(text)}
        assert refused["error_code"] == 40001 and "base64" in refused["message"]
        assert (third["error_code"], third["offset"]) == (200, first["offset"] + 2)
        assert s.end() == b""
    finally:
        s.close()
    text = 'tw{o} "\\\\ quoted"'
    records = gw.request("GET", f"/topics/s/partitions/0/messages?offset={first['offset']}"
                                "&count=10", headers={"Accept": "application/vnd.kafka.binary"
                                                                ".v2+json"})[1]
    assert [base64.b64decode(r["value"]).decode() for r in records] == ["one", text, "three"]


def test_a_busy_stream_outlives_the_read_timeout_and_a_silent_one_is_closed(gw):
    s = Stream(gw)
    try:
        started, count = time.monotonic(), 0
        while time.monotonic() - started < 3 * READ_TIMEOUT_MS / 1000:
            s.send(_record(f"r{count}", partition=1))
            assert s.report()["error_code"] == 200
            count += 1
        assert count > 3
        silent = time.monotonic()
        assert s.reader.read() == b""  # closed by the gateway: no 408, an answer was under way
        assert time.monotonic() - silent >= READ_TIMEOUT_MS / 1000 * 0.9
    finally:
        s.close()


def test_a_stream_that_stops_making_sense_ends_with_a_report(gw):
    s = Stream(gw)
    try:
        s.send(_record("ok") + b" [1, 2]")
        assert s.report()["error_code"] == 200
        last = s.report()
        assert last["error_code"] == 40001 and "JSON object" in last["message"]
    finally:
        s.close()


def test_a_stream_to_an_unknown_topic_is_refused_before_it_starts(gw):
    s = Stream(gw, topic="nope")
    try:
        s.send(_record("x"))
        assert s.report()["error_code"] == 40401 and s.status == 404
    finally:
        s.close()


@pytest.mark.parametrize("pieces, whole", [
    (['{"a": 1}'], ['{"a": 1}']),
    (['{"a"', ': "}"}', ' {"b": {"c": 2}}'], ['{"a": "}"}', '{"b": {"c": 2}}']),
    (['{"a": "x\\', '"}"}'], ['{"a": "x\\"}"}']),  # an escaped quote split across reads
    (['  \n', '{}{}'], ['{}', '{}'])])
def test_the_splitter_finds_whole_objects_across_reads(pieces, whole):
    sp = Splitter(max_depth=64, max_size=1000)
    assert [o for p in pieces for o in sp.feed(p)] == whole
    assert not sp.inside
