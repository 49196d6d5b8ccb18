"""DeleteGroups (42) and OffsetDelete (47) on a gateway subprocess's Kafka listener:
confluent-kafka's AdminClient ``delete_consumer_groups`` (an empty group deleted with
its offsets, a group with a live member refused NON_EMPTY_GROUP, an unknown one
GROUP_ID_NOT_FOUND), and OffsetDelete over a raw socket (confluent-kafka has no call for
it): offsets of one partition deleted and the others kept, a subscribed topic refused
GROUP_SUBSCRIBED_TO_TOPIC, unknown partitions and groups answered with Kafka's codes;
hostile requests of both; Kafka's ACLs over a SASL listener. Slow: Kafka's own ``kafka-consumer-groups.sh``
(ConsumerGroupCommand) ``--delete`` and ``--delete-offsets``."""

from __future__ import annotations

import pytest

from jobs.gateway_process import wait_for
from log_layout import open_log
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess
from tests.ingest_gateway.kafka.test_groups_wire import RawClient
from tests.ingest_gateway.kafka.test_kafka_tools import run
from tests.ingest_gateway.support import produce

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

TOPIC, OTHER, PARTITIONS = "deletes", "kept", 3
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC = 68, 69, 86
UNKNOWN_TOPIC_OR_PARTITION = 3


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    url = str(tmp_path_factory.mktemp("kafka-group-deletes") / "store")
    lg = open_log(url, fsync=False)
    for t in (TOPIC, OTHER):
        lg.create_topic(t, {"partitions": PARTITIONS})
    with KafkaGatewayProcess(url, {"gateway.group.min.session.timeout.ms": 1000}) as g:
        for t in (TOPIC, OTHER):
            for p in range(PARTITIONS):
                produce(g, t, p, [b"r%d" % i for i in range(10)])
        g.log = lg
        yield g


@pytest.fixture
def raw(gw):
    c = RawClient(gw.kafka_port)
    yield c
    c.close()


def commit(gw, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """A member-less commit (an ``assign()`` consumer), which leaves the group empty."""
    c = confluent_kafka.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": group,
                                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                 asynchronous=False)
    finally:
        c.close()


def committed(gw, group: str) -> dict[tuple[str, int], int]:
    doc = gw.log.read_group_offsets(group) or {}
    return {(t, int(p)): e["offset"] for t, parts in doc.get("offsets", {}).items()
            for p, e in parts.items()}


def delete_groups(gw, *groups: str) -> dict[str, int]:
    """AdminClient's DeleteGroups: each group's Kafka error code (0: deleted)."""
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    out = {}
    for g, fut in admin.delete_consumer_groups(list(groups), request_timeout=15).items():
        try:
            fut.result()
            out[g] = 0
        except KafkaException as e:
            out[g] = e.args[0].code()
    return out


def member(gw, group: str):
    """A live subscribed member of ``group`` (reading TOPIC), once it has partitions."""
    c = confluent_kafka.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": group,
                                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                                  "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False})
    c.subscribe([TOPIC])

    def assigned():
        c.poll(0.1)
        return bool(c.assignment())
    wait_for(assigned, timeout=30, interval=0, what="the member's assignment")
    return c


def offset_delete(raw, group: str, parts: dict[str, list[int]]):
    return raw.call(47, 0, group_id=group, topics=tuple(
        _topic(t, ps) for t, ps in parts.items()))


def _topic(name: str, parts: list[int]):
    from kio.schema.offset_delete.v0.request import (OffsetDeleteRequestPartition,
                                                     OffsetDeleteRequestTopic)
    return OffsetDeleteRequestTopic(name=name, partitions=tuple(
        OffsetDeleteRequestPartition(partition_index=p) for p in parts))


def codes_of(resp) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code.value
            for t in resp.topics for p in t.partitions}


def test_an_empty_group_is_deleted_with_its_offsets(gw):
    commit(gw, "empty", {(TOPIC, 0): 4, (TOPIC, 1): 7})
    assert committed(gw, "empty") == {(TOPIC, 0): 4, (TOPIC, 1): 7}
    assert delete_groups(gw, "empty") == {"empty": 0}
    assert gw.log.read_group_offsets("empty") is None
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    listed = admin.list_consumer_groups(request_timeout=15).result()
    assert "empty" not in {g.group_id for g in listed.valid}
    # the name is free: deleting it again is GROUP_ID_NOT_FOUND
    assert delete_groups(gw, "empty") == {"empty": GROUP_ID_NOT_FOUND}


