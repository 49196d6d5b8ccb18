"""What transactions cost: transactional produce against idempotent produce, and Spark
streaming writes into a topic (exactly once) against writing the same rows to Parquet.

* **transactional produce**: ``Producer(transactional_id=...)`` sending N records of
  100 bytes in transactions of 100 and of 10,000 records (``begin_transaction``,
  ``send`` each, ``commit_transaction``), through a gateway subprocess (fsync on,
  4 partitions); baseline: the idempotent ``Producer`` sending the same N records in the
  same run (target: ratio >= 0.8 at 10,000 records per transaction, the issue's).
  Each case runs ``--repeat`` times, alternating; best and median, ratio of medians.
* **Spark streaming write**: a batch of M rows (key, value of 100 bytes) written by
  ``writeStream.format("sparklog")`` with ``trigger(availableNow=True)`` from a Parquet
  file source, each micro-batch one transaction; baseline: the same stream written to
  Parquet (``format("parquet")``), the same trigger (target: ratio >= 0.5). Both sinks
  are warmed up first by one small untimed batch write each, in the same session.

Usage: ``python bench/transactions.py [--quick] [--records N] [--rows M] [--repeat R]``.
Writes ``bench/results/transactions.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import machine, quick_jvms, write_results  # noqa: E402
from ingest_gateway.client import Producer  # noqa: E402
from jobs.gateway_process import GatewayProcess  # noqa: E402
from log_layout import open_log  # noqa: E402

VALUE = b"v" * 100
PARTITIONS = 4


def produce(gw_url: str, topic: str, records: int, per_txn: int | None) -> float:
    """Records/s of one producer: transactions of ``per_txn`` records, or idempotent."""
    kw = {"transactional_id": f"bench-{uuid.uuid4().hex[:8]}"} if per_txn else {}
    producer = Producer(gw_url, linger_ms=5, acks="all", **kw)
    started = time.perf_counter()
    if per_txn:
        producer.init_transactions()
        for first in range(0, records, per_txn):
            producer.begin_transaction()
            for i in range(first, min(first + per_txn, records)):
                producer.send(topic, VALUE, key=str(i % 1000).encode())
            producer.commit_transaction()
    else:
        for i in range(records):
            producer.send(topic, VALUE, key=str(i % 1000).encode())
        producer.flush()
    seconds = time.perf_counter() - started
    producer.close()
    return records / seconds


def _summary(name: str, unit: str, ours: list[float], base: list[float], target, **extra):
    return {"name": name, "unit": unit, "ours": round(max(ours)),
            "ours_median": round(statistics.median(ours)), "baseline": round(max(base)),
            "baseline_median": round(statistics.median(base)),
            "ratio": round(statistics.median(ours) / statistics.median(base), 3),
            "target": target, "runs": len(ours), **extra}


def producer_figures(root: str, records: int, repeat: int) -> list[dict]:
    store = os.path.join(root, "store")
    log = open_log(store)
    runs: dict[str, list[float]] = {"idempotent": [], "txn100": [], "txn10000": []}
    with GatewayProcess(store, settings={"store.fsync": "true"}) as gw:
        for r in range(repeat):
            cases = list(runs) if r % 2 == 0 else list(runs)[::-1]
            for case in cases:
                topic = f"t-{uuid.uuid4().hex[:8]}"
                log.create_topic(topic, {"partitions": PARTITIONS})
                per_txn = {"idempotent": None, "txn100": 100, "txn10000": 10_000}[case]
                # rates, so the slow case may send fewer (a tenth: 2,000 transactions)
                n = records // 10 if per_txn == 100 else records
                runs[case].append(produce(gw.url, topic, n, per_txn))
                print(f"round {r + 1} {case}: {runs[case][-1]:,.0f} records/s", flush=True)
    common = dict(records=records, value_bytes=len(VALUE), linger_ms=5, acks="all",
                  partitions=PARTITIONS)
    return [_summary("transactional_produce_10000_per_txn", "msgs/s", runs["txn10000"],
                     runs["idempotent"], 0.8, **common),
            _summary("transactional_produce_100_per_txn", "msgs/s", runs["txn100"],
                     runs["idempotent"], None, **common)]


def spark_figures(root: str, rows: int, repeat: int) -> list[dict]:
    from pipeline.spark import session

    spark = session(master="local[2]", extra={"spark.sql.shuffle.partitions": "4"},
                    source=True)
    source = os.path.join(root, "input")
    spark.range(rows).selectExpr("CAST(id AS STRING) AS key",
                                 f"repeat('v', {len(VALUE)}) AS value") \
        .repartition(4).write.parquet(source)
    schema = spark.read.parquet(source).schema
    store = os.path.join(root, "spark-store")
    log = open_log(store)
    ours, base = [], []
    try:
        # a warm-up of each sink, not timed: the first query of a session pays the JVM's
        # and Spark's Python data source machinery's start (~10 s of gaps between
        # planning, tasks and commit, profiled), which is no sink's cost
        warm = spark.range(1000).selectExpr("CAST(id AS STRING) AS key", "'v' AS value")
        topic = f"warm-{uuid.uuid4().hex[:8]}"
        log.create_topic(topic, {"partitions": PARTITIONS})
        warm.write.format("sparklog").option("store", store).option("topic", topic) \
            .mode("append").save()
        warm.write.parquet(os.path.join(root, "warm-parquet"))
        for r in range(repeat):
            for case in (("sparklog", "parquet") if r % 2 == 0 else ("parquet", "sparklog")):
                out = os.path.join(root, f"{case}-{r}")
                stream = spark.readStream.schema(schema).parquet(source).writeStream \
                    .option("checkpointLocation", out + "-ck").trigger(availableNow=True)
                if case == "sparklog":
                    topic = f"s-{uuid.uuid4().hex[:8]}"
                    log.create_topic(topic, {"partitions": PARTITIONS})
                    stream = stream.format("sparklog").option("store", store) \
                        .option("topic", topic)
                else:
                    stream = stream.format("parquet").option("path", out)
                started = time.perf_counter()
                stream.start().awaitTermination()
                rate = rows / (time.perf_counter() - started)
                (ours if case == "sparklog" else base).append(rate)
                print(f"round {r + 1} {case}: {rate:,.0f} rows/s", flush=True)
    finally:
        spark.stop()
    return [_summary("spark_streaming_write", "rows/s", ours, base, 0.5, rows=rows,
                     value_bytes=len(VALUE), partitions=PARTITIONS)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small and fast (CI)")
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.quick:
        # one transaction of 2,000 records, two of 100, one Spark batch of 2,000 rows (the
        # warm-ups kept: they are the batch write's only run), C1-only JVMs
        args.records, args.rows, args.repeat = 2_000, 2_000, 1
        quick_jvms()
    load_before = machine()
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-txn-") as root:
        figures = producer_figures(root, args.records, args.repeat)
        figures += spark_figures(root, args.rows, args.repeat)
    path = write_results("transactions", figures, quick=args.quick, repeat=args.repeat,
                         machine_before_run=load_before)
    for f in figures:
        print(f"{f['name']}: {f['ours_median']:,} vs {f['baseline_median']:,} {f['unit']} "
              f"(ratio of medians {f['ratio']}, target {f['target']})")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
