"""Append and read throughput of ``log_layout`` against plain pyarrow IPC files.

What is measured (the same input batches on both sides, in the same run):

* **ours**: ``PartitionWriter.append`` per batch = normalise the records, add
  offsets, encode one Arrow IPC file segment (+ CRC-32), store it, commit one
  manifest version exclusively. Reading = ``PartitionLog.read(0)`` over every
  segment (read the bytes, verify the CRC, open the IPC file).
* **baseline** (``plain``): per batch, serialise a table with
  ``pyarrow.ipc.new_file`` into memory and write it to its own file. Reading =
  read each file's bytes and open it with ``pyarrow.ipc.open_file`` (the same
  page-cache read as ours; no memory map, which would read nothing at all).
  Two tables, both built before the clock starts:

  - ``records`` (the baseline the target is judged on): the same records as
    our segments hold, in the segment schema (offset, timestamp, key, value,
    headers). The file bytes are then identical in size, so the ratio is
    exactly what ``log_layout`` adds: normalising, offsets, the CRC-32, the
    manifest commit and the crash-safe file protocol.
  - ``values``: the producer's input table as given (one binary column). Its
    files are ~24% smaller (no offset/timestamp columns, no offsets buffers for
    the null key and headers), so this ratio also counts the format's bytes.

Two durability settings, each side alike:

* ``durable``: ours with ``fsync=True`` (every segment and manifest file is
  fsynced, and so is its folder, before the append returns: that is what
  acks=all means); the baseline fsyncs each file it writes.
* ``page-cache``: fsync off on both sides.

The target (issue 2): at batches of 10,000, append and read >= 0.8 of plain
pyarrow on the local store. It is judged on the **page-cache** figures against
the ``records`` baseline: with the same bytes and no fsync on either side, the
ratio is exactly the overhead of the log's own work, which is what the target
is about (DESIGN: "the format is not the bottleneck"). The durable figures are
reported beside it and are not comparable one to one: the baseline pays one
fsync per batch, while a crash-safe commit pays three (the file, the partition
folder for the segment's name, the manifest folder after the version's link)
-- the minimum for "segment durable before the version naming it" on POSIX
filesystems. The first two run in parallel, so an append waits for two rounds
of flushes where the baseline waits for one.

An append creates one file, as the baseline does: the segment, streamed from
the IPC writer's buffers in one vectored write, then the manifest version's
JSON as a trailer, then a hard link that gives the file its version name (see
``store.linked_file``). Where the rest of the time goes (instrumented,
10,000-record batches, page cache, per append): file creation ~0.07 ms and the
kernel's copy ~0.29 ms, as the baseline's; IPC encoding without copying the
data ~0.07 ms (the baseline's encode copies it: ~0.15-0.2 ms); CRC-32 via
ISA-L ~0.05 ms, on a helper thread while the kernel copies (segments of 256 KB
and more, when the process may use two CPUs; pinned to one CPU the ratio is
~0.77); normalising and offsets ~0.07 ms; the manifest JSON ~0.04 ms (a
delta of the version before, O(1) in the segments; every 16th version is whole,
encoded incrementally: ~0.03 ms at 200 segments, ~0.1 ms at 2,000, where a
full encode would be 0.3 / 4 ms); the link ~0.015 ms. Reads are memory-mapped and verify the CRC,
and beat the baseline's plain read.

**HDFS** (``hdfs_*`` figures, target >= 0.8 at batches of 10,000): the same
appends through the log to a real HDFS (a MiniDFSCluster started by the bench,
``bench/hdfs_side``: one NameNode and one DataNode on this machine, closed
files synced to disk) against writing the same segments' bytes as plain files to
the same HDFS over the same WebHDFS client (one ``CREATE`` each). Every file
there costs a NameNode round trip and a DataNode write whatever its size, so an
append writes one file: its segment carrying its manifest version, written as a
temp file and renamed to the version's name (``segment_commit.CarriedAppend``;
checkpoint versions, one in 16, still write two files side by side). Reads: the
log's ``read(0)`` against reading each plain file back. Where an append's time goes
(each WebHDFS call timed, 2026-11-26): a plain file is a NameNode ``CREATE`` (~3 ms,
it only names the DataNode) then the DataNode's write and close (~10-20 ms whatever
the size: fsync, then the NameNode completes the file); ours skips the first (the
store asked for its temp file's DataNode on a helper thread after the previous one:
``webhdfs_store._SpareLocations``), then adds the ``RENAME`` (~2.5 ms, a NameNode
edit: the crash-safe commit) and ~1 ms of Python outside the calls. Before, with two
files per append and no location asked ahead, the ratio was 0.74.

The HDFS case runs ``--hdfs-rounds`` pairs (default 30) of ``--hdfs-appends`` appends
(default 40) on each side, back to back, who goes first alternating; the load of this
shared machine moves over seconds (three rounds of 40 gave pair ratios from 0.75 to
1.35), so the judged figure is the median of the pairs' own ratios, with its quartiles.

Usage: ``python bench/log_append.py [--quick] [--records N] [--repeat R] [--no-hdfs]
[--hdfs-only] [--hdfs-rounds R] [--hdfs-appends N]``. Writes
``bench/results/log_append.json`` (``log_append_hdfs.json`` with ``--hdfs-only``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from bench.common import QUICK_JVM, machine, write_results  # noqa: E402
from log_layout import Manifest, SegmentInfo, open_log  # noqa: E402

VALUE_BYTES = 100
TARGET = 0.8


def make_batches(records: int, batch: int) -> list[pa.Table]:
    """``records`` values of 100 random bytes, cut into tables of ``batch`` rows."""
    rng = np.random.default_rng(1)
    data = pa.py_buffer(rng.integers(0, 256, records * VALUE_BYTES, dtype=np.uint8).tobytes())
    offsets = pa.py_buffer(np.arange(0, (records + 1) * VALUE_BYTES, VALUE_BYTES,
                                     dtype=np.int32).tobytes())
    values = pa.Array.from_buffers(pa.binary(), records, [None, offsets, data])
    table = pa.table({"value": values})
    return [table.slice(i, batch) for i in range(0, records, batch)]


# -- ours -------------------------------------------------------------------------
def ours_append(folder: str, batches: list[pa.Table], fsync: bool,
                storage_options: dict | None = None, *, hot: bool = False) -> float:
    """Seconds to append ``batches`` one by one; ``hot``: through a hot-tier journal (one
    shared object and one entry per flush), so the read-back reads hot segments."""
    from log_layout.hot_writer import JournalWriter

    log = open_log(folder, fsync=fsync, storage_options=storage_options)
    log.create_topic("bench")
    journal = JournalWriter(log.journals, "bench") if hot else None
    w = log.partition("bench", 0).claim("bench", journal)
    try:
        start = time.perf_counter()
        for b in batches:
            w.append(b)
        return time.perf_counter() - start
    finally:
        if journal is not None:
            journal.close()


def ours_read(folder: str, records: int, storage_options: dict | None = None) -> float:
    part = open_log(folder, storage_options=storage_options).partition("bench", 0)
    start = time.perf_counter()
    n = sum(b.num_rows for b in part.read(0))
    elapsed = time.perf_counter() - start
    assert n == records, (n, records)
    return elapsed


# -- baseline -----------------------------------------------------------------------
def ipc_file(table: pa.Table) -> pa.Buffer:
    """``table`` as the bytes of a plain Arrow IPC file."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def plain_append(folder: str, batches: list[pa.Table], fsync: bool) -> float:
    os.makedirs(folder)
    start = time.perf_counter()
    for i, b in enumerate(batches):
        buf = ipc_file(b)
        fd = os.open(os.path.join(folder, f"{i:020d}.arrow"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            view = memoryview(buf)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - start


def segment_tables(batches: list[pa.Table]) -> list[pa.Table]:
    """The batches as the log stores them: offsets, timestamps, null keys and headers."""
    from log_layout import SEGMENT_SCHEMA

    out, base, ts = [], 0, pa.scalar(1_763_700_000_000_000, SEGMENT_SCHEMA.field("timestamp").type)
    for b in batches:
        n = b.num_rows
        out.append(pa.Table.from_arrays([
            pa.array(np.arange(base, base + n, dtype=np.int64)),
            pa.repeat(ts, n), pa.nulls(n, pa.binary()), b.column("value"),
            pa.nulls(n, SEGMENT_SCHEMA.field("headers").type)], schema=SEGMENT_SCHEMA))
        base += n
    return out


def plain_read(folder: str, records: int) -> float:
    start = time.perf_counter()
    n = 0
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        n += pa.ipc.open_file(pa.py_buffer(data)).read_all().num_rows
    elapsed = time.perf_counter() - start
    assert n == records, (n, records)
    return elapsed


# -- manifest cost ------------------------------------------------------------------------
def manifest_cost(segments: int) -> dict[str, float]:
    """Encode/parse time and size of a manifest naming ``segments`` segments."""
    infos = tuple(SegmentInfo(f"{i * 1000:020d}-{i:016x}.arrow", i * 1000, i * 1000 + 999, 1000,
                              120_000, 1_763_700_000_000 + i, 1_763_700_000_000 + i, 12345678)
                  for i in range(segments))
    m = Manifest("bench", 0, version=segments, segments=infos, next_offset=segments * 1000)
    reps = 20
    start = time.perf_counter()
    for _ in range(reps):  # a fresh object each time: the full encoding, no cache
        data = dataclasses.replace(m).to_json()
    encode = (time.perf_counter() - start) / reps
    m.to_json()
    start = time.perf_counter()
    for i in range(reps):  # what an append pays: the previous version's text + one segment
        m = m.next(segments=m.segments + (dataclasses.replace(infos[-1], file=f"{i:020d}-x.arrow"),))
        m.to_json()
    append = (time.perf_counter() - start) / reps
    start = time.perf_counter()
    for i in range(reps):  # what an append between checkpoints pays: a delta
        new = m.next(segments=m.segments + (dataclasses.replace(infos[-1], file=f"d{i}.arrow"),))
        delta = new.to_json(delta_of=m)
        m = new
    delta_encode = (time.perf_counter() - start) / reps
    start = time.perf_counter()
    for _ in range(reps):
        Manifest.from_json(data, path="x")
    parse = (time.perf_counter() - start) / reps
    return {"segments": segments, "bytes": len(data), "encode_ms": encode * 1e3,
            "append_encode_ms": append * 1e3, "delta_encode_ms": delta_encode * 1e3,
            "delta_bytes": len(delta), "parse_ms": parse * 1e3}


def settle(folder: str) -> None:
    """Delete a run's files and flush, so the next run does not pay for this one's
    deletes (the disk is mounted with ``discard``: freed blocks are trimmed at the next
    journal commit, which every file creation then waits for)."""
    shutil.rmtree(folder)
    os.sync()


def warm_up(workdir: str) -> None:
    """Run both sides once on a little data: imports and allocator set-up are not measured."""
    batches = make_batches(20_000, 10_000)
    for durable in (True, False):
        for side in ("ours", "plain", "records"):
            folder = os.path.join(workdir, f"warm-{side}-{durable}")
            if side == "ours":
                ours_append(folder, batches, durable)
                ours_read(folder, 20_000)
            else:
                plain_append(folder, batches if side == "plain" else segment_tables(batches),
                             durable)
                plain_read(folder, 20_000)
            shutil.rmtree(folder)


def run(records: int, batch_sizes: list[int], repeat: int, workdir: str,
        modes: tuple[str, ...] = ("durable", "page_cache"), hot: bool = False) -> list[dict]:
    warm_up(workdir)
    figures = []
    mb = records * VALUE_BYTES / 1e6
    for durable in [m == "durable" for m in modes]:
        label = "durable" if durable else "page_cache"
        for batch in batch_sizes:
            batches = make_batches(records, batch)
            tables = {"values": batches, "records": segment_tables(batches)}
            best: dict[str, float] = {}
            runs: dict[str, list[float]] = {}

            def keep(key: str, seconds: float) -> None:
                best[key] = min(best.get(key, 1e9), seconds)
                runs.setdefault(key, []).append(seconds)

            sides = ["ours", *tables]
            for r in range(repeat):
                # Interleaved, each side first in turn, best of `repeat`: the machine is
                # shared, and whoever runs right after a big delete pays for it.
                for kind in sides[r % 3:] + sides[:r % 3]:
                    folder = os.path.join(workdir, f"{kind}-{label}-{batch}-{r}")
                    if kind == "ours":
                        keep("ours_append", ours_append(folder, batches, durable, hot=hot))
                        cpu = time.process_time()
                        keep("ours_read", ours_read(folder, records))
                    else:
                        keep(f"{kind}_append", plain_append(folder, tables[kind], durable))
                        cpu = time.process_time()
                        keep(f"{kind}_read", plain_read(folder, records))
                    # the reads' CPU time too: beside other work on 2 cores their wall
                    # time moves 2x from run to run, their CPU time much less
                    runs.setdefault(f"{kind}_read_cpu", []).append(time.process_time() - cpu)
                    settle(folder)
            for op in ("append", "read"):
                ours = records / best[f"ours_{op}"]
                plain = records / best[f"records_{op}"]
                values = records / best[f"values_{op}"]
                figures.append({
                    "name": f"{op}_batch_{batch}_{label}", "unit": "records/s",
                    "ours": round(ours), "baseline": round(plain), "ratio": round(ours / plain, 3),
                    "hot": hot,
                    # the median of each repeat's own ratio (both sides ran back to back):
                    # steadier than best-of-N when the machine's load comes and goes
                    "ratio_median_paired": round(statistics.median(
                        p / o for o, p in zip(runs[f"ours_{op}"], runs[f"records_{op}"])), 3),
                    "target": TARGET if batch == 10_000 and not durable else None,
                    "judged": batch == 10_000 and not durable,
                    "ours_mb_s": round(mb / best[f"ours_{op}"], 1),
                    "baseline_mb_s": round(mb / best[f"records_{op}"], 1),
                    "baseline_values_only": round(values),
                    "ratio_values_only": round(ours / values, 3),
                    **({"ratio_cpu_median_paired": round(statistics.median(
                        p / o for o, p in zip(runs["ours_read_cpu"], runs["records_read_cpu"])), 3),
                        "ratio_cpu_best": round(min(runs["records_read_cpu"])
                                                / min(runs["ours_read_cpu"]), 3)}
                       if op == "read" else {}),
                })
    return figures


# -- HDFS ---------------------------------------------------------------------------------
def hdfs_side(hdfs: Any, side: str, r: int, batches: list[pa.Table], files: list[pa.Buffer],
              records: int) -> tuple[float, float]:
    """One round of one side on ``hdfs``: (append seconds, read seconds)."""
    from log_layout import open_store

    url, options = hdfs.url(f"{side}-{r}"), hdfs.storage_options()
    if side == "ours":
        return ours_append(url, batches, True, options), ours_read(url, records, options)
    store = open_store(url, storage_options=options)
    start = time.perf_counter()
    for i, buf in enumerate(files):
        store.put_new(f"{i:020d}.arrow", buf)
    appended = time.perf_counter()
    n = sum(pa.ipc.open_file(pa.py_buffer(store.read(f.name))).read_all().num_rows
            for f in sorted(store.list(""), key=lambda f: f.name))
    assert n == records, (n, records)
    return appended - start, time.perf_counter() - appended


def hdfs_run(appends: int, rounds: int, batch: int = 10_000,
             java_options: tuple[str, ...] = ()) -> list[dict]:
    """Append and read on a MiniDFSCluster: the log against plain files (see the docstring).
    ``rounds`` short rounds of ``appends`` appends, each a pair (both sides back to back,
    who goes first alternating): the machine's load moves over seconds, and a pair's own
    ratio is what it cannot move much. The judged figure is the median of the pairs'.
    ``java_options``: more options for the MiniDFSCluster's JVM."""
    from bench.hdfs_side import MiniHdfs

    records = appends * batch
    batches = make_batches(records, batch)
    files = [ipc_file(t) for t in segment_tables(batches)]
    runs: dict[str, list[float]] = {}
    with MiniHdfs(java_options=java_options) as hdfs:
        for r in range(rounds + 1):  # the first round warms both sides up, unmeasured
            for side in (("ours", "plain") if r % 2 == 0 else ("plain", "ours")):
                append, read = hdfs_side(hdfs, side, r, batches, files, records)
                if r:
                    runs.setdefault(f"{side}_append", []).append(append)
                    runs.setdefault(f"{side}_read", []).append(read)
    return [hdfs_figure(op, runs[f"ours_{op}"], runs[f"plain_{op}"], records, batch)
            for op in ("append", "read")]


def hdfs_figure(op: str, ours: list[float], plain: list[float], records: int,
                batch: int) -> dict:
    paired = sorted(p / o for o, p in zip(ours, plain))
    q = statistics.quantiles(paired, n=4) if len(paired) > 1 else paired * 3
    return {
        "name": f"hdfs_{op}_batch_{batch}", "unit": "records/s",
        "ours": round(records / min(ours)), "baseline": round(records / min(plain)),
        "ratio": round(min(plain) / min(ours), 3),
        "ratio_median_paired": round(statistics.median(paired), 3),
        "ratio_paired_quartiles": [round(q[0], 3), round(q[2], 3)],
        "ours_median": round(records / statistics.median(ours)),
        "baseline_median": round(records / statistics.median(plain)),
        "runs": len(ours), "records_per_run": records,
        "target": TARGET if op == "append" else None, "judged": op == "append",
        "ours_mb_s": round(records * VALUE_BYTES / 1e6 / min(ours), 1),
        "baseline_mb_s": round(records * VALUE_BYTES / 1e6 / min(plain), 1),
        "baseline_values_only": None, "ratio_values_only": None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="20,000 records, one repeat (seconds)")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--batch", type=int, action="append", help="batch size (repeatable)")
    ap.add_argument("--mode", action="append", choices=["durable", "page_cache"])
    ap.add_argument("--dir", default=os.path.join(ROOT, "bench"),
                    help="where the stores are made (default: bench/, on the project's disk)")
    ap.add_argument("--out", help="results file (default bench/results/log_append[.quick].json)")
    ap.add_argument("--no-hdfs", action="store_true", help="skip the HDFS case (a MiniDFSCluster)")
    ap.add_argument("--hdfs-rounds", type=int, default=None,
                    help="HDFS: pairs of rounds (default 30, quick 1)")
    ap.add_argument("--hdfs-appends", type=int, default=None,
                    help="HDFS: appends of --hdfs-batch records per round (default 40, quick 5)")
    ap.add_argument("--hdfs-only", action="store_true", help="only the HDFS case")
    ap.add_argument("--hot", action="store_true",
                    help="ours appends through a hot-tier journal (reads hot segments back)")
    args = ap.parse_args(argv)
    # --quick proves the script works and measures nothing: small, and the MiniDFSCluster
    # on a C1-only JVM (bench.common.QUICK_JVM)
    records = args.records or (20_000 if args.quick else 2_000_000)
    repeat = args.repeat or (1 if args.quick else 3)
    where = machine()  # the load average before we add ours
    figures = []
    if not args.hdfs_only:
        with tempfile.TemporaryDirectory(prefix="bench-log-append-", dir=args.dir) as workdir:
            figures = run(records, args.batch or [1_000, 10_000], repeat, workdir,
                          tuple(args.mode or ("durable", "page_cache")), hot=args.hot)
    if not args.no_hdfs:
        # ~20-35 ms an append here: 30 pairs of 40 appends take about two minutes
        figures += hdfs_run(args.hdfs_appends or (5 if args.quick else 40),
                            args.hdfs_rounds or (1 if args.quick else 30),
                            java_options=QUICK_JVM if args.quick else ())
    manifest = [manifest_cost(n) for n in (200, 2_000)]

    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"log_append: {records:,} records of {VALUE_BYTES} B values, best of "
                    f"{repeat}; plain = pyarrow IPC file per batch of the same records; "
                    f"MB/s of values")
    for col in ("figure", "ours rec/s", "ours MB/s", "plain rec/s", "plain MB/s", "ratio",
                "median paired", "target", "plain values-only rec/s", "ratio"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    for f in figures:
        ok = "" if f["target"] is None else ("met" if f["ratio"] >= f["target"] else "missed")
        t.add_row(f["name"] + (" *" if f["judged"] else ""), f"{f['ours']:,}",
                  f"{f['ours_mb_s']:,}", f"{f['baseline']:,}", f"{f['baseline_mb_s']:,}",
                  f"{f['ratio']:.2f}", f"{f['ratio_median_paired']:.2f}",
                  "" if f["target"] is None else f"{f['target']} {ok}",
                  *(("", "") if f["baseline_values_only"] is None else
                    (f"{f['baseline_values_only']:,}", f"{f['ratio_values_only']:.2f}")))
    console = Console(width=160)
    console.print(t)
    console.print("* judged: page cache (fsync off on both sides: the log's own overhead), "
                  "batches of 10,000; durable = fsync on both sides (2 flush rounds per "
                  "commit vs 1)")
    for f in figures:
        if "ratio_cpu_best" in f:
            console.print(f"{f['name']}: in CPU time (process), ratio {f['ratio_cpu_best']:.2f}, "
                          f"median paired {f['ratio_cpu_median_paired']:.2f}")
    for m in manifest:
        console.print(f"manifest of {m['segments']:,} segments: {m['bytes']:,} bytes, "
                      f"full encode {m['encode_ms']:.2f} ms, checkpoint on append (incremental) "
                      f"{m['append_encode_ms']:.3f} ms, delta on append {m['delta_encode_ms']:.3f} "
                      f"ms ({m['delta_bytes']:,} bytes), parse {m['parse_ms']:.2f} ms")

    out = args.out or (os.path.join(ROOT, "bench", "results", "log_append_hdfs"
                                    + (".quick" if args.quick else "") + ".json")
                       if args.hdfs_only else None)
    write_results("log_append", figures, quick=args.quick, out=out,
                  machine_before_run=where, records=records, value_bytes=VALUE_BYTES,
                  repeat=repeat, manifest=manifest,
                  judged_on="page_cache (fsync off on both sides), batch 10000, baseline = the "
                            "same records in plain pyarrow IPC files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
