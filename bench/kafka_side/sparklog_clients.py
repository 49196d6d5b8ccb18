"""The sparklog side's workloads: REST Proxy v2, ``Producer`` and ``Consumer`` against a gateway.

Same signatures as :mod:`bench.kafka_side.kafka_clients`, with the gateway's URL in
place of the bootstrap address. Producers use acks=all and the client's defaults
otherwise (idempotence on); REST requests are raw HTTP/1.1 on keep-alive
connections opened before the clock starts (``bench/http_load.py``), so the
load generator costs far less than the gateway.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from urllib.parse import urlsplit

import pyarrow as pa
import urllib3

from bench.http_load import http_closed_loop, json_produce_requests
from bench.kafka_side.measure import VALUE_BYTES, sent_ns, stamped, summary
from ingest_gateway.client import Consumer, Producer

VALUE = b"v" * VALUE_BYTES


def _port(url: str) -> int:
    return urlsplit(url).port or 80


def _rest(url: str, topic: str, seconds: float, connections: int) -> dict:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    requests = json_produce_requests(topic, 1, "all", value_bytes=VALUE_BYTES)
    asyncio.run(http_closed_loop(_port(url), requests[:1], 0.05, 1, 1))  # warm up
    r = asyncio.run(http_closed_loop(_port(url), requests, seconds, connections, 1))
    return summary(round(r["msgs_per_s"] * r["elapsed"]), r["elapsed"], errors=r["errors"],
                   p50_ms=r["p50_ms"], p99_ms=r["p99_ms"])


def sync_one(url: str, topic: str, seconds: float) -> dict:
    """One REST v2 POST of one record (acks=all) at a time on one keep-alive connection."""
    return _rest(url, topic, seconds, 1)


def window_rest(url: str, topic: str, seconds: float, outstanding: int) -> dict:
    """One-record REST v2 POSTs, ``outstanding`` at once (one per keep-alive connection):
    every record its own HTTP request, which no Kafka client does."""
    return _rest(url, topic, seconds, outstanding)


def window(url: str, topic: str, seconds: float, outstanding: int) -> dict:
    """One record per ``Producer.send()`` with at most ``outstanding`` unacknowledged
    (linger_ms=0, idempotence off): Kafka's side of this workload, client for client.
    Like librdkafka, the Producer sends what accumulates while a request is in flight
    together."""
    with Producer(url, acks="all", linger_ms=0, enable_idempotence=False) as p:
        p.send(topic, VALUE).result(30)  # connection and metadata, as on the Kafka side
        window = threading.Semaphore(outstanding)
        lat: list[float] = []
        failed = 0

        def acked(handle, t: float) -> None:
            nonlocal failed
            lat.append(time.perf_counter() - t)
            failed += handle.exception() is not None
            window.release()

        n = 0
        t0 = time.perf_counter()
        stop_at = t0 + seconds
        while time.perf_counter() < stop_at:
            window.acquire()
            t = time.perf_counter()
            p.send(topic, VALUE).add_done_callback(lambda h, t=t: acked(h, t))
            n += 1
        p.flush()
        elapsed = time.perf_counter() - t0
    return summary(n, elapsed, lat, errors=failed)


def batched(url: str, topic: str, records: int, linger_ms: float) -> dict:
    """``records`` ``Producer.send()`` calls as fast as the client takes them, then flush."""
    with Producer(url, acks="all", linger_ms=linger_ms) as p:
        p.send(topic, VALUE).result(30)  # connection and metadata, as on the Kafka side
        t0 = time.perf_counter()
        send = p.send
        for _ in range(records):
            send(topic, VALUE)
        p.flush()
        elapsed = time.perf_counter() - t0
        failed = p.records_failed
    return summary(records, elapsed, errors=failed)


def batched_arrow(url: str, topic: str, records: int, linger_ms: float,
                  batch: int = 10_000) -> dict:
    """``Producer.send_batch()`` of whole Arrow columns (``batch`` records each), 4 in flight."""
    values = pa.array([VALUE] * batch, pa.binary())
    with Producer(url, acks="all", linger_ms=linger_ms, max_in_flight=4) as p:
        p.send_batch(topic, values.slice(0, 1)).result(30)
        pending = []
        n = 0
        t0 = time.perf_counter()
        while n < records:
            k = min(batch, records - n)
            pending.append(p.send_batch(topic, values.slice(0, k)))
            n += k
            while len(pending) >= 4:
                pending.pop(0).result(120)
        for h in pending:
            h.result(120)
        elapsed = time.perf_counter() - t0
    return summary(records, elapsed)


def consume(url: str, topic: str, partitions: int, records: int, *, arrow: bool = False) -> dict:
    """One consumer through the gateway reads ``records`` records from the beginning of
    every partition: per record (touching each value), or as Arrow batches."""
    c = Consumer(gateway=url, auto_offset_reset="earliest", max_poll_records=100_000)
    try:
        c.assign([(topic, p) for p in range(partitions)])
        n = size = 0
        t0 = time.perf_counter()
        if arrow:
            for b in c.batches():
                n += b.records.num_rows
                size += b.records.column("value").nbytes
                if n >= records:
                    break
        else:
            for r in c:
                size += len(r.value)
                n += 1
                if n >= records:
                    break
        return summary(n, time.perf_counter() - t0, value_bytes=size)
    finally:
        c.close()


def end_to_end(url: str, topic: str, rate: float, seconds: float, warmup: int = 200) -> dict:
    """``send()`` (idempotent, linger_ms=5, acks=all) at ``rate`` records/s into
    partition 0 -> the record out of a gateway consumer's iterator in this process.
    Also counts the gateway's ``out_of_order_sequence`` answers over the run."""
    ooo_before = out_of_order_count(url)
    c = Consumer(gateway=url, auto_offset_reset="earliest", fetch_max_wait_ms=500)
    c.assign([(topic, 0)])
    total = warmup + int(rate * seconds)
    lat: list[float] = []
    seen = 0
    done = threading.Event()

    def run() -> None:
        nonlocal seen
        for r in c:
            now = time.perf_counter_ns()
            seen += 1
            if seen > warmup:
                lat.append((now - sent_ns(r.value)) / 1e9)
            if seen >= total:
                break
        done.set()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    with Producer(url, acks="all", linger_ms=5, enable_idempotence=True) as p:
        for _ in range(warmup):
            p.send(topic, stamped(), partition=0)
        p.flush()
        t0 = time.perf_counter()
        for i in range(total - warmup):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)  # the send rate, not a wait for a condition
            p.send(topic, stamped(), partition=0)
        p.flush()
        sent_for = time.perf_counter() - t0
        failed = p.records_failed
    done.wait(seconds + 60)
    if done.is_set():
        c.close()
    return summary(len(lat), sent_for, lat, errors=failed, lost=total - seen,
                   out_of_order_sequence=out_of_order_count(url) - ooo_before)


