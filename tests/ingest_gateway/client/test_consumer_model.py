"""Model-based test of the Consumer's delivery guarantee (issue 11).

A hypothesis state machine drives one group over a 4-partition topic with any
interleaving of ``poll``, ``next()`` on the iterator, ``commit``, a second
member joining or leaving, and new records produced, under the eager ``range``
and the incremental ``cooperative-sticky`` protocols. The model says what every
hand-out must be:

* a member that is given a partition (``on_assign``) starts it at the group's
  committed offset (the log start without one: ``auto_offset_reset="earliest"``);
* while it owns it (until ``on_revoke``), it hands out that partition's log in
  order, each record once: no duplicate, no gap, the value produced at that offset;
* no partition has two owners at once, and each member's model ownership is
  its ``assignment()``;
* ``commit()`` stores exactly each owned partition's offset after the last
  record handed out;
* at the end, once the group settles, the owners read every partition to its end.

Run in gateway mode (a real gateway subprocess: HTTP fetch and group routes)
and in direct mode (segments read from the store, membership through an
in-process GroupCoordinator whose clock stands still, so no session expires).
The normal run is small and derandomized; ``-m slow`` runs a bigger one, and
``SPARKLOG_MODEL_SCALE=N`` multiplies its examples by N (the examples are derandomized:
the same every run, so a bigger count finds more only once; 2.5 is the size these ran
at before the suite had to fit in 20 minutes).
"""

from __future__ import annotations

import base64
import itertools
import os
import threading
import uuid
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule, run_state_machine_as_test)

from ingest_gateway.client import Consumer
from ingest_gateway.server.groups.coordinator import GroupCoordinator
from log_layout import open_log
from tests.ingest_gateway.consumers import drive
from jobs.gateway_process import GatewayProcess

PARTITIONS = 4
SAFETY_S = 20.0  # bound on any one wait: a lost record fails the test instead of hanging


def value(partition: int, offset: int) -> bytes:
    return b"%d-%d" % (partition, offset)


# -- the two modes ---------------------------------------------------------------------------
class GatewayMode:
    """Records and membership through a real gateway."""

    def __init__(self, gw: GatewayProcess, log):
        self.gw, self.log = gw, log

    def new_topic(self) -> str:
        name = f"m-{uuid.uuid4().hex[:10]}"
        self.log.create_topic(name, {"partitions": PARTITIONS})
        return name

    def produce(self, topic: str, partition: int, first: int, n: int) -> None:
        records = [{"value": base64.b64encode(value(partition, o)).decode()}
                   for o in range(first, first + n)]
        status, body, _ = self.gw.request(
            "POST", f"/topics/{topic}/partitions/{partition}", body={"records": records},
            content_type="application/vnd.kafka.binary.v2+json")
        assert status == 200, body
        assert [o["offset"] for o in body["offsets"]] == list(range(first, first + n))

    def consumer(self, **kw: Any) -> Consumer:
        return Consumer(gateway=self.gw.url, session_timeout_ms=10_000, **kw)

    def generation(self, group: str) -> int:
        status, body, _ = self.gw.request("GET", f"/groups/{group}")
        assert status == 200, body
        return body["generation"]

    def close(self) -> None:
        pass


class DirectMode:
    """Records read from the store; membership through an in-process coordinator."""

    def __init__(self, log):
        self.log = log
        # a clock that stands still: sessions and rebalances never time out, so
        # only the machine's own steps change the group
        self.coordinator = GroupCoordinator(log, now_ms=lambda: 1_000_000)
        self.writers: dict[tuple[str, int], Any] = {}

    def new_topic(self) -> str:
        name = f"m-{uuid.uuid4().hex[:10]}"
        self.log.create_topic(name, {"partitions": PARTITIONS})
        return name

    def produce(self, topic: str, partition: int, first: int, n: int) -> None:
        w = self.writers.get((topic, partition))
        if w is None:
            w = self.writers[(topic, partition)] = self.log.partition(topic, partition).claim("t")
        res = w.append(pa.table({"key": [None] * n,
                                 "value": [value(partition, o) for o in range(first, first + n)]}))
        assert res.base_offset == first, res

    def consumer(self, **kw: Any) -> Consumer:
        return Consumer(log=self.log, coordinator=self.coordinator, session_timeout_ms=10_000,
                        **kw)

    def generation(self, group: str) -> int:
        return self.coordinator.describe(group).generation

    def close(self) -> None:
        self.writers.clear()


@pytest.fixture(scope="session")
def gateway_mode(shared_gateway, shared_log):
    """The session's shared gateway (topics and groups here are named uniquely)."""
    return GatewayMode(shared_gateway, shared_log)


@pytest.fixture
def direct_mode(tmp_path):
    mode = DirectMode(open_log(str(tmp_path / "store")))
    yield mode
    mode.close()


