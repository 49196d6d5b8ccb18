"""What hostile clients cost normal ones: produce latency under attack, and state growth.

The gateway runs in a subprocess on a local store (fsync on, as shipped). Two
measurements, in the same run:

(a) Normal clients' produce p99 latency, acks=all, open loop at a fixed modest
    rate (latency counted from when each request was due, so a stall charges every
    request behind it): REST JSON with 1 record per request, and with 10. Each case
    runs WITHOUT and then WITH an attack from a separate process (so the attackers do
    not share this process's GIL with the measuring client): 40 slow clients (each
    sends half a request, half its headers or half its body, then nothing, and opens
    a new connection when the gateway closes the old one), plus a stream of bodies
    the gateway must refuse (a declared 200 MB body, a chunked body past the limit,
    malformed JSON, NaN, JSON nested 100,000 deep, broken Arrow IPC streams). The
    gateway's read timeout is shortened (``--read-timeout-ms``, 2 s; shipped 30 s) so
    slow clients are cut off and come back many times within a case. Figure:
    p99 without / p99 with (the issue's "with <= 1.5 x without" is a ratio >= 0.67).
(b) The gateway's resident memory (VmRSS) before and after 100,000 lookups of
    distinct groups nobody joined (describe, committed offsets, heartbeat and leave
    of a member that does not exist), after 10,000 others as a warm-up: lookups must
    create no state. Figure: RSS after against RSS before + 10 MB.

    python bench/hostile.py              # full (a few minutes)
    python bench/hostile.py --repeat 3   # best and median of three (the committed results)
    python bench/hostile.py --quick      # seconds, for CI

Writes bench/results/hostile.json (DESIGN.md format).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pyarrow as pa  # noqa: E402

from bench.common import write_results  # noqa: E402
from bench.http_load import http_open_loop, json_produce_requests  # noqa: E402
from log_layout import open_log  # noqa: E402
from jobs.gateway_process import GatewayProcess  # noqa: E402

TOPIC = "bench"
PARTITIONS = 4
SLOW_CLIENTS = 40
#: (case, records per request, requests/s): modest, well under what the gateway sustains
CASES = [("rest_batch1", 1, 300), ("rest_batch10", 10, 50)]
CONNECTIONS = 32  # normal clients' keep-alive pool
REJECTED_PER_S = 40  # the stream of refused bodies
TARGET_RATIO = round(1 / 1.5, 3)
RSS_BUDGET_MB = 10.0
LOOKUPS = 100_000
WARM_UP_LOOKUPS = 10_000


# -- the attack (run in its own process: python bench/hostile.py --attack ...) ----------------
def _arrow_garbage(rng: random.Random) -> list[bytes]:
    """Arrow IPC bodies the gateway must refuse: cut short, bytes flipped in the
    metadata, not a stream at all."""
    sink = pa.BufferOutputStream()
    batch = pa.record_batch({"value": pa.array([b"v" * 100] * 50, pa.binary())})
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    good = sink.getvalue().to_pybytes()
    out = [good[:len(good) // 2], good[:12], bytes(rng.randrange(256) for _ in range(512))]
    for _ in range(5):
        bad = bytearray(good)
        for _ in range(4):
            bad[rng.randrange(8, 200)] ^= 0xFF
        out.append(bytes(bad))
    return out


def _rejected_requests(limit: int) -> list[tuple[str, bytes, int]]:
    """(kind, whole request bytes, bytes of body left unsent) of the refused stream."""
    def req(path: str, ctype: str, body: bytes, *, declared: int | None = None) -> bytes:
        length = len(body) if declared is None else declared
        return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {length}\r\nConnection: close\r\n\r\n").encode() + body

    def chunked(path: str, total: int) -> bytes:
        piece = 64 * 1024
        chunks = b"".join(f"{piece:x}\r\n".encode() + b" " * piece + b"\r\n"
                          for _ in range(total // piece + 1))
        return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode() + chunks + \
            b"0\r\n\r\n"

    json_v2 = "application/vnd.kafka.json.v2+json"
    produce = f"/topics/{TOPIC}"
    out = [("declared_200MB", req(produce, json_v2, b"{" * 1024, declared=200_000_000), 0),
           ("chunked_over_limit", chunked("/groups/hostile/members", limit), 0),
           ("malformed_json", req(produce, json_v2, b'{"records": [{"value": '), 0),
           ("nan", req(produce, json_v2, b'{"records": [{"value": NaN}]}'), 0),
           ("deep_nesting", req(produce, json_v2, b"[" * 100_000), 0),
           ("deep_nesting_control", req("/groups/hostile/members", "application/json",
                                        b'{"topics": ' + b"[" * 100_000), 0)]
    for i, body in enumerate(_arrow_garbage(random.Random(7))):
        out.append((f"bad_arrow_{i}", req(produce, "application/vnd.apache.arrow.stream", body), 0))
    return out


async def _read_status(reader: asyncio.StreamReader) -> int:
    """The status of the answer, after reading it to the end (the gateway closes)."""
    data = await reader.read()
    if not data.startswith(b"HTTP/1.1 "):
        return -1  # dropped without an answer
    return int(data[9:12])


async def _slow_client(port: int, k: int, stop_at: float, stats: collections.Counter) -> None:
    """Half a request, then nothing; a new connection each time the gateway closes it."""
    head = (f"POST /topics/{TOPIC} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/vnd.kafka.json.v2+json\r\nContent-Length: 1000\r\n\r\n")
    half = head[:len(head) // 2].encode() if k % 2 else head.encode() + b'{"records": [{"v'
    while time.perf_counter() < stop_at:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            stats["slow_connect_failed"] += 1
            await asyncio.sleep(0.1)
            continue
        writer.write(half)
        stats["slow_opened"] += 1
        try:
            status = await asyncio.wait_for(_read_status(reader),
                                            max(0.01, stop_at - time.perf_counter()))
            stats[f"slow_answered_{status}"] += 1
        except (asyncio.TimeoutError, OSError):
            pass
        writer.close()


async def _reject_stream(port: int, rate: float, stop_at: float, limit: int,
                         stats: collections.Counter) -> None:
    requests = _rejected_requests(limit)

    async def one(kind: str, raw: bytes) -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(raw)
            status = await asyncio.wait_for(_read_status(reader), 30)
            writer.close()
        except (OSError, asyncio.TimeoutError):
            status = -1
        stats[f"rejected_{'4xx' if 400 <= status < 500 else status}"] += 1
        if not 400 <= status < 500:
            stats[f"not_refused_{kind}_{status}"] += 1

    tasks = set()
    t0, sent = time.perf_counter(), 0
    while time.perf_counter() < stop_at:
        due = t0 + sent / rate
        if due > time.perf_counter():
            await asyncio.sleep(due - time.perf_counter())
            continue
        kind, raw, _ = requests[sent % len(requests)]
        task = asyncio.create_task(one(kind, raw))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        sent += 1
    await asyncio.gather(*tasks)


async def _attack(port: int, seconds: float, rate: float, limit: int) -> dict:
    stats: collections.Counter = collections.Counter()
    stop_at = time.perf_counter() + seconds
    slow = [asyncio.create_task(_slow_client(port, k, stop_at, stats))
            for k in range(SLOW_CLIENTS)]
    while stats["slow_opened"] < SLOW_CLIENTS:  # all 40 hold a connection before the clock
        await asyncio.sleep(0.01)
    print("ready", flush=True)
    await _reject_stream(port, rate, stop_at, limit, stats)
    await asyncio.gather(*slow)
    return dict(stats)


def attack_main(port: int, seconds: float, rate: float, limit: int) -> int:
    print(json.dumps(asyncio.run(_attack(port, seconds, rate, limit))), flush=True)
    return 0


class Attack:
    """The attack in a subprocess for ``seconds``: ``with Attack(...) as a:`` returns
    once its slow clients are connected; ``a.stats`` after the block."""

    def __init__(self, port: int, seconds: float, rate: float, limit: int):
        self.args = [str(port), str(seconds), str(rate), str(limit)]
        self.stats: dict = {}

    def __enter__(self) -> "Attack":
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--attack",
                                      *self.args], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            raise RuntimeError(f"the attack did not start: {line!r}")
        return self

    def __exit__(self, *exc) -> None:
        try:
            out, _ = self.proc.communicate(timeout=120)
            self.stats = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)


# -- (a) latency without and with the attack ---------------------------------------------------
def _load(port: int, records: int, rate: float, seconds: float) -> dict:
    requests = json_produce_requests(TOPIC, records, "all")
    return asyncio.run(http_open_loop(port, requests, seconds, CONNECTIONS, records,
                                       rate * records))


def latency_case(gw: GatewayProcess, records: int, rate: float, seconds: float,
                 limit: int) -> dict:
    """One run of one case: p99 without the attack, then with it."""
    without = _load(gw.port, records, rate, seconds)
    # the attack outlives the measured load a little: it covers all of it
    with Attack(gw.port, seconds + 1.0, REJECTED_PER_S, limit) as attack:
        with_ = _load(gw.port, records, rate, seconds)
    return {"without": without, "with": with_, "attack": attack.stats,
            "ratio": without["p99_ms"] / max(with_["p99_ms"], 1e-9)}


# -- (b) RSS after unknown group lookups ------------------------------------------------------
def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MB (VmRSS of /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _lookup_requests(n: int, seed: int) -> list[bytes]:
    """``n`` lookups of distinct groups nobody joined, over the four lookup routes."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        group = f"unknown-{uuid.UUID(int=rng.getrandbits(128)).hex}"
        method, path, body = [
            ("GET", f"/groups/{group}", b""),
            ("GET", f"/groups/{group}/offsets", b""),
            ("POST", f"/groups/{group}/members/m-{i}/heartbeat", b'{"generation": 1}'),
            ("DELETE", f"/groups/{group}/members/m-{i}", b""),
        ][i % 4]
        out.append(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                   .encode() + body)
    return out


