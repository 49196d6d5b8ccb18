"""What a gateway asks of its object store under a steady load, by partition count (issue 30).

A gateway (``jobs.gateway_process.GatewayProcess``, a child process) on a SeaweedFS S3
server on 127.0.0.1 (``bench/s3_side.py``; a fresh server per case, as it holds only
~512 MB), every request counted at the S3 endpoint by a proxy in front of it
(``bench/s3_counting_proxy.py``). One idempotent ``acks=all`` producer (the project's
``Producer``, linger 5 ms; ``--client kafka``: confluent-kafka through the gateway's
Kafka listener; or ``--client java``: Kafka's own ``ProducerPerformance``, the Java
client, through the listener) sends a steady 4 MB/s of 200-byte records (16-byte random key, 184-byte
random value) to a topic of P partitions, each record placed by Kafka's murmur2 of its
key (computed once for a pool of keys and given as the partition, so both clients place
alike). After ``--warmup`` s the proxy counts for ``--seconds`` s; then the gateway is
stopped and a direct-mode ``Consumer`` reads the topic back from the store through the
same proxy (nothing else is talking to it then).

The client matters at many partitions: librdkafka (confluent-kafka) and the project's
Producer send one partition per request with at most 5 requests in flight, so with
hundreds of partitions each waits its turn behind the others' round trips (librdkafka
issue #1700); the Java client sends every ready partition of a broker in one request.
``--client java`` runs ``ProducerPerformance`` (kafka-tools from Maven Central, cached
like the benches' Kafka broker) at the same rate with ``RoundRobinPartitioner`` (its
records have no key): a warm-up run first (every partition claimed), then the counted
run; its latencies are the tool's (from ``send()`` to the callback), its window the
time the counted run took.

Per case: PUT/s; PUT, GET, LIST and HEAD per GB acknowledged; the acknowledgement
latency of every record (from when it was due, so a producer that falls behind shows it)
at p50 and p99; the MB/s acknowledged in the window; the gateway's idle requests per
second before the load (it polls the store); and the consumer's GET, LIST and HEAD per
GB read.

Sides, in one run: ``per-partition`` (``gateway.hot.enable=false``: each flush of each
partition is its own object) and ``hot`` (``true``: one shared object per flush) when
the code knows that setting (``conf.load`` refuses unknown keys; when it does not,
only ``per-partition`` runs and the output says so); ``--base COMMIT`` adds the
per-partition side run from that commit's files (``bench.ab_produce.base_tree``).

Targets (issue 30), as ratios that meet their target when ``ratio >= target``:

- PUT/s at the largest P against PUT/s at 4: ``ratio`` = PUT/s at 4 / PUT/s at P,
  target 0.5 (PUT/s at 1,024 at most 2x that at 4);
- PUT/s at the largest P against the budget of 20 PUT/s per gateway at 4 MB/s:
  ``ratio`` = 20 / PUT/s, target 1.0;
- ack p99 at the largest P against p99 at 4: ``ratio`` = p99 at 4 / p99 at P, target 0.5.

``--store hdfs`` runs the same load on a MiniDFSCluster (``bench/hdfs_side``) and counts
NameNode operations per second from its JMX endpoint (NameNodeActivity) instead.

    python bench/object_store.py                 # 4, 64, 256, 1024 partitions, 25 s each
    python bench/object_store.py --quick         # 4 and 16, 1.5 s each (by hand: ~2 min)
    python bench/object_store.py --base 0ada173  # + the per-partition side of that commit
    python bench/object_store.py --store hdfs --partitions 4,256

Writes bench/results/object_store.json (``object_store_hdfs.json`` for HDFS; DESIGN.md format).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import write_results  # noqa: E402
from bench.s3_counting_proxy import CountingProxy  # noqa: E402
from bench.s3_side import SeaweedS3  # noqa: E402
from jobs.gateway_process import GatewayProcess, free_port  # noqa: E402
from log_layout.partitioner import murmur2_column  # noqa: E402

HOT_KEY = "gateway.hot.enable"
KEY_BYTES, VALUE_BYTES = 16, 184
RECORD_BYTES = KEY_BYTES + VALUE_BYTES
POOL = 1 << 16  # random keys and values, cycled
TOPIC = "bench_store"
#: ProducerPerformance's batch.size and buffer.memory (--client java): 1,024 open batches fit
JAVA_BATCH_BYTES, JAVA_BUFFER_BYTES = 128 << 10, 256 << 20
PUT_BUDGET = 20.0  # PUT/s per gateway at 4 MB/s (issue 30)
S3_KINDS = ("PUT", "GET", "LIST", "HEAD", "DELETE", "POST")


@dataclass
class Side:
    label: str
    tree: str
    hot: bool | None  # None: the code has no such setting; pass nothing


# -- the stores and their counters -------------------------------------------------------------
def _serve_proxy(upstream: str, conn) -> None:
    """The child of :class:`ProxyProcess`: a CountingProxy answering reset/snapshot."""
    with CountingProxy(upstream) as proxy:
        conn.send(proxy.url)
        while True:
            try:
                command = conn.recv()
            except EOFError:
                return
            if command == "reset":
                proxy.reset()
                conn.send(None)
            else:
                counts, by_path = proxy.snapshot()
                conn.send((counts, by_path.most_common(8)))


class ProxyProcess:
    """A CountingProxy in a child process: in this one it would share the GIL with the
    producer's 20,000 send() calls a second and the consumer, and add their wait to
    every request it forwards."""

    def __init__(self, upstream: str) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve_proxy, args=(upstream, child), daemon=True,
                                name="s3-counting-proxy")
        self.proc.start()
        child.close()
        self.url = self.conn.recv()

    def reset(self) -> None:
        self.conn.send("reset")
        self.conn.recv()

    def snapshot(self) -> tuple[Counter, list[tuple[str, int]]]:
        self.conn.send("snapshot")
        return self.conn.recv()

    def close(self) -> None:
        self.conn.close()  # the child's recv() ends
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


class S3Case:
    """A fresh SeaweedFS (it holds ~512 MB) with a counting proxy; counts requests by kind."""

    kinds = S3_KINDS

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        with self.stack:
            self.server = self.stack.enter_context(SeaweedS3())
            self.proxy = ProxyProcess(self.server.endpoint_url)
            self.stack.callback(self.proxy.close)
            self.stack = self.stack.pop_all()  # started: close() ends them
        self.url = f"s3://{self.server.bucket}/log"
        direct = self.server.storage_options()
        self.options = {**direct, "client_kwargs": {**direct["client_kwargs"],
                                                    "endpoint_url": self.proxy.url}}

    span = None  # the counts cover exactly the caller's window

    def reset(self, exact: bool = False) -> None:
        self.proxy.reset()

    def snapshot(self, exact: bool = False) -> tuple[Counter, list[tuple[int, str]]]:
        counts, top = self.proxy.snapshot()
        return counts, [(n, what) for what, n in top]

    def close(self) -> None:
        self.stack.close()


class HdfsCase:
    """A prefix of one MiniDFSCluster; counts NameNode operations (JMX NameNodeActivity).

    Hadoop's JMX answers from a cache refreshed at most every metrics period (10 s), on
    the first read after it expires. A poller reads the bean every 0.2 s and keeps each
    refreshed value (the time it was read is the time it holds), then asks the NameNode
    one GETFILESTATUS of its own, so every refresh changes the value even when nothing
    else runs (those probes are subtracted). A window during the load is measured between
    the first and the last refresh inside it and scaled to the whole window; ``exact``
    waits for a refresh at both ends instead (the idle and read phases: nothing else runs).
    """

    kinds = ("all",)
    PROBE_KEY = "FileInfoOps"

    def __init__(self, hdfs, name: str) -> None:
        import threading

        self.hdfs, self.url, self.options = hdfs, hdfs.url(name), hdfs.storage_options()
        self.refreshes: list[tuple[float, Counter]] = []
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.t0 = 0.0
        self.base: tuple[float, Counter] | None = None
        self.span = 0.0  # seconds the last snapshot's counts cover
        self.thread = threading.Thread(target=self._poll, daemon=True, name="jmx-poller")
        self.thread.start()

    def _get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.hdfs.http_port}{path}",
                                    timeout=10) as r:
            return r.read()

    def _ops(self) -> Counter:
        bean = json.loads(self._get("/jmx?qry=Hadoop:service=NameNode,name=NameNodeActivity")
                          )["beans"][0]
        # the *Ops counters are NameNode operations (CreateFileOps, FileInfoOps...), but
        # *NumOps are sample counts of rate metrics (Syncs, Transactions), TotalFileOps
        # their sum and FilesInGetListingOps the entries listings returned
        return Counter({k: v for k, v in bean.items() if k.endswith("Ops")
                        and not k.endswith("NumOps") and isinstance(v, int)
                        and k not in ("TotalFileOps", "FilesInGetListingOps")})

    def _poll(self) -> None:
        last = None
        probes = 0
        while not self.stop.wait(0.2):
            ops = self._ops()
            if ops != last:
                last = ops
                mine = Counter(ops)
                mine[self.PROBE_KEY] -= probes  # our probes are not the gateway's operations
                with self.cond:
                    self.refreshes.append((time.perf_counter(), mine))
                    self.cond.notify_all()
            self._get("/webhdfs/v1/?op=GETFILESTATUS&user.name=sparklog")
            probes += 1

    def _next_refresh(self) -> tuple[float, Counter]:
        now = time.perf_counter()
        with self.cond:
            self.cond.wait_for(lambda: self.refreshes and self.refreshes[-1][0] > now, 30)
            return self.refreshes[-1]

    def reset(self, exact: bool = False) -> None:
        self.base = self._next_refresh() if exact else None
        self.t0 = time.perf_counter()

    def snapshot(self, exact: bool = False) -> tuple[Counter, list[tuple[int, str]]]:
        t1 = time.perf_counter()
        if exact and self.base is not None:
            (tb, first), (te, last) = self.base, self._next_refresh()
            scale, self.span = 1.0, te - tb
        else:
            with self.cond:
                inside = [r for r in self.refreshes if self.t0 <= r[0] <= t1]
            if len(inside) < 2:  # the window is shorter than two refreshes: no figure
                self.span = t1 - self.t0
                return Counter({"all": float("nan")}), []
            (tf, first), (tl, last) = inside[0], inside[-1]
            scale, self.span = (t1 - self.t0) / (tl - tf), t1 - self.t0
        diff = Counter({k: (last[k] - first[k]) * scale for k in last})
        diff = Counter({k: v for k, v in diff.items() if v > 0})
        return Counter({"all": sum(diff.values())}), [(round(n), what)
                                                      for what, n in diff.most_common(8)]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


# -- the load -----------------------------------------------------------------------------------
def record_pool(partitions: int) -> tuple[list[bytes], list[bytes], list[int]]:
    """Random keys and values, and the partition Kafka's murmur2 gives each key."""
    rng = np.random.default_rng()
    keys = [bytes(k) for k in rng.integers(0, 256, (POOL, KEY_BYTES), dtype=np.uint8)]
    values = [bytes(v) for v in rng.integers(0, 256, (POOL, VALUE_BYTES), dtype=np.uint8)]
    hashes = murmur2_column(pa.array(keys, pa.binary())).astype(np.int64) & 0x7FFFFFFF
    return keys, values, (hashes % partitions).tolist()


