"""Where a flush runs, and how an answer leaves: the one-record request's path.

A small batch on a store whose commits are cheap (local, no fsync) is written on
the event loop (no thread hand-off); a large one, or any on a store that fsyncs,
on a flush thread. An answer's head and body leave in one write.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import pytest

from conf.settings import load
from ingest_gateway.http.app import create_app
from ingest_gateway.server import batcher as batcher_module
from jobs.gateway_process import GatewayProcess
from log_layout import open_log

V2_JSON = b"application/vnd.kafka.json.v2+json"


@pytest.fixture
def flush_threads(monkeypatch) -> list[str]:
    """The name of the thread each flush of the gateway runs on, in order."""
    names: list[str] = []
    real = batcher_module.write_batch

    def spy(state, batch):
        names.append(threading.current_thread().name)
        return real(state, batch)

    monkeypatch.setattr(batcher_module, "write_batch", spy)
    return names


async def _produce(app, topic: str, values: list[str]) -> tuple[int, dict]:
    body = json.dumps({"records": [{"value": v} for v in values]}).encode()
    scope = {"type": "http", "method": "POST", "path": f"/topics/{topic}",
             "query_string": b"acks=all",
             "headers": [(b"content-type", V2_JSON), (b"content-length", str(len(body)).encode())]}
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], json.loads(sent[1]["body"])


def _run(tmp_path, fsync: bool, values: list[str]) -> tuple[int, dict, int]:
    """Produce ``values`` in one request through an in-process gateway app: the answer
    and the records the log then holds."""
    log = open_log(str(tmp_path), fsync=fsync)
    log.create_topic("t", {"partitions": 1})
    app = create_app(load({"store.fsync": str(fsync).lower()}), log)

    async def main():
        async with app.starlette.router.lifespan_context(app.starlette):
            return await _produce(app, "t", values)

    status, doc = asyncio.run(main())
    return status, doc, open_log(str(tmp_path)).partition("t", 0).snapshot().next_offset


@pytest.mark.parametrize("fsync", [False, True])
def test_a_small_batch_is_written_on_the_loop_only_where_commits_are_cheap(
        tmp_path, flush_threads, fsync):
    status, doc, committed = _run(tmp_path, fsync, ["a", "b"])
    assert status == 200 and [o["offset"] for o in doc["offsets"]] == [0, 1]
    assert committed == 2
    assert len(flush_threads) == 1
    assert flush_threads[0].startswith("sparklog-flush") is fsync


def test_a_large_batch_goes_to_a_flush_thread_even_on_a_cheap_store(tmp_path, flush_threads):
    status, doc, committed = _run(tmp_path, False, ["x" * 1000] * 100)  # ~100 KB
    assert status == 200 and committed == 100
    assert len(flush_threads) == 1 and flush_threads[0].startswith("sparklog-flush")


def test_a_produce_answer_arrives_whole_in_the_first_read(tmp_path):
    """Head and body in one write: the client's first read holds the whole answer
    (two writes let a waiting client wake for the head alone)."""
    with GatewayProcess(str(tmp_path)) as gw:
        open_log(str(tmp_path)).create_topic("t", {"partitions": 1})
        body = b'{"records":[{"value":"v"}]}'
        request = (b"POST /topics/t HTTP/1.1\r\nHost: x\r\nContent-Type: " + V2_JSON +
                   b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i in range(20):
                s.sendall(request)
                first = s.recv(65536)  # blocks until the first bytes arrive
                head, _, rest = first.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200"), first
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                assert len(rest) == length, f"request {i}: the first read held {first!r}"
                assert json.loads(rest)["offsets"][0]["offset"] == i
