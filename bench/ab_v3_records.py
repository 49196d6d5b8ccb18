"""REST Proxy v3 one-record produce, this tree paired against another commit's.

Issue 29 declares the v3 record body once (``http.bodies.V3Record``, a msgspec Struct)
instead of hand-written checks; this measures whether the conversion costs the route
anything. Each pair starts a gateway from this tree and one from ``--base`` in turn
(``ab_produce.TreeGateway``: fresh local store, fsync on) and drives ``POST
/v3/clusters/{c}/topics/bench/records`` with one record per request (a BINARY key, a
STRING value of 100 bytes, one header), acks=all, over ``--connections`` keep-alive
connections, closed loop. The ratio is the median of the pairs' ratios (ours / base).

    python bench/ab_v3_records.py --base HEAD --pairs 3 --seconds 5
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
from bench.http_load import http_closed_loop  # noqa: E402


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", help="the commit to compare against")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args(argv)
    base = base_tree(args.base)
    ratios, ours, theirs = [], [], []
    for i in range(args.pairs):
        order = [(TREE, "ours"), (base, "base")]
        if i % 2:
            order.reverse()
        got = {label: one_side(tree, args.seconds, args.connections) for tree, label in order}
        ours.append(got["ours"])
        theirs.append(got["base"])
        ratios.append(got["ours"] / got["base"])
        print(f"pair {i + 1}: ours {got['ours']:,.0f}/s base {got['base']:,.0f}/s "
              f"ratio {ratios[-1]:.3f} load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"v3 one-record produce against {args.base}: ours {statistics.median(ours):,.0f}/s, "
          f"base {statistics.median(theirs):,.0f}/s, ratio (median of pairs) "
          f"{statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