class Acks:
    """(due, acknowledged) per record, appended from the client's threads; and the
    partitions acknowledged at least once (tracked during the warm-up only)."""

    def __init__(self) -> None:
        self.items: list[tuple[float, float]] = []
        self.failed = 0
        self.seen: set[int] = set()

    def callback(self, due: float, partition: int | None = None) -> Callable:
        items, seen = self.items, self.seen

        def acked(*args) -> None:
            if len(args) == 2 and args[0] is not None:  # confluent-kafka: (err, msg)
                self.failed += 1
                return
            items.append((due, time.perf_counter()))
            if partition is not None:
                seen.add(partition)
        return acked


def paced_load(send: Callable, tick: Callable, partitions: int, rate: float, warmup: float,
               seconds: float, counter, max_warmup: float = 180.0) -> dict:
    """``send(key, value, partition, callback)`` ``rate`` records/s in 1 ms ticks (open
    loop: each record timed from when it was due). The warm-up lasts ``warmup`` s and
    until every partition had a record acknowledged (its first write claims it: not
    the steady state), at most ``max_warmup`` s; then the counter is reset, and read
    ``seconds`` later."""
    keys, values, parts = record_pool(partitions)
    acks = Acks()
    per_tick = max(1, round(rate / 1000))
    n = 0
    t0 = time.perf_counter()
    start = end = None
    while True:
        due = t0 + n / rate
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
            now = time.perf_counter()
        if start is None and now >= t0 + warmup and (
                len(acks.seen) == partitions or now >= t0 + max_warmup):
            counter.reset()
            start = time.perf_counter()
            first = n
        if start is not None and now >= start + seconds:
            counts, top = counter.snapshot()
            end = time.perf_counter()
            break
        if start is None:  # a callback per record, to learn which partitions were acked
            for _ in range(per_tick):
                i = n % POOL
                send(keys[i], values[i], parts[i], acks.callback(due, parts[i]))
                n += 1
        else:
            cb = acks.callback(due)
            for _ in range(per_tick):
                i = n % POOL
                send(keys[i], values[i], parts[i], cb)
                n += 1
        tick()
    # the records sent in the window, by when they were due (a producer behind its
    # schedule sends records due before the window)
    due_from, due_to = t0 + first / rate, t0 + n / rate
    return {"acks": acks, "sent": n, "start": start, "end": end, "counts": counts, "top": top,
            "due_from": due_from, "due_to": due_to, "behind_s": end - due_to,
            "warmup_s": start - t0, "warm_partitions": len(acks.seen)}


