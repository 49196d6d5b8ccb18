"""Kafka's classic group protocol against sparklog's coordinator, with unmodified
confluent-kafka (librdkafka) consumers and a gateway subprocess's Kafka listener:
subscribe, consume, commit, the offsets seen over HTTP, eager and cooperative
rebalances, a group shared with an HTTP member, a killed member's session expiry,
and AdminClient's ListGroups / DescribeGroups. Each test uses its own group.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from jobs.gateway_process import wait_for
from log_layout import open_log
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess
from tests.ingest_gateway.support import produce

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

TOPIC, PARTITIONS, RECORDS = "orders", 4, 200
FAST = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
        "topic.metadata.refresh.interval.ms": 1000, "auto.offset.reset": "earliest",
        "enable.auto.commit": False}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """Sessions may be as short as 1 s here (Kafka's floor is 6 s): a killed member's
    partitions move quickly."""
    url = str(tmp_path_factory.mktemp("kafka-groups") / "store")
    open_log(url, fsync=False).create_topic(TOPIC, {"partitions": PARTITIONS})
    with KafkaGatewayProcess(url, {"gateway.group.min.session.timeout.ms": 1000}) as gw:
        for p in range(PARTITIONS):  # over HTTP: the groups are what is tested here
            produce(gw, TOPIC, p, [b"v%d" % i for i in range(p, RECORDS, PARTITIONS)])
        yield gw


def consumer(gw: KafkaGatewayProcess, group: str, **extra) -> "confluent_kafka.Consumer":
    c = confluent_kafka.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": group,
                                  "client.id": "t", **FAST, **extra})
    c.subscribe([TOPIC])
    return c


def owned(c) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def poll_until(consumers, predicate, what: str, timeout: float = 30, seen=None):
    """Poll every consumer (rebalances are served inside poll) until ``predicate``."""
    def step():
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and not msg.error() and seen is not None:
                seen.append((msg.partition(), msg.offset(), msg.value()))
        return predicate()
    return wait_for(step, timeout=timeout, interval=0, what=what)


def http_offsets(gw: KafkaGatewayProcess, group: str) -> dict[int, int]:
    status, doc = gw.request("GET", f"/groups/{group}/offsets")[:2]
    assert status == 200, doc
    return {o["partition"]: o["offset"] for o in doc["offsets"] if o["topic"] == TOPIC}


def test_subscribe_consume_commit_and_the_offsets_over_http(gateway):
    gw = gateway
    c = consumer(gw, "g1")
    seen: list = []
    try:
        poll_until([c], lambda: len(seen) >= RECORDS, "every record", seen=seen)
        assert owned(c) == set(range(PARTITIONS))
        assert sorted(v for _, _, v in seen) == sorted(b"v%d" % i for i in range(RECORDS))
        c.commit(asynchronous=False)
        per = RECORDS // PARTITIONS
        assert http_offsets(gw, "g1") == {p: per for p in range(PARTITIONS)}
        got = c.committed([confluent_kafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)],
                          timeout=10)
        assert [tp.offset for tp in got] == [per] * PARTITIONS
    finally:
        c.close()
    # a new member of the group starts from the committed offsets, not the earliest
    produce(gw, TOPIC, 0, [b"after the commit"])
    c2 = consumer(gw, "g1")
    later: list = []
    try:
        poll_until([c2], lambda: later, "the record produced after the commit", seen=later)
        assert later[0] == (0, per, b"after the commit")
    finally:
        c2.close()


def test_two_member_rebalance_and_back(gateway):
    gw = gateway
    a = consumer(gw, "g2")
    b = None
    try:
        poll_until([a], lambda: owned(a) == set(range(PARTITIONS)), "a owns every partition")
        b = consumer(gw, "g2")
        poll_until([a, b], lambda: len(owned(a)) == 2 and len(owned(b)) == 2,
                   "the partitions split between a and b")
        assert owned(a) | owned(b) == set(range(PARTITIONS))
        # the group is the coordinator's: HTTP describes the same two members
        status, doc = gw.request("GET", "/groups/g2")[:2]
        assert status == 200, doc
        assert doc["state"] == "Stable" and len(doc["members"]) == 2
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        listed = admin.list_consumer_groups().result(timeout=10)
        assert "g2" in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups(["g2"])["g2"].result(timeout=10)
        assert len(described.members) == 2
        parts = {tp.partition for m in described.members for tp in m.assignment.topic_partitions}
        assert parts == set(range(PARTITIONS))
        b.close()  # LeaveGroup: a gets everything back
        b = None
        poll_until([a], lambda: owned(a) == set(range(PARTITIONS)), "a owns everything again")
    finally:
        a.close()
        if b is not None:
            b.close()


def test_cooperative_sticky_members_hand_partitions_over(gateway):
    gw = gateway
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    a = consumer(gw, "g-coop", **coop)
    b = None
    try:
        poll_until([a], lambda: owned(a) == set(range(PARTITIONS)), "a owns every partition")
        before = owned(a)
        b = consumer(gw, "g-coop", **coop)
        poll_until([a, b], lambda: len(owned(a)) == 2 and len(owned(b)) == 2,
                   "the partitions split between a and b")
        assert owned(a) < before and not owned(a) & owned(b)
        assert gw.request("GET", "/groups/g-coop")[1]["strategy"] == "cooperative-sticky"
    finally:
        a.close()
        if b is not None:
            b.close()


def test_a_group_shared_by_a_kafka_member_and_an_http_member(gateway):
    """One group, two protocols: the coordinator assigns across both."""
    gw = gateway
    a = consumer(gw, "g-mixed")
    member = None
    try:
        poll_until([a], lambda: owned(a) == set(range(PARTITIONS)), "a owns every partition")
        status, st = gw.request("POST", "/groups/g-mixed/members", body={
            "topics": [TOPIC], "client_id": "http", "session_timeout_ms": 10_000})[:2]
        assert status == 200, st
        member = st["member_id"]
        http_state: dict = {}

        def http_member_heartbeats():
            status, doc = gw.request("POST", f"/groups/g-mixed/members/{member}/heartbeat",
                                     body={"generation": st["generation"]})[:2]
            assert status == 200, doc
            st["generation"] = doc["generation"]
            http_state.update(doc)
            return doc["assigned"] and not doc["rebalance"]

        poll_until([a], lambda: http_member_heartbeats() and len(owned(a)) == 2,
                   "the partitions split between the Kafka and the HTTP member")
        http_parts = {x["partition"] for x in http_state["assignment"]}
        assert http_parts | owned(a) == set(range(PARTITIONS)) and not http_parts & owned(a)
        status = gw.request("DELETE", f"/groups/g-mixed/members/{member}")[0]
        assert status == 204
        member = None
        poll_until([a], lambda: owned(a) == set(range(PARTITIONS)), "a owns everything again")
    finally:
        a.close()
        if member is not None:
            gw.request("DELETE", f"/groups/g-mixed/members/{member}")


MEMBER_SCRIPT = """
import sys, confluent_kafka
c = confluent_kafka.Consumer({"bootstrap.servers": sys.argv[1], "group.id": "g-killed",
                              "session.timeout.ms": 1500, "heartbeat.interval.ms": 300})
c.subscribe([sys.argv[2]])
while not c.assignment():
    c.poll(0.05)
print(len(c.assignment()), flush=True)
while True:
    c.poll(0.2)
"""


def test_a_killed_member_expires_and_its_partitions_move(gateway):
    """No LeaveGroup: the session timeout removes the member (Kafka's session expiry)."""
    gw = gateway
    proc = subprocess.Popen([sys.executable, "-c", MEMBER_SCRIPT, gw.bootstrap, TOPIC],
                            stdout=subprocess.PIPE, text=True)
    a = None
    try:
        assert proc.stdout.readline().strip() == str(PARTITIONS)  # it owns every partition
        a = consumer(gw, "g-killed", **{"session.timeout.ms": 1500})
        poll_until([a], lambda: len(owned(a)) == 2, "a shares the partitions")
        proc.kill()  # no LeaveGroup, no more heartbeats
        proc.wait(10)
        poll_until([a], lambda: owned(a) == set(range(PARTITIONS)),
                   "the killed member's partitions move to a")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        if a is not None:
            a.close()


def test_kafka_python_and_confluent_members_share_a_group(gateway):
    """Two client implementations (kafka-python's own coordinator code, librdkafka's) as
    followers of one group: consume, commit, rebalance between them."""
    kafka = pytest.importorskip("kafka")
    gw = gateway
    kp = kafka.KafkaConsumer(TOPIC, bootstrap_servers=gw.bootstrap, group_id="g-two-clients",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=300,
                             consumer_timeout_ms=100)
    c = None
    try:
        seen: list = []

        def kp_polls():
            for records in kp.poll(timeout_ms=50).values():
                seen.extend(records)
            return len(seen) >= RECORDS

        wait_for(kp_polls, timeout=30, interval=0, what="kafka-python reads every record")
        assert {r.partition for r in seen} == set(range(PARTITIONS))
        kp.commit()
        assert sum(http_offsets(gw, "g-two-clients").values()) == len(seen)
        c = consumer(gw, "g-two-clients")

        def split():
            kp_polls()
            c.poll(0.05)
            mine = {tp.partition for tp in kp.assignment()}
            return len(mine) == 2 and len(owned(c)) == 2 and not mine & owned(c)

        wait_for(split, timeout=30, interval=0, what="the partitions split between clients")
    finally:
        kp.close()
        if c is not None:
            c.close()
