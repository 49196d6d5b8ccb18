"""A hypothesis state machine of transactional producers against a simple model.

Producers (two transactional ids) begin transactions by writing to partitions,
commit or abort them, crash in the middle of a commit (the store fails at the n-th
write, then ``recover`` runs), are fenced by a new ``init_transactions`` (their
zombie's writes refused) or by the timeout aborter; a plain producer writes
between them. After every step, read_uncommitted and read_committed readers of
every partition and the last stable offset must match the model: a list of
records per partition, each with the transaction it belongs to, and each
transaction open, committed or aborted; markers take one offset each.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from log_layout import InvalidProducerEpoch, Log, ProducerFenced, open_log, transactions as tx
from log_layout.commit import wall_clock_ms
from tests.log_layout.txn_helpers import (Crash, crashing_log, plain_append, txn_append,
                                          values)

TOPIC, PARTITIONS, TIDS = "m", 2, ("a", "b")


class Transactions(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.log = open_log(f"memory://txmodel-{uuid.uuid4().hex}")
        self.log.create_topic(TOPIC, {"partitions": PARTITIONS})
        #: per partition: [offset, value, txn key or None]; the next offset
        self.records: list[list[tuple[int, bytes, tuple | None]]] = [[] for _ in
                                                                       range(PARTITIONS)]
        self.next = [0] * PARTITIONS
        #: per partition: producer id -> (first offset, txn key) of its open transaction
        self.open: list[dict[int, tuple[int, tuple]]] = [{} for _ in range(PARTITIONS)]
        self.status: dict[tuple, str] = {}     # txn key -> open | committed | aborted
        self.handle: dict[str, tuple[int, int]] = {}  # tid -> (pid, epoch) of its producer
        self.fenced: set[str] = set()          # tids whose producer the aborter fenced
        self.current: dict[str, tuple] = {}    # tid -> its ongoing txn key
        self.zombies: list[tuple[str, int, int]] = []
        self.counter = 0

    def _value(self) -> bytes:
        self.counter += 1
        return b"v%d" % self.counter

    def _end_in_model(self, tid: str, commit: bool) -> None:
        key = self.current.pop(tid, None)
        if key is None:
            return
        self.status[key] = "committed" if commit else "aborted"
        pid = self.handle[tid][0]
        for p in range(PARTITIONS):
            if pid in self.open[p]:
                del self.open[p][pid]
                self.next[p] += 1  # the marker's offset

    @rule(tid=st.sampled_from(TIDS))
    def init(self, tid):
        if tid in self.handle:
            self._end_in_model(tid, commit=False)  # an ongoing transaction is aborted
            self.zombies.append((tid, *self.handle[tid]))
        pid, epoch = tx.init_transactions(self.log, tid, 60_000)
        if tid in self.handle:
            assert pid == self.handle[tid][0] and epoch > self.handle[tid][1]
        self.handle[tid] = (pid, epoch)
        self.fenced.discard(tid)

    @precondition(lambda self: self.handle)
    @rule(data=st.data(), partition=st.integers(0, PARTITIONS - 1), n=st.integers(1, 3))
    def write(self, data, partition, n):
        tid = data.draw(st.sampled_from(sorted(self.handle)))
        pid, epoch = self.handle[tid]
        if tid in self.fenced:
            with pytest.raises(ProducerFenced):
                tx.add_partitions(self.log, tid, pid, epoch, [(TOPIC, partition)])
            return
        tx.add_partitions(self.log, tid, pid, epoch, [(TOPIC, partition)])
        vals = [self._value() for _ in range(n)]
        base = txn_append(self.log, TOPIC, partition, pid, epoch, vals)
        assert base == self.next[partition]
        key = self.current.setdefault(tid, (tid, self.counter))
        self.status[key] = "open"
        self.open[partition].setdefault(pid, (base, key))
        self.records[partition] += [(base + i, v, key) for i, v in enumerate(vals)]
        self.next[partition] += n

    @rule(partition=st.integers(0, PARTITIONS - 1), n=st.integers(1, 3))
    def plain(self, partition, n):
        vals = [self._value() for _ in range(n)]
        base = plain_append(self.log, TOPIC, partition, vals)
        assert base == self.next[partition]
        self.records[partition] += [(base + i, v, None) for i, v in enumerate(vals)]
        self.next[partition] += n

    @precondition(lambda self: self.handle)
    @rule(data=st.data(), commit=st.booleans())
    def end(self, data, commit):
        tid = data.draw(st.sampled_from(sorted(self.handle)))
        pid, epoch = self.handle[tid]
        if tid in self.fenced:
            with pytest.raises(ProducerFenced):
                tx.end_transaction(self.log, tid, pid, epoch, commit)
            return
        tx.end_transaction(self.log, tid, pid, epoch, commit)
        self._end_in_model(tid, commit)

    @precondition(lambda self: self.current.keys() - self.fenced)
    @rule(data=st.data(), commit=st.booleans(), writes=st.integers(0, 5))
    def crash_in_end(self, data, commit, writes):
        tid = data.draw(st.sampled_from(sorted(self.current.keys() - self.fenced)))
        pid, epoch = self.handle[tid]
        try:
            tx.end_transaction(crashing_log(self.log, writes), tid, pid, epoch, commit)
        except Crash:
            state = tx.recover(self.log, tid)
            if state == "Ongoing":
                return  # crashed before the commit point: nothing happened
        self._end_in_model(tid, commit)

    @precondition(lambda self: self.zombies)
    @rule(data=st.data(), partition=st.integers(0, PARTITIONS - 1))
    def zombie(self, data, partition):
        tid, pid, epoch = data.draw(st.sampled_from(self.zombies))
        with pytest.raises(ProducerFenced):
            tx.add_partitions(self.log, tid, pid, epoch, [(TOPIC, partition)])
        with pytest.raises(ProducerFenced):
            tx.end_transaction(self.log, tid, pid, epoch, True)
        # A partition that knows a newer epoch of the producer refuses its records (one
        # that never heard of it cannot: the transaction log's refusal above is the fence)
        if self._marked(pid, epoch, partition):
            with pytest.raises(InvalidProducerEpoch):
                txn_append(self.log, TOPIC, partition, pid, epoch, [b"zombie"])

    def _marked(self, pid, epoch, partition):
        entry = self.log.partition(TOPIC, partition).snapshot().producers.get(pid)
        return entry is not None and entry.epoch > epoch

    @rule()
    def expire(self):
        aborted = tx.abort_expired(self.log, wall_clock_ms() + 10**9)
        assert sorted(aborted) == sorted(self.current)
        for tid in list(self.current):
            self._end_in_model(tid, commit=False)
            self.fenced.add(tid)

    @invariant()
    def readers_agree_with_the_model(self):
        fresh = Log(self.log.store)  # reads every manifest from the store: deltas, formats
        for p in range(PARTITIONS):
            part = self.log.partition(TOPIC, p)
            assert fresh.partition(TOPIC, p).snapshot() == part.snapshot()
            lso = min((first for first, _ in self.open[p].values()), default=self.next[p])
            assert (part.high_watermark(), part.last_stable_offset()) == (self.next[p], lso)
            assert values(self.log, TOPIC, p) == [v for _, v, _ in self.records[p]]
            assert values(self.log, TOPIC, p, "read_committed") == [
                v for off, v, key in self.records[p]
                if off < lso and (key is None or self.status[key] == "committed")]


#: 20 programs for make test-fast; the slow TestTransactionsLong runs 60
TestTransactions = Transactions.TestCase
TestTransactions.settings = settings(max_examples=20, stateful_step_count=30, deadline=None,
                                     database=None)


@pytest.mark.slow
class TestTransactionsLong(Transactions.TestCase):
    settings = settings(max_examples=60, stateful_step_count=30, deadline=None, database=None)