def producer_client(url: str, max_in_flight: int):
    from ingest_gateway.client import Producer

    producer = Producer(url, acks="all", enable_idempotence=True, linger_ms=5,
                        max_in_flight=max_in_flight)

    def send(key, value, partition, cb):
        producer.send(TOPIC, value, key=key, partition=partition).add_done_callback(cb)

    def finish() -> int:
        producer.close(120)
        return producer.records_failed
    return send, lambda: None, finish


def kafka_client(bootstrap: str):
    import confluent_kafka

    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
        "linger.ms": 5, "compression.type": "none", "socket.nagle.disable": True})

    def send(key, value, partition, cb):
        while True:
            try:
                producer.produce(TOPIC, value, key=key, partition=partition, on_delivery=cb)
                return
            except BufferError:  # its queue is full: the producer falls behind, as it should
                producer.poll(0.01)

    def finish() -> int:
        left = producer.flush(120)
        return left
    return send, lambda: producer.poll(0), finish


# -- one case -----------------------------------------------------------------------------------
#: the Java producer's time blocked in send() for want of buffer.memory (--print-metrics)
BUFFERPOOL_WAIT = re.compile(r"^producer-metrics:bufferpool-wait-time-ns-total:\{[^}]*\}"
                             r"\s*:\s*([0-9.Ee+-]+)", re.M)