async def _closed_loop(port: int, requests: list[bytes], connections: int) -> collections.Counter:
    """Every request once over keep-alive connections; a count of answers by status."""
    statuses: collections.Counter = collections.Counter()

    async def worker(k: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for raw in requests[k::connections]:
            writer.write(raw)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            statuses[int(head[9:12])] += 1
        writer.close()

    await asyncio.gather(*(worker(k) for k in range(connections)))
    return statuses


def lookups_rss(gw: GatewayProcess, lookups: int, seed: int) -> dict:
    """RSS before and after ``lookups`` distinct unknown group lookups, after a warm-up
    of :data:`WARM_UP_LOOKUPS` others: the first few thousand requests grow RSS by about
    16 MB once (allocator arenas, worker threads; measured flat after), which is not state."""
    asyncio.run(_closed_loop(gw.port, _lookup_requests(WARM_UP_LOOKUPS, seed + 1000), 16))
    groups_before = len(gw.request("GET", "/groups")[1].get("groups", []))
    before = rss_mb(gw.proc.pid)
    t0 = time.perf_counter()
    statuses = asyncio.run(_closed_loop(gw.port, _lookup_requests(lookups, seed), 16))
    elapsed = time.perf_counter() - t0
    after = rss_mb(gw.proc.pid)
    groups_after = len(gw.request("GET", "/groups")[1].get("groups", []))
    return {"before_mb": before, "after_mb": after, "growth_mb": after - before,
            "lookups_per_s": lookups / elapsed, "statuses": dict(statuses),
            "groups_listed_before": groups_before, "groups_listed_after": groups_after}


# -- main ---------------------------------------------------------------------------------------
def _print_table(rows: list[dict], rss: list[dict], repeat: int) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"normal clients' produce p99 (acks=all, open loop), {repeat} run(s): "
                        f"without and with {SLOW_CLIENTS} slow clients + "
                        f"{REJECTED_PER_S} refused bodies/s")
    for col in ("case", "req/s", "p99 without ms", "p99 with ms", "ratio", "ratio best",
                "target", "refused 4xx", "not refused", "slow re-opens"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["case"], f"{r['rate']:,}", f"{r['p99_without']:.1f}",
                      f"{r['p99_with']:.1f}", f"{r['ratio']:.2f}", f"{r['best_ratio']:.2f}",
                      f">= {TARGET_RATIO}", f"{r['refused']:,}", f"{r['not_refused']:,}",
                      f"{r['slow_opened']:,}")
    console = Console(width=140)
    console.print(table)
    table = Table(title="gateway RSS around unknown group lookups")
    for col in ("lookups", "lookups/s", "RSS before MB", "RSS after MB", "growth MB", "budget MB",
                "groups listed before/after", "answers"):
        table.add_column(col, justify="right")
    for r in rss:
        table.add_row(f"{r['lookups']:,}", f"{r['lookups_per_s']:,.0f}", f"{r['before_mb']:.1f}",
                      f"{r['after_mb']:.1f}", f"{r['growth_mb']:.1f}", f"<= {RSS_BUDGET_MB:.0f}",
                      f"{r['groups_listed_before']}/{r['groups_listed_after']}",
                      " ".join(f"{k}:{v}" for k, v in sorted(r["statuses"].items())))
    console.print(table)


