"""A model of the hot tier: two gateways' journals and a cold writer take turns leading
two partitions while roll-up, retention (DeleteRecords), compaction, vacuum and the
sweeper run; after every step a fresh reader sees exactly the model's records (a list
per partition), and a fenced writer never gets a record in. A journal has several
uploads in flight: a partition may be in several at once (each flush planned on the
ones before), and when one of them fails, those planned after it fail too and the
next append follows what was committed."""

from __future__ import annotations

import itertools
import shutil
import tempfile
import threading

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from compaction.cleaner import compact_partition
from compaction.rollup import rollup_partition
from log_layout import Fenced, open_log, wall_clock_ms
from log_layout.delete_records import delete_records
from log_layout.hot_sweep import MIN_DELAY_MS, sweep
from log_layout.hot_writer import JournalWriter, PredecessorFailed

PARTITIONS = 2
KEYS = [b"a", b"b", b"c"]
WHO = ("A", "B", "cold")
#: a journal's uploads in flight: a partition may be in this many flushes at once
UPLOADS = 3
#: a journal's checkpoint every this many entries (and when the ``checkpoint`` rule says)
CHECKPOINT_ENTRIES = 3


class HotModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp()
        self.url = f"file://{self.root}"
        first = open_log(self.url)
        first.create_topic("t", {"partitions": PARTITIONS, "cleanup.policy": "compact,delete",
                                 "min.cleanable.dirty.ratio": 0.0})
        #: one Log per gateway (its own process view) and its journal
        self.logs = {who: open_log(self.url) for who in WHO}
        self.journals = {who: JournalWriter(self.logs[who].journals, f"gw-{who}",
                                            uploads_in_flight=UPLOADS,
                                            checkpoint_entries=CHECKPOINT_ENTRIES)
                         for who in ("A", "B")}
        self.writers: dict[int, object] = {}
        self.fenced: list[object] = []
        #: partition -> [(offset, key, value)] of records not deleted; log start; compacted
        self.model = {p: [] for p in range(PARTITIONS)}
        self.next_offset = {p: 0 for p in range(PARTITIONS)}
        self.compacted = {p: False for p in range(PARTITIONS)}
        self.values = itertools.count()
        self.now = wall_clock_ms()

    def teardown(self) -> None:
        for journal in self.journals.values():
            journal.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(p=st.integers(0, PARTITIONS - 1), who=st.sampled_from(WHO))
    def claim(self, p, who):
        old = self.writers.get(p)
        plog = self.logs[who].partition("t", p)
        self.writers[p] = plog.claim(f"gw-{who}", self.journals.get(who))
        if old is not None:
            self.fenced.append(old)

    @precondition(lambda self: self.writers)
    @rule(data=st.data(), n=st.integers(1, 3))
    def append(self, data, n):
        p = data.draw(st.sampled_from(sorted(self.writers)))
        keys = data.draw(st.lists(st.sampled_from(KEYS), min_size=n, max_size=n))
        values = [f"v{next(self.values)}".encode() for _ in keys]
        result = self.writers[p].append(pa.table({"key": keys, "value": values}))
        assert result.base_offset == self.next_offset[p]
        for i, (k, v) in enumerate(zip(keys, values)):
            self.model[p].append((result.base_offset + i, k, v))
        self.next_offset[p] += n

    @precondition(lambda self: any(w.journal is not None for w in self.writers.values()))
    @rule(data=st.data(), k=st.integers(2, UPLOADS), fail=st.sampled_from([None, 1, 2, 3]))
    def pipelined_appends(self, data, k, fail):
        """``k`` appends of a hot partition, each in its own flush, all uploads held out
        at once; the ``fail``-th upload (None: none) fails: the ones before commit in
        order, it fails, the ones after fail with PredecessorFailed (nothing of them
        written, so a retry is neither a gap nor a duplicate)."""
        p = data.draw(st.sampled_from(sorted(p for p, w in self.writers.items()
                                             if w.journal is not None)))
        w = self.writers[p]
        journal = w.journal
        real = journal._upload
        gate, cond, out = threading.Event(), threading.Condition(), [0, 0]  # started, at most

        def held(flush) -> None:
            with cond:
                out[0] += 1
                n = out[0]
                cond.notify_all()
            assert gate.wait(30)
            if n == fail:
                raise OSError("the store refused this object")
            real(flush)

        journal._upload = held
        try:
            futures = []
            for i in range(k):
                values = [f"v{next(self.values)}".encode()]
                futures.append((values, w.append_async(pa.table({"key": [KEYS[i % 3]],
                                                                 "value": values}))))
                with cond:
                    assert cond.wait_for(lambda: out[0] == i + 1, 30)
            gate.set()  # k uploads of the partition were out at once
            for i, (values, fut) in enumerate(futures, start=1):
                if fail is None or i < fail:
                    result = fut.result(timeout=60)
                    assert result.base_offset == self.next_offset[p]
                    self.model[p].append((result.base_offset, KEYS[(i - 1) % 3], values[0]))
                    self.next_offset[p] += 1
                else:
                    with pytest.raises(OSError if i == fail else PredecessorFailed):
                        fut.result(timeout=60)
        finally:
            gate.set()
            journal._upload = real

    @precondition(lambda self: self.fenced)
    @rule(data=st.data())
    def fenced_append(self, data):
        w = data.draw(st.sampled_from(self.fenced))
        with pytest.raises(Fenced):
            w.append(pa.table({"key": [b"z"], "value": [b"must not land"]}))

    @rule(who=st.sampled_from(("A", "B")))
    def checkpoint(self, who):
        """The journal's checkpoint now (also written every CHECKPOINT_ENTRIES by itself)."""
        self.journals[who].checkpoints.write(force=True)

    @rule(p=st.integers(0, PARTITIONS - 1))
    def roll_up(self, p):
        log = self.logs["cold"]
        rollup_partition(log.partition("t", p), log.topic("t").config, self.now)

    @rule(p=st.integers(0, PARTITIONS - 1), k=st.integers(0, 3))
    def delete_records(self, p, k):
        before = min(self.next_offset[p], (self.model[p][0][0] if self.model[p] else 0) + k)
        delete_records(self.logs["cold"].partition("t", p), before)
        self.model[p] = [r for r in self.model[p] if r[0] >= before]

    @rule(p=st.integers(0, PARTITIONS - 1))
    def compact(self, p):
        log = self.logs["cold"]
        compact_partition(log.partition("t", p), log.topic("t").config, self.now, force=True)
        self.compacted[p] = True

    @rule()
    def vacuum_and_sweep(self):
        self.now += 2 * MIN_DELAY_MS
        log = self.logs["cold"]
        for p in range(PARTITIONS):
            log.partition("t", p).vacuum(now_ms=self.now, delay_ms=MIN_DELAY_MS)
        sweep(log, now_ms=self.now, delay_ms=MIN_DELAY_MS)

    @invariant()
    def a_fresh_reader_sees_the_model(self):
        reader = open_log(self.url)
        for p in range(PARTITIONS):
            plog = reader.partition("t", p)
            assert plog.high_watermark() == self.next_offset[p]
            t = plog.read_table(plog.log_start_offset())
            got = list(zip(t.column("offset").to_pylist(), t.column("key").to_pylist(),
                           t.column("value").to_pylist()))
            if not self.compacted[p]:
                assert got == self.model[p]
                continue
            # compaction keeps a subset, in order, and each key's latest record
            assert set(got) <= set(self.model[p])
            assert [r[0] for r in got] == sorted(r[0] for r in got)
            latest = {k: (o, k, v) for o, k, v in self.model[p]}
            assert set(latest.values()) <= set(got)

    @invariant()
    def a_reader_from_a_checkpoint_sees_what_the_entries_say(self):
        """A fresh reader that takes the journals' checkpoints and one that reads every
        entry (as an older sparklog does) merge each partition to the same state."""
        with_checkpoints, entries_only = open_log(self.url), open_log(self.url)
        for journal in (j.name for j in self.journals.values()):
            entries_only.journals.checkpoints[journal] = (float("inf"), None)  # never read
        for p in range(PARTITIONS):
            assert with_checkpoints.partition("t", p).snapshot() == \
                entries_only.partition("t", p).snapshot()


HotModel.TestCase.settings = settings(max_examples=25, stateful_step_count=25, deadline=None,
                                      derandomize=True,
                                      suppress_health_check=[HealthCheck.too_slow])
test_hot_tier_model = HotModel.TestCase


@pytest.mark.slow
class TestHotTierModelLong(HotModel.TestCase):
    settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow])