# -- the model ---------------------------------------------------------------------------------
class Member:
    """A consumer and what the model expects of it: partition -> next offset it hands out."""

    def __init__(self, name: str, consumer: Consumer):
        self.name, self.c = name, consumer
        self.next: dict[int, int] = {}
        self._it = None

    def it(self):
        if self._it is None:
            self._it = iter(self.c)
        return self._it


class ConsumerModel(RuleBasedStateMachine):
    mode: Any = None  # set by run(): a GatewayMode or a DirectMode

    def __init__(self):
        super().__init__()
        self.topic = self.mode.new_topic()
        self.group = f"g-{uuid.uuid4().hex[:10]}"
        self.log_end = [0] * PARTITIONS
        self.committed: dict[int, int] = {}  # what the group's committed offsets must be
        self.members: dict[str, Member] = {}
        self.strategy = "range"
        # callbacks and checks run on the iterating worker and on this thread
        self.lock = threading.RLock()

    # -- helpers ---------------------------------------------------------------------------
    def _join(self, name: str, max_poll_records: int) -> None:
        c = self.mode.consumer(client_id=name, group_id=self.group, auto_offset_reset="earliest",
                               enable_auto_commit=False, heartbeat_interval_ms=20,
                               fetch_max_wait_ms=20, max_poll_records=max_poll_records,
                               partition_assignment_strategy=self.strategy)
        m = self.members[name] = Member(name, c)
        c.subscribe([self.topic], on_assign=lambda tps: self._assigned(m, tps),
                    on_revoke=lambda tps: self._revoked(m, tps))

    def _assigned(self, m: Member, tps) -> None:
        with self.lock:
            for topic, p in tps:
                assert topic == self.topic
                owners = [o.name for o in self.members.values() if p in o.next]
                assert not owners, f"{m.name} given partition {p} still owned by {owners}"
                m.next[p] = self.committed.get(p, 0)

    def _revoked(self, m: Member, tps) -> None:
        with self.lock:
            for _, p in tps:
                assert p in m.next, f"{m.name} lost partition {p} it did not own: {m.next}"
                del m.next[p]

    def _check(self, m: Member, records) -> None:
        with self.lock:
            for r in records:
                p = r.partition
                assert r.topic == self.topic and p in m.next, \
                    f"{m.name} handed out {r} of a partition it does not own: {m.next}"
                assert r.offset == m.next[p], \
                    f"{m.name} handed out {p}@{r.offset}, expected {p}@{m.next[p]} (gap or repeat)"
                assert r.value == value(p, r.offset) and r.offset < self.log_end[p], r
                m.next[p] += 1

    def _sink(self, c: Consumer, records) -> None:
        self._check(self.members[c.client_id], records)

    def _produce(self, partition: int, n: int) -> None:
        self.mode.produce(self.topic, partition, self.log_end[partition], n)
        self.log_end[partition] += n

    # -- rules -------------------------------------------------------------------------------
    @initialize(max_poll_records=st.sampled_from([3, 7, 500]),
                strategy=st.sampled_from(["range", "cooperative-sticky"]))
    def first_member(self, max_poll_records, strategy):
        self.strategy = strategy  # eager, or incremental: kept partitions keep their position
        self._join("a", max_poll_records)

    @rule(partition=st.integers(0, PARTITIONS - 1), n=st.integers(1, 25))
    def produce(self, partition, n):
        self._produce(partition, n)

    @rule(name=st.sampled_from(["a", "b"]), max_records=st.integers(1, 40))
    def poll(self, name, max_records):
        m = self.members.get(name)
        if m is not None:
            self._check(m, m.c.poll(0.05, max_records))

    @rule(name=st.sampled_from(["a", "b"]), k=st.integers(1, 12))
    def iterate(self, name, k):
        """``next()`` k times; the others poll meanwhile so a pending rebalance completes."""
        m = self.members.get(name)
        if m is None:
            return
        self._ensure_available(k)
        failure: list[BaseException] = []

        def work():
            try:
                for _ in range(k):
                    self._check(m, [next(m.it())])
            except BaseException as e:  # noqa: BLE001 - re-raised on the machine's thread
                failure.append(e)

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        others = [o.c for o in self.members.values() if o is not m]
        drive(others, lambda: not worker.is_alive(), f"{k} records from {name}'s iterator",
              sink=self._sink, timeout=SAFETY_S, poll_s=0.02)
        worker.join()
        if failure:
            raise failure[0]

    def _ensure_available(self, k: int) -> None:
        """Produce so that whatever partition the member gets, k records wait there
        (at least one new one everywhere: a skip then shows as a gap, not a wait)."""
        with self.lock:
            for p in range(PARTITIONS):
                start = max([self.committed.get(p, 0)] + [o.next[p] for o in self.members.values()
                                                          if p in o.next])
                self._produce(p, max(1, start + k - self.log_end[p]))

    @rule(name=st.sampled_from(["a", "b"]))
    def commit(self, name):
        m = self.members.get(name)
        if m is None:
            return
        m.c.commit()
        with self.lock:
            self.committed.update(m.next)
        self._check_committed(m.c)

    def _check_committed(self, c: Consumer) -> None:
        actual = {p: c.committed((self.topic, p)) for p in range(PARTITIONS)}
        assert actual == {p: self.committed.get(p) for p in range(PARTITIONS)}

    @precondition(lambda self: "b" not in self.members)
    @rule(max_poll_records=st.sampled_from([3, 7, 500]))
    def second_joins(self, max_poll_records):
        self._join("b", max_poll_records)

    @precondition(lambda self: "b" in self.members)
    @rule()
    def second_leaves(self):
        self.members.pop("b").c.close()

    # -- invariants -----------------------------------------------------------------------------
    @invariant()
    def ownership_is_the_assignment(self):
        with self.lock:
            for m in self.members.values():
                assert set(m.next) == {p for _, p in m.c.assignment()}, (m.name, m.next)

    def teardown(self):
        """Settle the group; every partition must then be read to its end, once."""
        try:
            members = list(self.members.values())
            if members:
                # one more record everywhere: a consumer that skipped to the end of a
                # partition then shows a gap at once, rather than a wait for records
                # that never come
                for p in range(PARTITIONS):
                    self._produce(p, 1)
                drive([m.c for m in members], self._read_to_end,
                      "the owners to read every partition to its end", sink=self._sink,
                      timeout=SAFETY_S, poll_s=0.02)
                for m in members:
                    self.commit(m.name)
                assert self.committed == dict(enumerate(self.log_end))
        finally:
            for m in self.members.values():
                m.c.close()

    def _read_to_end(self) -> bool:
        with self.lock:
            owned = dict(itertools.chain.from_iterable(m.next.items()
                                                       for m in self.members.values()))
            return owned == dict(enumerate(self.log_end))


