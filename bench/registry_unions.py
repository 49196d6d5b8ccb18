"""What Avro unions of several types cost the ``sparklog`` source's registry decoding
(``pipeline.registry_decode``, no Spark): records with two such unions (read as Spark's
``member0..N`` structs through ``pipeline.registry_unions``' rewritten schemas) against
the same records with those two fields as plain nullable types, in one run, one process:

* **same**: each schema read as the reader's own version (no resolution);
* **resolved**: written by version 1, read as version 2 (a field added; for the unions
  a branch added and int promoted to long).

Usage: ``python bench/registry_unions.py [--quick] [--records N] [--rounds R]``; prints
best and median records/s of R rounds. Writes ``bench/results/registry_unions.json``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import struct
import sys
import tempfile
import time

import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import machine, write_results  # noqa: E402
from log_layout import open_log  # noqa: E402
from pipeline.registry_decode import FAILFAST, decode_batch, plan_column  # noqa: E402


def record(name: str, *fields) -> dict:
    return {"type": "record", "name": name, "namespace": "bench", "fields": list(fields)}


def register(log, subject: str, schema: dict) -> int:
    """``schema`` registered under ``subject`` in the store's registry; its id."""
    from ingest_gateway.server.schema_registry import SchemaRegistry
    from log_layout.schema_registry import SchemaStore

    return SchemaRegistry(SchemaStore(log.store)).register(
        subject, {"schema": json.dumps(schema)})["id"]


def avro(schema: dict, schema_id: int, value) -> bytes:
    """``value`` in Confluent's wire format: magic byte, id, Avro binary (fastavro)."""
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return b"\0" + struct.pack(">I", schema_id) + out.getvalue()

COMMON = [{"name": "url", "type": "string"}, {"name": "ms", "type": "long"},
          {"name": "user", "type": "int"}, {"name": "ok", "type": "boolean"}]
UNION_V1 = record("Click", *COMMON, {"name": "a", "type": ["null", "int", "string"]},
                  {"name": "b", "type": ["null", "double", "string"]})
UNION_V2 = record("Click", *COMMON, {"name": "a", "type": ["null", "long", "string", "boolean"]},
                  {"name": "b", "type": ["null", "double", "string"]},
                  {"name": "c", "type": ["null", "string"], "default": None})
PLAIN_V1 = record("Click", *COMMON, {"name": "a", "type": ["null", "int"]},
                  {"name": "b", "type": ["null", "double"]})
PLAIN_V2 = record("Click", *COMMON, {"name": "a", "type": ["null", "long"]},
                  {"name": "b", "type": ["null", "double"]},
                  {"name": "c", "type": ["null", "string"], "default": None})


def _values(n: int, union: bool) -> list[dict]:
    return [{"url": f"/p/{i % 100}", "ms": i * 7, "user": i % 1000, "ok": i % 2 == 0,
             "a": (f"s{i}" if union and i % 2 else i), "b": (f"t{i}" if union and i % 3 == 0
                                                             else i / 3)}
            for i in range(n)]


def _rates(log, description, subject: str, v1: dict, v2: dict, union: bool, n: int,
           rounds: int) -> dict[str, list[float]]:
    id1 = register(log, subject, v1)
    register(log, subject, v2)
    raws = [avro(v1, id1, v) for v in _values(n, union)]
    batch = pa.RecordBatch.from_pydict({"value": pa.array(raws, pa.binary()),
                                        "offset": pa.array(range(n), pa.int64())})
    out = {}
    for case, version in (("same", 1), ("resolved", 2)):
        plan = plan_column(description, "value", "avro", subject, version, FAILFAST)
        decode_batch(batch, (plan,), description, "t", 0)  # warm: schemas parsed once
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            decode_batch(batch, (plan,), description, "t", 0)
            times.append(time.perf_counter() - start)
        out[case] = [n / t for t in times]
    return out


def figures(n: int, rounds: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        log = open_log(tmp)
        description = {"url": log.store.describe()["url"], "storage_options": None}
        unions = _rates(log, description, "u-value", UNION_V1, UNION_V2, True, n, rounds)
        plain = _rates(log, description, "p-value", PLAIN_V1, PLAIN_V2, False, n, rounds)
    out = []
    for case in ("same", "resolved"):
        ours, base = unions[case], plain[case]
        out.append({"name": f"decode_{case}", "unit": "records/s", "ours": round(max(ours)),
                    "baseline": round(max(base)),
                    "baseline_name": "the same records, the two fields plain nullable types",
                    "ratio": round(max(ours) / max(base), 3), "target": None,
                    "ours_median": round(statistics.median(ours)),
                    "baseline_median": round(statistics.median(base)),
                    "ratio_median": round(statistics.median(ours) / statistics.median(base), 3),
                    "records": n, "rounds": rounds})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small and fast (CI)")
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds = 2000, 2
    load_before = machine()
    figs = figures(args.records, args.rounds)
    path = write_results("registry_unions", figs, quick=args.quick,
                         machine_before_run=load_before)
    print(f"{'figure':16} {'unions best/median':>20} {'plain best/median':>20} "
          f"{'ratio best/median':>18}")
    for f in figs:
        print(f"{f['name']:16} {f['ours']:>10,}/{f['ours_median']:<9,} "
              f"{f['baseline']:>10,}/{f['baseline_median']:<9,} "
              f"{f['ratio']:>8}/{f['ratio_median']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
