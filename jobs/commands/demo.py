"""``sparklog demo``: a tour of sparklog on the embedded local store."""

from __future__ import annotations

import argparse
import shutil
import tempfile


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run a short tour on a local store",
                       description="Create a topic, write records, read them back by offset "
                                   "and by time, on a throw-away local store (or --store).")
    p.add_argument("--records", type=int, default=100_000, help="records to write (default 100000)")
    p.add_argument("--keep", action="store_true", help="keep the demo store afterwards")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import pyarrow as pa
    from rich.console import Console
    from rich.table import Table

    from log_layout import open_log

    console = Console()
    folder = args.store or tempfile.mkdtemp(prefix="sparklog-demo-")
    log = open_log(folder)
    console.print(f"[bold]sparklog demo[/bold] on store {log.url}")
    topic = "page-views"
    if topic in log.topics():
        log.delete_topic(topic)
    log.create_topic(topic, {"partitions": 2, "retention.ms": 3_600_000})
    n = args.records
    writers = [p.claim("demo") for p in log.partitions(topic)]
    base_ts = 1_763_700_000_000
    for i, start in enumerate(range(0, n, 10_000)):
        rows = range(start, min(n, start + 10_000))
        batch = pa.table({"key": [f"user-{r % 100}".encode() for r in rows],
                          "value": [f'{{"page": "/p/{r % 37}", "n": {r}}}'.encode() for r in rows],
                          "timestamp": [base_ts + r for r in rows]})
        writers[i % len(writers)].append(batch)
    table = Table(title=f"topic {topic}")
    for col in ("partition", "log start", "high watermark", "segments", "bytes"):
        table.add_column(col, justify="right")
    for p in log.partitions(topic):
        m = p.snapshot()
        table.add_row(str(p.partition), str(m.log_start_offset), str(m.next_offset),
                      str(len(m.segments)), f"{m.size_bytes:,}")
    console.print(table)
    p0 = log.partition(topic, 0)
    first = p0.read_table(0, 3)
    console.print("first records of partition 0:")
    for row in first.to_pylist():
        console.print(f"  offset {row['offset']}  key {row['key'].decode()}  value {row['value'].decode()}")
    at = p0.offset_for_timestamp(base_ts + n // 2)
    console.print(f"first offset of partition 0 at or after t0+{n // 2} ms: {at}")
    if not args.keep and not args.store:
        shutil.rmtree(folder, ignore_errors=True)
    console.print("[green]demo done[/green]")
    return 0
