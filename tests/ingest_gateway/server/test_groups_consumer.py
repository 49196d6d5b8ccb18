"""KIP-848 membership on the group coordinator, driven directly with a hand-set clock:
epochs, revocation before assignment, fencing, commits by member epoch, session expiry,
the server assignors, a mixed group of classic and consumer-protocol members, and a
coordinator taking a group over from its store document (gateway failover)."""

from __future__ import annotations

import pytest

from ingest_gateway.errors import (FencedMemberEpoch, StaleMemberEpoch, UnknownMemberId,
                                   UnsupportedAssignor)
from ingest_gateway.server.groups.consumer import (ConsumerMembers, Heartbeat,
                                                   UnreleasedInstanceId)
from ingest_gateway.server.groups.coordinator import GroupCoordinator

G = "g"
SESSION = 45_000


@pytest.fixture
def coord(local_log, clock):
    local_log.create_topic("t", {"partitions": 6})
    return GroupCoordinator(local_log, now_ms=clock)


@pytest.fixture
def members(coord):
    return ConsumerMembers(coord, heartbeat_interval_ms=5000, session_timeout_ms=SESSION)


def join(members, mid, topics=("t",), **kw):
    return members.heartbeat(G, Heartbeat(mid, 0, topics=frozenset(topics), owned=frozenset(),
                                          rebalance_timeout_ms=30_000, **kw))


def beat(members, mid, epoch, owned=None):
    return members.heartbeat(G, Heartbeat(mid, epoch, owned=owned))


def settle(members, ids_epochs: dict, rounds: int = 6) -> dict:
    """Heartbeat every member, each reporting what it was last told it owns (as a
    client does once it has revoked), until nothing changes; returns id -> answer."""
    owned = {m: frozenset() for m in ids_epochs}
    last = {}
    for _ in range(rounds):
        for m in ids_epochs:
            a = beat(members, m, ids_epochs[m], owned[m])
            ids_epochs[m] = a.member_epoch
            if a.assignment is not None:
                owned[m] = frozenset(a.assignment)
            last[m] = a
    return last


def test_join_alone_gets_everything_at_the_first_epoch(members):
    a = join(members, "a")
    assert a.member_epoch == 1 and a.heartbeat_interval_ms == 5000
    assert sorted(a.assignment) == [("t", p) for p in range(6)]
    again = beat(members, "a", 1, frozenset(a.assignment))
    assert again.assignment is None  # nothing changed: Kafka sends none


def test_a_second_member_waits_for_the_first_to_revoke(members):
    a = join(members, "a")
    b = join(members, "b")
    assert b.member_epoch == 2
    assert b.assignment == ()  # its half is still held by a: unreleased
    # a keeps its epoch until it revoked: told its kept half, the rest pending
    a2 = beat(members, "a", 1, frozenset(a.assignment))
    assert a2.member_epoch == 1 and len(a2.assignment) == 3
    b2 = beat(members, "b", 2, frozenset())
    assert b2.assignment is None or b2.assignment == ()  # still not released
    a3 = beat(members, "a", 1, frozenset(a2.assignment))  # revoked: moves to the epoch
    assert a3.member_epoch == 2 and a3.assignment is None
    b3 = beat(members, "b", 2, frozenset())
    assert len(b3.assignment) == 3
    assert set(b3.assignment).isdisjoint(a2.assignment)


def owners(members) -> dict[str, set]:
    return {d["member_id"]: {(x["topic"], x["partition"]) for x in d["assignment"]}
            for d in members.coordinator.describe(G).members}


def test_leave_moves_only_the_leavers_partitions(members):
    epochs = {m: join(members, m).member_epoch for m in ("a", "b", "c")}
    settle(members, epochs)
    before = owners(members)
    assert sorted(map(len, before.values())) == [2, 2, 2]
    members.heartbeat(G, Heartbeat("c", -1))
    epochs.pop("c")
    settle(members, epochs)
    after = owners(members)
    assert set(after) == {"a", "b"}
    assert set().union(*after.values()) == {("t", p) for p in range(6)}
    for m in ("a", "b"):
        assert before[m] <= after[m], "a member lost a partition though only c left"


def test_fencing_and_commits_by_member_epoch(coord, members):
    a = join(members, "a")
    with pytest.raises(FencedMemberEpoch):
        beat(members, "a", 5)
    with pytest.raises(UnknownMemberId):
        beat(members, "nobody", 1)
    with pytest.raises(UnsupportedAssignor):
        join(members, "x", assignor="sticky")
    coord.commit(G, {("t", 0): 0}, member_id="a", generation=a.member_epoch)
    with pytest.raises(StaleMemberEpoch):
        coord.commit(G, {("t", 0): 0}, member_id="a", generation=a.member_epoch + 1)
    # a consumer-protocol member commits any partition (Kafka checks its epoch only)
    assert coord.committed(G) == {("t", 0): 0}


def test_a_silent_member_expires_and_its_partitions_move(members, clock):
    epochs = {m: join(members, m).member_epoch for m in ("a", "b")}
    settle(members, epochs)
    clock.t += SESSION - 1
    beat(members, "a", epochs["a"], None)
    clock.t += 2  # b's session is over, a's is not
    members.coordinator.expire()
    epochs.pop("b")
    settle(members, epochs)
    assert owners(members) == {"a": {("t", p) for p in range(6)}}


