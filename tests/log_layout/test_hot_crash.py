"""A hot-journal writer killed with SIGKILL mid-upload, mid-commit and just after a
commit: every acknowledged record reads back exactly once, nothing of an uncommitted
flush is visible, a new leader starts right after the last committed record, and the
sweeper removes what the dead writer left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pyarrow as pa
import pytest

from log_layout import hot_checkpoint, open_log, paths, wall_clock_ms
from log_layout.hot_sweep import MIN_DELAY_MS, sweep
from tests.conftest import make_log_url

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PARTITIONS = 4


def _run_and_kill(store, crash: str | None, acks_before_kill: int = 0,
                  depth: int = 1, env: dict | None = None) -> list[dict]:
    url, options = store
    env = {**os.environ, **({"HOT_CRASH": crash} if crash else {}), "HOT_DEPTH": str(depth),
           **(env or {})}
    child = subprocess.Popen([sys.executable, "-m", "tests.log_layout.hot_writer_proc", url,
                              "t", str(PARTITIONS)] + ([json.dumps(options)] if options else []),
                             cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout.readline() == "ready\n"
    acks = []
    for line in child.stdout:
        acks.append(json.loads(line))
        if not crash and len(acks) >= acks_before_kill:
            child.send_signal(signal.SIGKILL)  # somewhere in the next flushes
            break
    acks += [json.loads(line) for line in child.stdout]
    assert child.wait(timeout=120) == -signal.SIGKILL
    return acks


def _check_after_crash(store, acks: list[dict]) -> None:
    log = open_log(store[0], storage_options=store[1])
    seen: dict[int, list[str]] = {}
    for p in range(PARTITIONS):
        t = log.partition("t", p).read_table(0)
        assert t.column("offset").to_pylist() == list(range(t.num_rows))
        seen[p] = t.column("value").to_pylist()
        assert len(set(seen[p])) == len(seen[p])  # nothing twice
    for a in acks:  # every acknowledged record, at its offset
        assert seen[a["p"]][a["offset"]] == a["value"].encode()
    # rounds go in order in each partition: what is visible is a prefix of the rounds
    for p, values in seen.items():
        assert values == [f"r{r}-p{p}".encode() for r in range(len(values))]
    # a new leader starts right after the last committed record
    for p in range(PARTITIONS):
        w = log.partition("t", p).claim("next")
        assert w.append(pa.table({"value": [b"next"]})).base_offset == len(seen[p])
    # what the dead writer left unnamed is swept once old enough
    sweep(log, now_ms=wall_clock_ms() + 10 * MIN_DELAY_MS, delay_ms=0)
    named = {s.file for p in range(PARTITIONS) for s in log.partition("t", p).snapshot().segments}
    for journal in log.store.list_folders(paths.HOT_FOLDER):
        folder = paths.journal_folder(journal.rstrip("/").rsplit("/", 1)[-1])
        for f in log.store.list(folder):
            if f.name.endswith(".wal"):
                assert f"{folder}/{f.name}" in named


#: every kill point on every store; the timed kill (None) on the local store only (on the
#: others a flush takes seconds)
KILLS = [("file", crash) for crash in ("upload:3", "entry:3", "acked:3", "checkpoint:4",
                                       None)] + [
    pytest.param(backend, crash, marks=pytest.mark.slow)
    for backend in ("s3", "hdfs") for crash in ("upload:3", "entry:3", "acked:3",
                                                "checkpoint:4")]


@pytest.mark.parametrize("backend,crash", KILLS)
def test_sigkill_of_a_hot_writer(backend, crash, request, tmp_path):
    store = make_log_url(backend, request, tmp_path)
    open_log(store[0], storage_options=store[1]).create_topic("t", {"partitions": PARTITIONS})
    acks = _run_and_kill(store, crash, acks_before_kill=37)
    if crash == "checkpoint:4":
        # the torn checkpoint is still there, refused, and every reader below reads the
        # entries instead of it
        log = open_log(store[0], storage_options=store[1])
        journal, = [j.rstrip("/").rsplit("/", 1)[-1]
                    for j in log.store.list_folders(paths.HOT_FOLDER)]
        path = hot_checkpoint.checkpoint_path(journal)
        with pytest.raises(hot_checkpoint.CorruptHotCheckpoint):
            hot_checkpoint.decode(log.store.read(path), path, journal)
        log.partition("t", 0).snapshot()
        assert log.journals.stats["corrupt_checkpoints"] == 1
    _check_after_crash(store, acks)


@pytest.mark.parametrize("crash", ["upload:3", "entry:3", "acked:3"])
def test_sigkill_of_a_hot_writer_whose_flushes_hold_runs_of_appends(crash, request, tmp_path):
    """Each flush takes several appends of every partition, written as one segment per
    partition (log_layout.hot_plan): killed mid-upload, mid-commit and just after a
    commit, every acknowledged record still reads back once at its offset, and nothing
    of an uncommitted run shows."""
    store = make_log_url("file", request, tmp_path)
    open_log(store[0], storage_options=store[1]).create_topic("t", {"partitions": PARTITIONS})
    acks = _run_and_kill(store, crash, depth=6)
    _check_after_crash(store, acks)
    log = open_log(store[0], storage_options=store[1])
    # runs were written: some hot segment holds several appends
    counts = [s.count for p in range(PARTITIONS)
              for s in log.partition("t", p).snapshot().segments if s.file.endswith(".wal")]
    assert max(counts) > 1


@pytest.mark.parametrize("crash", ["upload:5", "entry:5", "acked:5", None])
def test_sigkill_of_a_hot_writer_with_each_partition_in_several_uploads(crash, request,
                                                                        tmp_path):
    """Four uploads in flight and four rounds out at all times, so every partition is in
    several uploads at once, each flush planned on the ones before it: killed mid-upload,
    mid-commit, just after a commit or at some moment, every acknowledged record reads
    back once at its offset, the rounds of each partition are a prefix (no gap where a
    later flush committed past a lost one), and a new leader starts right after."""
    store = make_log_url("file", request, tmp_path)
    open_log(store[0], storage_options=store[1]).create_topic("t", {"partitions": PARTITIONS})
    report = tmp_path / "most-uploads-out"
    acks = _run_and_kill(store, crash, acks_before_kill=4 * PARTITIONS * 6, depth=4,
                         env={"HOT_UPLOADS": "4", "HOT_OVERLAP_FILE": str(report)})
    _check_after_crash(store, acks)
    assert int(report.read_text()) >= 2  # flushes of the partitions were out together
