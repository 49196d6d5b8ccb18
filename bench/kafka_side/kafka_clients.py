"""The Kafka side's workloads, with confluent-kafka (librdkafka) and Kafka's ProducerPerformance.

Each function takes the broker's bootstrap address and a fresh topic and returns
a :func:`bench.kafka_side.measure.summary`. Producers use acks=all, no compression,
and idempotence where the workload says so (Kafka's Java client enables it by
default since 3.0, librdkafka does not).
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)

from bench.kafka_side.measure import VALUE_BYTES, sent_ns, stamped, summary

VALUE = b"v" * VALUE_BYTES
#: batch.size of every Kafka producer: sparklog's Producer batches up to 1 MiB, as
#: librdkafka does by default; the Java client's default of 16 KB cut its
#: throughput to a quarter here (ProducerPerformance at load 7: 29k vs 124k msgs/s)
BATCH_BYTES = 1 << 20


def _producer(bootstrap: str, **cfg: Any) -> tuple[Producer, list[str]]:
    """A producer and the list its client-level errors (error_cb) go to."""
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": "none",
                  "batch.size": BATCH_BYTES, "socket.nagle.disable": True, "error_cb": lambda e: errors.append(str(e)),
                  **cfg})
    return p, errors


def _warm(p: Producer, topic: str) -> None:
    """Connection and metadata before the clock starts, as the sparklog side's keep-alive."""
    p.produce(topic, VALUE)
    if p.flush(30) != 0:
        raise RuntimeError(f"Kafka did not acknowledge a first record to {topic}")


def sync_one(bootstrap: str, topic: str, seconds: float) -> dict:
    """One record at a time: produce, flush (wait for its acks=all answer), repeat.

    linger.ms=0: a caller that waits for each record has nothing to linger for."""
    p, errors = _producer(bootstrap, **{"linger.ms": 0, "enable.idempotence": False})
    _warm(p, topic)
    lat: list[float] = []
    n = 0
    t0 = time.perf_counter()
    stop_at = t0 + seconds
    while time.perf_counter() < stop_at:
        t = time.perf_counter()
        p.produce(topic, VALUE)
        if p.flush(30) != 0:
            raise RuntimeError("Kafka did not acknowledge a record within 30 s")
        lat.append(time.perf_counter() - t)
        n += 1
    return summary(n, time.perf_counter() - t0, lat, errors=len(errors))


def window(bootstrap: str, topic: str, seconds: float, outstanding: int) -> dict:
    """One record per produce() with at most ``outstanding`` unacknowledged (linger.ms=0)."""
    p, errors = _producer(bootstrap, **{"linger.ms": 0, "enable.idempotence": False})
    _warm(p, topic)
    lat: list[float] = []
    failed = 0
    done = 0

    def acked(err, _msg, t: float) -> None:
        nonlocal done, failed
        done += 1
        failed += err is not None
        lat.append(time.perf_counter() - t)

    n = 0
    t0 = time.perf_counter()
    stop_at = t0 + seconds
    while time.perf_counter() < stop_at:
        while n - done >= outstanding:
            p.poll(0.05)  # serves delivery callbacks, returns as soon as one ran
        t = time.perf_counter()
        p.produce(topic, VALUE, on_delivery=lambda e, m, t=t: acked(e, m, t))
        n += 1
    p.flush(30)
    return summary(done, time.perf_counter() - t0, lat, errors=failed + len(errors))


def batched(bootstrap: str, topic: str, records: int, linger_ms: float) -> dict:
    """``records`` produce() calls as fast as the client takes them, then flush."""
    p, errors = _producer(bootstrap, **{"linger.ms": linger_ms, "enable.idempotence": True})
    _warm(p, topic)
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:  # the client's queue is full: serve it until it takes it
                p.poll(0.01)
        if i & 0x3FFF == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    if left:
        raise RuntimeError(f"{left} records unacknowledged after 120 s")
    return summary(records, elapsed, errors=len(errors))


