"""The produce paths of this tree paired against another commit's, on the same machine.

A refactor of the gateway's core (issue 29: one core, two protocol adapters) must not
slow the hot paths. For each pair, a gateway from this tree and one from ``--base``
(unpacked from git into ``.cache/ab/<commit>``, the compiled record codec copied in) are
started in turn on a fresh local store (fsync on, as shipped) with a Kafka listener, and
each serves the same four loads, the order alternating between pairs:

- ``rest_batch1``: REST Proxy v2 JSON, one record per request, 64 keep-alive connections;
- ``rest_batch50``: the same, 50 records per request;
- ``producer_send``: the Python ``Producer``'s ``send()`` per record, each side with its
  own tree's client (the same load loop, this tree's ``bench.produce.run_send``): the
  client is half of what this figure measures;
- ``kafka_produce``: confluent-kafka, idempotent, acks=all, linger 5 ms.

Every load is acks=all on 100-byte values. A figure's ratio is the median of the pairs'
ratios (this tree / base, higher is better), with the quartiles; target 0.95.

    python bench/ab_produce.py --base 757aa14 --pairs 5   # about 10 minutes
    python bench/ab_produce.py --quick                    # one short pair against HEAD (CI:
                                                          # a clone may lack older commits)

Writes bench/results/ab_produce.json (DESIGN.md format).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import write_results  # noqa: E402
from bench.kafka_protocol import produce as kafka_produce  # noqa: E402
from bench.produce import run_rest  # noqa: E402
from jobs.gateway_process import free_port, wait_for  # noqa: E402
from log_layout import open_log  # noqa: E402

#: the commit before issue 29's changes to the gateway's core
DEFAULT_BASE = "757aa14"
CASES = ("rest_batch1", "rest_batch50", "producer_send", "kafka_produce")
TARGET = 0.95
PARTITIONS = 4
CONNECTIONS = 64


def base_tree(commit: str) -> str:
    """``commit``'s files under .cache/ab/<full sha>, with this tree's compiled record
    codec (the C source must be the same: checked); raises CalledProcessError for an
    unknown commit, RuntimeError when the codec's source differs."""
    sha = subprocess.run(["git", "rev-parse", commit], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.strip()
    tree = os.path.join(ROOT, ".cache", "ab", sha)
    if not os.path.isdir(tree):
        os.makedirs(tree + ".tmp", exist_ok=True)
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree + ".tmp"], input=archive, check=True)
        os.rename(tree + ".tmp", tree)
    codec = "ingest_gateway/kafka/_records_c.c"
    if subprocess.run(["git", "diff", "--quiet", sha, "--", codec], cwd=ROOT).returncode:
        raise RuntimeError(f"{codec} differs at {sha}: its compiled codec is not this one")
    kafka_dir = os.path.join(ROOT, "ingest_gateway", "kafka")
    for name in os.listdir(kafka_dir):
        if name.startswith("_records_c") and name.endswith(".so"):
            shutil.copy(os.path.join(kafka_dir, name),
                        os.path.join(tree, "ingest_gateway", "kafka", name))
    return tree


