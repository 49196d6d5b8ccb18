"""The Consumer in direct mode (segments read from the store through log_layout),
with group membership through an in-process GroupCoordinator whose clock the
tests drive. The same group semantics over real HTTP are in http/test_fetch_http.py."""

from __future__ import annotations

import functools
import threading
import time

import pyarrow as pa
import pytest

from ingest_gateway.client import (ArrowBatch, Consumer, IllegalState, NoOffsetForPartition,
                                   Record)
from ingest_gateway.errors import UnknownMemberId
from ingest_gateway.server.groups.coordinator import GroupCoordinator
from log_layout import OffsetOutOfRange, UnknownPartition, UnknownTopic
from tests.ingest_gateway import consumers
from tests.clock import Clock


def generation(c: Consumer) -> int:
    """The generation ``c`` was last assigned in (its group metadata)."""
    return c.group_metadata().generation


def wait_until(cond, what: str, timeout: float = 20.0):
    """Wait for a condition with a bound (no sleeping for time to pass)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class Producer:
    """Appends straight through log_layout (the gateway is not under test here)."""

    def __init__(self, log, topic):
        self.log, self.topic, self.writers = log, topic, {}

    def send(self, partition: int, values: list[bytes], *, keys=None, headers=None, ts=None):
        w = self.writers.get(partition)
        if w is None:
            w = self.writers[partition] = self.log.partition(self.topic, partition).claim("test")
        cols = {"key": keys or [None] * len(values), "value": values}
        if headers is not None:
            cols["headers"] = headers
        if ts is not None:
            cols["timestamp"] = pa.array(ts, pa.int64())
        return w.append(pa.table(cols))


@pytest.fixture
def topic(log):
    log.create_topic("t", {"partitions": 2})
    return Producer(log, "t")


def test_assign_poll_reads_every_field(log, topic):
    topic.send(0, [b"a", None], keys=[b"k1", None], ts=[1000, 2000],
               headers=[[{"key": "h", "value": b"x"}], None])
    topic.send(1, [b"c"])
    with Consumer(log=log, auto_offset_reset="earliest") as c:
        c.assign([("t", 0), ("t", 1)])
        got = []
        wait_until(lambda: got.extend(c.poll(0.2)) or len(got) == 3, "3 records")
    by = {(r.partition, r.offset): r for r in got}
    assert by[(0, 0)] == Record("t", 0, 0, 1000, b"k1", b"a", [("h", b"x")])
    assert by[(0, 1)] == Record("t", 0, 1, 2000, None, None, None)  # a tombstone
    assert by[(1, 0)].value == b"c"


def test_iterator_blocks_until_new_records_commit(log, topic):
    c = Consumer(log=log, auto_offset_reset="latest", fetch_max_wait_ms=50)
    c.assign([("t", 0)])
    assert c.position(("t", 0)) == 0
    seen: list[Record] = []
    started = threading.Event()

    def consume():
        it = iter(c)
        started.set()
        for r in it:
            seen.append(r)
            if len(seen) == 3:
                return

    th = threading.Thread(target=consume)
    th.start()
    started.wait(5)
    assert seen == []
    topic.send(0, [b"1", b"2"])
    wait_until(lambda: len(seen) == 2, "the first commit's records")
    topic.send(0, [b"3"])
    th.join(20)
    assert [r.value for r in seen] == [b"1", b"2", b"3"]
    c.close()


def test_batches_are_arrow_and_respect_max_records(log, topic):
    topic.send(0, [b"x%d" % i for i in range(250)])
    with Consumer(log=log, auto_offset_reset="earliest", max_poll_records=100) as c:
        c.assign([("t", 0)])
        b = c.poll_batches(5)
        assert sum(x.records.num_rows for x in b) == 100
        assert isinstance(b[0], ArrowBatch) and isinstance(b[0].records, pa.RecordBatch)
        assert b[0].records.schema.names == ["offset", "timestamp", "key", "value", "headers"]
        assert c.position(("t", 0)) == 100
        it = c.batches()
        rest = [next(it), next(it)]
        offsets = [o for x in rest for o in x.records.column("offset").to_pylist()]
        assert offsets == list(range(100, 250))


def test_seek_positions_pause_and_resume(log, topic):
    topic.send(0, [b"%d" % i for i in range(10)])
    topic.send(1, [b"p1"])
    with Consumer(log=log, auto_offset_reset="earliest") as c:
        c.assign([("t", 0), ("t", 1)])
        c.seek(("t", 0), 7)
        c.pause(("t", 1))
        assert c.paused() == [("t", 1)]
        got = c.poll(5)
        assert [r.offset for r in got] == [7, 8, 9] and {r.partition for r in got} == {0}
        c.resume(("t", 1))
        assert [r.value for r in c.poll(5)] == [b"p1"]
        c.seek_to_beginning(("t", 0))
        assert c.position(("t", 0)) == 0
        c.seek_to_end()
        assert (c.position(("t", 0)), c.position(("t", 1))) == (10, 1)
        assert c.watermarks(("t", 0)) == (0, 10)
        c.seek(("t", 0), 99)  # out of range: auto_offset_reset=earliest starts over at 0
        got = c.poll(5)
        assert [(r.partition, r.offset) for r in got] == [(0, i) for i in range(10)]
        assert c.position(("t", 0)) == 10
        with pytest.raises(IllegalState, match="not assigned"):
            c.seek(("other", 0), 1)
        with pytest.raises(ValueError):
            c.seek(("t", 0), -1)


def test_out_of_range_without_reset_raises_typed_error(log, topic):
    topic.send(0, [b"a"])
    with Consumer(log=log, auto_offset_reset="none") as c:
        c.assign([("t", 0)])
        with pytest.raises(NoOffsetForPartition):
            c.poll(0)
        c.seek(("t", 0), 5)
        with pytest.raises(OffsetOutOfRange) as e:
            c.poll(0)
        assert (e.value.offset, e.value.log_start, e.value.log_end) == (5, 0, 1)


def test_assign_mode_commits_to_the_store_and_resumes(log, topic):
    topic.send(0, [b"%d" % i for i in range(5)])
    with Consumer(log=log, group_id="solo", auto_offset_reset="earliest") as c:
        c.assign([("t", 0)])
        it = iter(c)
        assert [next(it).offset for _ in range(3)] == [0, 1, 2]
        c.commit()  # the three records handed out, not the two still buffered
        assert c.committed(("t", 0)) == 3
    assert log.read_group_offsets("solo")["offsets"]["t"]["0"]["offset"] == 3
    with Consumer(log=log, group_id="solo") as c:
        c.assign([("t", 0)])
        assert [r.offset for r in c.poll(5)] == [3, 4]


def test_bad_arguments_raise_typed_errors(log, topic):
    with pytest.raises(ValueError, match="store= "):
        Consumer()
    with pytest.raises(ValueError, match="auto_offset_reset"):
        Consumer(log=log, auto_offset_reset="middle")
    with pytest.raises(ValueError, match="max_poll_records"):
        Consumer(log=log, max_poll_records=0)
    c = Consumer(log=log)
    with pytest.raises(IllegalState, match="subscribe\\(\\) or assign\\(\\)"):
        c.poll(0)
    with pytest.raises(UnknownTopic):
        c.assign([("nope", 0)])
    with pytest.raises(UnknownPartition):
        c.assign([("t", 5)])
    with pytest.raises(ValueError, match="pair"):
        c.assign(["t"])
    with pytest.raises(IllegalState, match="coordinator"):
        c.subscribe(["t"], group="g")
    c.assign([("t", 0)])
    with pytest.raises(IllegalState, match="needs a group"):
        c.commit()
    c.close()
    with pytest.raises(IllegalState, match="closed"):
        c.poll(0)


# -- groups through an in-process coordinator -------------------------------------------
@pytest.fixture
def group_env(local_log):
    local_log.create_topic("g6", {"partitions": 6})
    clock = Clock()
    coord = GroupCoordinator(local_log, now_ms=clock)
    return local_log, Producer(local_log, "g6"), coord, clock


def member(log, coord, **kw) -> Consumer:
    kw.setdefault("auto_offset_reset", "earliest")
    kw.setdefault("enable_auto_commit", False)
    return Consumer(log=log, coordinator=coord, session_timeout_ms=1000, heartbeat_interval_ms=10,
                    fetch_max_wait_ms=20, **kw)


# in-process members: a short poll keeps the round-robin over them quick
drive = functools.partial(consumers.drive, timeout=30, poll_s=0.02)


def test_three_members_over_six_partitions_get_two_each(group_env):
    log, _, coord, _ = group_env
    assigned = {}
    cs = [member(log, coord, client_id=f"c{i}") for i in range(3)]
    for i, c in enumerate(cs):
        c.subscribe(["g6"], group="g", on_assign=lambda tps, i=i: assigned.__setitem__(i, tps))
    drive(cs, lambda: sorted(len(c.assignment()) for c in cs) == [2, 2, 2]
          and len({generation(c) for c in cs}) == 1, "2 partitions each")
    owned = sorted(tp for c in cs for tp in c.assignment())
    assert owned == [("g6", p) for p in range(6)]
    assert {i: sorted(v) for i, v in assigned.items()} == {i: sorted(c.assignment())
                                                            for i, c in enumerate(cs)}
    for c in cs:
        c.close()
    assert coord.describe("g").state == "Empty"


def test_silent_member_loses_partitions_and_the_others_resume_at_least_once(group_env):
    log, prod, coord, clock = group_env
    for p in range(6):
        prod.send(p, [b"%d-%d" % (p, i) for i in range(30)])
    everything = {(p, o) for p in range(6) for o in range(30)}
    processed: list[tuple[int, int]] = []
    by_b_uncommitted: set[tuple[int, int]] = set()
    revoked = []
    a = member(log, coord, client_id="a", max_poll_records=7)
    b = member(log, coord, client_id="b", max_poll_records=7)
    a.subscribe(["g6"], group="g", on_revoke=revoked.append)
    b.subscribe(["g6"], group="g")

    def process_and_commit(c, recs):
        processed.extend((r.partition, r.offset) for r in recs)
        if recs:
            c.commit()

    drive([a, b], lambda: len(a.assignment()) == 3 and len(b.assignment()) == 3
          and generation(a) == generation(b), "a balanced group", sink=process_and_commit)
    drive([a, b], lambda: sum(1 for p, _ in processed if ("g6", p) in b.assignment()) >= 14,
          "b to make progress", sink=process_and_commit)
    # b processes one more poll without committing, then dies without leaving
    last = b.poll(5)
    assert last
    processed.extend((r.partition, r.offset) for r in last)
    by_b_uncommitted = {(r.partition, r.offset) for r in last}
    b._abandon()
    b_member = b.group_metadata().member_id
    # Time passes for the coordinator only; a keeps heartbeating (real threads).
    for _ in range(2):
        clock.t += 600
        a_member = a.group_metadata().member_id
        wait_until(lambda: next(m for m in coord.describe("g").members
                                if m["member_id"] == a_member)["last_heartbeat_ms"] == clock.t,
                   "a heartbeat at the new time")
    assert b_member not in {m["member_id"] for m in coord.describe("g").members}
    drive([a], lambda: len(a.assignment()) == 6 and set(processed) >= everything,
          "a to take over and finish", sink=process_and_commit)
    assert revoked  # a gave up its partitions for the rebalance (eager)
    seen = set()
    dups = set()
    for x in processed:
        (dups if x in seen else seen).add(x)
    assert seen == everything
    assert dups <= by_b_uncommitted  # duplicates only after b's last commit
    # the zombie's commit is rejected
    with pytest.raises(UnknownMemberId):
        coord.commit("g", {("g6", 0): 1}, member_id=b_member, generation=generation(b))
    a.close()
    assert coord.committed("g") == {("g6", p): 30 for p in range(6)}


def test_two_groups_each_get_everything_members_of_one_share(group_env):
    log, prod, coord, _ = group_env
    got: dict[str, list] = {"q1": [], "q2": [], "pub": []}
    q1, q2 = member(log, coord, client_id="q1"), member(log, coord, client_id="q2")
    pub = member(log, coord, client_id="pub")
    q1.subscribe("g6", group="queue")
    q2.subscribe("g6", group="queue")
    pub.subscribe("g6", group="other")
    names = {id(q1): "q1", id(q2): "q2", id(pub): "pub"}
    drive([q1, q2], lambda: len(q1.assignment()) == 3 and len(q2.assignment()) == 3
          and generation(q1) == generation(q2), "the queue group to balance")
    drive([pub], lambda: len(pub.assignment()) == 6, "the other group's member")
    for p in range(6):  # produced once both groups are stable: no rebalance re-reads
        prod.send(p, [b"%d-%d" % (p, i) for i in range(5)])

    def sink(c, recs):
        got[names[id(c)]].extend((r.partition, r.offset) for r in recs)

    drive([q1, q2, pub], lambda: len(got["pub"]) == 30 and len(got["q1"]) + len(got["q2"]) == 30,
          "both groups to read everything", sink=sink)
    everything = {(p, o) for p in range(6) for o in range(5)}
    assert set(got["pub"]) == everything
    assert set(got["q1"]) | set(got["q2"]) == everything
    assert not set(got["q1"]) & set(got["q2"])  # shared, not duplicated
    for c in (q1, q2, pub):
        c.close()


def test_async_commit_auto_commit_and_lost_membership(group_env):
    log, prod, coord, clock = group_env
    prod.send(0, [b"a", b"b"])
    lost, assigned = [], []
    # heartbeats only at start: the test decides when the session runs out
    c = Consumer(log=log, coordinator=coord, session_timeout_ms=1000,
                 heartbeat_interval_ms=3_600_000, fetch_max_wait_ms=20,
                 auto_offset_reset="earliest", enable_auto_commit=True,
                 auto_commit_interval_ms=1)
    c.subscribe(["g6"], group="g", on_lost=lost.append, on_assign=assigned.append)
    got = []
    drive([c], lambda: len(got) >= 2, "two records", sink=lambda _c, r: got.extend(r))
    c.poll(0)  # auto-commit of what the last poll handed out
    assert coord.committed("g")[("g6", 0)] == 2
    prod.send(0, [b"c"])
    drive([c], lambda: len(got) >= 3, "the third record", sink=lambda _c, r: got.extend(r))
    fut = c.commit(asynchronous=True)
    fut.result(10)
    assert coord.committed("g")[("g6", 0)] == 3
    old = c.group_metadata().member_id
    clock.t += 5000  # the session expires
    with pytest.raises(UnknownMemberId):
        c.commit(offsets={("g6", 0): 3})
    drive([c], lambda: lost and c.assignment(), "a new membership")
    assert sorted(lost[0]) == [("g6", p) for p in range(6)]
    assert c.group_metadata().member_id != old and len(assigned) == 2
    c.close()


def test_cooperative_consumer_revokes_only_moved_partitions(group_env):
    log, prod, coord, _ = group_env
    revoked, assigned = [], []
    kw = dict(partition_assignment_strategy="cooperative-sticky", enable_auto_commit=True)
    a = member(log, coord, client_id="a", **kw)
    a.subscribe("g6", group="g", on_revoke=revoked.append, on_assign=assigned.append)
    drive([a], lambda: len(a.assignment()) == 6, "a to own everything")
    b = member(log, coord, client_id="b", **kw)
    b.subscribe("g6", group="g")
    drive([a, b], lambda: len(a.assignment()) == 3 and len(b.assignment()) == 3
          and generation(a) == generation(b) and not coord.describe("g").state.startswith("Prep"),
          "a cooperative hand-over")
    assert len(revoked) == 1 and len(revoked[0]) == 3  # only the moved ones, once
    assert not set(revoked[0]) & set(a.assignment())
    assert sorted(revoked[0]) == sorted(b.assignment())
    for c in (a, b):
        c.close()


def test_retention_behind_the_position_resets_and_compaction_gaps_are_skipped(local_log):
    local_log.create_topic("r", {"partitions": 1})
    prod = Producer(local_log, "r")
    for i in range(3):  # segments 0-3, 4-7, 8-11
        prod.send(0, [b"%d" % (4 * i + j) for j in range(4)], keys=[b"k%d" % j for j in range(4)])
    plog = local_log.partition("r", 0)
    segs = plog.snapshot().segments
    # compaction keeps offsets 9 and 11 of the last segment: 8 and 10 become gaps
    kept = plog.read_segment(segs[2]).filter(pa.array([False, True, False, True]))
    plog.replace_segments([segs[2]], [kept], committer="test", now_ms=1)
    with Consumer(log=local_log, auto_offset_reset="earliest", max_poll_records=3) as c:
        c.assign([("r", 0)])
        got = c.poll(5)
        assert [r.offset for r in got] == [0, 1, 2]
        # retention drops the first two segments while the consumer is inside them
        m = plog.snapshot()
        plog.replace_segments(list(m.segments[:2]), [], committer="test", now_ms=2,
                              log_start_offset=8)
        plog.vacuum(now_ms=10**13, delay_ms=0)
        rest = []
        wait_until(lambda: rest.extend(c.poll(0.1)) or len(rest) >= 2, "the compacted tail")
        assert [r.offset for r in rest] == [9, 11]  # reset to the log start, gaps skipped
        assert c.position(("r", 0)) == 12