@pytest.mark.parametrize("assignor,expected", [
    ("range", {"a": [0, 1, 2], "b": [3, 4, 5]}),
    ("uniform", None),
])
def test_server_assignors(members, assignor, expected):
    epochs = {m: join(members, m, assignor=assignor).member_epoch for m in ("a", "b")}
    settle(members, epochs)
    d = members.coordinator.describe(G)
    assert d.strategy == assignor and d.type == "consumer" and d.state == "Stable"
    got = {m["member_id"]: sorted(x["partition"] for x in m["assignment"]) for m in d.members}
    assert sorted(map(len, got.values())) == [3, 3]
    if expected:
        assert got == expected


def test_a_mixed_group_never_gives_a_partition_to_two_members(coord, members):
    c = join(members, "kip848")
    assert len(c.assignment) == 6
    st = coord.join(G, ["t"], client_id="classic", strategies=("range",))
    classic = st.member_id
    # the classic member's generation completes at once (the KIP-848 member is always
    # ready), but the partitions the KIP-848 member still holds are withheld from it
    st = coord.state(G, classic)
    assert st.assigned and st.assignment == ()
    a = beat(members, "kip848", c.member_epoch, frozenset(c.assignment))
    kept = set(a.assignment)
    assert len(kept) == 3
    a = beat(members, "kip848", c.member_epoch, frozenset(kept))  # revoked
    # the classic member is told to rejoin, and gets what was released
    st = coord.heartbeat(G, classic, st.generation)
    assert st.rebalance
    st = coord.join(G, ["t"], member_id=classic, client_id="classic", strategies=("range",))
    st = coord.state(G, classic)
    assert st.assigned and len(st.assignment) == 3
    assert kept.isdisjoint(st.assignment)
    assert coord.describe(G).type == "consumer"


def test_a_coordinator_takes_a_consumer_group_over_from_the_store(local_log, clock):
    local_log.create_topic("t", {"partitions": 6})
    first = ConsumerMembers(GroupCoordinator(local_log, now_ms=clock, load_members=True))
    epochs = {m: first.heartbeat(G, Heartbeat(m, 0, topics=frozenset({"t"}), owned=frozenset(),
                                             rebalance_timeout_ms=30_000)).member_epoch
              for m in ("a", "b")}
    settle(first, epochs)
    held = {d["member_id"]: d["assignment"] for d in first.coordinator.describe(G).members}
    # the gateway dies; another one coordinates the group from its document
    second = ConsumerMembers(GroupCoordinator(local_log, now_ms=clock, load_members=True))
    for m, epoch in epochs.items():
        owned = frozenset((x["topic"], x["partition"]) for x in held[m])
        a = second.heartbeat(G, Heartbeat(m, epoch, owned=owned))
        assert a.member_epoch >= epoch
    after = {d["member_id"]: d["assignment"] for d in second.coordinator.describe(G).members}
    assert after == held


def test_a_static_member_away_keeps_its_partitions_and_a_new_process_takes_them(members):
    epochs = {"a": join(members, "a", instance_id="host-a").member_epoch,
              "b": join(members, "b").member_epoch}
    settle(members, epochs)
    before = owners(members)
    with pytest.raises(UnreleasedInstanceId):  # host-a is still there
        join(members, "a2", instance_id="host-a")
    away = members.heartbeat(G, Heartbeat("a", -2))
    assert away.member_epoch == -2
    assert beat(members, "b", epochs["b"], frozenset(before["b"])).assignment is None
    assert owners(members) == before  # nothing moved while a is away
    back = join(members, "a2", instance_id="host-a")
    assert back.member_epoch == epochs["a"]  # its epoch, no new plan
    assert set(back.assignment) == before["a"]
    assert owners(members) == {"a2": before["a"], "b": before["b"]}
    with pytest.raises(UnknownMemberId):  # the old process's member id is gone
        beat(members, "a", epochs["a"])


def test_without_the_upgrade_policy_a_classic_group_refuses_kip848_members(coord):
    """group.consumer.migration.policy downgrade or disabled: a KIP-848 member may not
    join a group of classic members (Kafka: GROUP_ID_NOT_FOUND, not a consumer group);
    an empty group it may."""
    from ingest_gateway.server.groups.consumer import NotConsumerGroup

    strict = ConsumerMembers(coord, upgrade=False)
    coord.join(G, ["t"], client_id="classic")
    with pytest.raises(NotConsumerGroup, match="is not a consumer group"):
        join(strict, "kip848")
    assert strict.heartbeat("other", Heartbeat("x", 0, topics=frozenset({"t"}),
                                               owned=frozenset(),
                                               rebalance_timeout_ms=30_000)).member_epoch == 1


def test_offset_fetch_checks_members_of_consumer_groups_only(coord, members):
    """Kafka's validateOffsetFetch: a classic group checks nothing; a consumer group the
    member's id and epoch."""
    st = coord.join(G, ["t"], client_id="classic")
    members.check_fetch(G, "not-a-member", 99)  # classic group: accepted
    members.check_fetch("nobody-knows", "x", 3)
    a = join(members, "a")  # now a consumer group (mixed)
    members.check_fetch(G, "a", a.member_epoch)
    members.check_fetch(G, st.member_id, coord.describe(G).generation)
    with pytest.raises(StaleMemberEpoch):
        members.check_fetch(G, "a", a.member_epoch + 1)
    with pytest.raises(UnknownMemberId):
        members.check_fetch(G, "not-a-member", 1)
    members.check_fetch(G, "", -1)  # an admin's fetch
