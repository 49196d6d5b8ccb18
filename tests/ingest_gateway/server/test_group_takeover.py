"""Group state in the store, taken over when the coordinator moves (issue 13).

Two coordinators over one store stand for two gateways of the broker application;
which one coordinates a group is decided by a real ``Assignment`` (the leader of
the group's offsets-topic partition), held in a :class:`Slots` both read, as each
gateway's ``ClusterMember`` would. Time is the hand-set clock: no test sleeps.
"""

from __future__ import annotations

import pytest

from ingest_gateway.errors import NotCoordinator, UnknownMemberId
from ingest_gateway.server.groups.coordinator import GroupCoordinator
from ingest_gateway.server.groups.state import Group
from log_layout.brokers import (
    OFFSETS_PARTITIONS,
    OFFSETS_TOPIC,
    Assignment,
    coordinator_partition,
)

SESSION_MS = 6000


class Slots:
    """The assignment every gateway sees (tests move coordinators by replacing it)."""

    def __init__(self) -> None:
        self.assignment = self.leading(0)

    @staticmethod
    def leading(slot: int, generation: int = 1, **groups: int) -> Assignment:
        """Slot ``slot`` coordinates every group but those given as ``group=slot``."""
        owners = [slot] * OFFSETS_PARTITIONS
        for group, other in groups.items():
            owners[coordinator_partition(group)] = other
        return Assignment(1, generation, {0: "http://a", 1: "http://b"}, (0, 1),
                          {OFFSETS_TOPIC: tuple(owners)})

    def move(self, group: str, slot: int) -> None:
        a = self.assignment
        owners = list(a.partitions[OFFSETS_TOPIC])
        owners[coordinator_partition(group)] = slot
        self.assignment = Assignment(1, a.generation + 1, a.slots, a.live,
                                     {OFFSETS_TOPIC: tuple(owners)})


class Member:
    """One gateway's view of the cluster: the ClusterMember API the coordinator uses."""

    def __init__(self, slots: Slots, slot: int):
        self.slots, self.slot = slots, slot

    def coordinator(self, group: str) -> dict:
        a = self.slots.assignment
        s = a.coordinator_slot(group)
        return {"slot": s, "url": a.url(s)}

    def is_coordinator(self, group: str) -> bool:
        return self.slots.assignment.coordinator_slot(group) == self.slot

    def check_coordinator(self, group: str) -> None:
        if not self.is_coordinator(group):
            raise NotCoordinator(group, self.coordinator(group))


@pytest.fixture
def slots() -> Slots:
    return Slots()


def gateway(log, clock, slots, slot) -> GroupCoordinator:
    return GroupCoordinator(log, now_ms=clock, min_session_timeout_ms=1000,
                            cluster=Member(slots, slot), load_members=True)


@pytest.fixture
def a(local_log, clock, slots):
    local_log.create_topic("t", {"partitions": 4})
    return gateway(local_log, clock, slots, 0)


@pytest.fixture
def b(local_log, clock, slots, a):
    return gateway(local_log, clock, slots, 1)


def stable_pair(coord, group="g"):
    """Two members of ``group`` at ``coord``, stable at generation 2."""
    m1 = coord.join(group, ["t"], client_id="one", session_timeout_ms=SESSION_MS)
    m2 = coord.join(group, ["t"], client_id="two", session_timeout_ms=SESSION_MS)
    coord.join(group, ["t"], member_id=m1.member_id, client_id="one",
               session_timeout_ms=SESSION_MS)
    s1 = coord.heartbeat(group, m1.member_id, m1.generation)
    s2 = coord.heartbeat(group, m2.member_id, m2.generation)
    assert s1.generation == s2.generation == 2 and s1.assigned and s2.assigned
    assert not s1.rebalance and not s2.rebalance
    return s1, s2


# -- the document ----------------------------------------------------------------------------
def test_document_round_trip_keeps_members_in_join_order(local_log, a, clock):
    s1, s2 = stable_pair(a)
    doc = local_log.read_group_offsets("g")
    assert doc["state"] == "Stable" and doc["generation"] == 2 and doc["strategy"] == "range"
    assert [m["member_id"] for m in doc["members"]] == [s1.member_id, s2.member_id]
    first = doc["members"][0]
    assert first == {"member_id": s1.member_id, "client_id": "one", "topics": ["t"],
                     "strategies": ["range"], "session_timeout_ms": SESSION_MS,
                     "rebalance_timeout_ms": 60_000,
                     "assignment": [list(tp) for tp in s1.assignment]}
    clock.t += 123
    g = Group("g", doc, loaded_at_ms=clock.t)
    assert list(g.members) == [s1.member_id, s2.member_id]
    m = g.members[s1.member_id]
    assert (m.assignment, m.joined_generation, m.last_heartbeat_ms) == \
        (s1.assignment, 2, clock.t)
    assert g.state == "Stable" and g.write_id == doc.pop("write_id")
    assert g.doc() == doc  # read back, written again: the same