# -- what the model found, as plain regression tests ----------------------------------------------
@pytest.mark.parametrize("mode", ["gateway_mode", "direct_mode"])
def test_cooperative_commit_right_after_rejoining_is_accepted(mode, request):
    """A cooperative member rejoins keeping its partitions; when that rejoin completes the
    next generation, a commit before the next poll was refused as a zombie's
    (IllegalGeneration, the member then treated as lost): it must be accepted."""
    mode = request.getfixturevalue(mode)
    topic, group = mode.new_topic(), f"coop-{uuid.uuid4().hex[:8]}"
    lost: list = []
    kw = dict(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
              heartbeat_interval_ms=20, fetch_max_wait_ms=20,
              partition_assignment_strategy="cooperative-sticky")
    a = mode.consumer(client_id="a", **kw)
    b = mode.consumer(client_id="b", **kw)
    try:
        a.subscribe([topic], on_lost=lost.append)
        drive([a], lambda: len(a.assignment()) == PARTITIONS, "a to own every partition")
        before = mode.generation(group)
        b.subscribe([topic])  # b waits for a: the group prepares the next generation
        # a's rejoin (inside a poll) completes it; a adopts it only at a later poll
        drive([a], lambda: mode.generation(group) > before, "a to rejoin", poll_s=0)
        a.commit()
        assert {p: a.committed((topic, p)) for p in range(PARTITIONS)} == \
            dict.fromkeys(range(PARTITIONS), 0)
        drive([a, b], lambda: len(a.assignment()) == len(b.assignment()) == PARTITIONS // 2,
              "the group to balance")
        assert lost == []
    finally:
        a.close()
        b.close()


#: the long runs' examples are multiplied by this (see the module's docstring)
SCALE = float(os.environ.get("SPARKLOG_MODEL_SCALE", "1"))


def run(mode, *, examples: int, steps: int) -> None:
    machine = type("Model", (ConsumerModel,), {"mode": mode})
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=steps, derandomize=True, database=None,
        deadline=None, report_multiple_bugs=False,
        suppress_health_check=[HealthCheck.too_slow]))


def test_model_gateway_mode(gateway_mode):
    run(gateway_mode, examples=12, steps=15)


def test_model_direct_mode(direct_mode):
    run(direct_mode, examples=15, steps=15)


@pytest.mark.slow
def test_model_gateway_mode_long(gateway_mode):
    run(gateway_mode, examples=round(60 * SCALE), steps=40)


@pytest.mark.slow
def test_model_direct_mode_long(direct_mode):
    run(direct_mode, examples=round(120 * SCALE), steps=40)
