"""What converting Kafka record batches costs the Kafka listener, per codec.

* **decode**: ``ingest_gateway.kafka.records.decode_batches`` of one RecordBatch v2 of N
  records (16-byte keys, 100 random value bytes: incompressible, the worst case for a
  codec) into the produce schema's Arrow columns (CRC checked, decompressed; the
  records through ``records_columns``' compiled codec when it is built);
  baseline: aiokafka's compiled reader iterating the same batch into Python records
  (what a Python Kafka client does with it, no columns built).
* **encode**: ``encode_batch`` of the same records from an Arrow segment table (a Fetch
  answer); baseline: aiokafka's compiled builder appending them one by one.

Best of ``--rounds`` per figure (a micro-benchmark: no process boundary), records/s.

Usage: ``python bench/kafka_records.py [--quick] [--records N] [--rounds R]``.
Writes ``bench/results/kafka_records.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import machine, write_results  # noqa: E402
from ingest_gateway.kafka.records import CODECS, decode_batches, encode_batch  # noqa: E402
from log_layout.segment_schema import HEADER_TYPE, SCHEMA  # noqa: E402

MB = 1 << 20
_CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
TS_US = 1_700_000_000_000_000


def segment_table(n: int) -> pa.Table:
    """N records as a segment holds them (offsets 0..N-1)."""
    blob = np.random.default_rng(0).bytes(100 * n)
    return pa.Table.from_arrays([
        pa.array(np.arange(n), pa.int64()),
        pa.array(np.full(n, TS_US), pa.int64()).cast(SCHEMA.field(1).type),
        pa.array([b"key-%012d" % i for i in range(n)], pa.binary()),
        pa.array([blob[i * 100:(i + 1) * 100] for i in range(n)], pa.binary()),
        pa.nulls(n, HEADER_TYPE)], schema=SCHEMA)


def best(fn, rounds: int) -> float:
    """The shortest of ``rounds`` calls of ``fn``, in seconds."""
    out = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def aiokafka_build(keys: list, values: list, codec: str) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=_CODEC_IDS[codec],
                                  is_transactional=False, producer_id=-1, producer_epoch=-1,
                                  base_sequence=-1, batch_size=2**31 - 1)
    ts = TS_US // 1000
    for i, (k, v) in enumerate(zip(keys, values)):
        b.append(i, timestamp=ts, key=k, value=v, headers=[])
    return bytes(b.build())


def aiokafka_read(data: bytes) -> int:
    from aiokafka.record.default_records import DefaultRecordBatch

    return sum(1 for _ in DefaultRecordBatch(data))


def figures(n: int, rounds: int) -> list[dict]:
    table = segment_table(n)
    keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
    out = []
    for codec in CODECS:
        data = encode_batch(table, base_offset=0, codec=codec)
        assert decode_batches(data, max_bytes=64 * MB)[0].table.num_rows == n
        theirs = aiokafka_build(keys, values, codec)
        assert aiokafka_read(theirs) == n
        ours_dec = best(lambda: decode_batches(data, max_bytes=64 * MB), rounds)
        base_dec = best(lambda: aiokafka_read(theirs), rounds)
        ours_enc = best(lambda: encode_batch(table, base_offset=0, codec=codec), rounds)
        base_enc = best(lambda: aiokafka_build(keys, values, codec), rounds)
        for what, ours, base, how in (
                ("decode", ours_dec, base_dec, "aiokafka's compiled reader to Python records"),
                ("encode", ours_enc, base_enc, "aiokafka's compiled builder, record by record")):
            o, b = n / ours, n / base
            out.append({"name": f"{what}_{codec}", "unit": "records/s", "ours": round(o),
                        "baseline": round(b), "baseline_name": how,
                        "ratio": round(o / b, 3), "target": None, "records": n,
                        "us_per_record": round(ours / n * 1e6, 3), "batch_bytes": len(data)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small and fast (CI)")
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    if args.quick:
        args.records, args.rounds = 500, 2
    load_before = machine()
    figs = figures(args.records, args.rounds)
    path = write_results("kafka_records", figs, quick=args.quick, rounds=args.rounds,
                         machine_before_run=load_before)
    print(f"{'figure':14} {'ours rec/s':>12} {'aiokafka rec/s':>15} {'ratio':>6} {'us/rec':>7}")
    for f in figs:
        print(f"{f['name']:14} {f['ours']:>12,} {f['baseline']:>15,} {f['ratio']:>6} "
              f"{f['us_per_record']:>7}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
