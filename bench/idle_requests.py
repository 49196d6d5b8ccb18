"""Store requests an idle broker application makes, per gateway per second, by kind (issue 33).

``sparklog broker-app --gateways N`` in local mode on the SeaweedFS S3 server, with a
counting proxy in front of it (``bench/s3_counting_proxy.py``): every request the
driver, the gateways and the maintenance scheduler make to the store goes through
it. The endpoint is given the way a user gives it, ``SPARKLOG_STORE_S3_ENDPOINT_URL``
(``--via flag`` gives it as ``--storage-options`` instead, the only way that worked
before issue 33). For each case (N gateways, P partitions as topics of at most 100
partitions) the application is started, left ``--settle`` seconds after every slot
is up and until two 5 s windows in a row see the same request rate within 25% (the
claims of the partitions at start are not idle traffic), then the proxy counts for
``--seconds`` with no client connected. Maintenance runs as configured (every 5
minutes): a pass that falls in the window is counted.

Figures per case: requests per second per gateway, in all and by kind (LIST, GET,
HEAD, PUT, DELETE, POST). Baseline: the budget of issue 33 (5 requests/s per
gateway in all, LIST 0.2/s per gateway); ``ratio`` is budget / ours (lower counts are
better), so a figure meets its target (1.0) when within the budget. ``before`` holds
the same figure measured on the code before issue 33 (the endpoint given with
``--via flag``, the only way it then worked): 18.5 requests/s per gateway at 2
gateways and 12 partitions, LIST 4.0.

Usage: ``python bench/idle_requests.py [--quick] [--seconds S] [--cases 2x12,4x1200]``.
Writes ``bench/results/idle_requests.json`` (``idle_requests.quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.common import machine, write_results  # noqa: E402
from bench.s3_counting_proxy import CountingProxy  # noqa: E402
from bench.s3_side import SeaweedS3  # noqa: E402
from jobs.broker_app_process import BrokerAppProcess  # noqa: E402
from log_layout import open_log  # noqa: E402

KINDS = ("LIST", "GET", "HEAD", "PUT", "DELETE", "POST")
#: issue 33's budget, per gateway per second
BUDGET_ALL, BUDGET_LIST = 5.0, 0.2
CASES = ((2, 12), (4, 12), (2, 1200), (4, 1200))
#: before issue 33: this bench with --via flag on commit 89b84e0 (2026-11-28 17:42, the
#: machine shared with other work), requests per second per gateway by kind
BEFORE: dict[str, dict[str, float]] = {
    "2gw_12p": {"all": 18.45, "LIST": 3.95, "GET": 7.067, "HEAD": 6.317, "PUT": 1.117},
    "4gw_12p": {"all": 15.042, "LIST": 2.958, "GET": 6.008, "HEAD": 5.1, "PUT": 0.975},
    "2gw_1200p": {"all": 19.799, "LIST": 5.233, "GET": 6.616, "HEAD": 7.0, "PUT": 0.95},
    "4gw_1200p": {"all": 16.6, "LIST": 3.642, "GET": 6.1, "HEAD": 5.908, "PUT": 0.95},
}


def topics_for(partitions: int) -> dict[str, int]:
    """Topics of at most 100 partitions: 12 -> 3 x 4 (the issue's case), 1200 -> 12 x 100."""
    if partitions <= 12:
        return {f"idle_{i}": 4 for i in range(max(1, partitions // 4))}
    per = 100
    return {f"idle_{i}": per for i in range(partitions // per)}


def run_case(s3, proxy: CountingProxy, work: str, gateways: int, partitions: int, *,
             seconds: float, settle: float, via: str, window_s: float = 5.0) -> dict:
    """Start the application on a fresh prefix, let it settle (``window_s``: see
    :func:`wait_quiet`), count; returns the figures."""
    store = f"s3://{s3.bucket}/{uuid.uuid4().hex}"
    direct = s3.storage_options()  # set-up goes straight to the server, uncounted
    log = open_log(store, storage_options=direct)
    for topic, count in topics_for(partitions).items():
        log.create_topic(topic, {"partitions": count})
    env = {"AWS_ACCESS_KEY_ID": s3.key, "AWS_SECRET_ACCESS_KEY": s3.secret,
           "AWS_DEFAULT_REGION": "us-east-1"}
    options = None
    if via == "setting":
        env["SPARKLOG_STORE_S3_ENDPOINT_URL"] = proxy.url
    else:
        options = json.dumps({**direct, "client_kwargs": {**direct["client_kwargs"],
                                                          "endpoint_url": proxy.url}})
    case_dir = os.path.join(work, f"{gateways}x{partitions}")
    app = BrokerAppProcess(store, None, case_dir, gateways=gateways, storage_options=options,
                           env=env)
    try:
        app.start(timeout=600)
        time.sleep(settle)
        settled = wait_quiet(proxy, window_s)
        proxy.reset()
        start = time.monotonic()
        time.sleep(seconds)
        counts, by_path = proxy.snapshot()
        elapsed = time.monotonic() - start
    finally:
        status = app.stop()
    if status != 0:
        raise RuntimeError(f"broker-app exited with {status}; see {app.log_path}")
    per = {k: counts.get(k, 0) / elapsed / gateways for k in KINDS}
    per["all"] = sum(counts.values()) / elapsed / gateways
    top = [(f"{n / elapsed:.2f}/s", what) for what, n in by_path.most_common(12)]
    return {"per_gateway": per, "elapsed": elapsed, "top": top, "settled_s": settled}


def wait_quiet(proxy: CountingProxy, window_s: float = 5.0, max_s: float = 300.0) -> float:
    """Wait until two windows in a row see request rates within 25% of each other (the
    start's claims of every partition are over); returns the seconds waited."""
    start = time.monotonic()
    previous = None
    while time.monotonic() - start < max_s:
        proxy.reset()
        time.sleep(window_s)
        rate = sum(proxy.snapshot()[0].values()) / window_s
        if previous is not None and abs(rate - previous) <= 0.25 * max(rate, previous, 1.0):
            break
        previous = rate
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 gateways, 12 partitions, 2 s")
    ap.add_argument("--seconds", type=float, default=None,
                    help="counting window per case (default 30, --quick 2)")
    ap.add_argument("--settle", type=float, default=None,
                    help="seconds after start before counting (default 15, --quick 0)")
    ap.add_argument("--cases", default=None,
                    help="GATEWAYSxPARTITIONS,... (default 2x12,4x12,2x1200,4x1200)")
    ap.add_argument("--via", choices=("setting", "flag"), default="setting",
                    help="give the endpoint as SPARKLOG_STORE_S3_ENDPOINT_URL (default) or "
                         "--storage-options")
    ap.add_argument("--out", default=None, help="results file (default bench/results/...)")
    args = ap.parse_args(argv)
    # --quick proves the script works and measures nothing: no settling, 1 s windows
    seconds = args.seconds or (2.0 if args.quick else 30.0)
    settle = args.settle if args.settle is not None else (0.0 if args.quick else 15.0)
    window_s = 1.0 if args.quick else 5.0
    if args.cases:
        cases = [tuple(int(x) for x in c.split("x")) for c in args.cases.split(",")]
    else:
        cases = [(2, 12)] if args.quick else list(CASES)
    figures, rows = [], []
    with contextlib.ExitStack() as stack:
        work = stack.enter_context(tempfile.TemporaryDirectory(prefix="idle-requests-"))
        s3 = stack.enter_context(SeaweedS3())
        proxy = stack.enter_context(CountingProxy(s3.endpoint_url))
        for gateways, partitions in cases:
            result = run_case(s3, proxy, work, gateways, partitions, seconds=seconds,
                              settle=settle, via=args.via, window_s=window_s)
            per = result["per_gateway"]
            rows.append((gateways, partitions, per))
            print(f"{gateways} gateways, {partitions} partitions (settled after "
                  f"{result['settled_s']:.0f} s more): " + ", ".join(
                f"{k} {per[k]:.2f}" for k in ("all", *KINDS)) + " requests/s per gateway",
                flush=True)
            for rate, what in result["top"]:
                print(f"    {rate:>8} {what}")
            case = f"{gateways}gw_{partitions}p"
            for kind in ("all", *KINDS):
                budget = BUDGET_ALL if kind == "all" else BUDGET_LIST if kind == "LIST" else None
                ours = round(per[kind], 3)
                fig = {"name": f"idle_{kind.lower()}_{case}", "unit": "requests/s per gateway",
                       "ours": ours, "baseline": budget,
                       "baseline_name": "issue 33 budget" if budget else None,
                       "ratio": (round(budget / ours, 3) if ours else None) if budget else None,
                       "target": 1.0 if budget else None}
                before = BEFORE.get(case, {}).get(kind)
                if before is not None:
                    fig["before"] = before
                figures.append(fig)
    print(f"\nidle broker application on S3 (SeaweedFS behind a counting proxy), {seconds:.0f} s "
          f"per case, requests per second per gateway; budget {BUDGET_ALL:g} in all, "
          f"LIST {BUDGET_LIST:g}")
    print(f"{'gateways':>8} {'partitions':>10} {'all':>6} " + " ".join(f"{k:>6}" for k in KINDS))
    for gateways, partitions, per in rows:
        print(f"{gateways:>8} {partitions:>10} {per['all']:>6.2f} "
              + " ".join(f"{per[k]:>6.2f}" for k in KINDS))
    path = write_results("idle_requests", figures, quick=args.quick, out=args.out,
                         seconds=seconds, settle=settle, via=args.via)
    print(f"figures written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
