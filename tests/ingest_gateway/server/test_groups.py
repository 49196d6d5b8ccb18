"""The group coordinator as plain logic: membership, generations, strategies,
commits and their fencing, offsets in the store. Time is a parameter."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ingest_gateway.errors import (IllegalGeneration, InconsistentGroupProtocol,
                                   InvalidCommitOffset, InvalidGroupId, PartitionNotAssigned,
                                   RebalanceInProgress, UnknownGroup, UnknownMemberId)
from ingest_gateway.server.groups.assignors import assign_range, assign_roundrobin, assign_sticky
from ingest_gateway.server.groups.coordinator import GroupCoordinator
from ingest_gateway.server.groups.store import describe_from_store
from log_layout import UnknownTopic


@pytest.fixture
def coord(local_log, clock):
    local_log.create_topic("t", {"partitions": 6})
    return GroupCoordinator(local_log, now_ms=clock, default_session_timeout_ms=1000)


def settle(coord, group, members, topics=("t",), strategies=("range",)):
    """Drive members through rejoins until the group is stable; returns states by id."""
    states = {}
    for _ in range(10):
        states = {m: coord.heartbeat(group, m, -1) for m in members}
        if not any(s.rebalance or not s.assigned for s in states.values()):
            return states
        for m, s in states.items():
            if s.rebalance:
                coord.join(group, topics, member_id=m, session_timeout_ms=1000,
                           strategies=strategies)
    raise AssertionError(f"group did not settle: {states}")


def test_first_member_gets_everything_at_once(coord):
    s = coord.join("g", ["t"])
    assert s.generation == 1 and s.assigned and not s.rebalance
    assert s.assignment == tuple(("t", p) for p in range(6))


def test_three_members_over_six_partitions_get_two_each(coord):
    ids = [coord.join("g", ["t"]).member_id]
    ids.append(coord.join("g", ["t"]).member_id)
    ids.append(coord.join("g", ["t"]).member_id)
    states = settle(coord, "g", ids)
    assert sorted(len(s.assignment) for s in states.values()) == [2, 2, 2]
    owned = [tp for s in states.values() for tp in s.assignment]
    assert sorted(owned) == [("t", p) for p in range(6)]
    assert len({s.generation for s in states.values()}) == 1


def test_join_of_second_member_waits_for_the_first_to_rejoin(coord):
    a = coord.join("g", ["t"])
    b = coord.join("g", ["t"])
    assert not b.assigned and b.assignment == ()
    ha = coord.heartbeat("g", a.member_id, a.generation)
    assert ha.rebalance and ha.assignment == a.assignment  # still owns until it rejoins
    # the old owner may still commit in its generation before revoking
    coord.commit("g", {("t", 0): 0}, member_id=a.member_id, generation=a.generation)
    ra = coord.join("g", ["t"], member_id=a.member_id)
    assert ra.generation == a.generation + 1 and ra.assigned
    hb = coord.heartbeat("g", b.member_id, -1)
    assert hb.assigned and len(hb.assignment) == 3 and len(ra.assignment) == 3


def test_extra_members_sit_idle(coord):
    ids = [coord.join("g", ["t"]).member_id for _ in range(8)]
    states = settle(coord, "g", ids)
    sizes = sorted(len(s.assignment) for s in states.values())
    assert sizes == [0, 0, 1, 1, 1, 1, 1, 1]


def test_silent_member_expires_and_its_partitions_move(coord, clock):
    a, b = coord.join("g", ["t"]).member_id, coord.join("g", ["t"]).member_id
    settle(coord, "g", [a, b])
    clock.t += 600
    coord.heartbeat("g", a, -1)  # a is alive, b says nothing
    clock.t += 600  # b's 1000 ms session passed
    assert coord.expire() == [("g", b)]
    s = coord.heartbeat("g", a, -1)
    assert s.rebalance
    coord.join("g", ["t"], member_id=a)
    s = coord.heartbeat("g", a, -1)
    assert s.assigned and len(s.assignment) == 6
    with pytest.raises(UnknownMemberId) as e:
        coord.heartbeat("g", b, -1)
    assert e.value.member_id == b and e.value.group == "g"


def test_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout(coord, clock):
    a = coord.join("g", ["t"], rebalance_timeout_ms=5000, session_timeout_ms=100_000)
    b = coord.join("g", ["t"], rebalance_timeout_ms=5000, session_timeout_ms=100_000)
    clock.t += 4000
    assert coord.heartbeat("g", a.member_id, a.generation).rebalance  # alive, never rejoins
    clock.t += 1000
    s = coord.heartbeat("g", b.member_id, -1)
    assert s.assigned and len(s.assignment) == 6
    with pytest.raises(UnknownMemberId):
        coord.heartbeat("g", a.member_id, a.generation)


def test_zombie_commit_after_rebalance_is_rejected(coord, clock):
    a = coord.join("g", ["t"])
    coord.commit("g", {("t", 0): 0}, member_id=a.member_id, generation=a.generation)
    clock.t += 2000  # a stalls past its session
    b = coord.join("g", ["t"])
    assert b.generation == a.generation + 1 and len(b.assignment) == 6
    with pytest.raises(UnknownMemberId):
        coord.commit("g", {("t", 0): 0}, member_id=a.member_id, generation=a.generation)


def test_commit_from_stale_generation_or_foreign_partition_is_rejected(coord):
    a = coord.join("g", ["t"])
    b = coord.join("g", ["t"])
    coord.join("g", ["t"], member_id=a.member_id)
    sa, sb = settle(coord, "g", [a.member_id, b.member_id]).values()
    with pytest.raises(IllegalGeneration) as e:
        coord.commit("g", {sa.assignment[0]: 0}, member_id=a.member_id, generation=a.generation)
    assert (e.value.generation, e.value.current) == (a.generation, sa.generation)
    assert f"generation {a.generation}" in str(e.value)
    with pytest.raises(PartitionNotAssigned) as e2:
        coord.commit("g", {sb.assignment[0]: 0}, member_id=a.member_id, generation=sa.generation)
    assert (e2.value.topic, e2.value.partition) == sb.assignment[0]
    assert coord.committed("g") == {}


def test_commit_after_rejoin_is_rebalance_in_progress(coord):
    a = coord.join("g", ["t"])
    coord.join("g", ["t"])  # b waits
    c = coord.join("g", ["t"])  # still preparing
    coord.join("g", ["t"], member_id=a.member_id)
    assert not coord.heartbeat("g", c.member_id, -1).rebalance
    # all rejoined: complete. Start another rebalance and rejoin a only.
    coord.join("g", ["t"], member_id=a.member_id, strategies=("range", "roundrobin"))
    with pytest.raises(RebalanceInProgress):
        coord.commit("g", {("t", 0): 0}, member_id=a.member_id,
                     generation=coord.heartbeat("g", a.member_id, -1).generation)


def test_committed_offsets_survive_a_restart_and_give_lag(local_log, coord, clock):
    w = local_log.partition("t", 1).claim("test")
    w.append(pa.table({"key": [b"k"] * 10, "value": [b"v"] * 10}))
    a = coord.join("g", ["t"])
    coord.commit("g", {("t", 1): 7}, member_id=a.member_id, generation=a.generation)
    again = GroupCoordinator(local_log, now_ms=clock)  # a restarted gateway
    assert again.committed("g") == {("t", 1): 7}
    d = again.describe("g")
    assert d.members == () and d.generation == a.generation
    row = next(p for p in d.partitions if p.partition == 1)
    assert (row.committed, row.high_watermark, row.lag) == (7, 10, 3)
    # generations continue from the stored one: no id is ever reused
    assert again.join("g", ["t"]).generation == a.generation + 1
    assert describe_from_store(local_log, "g").partitions[1].lag == 3


def test_commit_validation(coord):
    with pytest.raises(InvalidCommitOffset) as e:
        coord.commit("g", {("t", 0): 5})
    assert "high watermark is 0" in str(e.value)
    with pytest.raises(InvalidCommitOffset):
        coord.commit("g", {("t", 0): -1})
    with pytest.raises(UnknownTopic):
        coord.commit("g", {("nope", 0): 0})
    with pytest.raises(InvalidGroupId):
        coord.commit("../x", {("t", 0): 0})
    coord.commit("g", {("t", 0): 0})  # no members: an assign()-mode consumer may commit
    coord.join("g", ["t"])
    with pytest.raises(UnknownMemberId):
        coord.commit("g", {("t", 0): 0})


def test_join_validation(coord):
    with pytest.raises(UnknownTopic):
        coord.join("g", ["missing"])
    with pytest.raises(ValueError, match="at least one topic"):
        coord.join("g", [])
    with pytest.raises(ValueError, match="partition.assignment.strategy"):
        coord.join("g", ["t"], strategies=("bogus",))
    with pytest.raises(ValueError, match="session.timeout.ms"):
        coord.join("g", ["t"], session_timeout_ms=0)
    coord.join("g", ["t"], strategies=("roundrobin",))
    with pytest.raises(InconsistentGroupProtocol) as e:
        coord.join("g", ["t"], strategies=("range",))
    assert e.value.offered == ("range",)
    with pytest.raises(UnknownGroup):
        coord.describe("never-seen")


def test_leave_rebalances_at_once(coord):
    a, b = coord.join("g", ["t"]).member_id, coord.join("g", ["t"]).member_id
    settle(coord, "g", [a, b])
    coord.leave("g", b)
    coord.join("g", ["t"], member_id=a)
    assert len(coord.heartbeat("g", a, -1).assignment) == 6
    coord.leave("g", a)
    assert coord.describe("g").state == "Empty"


def test_range_and_roundrobin_match_kafka():
    members = {"a": frozenset({"x", "y"}), "b": frozenset({"x", "y"})}
    counts = {"x": 3, "y": 3}
    assert assign_range(members, counts) == {
        "a": [("x", 0), ("x", 1), ("y", 0), ("y", 1)], "b": [("x", 2), ("y", 2)]}
    assert assign_roundrobin(members, counts) == {
        "a": [("x", 0), ("x", 2), ("y", 1)], "b": [("x", 1), ("y", 0), ("y", 2)]}


def test_sticky_keeps_owners_and_balances():
    counts = {"t": 6}
    prev = {("t", p): ("a" if p < 3 else "b") for p in range(6)}
    plan = assign_sticky({m: frozenset({"t"}) for m in "abc"}, counts, prev)
    assert sorted(len(v) for v in plan.values()) == [2, 2, 2]
    assert set(plan["a"]) <= {("t", 0), ("t", 1), ("t", 2)}
    assert set(plan["b"]) <= {("t", 3), ("t", 4), ("t", 5)}
    # a leaves: its partitions go to b and c, theirs stay
    plan2 = assign_sticky({m: frozenset({"t"}) for m in "bc"}, counts,
                          {tp: m for m, tps in plan.items() for tp in tps})
    assert set(plan["b"]) <= set(plan2["b"]) and set(plan["c"]) <= set(plan2["c"])
    assert sorted(len(v) for v in plan2.values()) == [3, 3]


def test_cooperative_sticky_moves_only_what_must_move_in_two_steps(coord):
    coop = ("cooperative-sticky",)
    a = coord.join("g", ["t"], strategies=coop)
    assert len(a.assignment) == 6
    b = coord.join("g", ["t"], strategies=coop)
    assert coord.heartbeat("g", a.member_id, a.generation).rebalance
    ra = coord.join("g", ["t"], member_id=a.member_id, strategies=coop)
    # step 1: a keeps 3 of its 6; the other 3 are withheld from b while a revokes them
    s1 = coord.heartbeat("g", a.member_id, ra.generation)
    assert s1.generation == a.generation + 1 and len(s1.assignment) == 3 and s1.rebalance
    assert set(s1.assignment) < set(a.assignment)
    moved = sorted(set(a.assignment) - set(s1.assignment))
    assert coord.heartbeat("g", b.member_id, -1).assignment == ()
    # a commits the partitions it gives up, under the new generation
    coord.commit("g", {tp: 0 for tp in moved}, member_id=a.member_id, generation=s1.generation)
    coord.join("g", ["t"], member_id=a.member_id, strategies=coop)
    coord.join("g", ["t"], member_id=b.member_id, strategies=coop)
    s2a = coord.heartbeat("g", a.member_id, -1)
    s2b = coord.heartbeat("g", b.member_id, -1)
    assert s2a.generation == s1.generation + 1 and not s2a.rebalance
    assert s2a.assignment == s1.assignment  # never revoked what it kept
    assert sorted(s2b.assignment) == moved
    with pytest.raises(PartitionNotAssigned):  # the withheld window is over
        coord.commit("g", {moved[0]: 0}, member_id=a.member_id, generation=s2a.generation)


def test_eager_sticky_keeps_owners_across_rebalances(coord):
    st = ("sticky",)
    ids = [coord.join("g", ["t"], strategies=st).member_id for _ in range(3)]
    before = settle(coord, "g", ids, strategies=st)
    c = coord.join("g", ["t"], strategies=st).member_id
    for m in ids:
        coord.join("g", ["t"], member_id=m, strategies=st)
    after = settle(coord, "g", ids + [c], strategies=st)
    for m in ids:  # each old member keeps at least one of its partitions
        assert set(after[m].assignment) <= set(before[m].assignment)
        assert after[m].assignment
