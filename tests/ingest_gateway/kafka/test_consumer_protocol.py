"""KIP-848 (``group.protocol=consumer``) with unmodified confluent-kafka (librdkafka)
consumers against a gateway subprocess's Kafka listener: members join and split the
partitions, one leaves and only its partitions move (each revoked before it is
assigned elsewhere), commits carry the member epoch and a new member resumes from them;
ConsumerGroupDescribe and ListGroups v5 show the group as a consumer group.
"""

from __future__ import annotations

import threading
import time

import pytest

from jobs.gateway_process import wait_for
from log_layout import open_log
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess
from tests.ingest_gateway.support import produce
from tests.jobs.cli_proc import sparklog, text

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import ConsumerGroupType, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

TOPIC, PARTITIONS, RECORDS = "kip848", 6, 300
#: the gateway's KIP-848 timing made short so the tests move quickly (Kafka: 5 s / 45 s)
SETTINGS = {"gateway.group.consumer.heartbeat.interval.ms": 200,
            "gateway.group.consumer.session.timeout.ms": 4000}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    url = str(tmp_path_factory.mktemp("kip848") / "store")
    open_log(url, fsync=False).create_topic(TOPIC, {"partitions": PARTITIONS})
    with KafkaGatewayProcess(url, SETTINGS) as gw:
        for p in range(PARTITIONS):
            produce(gw, TOPIC, p, [b"v%d" % i for i in range(p, RECORDS, PARTITIONS)])
        yield gw


class Member:
    """A confluent-kafka consumer with group.protocol=consumer that logs, per partition,
    when it was assigned and revoked (from its rebalance callbacks)."""

    def __init__(self, gw, group: str, name: str, events: list, lock: threading.Lock, **extra):
        self.name, self.events, self.lock = name, events, lock
        self.c = confluent_kafka.Consumer({
            "bootstrap.servers": gw.bootstrap, "group.id": group, "client.id": name,
            "group.protocol": "consumer", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, **extra})
        self.seen: list = []
        self.c.subscribe([TOPIC], on_assign=self._assigned, on_revoke=self._revoked,
                         on_lost=self._revoked)

    def _log(self, what: str, parts) -> None:
        with self.lock:
            self.events.extend((time.monotonic(), self.name, what, tp.partition) for tp in parts)

    def _assigned(self, c, parts) -> None:
        self._log("assign", parts)

    def _revoked(self, c, parts) -> None:
        self._log("revoke", parts)

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def poll(self) -> None:
        msg = self.c.poll(0.05)
        if msg is not None and not msg.error():
            self.seen.append((msg.partition(), msg.offset(), msg.value()))


def poll_until(members, predicate, what: str, timeout: float = 30):
    def step():
        for m in members:
            m.poll()
        return predicate()
    return wait_for(step, timeout=timeout, interval=0, what=what)


