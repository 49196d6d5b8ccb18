"""Produce latency when records travel alone, and idempotent send() at a steady rate.

The gateway runs in a subprocess on a local store with ``store.fsync=false``
(Kafka's default leaves flushing to the OS) and its *default* linger setting;
the load runs in this process, so both share this machine's cores. Values are
100 bytes, acks=all. Cases (issue 18):

(a) ``sync1``: one synchronous one-record REST request at a time on one
    keep-alive connection, to a one-partition topic: requests/s and p50/p99;
(b) ``outstanding64``: the same with 64 requests outstanding (64 connections);
(c) ``idempotent_send``: ``Producer.send()`` with idempotence on (the default),
    ``linger_ms=5``, at a steady 5,000 msgs/s over 4 partitions (keyed): every
    record timed from when it was due to its acknowledgement, and the gateway's
    ``out_of_order_sequence`` answers over the case, read from ``/metrics``.

    python bench/latency.py                  # about a minute
    python bench/latency.py --quick          # seconds, for CI
    python bench/latency.py --out /tmp/x.json

Writes bench/results/latency.json (DESIGN.md format).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import write_results  # noqa: E402
from bench.http_load import http_closed_loop, json_produce_requests  # noqa: E402
from bench.produce import _Latencies  # noqa: E402
from ingest_gateway.client import Producer  # noqa: E402
from jobs.gateway_process import GatewayProcess  # noqa: E402
from log_layout import open_log  # noqa: E402

VALUE_BYTES = 100
RATE = 5_000
PARTITIONS = 4
#: the gateway's answers counted as out of order: the dedicated counter where it exists,
#: else the refusals by error code (the code before the counter was added)
_OOO = (re.compile(r'^sparklog_gateway_out_of_order_sequence_total (\S+)$', re.MULTILINE),
        re.compile(r'^sparklog_gateway_errors_total\{code="out_of_order_sequence"\} (\S+)$',
                   re.MULTILINE))


def out_of_order(gw: GatewayProcess) -> int:
    _, text, _ = gw.request("GET", "/metrics")
    text = text.decode() if isinstance(text, bytes) else str(text)
    for pattern in _OOO:
        m = pattern.search(text)
        if m:
            return int(float(m.group(1)))
    return 0


def run_http(port: int, topic: str, connections: int, seconds: float) -> dict:
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    requests = json_produce_requests(topic, 1, "all", value_bytes=VALUE_BYTES)
    return asyncio.run(http_closed_loop(port, requests, seconds, connections, 1))


def run_idempotent(url: str, topic: str, seconds: float) -> dict:
    """send() at RATE msgs/s in 1 ms ticks; every record timed from when it was due."""
    value = b"v" * VALUE_BYTES
    samples = _Latencies()
    per_tick = max(1, RATE // 1000)
    n = 0
    with Producer(url, acks="all", linger_ms=5, enable_idempotence=True) as producer:
        t0 = time.perf_counter()
        stop_at = t0 + seconds
        while time.perf_counter() < stop_at:
            due = t0 + n / RATE
            time.sleep(max(0.0, due - time.perf_counter()))
            cb = samples.since(due)
            for _ in range(per_tick):
                producer.send(topic, value, key=str(n % 64).encode()).add_done_callback(cb)
                n += 1
        producer.flush()
        elapsed = time.perf_counter() - t0
        failed = producer.records_failed
    r = samples.summary(n, elapsed)
    r["records_failed"] = failed
    return r


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds in all (CI)")
    parser.add_argument("--seconds", type=float, help="duration of each case")
    parser.add_argument("--out", help="results file (default bench/results/latency.json)")
    args = parser.parse_args(argv)
    seconds = args.seconds or (1.0 if args.quick else 10.0)
    folder = tempfile.mkdtemp(prefix="sparklog-bench-latency-")
    lg = open_log(folder)
    lg.create_topic("one", {"partitions": 1})
    lg.create_topic("four", {"partitions": PARTITIONS})
    figures = []
    try:
        with GatewayProcess(folder, settings={"store.fsync": "false"},
                            log_path=os.path.join(folder, "gateway.log")) as gw:
            run_http(gw.port, "one", 8, min(seconds, 1.0))  # warm-up, not measured
            for name, conns in (("sync1", 1), ("outstanding64", 64)):
                r = run_http(gw.port, "one", conns, seconds)
                figures.append({"name": f"{name}_acks_all", "unit": "requests/s",
                                "ours": round(r["msgs_per_s"]), "p50_ms": round(r["p50_ms"], 3),
                                "p99_ms": round(r["p99_ms"], 3), "errors": r["errors"],
                                "load_avg": round(os.getloadavg()[0], 2)})
            before = out_of_order(gw)
            r = run_idempotent(gw.url, "four", seconds * 2)
            ooo = out_of_order(gw) - before
            figures.append({"name": "idempotent_send_5000_per_s", "unit": "ms",
                            "ours": round(r["p99_ms"], 2), "p50_ms": round(r["p50_ms"], 2),
                            "p99_ms": round(r["p99_ms"], 2),
                            "achieved_msgs_per_s": round(r["msgs_per_s"]),
                            "out_of_order_sequence": ooo,
                            "records_failed": r["records_failed"],
                            "load_avg": round(os.getloadavg()[0], 2)})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nproduce latency, acks=all, store.fsync=false, {VALUE_BYTES}-byte values\n")
    for f in figures:
        extra = f"  out_of_order={f['out_of_order_sequence']} failed={f['records_failed']}" \
            if "out_of_order_sequence" in f else f"  {f['ours']:,} req/s errors={f['errors']}"
        print(f"{f['name']:<30} p50 {f['p50_ms']:>8.2f} ms  p99 {f['p99_ms']:>8.2f} ms{extra}"
              f"  (load {f['load_avg']})")
    out = write_results("latency", figures, quick=args.quick, out=args.out,
                        seconds_per_case=seconds)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
