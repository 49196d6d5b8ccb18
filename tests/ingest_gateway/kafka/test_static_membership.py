"""Static membership (KIP-345, ``group.instance.id``): first on sparklog's coordinator
with a hand-set clock (a member back within its session takes its old place with no
rebalance, the old id is fenced, LeaveGroup by instance id, expiry still works), then
with unmodified confluent-kafka consumers against a gateway subprocess's Kafka listener.
"""

from __future__ import annotations

import pytest

from ingest_gateway.errors import FencedInstanceId, UnknownMemberId
from ingest_gateway.server.groups import static
from ingest_gateway.server.groups.coordinator import GroupCoordinator
from log_layout import open_log
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess
from tests.ingest_gateway.kafka.test_groups import FAST, owned, poll_until

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC, PARTITIONS = "static", 4


@pytest.fixture
def coord(local_log, clock):
    local_log.create_topic(TOPIC, {"partitions": PARTITIONS})
    return GroupCoordinator(local_log, now_ms=clock, default_session_timeout_ms=1000)


def two_static_members(coord):
    a = coord.join("g", [TOPIC], client_id="a", instance_id="ia")
    b = coord.join("g", [TOPIC], client_id="b", instance_id="ib")
    coord.join("g", [TOPIC], member_id=a.member_id, instance_id="ia")
    a, b = (coord.heartbeat("g", m.member_id, -1) for m in (a, b))
    assert a.assigned and b.assigned and not a.rebalance and a.generation == 2
    return a, b


def test_a_static_member_back_within_its_session_keeps_its_partitions(coord, clock):
    a, b = two_static_members(coord)
    clock.t += 900  # a restarted (no LeaveGroup) before its 1000 ms session ran out
    a2 = coord.join("g", [TOPIC], client_id="a", instance_id="ia")
    assert a2.member_id != a.member_id
    assert a2.assigned and not a2.rebalance
    assert (a2.generation, a2.assignment) == (a.generation, a.assignment)
    hb = coord.heartbeat("g", b.member_id, b.generation)  # b saw no rebalance
    assert not hb.rebalance and (hb.generation, hb.assignment) == (b.generation, b.assignment)
    # the old process is fenced, named with its instance id; without one it is unknown
    with pytest.raises(FencedInstanceId, match="'ia'"):
        coord.check_instance("g", a.member_id, "ia")
    with pytest.raises(UnknownMemberId):
        coord.heartbeat("g", a.member_id, a.generation)
    coord.check_instance("g", a2.member_id, "ia")  # the new one is the member
    described = coord.describe("g")
    assert described.state == "Stable" and len(described.members) == 2
    # the new member id is what the store document names (a takeover keeps it)
    doc = coord.log.read_group_offsets("g")
    assert {m["member_id"]: m.get("instance_id") for m in doc["members"]} == {
        a2.member_id: "ia", b.member_id: "ib"}


def test_a_static_member_back_after_its_session_rebalances(coord, clock):
    a, b = two_static_members(coord)
    clock.t += 500
    coord.heartbeat("g", b.member_id, b.generation)
    clock.t += 500  # a's session ran out, b's did not
    assert coord.heartbeat("g", b.member_id, b.generation).rebalance  # a expired
    a2 = coord.join("g", [TOPIC], client_id="a", instance_id="ia")
    assert not a2.assigned  # a new member: the group rebalances for it
    assert {m["member_id"] for m in coord.describe("g").members} == {a2.member_id, b.member_id}


def test_leave_by_instance_id_and_a_fenced_leave(coord):
    a, b = two_static_members(coord)
    a2 = coord.join("g", [TOPIC], client_id="a", instance_id="ia")
    with pytest.raises(FencedInstanceId):
        # the fenced one may not remove a2
        static.leave(coord.table, coord.leave, "g", a.member_id, "ia")
    static.leave(coord.table, coord.leave, "g", "", "ia")  # KIP-345: by instance id alone
    assert [m["member_id"] for m in coord.describe("g").members] == [b.member_id]
    assert coord.heartbeat("g", b.member_id, b.generation).rebalance
    with pytest.raises(UnknownMemberId):
        coord.heartbeat("g", a2.member_id, a2.generation)


