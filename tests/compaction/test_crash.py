"""A compaction process SIGKILLed mid-commit leaves the log readable; the next run completes.

The compaction runs in a child process whose store kills the process (a real
SIGKILL, no cleanup handlers run) at a chosen point of the commit: after one
output segment is written, just before the manifest is created, or just after
it is created. The parent then reads the log, runs compaction again and
vacuums the orphans.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from compaction.cleaner import compact_partition
from log_layout import open_log, wall_clock_ms
from tests.compaction.helpers import T0, keyed, rows

pytestmark = pytest.mark.slow

CHILD = textwrap.dedent("""
    import json, os, signal, sys
    sys.path.insert(0, sys.argv[1])
    from compaction.cleaner import compact_partition
    from log_layout import open_log

    url, options, mode, now = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    log = open_log(url, storage_options=options)
    plog = log.partition("c", 0)
    store = log.store
    original = store.put_exclusive
    original_new = getattr(store, "put_new", None)
    segments = []

    def put_new(path, data):
        segments.append(path)
        if mode == "mid-segments" and len(segments) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return original_new(path, data)

    def put_exclusive(path, data):
        is_commit = "/_log/" in path and b'"committer":"compaction"' in bytes(data)
        if path.endswith(".arrow"):
            return put_new(path, data)
        if is_commit and mode == "before-manifest":
            os.kill(os.getpid(), signal.SIGKILL)
        won = original(path, data)
        if is_commit and mode == "after-manifest":
            os.kill(os.getpid(), signal.SIGKILL)
        return won

    store.put_exclusive = put_exclusive
    if store.stages_exclusive:  # HDFS: a version is staged (written), then committed
        original_stage = store.stage_exclusive

        def stage_exclusive(path, data):
            staged = original_stage(path, data)
            is_commit = "/_log/" in path and b'"committer":"compaction"' in bytes(data)
            commit = staged.commit

            def crashing_commit():
                if is_commit and mode == "before-manifest":
                    os.kill(os.getpid(), signal.SIGKILL)
                won = commit()
                if is_commit and mode == "after-manifest":
                    os.kill(os.getpid(), signal.SIGKILL)
                return won

            staged.commit = crashing_commit
            return staged

        store.stage_exclusive = stage_exclusive
    if original_new is not None:
        store.put_new = put_new
    else:
        original_new = original
    compact_partition(plog, log.topic("c").config, now)
    print("compaction finished without being killed")
""")


# not memory://: it dies with its process
@pytest.mark.parametrize("backend", ["file", "s3", "hdfs"], indirect=True)
@pytest.mark.parametrize("mode", ["mid-segments", "before-manifest", "after-manifest"])
def test_killed_compaction_recovers(log, store, mode, tmp_path):
    url, options = store
    log.create_topic("c", {"cleanup.policy": "compact", "segment.bytes": 1500,
                           "file.delete.delay.ms": 1000})
    plog = log.partition("c", 0)
    w = plog.claim("t")
    for i in range(6):
        w.append(keyed([(f"k{j}", None if (i + j) % 7 == 0 else f"v{i}-{j}")
                        for j in range(i * 5, i * 5 + 30)], T0, pad=30), now_ms=T0)
    before = rows(plog)
    version = plog.snapshot().version
    active = plog.snapshot().segments[-1].base_offset
    latest = {k: o for o, k, _ in before if o < active}
    expected = [r for r in before if r[0] >= active or latest[r[1]] == r[0]]

    script = tmp_path / "child.py"
    script.write_text(CHILD)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, str(script), root, url, json.dumps(options),
                           mode, str(T0)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr

    fresh = open_log(url, storage_options=options).partition("c", 0)
    committed = fresh.snapshot().version > version
    assert committed == (mode == "after-manifest")
    assert rows(fresh) == (expected if committed else before)  # readable, all or nothing

    again = compact_partition(fresh, log.topic("c").config, T0 + 1)
    assert again.changed != committed  # the next run completes what the killed one began
    assert rows(fresh) == expected
    if mode != "after-manifest":  # the killed run's segments are orphans, then vacuumed
        now = wall_clock_ms() + 10_000
        assert fresh.orphans(now)
        fresh.vacuum(now_ms=now, delay_ms=1000)
        assert not fresh.orphans(now)
        assert rows(fresh) == expected
