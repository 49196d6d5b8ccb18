"""A new reader's first read of a hot partition, with the journal's checkpoint and without.

One journal writer appends one record at a time to four partitions (one flush, so one
journal entry, per append) and never rolls up. Then a new direct reader (a process
that has read nothing yet) reads partition 0 from its start, twice: as sparklog reads
now (the journal's checkpoint, then only the entries after it: at most
``hot.checkpoint.interval.entries`` + 1 GETs) and, as the **baseline**, as a sparklog
without checkpoints did (every entry since the last roll-up, one GET each). The
store's calls are counted by a wrapper around the real store.

``ratio`` is baseline / ours: how many times faster the first read is. No issue sets a
target for it; README "The hot tier" quotes it.

Usage: ``python bench/hot_checkpoint.py [--quick] [--store file|s3] [--flushes N]``
(``s3``: a SeaweedFS server started here on 127.0.0.1). Writes
``bench/results/hot_checkpoint[.quick].json``.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pyarrow as pa  # noqa: E402

from bench.common import machine, write_results  # noqa: E402
from log_layout import hot_checkpoint, open_log, paths  # noqa: E402
from log_layout.direct_reader import DirectReader  # noqa: E402
from log_layout.hot_writer import CHECKPOINT_ENTRIES, JournalWriter  # noqa: E402
from log_layout.topics import Log  # noqa: E402

PARTITIONS = 4


class CountingStore:
    """The real store, counting what a reader reads by kind of file (``read entry``,
    ``read checkpoint``, ``exists ...``, ``list hot``...); tests/log_layout's hot
    checkpoint tests count with it too."""

    def __init__(self, store):
        self._store = store
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name):
        return getattr(self._store, name)

    def _kind(self, path: str) -> str:
        name = path.rsplit("/", 1)[-1]
        if paths.hot_entry_seq(name) is not None:
            return "entry"
        return "checkpoint" if name == hot_checkpoint.NAME and path.startswith("_hot/") \
            else "other"

    def read(self, path):
        self.calls["read " + self._kind(path)] += 1
        return self._store.read(path)

    def exists(self, path):
        self.calls["exists " + self._kind(path)] += 1
        return self._store.exists(path)

    def list(self, folder):
        self.calls["list " + ("hot" if folder.startswith("_hot") else "other")] += 1
        return self._store.list(folder)


class _NoCheckpoints(dict):
    """A checkpoint cache that has "just" found none for every journal (the baseline)."""

    def get(self, key, default=None):
        return (float("inf"), None)


@contextmanager
def store_url(kind: str, workdir: str) -> Iterator[tuple[str, dict | None]]:
    """A fresh log's URL and storage options on ``kind`` (``file`` or ``s3``)."""
    if kind == "file":
        yield os.path.join(workdir, "store"), None
        return
    from bench.s3_side import SeaweedS3

    with SeaweedS3() as s3:
        yield f"s3://{s3.bucket}/hot-checkpoint", s3.storage_options()


def first_read(url: str, options: dict | None, flushes: int, *, checkpoints: bool) -> dict:
    """One new reader's read of partition 0: store calls by kind and seconds."""
    counting = CountingStore(open_log(url, storage_options=options).store)
    log = Log(counting)
    if not checkpoints:
        log.journals.checkpoints = _NoCheckpoints()
    reader = DirectReader(log)
    start = time.perf_counter()
    got, errors = reader.fetch({("t", 0): 0}, max_records=10 ** 6, wait_ms=0)
    took = time.perf_counter() - start
    records = sum(batch.num_rows for _, batch, _ in got)
    if errors or records != flushes // PARTITIONS:
        raise RuntimeError(f"read {records} records of {flushes // PARTITIONS}: {errors}")
    return {"seconds": took, "entry_gets": counting.calls["read entry"],
            "checkpoint_gets": counting.calls["read checkpoint"],
            "store_calls": sum(counting.calls.values())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="300 flushes on the local store")
    ap.add_argument("--store", choices=("file", "s3"), default=None,
                    help="where the log lives (default: s3; file with --quick)")
    ap.add_argument("--flushes", type=int, default=None,
                    help="journal entries written before the read (default 2,000; 300 quick)")
    args = ap.parse_args(argv)
    kind = args.store or ("file" if args.quick else "s3")
    flushes = args.flushes or (300 if args.quick else 2000)
    where = machine()
    with tempfile.TemporaryDirectory(prefix="bench-hot-checkpoint-") as workdir, \
            store_url(kind, workdir) as (url, options):
        log = open_log(url, storage_options=options)
        log.create_topic("t", {"partitions": PARTITIONS})
        journal = JournalWriter(log.journals, "bench")
        writers = [log.partition("t", p).claim("bench", journal) for p in range(PARTITIONS)]
        start = time.perf_counter()
        for i in range(flushes):  # one append at a time: one flush, one entry each
            writers[i % PARTITIONS].append(pa.table({"value": [b"v%d" % i]}))
        wrote_s = time.perf_counter() - start
        journal.close()
        ours = first_read(url, options, flushes, checkpoints=True)
        before = first_read(url, options, flushes, checkpoints=False)
    print(f"{kind}: {flushes} flushes of {PARTITIONS} partitions written in {wrote_s:.1f} s; "
          f"{journal.stats['checkpoints']} checkpoints ({journal.stats['checkpoint_bytes']:,} B) "
          f"for {journal.stats['entry_bytes']:,} B of entries")
    for name, figures in (("checkpoint", ours), ("entries only (before)", before)):
        print(f"  {name}: {figures['entry_gets']} entry GETs, {figures['checkpoint_gets']} "
              f"checkpoint GETs, {figures['store_calls']} store calls, "
              f"{figures['seconds'] * 1000:.0f} ms")
    if ours["entry_gets"] + ours["checkpoint_gets"] > CHECKPOINT_ENTRIES + 1:
        raise RuntimeError(f"the checkpointed read took {ours} GETs")
    write_results("hot_checkpoint", [
        {"name": "first_read_seconds", "unit": "s", "ours": round(ours["seconds"], 4),
         "baseline": round(before["seconds"], 4),
         "ratio": round(before["seconds"] / ours["seconds"], 3), "target": None},
        {"name": "first_read_store_calls", "unit": "calls", "ours": ours["store_calls"],
         "baseline": before["store_calls"],
         "ratio": round(before["store_calls"] / ours["store_calls"], 3), "target": None,
         "ours_entry_gets": ours["entry_gets"], "ours_checkpoint_gets": ours["checkpoint_gets"],
         "baseline_entry_gets": before["entry_gets"]},
    ], quick=args.quick, machine_before_run=where, store=kind, flushes=flushes,
        partitions=PARTITIONS, checkpoint_interval_entries=CHECKPOINT_ENTRIES,
        write_seconds=round(wrote_s, 2),
        baseline="the same first read without the checkpoint: every entry since the roll-up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