def test_a_dynamic_member_is_unchanged_by_instance_checks(coord):
    d = coord.join("g", [TOPIC], client_id="d")
    coord.check_instance("g", d.member_id, None)
    with pytest.raises(UnknownMemberId):  # an instance id it never joined with
        coord.check_instance("g", d.member_id, "other")
    d2 = coord.join("g", [TOPIC], client_id="d")  # a dynamic join is a new member
    assert not d2.assigned and coord.heartbeat("g", d.member_id, d.generation).rebalance


# -- real clients ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    url = str(tmp_path_factory.mktemp("kafka-static") / "store")
    open_log(url, fsync=False).create_topic(TOPIC, {"partitions": PARTITIONS})
    with KafkaGatewayProcess(url, {"gateway.group.min.session.timeout.ms": 1000}) as gw:
        yield gw


class Watched:
    """A confluent-kafka consumer with ``group.instance.id`` that counts its rebalances."""

    def __init__(self, gw: KafkaGatewayProcess, group: str, instance: str):
        self.revoked = self.assigned = 0
        self.c = confluent_kafka.Consumer({
            "bootstrap.servers": gw.bootstrap, "group.id": group, "client.id": instance,
            "group.instance.id": instance, **FAST, "session.timeout.ms": 6000})
        self.c.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, c, parts):
        self.assigned += 1

    def _on_revoke(self, c, parts):
        self.revoked += 1


def test_confluent_static_member_restarts_without_a_rebalance(gateway):
    gw = gateway
    a, b = Watched(gw, "gs", "a"), Watched(gw, "gs", "b")
    a2 = None
    try:
        poll_until([a.c, b.c], lambda: len(owned(a.c)) == 2 and len(owned(b.c)) == 2,
                   "the partitions split between a and b")
        mine, theirs, gen = owned(a.c), owned(b.c), gw.request("GET", "/groups/gs")[1]
        revoked_before = b.revoked
        a.c.close()  # a static member's close sends no LeaveGroup (KIP-345)
        a2 = Watched(gw, "gs", "a")
        poll_until([a2.c, b.c], lambda: owned(a2.c) == mine, "a's restart owns a's partitions")
        for _ in range(10):  # b keeps serving heartbeats: no rebalance reaches it
            b.c.poll(0.1)
        assert b.revoked == revoked_before and owned(b.c) == theirs
        now = gw.request("GET", "/groups/gs")[1]
        assert now["generation"] == gen["generation"] and now["state"] == "Stable"
        assert len(now["members"]) == 2
    finally:
        for w in (b, a2):
            if w is not None:
                w.c.close()


def test_confluent_two_members_with_one_instance_id_the_older_is_fenced(gateway):
    gw = gateway
    old = Watched(gw, "gf", "same")
    new = None
    try:
        poll_until([old.c], lambda: owned(old.c) == set(range(PARTITIONS)), "old owns all")
        new = Watched(gw, "gf", "same")
        poll_until([new.c], lambda: owned(new.c) == set(range(PARTITIONS)), "new owns all")
        errors: list = []

        def old_fenced():
            msg = old.c.poll(0.05)
            if msg is not None and msg.error():
                errors.append(msg.error())
            return any(e.code() == confluent_kafka.KafkaError._FATAL or e.fatal()
                       for e in errors)

        # librdkafka raises a fatal error when its heartbeat is answered FENCED_INSTANCE_ID
        poll_until([new.c], old_fenced, "the older member fenced")
        doc = gw.request("GET", "/groups/gf")[1]
        assert len(doc["members"]) == 1
    finally:
        for w in (new, old):
            if w is not None:
                w.c.close()
