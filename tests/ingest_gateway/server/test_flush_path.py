"""Where a flush and a fetch's read run, and how an answer leaves: a lone record's path.

A small batch on a store whose commits are cheap (local, no fsync) is written on
the event loop (no thread hand-off); a large one, or any on a store that fsyncs,
on a flush thread. A fetch of the records just committed reads on the loop on such
a store; a long backlog, or any read on a store that fsyncs, on the hub's threads.
An answer's head and body leave in one write.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from typing import Any

import pyarrow as pa
import pytest

from conf.settings import load
from ingest_gateway.http.app import create_app
from ingest_gateway.server import batcher as batcher_module
from ingest_gateway.server import batches as batches_module
from ingest_gateway.server.consumer_hub import ConsumerHub
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

    # a flush thread runs the batcher's name for it, an inline flush the batches module's
    monkeypatch.setattr(batcher_module, "write_batch", spy)
    monkeypatch.setattr(batches_module, "write_batch", spy)
    return names


async def _produce(app, topic: str, values: list[str]) -> tuple[int, dict]:
    body = json.dumps({"records": [{"value": v} for v in values]}).encode()
    return await _post(app, f"/topics/{topic}", body, V2_JSON, b"acks=all")


async def _fetch(app, topic: str, offset: int) -> int:
    """POST /fetch of partition 0 from ``offset``: the answer's status."""
    body = json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": offset}],
                       "max_records": 100_000}).encode()
    status, _ = await _post(app, "/fetch", body, b"application/json", b"", raw=True)
    return status


async def _post(app, path: str, body: bytes, content_type: bytes, query: bytes, *,
                raw: bool = False) -> tuple[int, Any]:
    scope = {"type": "http", "method": "POST", "path": path, "query_string": query,
             "headers": [(b"content-type", content_type),
                         (b"content-length", str(len(body)).encode())]}
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    answer = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], answer if raw else json.loads(answer)


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


@pytest.fixture
def read_threads(monkeypatch) -> list[str]:
    """The name of the thread each read of the gateway's consumer hub runs on."""
    names: list[str] = []
    real = ConsumerHub._read

    def spy(self, positions, max_records, *args, **kwargs):
        names.append(threading.current_thread().name)
        return real(self, positions, max_records, *args, **kwargs)

    monkeypatch.setattr(ConsumerHub, "_read", spy)
    return names


@pytest.mark.parametrize("fsync", [False, True])
def test_a_tail_fetch_reads_on_the_loop_only_where_commits_are_cheap(
        tmp_path, read_threads, fsync):
    log = open_log(str(tmp_path), fsync=fsync)
    log.create_topic("t", {"partitions": 1})
    app = create_app(load({"store.fsync": str(fsync).lower()}), log)

    async def main():
        async with app.starlette.router.lifespan_context(app.starlette):
            for i in range(5):  # five flushes: five segments
                assert (await _produce(app, "t", [f"r{i}"]))[0] == 200
            tail = await _fetch(app, "t", 4)  # the last segment only
            backlog = await _fetch(app, "t", 0)  # five segments: more than a tail
            return tail, backlog

    assert asyncio.run(main()) == (200, 200)
    on_loop = threading.main_thread().name
    assert [name == on_loop for name in read_threads] == [not fsync, False]


@pytest.mark.parametrize("offset", [-1, 2, 3, 2**63 - 1, 2**64, -(2**63) - 1])
def test_a_fetch_outside_the_log_is_refused_whichever_thread_would_read(tmp_path, offset):
    """The tail check takes the client's offset as it comes: one outside the log (past
    its end, negative, beyond 64 bits) is answered as out of range or refused, never
    with records or a 5xx; the log's end itself is a fetch of nothing."""
    log = open_log(str(tmp_path), fsync=False)
    log.create_topic("t", {"partitions": 1})
    app = create_app(load({"store.fsync": "false"}), log)
    body = json.dumps({"partitions": [{"topic": "t", "partition": 0, "offset": offset}],
                       "max_records": 10}).encode()

    async def main():
        async with app.starlette.router.lifespan_context(app.starlette):
            assert (await _produce(app, "t", ["a", "b"]))[0] == 200  # the log is [0, 2)
            return await _post(app, "/fetch", body, b"application/json", b"", raw=True)

    status, answer = asyncio.run(main())
    if status == 400:  # refused whole: only an offset no 64-bit position can hold
        assert abs(offset) >= 2**63, answer
        return
    assert status == 200, answer
    reader = pa.ipc.open_stream(answer)
    errors, rows = [], 0
    while True:
        try:
            batch, meta = reader.read_next_batch_with_custom_metadata()
        except StopIteration:
            break
        rows += batch.num_rows
        if meta is not None and b"error" in meta:
            errors.append(meta[b"error"])
    assert rows == 0
    assert errors == ([] if offset == 2 else [b"offset_out_of_range"])