def java_load(classpath: str, bootstrap: str, rate: float, seconds: float, counter,
              batch_bytes: int = JAVA_BATCH_BYTES) -> dict:
    """Kafka's ``ProducerPerformance`` sending ``rate`` records/s for ``seconds`` s
    (acks=all, idempotent, linger 5 ms, round-robin over the partitions, ``batch_bytes``
    batches), the counter reset as it starts: (its summary, the seconds its send()
    blocked for want of buffer.memory, the counts, the window in seconds)."""
    from bench.kafka_side.kafka_clients import perf_summary

    records = max(1, int(rate * seconds))
    cmd = ["java", "-Xmx1G", "-cp", classpath, "org.apache.kafka.tools.ProducerPerformance",
           "--topic", TOPIC, "--num-records", str(records), "--record-size", str(RECORD_BYTES),
           "--throughput", str(int(rate)), "--producer-props", f"bootstrap.servers={bootstrap}",
           "acks=all", "enable.idempotence=true", "linger.ms=5", "compression.type=none",
           # one batch of a partition per request: Java's default 16 KB x 5 requests in
           # flight caps a partition at 80 KB per round trip to the store (the diskless
           # Kafkas advise batches as large as the store's latency asks); each open
           # batch holds batch.size of buffer.memory (32 MiB by default: 1 MiB batches
           # at 64 partitions blocked send() for want of it)
           # Each batch, open or in flight, holds batch.size of buffer.memory however few
           # records it carries: at 1,024 partitions of round-robin records 128 KiB
           # batches leave room for 2,048 batches, about one in flight per partition,
           # so send() blocks and the client, not the gateway, sets the pace (the
           # blocked time is printed: --print-metrics' bufferpool-wait-time).
           f"batch.size={batch_bytes}", f"buffer.memory={JAVA_BUFFER_BYTES}",
           "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner",
           "--print-metrics"]
    counter.reset()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 120,
                          check=False)
    window = time.perf_counter() - t0
    counts, top = counter.snapshot()
    blocked = BUFFERPOOL_WAIT.search(proc.stdout)
    return {**perf_summary(proc), "counts": counts, "top": top, "window_s": window,
            "blocked_s": float(blocked.group(1)) / 1e9 if blocked else math.nan}


