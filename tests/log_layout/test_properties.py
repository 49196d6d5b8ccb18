"""Hypothesis: the log's invariants hold under any mix of appends, claims and maintenance.

Invariants checked after every step, on every backend:

* offsets are consecutive from the log start (until compaction makes gaps) and
  lie in ``[log_start_offset, high_watermark)``;
* a read returns exactly what was committed (a model kept beside the log);
* the newest manifest names only files that exist;
* manifest versions strictly increase, and every version kept is readable;
* a reader with no cache sees the same snapshot as the writer (so deltas, read
  back to their checkpoint, add up to what was committed).

Only 2 manifest versions are retained, so vacuum deletes old ones, and programs
are long enough to cross checkpoints (every 16th version is whole).
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from log_layout import Fenced, Log, open_log
from log_layout.manifest import CHECKPOINT_INTERVAL
from tests.conftest import empty_memory_filesystem, make_log_url

EXAMPLES = {"file": 40, "memory": 60, "s3": 4, "hdfs": 3}

append = st.tuples(st.just("append"), st.integers(1, 7), st.booleans())  # rows, same-epoch writer
claim = st.tuples(st.just("claim"), st.just(0), st.just(False))
compact = st.tuples(st.just("compact"), st.integers(0, 100), st.booleans())  # which, keep odd
retain = st.tuples(st.just("retain"), st.integers(1, 3), st.just(False))  # segments to drop
vacuum = st.tuples(st.just("vacuum"), st.just(0), st.just(False))
programs = st.lists(st.one_of(append, append, append, claim, compact, retain, vacuum),
                    min_size=1, max_size=40)


def fresh_log(backend, request, tmp_path):
    name = uuid.uuid4().hex
    if backend == "file":
        return open_log(str(tmp_path / name), fsync=False, manifest_versions_retained=2)
    if backend == "memory":
        empty_memory_filesystem()  # the last example's files would slow every listing
        return open_log(f"memory://prop-{name}", manifest_versions_retained=2)
    url, options = make_log_url(backend, request, None)
    return open_log(url, storage_options=options, manifest_versions_retained=2)


def run_program(log, program):
    log.create_topic("p")
    part = log.partition("p", 0)
    writer = part.claim("w0")
    model: dict[int, bytes] = {}  # offset -> value, what the log must hold
    compacted = False
    versions = [part.snapshot().version]
    hwm = 0
    now = 0
    for step, (op, n, flag) in enumerate(program):
        now += 1000
        if op == "append":
            vals = [f"{step}-{i}".encode() for i in range(n)]
            w = part.writer() if flag else writer
            try:
                r = w.append(pa.table({"value": vals}), now_ms=now)
            except Fenced:
                assert w is writer and writer.fenced is not None
                writer = part.claim(f"w{step}")
                r = writer.append(pa.table({"value": vals}), now_ms=now)
            assert r.base_offset == hwm and r.count == n  # offsets go on from the high watermark
            hwm = r.last_offset + 1
            model.update(zip(range(r.base_offset, r.last_offset + 1), vals))
        elif op == "claim":
            old = writer
            writer = part.claim(f"w{step}")
            assert writer.epoch == old.epoch + 1
        elif op == "compact":
            segs = part.snapshot().segments
            if segs:
                seg = segs[n % len(segs)]
                t = part.read_segment(seg)
                keep = t.filter(pc.equal(pc.bit_wise_and(t.column("offset"), 1), 1)) if flag else t
                part.replace_segments([seg], [keep], committer="compaction", now_ms=now)
                if flag:
                    compacted = True
                    for o in range(seg.base_offset, seg.end_offset):
                        if o % 2 == 0:
                            model.pop(o, None)
        elif op == "retain":
            m = part.snapshot()
            drop = m.segments[:n]
            if drop:
                part.replace_segments(drop, [], committer="retention", now_ms=now,
                                      log_start_offset=drop[-1].end_offset)
                for o in [o for o in model if o < drop[-1].end_offset]:
                    del model[o]
        else:
            part.vacuum(now_ms=now, delay_ms=500)
        check(part, model, compacted, versions)


def check(part, model, compacted, versions):
    m = part.snapshot()
    assert m.version >= versions[-1]  # an op that committed nothing keeps the version
    versions.append(m.version)
    t = part.read_table(m.log_start_offset)
    offsets = t.column("offset").to_pylist()
    assert all(m.log_start_offset <= o < m.next_offset for o in offsets)
    assert offsets == sorted(set(offsets))
    if not compacted:
        assert offsets == list(range(m.log_start_offset, m.next_offset))
    assert dict(zip(offsets, t.column("value").to_pylist())) == model
    for s in m.segments:
        assert part.store.exists(f"{part.folder}/{s.file}"), s.file
    tiles = [(s.base_offset, s.end_offset) for s in m.segments]
    assert all(a[1] <= b[0] for a, b in zip(tiles, tiles[1:]))  # sorted, no overlap
    # A version below vacuum's floor may be gone, or kept only as the carrier of a live
    # segment (its deltas' base then deleted): versions from the floor on must read.
    floor = m.version - part.manifest_versions_retained
    floor = max(floor - floor % CHECKPOINT_INTERVAL, 0)
    history = [part.version(v).version for v in range(floor, m.version + 1)
               if part.store.exists(part.versions.path(v))]
    assert history == sorted(set(history)) and history[-1] == m.version
    assert Log(part.store).partition("p", 0).snapshot() == m  # no cache


def test_invariants(backend, request, tmp_path):
    @settings(max_examples=EXAMPLES[backend], deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(program=programs)
    def prop(program):
        run_program(fresh_log(backend, request, tmp_path), program)

    prop()


def test_versions_strictly_increase_per_commit(log):
    log.create_topic("v")
    part = log.partition("v", 0)
    w = part.claim("w")
    seen = [part.snapshot().version]
    for i in range(5):
        seen.append(w.append(pa.table({"value": [b"x"]})).version)
        seen.append(part.claim(f"c{i}").epoch and part.snapshot().version)
        w = part.writer()
    assert seen == list(range(seen[0], seen[0] + len(seen)))


def test_vacuum_keeps_every_version_from_its_floor_readable(tmp_path):
    """What the property found (a full run, 2026-11-29): after a vacuum the versions
    below its floor that carry live segments stay as files, but their delta chains'
    bases are gone; a version from the floor on must still read."""
    one = ("append", 1, False)
    claim = ("claim", 0, False)
    program = [one] * 5 + [claim] + [one] * 6 + [claim] + [one] * 3 + [claim, ("vacuum", 0, False)]
    for url in (str(tmp_path / "store"), f"memory://prop-{uuid.uuid4().hex}"):
        run_program(open_log(url, manifest_versions_retained=2), program)
