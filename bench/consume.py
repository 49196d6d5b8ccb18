"""Consumer throughput and end-to-end latency, beside plain pyarrow and Kafka's figures.

What is measured (one partition, 100-byte values, segments of 10,000 records —
about what the gateway flushes at ``batch.size`` = 1 MiB):

* **direct, Arrow**: ``Consumer(log=...).batches()`` reading segments straight
  from the local store (manifest, CRC-32 check, IPC decode) — RecordBatches out.
* **direct, records**: the same consumer's per-record iterator (``Record`` tuples).
* **gateway, Arrow**: ``Consumer(gateway=...).batches()``: ``POST /fetch`` long-polls,
  Arrow IPC stream over HTTP from a gateway subprocess on 127.0.0.1.
* **gateway, JSON**: ``GET /topics/T/partitions/0/messages?count=10000`` with the
  REST Proxy v2 binary embedded format, decoded client-side (JSON + base64).
* **baseline (same run)**: plain pyarrow reading every segment file of the store
  (read bytes, ``pa.ipc.open_file``, ``read_all``): the ceiling of any reader.
* **commit -> iterator**: one-record POSTs with acks=all, one after the other;
  from each answer (the commit is done) to the record leaving the consumer's
  iterator — the wake-up of the long-poll (or of the manifest watch) alone.
* **end-to-end latency**: ``Producer.send()`` (``linger_ms=5``, acks=all, the
  gateway at ``linger.ms=5`` with fsync on) to the record leaving the consumer's
  iterator, once through the gateway's long-poll and once in direct mode
  (manifest watching). Records are sent at a steady rate, each carrying its
  send time; the consumer runs in the same process (one clock).

Anchors (not run here): the Kafka paper's consumer, 22,000 msgs/s (2011);
Kafka 0.8 on 2014 hardware, 940,521 msgs/s for one consumer and 2 ms median
end-to-end latency (Jay Kreps, "Benchmarking Apache Kafka", 2014). Targets:
>= 1,000,000 msgs/s for one Arrow or direct consumer (ratio to the Kafka 0.8
anchor >= 1.063); end-to-end p99 <= 50 ms on the local store.

Usage: ``python bench/consume.py [--quick] [--records N] [--repeat N]``. Writes
``bench/results/consume.json``. ``--repeat N`` measures the plain scan and the direct
Arrow consumer N times each, alternately (one after the other, a new consumer each
time), and reports their medians, the best runs and the median of the paired ratios:
beside other work on 2 cores one run of each moves 2x.
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import shutil
import struct
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import urllib3  # noqa: E402

from ingest_gateway.client import Consumer  # noqa: E402
from bench.common import machine, write_results  # noqa: E402
from log_layout import open_log  # noqa: E402

VALUE_BYTES = 100
SEGMENT_RECORDS = 10_000
KAFKA_08_CONSUMER = 940_521.0
KAFKA_PAPER_CONSUMER = 22_000.0
KAFKA_08_E2E_MEDIAN_MS = 2.0
TARGET_MSGS = 1_000_000.0
TARGET_P99_MS = 50.0


def fill(store: str, topic: str, records: int, *, hot: bool = False) -> None:
    """Append ``records`` to partition 0 of a new ``topic``, a segment per 10,000;
    ``hot``: through a hot-tier journal (the segments live in shared objects)."""
    from log_layout.hot_writer import JournalWriter

    lg = open_log(store, fsync=False)
    lg.create_topic(topic, {"partitions": 1})
    journal = JournalWriter(lg.journals, "bench") if hot else None
    w = lg.partition(topic, 0).claim("bench", journal)
    value = pa.array([b"v" * VALUE_BYTES] * SEGMENT_RECORDS, pa.binary())
    left = records
    try:
        while left > 0:
            n = min(left, SEGMENT_RECORDS)
            w.append(pa.table({"value": value.slice(0, n)}))
            left -= n
    finally:
        if journal is not None:
            journal.close()


def timed(fn, records: int) -> tuple[float, float, float]:
    """(records/s, MB/s of values, records per CPU second of this process) of ``fn``,
    which must consume ``records``. Beside other work on 2 cores the wall time moves
    2x from run to run, the CPU time much less."""
    t0, c0 = time.perf_counter(), time.process_time()
    n = fn()
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert n >= records, (n, records)
    return n / secs, n * VALUE_BYTES / secs / 1e6, n / cpu


def plain_pyarrow(store: str, topic: str, records: int):
    # The baseline opens the files by hand on purpose: it is what any Arrow reader
    # could do without sparklog (no manifest, no checksum).
    files = sorted(glob.glob(os.path.join(store, topic, "0", "*.arrow")))

    def run() -> int:
        n = 0
        for path in files:
            with open(path, "rb") as f:
                n += pa.ipc.open_file(pa.py_buffer(f.read())).read_all().num_rows
        return n
    return timed(run, records)


def drain(c: Consumer, records: int, *, batches: bool):
    """Time reading ``records`` records from ``c`` as Arrow batches or one Record at a time."""
    def run() -> int:
        n = 0
        for item in (c.batches() if batches else c):
            n += item.records.num_rows if batches else 1
            if n >= records:
                return n
        return n
    try:
        return timed(run, records)
    finally:
        c.close()


def direct_arrow(store: str, topic: str, records: int):
    c = Consumer(store=store, auto_offset_reset="earliest", max_poll_records=200_000)
    c.assign([(topic, 0)])
    return drain(c, records, batches=True)


def direct_records(store: str, topic: str, records: int):
    c = Consumer(store=store, auto_offset_reset="earliest", max_poll_records=200_000)
    c.assign([(topic, 0)])
    return drain(c, records, batches=False)


def gateway_arrow(url: str, topic: str, records: int):
    c = Consumer(gateway=url, auto_offset_reset="earliest", max_poll_records=200_000)
    c.assign([(topic, 0)])
    c.poll_batches(10, max_records=1)  # warm up: connection, the gateway's consumer state
    c.seek((topic, 0), 0)
    return drain(c, records, batches=True)


def gateway_json(url: str, topic: str, records: int):
    http = urllib3.PoolManager(retries=False)
    http.request("GET", f"{url}/topics/{topic}/partitions/0/messages?offset=0")  # warm up

    def run() -> int:
        n = offset = 0
        while n < records:
            r = http.request("GET", f"{url}/topics/{topic}/partitions/0/messages"
                             f"?offset={offset}&count=10000",
                             headers={"Accept": "application/vnd.kafka.binary.v2+json"})
            assert r.status == 200, r.data[:200]
            docs = json.loads(r.data)
            for d in docs:
                base64.b64decode(d["value"])
            n += len(docs)
            offset = docs[-1]["offset"] + 1
        return n
    return timed(run, records)


def e2e_latency(url: str, make_consumer, topic: str, count: int, rate: float) -> list[float]:
    """Latencies (ms) from send() to the record leaving the consumer's iterator."""
    from ingest_gateway.client import Producer

    c = make_consumer()
    c.assign([(topic, 0)])
    c.seek_to_end()
    c.position((topic, 0))
    lat: list[float] = []
    done = threading.Event()

    def consume():
        for r in c:
            lat.append((time.perf_counter_ns() - struct.unpack_from(">q", r.value)[0]) / 1e6)
            if len(lat) >= count:
                break
        done.set()

    th = threading.Thread(target=consume, daemon=True)
    th.start()
    pad = b"p" * (VALUE_BYTES - 8)
    with Producer(url, linger_ms=5, acks="all") as p:
        interval = 1 / rate
        nxt = time.perf_counter()
        for _ in range(count):
            p.send(topic, struct.pack(">q", time.perf_counter_ns()) + pad, partition=0)
            nxt += interval
            delay = nxt - time.perf_counter()
            if delay > 0:
                time.sleep(delay)  # the send rate, not a wait for a condition
        p.flush()
    done.wait(120)
    c.close()
    return lat


