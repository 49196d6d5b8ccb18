"""Spark reads of a topic through ``format("sparklog")`` against ``spark.read.parquet``.

The same rows on both sides, in one run: N records (default 10,000,000) of
100-byte values in 8 partitions, written as sparklog segments through
``log_layout`` (segments of 250,000 records) and as Parquet files (one per
segment, Spark's default snappy compression, the source's columns: key,
value, topic, partition, offset, timestamp, timestampType). Then, on a local
SparkSession with as many cores as the machine has:

* ``count()``, ``groupBy(partition).count()``, ``sum(length(value))``: rows/s
  of each side (best of ``--repeat`` runs after a warm-up run). Parquet
  answers the first two from metadata or one narrow column; the Python Data
  Source API cannot prune columns, so sparklog reads every record whole. The
  target is judged on ``sum(length(value))``, which must read every value on
  both sides: sparklog >= 0.5 of Parquet.
* streaming the topic into Delta (``pipeline.tables.materialize``, one
  AvailableNow run) against a batch copy of the Parquet rows into Delta:
  rows/s (reported; no target).

Usage: ``python bench/spark_read.py [--quick] [--records N] [--repeat R]``.
Writes ``bench/results/spark_read.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.common import quick_jvms, write_results  # noqa: E402
from log_layout import open_log  # noqa: E402

VALUE_BYTES = 100
PARTITIONS = 8
SEGMENT_RECORDS = 250_000
TOPIC = "bench"


def _values(n: int, rng: np.random.Generator) -> pa.Array:
    """``n`` random 100-byte binary values, built from one buffer (no per-row Python)."""
    data = rng.integers(0, 256, n * VALUE_BYTES, dtype=np.uint8).tobytes()
    offsets = np.arange(n + 1, dtype=np.int32) * VALUE_BYTES
    return pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                        pa.py_buffer(data)])


def write_data(folder: str, records: int) -> tuple[str, str]:
    """The topic as sparklog segments and as Parquet files; returns (store, parquet dir)."""
    from pipeline.source import ARROW_SCHEMA, to_spark
    from pipeline.planning import Slice

    store, parquet_dir = os.path.join(folder, "store"), os.path.join(folder, "parquet")
    os.makedirs(parquet_dir)
    log = open_log(store, fsync=False)
    log.create_topic(TOPIC, {"partitions": PARTITIONS})
    rng = np.random.default_rng(7)
    per_partition = records // PARTITIONS
    now = 1_763_700_000_000
    for p in range(PARTITIONS):
        writer = log.partition(TOPIC, p).claim("bench")
        done = 0
        while done < per_partition:
            n = min(SEGMENT_RECORDS, per_partition - done)
            result = writer.append(pa.table({"value": _values(n, rng)}), now_ms=now + done)
            part = log.partition(TOPIC, p)
            info = part.snapshot().segments[-1]
            table = part.read_segment(info)
            rows = pa.Table.from_batches(
                [to_spark(b, Slice(TOPIC, p, info, info.base_offset, info.end_offset, 0),
                          include_headers=False) for b in table.to_batches()], ARROW_SCHEMA)
            pq.write_table(rows, os.path.join(parquet_dir, f"{p}-{result.base_offset:020d}.parquet"))
            done += n
    return store, parquet_dir


def timed(fn, repeat: int, warm_up: bool = True) -> tuple[float, object]:
    """(best seconds of ``repeat`` calls of ``fn``, its last answer), after a warm-up call
    unless ``warm_up`` is false (``--quick``: a run that measures nothing)."""
    if warm_up:
        fn()  # warm-up: Python workers started, files in the page cache
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 records, one run (CI)")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--master", default=f"local[{os.cpu_count() or 2}]")
    args = parser.parse_args()
    records = args.records or (20_000 if args.quick else 10_000_000)
    repeat = args.repeat or (1 if args.quick else 3)
    if args.quick:  # one run, no warm-ups, C1-only JVMs: it proves the script works
        quick_jvms()

    from pyspark.sql import functions as F

    from pipeline import tables
    from pipeline.spark import session

    folder = tempfile.mkdtemp(prefix="sparklog-bench-spark-")
    try:
        t0 = time.perf_counter()
        store, parquet_dir = write_data(folder, records)
        print(f"wrote {records:,} records twice in {time.perf_counter() - t0:.1f}s", flush=True)
        spark = session(master=args.master, app_name="bench-spark-read",
                        extra={"spark.sql.shuffle.partitions": "2" if args.quick else "8",
                               "spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        ours = spark.read.format("sparklog").option("store", store).option("subscribe", TOPIC).load()
        base = spark.read.parquet(parquet_dir)
        n = records // PARTITIONS * PARTITIONS
        queries = {
            "count": lambda df: df.count(),
            "groupBy_partition_count": lambda df: sorted(
                tuple(r) for r in df.groupBy("partition").count().collect()),
            "sum_length_value": lambda df: df.select(F.sum(F.length("value"))).first()[0],
        }
        figures = []
        for name, query in queries.items():
            t_ours, r_ours = timed(lambda: query(ours), repeat, warm_up=not args.quick)
            t_base, r_base = timed(lambda: query(base), repeat, warm_up=not args.quick)
            if r_ours != r_base:
                raise SystemExit(f"{name}: sparklog answered {r_ours}, Parquet {r_base}")
            figures.append({"name": name, "unit": "records/s", "ours": n / t_ours,
                            "baseline": n / t_base, "ratio": t_base / t_ours,
                            "target": 0.5 if name == "sum_length_value" else None})
            print(f"{name}: sparklog {t_ours:.2f}s, parquet {t_base:.2f}s", flush=True)

        # streaming into Delta vs a batch copy of the Parquet rows into Delta
        warehouse = os.path.join(folder, "warehouse")
        t0 = time.perf_counter()
        tables.materialize(spark, TOPIC, "bench_stream", store=store, warehouse=warehouse)
        t_stream = time.perf_counter() - t0
        assert spark.table("bench_stream").count() == n
        t0 = time.perf_counter()
        base.write.format("delta").save(os.path.join(warehouse, "bench_copy"))
        t_copy = time.perf_counter() - t0
        figures.append({"name": "stream_to_delta", "unit": "records/s", "ours": n / t_stream,
                        "baseline": n / t_copy, "ratio": t_copy / t_stream, "target": None})
        spark.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    print(f"\nSpark reads of {n:,} records of {VALUE_BYTES} B in {PARTITIONS} partitions "
          f"({args.master}; best of {repeat})")
    print(f"{'figure':<26}{'sparklog rec/s':>16}{'parquet rec/s':>16}{'ratio':>8}{'target':>8}")
    for f in figures:
        target = f"{f['target']:.2f}" if f["target"] is not None else "-"
        print(f"{f['name']:<26}{f['ours']:>16,.0f}{f['baseline']:>16,.0f}{f['ratio']:>8.2f}"
              f"{target:>8}")
    print("(stream_to_delta baseline: a batch copy of the Parquet rows into Delta)")
    out = write_results("spark_read", figures, quick=args.quick, records=n, master=args.master)
    print(f"wrote {out}")
    missed = [f["name"] for f in figures if f["target"] is not None and f["ratio"] < f["target"]]
    if missed:
        print(f"below target: {', '.join(missed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