def test_a_document_without_members_reads_as_an_empty_group(local_log, a):
    # what gateways wrote before membership was kept
    local_log.write_group_offsets("old", {"group": "old", "generation": 4, "strategy": "range",
                                          "offsets": {"t": {"2": {"offset": 0, "metadata": "",
                                                                  "commit_ms": 1}}}})
    g = Group("old", local_log.read_group_offsets("old"), loaded_at_ms=5)
    assert g.members == {} and g.state == "Empty" and g.committed() == {("t", 2): 0}
    with pytest.raises(UnknownMemberId):
        a.heartbeat("old", "someone", 4)
    assert a.groups_in_memory() == 0
    s = a.join("old", ["t"])  # generations continue, offsets kept
    assert s.generation == 5 and a.committed("old") == {("t", 2): 0}


def test_without_load_members_a_restart_forgets_members(local_log, a, clock):
    stable_pair(a)
    standalone = GroupCoordinator(local_log, now_ms=clock)
    assert standalone.describe("g").members == ()
    assert standalone.join("g", ["t"]).generation == 3  # alone at once, as before


# -- taking a group over ----------------------------------------------------------------------
def test_members_carry_on_at_the_new_coordinator_without_a_rebalance(local_log, a, b, slots,
                                                                     clock):
    s1, s2 = stable_pair(a)
    tp1, tp2 = s1.assignment[0], s2.assignment[0]
    a.commit("g", {tp1: 0}, member_id=s1.member_id, generation=2)
    with pytest.raises(NotCoordinator) as e:
        b.heartbeat("g", s1.member_id, 2)
    assert e.value.coordinator == {"slot": 0, "url": "http://a"}
    d = b.describe("g")  # any gateway describes from the store, liveness unknown there
    assert [(m["member_id"], m["last_heartbeat_ms"]) for m in d.members] == \
        sorted([(s1.member_id, None), (s2.member_id, None)])
    assert b.groups_in_memory() == 0  # a gateway that does not coordinate loads nothing

    slots.move("g", 1)
    assert a.retain() == ["g"] and a.groups_in_memory() == 0
    with pytest.raises(NotCoordinator) as e:
        a.heartbeat("g", s1.member_id, 2)
    assert e.value.coordinator == {"slot": 1, "url": "http://b"}

    h1 = b.heartbeat("g", s1.member_id, 2)
    assert (h1.generation, h1.assignment, h1.rebalance, h1.assigned) == \
        (2, s1.assignment, False, True)
    b.commit("g", {tp2: 0}, member_id=s2.member_id, generation=2)
    assert b.committed("g") == {tp1: 0, tp2: 0}
    assert b.describe("g").state == "Stable"


def test_sessions_restart_when_the_group_is_loaded(local_log, a, b, slots, clock):
    s1, s2 = stable_pair(a)
    slots.move("g", 1)
    a.retain()
    clock.t += SESSION_MS * 10  # the old coordinator's deadlines passed long ago
    b.heartbeat("g", s1.member_id, 2)  # loads the group: both sessions start now
    clock.t += SESSION_MS - 1
    assert b.expire() == []
    b.heartbeat("g", s1.member_id, 2)
    clock.t += 1
    assert b.expire() == [("g", s2.member_id)]  # silent since the load
    doc = local_log.read_group_offsets("g")  # written at once: a later taker-over agrees
    assert [m["member_id"] for m in doc["members"]] == [s1.member_id]


def test_a_member_that_left_before_the_move_is_not_waited_for(local_log, a, b, slots):
    s1, s2 = stable_pair(a)
    a.leave("g", s2.member_id)  # a rebalance starts: s1 is to rejoin
    slots.move("g", 1)
    a.retain()
    assert b.heartbeat("g", s1.member_id, 2).rebalance  # it goes on at the new coordinator
    st = b.join("g", ["t"], member_id=s1.member_id, session_timeout_ms=SESSION_MS)
    # complete at once: the member that left is not in the document to be waited for
    assert st.generation == 3 and st.assigned and len(st.assignment) == 4


def test_a_rebalance_under_way_at_the_move_goes_on_at_the_new_coordinator(local_log, a, b,
                                                                           slots, clock):
    s1, s2 = stable_pair(a)
    s3 = a.join("g", ["t"], client_id="three", session_timeout_ms=SESSION_MS)
    a.commit("g", {s1.assignment[0]: 0}, member_id=s1.member_id, generation=2)  # allowed
    assert local_log.read_group_offsets("g")["state"] == "PreparingRebalance"
    slots.move("g", 1)
    a.retain()
    # the newcomer's membership was never part of a generation: the new coordinator
    # has it in the document, and the rebalance resumes with everyone
    st = b.heartbeat("g", s1.member_id, 2)
    assert st.rebalance and st.generation == 2
    for m in (s1, s2, s3):
        b.join("g", ["t"], member_id=m.member_id, session_timeout_ms=SESSION_MS)
    states = [b.heartbeat("g", m.member_id, 3) for m in (s1, s2, s3)]
    assert {s.generation for s in states} == {3} and all(s.assigned for s in states)
    assert sorted(tp for s in states for tp in s.assignment) == [("t", p) for p in range(4)]
    assert b.committed("g") == {s1.assignment[0]: 0}


