"""What an append costs as a partition's segment count grows.

A manifest version used to be a whole snapshot: every append wrote the whole
segment list, O(segments). Now an append between checkpoints writes a delta of
the version before (manifest.py), and every ``CHECKPOINT_INTERVAL``-th version is
whole. This script appends 50-record batches (one segment each) to one
partition on the local store, fsync off, and at each milestone times a run of
appends -- ours as shipped, and in the same run a **baseline** of the same
appends with every version whole (``CHECKPOINT_INTERVAL`` = 1: the format before
deltas). ``ratio`` is baseline / ours: how many times cheaper an append is.

No issue sets a target for it; it shows the commit's cost no longer grows with
the log (until a directory of many files makes file creation itself slower).

Usage: ``python bench/manifest_growth.py [--quick]``. Writes
``bench/results/manifest_growth.json``.
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

import pyarrow as pa  # noqa: E402

from bench.common import machine, write_results  # noqa: E402
from log_layout import open_log  # noqa: E402
from log_layout import versions as versions_module  # noqa: E402

ROWS = 50
TIMED = 160  # appends timed at each milestone: 10 checkpoints' worth


def appends(folder: str, milestones: list[int], whole: bool) -> dict[int, tuple[float, int]]:
    """{segments: (seconds per append, bytes of the last file)} at each milestone."""
    interval = versions_module.CHECKPOINT_INTERVAL
    versions_module.CHECKPOINT_INTERVAL = 1 if whole else interval
    try:
        log = open_log(folder, fsync=False)
        log.create_topic("g")
        part = log.partition("g", 0)
        w = part.claim("w")
        table = pa.table({"value": [b"x" * 100] * ROWS})
        out, n = {}, 0
        for target in milestones:
            while n < target - TIMED:
                w.append(table)
                n += 1
            start = time.perf_counter()
            for _ in range(TIMED):
                w.append(table)
            seconds = (time.perf_counter() - start) / TIMED
            n += TIMED
            last = part.snapshot().segments[-1].file
            out[target] = (seconds, os.path.getsize(os.path.join(folder, "g", "0", last)))
        return out
    finally:
        versions_module.CHECKPOINT_INTERVAL = interval


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="up to 1,000 segments (seconds)")
    ap.add_argument("--dir", default=os.path.join(ROOT, "bench"),
                    help="where the stores are made (default: bench/, on the project's disk)")
    args = ap.parse_args(argv)
    milestones = [400, 1_000] if args.quick else [1_000, 5_000, 10_000, 20_000]
    where = machine()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-manifest-growth-", dir=args.dir) as workdir:
        for kind in ("ours", "whole"):
            folder = os.path.join(workdir, kind)
            results[kind] = appends(folder, milestones, whole=kind == "whole")
            shutil.rmtree(folder)
            os.sync()
    figures = []
    print(f"append of {ROWS} records at N segments: ours (deltas between checkpoints) vs "
          f"every version whole (the format before deltas), {TIMED} appends timed")
    print(f"{'segments':>9} {'ours ms':>9} {'whole ms':>9} {'ratio':>7} {'ours file KB':>13} "
          f"{'whole file KB':>14}")
    for n in milestones:
        (ours, ours_bytes), (whole, whole_bytes) = results["ours"][n], results["whole"][n]
        print(f"{n:>9,} {ours * 1e3:>9.3f} {whole * 1e3:>9.3f} {whole / ours:>7.2f} "
              f"{ours_bytes / 1e3:>13.1f} {whole_bytes / 1e3:>14.1f}")
        figures.append({"name": f"append_at_{n}_segments", "unit": "ms per append",
                        "ours": round(ours * 1e3, 4), "baseline": round(whole * 1e3, 4),
                        "ratio": round(whole / ours, 3), "target": None,
                        "ours_file_bytes": ours_bytes, "baseline_file_bytes": whole_bytes})
    write_results("manifest_growth", figures, quick=args.quick, machine_before_run=where,
                  rows=ROWS, timed=TIMED,
                  baseline="the same appends with every manifest version whole")
    return 0


if __name__ == "__main__":
    sys.exit(main())