def test_a_group_with_a_live_member_is_refused_and_kept(gw):
    c = member(gw, "busy")
    try:
        c.commit(offsets=[TopicPartition(TOPIC, p, 2) for p in range(PARTITIONS)],
                 asynchronous=False)
        codes = delete_groups(gw, "busy", "nobody-knows-me")
        assert codes == {"busy": NON_EMPTY_GROUP, "nobody-knows-me": GROUP_ID_NOT_FOUND}
        assert committed(gw, "busy") == {(TOPIC, p): 2 for p in range(PARTITIONS)}
    finally:
        c.close()  # leaves: the group is empty now
    assert delete_groups(gw, "busy") == {"busy": 0}
    assert gw.log.read_group_offsets("busy") is None


def test_offset_delete_of_an_empty_group(gw, raw):
    commit(gw, "od", {(TOPIC, 0): 1, (TOPIC, 1): 2, (OTHER, 0): 3})
    resp = offset_delete(raw, "od", {TOPIC: [0, 2, 99], "no-such-topic": [0]})
    assert resp.error_code.value == 0
    assert codes_of(resp) == {(TOPIC, 0): 0, (TOPIC, 2): 0,  # 2 had none: no error
                              (TOPIC, 99): UNKNOWN_TOPIC_OR_PARTITION,
                              ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION}
    assert committed(gw, "od") == {(TOPIC, 1): 2, (OTHER, 0): 3}
    # the coordinator's view agrees (what OffsetFetch answers)
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    fut = admin.list_consumer_group_offsets(
        [confluent_kafka.ConsumerGroupTopicPartitions("od", [TopicPartition(TOPIC, 0),
                                                             TopicPartition(TOPIC, 1)])],
        request_timeout=15)["od"]
    got = {tp.partition: tp.offset for tp in fut.result().topic_partitions}
    assert got == {0: -1001, 1: 2}  # OFFSET_INVALID: none committed


def test_offset_delete_refuses_a_topic_a_member_reads(gw, raw):
    commit(gw, "od-live", {(OTHER, 0): 5, (OTHER, 1): 6})
    c = member(gw, "od-live")
    try:
        c.commit(offsets=[TopicPartition(TOPIC, p, 3) for p in range(PARTITIONS)],
                 asynchronous=False)
        resp = offset_delete(raw, "od-live", {TOPIC: [0, 1], OTHER: [0]})
        assert resp.error_code.value == 0
        assert codes_of(resp) == {(TOPIC, 0): GROUP_SUBSCRIBED_TO_TOPIC,
                                  (TOPIC, 1): GROUP_SUBSCRIBED_TO_TOPIC, (OTHER, 0): 0}
        after = committed(gw, "od-live")
        assert after[(TOPIC, 0)] == 3 and (OTHER, 0) not in after and after[(OTHER, 1)] == 6
        # the member carries on: it still commits and the group still has it
        c.commit(offsets=[TopicPartition(TOPIC, 0, 4)], asynchronous=False)
        assert committed(gw, "od-live")[(TOPIC, 0)] == 4
    finally:
        c.close()


def test_offset_delete_of_an_unknown_or_invalid_group(gw, raw):
    resp = offset_delete(raw, "never-seen", {TOPIC: [0]})
    assert resp.error_code.value == GROUP_ID_NOT_FOUND and resp.topics == ()
    resp = offset_delete(raw, "", {TOPIC: [0]})
    assert resp.error_code.value == 24  # INVALID_GROUP_ID
    codes = delete_groups(gw, "a/b")
    assert codes == {"a/b": 24}