def test_a_coordinator_that_missed_a_move_and_back_reloads_what_the_other_wrote(local_log, a,
                                                                               b, slots):
    s1, s2 = stable_pair(a)
    slots.move("g", 1)  # a reads neither this assignment nor the next
    b.commit("g", {s2.assignment[0]: 0}, member_id=s2.member_id, generation=2)
    b.leave("g", s1.member_id)
    slots.move("g", 0)
    assert a.retain() == ["g"]  # its copy is older than the document
    st = a.heartbeat("g", s2.member_id, 2)  # loaded anew: s1 is gone, a rebalance is on
    assert st.rebalance and a.committed("g") == {s2.assignment[0]: 0}
    with pytest.raises(UnknownMemberId):
        a.heartbeat("g", s1.member_id, 2)


def test_a_coordinator_keeps_its_groups_when_nobody_else_wrote_them(local_log, a, b, slots):
    stable_pair(a, "g")
    stable_pair(a, "h")
    assert coordinator_partition("g") != coordinator_partition("h")
    slots.move("g", 1)
    slots.move("g", 0)  # moved away and back, nobody wrote
    assert a.retain() == [] and a.groups_in_memory() == 2


# -- zombies ----------------------------------------------------------------------------------
def test_a_coordinator_that_missed_the_move_writes_nothing(local_log, a, b, slots):
    s1, _ = stable_pair(a)
    slots.move("g", 1)  # a has not been told (no retain): it is frozen, say
    b.commit("g", {s1.assignment[0]: 0}, member_id=s1.member_id, generation=2)
    before = local_log.read_group_offsets("g")
    with pytest.raises(NotCoordinator):
        a.commit("g", {s1.assignment[0]: 0}, member_id=s1.member_id, generation=2)
    with pytest.raises(NotCoordinator):
        a.leave("g", s1.member_id)
    assert local_log.read_group_offsets("g") == before
    assert a.groups_in_memory() == 0


def test_a_group_dropped_while_its_write_was_under_way_is_never_written(local_log, a, slots):
    stable_pair(a)
    g = a.table.groups["g"]
    slots.move("g", 1)
    a.retain()
    slots.move("g", 0)  # back again: the group is loaded anew at the next call
    with pytest.raises(NotCoordinator):
        a.table.write(g, g.doc_seq + 1, {"group": "g", "generation": 99})
    assert local_log.read_group_offsets("g")["generation"] == 2


def test_expire_skips_a_group_that_moved(local_log, a, slots, clock):
    assert coordinator_partition("g") != coordinator_partition("h")
    stable_pair(a)
    a.join("h", ["t"], session_timeout_ms=SESSION_MS)
    slots.move("g", 1)
    clock.t += SESSION_MS
    gone = a.expire()  # g: not ours any more, dropped unwritten; h: expired here
    assert [group for group, _ in gone] == ["h"]
    assert local_log.read_group_offsets("g")["state"] == "Stable"
    assert a.groups_in_memory() == 0


class MovesAfterFirstCheck(Member):
    """A gateway whose group moves away right after an operation's first check (while
    a commit reads high watermarks outside the coordinator's lock, say)."""

    def __init__(self, slots: Slots, slot: int, group: str, to: int):
        super().__init__(slots, slot)
        self.group, self.to, self.armed = group, to, False

    def check_coordinator(self, group: str) -> None:
        super().check_coordinator(group)
        if self.armed:
            self.armed = False
            self.slots.move(self.group, self.to)


def test_a_commit_whose_group_moved_midway_is_not_written(local_log, clock, slots):
    local_log.create_topic("t", {"partitions": 4})
    cluster = MovesAfterFirstCheck(slots, 0, "g", to=1)
    a = GroupCoordinator(local_log, now_ms=clock, cluster=cluster, load_members=True)
    s1, _ = stable_pair(a)
    before = local_log.read_group_offsets("g")
    cluster.armed = True
    with pytest.raises(NotCoordinator) as e:
        a.commit("g", {s1.assignment[0]: 0}, member_id=s1.member_id, generation=2)
    assert e.value.coordinator == {"slot": 1, "url": "http://b"}
    assert local_log.read_group_offsets("g") == before and a.groups_in_memory() == 0