def consume(bootstrap: str, topic: str, partitions: int, records: int) -> dict:
    """One consumer reads ``records`` records from the beginning of every partition,
    touching each value (what a per-record Python consumer does)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        n = 0
        size = 0
        t0 = time.perf_counter()
        while n < records:
            # consume() waits until it has num_messages or the timeout passes: never
            # ask for more than are left
            for m in c.consume(num_messages=min(10_000, records - n), timeout=5):
                if m.error():
                    raise KafkaException(m.error())
                size += len(m.value())
                n += 1
            if time.perf_counter() - t0 > 300:
                raise TimeoutError(f"read {n} of {records} records in 300 s")
        return summary(n, time.perf_counter() - t0, value_bytes=size)
    finally:
        c.close()


def end_to_end(bootstrap: str, topic: str, rate: float, seconds: float,
               warmup: int = 200) -> dict:
    """produce() (idempotent, linger.ms=5, acks=all) at ``rate`` records/s into
    partition 0 -> the record out of a consumer in this process (one clock).
    Latency from the send time stamped in the value; ``warmup`` records first,
    not counted."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    total = warmup + int(rate * seconds)
    lat: list[float] = []
    seen = 0
    done = threading.Event()

    def run() -> None:
        nonlocal seen
        deadline = time.monotonic() + seconds + 60
        while seen < total and time.monotonic() < deadline:
            # poll(), not consume(n): consume waits until it has n records or times out
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            now = time.perf_counter_ns()
            seen += 1
            if seen > warmup:
                lat.append((now - sent_ns(m.value())) / 1e9)
        done.set()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    p, errors = _producer(bootstrap, **{"linger.ms": 5, "enable.idempotence": True})
    try:
        for _ in range(warmup):
            p.produce(topic, stamped(), partition=0)
        p.flush(30)
        t0 = time.perf_counter()
        for i in range(total - warmup):
            due = t0 + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)  # the send rate, not a wait for a condition
            p.produce(topic, stamped(), partition=0)
            p.poll(0)
        p.flush(30)
        sent_for = time.perf_counter() - t0
        done.wait(seconds + 60)
    finally:
        if done.is_set():  # else its thread is still in poll(): leave it to exit
            c.close()
    return summary(len(lat), sent_for, lat, errors=len(errors), lost=total - seen)


PERF_LINE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec .*?([\d.]+) ms avg latency, "
                       r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th")


def producer_performance(tools_classpath: str, bootstrap: str, topic: str, records: int,
                         linger_ms: float, java: str = "java",
                         jvm: Sequence[str] = ()) -> dict:
    """Kafka's own ``ProducerPerformance`` (the Java client), acks=all, idempotent,
    ``batch.size`` as the other producers' (``jvm``: more JVM options)."""
    cmd = [java, "-Xmx512M", *jvm, "-cp", tools_classpath,
           "org.apache.kafka.tools.ProducerPerformance",
           "--topic", topic, "--num-records", str(records), "--record-size", str(VALUE_BYTES),
           "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
           "acks=all", f"linger.ms={int(linger_ms)}", "compression.type=none",
           "enable.idempotence=true", f"batch.size={BATCH_BYTES}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    summary = perf_summary(proc)
    return {"msgs_per_s": summary["per_s"], "records": summary["records"],
            "elapsed_s": summary["records"] / summary["per_s"],
            "p50_ms": summary["p50_ms"], "p99_ms": summary["p99_ms"]}


def perf_summary(proc: subprocess.CompletedProcess) -> dict:
    """The final line of a ``ProducerPerformance`` run: records sent, records/s, p50 and
    p99 in ms. Raises RuntimeError (with its output) if it failed or printed none."""
    m = None
    for line in proc.stdout.splitlines():
        m = PERF_LINE.search(line) or m
    if proc.returncode != 0 or m is None:
        raise RuntimeError(f"ProducerPerformance failed ({proc.returncode}): "
                           f"{(proc.stdout + proc.stderr)[-1500:]}")
    return {"records": int(m.group(1)), "per_s": float(m.group(2)),
            "p50_ms": float(m.group(5)), "p99_ms": float(m.group(7))}


def producer_performance_defaults(tools_classpath: str, bootstrap: str, topic: str,
                                  records: int, java: str = "java",
                                  jvm: Sequence[str] = ()) -> dict:
    """Kafka's own ``ProducerPerformance`` with nothing but ``bootstrap.servers``: the
    Java client's defaults (acks=all, idempotent, ``batch.size`` 16 KB, ``linger.ms``
    5 since Kafka 4.0), ``records`` 100-byte records as fast as it can. The same call
    against Kafka and against a gateway's Kafka listener: only the broker differs."""
    cmd = [java, "-Xmx512M", *jvm, "-cp", tools_classpath,
           "org.apache.kafka.tools.ProducerPerformance",
           "--topic", topic, "--num-records", str(records), "--record-size", str(VALUE_BYTES),
           "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    s = perf_summary(proc)
    if s["records"] != records:
        raise RuntimeError(f"ProducerPerformance sent {s['records']} of {records} records")
    return {"msgs_per_s": s["per_s"], "records": s["records"],
            "elapsed_s": s["records"] / s["per_s"], "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"]}
