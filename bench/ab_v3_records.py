"""REST Proxy v3 one-record produce, this tree paired against another commit's.

Issue 29 declares the v3 record body once (``http.bodies.V3Record``, a msgspec Struct)
instead of hand-written checks; this measures whether the conversion costs the route
anything. Each pair starts a gateway from this tree and one from ``--base`` in turn
(``ab_produce.TreeGateway``: fresh local store, fsync on) and drives ``POST
/v3/clusters/{c}/topics/bench/records`` with one record per request (a BINARY key, a
STRING value of 100 bytes, one header), acks=all, over ``--connections`` keep-alive
connections, closed loop. The ratio is the median of the pairs' ratios (ours / base).
On a loaded machine those pairs scatter widely; ``--micro`` times just the route's
per-record work (``json.loads`` and ``v3_records._record``) of both trees in one process,
alternately, best of many rounds, which a shared machine disturbs far less.

    python bench/ab_v3_records.py --base HEAD --pairs 3 --seconds 5
    python bench/ab_v3_records.py --base 7102814 --micro
    python bench/ab_v3_records.py --quick      # both, small, against HEAD (CI)

Writes bench/results/ab_v3_records.json (DESIGN.md format): the paired ratio (records/s,
higher is better) and the micro ratio (seconds per record, base / ours: higher is
better), target 0.95 as for the other produce paths of issue 29.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.ab_produce import ROOT as TREE, TreeGateway, base_tree  # noqa: E402
from bench.common import write_results  # noqa: E402
from bench.http_load import http_closed_loop  # noqa: E402

TARGET = 0.95


def v3_requests(cluster: str, count: int = 64, value_bytes: int = 100) -> list[bytes]:
    """``count`` raw v3 one-record produce requests."""
    out = []
    for k in range(count):
        body = json.dumps({"key": {"type": "BINARY", "data": "a2V5"},
                           "value": {"type": "STRING", "data": f"{k:02d}" + "x" * (value_bytes - 2)},
                           "headers": [{"name": "h", "value": "dg=="}]}).encode()
        out.append(f"POST /v3/clusters/{cluster}/topics/bench/records HTTP/1.1\r\n"
                   f"Host: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return out


def one_side(tree: str, seconds: float, connections: int) -> float:
    """Records/s of the v3 one-record load against a gateway from ``tree``."""
    import urllib3

    folder = tempfile.mkdtemp(prefix="sparklog-bench-v3-")
    try:
        with TreeGateway(tree, folder) as gw:
            cid = json.loads(urllib3.request("GET", f"{gw.url}/v3/clusters").data)[
                "data"][0]["cluster_id"]
            reqs = v3_requests(cid)
            asyncio.run(http_closed_loop(gw.port, reqs, min(seconds, 1.0), connections, 1))
            got = asyncio.run(http_closed_loop(gw.port, reqs, seconds, connections, 1))
            if got.get("errors"):
                raise RuntimeError(f"{tree}: {got['errors']} requests refused")
            return got["msgs_per_s"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def micro(base: str, rounds: int = 40, number: int = 5000) -> tuple[float, float]:
    """(base, ours) best seconds per record of ``json.loads`` + ``v3_records._record`` on a
    one-record body, ``base`` being the commit whose ``v3_records.py`` is loaded beside
    this tree's (the modules it imports are this tree's)."""
    import importlib.util
    import subprocess
    import timeit

    from ingest_gateway.http import v3_records as ours

    source = subprocess.run(["git", "show", f"{base}:ingest_gateway/http/v3_records.py"],
                            cwd=TREE, check=True, capture_output=True, text=True).stdout
    path = os.path.join(tempfile.mkdtemp(prefix="sparklog-v3-micro-"), "base_v3_records.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("base_v3_records", path)
    theirs = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = theirs  # dataclasses look their module up
    spec.loader.exec_module(theirs)
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)  # loaded: the file is done
    body = json.dumps({"key": {"type": "BINARY", "data": "a2V5"},
                       "value": {"type": "STRING", "data": "x" * 100},
                       "headers": [{"name": "h", "value": "dg=="}]})
    best = {"base": float("inf"), "ours": float("inf")}
    for _ in range(rounds):
        for name, mod in (("base", theirs), ("ours", ours)):
            t = timeit.timeit(lambda: mod._record("record 0", json.loads(body), "t", 4),
                              number=number) / number
            best[name] = min(best[name], t)
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    return best["base"], best["ours"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", help="the commit to compare against")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--micro", action="store_true", help="the per-record work only")
    parser.add_argument("--quick", action="store_true",
                        help="one short pair and a short micro run against HEAD (CI)")
    parser.add_argument("--out", help="results file (default bench/results/ab_v3_records.json)")
    args = parser.parse_args(argv)
    if args.quick:
        args.base, args.pairs, args.seconds = "HEAD", 1, 0.5
    figures = []
    if args.micro or args.quick:
        theirs, mine = micro(args.base, rounds=4 if args.quick else 40,
                             number=500 if args.quick else 5000)
        print(f"v3 record check and encoding against {args.base}: ours {mine * 1e6:.2f} us, "
              f"base {theirs * 1e6:.2f} us per record, ours/base {mine / theirs:.3f}, "
              f"load {os.getloadavg()[0]:.2f}")
        figures.append({"name": "v3_record_check_us", "unit": "us/record",
                        "ours": round(mine * 1e6, 3), "baseline": round(theirs * 1e6, 3),
                        "baseline_source": f"the same work of commit {args.base}",
                        "ratio": round(theirs / mine, 3), "target": TARGET,
                        "load": round(os.getloadavg()[0], 2)})
    if not args.micro:
        figures.append(paired(args))
    path = write_results("ab_v3_records", figures, quick=args.quick, out=args.out,
                         base=args.base)
    print(f"wrote {path}")
    return 0


def paired(args: argparse.Namespace) -> dict:
    """The paired end-to-end figure (records/s, median of the pairs)."""
    base = base_tree(args.base)
    ratios, ours, theirs, loads = [], [], [], []
    for i in range(args.pairs):
        order = [(TREE, "ours"), (base, "base")]
        if i % 2:
            order.reverse()
        got = {label: one_side(tree, args.seconds, args.connections) for tree, label in order}
        ours.append(got["ours"])
        theirs.append(got["base"])
        ratios.append(got["ours"] / got["base"])
        loads.append(round(os.getloadavg()[0], 2))
        print(f"pair {i + 1}: ours {got['ours']:,.0f}/s base {got['base']:,.0f}/s "
              f"ratio {ratios[-1]:.3f} load {loads[-1]:.2f}", flush=True)
    print(f"v3 one-record produce against {args.base}: ours {statistics.median(ours):,.0f}/s, "
          f"base {statistics.median(theirs):,.0f}/s, ratio (median of pairs) "
          f"{statistics.median(ratios):.3f}")
    return {"name": "v3_one_record_produce", "unit": "records/s",
            "ours": round(statistics.median(ours)), "ours_best": round(max(ours)),
            "baseline": round(statistics.median(theirs)), "baseline_best": round(max(theirs)),
            "baseline_source": f"this benchmark on commit {args.base}",
            "ratio": round(statistics.median(ratios), 3), "target": TARGET, "loads": loads}


if __name__ == "__main__":
    sys.exit(main())