def _latency_figure(case: str, rate: float, runs: list[dict]) -> tuple[dict, dict]:
    p99_without = statistics.median(r["without"]["p99_ms"] for r in runs)
    p99_with = statistics.median(r["with"]["p99_ms"] for r in runs)
    attack: collections.Counter = collections.Counter()
    for r in runs:
        attack.update(r["attack"])
    not_refused = sum(v for k, v in attack.items() if k.startswith("not_refused_"))
    row = {"case": case, "rate": rate, "p99_without": p99_without, "p99_with": p99_with,
           "ratio": p99_without / max(p99_with, 1e-9),
           "median_ratio": statistics.median(r["ratio"] for r in runs),
           "best_ratio": max(r["ratio"] for r in runs), "refused": attack["rejected_4xx"],
           "not_refused": not_refused, "slow_opened": attack["slow_opened"]}
    figure = {"name": f"{case}_acks_all_p99_with_attack", "unit": "ms",
              "ours": round(p99_with, 2), "baseline": round(p99_without, 2),
              "baseline_source": "the same load without the attack, same run",
              "ratio": round(p99_without / max(p99_with, 1e-9), 3), "target": TARGET_RATIO,
              "median_ratio": round(row["median_ratio"], 3),
              "best_ratio": round(row["best_ratio"], 3),
              "offered_requests_per_s": rate, "slow_clients": SLOW_CLIENTS,
              "refused_bodies_per_s": REJECTED_PER_S,
              "errors_without": sum(r["without"]["errors"] for r in runs),
              "errors_with": sum(r["with"]["errors"] for r in runs),
              "attack": dict(sorted(attack.items())),
              "runs": [{"p99_without_ms": round(r["without"]["p99_ms"], 2),
                        "p99_with_ms": round(r["with"]["p99_ms"], 2)} for r in runs]}
    return row, figure


