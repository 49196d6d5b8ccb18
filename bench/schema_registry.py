"""Avro records through the Schema Registry path into a typed Delta table, against the
JSON path of before the registry, in one run.

The same N records (default 1,000,000) of a 9-field click event (long, int, double,
boolean, four strings, one of them a timestamp-millis long) are written twice, as
sparklog segments straight through ``log_layout`` (no gateway: what is measured is the
table side) in 4 partitions of 250,000-record segments:

* ``avro``: Confluent's wire format (magic byte 0, the schema id, Avro's binary
  encoding by fastavro), the schema registered as ``bench-avro-value`` in the store's
  own registry (``server.schema_registry.SchemaRegistry``, what every gateway serves);
* ``json``: the same records as JSON objects (UTF-8).

Then on one local SparkSession, ``pipeline.tables.materialize`` (one AvailableNow run,
as ``sparklog materialize --once``) turns each topic into a typed Delta table:
``value_format="avro"`` (the source decodes by the registry, ``pipeline.registry_decode``)
against ``value_format="json"`` with the same columns given as a DDL schema (so the
JSON side pays no inference scan: ``from_json`` only). Each table is checked (row count
and the sum of one int field equal on both sides). Figures: records/s of each path, best
and median of ``--repeat`` runs (each into a new table; the order of the two
alternates, the first query of a session also starting Spark's Python workers), and
avro/json. With ``--quick`` (5,000 records in one partition, one run) the figures are mostly Spark's
fixed costs (a session, two streaming queries): it only keeps the script running.

Usage: ``python bench/schema_registry.py [--quick] [--records N] [--repeat R]``.
Writes ``bench/results/schema_registry.json`` (``.quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pyarrow as pa  # noqa: E402

from bench.common import quick_jvms, write_results  # noqa: E402
from log_layout import open_log  # noqa: E402

PARTITIONS = 4
SEGMENT_RECORDS = 250_000
AVRO_TOPIC, JSON_TOPIC = "bench-avro", "bench-json"
SCHEMA = {"type": "record", "name": "Click", "namespace": "com.example.bench", "fields": [
    {"name": "event_id", "type": "long"},
    {"name": "user_id", "type": "string"},
    {"name": "page", "type": "string"},
    {"name": "referrer", "type": "string"},
    {"name": "country", "type": "string"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "duration_ms", "type": "int"},
    {"name": "amount", "type": "double"},
    {"name": "mobile", "type": "boolean"}]}
#: the JSON side's columns, as a user gives them to ``--schema``
JSON_DDL = ("event_id BIGINT, user_id STRING, page STRING, referrer STRING, country STRING, "
            "at BIGINT, duration_ms INT, amount DOUBLE, mobile BOOLEAN")
PAGES = ["/", "/search", "/cart", "/checkout", "/product/1234", "/product/98765", "/help"]
COUNTRIES = ["DE", "FR", "US", "GB", "IN", "BR", "JP", "NL"]
T0 = 1_764_000_000_000


def record(i: int) -> dict:
    """The ``i``-th click: deterministic, varied lengths."""
    return {"event_id": i, "user_id": f"user-{(i * 7919) % 100_003:06d}",
            "page": PAGES[i % len(PAGES)],
            "referrer": "https://www.example.com/campaign/" + "x" * (i % 23),
            "country": COUNTRIES[(i // 3) % len(COUNTRIES)], "at": T0 + i * 3,
            "duration_ms": (i * 37) % 60_000, "amount": (i % 10_000) / 100.0,
            "mobile": i % 3 == 0}


def write_topics(store: str, records: int, partitions: int) -> int:
    """Both topics into ``store`` (the schema registered first); returns the schema id."""
    import fastavro

    from ingest_gateway.server.schema_registry import SchemaRegistry
    from log_layout.schema_registry import SchemaStore

    log = open_log(store, fsync=False)
    registry = SchemaRegistry(SchemaStore(log.store))
    schema_id = registry.register(f"{AVRO_TOPIC}-value",
                                  {"schema": json.dumps(SCHEMA)})["id"]
    parsed = fastavro.parse_schema(SCHEMA)
    header = struct.pack(">bI", 0, schema_id)
    for topic in (AVRO_TOPIC, JSON_TOPIC):
        log.create_topic(topic, {"partitions": partitions})
    per_partition = records // partitions
    for p in range(partitions):
        writers = {t: log.partition(t, p).claim("bench") for t in (AVRO_TOPIC, JSON_TOPIC)}
        done = 0
        while done < per_partition:
            n = min(SEGMENT_RECORDS, per_partition - done)
            recs = [record(p * per_partition + done + j) for j in range(n)]
            avro = []
            for r in recs:
                buf = io.BytesIO()
                buf.write(header)
                fastavro.schemaless_writer(buf, parsed, r)
                avro.append(buf.getvalue())
            js = [json.dumps(r, separators=(",", ":")).encode() for r in recs]
            writers[AVRO_TOPIC].append(pa.table({"value": pa.array(avro, pa.binary())}),
                                       now_ms=T0 + done)
            writers[JSON_TOPIC].append(pa.table({"value": pa.array(js, pa.binary())}),
                                       now_ms=T0 + done)
            done += n
    return schema_id


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5,000 records, one run (CI)")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--master", default=f"local[{os.cpu_count() or 2}]")
    args = parser.parse_args()
    records = args.records or (5_000 if args.quick else 1_000_000)
    repeat = args.repeat or (1 if args.quick else 3)
    if args.quick:
        quick_jvms()

    from pyspark.sql import functions as F

    from pipeline import tables
    from pipeline.spark import session

    folder = tempfile.mkdtemp(prefix="sparklog-bench-registry-")
    try:
        t0 = time.perf_counter()
        store = os.path.join(folder, "store")
        partitions = 1 if args.quick else PARTITIONS  # quick: the fewest tasks to start
        schema_id = write_topics(store, records, partitions)
        n = records // partitions * partitions
        print(f"wrote {n:,} records as Avro (schema id {schema_id}) and as JSON in "
              f"{time.perf_counter() - t0:.1f}s", flush=True)
        spark = session(master=args.master, app_name="bench-schema-registry",
                        extra={"spark.sql.shuffle.partitions": "1" if args.quick else "4",
                               "spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        warehouse = os.path.join(folder, "warehouse")
        times: dict[str, list[float]] = {"avro": [], "json": []}
        sums: dict[str, int] = {}
        for run in range(repeat):
            order = [("avro", AVRO_TOPIC), ("json", JSON_TOPIC)]
            # alternate which goes first: the first query of a session also starts its
            # Python workers and warms the JVM
            for fmt, topic in order if run % 2 == 0 else order[::-1]:
                table = f"bench_{fmt}_{run}"
                schema = JSON_DDL if fmt == "json" else None
                t0 = time.perf_counter()
                tables.materialize(spark, topic, table, store=store, warehouse=warehouse,
                                   value_format=fmt, schema=schema)
                times[fmt].append(time.perf_counter() - t0)
                df = spark.table(table)
                count, total = df.select(F.count("*"), F.sum("duration_ms")).first()
                if count != n:
                    raise SystemExit(f"{table}: {count} rows, not {n}")
                if sums.setdefault(fmt, total) != total or sums.get("avro", total) != total:
                    raise SystemExit(f"{table}: sum(duration_ms) {total}, avro's {sums}")
                print(f"run {run}: {fmt} {times[fmt][-1]:.2f}s "
                      f"({n / times[fmt][-1]:,.0f} records/s)", flush=True)
        spark.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    figures = []
    for stat, pick in (("best", min), ("median", statistics.median)):
        avro, js = n / pick(times["avro"]), n / pick(times["json"])
        figures.append({"name": f"materialize_records_per_s_{stat}", "unit": "records/s",
                        "ours": avro, "baseline": js, "ratio": avro / js, "target": None})
    print(f"\n{n:,} 9-field records materialized into Delta ({args.master}, {repeat} runs)")
    print(f"{'figure':<38}{'avro rec/s':>14}{'json rec/s':>14}{'avro/json':>11}")
    for f in figures:
        print(f"{f['name']:<38}{f['ours']:>14,.0f}{f['baseline']:>14,.0f}{f['ratio']:>11.2f}")
    out = write_results("schema_registry", figures, quick=args.quick, records=n,
                        master=args.master, repeat=repeat,
                        seconds={k: [round(t, 2) for t in v] for k, v in times.items()},
                        baseline="the same records as JSON, materialize value_format=json "
                                 "with the schema given (no inference)")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