def test_the_cli_deletes_through_the_same_operation(gw):
    """``sparklog groups delete`` refuses a live group as DeleteGroups does (the one
    operation in ``ingest_gateway.server.groups.deletes``)."""
    from ingest_gateway.protocol.groups import GroupNotEmpty
    from ingest_gateway.server.groups import deletes
    from ingest_gateway.server.groups.table import GroupTable
    from log_layout import wall_clock_ms

    commit(gw, "cli", {(TOPIC, 0): 1})
    gw.log.write_group_offsets("cli", {**gw.log.read_group_offsets("cli"), "members": [
        {"member_id": "m-1", "client_id": "c", "topics": [TOPIC], "strategies": ["range"],
         "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "assignment": []}]})
    table = GroupTable(gw.log, wall_clock_ms, load_members=True)
    with pytest.raises(GroupNotEmpty):
        deletes.delete_group(table, "cli")
    assert deletes.delete_offsets(table, "cli", [(TOPIC, 0)]) == {(TOPIC, 0): "subscribed"}
    assert committed(gw, "cli") == {(TOPIC, 0): 1}


# -- hostile input ---------------------------------------------------------------------
def test_hostile_deletes_are_answered_and_the_gateway_serves_on(gw):
    """Well-formed but hostile fields (thousands of groups, names Kafka refuses,
    partitions out of range, a topic name that is a path), then fuzzed bodies of both
    APIs (``fuzz_cases``: truncated, flipped, huge lengths): each answered with Kafka's
    codes or the connection closed, and the gateway answers a plain request after."""
    import random
    import socket

    from kio.schema.delete_groups.v2.request import DeleteGroupsRequest

    from tests.ingest_gateway.kafka import fuzz_cases
    from tests.ingest_gateway.kafka.kafka_gateway import call, connect, read_frame

    names = tuple(f"h-{i}" for i in range(3000)) + ("", "x" * 300, "../etc", "a\x00b")
    with connect(gw) as s:
        resp = call(s, DeleteGroupsRequest(groups_names=names), 2)[1]
    got = {r.group_id: r.error_code.value for r in resp.results}
    assert all(got[f"h-{i}"] == GROUP_ID_NOT_FOUND for i in range(3000))
    assert got[""] == got["x" * 300] == got["../etc"] == got["a\x00b"] == 24  # INVALID_GROUP_ID

    commit(gw, "hostile", {(TOPIC, 0): 1})
    c = RawClient(gw.kafka_port)
    try:
        resp = offset_delete(c, "hostile", {TOPIC: [-1, 2**31 - 1, 0], "../x": [0], "": [0]})
        assert codes_of(resp) == {(TOPIC, -1): UNKNOWN_TOPIC_OR_PARTITION,
                                  (TOPIC, 2**31 - 1): UNKNOWN_TOPIC_OR_PARTITION,
                                  (TOPIC, 0): 0, ("../x", 0): UNKNOWN_TOPIC_OR_PARTITION,
                                  ("", 0): UNKNOWN_TOPIC_OR_PARTITION}
    finally:
        c.close()

    rnd = random.Random(31)
    for key, version in [(42, 0), (42, 1), (42, 2), (47, 0)]:
        for body in fuzz_cases.valid_bodies(key, version, 4):
            for _ in range(15):
                with socket.create_connection(("127.0.0.1", gw.kafka_port), timeout=30) as s:
                    s.sendall(fuzz_cases.framed(key, version, fuzz_cases.mutate(rnd, body)))
                    s.shutdown(socket.SHUT_WR)
                    read_frame(s)  # an answer, or None: the connection closed
    assert delete_groups(gw, "hostile") == {"hostile": 0}  # still serving


# -- ACLs ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    from tests.ingest_gateway.kafka.sasl_gateway import allow, sasl_gateway

    acls = [allow("Group", "den-del", "alice", "Delete"),
            allow("Topic", TOPIC, "alice", "Read")]
    with sasl_gateway(tmp_path_factory.mktemp("kafka-delete-acls"), users=("alice", "mallory"),
                      acls=acls, topics={TOPIC: 1, OTHER: 1}) as g:
        g.log = open_log(g.store_url)
        yield g


def test_acls_are_kafkas(secured):
    """DeleteGroups: Delete on each group (GROUP_AUTHORIZATION_FAILED 30 for the others);
    OffsetDelete: Delete on the group (30, top level), Read on each topic
    (TOPIC_AUTHORIZATION_FAILED 29 on its partitions, the others deleted)."""
    from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
    from kio.schema.offset_delete.v0.request import OffsetDeleteRequest

    from tests.ingest_gateway.kafka.kafka_gateway import call
    from tests.ingest_gateway.kafka.sasl_gateway import logged_in, still_serves

    for g in ("den-del", "den-other"):
        secured.log.write_group_offsets(g, {"group": g, "generation": 1, "offsets": {
            TOPIC: {"0": {"offset": 1}}, OTHER: {"0": {"offset": 2}}}})
    od = OffsetDeleteRequest(group_id="den-del", topics=(_topic(TOPIC, [0]), _topic(OTHER, [0])))
    with logged_in(secured, "mallory") as s:
        resp = call(s, od, 0)[1]
        assert resp.error_code.value == 30 and resp.topics == ()
        resp = call(s, DeleteGroupsRequest(groups_names=("den-del",)), 2)[1]
        assert [r.error_code.value for r in resp.results] == [30]
        assert still_serves(s)
    with logged_in(secured, "alice") as s:
        assert codes_of(call(s, od, 0)[1]) == {(TOPIC, 0): 0, (OTHER, 0): 29}
        assert committed(secured, "den-del") == {(OTHER, 0): 2}
        resp = call(s, DeleteGroupsRequest(groups_names=("den-del", "den-other")), 2)[1]
        assert {r.group_id: r.error_code.value for r in resp.results} == \
            {"den-del": 0, "den-other": 30}
    assert secured.log.read_group_offsets("den-del") is None
    assert secured.log.read_group_offsets("den-other") is not None


# -- Kafka's own kafka-consumer-groups.sh ----------------------------------------------
@pytest.mark.slow
@pytest.mark.kafka_broker
def test_kafka_consumer_groups_delete_and_delete_offsets(tools, gw):  # noqa: F811
    """ConsumerGroupCommand (kafka-tools, as ``test_kafka_tools`` runs the others):
    ``--delete-offsets`` of one topic, ``--delete`` refused while a member is live,
    then done once it left."""
    cmd = "consumer.group.ConsumerGroupCommand"
    commit(gw, "tool", {(TOPIC, 0): 3, (TOPIC, 1): 4, (OTHER, 0): 5})
    out = run(tools, gw, cmd, "--delete-offsets", "--group", "tool", "--topic", OTHER)
    assert "Request succeeded for deleting offsets from group tool." in out, out
    rows = [line.split() for line in out.splitlines() if line.startswith(OTHER)]
    assert rows == [[OTHER, str(p), "Successful"] for p in range(PARTITIONS)], out
    assert committed(gw, "tool") == {(TOPIC, 0): 3, (TOPIC, 1): 4}

    c = member(gw, "tool")
    try:
        out = run(tools, gw, cmd, "--delete-offsets", "--group", "tool", "--topic", TOPIC,
                  ok=False)
        assert "GroupSubscribedToTopic" in out or "subscribed" in out.lower(), out[-2000:]
        out = run(tools, gw, cmd, "--delete", "--group", "tool", ok=False)
        assert "GroupNotEmptyException" in out or "not empty" in out.lower(), out[-2000:]
        assert committed(gw, "tool") == {(TOPIC, 0): 3, (TOPIC, 1): 4}
    finally:
        c.close()
    out = run(tools, gw, cmd, "--delete", "--group", "tool")
    assert "Deletion of requested consumer groups ('tool') was successful." in out, out
    assert gw.log.read_group_offsets("tool") is None
    out = run(tools, gw, cmd, "--delete", "--group", "tool", ok=False)
    assert "GroupIdNotFoundException" in out or "does not exist" in out, out[-2000:]


# -- NOT_COORDINATOR -------------------------------------------------------------------
@pytest.mark.slow  # two gateway processes
def test_not_the_coordinator_deletes_nothing(tmp_path):
    """Slots 0 and 1 of one broker application, slot 0 the group's coordinator: slot 1
    answers NOT_COORDINATOR to both APIs and leaves the document alone; slot 0 deletes."""
    from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
    from kio.schema.offset_delete.v0.request import OffsetDeleteRequest

    from tests.ingest_gateway.kafka.kafka_gateway import call
    from tests.ingest_gateway.kafka.test_consumer_protocol_failover import (
        GROUP, TOPIC as FTOPIC, Application)
    import socket

    app = Application(str(tmp_path / "store"))
    app.log.create_topic(FTOPIC, {"partitions": 4})
    app.log.write_group_offsets(GROUP, {"group": GROUP, "generation": 1,
                                        "offsets": {FTOPIC: {"0": {"offset": 1}}}})

    def ask(port: int, req, version: int):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            return call(s, req, version)[1]

    dg = DeleteGroupsRequest(groups_names=(GROUP,))
    od = OffsetDeleteRequest(group_id=GROUP, topics=(_topic(FTOPIC, [0]),))
    with app.running():
        a, b = app.kafka_ports[0], app.kafka_ports[1]
        app.coordinate(0, (0, 1))
        wait_for(lambda: ask(b, dg, 2).results[0].error_code.value == 16, timeout=20,
                 what="slot 1 refusing the group")
        assert ask(b, od, 0).error_code.value == 16
        assert app.log.read_group_offsets(GROUP)["offsets"] == {FTOPIC: {"0": {"offset": 1}}}
        got = {}
        wait_for(lambda: got.setdefault("r", ask(a, od, 0)).error_code.value != 16
                 or got.pop("r") is None, timeout=20, what="slot 0 coordinating the group")
        assert got["r"].error_code.value == 0 and codes_of(got["r"]) == {(FTOPIC, 0): 0}
        assert app.log.read_group_offsets(GROUP)["offsets"] == {}
        assert ask(a, dg, 2).results[0].error_code.value == 0
        assert app.log.read_group_offsets(GROUP) is None