def commit_to_iterator(url: str, make_consumer, topic: str, count: int) -> list[float]:
    """Latencies (ms) from a produce's acks=all answer (its commit is done) to the
    record leaving the consumer's iterator: the long-poll's (or the manifest
    watch's) wake-up alone, without producer linger and flush. Negative when the
    consumer got the record before the producer got its answer."""
    c = make_consumer()
    c.assign([(topic, 0)])
    c.seek_to_end()
    c.position((topic, 0))
    recv: dict[int, int] = {}
    done = threading.Event()

    def consume():
        for r in c:
            recv[r.offset] = time.perf_counter_ns()
            if len(recv) >= count:
                break
        done.set()

    th = threading.Thread(target=consume, daemon=True)
    th.start()
    http = urllib3.PoolManager(retries=False)
    acked: dict[int, int] = {}
    body = json.dumps({"records": [{"value": base64.b64encode(b"v" * VALUE_BYTES).decode()}]})
    for _ in range(count):
        r = http.request("POST", f"{url}/topics/{topic}/partitions/0?acks=all", body=body,
                         headers={"Content-Type": "application/vnd.kafka.binary.v2+json"})
        t = time.perf_counter_ns()
        acked[json.loads(r.data)["offsets"][0]["offset"]] = t
    done.wait(60)
    c.close()
    return [(recv[o] - t) / 1e6 for o, t in acked.items() if o in recv]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (seconds), as CI does")
    ap.add_argument("--records", type=int, help="records to consume (default 5,000,000)")
    ap.add_argument("--out", help="results file (default bench/results/consume[.quick].json)")
    ap.add_argument("--hot", action="store_true",
                    help="the consumed partition written through a hot-tier journal (its "
                         "segments in shared objects); the baseline scans a cold copy's files")
    ap.add_argument("--repeat", type=int, default=1,
                    help="measure the plain scan and the direct Arrow consumer this many "
                         "times, alternately; report medians, best runs and paired ratios")
    ap.add_argument("--direct-only", action="store_true",
                    help="only the plain scan and the direct consumers (no gateway, no latency)")
    args = ap.parse_args()
    records = args.records or (200_000 if args.quick else 5_000_000)
    json_records = min(records, 100_000 if args.quick else 500_000)
    e2e_count, e2e_rate = (500, 500.0) if args.quick else (5_000, 1_000.0)
    wake_count = 100 if args.quick else 1_000

    from jobs.gateway_process import GatewayProcess

    work = tempfile.mkdtemp(prefix="sparklog-bench-consume-")
    try:
        store = os.path.join(work, "store")
        print(f"writing {records:,} records of {VALUE_BYTES} B ...", flush=True)
        fill(store, "bench", records, hot=args.hot)
        # a hot partition has no segment files of its own: the baseline reads a cold copy
        # (the same records, the same segment bytes as plain files)
        plain_topic = "bench"
        if args.hot:
            plain_topic = "bench-plain"
            fill(store, plain_topic, records)
        rows: list[tuple[str, tuple[float, float, float]]] = []
        runs: list[tuple[tuple[float, float, float], tuple[float, float, float]]] = []
        for _ in range(max(1, args.repeat)):  # alternately: each pair sees the same load
            runs.append((plain_pyarrow(store, plain_topic, records),
                         direct_arrow(store, "bench", records)))
        rows.append(("plain pyarrow scan (baseline)", _median_run([p for p, _ in runs])))
        rows.append(("direct, Arrow batches", _median_run([d for _, d in runs])))
        rows.append(("direct, Record iterator", direct_records(store, "bench", records)))
        if args.direct_only:
            return _report(args, records, json_records, rows, None, runs=runs)
        settings = {"gateway.linger.ms": 5, "store.fsync": "true"}
        with GatewayProcess(store, settings=settings) as gw:
            rows.append(("gateway, Arrow (POST /fetch)", gateway_arrow(gw.url, "bench", records)))
            rows.append(("gateway, JSON (REST v2 binary)",
                         gateway_json(gw.url, "bench", json_records)))
            lg = open_log(store)
            lg.create_topic("e2e-gw", {"partitions": 1})
            lg.create_topic("e2e-direct", {"partitions": 1})
            lat_gw = e2e_latency(gw.url, lambda: Consumer(gateway=gw.url, fetch_max_wait_ms=500),
                                 "e2e-gw", e2e_count, e2e_rate)
            lat_direct = e2e_latency(gw.url, lambda: Consumer(store=store, fetch_max_wait_ms=500),
                                     "e2e-direct", e2e_count, e2e_rate)
            lg.create_topic("wake-gw", {"partitions": 1})
            lg.create_topic("wake-direct", {"partitions": 1})
            wake_gw = commit_to_iterator(gw.url, lambda: Consumer(gateway=gw.url,
                                                                  fetch_max_wait_ms=500),
                                         "wake-gw", wake_count)
            wake_direct = commit_to_iterator(gw.url, lambda: Consumer(store=store,
                                                                      fetch_max_wait_ms=500),
                                             "wake-direct", wake_count)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    return _report(args, records, json_records, rows,
                   (lat_gw, lat_direct, wake_gw, wake_direct), e2e_rate, runs=runs)


