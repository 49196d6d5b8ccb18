"""Wall time of ``sparklog sql`` against a bare PySpark session doing the same query.

What is measured, each a fresh process (as a user runs the command):

* **ours**: ``sparklog --store S sql "SELECT 1"`` and ``... "SELECT count(*) FROM t0"``
  on a store holding ``--topics`` topics (one is read; the others must cost nothing);
* **baseline**: ``python -c`` starting a local SparkSession with the same Delta jars
  and running ``SELECT 1``: what any Spark command pays before doing anything.

The target: ``sparklog sql "SELECT 1"`` within 1.25x of the bare session (the CLI's
own work, settings, the store, registering what the query names, printing, is small
next to starting a JVM). Runs interleaved, median and best of ``--repeat``.

``--quick`` (what the test suite runs, so the script does not rot) runs each case once,
on C1-only JVMs (``bench.common.QUICK_JVM``): it proves the commands work and measures
nothing. (Running the three at once saved no time on two busy cores: each is a JVM's
start, CPU-bound.)

Usage: ``python bench/sql_startup.py [--quick] [--repeat R] [--topics N]``.
Writes ``bench/results/sql_startup.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import machine, quick_jvms, write_results  # noqa: E402
from log_layout import open_log  # noqa: E402

TARGET = 1.25

BARE = """
import conf
from pipeline.spark import _cached_jars, packages
from pyspark.sql import SparkSession
s = conf.load().spark
spark = (SparkSession.builder.master("local[*]").config("spark.ui.enabled", "false")
         .config("spark.jars", _cached_jars(s, packages(s)))
         .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
         .config("spark.sql.catalog.spark_catalog",
                 "org.apache.spark.sql.delta.catalog.DeltaCatalog").getOrCreate())
spark.sql("SELECT 1").collect()
"""


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": ROOT, "SPARK_LOCAL_IP": "127.0.0.1"})
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {proc.stderr[-2000:]}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one run of each")
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--out", help="results file (default bench/results/sql_startup[.quick].json)")
    args = ap.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 5)
    if args.quick:
        quick_jvms()
    where = machine()
    cli = [sys.executable, "-m", "jobs.cli"]
    with tempfile.TemporaryDirectory(prefix="bench-sql-") as tmp:
        store = os.path.join(tmp, "store")
        log = open_log(store)
        for i in range(args.topics):
            log.create_topic(f"t{i}", {"partitions": 1})
        cases = {
            "bare_select_1": [sys.executable, "-c", BARE],
            "sql_select_1": [*cli, "--store", store, "sql", "SELECT 1"],
            "sql_count_one_topic": [*cli, "--store", store, "sql", "SELECT count(*) FROM t0"],
        }
        if not args.quick:  # quick: one run of each, a check that it works, not a figure
            timed(cases["bare_select_1"])  # the page cache warm for both sides
        runs: dict[str, list[float]] = {name: [] for name in cases}
        for r in range(repeat):
            names = list(cases)
            for name in names[r % len(names):] + names[:r % len(names)]:
                runs[name].append(timed(cases[name]))
    base = runs["bare_select_1"]
    figures = []
    for name in ("sql_select_1", "sql_count_one_topic"):
        ours = runs[name]
        figures.append({
            "name": name, "unit": "s", "ours": round(min(ours), 2),
            "ours_median": round(statistics.median(ours), 2),
            "baseline": round(min(base), 2), "baseline_median": round(statistics.median(base), 2),
            # lower is better here: the ratio is ours / baseline
            "ratio": round(min(ours) / min(base), 3),
            "ratio_median": round(statistics.median(ours) / statistics.median(base), 3),
            "target": TARGET if name == "sql_select_1" else None, "lower_is_better": True,
            "runs": len(ours), "topics_in_store": args.topics})
    for f in figures:
        ok = "" if f["target"] is None else (" met" if f["ratio"] <= f["target"] else " missed")
        print(f"{f['name']}: {f['ours_median']} s median ({f['ours']} best) vs bare Spark "
              f"{f['baseline_median']} s ({f['baseline']}), ratio {f['ratio']}"
              f"{'' if f['target'] is None else f' (target <= {TARGET}{ok})'}")
    write_results("sql_startup", figures, quick=args.quick, out=args.out,
                  machine_before_run=where, repeat=repeat, topics=args.topics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