def _rss_figure(lookups: int, runs: list[dict]) -> dict:
    best = min(runs, key=lambda r: r["growth_mb"])
    median_growth = statistics.median(r["growth_mb"] for r in runs)
    budget = best["before_mb"] + RSS_BUDGET_MB
    return {"name": f"rss_after_{lookups}_unknown_group_lookups", "unit": "MB",
            "ours": round(best["after_mb"], 2), "baseline": round(budget, 2),
            "baseline_source": f"RSS before the lookups + {RSS_BUDGET_MB:.0f} MB budget",
            "ratio": round(budget / best["after_mb"], 3), "target": 1.0,
            "growth_mb": round(best["growth_mb"], 2), "median_growth_mb": round(median_growth, 2),
            "groups_listed_after": best["groups_listed_after"],
            "answers": best["statuses"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds in all (CI)")
    parser.add_argument("--seconds", type=float, help="duration of each measured load")
    parser.add_argument("--repeat", type=int, default=1, help="runs; best and median are kept")
    parser.add_argument("--lookups", type=int, help=f"unknown group lookups ({LOOKUPS:,})")
    parser.add_argument("--read-timeout-ms", type=int, default=2000,
                        help="the gateway's request.read.timeout.ms (shipped: 30000)")
    parser.add_argument("--attack", nargs=4, metavar=("PORT", "SECONDS", "RATE", "LIMIT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.attack:
        port, seconds, rate, limit = args.attack
        return attack_main(int(port), float(seconds), float(rate), int(limit))
    # --quick proves the script works and measures nothing: short loads, no warm-up
    seconds = args.seconds or (0.5 if args.quick else 10.0)
    lookups = args.lookups or (1_000 if args.quick else LOOKUPS)
    repeat = max(1, args.repeat)

    folder = tempfile.mkdtemp(prefix="sparklog-bench-hostile-")
    open_log(folder).create_topic(TOPIC, {"partitions": PARTITIONS})
    settings = {"store.fsync": "true", "gateway.linger.ms": 5,
                "gateway.request.read.timeout.ms": args.read_timeout_ms}
    try:
        with GatewayProcess(folder, settings=settings,
                            log_path=os.path.join(folder, "gateway.log")) as gw:
            limit = 1024 * 1024  # gateway.max.control.request.size as shipped
            rss_runs = [{**lookups_rss(gw, lookups, seed=k), "lookups": lookups}
                        for k in range(repeat)]
            if not args.quick:
                _load(gw.port, 1, 100, min(seconds, 1.0))  # warm-up, not measured
            rows, figures = [], []
            for case, records, rate in CASES:
                runs = [latency_case(gw, records, rate, seconds, limit) for _ in range(repeat)]
                row, figure = _latency_figure(case, rate, runs)
                rows.append(row)
                figures.append(figure)
            figures.append(_rss_figure(lookups, rss_runs))
            alive = gw.proc.poll() is None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    _print_table(rows, rss_runs, repeat)
    print(f"gateway alive at the end: {alive}; read timeout {args.read_timeout_ms} ms; "
          f"{seconds} s per load; latency from when each request was due (no coordinated "
          "omission); p99s: median of the runs; ratio = p99 without / p99 with (best: of one run)")
    out = write_results("hostile", figures, quick=args.quick, seconds_per_case=seconds,
                        runs=repeat, read_timeout_ms=args.read_timeout_ms, gateway_alive=alive)
    print(f"wrote {out}")
    return 0 if alive else 1


if __name__ == "__main__":
    sys.exit(main())