_OOO = re.compile(rb"^sparklog_gateway_out_of_order_sequence_total\s+([0-9.e+]+)", re.MULTILINE)


def out_of_order_count(url: str) -> float:
    """The gateway's ``out_of_order_sequence`` answers so far (its /metrics counter)."""
    r = urllib3.request("GET", f"{url}/metrics", timeout=10)
    m = _OOO.search(r.data)
    return float(m.group(1)) if m else 0.0


def create_topic(url: str, name: str, partitions: int) -> None:
    """Through the gateway's REST v3 API, as a user would."""
    http = urllib3.PoolManager(retries=False, timeout=30)
    cid = _json(http.request("GET", f"{url}/v3/clusters"))["data"][0]["cluster_id"]
    r = http.request("POST", f"{url}/v3/clusters/{cid}/topics",
                     json={"topic_name": name, "partitions_count": partitions})
    if r.status != 201:
        raise RuntimeError(f"creating topic {name}: {r.status} {r.data[:300]!r}")


def _json(r):
    import json

    if r.status != 200:
        raise RuntimeError(f"{r.status} {r.data[:300]!r}")
    return json.loads(r.data)


def topic_files(store_folder: str, topic: str) -> list[str]:
    """Every file under the topic's folder of a local store (segments and manifests),
    and, with the hot tier on, every file of ``_hot/`` written since the topic was made
    (the workloads run one at a time, so those hold this topic's records).

    A benchmark's look at the disk, not a reader of the format: nothing is parsed."""
    out = []
    for folder, _, files in os.walk(os.path.join(store_folder, topic)):
        out += [os.path.join(folder, f) for f in files]
    made = os.stat(os.path.join(store_folder, topic, "_topic.json")).st_mtime
    for folder, _, files in os.walk(os.path.join(store_folder, "_hot")):
        out += [p for f in files if os.stat(p := os.path.join(folder, f)).st_mtime >= made]
    return out
