"""A writer process killed with SIGKILL in the middle of many commits.

Afterwards: every acknowledged record reads back, nothing uncommitted is
visible (the log holds whole batches, each acknowledged or the one in flight),
every manifest version parses, every file no manifest names is reported by
``orphans()``, and vacuum after the delay removes them while the log still reads.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys

import pytest

from log_layout import open_log, wall_clock_ms
from log_layout import paths
from tests.conftest import make_log_url

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROUNDS = 5
ROWS = 20


def _kill_after(store, name, acks_before_kill, env=None):
    url, options = store
    child = subprocess.Popen([sys.executable, "-m", "tests.log_layout.writer_proc", url, "crash",
                              name, "claim", "1000", str(ROWS)]
                             + ([json.dumps(options)] if options else []),
                             cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, **(env or {})})
    assert child.stdout.readline() == "ready\n"
    child.stdin.write("go\n")
    child.stdin.flush()
    acks = []
    for line in child.stdout:
        acks.append(json.loads(line))
        if len(acks) >= acks_before_kill:
            child.send_signal(signal.SIGKILL)  # somewhere inside the next append
            break
    acks += [json.loads(line) for line in child.stdout]  # lines already in the pipe
    assert child.wait(timeout=60) == -signal.SIGKILL  # not 0: it never ran out of batches
    assert all("base" in a for a in acks)
    return acks


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["file", "s3", "hdfs"])
def test_sigkill_mid_commit(backend, request, tmp_path):
    store = make_log_url(backend, request, tmp_path)
    log = open_log(store[0], storage_options=store[1])
    log.create_topic("crash")
    part = log.partition("crash", 0)
    rng = random.Random(7)
    acked: dict[str, dict] = {}
    rounds, most = (ROUNDS, 40) if backend == "file" else (2, 12)
    for round_ in range(rounds):
        for a in _kill_after(store, f"r{round_}", rng.randint(most // 4, most)):
            acked[a["tag"]] = a
        check_after_crash(part, acked)
    # and once at the worst moment (commit 5 = claim + 3 appends + 1): the segment written,
    # its version not yet created
    for a in _kill_after(store, "last", 10**9, env={"WRITER_PROC_CRASH_AT": "5"}):
        acked[a["tag"]] = a
    assert "last-2" in acked and "last-3" not in acked
    check_after_crash(part, acked)
    assert part.read_table(0).column("value").to_pylist()[-1] == f"last-2-{ROWS - 1}".encode()
    # What the crash left: locally the segment no version names (appends leave no temp);
    # on HDFS the append's file, written as a temp and never renamed to its version; on
    # S3 nothing (the append is one conditional PUT; at a checkpoint version, two).
    reasons = {f.reason for f in part.orphans()}
    left = {"file": "orphan", "hdfs": "temp"}.get(backend)
    assert left is None or left in reasons

    # vacuum before the delay keeps the orphans; after it they go, and the log still reads
    now = wall_clock_ms()
    orphans = part.orphans(now)
    early = part.vacuum(now_ms=now, delay_ms=60_000)
    assert all(f.reason == "manifest" for f in early.deleted)  # old versions go at once
    print("orphans after the crashes:", sorted((f.reason, f.name) for f in orphans))
    report = part.vacuum(now_ms=now + 120_000, delay_ms=60_000)
    assert {f.name for f in orphans} <= {f.name for f in report.deleted}
    assert part.orphans(now + 120_000) == []
    check_after_crash(part, acked)
    w = part.claim("after")
    assert w.append(_one()).base_offset == part.snapshot().next_offset - 1


def _one():
    import pyarrow as pa

    return pa.table({"value": [b"after"]})


def check_after_crash(part, acked):
    m = part.snapshot()
    t = part.read_table(0)
    offsets = t.column("offset").to_pylist()
    assert offsets == list(range(m.next_offset))
    log_values = t.column("value").to_pylist()
    # every acknowledged record reads back at its offset
    for a in acked.values():
        assert log_values[a["base"]:a["last"] + 1] == \
            [f"{a['tag']}-{r}".encode() for r in range(ROWS)], a
    # nothing else is visible but whole batches (at most one per crash was committed and
    # not yet acknowledged: the writer died between its commit and its print)
    batches = {}
    for o, v in zip(offsets, log_values):
        tag, row = v.decode().rsplit("-", 1)
        batches.setdefault(tag, []).append((o, int(row)))
    unacked = [tag for tag in batches if tag not in acked]
    assert len(unacked) <= len({tag.split("-")[0] for tag in batches})
    for tag, rows in batches.items():
        assert [r for _, r in rows] == list(range(ROWS)), tag
    # every manifest version parses and names only existing files
    for f in part.store.list(part.manifest_folder):
        v = paths.manifest_version(f.name, part.topic_id)
        if v is not None:
            assert part.version(v).version == v
    for s in m.segments:
        assert part.store.exists(f"{part.folder}/{s.file}")
    # every file nobody names is reported
    named = {s.file for s in m.segments}
    orphans = {f.name for f in part.orphans()}
    for f in part.store.list(part.folder):
        assert f.name in named or f.name in orphans, f.name
    for f in part.store.list(part.manifest_folder):
        assert paths.manifest_version(f.name, part.topic_id) is not None \
            or f"_log/{f.name}" in orphans