def _median_run(runs: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """The median of each figure of ``runs`` (records/s, MB/s, records per CPU second)."""
    return tuple(float(np.median([r[i] for r in runs])) for i in range(3))


def _paired(runs: list) -> dict:
    """What ``--repeat`` adds to the direct Arrow figure: every run, the best of each
    side, and the median of the ratios of runs measured one after the other."""
    ratios = sorted(d[0] / p[0] for p, d in runs)
    cpu = sorted(d[2] / p[2] for p, d in runs)
    return {"repeat": len(runs),
            "runs": [{"plain": p[0], "ours": d[0], "plain_cpu": p[2], "ours_cpu": d[2]}
                     for p, d in runs],
            "best": max(d[0] for _, d in runs), "baseline_best": max(p[0] for p, _ in runs),
            "of_plain_pyarrow_best": max(d[0] for _, d in runs) / max(p[0] for p, _ in runs),
            "of_plain_pyarrow_paired_median": float(np.median(ratios)),
            "of_plain_pyarrow_paired": ratios,
            "of_plain_pyarrow_cpu_paired_median": float(np.median(cpu)),
            "of_plain_pyarrow_cpu_paired": cpu}


def _report(args, records: int, json_records: int, rows: list, latencies: tuple | None,
            e2e_rate: float = 0.0, *, runs: list | None = None) -> int:
    """Print the figures and write the results file; ``latencies``: the four lists
    (send and commit to iterator, gateway and direct), None when not measured; ``runs``:
    the (plain scan, direct Arrow) pairs of ``--repeat``."""
    runs = runs or []
    baseline, baseline_cpu = rows[0][1][0], rows[0][1][2]
    figures = [{"name": "plain_pyarrow_scan", "unit": "records/s", "ours": baseline,
                "baseline": baseline, "ratio": 1.0, "target": None,
                "note": "the ceiling: plain pyarrow reading the segment files"}]
    names = ["consume_direct_arrow", "consume_direct_records", "consume_gateway_arrow",
             "consume_gateway_json"]
    for name, (label, (msgs, mbs, cpu_rate)) in zip(names, rows[1:]):
        arrow_or_direct = name in ("consume_direct_arrow", "consume_gateway_arrow")
        figures.append({"name": name, "unit": "records/s", "ours": msgs,
                        "baseline": KAFKA_08_CONSUMER, "baseline_name": "Kafka 0.8, one consumer",
                        "ratio": msgs / KAFKA_08_CONSUMER,
                        "target": TARGET_MSGS / KAFKA_08_CONSUMER if arrow_or_direct else None,
                        "mb_per_s": mbs, "of_plain_pyarrow": msgs / baseline,
                        # the client process's CPU only: meaningful in direct mode
                        "of_plain_pyarrow_cpu": cpu_rate / baseline_cpu if "direct" in name
                        else None,
                        "records": json_records if "json" in name else records,
                        **(_paired(runs) if name == "consume_direct_arrow"
                           and len(runs) > 1 else {})})
    lat_rows = []
    lat_gw, lat_direct, wake_gw, wake_direct = latencies or ([], [], [], [])
    for label, key, lat in (("send -> iterator, gateway", "e2e_gateway", lat_gw),
                            ("send -> iterator, direct", "e2e_direct", lat_direct),
                            ("commit -> iterator, gateway", "wake_gateway", wake_gw),
                            ("commit -> iterator, direct", "wake_direct", wake_direct)):
        if latencies is None:
            break
        p50, p99 = (float(np.percentile(lat, q)) for q in (50, 99))
        lat_rows.append((label, p50, p99, len(lat)))
        if key.startswith("e2e"):
            figures.append({"name": f"{key}_p50", "unit": "ms", "ours": p50,
                            "baseline": KAFKA_08_E2E_MEDIAN_MS,
                            "baseline_name": "Kafka 0.8 median end-to-end",
                            "ratio": KAFKA_08_E2E_MEDIAN_MS / max(p50, 1e-3), "target": None})
        else:
            figures.append({"name": f"{key}_p50", "unit": "ms", "ours": p50, "baseline": None,
                            "ratio": None, "target": None})
        figures.append({"name": f"{key}_p99", "unit": "ms", "ours": p99,
                        "baseline": TARGET_P99_MS, "baseline_name": "the target p99 (50 ms)",
                        "ratio": TARGET_P99_MS / max(p99, 1e-3), "target": 1.0})

    print(f"\nconsume, {records:,} records of {VALUE_BYTES} B, one partition, one consumer "
          f"({machine()})")
    print(f"{'reader':34} {'msgs/s':>12} {'MB/s':>8} {'x pyarrow':>10} {'x Kafka 0.8':>12} "
          f"{'x pyarrow, CPU time':>20}")
    for label, (msgs, mbs, cpu_rate) in rows:
        print(f"{label:34} {msgs:12,.0f} {mbs:8.1f} {msgs / baseline:10.2f} "
              f"{msgs / KAFKA_08_CONSUMER:12.2f} "
              f"{'' if 'gateway' in label else f'{cpu_rate / baseline_cpu:.2f}':>20}")
    if len(runs) > 1:
        p = _paired(runs)
        print(f"{p['repeat']} alternate runs (medians above): best {p['best']:,.0f} against "
              f"{p['baseline_best']:,.0f} ({p['of_plain_pyarrow_best']:.2f}); paired ratios "
              f"{', '.join(f'{r:.2f}' for r in p['of_plain_pyarrow_paired'])} (median "
              f"{p['of_plain_pyarrow_paired_median']:.2f}); in CPU time "
              f"{', '.join(f'{r:.2f}' for r in p['of_plain_pyarrow_cpu_paired'])} (median "
              f"{p['of_plain_pyarrow_cpu_paired_median']:.2f})")
    print(f"{'anchor: Kafka paper consumer':34} {KAFKA_PAPER_CONSUMER:12,.0f}")
    print(f"{'anchor: Kafka 0.8 one consumer':34} {KAFKA_08_CONSUMER:12,.0f}")
    print(f"target: >= {TARGET_MSGS:,.0f} msgs/s for one Arrow or direct consumer\n")
    if latencies is not None:
        print(f"latency: send() -> consumer iterator (Producer linger_ms=5, gateway linger.ms=5, "
              f"acks=all, fsync on, {e2e_rate:,.0f} msgs/s), and commit (acks=all answer of a "
              f"one-record POST) -> consumer iterator")
        print(f"{'path':34} {'p50 ms':>8} {'p99 ms':>8} {'records':>8}")
        for label, p50, p99, n in lat_rows:
            print(f"{label:34} {p50:8.1f} {p99:8.1f} {n:8}")
        print(f"{'anchor: Kafka 0.8 median':34} {KAFKA_08_E2E_MEDIAN_MS:8.1f}")
        print(f"target: p99 <= {TARGET_P99_MS:.0f} ms on the local store")

    out = write_results(
        "consume", figures, quick=args.quick, out=args.out, records=records, hot=args.hot,
        value_bytes=VALUE_BYTES, segment_records=SEGMENT_RECORDS, repeat=args.repeat,
        load_after=os.getloadavg()[0],
        anchors={"kafka_paper_consumer_msgs": KAFKA_PAPER_CONSUMER,
                 "kafka_08_one_consumer_msgs": KAFKA_08_CONSUMER,
                 "kafka_08_e2e_median_ms": KAFKA_08_E2E_MEDIAN_MS})
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
