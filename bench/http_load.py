"""A minimal keep-alive HTTP/1.1 load generator for the gateway benchmarks.

Raw requests written on asyncio connections opened before the clock starts, so
the client's own cost stays far below the server's (an HTTP library would be the
bottleneck at these rates). Closed loop (each connection sends its next request
on the answer) and open loop (requests at a fixed rate whatever the answers).
"""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np


class KeepAliveConnection(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = bytearray()
        self.waiter: asyncio.Future | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0 or self.waiter is None:
            return
        head = bytes(self.buf[:head_end]).lower()
        i = head.find(b"content-length:")
        length = int(head[i + 15:head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else None])
        if len(self.buf) >= head_end + 4 + length:
            status = int(self.buf[9:12])
            del self.buf[:head_end + 4 + length]
            w, self.waiter = self.waiter, None
            w.set_result(status)

    def connection_lost(self, exc) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("connection lost"))

    async def ask(self, request: bytes) -> int:
        """Send one request; its answer's HTTP status."""
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.waiter


async def connect(port: int, connections: int) -> list[KeepAliveConnection]:
    """Keep-alive connections, opened before the clock starts (set-up is not measured)."""
    loop = asyncio.get_running_loop()
    return [(await loop.create_connection(KeepAliveConnection, "127.0.0.1", port))[1]
            for _ in range(connections)]


def http_result(ok: int, errors: int, records_per_request: int, elapsed: float,
                 latencies: list[float]) -> dict:
    lat = np.array(latencies) * 1000
    return {"msgs_per_s": ok * records_per_request / elapsed, "elapsed": elapsed,
            "requests": ok + errors, "errors": errors, "p50_ms": float(np.percentile(lat, 50)),
            "p99_ms": float(np.percentile(lat, 99))}


async def http_closed_loop(port: int, requests: list[bytes], seconds: float, connections: int,
                     records_per_request: int) -> dict:
    latencies: list[float] = []
    done = 0
    errors = 0
    conns = await connect(port, connections)
    stop_at = time.perf_counter() + seconds

    async def worker(k: int) -> None:
        nonlocal done, errors
        conn = conns[k]
        i = k
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            status = await conn.ask(requests[i % len(requests)])
            latencies.append(time.perf_counter() - t0)
            if status == 200:
                done += 1
            else:
                errors += 1
            i += connections
        conn.transport.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(connections)))
    return http_result(done, errors, records_per_request, time.perf_counter() - t0, latencies)


async def http_open_loop(port: int, requests: list[bytes], seconds: float, connections: int,
                          records_per_request: int, rate: float) -> dict:
    """Requests at a fixed rate whatever the answers (open loop), on a pool of
    keep-alive connections. Latency counts from when a request was due, so a
    stall delays (and charges) every request behind it: no coordinated omission."""
    conns = await connect(port, connections)
    idle: asyncio.Queue = asyncio.Queue()
    for c in conns:
        idle.put_nowait(c)
    latencies: list[float] = []
    errors = 0

    async def one(request: bytes, due: float) -> None:
        nonlocal errors
        conn = await idle.get()
        status = await conn.ask(request)
        latencies.append(time.perf_counter() - due)
        errors += status != 200
        idle.put_nowait(conn)

    tasks: set[asyncio.Task] = set()
    t0 = time.perf_counter()
    sent = 0
    while True:
        now = time.perf_counter()
        if now >= t0 + seconds:
            break
        due = t0 + sent / rate
        if due > now:
            await asyncio.sleep(due - now)
            continue
        task = asyncio.create_task(one(requests[sent % len(requests)], due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        sent += 1
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.transport.close()
    return http_result(sent - errors, errors, records_per_request, elapsed, latencies)


def json_produce_requests(topic: str, records: int, acks: str, count: int = 64,
                          value_bytes: int = 100) -> list[bytes]:
    """``count`` raw REST Proxy v2 JSON produce requests of ``records`` records each."""
    out = []
    for k in range(count):
        body = json.dumps({"records": [{"value": f"{k:02d}" + "x" * (value_bytes - 4)}
                                       for _ in range(records)]}).encode()
        out.append(f"POST /topics/{topic}?acks={acks} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Content-Type: application/vnd.kafka.json.v2+json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return out
