"""Random transactional histories with compaction and roll-up against a simple model.

Two transactional producers and plain appends write keyed records; transactions
commit or abort; cleaner passes (time moving forward) and roll-ups run between
them. After every step, against the model of what was written:

* read_committed sees only plain and committed records below the last stable
  offset (not a committed transaction's discarded segments, ``txn_discard``),
  and each key's latest value there is the model's (compaction only ever
  removes superseded records, aborted ones and expired tombstones);
* read_uncommitted never sees an aborted record below the cleaner's checkpoint;
* a roll-up changes neither view;
* a transaction with a record left in the log still has its marker (if it ended).
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.cleaner import compact_partition
from compaction.rollup import rollup_partition
from log_layout import open_log
from log_layout.txn_discard import discard_segments
from tests.compaction.helpers import T0
from tests.conftest import empty_memory_filesystem
from tests.compaction.txn_history import RC, RU, Txn, latest, plain, view

pairs = st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=1, max_size=4)
plain_step = st.tuples(st.just("plain"), st.just(0), pairs)
send_step = st.tuples(st.just("send"), st.integers(0, 1), pairs)
end_step = st.tuples(st.just("end"), st.integers(0, 1), st.booleans())
compact_step = st.tuples(st.just("compact"), st.integers(0, 1500), st.booleans())
# a failed Spark task's segments, discarded from the open transaction (txn_discard)
discard_step = st.tuples(st.just("discard"), st.integers(0, 1), st.integers(0, 3))
# transactions and cleaner passes drawn more often: a marker's rules need both
step = st.one_of(plain_step, send_step, send_step, end_step, end_step, compact_step,
                 compact_step, discard_step,
                 st.tuples(st.just("rollup"), st.just(0), st.just(False)))


class Model:
    """What was written: every record as (offset, key, value, producer, txn number)."""

    def __init__(self) -> None:
        self.records: list[tuple[int, str, str | None, int, int]] = []
        self.status: dict[tuple[int, int], str] = {}  # (producer, txn) -> open/commit/abort
        self.txn = [0, 0]
        self.first: dict[int, int] = {}  # producer -> first offset of its open transaction
        self.marker: dict[tuple[int, int], int] = {}  # (producer, txn) -> its marker's offset
        self.sends: dict[int, list[tuple[int, int]]] = {}  # producer -> its open segments
        self.discarded: set[int] = set()  # offsets of discarded segments

    def committed_view(self) -> list[tuple[int, str, str | None]]:
        lso = min(self.first.values(), default=1 << 62)
        return [(o, k, v) for o, k, v, p, t in self.records
                if o < lso and o not in self.discarded
                and (p < 0 or self.status[(p, t)] == "commit")]

    def aborted_values(self) -> dict[str, int]:
        return {v: o for o, _, v, p, t in self.records if v is not None and p >= 0
                and (self.status[(p, t)] == "abort" or o in self.discarded)}


def _pairs(spec, n: int) -> list[tuple[str, str | None]]:
    return [(f"k{k}", None if dead else f"v{n}-{i}") for i, (k, dead) in enumerate(spec)]


histories = given(steps=st.lists(step, min_size=3, max_size=24),
                  retention=st.sampled_from([0, 700]),
                  segment_bytes=st.sampled_from([90, 1 << 20]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@histories
def test_random_transactional_histories(steps, retention, segment_bytes):
    """40 histories for make test-fast; the slow test below runs 150."""
    check_history(steps, retention, segment_bytes)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@histories
def test_random_transactional_histories_long(steps, retention, segment_bytes):
    check_history(steps, retention, segment_bytes)


def check_history(steps, retention, segment_bytes):
    empty_memory_filesystem()  # the last history's files would slow every listing
    log = open_log(f"memory://sparklog-{uuid.uuid4().hex}")
    log.create_topic("m", {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0,
                           "delete.retention.ms": retention, "segment.bytes": segment_bytes})
    plog, config = log.partition("m", 0), log.topic("m").config
    producers = [Txn(log, f"p{i}", "m", T0) for i in range(2)]
    model, now = Model(), T0
    for n, (op, arg, spec) in enumerate(steps):
        if op == "plain" or op == "send":
            rows = _pairs(spec, n)
            if op == "plain":
                base, pid, txn = plain(log, "m", rows, now), -1, -1
            else:
                pid, txn = arg, model.txn[arg]
                base = producers[pid].send(rows, now)
                model.first.setdefault(pid, base)
                model.sends.setdefault(pid, []).append((base, base + len(rows) - 1))
                model.status[(pid, txn)] = "open"
            model.records += [(base + i, k, v, pid, txn) for i, (k, v) in enumerate(rows)]
        elif op == "end" and arg in model.first:
            model.marker[(arg, model.txn[arg])] = plog.high_watermark()
            producers[arg].end(spec, now)
            model.status[(arg, model.txn[arg])] = "commit" if spec else "abort"
            model.txn[arg] += 1
            del model.first[arg], model.sends[arg]
        elif op == "discard" and arg in model.first:
            lo, hi = model.sends[arg][spec % len(model.sends[arg])]
            discard_segments(plog, producers[arg].pid, producers[arg].epoch, [(lo, hi)],
                             now_ms=now)
            model.discarded.update(range(lo, hi + 1))
        elif op == "compact":
            now += arg
            compact_partition(plog, config, now, force=spec)
        elif op == "rollup":
            before = view(plog, RC), view(plog, RU)
            rollup_partition(plog, config, now)
            assert (view(plog, RC), view(plog, RU)) == before
        _check(plog, model)


def _check(plog, model: Model) -> None:
    committed = model.committed_view()
    assert set(view(plog, RC)) <= set(committed)  # nothing aborted, open or made up
    assert latest(plog) == {k: v for k, v in dict((k, v) for _, k, v in committed).items()
                            if v is not None}
    m = plog.snapshot()
    aborted = model.aborted_values()
    uncommitted = view(plog, RU)
    assert not [v for _, _, v in uncommitted if aborted.get(v, 1 << 62) < m.cleaned_offset]
    # an ended transaction with a record left in the log keeps its marker
    markers = {plog.read_segment(s).column("offset")[0].as_py() for s in m.segments
               if s.control}
    left = {o for o, _, _ in uncommitted}
    for o, _, _, p, t in model.records:
        if o in left and (p, t) in model.marker:
            assert model.marker[(p, t)] in markers, (p, t)
