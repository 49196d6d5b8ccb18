"""Compaction throughput: the sparklog compaction Spark job vs a plain Spark SQL dedup.

Workload (the issue's): 10,000,000 keyed records over 100,000 keys, 5%
tombstones, in 8 partitions; 10-byte keys, 50-byte values, segments of
100,000 records as written through ``log_layout`` (plus a one-record active
segment per partition, which Kafka's rules never clean).

* **ours**: ``jobs.maintain.run(command="compact")`` as a Spark job (one task
  per partition: read segments, hash dedup in Arrow, write segments up to
  ``segment.bytes``, manifest commit), on ``local[2]``.
* **baseline (same run)**: the same rows as one Parquet dataset (topic,
  partition, offset, timestamp, key, value), de-duplicated by
  ``row_number() OVER (PARTITION BY partition, key ORDER BY offset DESC) = 1``
  in Spark SQL and written back as Parquet, in the same SparkSession.

Both sides start from files on the local disk and end with files on it; both
without fsync (Spark's Parquet writer does not fsync). Records/s = input
records / wall time. Target: ours >= 0.5 x the plain query.

Usage: ``python bench/compaction.py [--quick] [--records N] [--keys N]``;
writes ``bench/results/compaction.json``.
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

KEY_BYTES, VALUE_BYTES = 10, 50
PARTITIONS = 8
SEGMENT_RECORDS = 100_000
T0 = 1_763_700_000_000


def fixed_binary(data: np.ndarray, width: int, valid: np.ndarray | None = None) -> pa.Array:
    """A binary array over a (n, width) uint8 matrix, without Python objects per value."""
    n = data.shape[0]
    offsets = pa.py_buffer(np.arange(0, (n + 1) * width, width, dtype=np.int32))
    mask = None if valid is None else pa.array(valid).buffers()[1]
    return pa.Array.from_buffers(pa.binary(), n, [mask, offsets, pa.py_buffer(data.tobytes())],
                                 null_count=-1 if valid is not None else 0)


def make_partition(rng: np.random.Generator, n: int, keys: int) -> pa.Table:
    ids = rng.integers(0, keys, n)
    digits = np.zeros((n, KEY_BYTES), dtype=np.uint8)
    digits[:, :4] = np.frombuffer(b"key-", dtype=np.uint8)
    rest = ids.copy()
    for i in range(KEY_BYTES - 1, 3, -1):
        digits[:, i] = 48 + rest % 10
        rest //= 10
    values = rng.integers(97, 123, (n, VALUE_BYTES), dtype=np.uint8)
    alive = rng.random(n) >= 0.05  # 5% tombstones
    ts = T0 + np.arange(n, dtype=np.int64) // 100
    return pa.table({"key": fixed_binary(digits, KEY_BYTES),
                     "value": fixed_binary(values, VALUE_BYTES, alive),
                     "timestamp": pa.array(ts)})


def setup(workdir: str, records: int, keys: int) -> tuple[str, str, int]:
    """Write the log (through log_layout) and the same rows as Parquet; returns paths, bytes."""
    store = os.path.join(workdir, "log")
    log = open_log(store, fsync=False)
    log.create_topic("bench", {"partitions": PARTITIONS, "cleanup.policy": "compact",
                               "segment.bytes": 256 * 1024 * 1024})
    rng = np.random.default_rng(42)
    per = records // PARTITIONS
    parquet = os.path.join(workdir, "rows")
    os.makedirs(parquet)
    for p in range(PARTITIONS):
        table = make_partition(rng, per, keys)
        w = log.partition("bench", p).claim("bench")
        frames = []
        for start in range(0, per, SEGMENT_RECORDS):
            w.append(table.slice(start, SEGMENT_RECORDS), now_ms=T0)
        w.append(make_partition(rng, 1, keys), now_ms=T0)  # the active segment
        # the same rows, as Spark would hold them: one Parquet file per partition
        frames = log.partition("bench", p).read_table(0)
        frames = frames.select(["offset", "timestamp", "key", "value"]).append_column(
            "partition", pa.array(np.full(frames.num_rows, p, dtype=np.int32)))
        pq.write_table(frames, os.path.join(parquet, f"part-{p}.parquet"))
    size = sum(plog.snapshot().size_bytes for plog in log.partitions("bench"))
    return store, parquet, size


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def run_ours(spark, store: str) -> dict:
    from jobs.maintain import run

    log = open_log(store, fsync=False)
    start = time.perf_counter()
    summary = run(log, command="compact", now_ms=T0 + 10**9, spark=spark)
    elapsed = time.perf_counter() - start
    a = summary.by_action()["compact"]
    assert a["changed"] == PARTITIONS and not summary.errors, summary.errors
    return {"seconds": elapsed, "records_before": a["records_before"],
            "records_after": a["records_after"], "bytes_before": a["bytes_before"],
            "bytes_after": a["bytes_after"]}


def run_baseline(spark, parquet: str, out: str, records: int) -> dict:
    start = time.perf_counter()
    spark.read.parquet(parquet).createOrReplaceTempView("rows")
    spark.sql("""
        SELECT partition, offset, timestamp, key, value FROM (
          SELECT *, row_number() OVER (PARTITION BY partition, key ORDER BY offset DESC) AS rn
          FROM rows) WHERE rn = 1
    """).write.mode("overwrite").parquet(out)
    elapsed = time.perf_counter() - start
    after = spark.read.parquet(out).count()
    return {"seconds": elapsed, "records_before": records, "records_after": after,
            "bytes_before": dir_bytes(parquet), "bytes_after": dir_bytes(out)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run (CI): 80k records, 4k keys")
    parser.add_argument("--records", type=int)
    parser.add_argument("--keys", type=int)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--out", help="results file (default bench/results/compaction[.quick].json)")
    args = parser.parse_args(argv)
    # quick: a closed segment and the active one in each partition
    records = args.records or (80_000 if args.quick else 10_000_000)
    keys = args.keys or (4_000 if args.quick else 100_000)
    if args.quick:  # C1-only JVMs and no warm-up: a quick run proves the script works
        quick_jvms()

    from rich.console import Console
    from rich.table import Table

    from pipeline.spark import session

    console = Console(width=150)
    workdir = tempfile.mkdtemp(prefix="sparklog-bench-compaction-")
    try:
        console.print(f"writing {records:,} records over {keys:,} keys in {PARTITIONS} "
                      f"partitions to {workdir} ...")
        store, parquet, _ = setup(workdir, records, keys)
        shuffle = "2" if args.quick else "8"
        spark = session(master=args.master, extra={"spark.ui.showConsoleProgress": "false",
                                                   "spark.sql.shuffle.partitions": shuffle})
        spark.sparkContext.setLogLevel("ERROR")
        if not args.quick:
            # warm up: Python workers and the JIT of Spark's SQL engine are not measured
            spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
            spark.sparkContext.parallelize(range(4), 2).map(lambda x: x).collect()
        baseline = run_baseline(spark, parquet, os.path.join(workdir, "dedup"), records)
        ours = run_ours(spark, store)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    ours_rate = ours["records_before"] / ours["seconds"]
    base_rate = baseline["records_before"] / baseline["seconds"]
    figures = [
        {"name": f"compaction_{records}_records", "unit": "records/s", "ours": ours_rate,
         "baseline": base_rate, "ratio": ours_rate / base_rate, "target": 0.5},
        {"name": "bytes_after_over_before", "unit": "fraction",
         "ours": ours["bytes_after"] / ours["bytes_before"],
         "baseline": baseline["bytes_after"] / baseline["bytes_before"],
         "ratio": None, "target": None},
    ]
    t = Table(title=f"compaction: {records:,} records, {keys:,} keys, 5% tombstones, "
                    f"{PARTITIONS} partitions ({args.master})")
    for col in ("", "seconds", "records/s", "records before", "records after",
                "bytes before", "bytes after"):
        t.add_column(col, justify="left" if not col else "right")
    for name, r in (("sparklog compaction job", ours), ("Spark SQL window dedup (Parquet)",
                                                        baseline)):
        t.add_row(name, f"{r['seconds']:.1f}", f"{r['records_before'] / r['seconds']:,.0f}",
                  f"{r['records_before']:,}", f"{r['records_after']:,}",
                  f"{r['bytes_before']:,}", f"{r['bytes_after']:,}")
    console.print(t)
    console.print(f"ratio ours/baseline: {ours_rate / base_rate:.2f} (target >= 0.5)")

    write_results("compaction", figures, quick=args.quick, out=args.out, records=records,
                  keys=keys, partitions=PARTITIONS, master=args.master, ours=ours,
                  baseline=baseline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