class TreeGateway:
    """``sparklog gateway`` from the source tree ``tree`` on a fresh local store."""

    def __init__(self, tree: str, folder: str):
        self.tree, self.folder = tree, folder
        self.port, self.kafka_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.bootstrap = f"127.0.0.1:{self.kafka_port}"

    def __enter__(self) -> "TreeGateway":
        import urllib3

        open_log(self.folder).create_topic("bench", {"partitions": PARTITIONS})
        cmd = [sys.executable, "-m", "jobs.cli", "--store", self.folder,
               "--set", "store.fsync=true",
               "--set", f"gateway.kafka.listeners=PLAINTEXT://127.0.0.1:{self.kafka_port}",
               "gateway", "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, cwd=self.tree, env={**os.environ,
                                                              "PYTHONPATH": self.tree},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        http = urllib3.PoolManager(retries=False, timeout=2)

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the gateway from {self.tree} exited")
            try:
                return http.request("GET", f"{self.url}/healthz").status == 200
            except urllib3.exceptions.HTTPError:
                return False
        wait_for(healthy, timeout=60, what=f"the gateway from {self.tree}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(60)


#: run_send of this tree's bench/produce.py with ``tree``'s client: the tree's client
#: modules are imported first, so bench.produce's own imports find them loaded
SEND_IN_TREE = """
import importlib.util, json, sys
sys.path.insert(0, {tree!r})
import ingest_gateway.client
assert ingest_gateway.client.__file__.startswith({tree!r}), ingest_gateway.client.__file__
spec = importlib.util.spec_from_file_location("ab_produce_load", {load!r})
load = importlib.util.module_from_spec(spec)
spec.loader.exec_module(load)
assert load.Producer is ingest_gateway.client.Producer
print(json.dumps(load.run_send({url!r}, "bench", "all", {seconds!r})))
"""


def run_send_in(tree: str, url: str, seconds: float) -> dict:
    """``bench.produce.run_send`` against ``url`` in a child process whose client is
    ``tree``'s; raises CalledProcessError if the child fails."""
    code = SEND_IN_TREE.format(tree=tree, url=url, seconds=seconds,
                               load=os.path.join(ROOT, "bench", "produce.py"))
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, check=True, text=True,
                         stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": tree}).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_case(name: str, gw: TreeGateway, seconds: float, kafka_records: int) -> float:
    """msgs/s of one load against ``gw`` (``send()`` with the client of ``gw``'s tree)."""
    if name == "rest_batch1":
        return run_rest(gw.port, "bench", 1, "all", seconds, CONNECTIONS)["msgs_per_s"]
    if name == "rest_batch50":
        return run_rest(gw.port, "bench", 50, "all", seconds, CONNECTIONS)["msgs_per_s"]
    if name == "producer_send":
        return run_send_in(gw.tree, gw.url, seconds)["msgs_per_s"]
    return kafka_produce(gw.bootstrap, "bench", kafka_records)["msgs_per_s"]


def one_side(tree: str, seconds: float, kafka_records: int) -> dict[str, float]:
    folder = tempfile.mkdtemp(prefix="sparklog-bench-ab-")
    try:
        with TreeGateway(tree, folder) as gw:
            run_case("rest_batch1", gw, min(seconds, 1.0), kafka_records)  # warm up
            return {name: run_case(name, gw, seconds, kafka_records) for name in CASES}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help=f"the commit to compare against (default {DEFAULT_BASE}; "
                        "--quick: HEAD)")
    parser.add_argument("--pairs", type=int, default=5, help="interleaved pairs of runs")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of a load")
    parser.add_argument("--quick", action="store_true", help="one short pair (CI)")
    parser.add_argument("--out", help="results file (default bench/results/ab_produce.json)")
    args = parser.parse_args(argv)
    pairs, seconds = (1, 0.5) if args.quick else (args.pairs, args.seconds)
    kafka_records = 5_000 if args.quick else 300_000
    args.base = args.base or ("HEAD" if args.quick else DEFAULT_BASE)
    base = base_tree(args.base)
    runs: list[tuple[dict[str, float], dict[str, float], float]] = []
    for i in range(pairs):
        order = [(ROOT, "ours"), (base, "base")]
        if i % 2:
            order.reverse()
        got = {label: one_side(tree, seconds, kafka_records) for tree, label in order}
        runs.append((got["ours"], got["base"], round(os.getloadavg()[0], 2)))
        print(f"pair {i + 1}/{pairs}, load {runs[-1][2]}: " + ", ".join(
            f"{c} {got['ours'][c] / got['base'][c]:.2f}" for c in CASES), flush=True)

    print(f"\nproduce, this tree against {args.base}: {pairs} interleaved pairs, acks=all, "
          f"{os.cpu_count()} cores shared by gateway and load\n")
    header = f"{'case':<16}{'ours (best)':>22}{'base (best)':>22}{'ratio':>8}{'quartiles':>14}"
    print(header)
    print("-" * len(header))
    figures = []
    for c in CASES:
        ours, theirs = [r[0][c] for r in runs], [r[1][c] for r in runs]
        ratios = sorted(o / t for o, t in zip(ours, theirs))
        q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        ratio = statistics.median(ratios)
        print(f"{c:<16}{statistics.median(ours):>12,.0f} ({max(ours):>7,.0f})"
              f"{statistics.median(theirs):>12,.0f} ({max(theirs):>7,.0f})"
              f"{ratio:>8.2f}{q[0]:>7.2f}-{q[2]:.2f}")
        figures.append({"name": c, "unit": "msgs/s", "ours": round(statistics.median(ours)),
                        "ours_best": round(max(ours)),
                        "baseline": round(statistics.median(theirs)),
                        "baseline_best": round(max(theirs)),
                        "baseline_source": f"this benchmark on commit {args.base}",
                        "ratio": round(ratio, 3), "ratio_quartiles": [round(q[0], 3),
                                                                      round(q[2], 3)],
                        "target": TARGET, "loads": [r[2] for r in runs]})
    path = write_results("ab_produce", figures, quick=args.quick, out=args.out,
                         base=args.base, pairs=pairs, seconds=seconds)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