def read_to_end(m: Member) -> bool:
    """Whether the member's position is at the log end of every partition it owns."""
    owned = [TopicPartition(TOPIC, p) for p in m.owned()]
    return all(tp.offset == RECORDS // PARTITIONS for tp in m.c.position(owned))


def check_no_overlap(events: list) -> None:
    """A partition is assigned to a member only after its previous owner revoked it."""
    owner: dict[int, str] = {}
    for _, name, what, p in sorted(events):
        if what == "assign":
            assert p not in owner, f"partition {p} given to {name} while {owner[p]} holds it"
            owner[p] = name
        elif owner.get(p) == name:
            del owner[p]


def test_members_split_rebalance_incrementally_commit_and_resume(gateway):
    gw, group = gateway, "kip848-a"
    events: list = []
    lock = threading.Lock()
    a = Member(gw, group, "a", events, lock)
    b = Member(gw, group, "b", events, lock)
    c = Member(gw, group, "c", events, lock)
    members = [a, b, c]
    try:
        poll_until(members, lambda: [len(m.owned()) for m in members] == [2, 2, 2],
                   "three members with two partitions each")
        assert set().union(*(m.owned() for m in members)) == set(range(PARTITIONS))
        # Nothing is committed yet, so a partition that moved while the group formed is
        # read again from the start by its new owner: duplicates are allowed, loss is not.
        poll_until(members, lambda: all(read_to_end(m) for m in members),
                   "every member at the end of each partition it owns")
        values = {v for m in members for _, _, v in m.seen}
        assert values == {b"v%d" % i for i in range(RECORDS)}
        for m in members:  # the commits carry each member's epoch (OffsetCommit v9)
            m.c.commit(asynchronous=False)
        kept = {m.name: m.owned() for m in (a, b)}
        since = len(events)
        c.c.close()  # leaves (member epoch -1): only c's partitions move
        members = [a, b]
        poll_until(members, lambda: [len(m.owned()) for m in members] == [3, 3],
                   "a and b with three partitions each")
        for m in members:
            assert kept[m.name] <= m.owned(), "a member lost a partition it kept"
        revoked = [(n, p) for _, n, what, p in events[since:] if what == "revoke" and n != "c"]
        assert revoked == [], f"a and b revoked {revoked}: only c's partitions should move"
        check_no_overlap(events)
    finally:
        for m in members:
            m.c.close()
    # a new member of the group resumes from the commits: nothing is read again
    d = Member(gw, group, "d", events, lock)
    try:
        poll_until([d], lambda: len(d.owned()) == PARTITIONS, "d owning every partition")
        got = d.c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
        assert [tp.offset for tp in got] == [RECORDS // PARTITIONS] * PARTITIONS
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            d.poll()
        assert d.seen == []
    finally:
        d.c.close()


def test_describe_and_list_show_a_consumer_group(gateway):
    gw, group = gateway, "kip848-describe"
    events: list = []
    m = Member(gw, group, "solo", events, threading.Lock())
    try:
        poll_until([m], lambda: len(m.owned()) == PARTITIONS, "the member owning everything")
        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        d = admin.describe_consumer_groups([group])[group].result(timeout=20)
        assert d.type == ConsumerGroupType.CONSUMER
        assert len(d.members) == 1
        assert {tp.partition for tp in d.members[0].assignment.topic_partitions} \
            == set(range(PARTITIONS))
        listed = admin.list_consumer_groups(
            types={ConsumerGroupType.CONSUMER}).result(timeout=20).valid
        assert group in {g.group_id for g in listed}
        classic = admin.list_consumer_groups(
            types={ConsumerGroupType.CLASSIC}).result(timeout=20).valid
        assert group not in {g.group_id for g in classic}
        # sparklog groups describe --members: the protocol, epoch and assignment per member
        run = sparklog("groups", "describe", group, "--members", "--store", gw.store_url,
                       "--bootstrap-server", gw.url)
        out = text(run)[0]
        assert run.returncode == 0, text(run)
        assert out.splitlines()[0].startswith(f"group {group} (consumer): state Stable"), out
        row = out.splitlines()[2].split()
        assert row[1:3] == ["solo", "consumer"] and int(row[3]) >= 1 and row[4] == "6", out
        assert f"{TOPIC}-5" in out, out
        # the console's group page: the type, the assignor, each member's protocol and
        # assignment
        status, html = gw.request("GET", f"/ui/groups/{group}")[:2]
        html = html.decode() if isinstance(html, bytes) else str(html)
        assert status == 200, html[:500]
        for needle in ("<b>consumer</b>", "Group epoch", "<b>uniform</b>", "solo",
                       f"{TOPIC}-0, {TOPIC}-1"):
            assert needle in html, needle
    finally:
        m.c.close()


def test_a_static_member_restarted_gets_its_partitions_back(gateway):
    """group.instance.id with group.protocol=consumer: the closed member's partitions stay
    with it (nobody else gets them) and its successor process takes them."""
    gw, group = gateway, "kip848-static"
    events: list = []
    lock = threading.Lock()
    a = Member(gw, group, "a", events, lock, **{"group.instance.id": "host-a"})
    b = Member(gw, group, "b", events, lock)
    try:
        poll_until([a, b], lambda: [len(a.owned()), len(b.owned())] == [3, 3],
                   "a and b with three partitions each")
        mine, theirs = a.owned(), b.owned()
        a.c.close()  # a static member's close: member epoch -2, partitions kept
        end = time.monotonic() + 2
        while time.monotonic() < end:
            b.poll()
        assert b.owned() == theirs, "b was given the away static member's partitions"
        a2 = Member(gw, group, "a2", events, lock, **{"group.instance.id": "host-a"})
        try:
            poll_until([a2, b], lambda: a2.owned() == mine, "a2 owning a's partitions")
            assert b.owned() == theirs
        finally:
            a2.c.close()
    finally:
        b.c.close()


def test_a_regular_expression_subscription_follows_new_topics(gateway):
    """subscribe(["^..."]) with group.protocol=consumer: the coordinator matches the
    expression (SubscribedTopicRegex, RE2) on topic names, and a topic created later
    joins the member's assignment."""
    gw, group = gateway, "kip848-regex"
    lg = open_log(gw.store_url, fsync=False)
    lg.create_topic("re-a", {"partitions": 2})
    events: list = []
    m = Member(gw, group, "re", events, threading.Lock())
    m.c.unsubscribe()
    m.c.subscribe(["^re-.*"])
    try:
        poll_until([m], lambda: {(tp.topic, tp.partition) for tp in m.c.assignment()}
                   == {("re-a", 0), ("re-a", 1)}, "re-a's partitions")
        lg.create_topic("re-b", {"partitions": 1})
        lg.create_topic("other", {"partitions": 1})
        poll_until([m], lambda: {(tp.topic, tp.partition) for tp in m.c.assignment()}
                   == {("re-a", 0), ("re-a", 1), ("re-b", 0)}, "re-b joining the assignment")
    finally:
        m.c.close()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_mixed_group_of_classic_and_kip848_members(gateway, strategy):
    """A classic librdkafka member (eager range, or cooperative-sticky) and a
    group.protocol=consumer one in one group, as Kafka 4 allows: they split the partitions,
    never both owning one, and the survivor of either kind takes everything."""
    gw, group = gateway, f"kip848-mixed-{strategy}"
    events: list = []
    lock = threading.Lock()
    new = Member(gw, group, "new", events, lock)
    poll_until([new], lambda: len(new.owned()) == PARTITIONS, "the KIP-848 member alone")
    old = Member(gw, group, "old", events, lock, **{
        "group.protocol": "classic", "partition.assignment.strategy": strategy,
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    members = [new, old]
    try:
        poll_until(members, lambda: [len(m.owned()) for m in members] == [3, 3],
                   "three partitions each")
        assert new.owned() | old.owned() == set(range(PARTITIONS))
        check_no_overlap(events)
        new.c.close()
        members = [old]
        poll_until(members, lambda: len(old.owned()) == PARTITIONS, "the classic one alone")
        check_no_overlap(events)
    finally:
        for m in members:
            m.c.close()
