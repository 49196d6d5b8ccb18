"""Eight writers commit to one partition at once (threads; processes on a local store).

Checked afterwards: exactly one commit won each manifest version, no offset was
assigned twice, every acknowledged record reads back at its offset, nothing
else is visible, the losers rebased (same epoch) or were fenced (claims), and
no unnamed file is left behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter

import pyarrow as pa
import pytest

from log_layout import Fenced, open_log

WRITERS = 8
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _batches(backend):
    return 3 if backend in ("s3", "hdfs") else 12


def _run_threads(store, mode, batches, rows=3):
    url, options = store
    setup = open_log(url, storage_options=options)
    setup.create_topic("race")
    if mode == "writer":
        setup.partition("race", 0).claim("leader")
    barrier = threading.Barrier(WRITERS)
    acks: list[dict] = []
    errors: list[BaseException] = []

    def run(i):
        try:
            part = open_log(url, storage_options=options).partition("race", 0)  # own caches
            barrier.wait()
            w = part.claim(f"w{i}") if mode == "claim" else part.writer()
            for b in range(batches):
                values = [f"w{i}-{b}-{r}".encode() for r in range(rows)]
                try:
                    res = w.append(pa.table({"value": values}))
                except Fenced:
                    acks.append({"fenced": w.epoch})
                    with pytest.raises(Fenced):  # and it stays fenced
                        w.append(pa.table({"value": values}))
                    return
                acks.append({"base": res.base_offset, "last": res.last_offset,
                             "tag": f"w{i}-{b}", "version": res.version, "epoch": w.epoch})
        except BaseException as e:  # surfaced by the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    return setup.partition("race", 0), acks


def _run_processes(store, mode, batches, rows=3):
    url, options = store
    setup = open_log(url, storage_options=options)
    setup.create_topic("race")
    if mode == "writer":
        setup.partition("race", 0).claim("leader")
    procs = [subprocess.Popen([sys.executable, "-m", "tests.log_layout.writer_proc", url, "race",
                               f"p{i}", mode, str(batches), str(rows)]
                              + ([json.dumps(options)] if options else []),
                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for i in range(WRITERS)]
    for p in procs:
        assert p.stdout.readline() == "ready\n"
    for p in procs:  # all have imported and opened the log: release them together
        p.stdin.write("go\n")
        p.stdin.flush()
    acks = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        acks += [json.loads(line) for line in out.splitlines()]
    return setup.partition("race", 0), acks


def _check(part, acks, mode, batches, rows=3):
    done = [a for a in acks if "base" in a]
    fenced = [a for a in acks if "fenced" in a]
    m = part.snapshot()
    # exactly one commit won each version: no two acknowledgements share a version
    versions = [a["version"] for a in done]
    assert len(versions) == len(set(versions))
    # no offset assigned twice, and the acknowledged appends tile [0, high watermark)
    ranges = sorted((a["base"], a["last"]) for a in done)
    assert all(last - base + 1 == rows for base, last in ranges)
    assert [r[0] for r in ranges] == list(range(0, rows * len(ranges), rows))
    assert m.next_offset == rows * len(ranges)
    # every acknowledged record reads back at its offset, and nothing else is there
    expect = {}
    for a in done:
        expect.update({a["base"] + r: f"{a['tag']}-{r}".encode() for r in range(rows)})
    t = part.read_table(0)
    assert dict(zip(t.column("offset").to_pylist(), t.column("value").to_pylist())) == expect
    # each manifest version follows the last: epochs never go back, offsets only grow
    history = [part.version(v) for v in range(m.version + 1)]
    for a, b in zip(history, history[1:]):
        assert b.leader_epoch >= a.leader_epoch and b.next_offset >= a.next_offset
        assert b.segments[:len(a.segments)] == a.segments  # appends only add
    for a in done:  # a commit carries its writer's epoch: nobody wrote after being fenced
        assert history[a["version"]].leader_epoch == a["epoch"]
    if mode == "writer":
        # one epoch for all: nobody is fenced, and every writer had every batch acknowledged
        assert not fenced
        per_writer = Counter(a["tag"].rsplit("-", 1)[0] for a in done)
        assert len(per_writer) == WRITERS and set(per_writer.values()) == {batches}
        assert {h.leader_epoch for h in history[1:]} == {1}
    else:
        assert {h.leader_epoch for h in history if h.committer == "claim"} \
            == set(range(1, WRITERS + 1))
        for f in fenced:
            assert f["fenced"] < m.leader_epoch
    assert part.orphans() == []  # losers cleaned up after themselves


@pytest.mark.parametrize("mode", ["writer", "claim"])
def test_threads_race(store, backend, mode):
    part, acks = _run_threads(store, mode, _batches(backend))
    if mode == "writer":
        assert len(acks) == WRITERS * _batches(backend)  # every same-epoch append succeeded
    _check(part, acks, mode, _batches(backend))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["writer", "claim"])
def test_processes_race_on_a_local_store(tmp_path, mode):
    part, acks = _run_processes((str(tmp_path / "store"), None), mode, 10)
    if mode == "writer":
        assert len(acks) == WRITERS * 10
    _check(part, acks, mode, 10)