def profile_gateway(gw: GatewayProcess, side: Side, partitions: int, seconds: float):
    """``py-spy record`` on the gateway for the counted window when
    ``SPARKLOG_BENCH_PROFILE`` names a folder (collapsed stacks per side and partition
    count, ``<folder>/<side>-<partitions>.txt``, for flamegraph.pl); None otherwise. Where a gateway's time
    goes under the load is what decides what to make cheaper (issue 30)."""
    folder = os.environ.get("SPARKLOG_BENCH_PROFILE")
    if not folder or gw.proc is None:
        return None
    os.makedirs(folder, exist_ok=True)
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    out = os.path.join(folder, f"{side.label}-{partitions}")
    # --gil: only the thread holding the GIL is sampled (a gateway is one Python core:
    # a thread waiting for the GIL inside a pyarrow call would otherwise count as busy);
    # rate 100 and nonblocking: little cost to the gateway
    return subprocess.Popen([spy, "record", "-o", out + ".txt", "--format", "raw", "--gil", "--pid", str(gw.proc.pid),
                             "--duration", str(int(seconds)), "--rate", "100", "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def knows_setting(tree: str, key: str) -> bool:
    """Whether the code in ``tree`` accepts ``key`` (conf.load refuses an unknown one)."""
    code = f"import conf; conf.load({{{key!r}: 'true'}}, environ={{}})"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True,
                          env={**os.environ, "PYTHONPATH": tree})
    return proc.returncode == 0


def create_topic(gw: GatewayProcess, partitions: int) -> None:
    status, doc, _ = gw.request("GET", "/v3/clusters")
    cid = doc["data"][0]["cluster_id"]
    status, doc, _ = gw.request("POST", f"/v3/clusters/{cid}/topics",
                                body={"topic_name": TOPIC, "partitions_count": partitions})
    if status != 201:
        raise RuntimeError(f"creating the topic: {status} {doc}")


def read_back(case, partitions: int, expected: int, timeout: float) -> dict:
    """A direct-mode Consumer reads the topic from the store (through the counter)."""
    from ingest_gateway.client import Consumer

    case.reset(exact=True)
    t0 = time.perf_counter()
    n = 0
    with Consumer(store=case.url, storage_options=case.options, auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        consumer.assign([(TOPIC, p) for p in range(partitions)])
        while n < expected and time.perf_counter() - t0 < timeout:
            for b in consumer.poll_batches(1.0, max_records=10_000):
                n += b.records.num_rows
    elapsed = time.perf_counter() - t0
    counts, top = case.snapshot(exact=True)
    return {"records": n, "seconds": elapsed, "counts": counts, "top": top}


def run_case(side: Side, case, partitions: int, args, log_path: str) -> dict:
    settings = {} if side.hot is None else {HOT_KEY: str(side.hot).lower()}
    kafka_port = free_port() if args.client in ("kafka", "java") else None
    if kafka_port:
        settings["gateway.kafka.listeners"] = f"PLAINTEXT://127.0.0.1:{kafka_port}"
    gw = GatewayProcess(case.url, case.options, settings=settings, root=side.tree,
                        log_path=log_path)
    rate = args.mb_per_s * 1e6 / RECORD_BYTES
    with gw:
        create_topic(gw, partitions)
        time.sleep(args.idle)  # start-up and the topic's creation are not idle traffic
        case.reset(exact=True)
        time.sleep(args.idle)
        idle_counts, idle_top = case.snapshot(exact=True)
        idle_s = case.span or args.idle
        if args.client == "java":
            bootstrap = f"127.0.0.1:{kafka_port}"
            warm = java_load(args.java_classpath, bootstrap, rate, max(args.warmup, 1.0), case,
                             args.java_batch_bytes)
            spy = profile_gateway(gw, side, partitions, args.seconds)
            run = java_load(args.java_classpath, bootstrap, rate, args.seconds, case,
                            args.java_batch_bytes)
            if spy is not None:
                spy.wait(60)
            sent = warm["records"] + run["records"]
            acked_gb = run["records"] * RECORD_BYTES / 1e9
            counts, window = run["counts"], run["window_s"]
            out = {"top": run["top"], "ack_p50_ms": run["p50_ms"], "ack_p99_ms": run["p99_ms"],
                   "records": sent, "behind_s": 0.0, "warmup_s": warm["window_s"],
                   "warm_partitions": partitions, "client_blocked_s": run["blocked_s"],
                   "mb_per_s": run["per_s"] * RECORD_BYTES / 1e6}
        else:
            if args.client == "kafka":
                send, tick, finish = kafka_client(f"127.0.0.1:{kafka_port}")
            else:
                send, tick, finish = producer_client(gw.url, args.max_in_flight)
            load = paced_load(send, tick, partitions, rate, args.warmup, args.seconds, case)
            failed = finish()
            if failed:
                raise RuntimeError(f"{failed} records failed (gateway log: {log_path})")
    if args.client != "java":
        acks = np.array(load["acks"].items)
        start, end = load["start"], load["end"]
        window = end - start
        dues, dones = acks[:, 0], acks[:, 1]
        lat = (dones - dues)[(dues >= load["due_from"]) & (dues < load["due_to"])] * 1000
        acked_gb = int(((dones >= start) & (dones < end)).sum()) * RECORD_BYTES / 1e9
        counts, sent = load["counts"], len(acks)
        out = {"top": load["top"], "ack_p50_ms": float(np.percentile(lat, 50)),
               "ack_p99_ms": float(np.percentile(lat, 99)), "records": sent,
               "behind_s": load["behind_s"], "warmup_s": load["warmup_s"],
               "warm_partitions": load["warm_partitions"],
               "mb_per_s": acked_gb * 1000 / window}
    out.update({"partitions": partitions, "window_s": window,
                "load": round(os.getloadavg()[0], 2),
                "per_s": {k: counts.get(k, 0) / window for k in case.kinds},
                "per_gb": {k: counts.get(k, 0) / acked_gb for k in case.kinds},
                "idle_per_s": {k: idle_counts.get(k, 0) / idle_s for k in case.kinds},
                "idle_top": idle_top, "idle_s": idle_s})
    read = read_back(case, partitions, sent, args.read_timeout) if args.read_timeout > 0 \
        else {"records": 0, "seconds": 0.0, "counts": Counter(), "top": []}
    read_gb = read["records"] * RECORD_BYTES / 1e9
    out["read"] = {"records": read["records"], "seconds": read["seconds"],
                   "per_gb": {k: read["counts"].get(k, 0) / read_gb if read_gb else math.nan
                              for k in case.kinds},
                   "top": read["top"]}
    if read["records"] < sent:
        print(f"  ! read back {read['records']} of {sent} records in {read['seconds']:.0f} s")
    return out


def source_state() -> dict:
    """HEAD, and the files of the store and gateway code changed but not committed
    (this tree is shared with work under way: the figures are of what was on disk)."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout
    changed = git("status", "--porcelain", "--", "log_layout", "ingest_gateway", "conf").split("\n")
    return {"commit": git("rev-parse", "--short", "HEAD").strip(),
            "uncommitted": sorted(line[3:] for line in changed if line.strip())}


def new_case(hdfs, n: int):
    """One store (counter) per case: a fresh S3 server, or a fresh prefix of the HDFS."""
    return S3Case() if hdfs is None else HdfsCase(hdfs, f"case{n}")


# -- report -------------------------------------------------------------------------------------
def figures_of(side: str, rows: list[dict], store: str) -> list[dict]:
    figs: list[dict] = []
    if not rows:
        return figs
    put = "PUT" if store == "s3" else "all"
    unit_ops = "PUT/s" if store == "s3" else "NameNode ops/s"
    for r in rows:
        p = r["partitions"]
        base = {"side": side, "partitions": p, "load": r["load"]}
        figs.append({"name": f"{side}_{p}p_{'put' if store == 's3' else 'namenode_ops'}_per_s",
                     "unit": unit_ops, "ours": round(r["per_s"][put], 2), **base})
        for k, v in r["per_gb"].items():
            figs.append({"name": f"{side}_{p}p_{k.lower()}_per_gb", "unit": f"{k} per GB acked",
                         "ours": round(v, 1), **base})
        for q in ("p50", "p99"):
            figs.append({"name": f"{side}_{p}p_ack_{q}", "unit": "ms",
                         "ours": round(r[f"ack_{q}_ms"], 1), **base})
        figs.append({"name": f"{side}_{p}p_acked_mb_per_s", "unit": "MB/s",
                     "ours": round(r["mb_per_s"], 2), **base})
        figs.append({"name": f"{side}_{p}p_producer_behind_s", "unit": "s behind schedule at "
                     "the window's end", "ours": round(r["behind_s"], 2), **base})
        for k, v in r["idle_per_s"].items():
            figs.append({"name": f"{side}_{p}p_idle_{k.lower()}_per_s",
                         "unit": f"{k}/s before the load", "ours": round(v, 2), **base})
        for k, v in r["read"]["per_gb"].items():
            figs.append({"name": f"{side}_{p}p_read_{k.lower()}_per_gb",
                         "unit": f"{k} per GB read", "ours": round(v, 1), **base})
    by_p = {r["partitions"]: r for r in rows}
    low, high = min(by_p), max(by_p)
    if low == high:
        return [f for f in figs if math.isfinite(f["ours"])]
    lo, hi = by_p[low], by_p[high]
    figs.append({"name": f"{side}_{'put' if store == 's3' else 'namenode_ops'}_per_s_{high}p_vs_"
                 f"{low}p", "unit": unit_ops,
                 "ours": round(hi["per_s"][put], 2), "baseline": round(lo["per_s"][put], 2),
                 "baseline_name": f"{unit_ops} at {low} partitions",
                 "ratio": round(lo["per_s"][put] / max(hi["per_s"][put], 1e-9), 3),
                 "target": 0.5, "side": side,
                 "explained": f"{unit_ops} at {low} / at {high} partitions; >= 0.5 means at "
                              f"{high} at most 2x that at {low}"})
    if store == "s3":
        figs.append({"name": f"{side}_put_per_s_{high}p_vs_budget", "unit": "PUT/s",
                     "ours": round(hi["per_s"]["PUT"], 2), "baseline": PUT_BUDGET,
                     "baseline_name": "issue 30 budget: 20 PUT/s per gateway at 4 MB/s",
                     "ratio": round(PUT_BUDGET / max(hi["per_s"]["PUT"], 1e-9), 3),
                     "target": 1.0, "side": side,
                     "explained": f"20 / PUT/s at {high} partitions; >= 1 means within budget"})
    figs.append({"name": f"{side}_ack_p99_{high}p_vs_{low}p", "unit": "ms",
                 "ours": round(hi["ack_p99_ms"], 1), "baseline": round(lo["ack_p99_ms"], 1),
                 "baseline_name": f"ack p99 at {low} partitions",
                 "ratio": round(lo["ack_p99_ms"] / max(hi["ack_p99_ms"], 1e-9), 3),
                 "target": 0.5, "side": side,
                 "explained": f"p99 at {low} / p99 at {high} partitions; >= 0.5 means at "
                              f"{high} at most 2x that at {low}"})
    # a window of HDFS shorter than two JMX refreshes has no figure (NaN): left out
    return [f for f in figs if all(math.isfinite(f.get(k) or 0) for k in ("ours", "baseline",
                                                                          "ratio"))]


def print_table(results: dict[str, list[dict]], store: str) -> None:
    if store == "s3":
        head = (f"{'side':<22}{'P':>5}{'PUT/s':>8}{'PUT/GB':>9}{'GET/GB':>8}{'LIST/GB':>8}"
                f"{'HEAD/GB':>8}{'p50 ms':>9}{'p99 ms':>9}{'MB/s':>6}{'behind':>7}{'idle/s':>7}"
                f"{'rd GET/GB':>10}{'rd LIST/GB':>11}{'load':>6}")
    else:
        head = (f"{'side':<22}{'P':>5}{'NN ops/s':>9}{'ops/GB':>9}{'p50 ms':>9}{'p99 ms':>9}"
                f"{'MB/s':>6}{'behind':>7}{'idle/s':>7}{'rd ops/GB':>10}{'load':>6}")
    print(head)
    print("-" * len(head))
    for side, rows in results.items():
        for r in rows:
            idle = sum(r["idle_per_s"].values())
            if store == "s3":
                g, rg = r["per_gb"], r["read"]["per_gb"]
                print(f"{side:<22}{r['partitions']:>5}{r['per_s']['PUT']:>8.1f}{g['PUT']:>9,.0f}"
                      f"{g['GET']:>8,.0f}{g['LIST']:>8,.0f}{g['HEAD']:>8,.0f}"
                      f"{r['ack_p50_ms']:>9,.0f}{r['ack_p99_ms']:>9,.0f}{r['mb_per_s']:>6.2f}"
                      f"{r['behind_s']:>7.1f}{idle:>7.1f}{rg['GET']:>10,.0f}{rg['LIST']:>11,.0f}{r['load']:>6.1f}")
            else:
                print(f"{side:<22}{r['partitions']:>5}{r['per_s']['all']:>9.1f}"
                      f"{r['per_gb']['all']:>9,.0f}{r['ack_p50_ms']:>9,.0f}"
                      f"{r['ack_p99_ms']:>9,.0f}{r['mb_per_s']:>6.2f}{r['behind_s']:>7.1f}"
                      f"{idle:>7.1f}"
                      f"{r['read']['per_gb']['all']:>10,.0f}{r['load']:>6.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 and 16 partitions, 1.5 s each")
    ap.add_argument("--store", choices=("s3", "hdfs"), default="s3")
    ap.add_argument("--partitions", default=None, help="comma-separated (default 4,64,256,1024; "
                    "--quick 4,16)")
    ap.add_argument("--seconds", type=float, default=None, help="counted window per case "
                    "(default 25, --quick 1.5)")
    ap.add_argument("--warmup", type=float, default=None, help="load before counting, and until "
                    "every partition had an ack (default 5, --quick 0.5)")
    ap.add_argument("--idle", type=float, default=None, help="seconds to settle, then seconds "
                    "counted idle before the load (default 3, --quick 0.5)")
    ap.add_argument("--mb-per-s", type=float, default=4.0, help="the load (default 4 MB/s)")
    ap.add_argument("--client", choices=("producer", "kafka", "java"), default="producer",
                    help="the project's Producer (default), confluent-kafka via the Kafka "
                         "listener, or Kafka's Java ProducerPerformance via the listener")
    ap.add_argument("--max-in-flight", type=int, default=5,
                    help="the Producer's max_in_flight (its default, Kafka's: 5)")
    ap.add_argument("--base", default=None, help="also run the per-partition side from this commit")
    ap.add_argument("--read-timeout", type=float, default=None, help="seconds the consumer "
                    "reads back, checked between polls (its first poll at 1,024 partitions took "
                    "446 s under load 24, 439 s at load 3); per GB figures count what it read; "
                    "0: no read-back; default 60, --quick 10")
    ap.add_argument("--sides", default=None, help="comma-separated subset of the sides to run "
                    "(per-partition, hot)")
    ap.add_argument("--java-batch-bytes", type=int, default=JAVA_BATCH_BYTES,
                    help=f"--client java: batch.size (default {JAVA_BATCH_BYTES}); each "
                         f"batch holds this much of buffer.memory ({JAVA_BUFFER_BYTES >> 20} "
                         "MiB), so at many partitions a smaller one keeps send() from blocking")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    parts = [int(p) for p in args.partitions.split(",")] if args.partitions else \
        ([4, 16] if args.quick else [4, 64, 256, 1024])
    # --quick measures nothing: every case and side, small and short (the test suite
    # leaves it out: its read-backs alone take most of a minute, tests/test_bench_quick.py)
    args.seconds = args.seconds or (1.5 if args.quick else 25.0)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 5.0)
    args.idle = args.idle if args.idle is not None else (0.5 if args.quick else 3.0)
    if args.read_timeout is None:
        args.read_timeout = 10.0 if args.quick else 60.0
    if args.client == "java":
        from bench.kafka_side.fetch import fetch_kafka

        _broker, tools, notes = fetch_kafka()
        if tools is None:
            raise SystemExit("kafka-tools could not be fetched: " + "; ".join(notes))
        args.java_classpath = tools.classpath

    sides: list[Side] = []
    if knows_setting(ROOT, HOT_KEY):
        sides += [Side("per-partition", ROOT, False), Side("hot", ROOT, True)]
        note = f"{HOT_KEY} known: both sides run on HEAD"
    else:
        sides.append(Side("per-partition", ROOT, None))
        note = f"{HOT_KEY} unknown to this code: only the per-partition side runs"
    if args.sides:
        sides = [s for s in sides if s.label in args.sides.split(",")]
        note += f"; sides run: {args.sides}"
    if args.base:
        from bench.ab_produce import base_tree

        tree = base_tree(args.base)
        sides.append(Side(f"per-partition@{args.base}", tree,
                          False if knows_setting(tree, HOT_KEY) else None))
    print(note, flush=True)

    results: dict[str, list[dict]] = {s.label: [] for s in sides}
    failures: list[str] = []
    tree = source_state()
    with contextlib.ExitStack() as stack:
        hdfs = None
        if args.store == "hdfs":
            from bench.hdfs_side import MiniHdfs

            hdfs = stack.enter_context(MiniHdfs())
        # the gateways' logs are kept beside the profiles when profiling
        logdir = os.environ.get("SPARKLOG_BENCH_PROFILE") or stack.enter_context(
            tempfile.TemporaryDirectory(prefix="object-store-bench-"))
        os.makedirs(logdir, exist_ok=True)
        n = 0  # the case's number: its own HDFS prefix
        for p in parts:
            for side in sides:  # sides alternate within a partition count: the same noise
                n += 1
                case = new_case(hdfs, n)
                log_path = os.path.join(logdir, f"{side.label.replace('@', '_')}-{p}.log")
                t0 = time.monotonic()
                try:
                    row = run_case(side, case, p, args, log_path)
                except Exception as e:  # noqa: BLE001 - one failed case: the others still tell
                    with contextlib.suppress(OSError), open(log_path) as f:
                        print(f.read()[-3000:], file=sys.stderr)
                    traceback.print_exc()
                    print(f"{side.label} {p} partitions FAILED: {e!r}", flush=True)
                    failures.append(f"{side.label} {p} partitions: {e!r}")
                    continue
                finally:
                    case.close()
                results[side.label].append(row)
                print(f"{side.label} {p} partitions ({time.monotonic() - t0:.0f} s, load "
                      f"{row['load']}): " + ", ".join(f"{k} {v:.1f}/s" for k, v in
                                                      row["per_s"].items() if v)
                      + f"; ack p50 {row['ack_p50_ms']:.0f} ms p99 {row['ack_p99_ms']:.0f} ms; "
                      f"{row['mb_per_s']:.2f} MB/s; read {row['read']['records']:,} records "
                      f"in {row['read']['seconds']:.1f} s; warm-up {row['warmup_s']:.0f} s "
                      f"({row['warm_partitions']} partitions acked); the producer ended "
                      f"{row['behind_s']:.1f} s behind its schedule"
                      + (f"; its send() blocked {row['client_blocked_s']:.1f} s for want of "
                         "buffer.memory" if "client_blocked_s" in row else ""), flush=True)
                for count, what in row["top"][:5]:
                    print(f"      {count / row['window_s']:8.1f}/s {what}")
                if row["idle_top"]:
                    print("    idle: " + ", ".join(f"{what} {count / row['idle_s']:.1f}/s"
                                                   for count, what in row["idle_top"][:4]))

    print(f"\n{args.store}: one gateway, {args.client} acks=all idempotent, {args.mb_per_s:g} "
          f"MB/s of {RECORD_BYTES}-byte records, {args.seconds:g} s counted per case. {note}.")
    print("per GB: of records acknowledged in the window; p50/p99: records sent in the window, "
          "from when each was due; behind: s the producer was behind its schedule at the "
          "window's end;\nrd: the consumer reading back (at most --read-timeout s); idle/s: "
          "requests per second before the load; load: 1-minute load average\n")
    print_table(results, args.store)
    figures = [f for side, rows in results.items() for f in figures_of(side, rows, args.store)]
    print("\ntargets (ratio >= target):")
    for f in figures:
        if f.get("target") is not None:
            ok = "meets" if f["ratio"] >= f["target"] else "misses"
            print(f"  {f['name']:<42} ours {f['ours']:>9,.1f} baseline {f['baseline']:>9,.1f} "
                  f"ratio {f['ratio']:.3f} target {f['target']} ({ok}): {f['explained']}")
    name = "object_store" if args.store == "s3" else "object_store_hdfs"
    path = write_results(name, figures, quick=args.quick, out=args.out, store=args.store,
                         client=args.client, seconds=args.seconds, warmup=args.warmup,
                         mb_per_s=args.mb_per_s, partitions=parts, sides=[s.label for s in sides],
                         note=note, failures=failures, **tree,
                         java_batch_bytes=args.java_batch_bytes if args.client == "java"
                         else None,
                         client_blocked_s={side: {r["partitions"]: r.get("client_blocked_s")
                                                  for r in rows}
                                           for side, rows in results.items()},
                         top_requests={
                             side: {r["partitions"]: {"load": r["top"], "idle": r["idle_top"],
                                                      "read": r["read"]["top"]} for r in rows}
                             for side, rows in results.items()})
    print(f"\nfigures written to {path}")
    if failures:
        print("FAILED cases:\n  " + "\n  ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
