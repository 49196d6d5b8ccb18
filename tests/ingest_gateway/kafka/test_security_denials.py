"""ACL denials answered as Kafka's broker answers them, over a SASL_PLAINTEXT listener:
per topic, partition, group or config resource (TOPIC_ 29, GROUP_ 30, CLUSTER_ 31,
TRANSACTIONAL_ID_AUTHORIZATION_FAILED 53), what is allowed in the same request served,
and the connection kept open (it answers the next request). ``alice`` holds ACLs on
TOPIC, GROUP, TXN and topics prefixed ``den-new-``; ``mallory`` holds none. Then real
clients (confluent-kafka's admin client and consumer) surface the same errors."""

from __future__ import annotations

import datetime

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from log_layout import open_log
from tests.ingest_gateway.kafka.kafka_gateway import call
from tests.ingest_gateway.kafka.sasl_gateway import (allow, client_conf, logged_in,
                                                     sasl_gateway, still_serves)

pytest.importorskip("kio")

TOPIC, SECRET, DOOMED = "den-t", "den-secret", "den-doomed"
GROUP, OTHER, VIEW, TXN = "den-g", "den-other", "den-view", "den-tx"
SEC = 5  # seconds
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    acls = [allow("Topic", TOPIC, "alice", op) for op in
            ("Read", "Write", "Delete", "DescribeConfigs", "AlterConfigs")]
    acls += [allow("Topic", DOOMED, "alice", "Delete"),
             allow("Topic", "den-new-", "alice", "Create", "PREFIXED"),
             allow("Group", GROUP, "alice", "Read"), allow("Group", VIEW, "alice", "Describe"),
             allow("TransactionalId", TXN, "alice", "Write")]
    with sasl_gateway(tmp_path_factory.mktemp("kafka-denials"), users=("alice", "mallory"),
                      acls=acls, topics={TOPIC: 1, SECRET: 1, DOOMED: 1}) as g:
        yield g


def _codes(topics, name="name", parts="partitions", code="error_code") -> dict:
    """{topic: [error code per partition]} of a per-partition answer."""
    return {getattr(t, name): [int(getattr(p, code)) for p in getattr(t, parts)]
            for t in topics}


def _commit(group: str, topics: tuple[str, ...]):
    from kio.schema.offset_commit.v8 import request as oc

    return oc.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=tuple(oc.OffsetCommitRequestTopic(name=t, partitions=(
            oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                            committed_leader_epoch=-1,
                                            committed_metadata=None),)) for t in topics))


def test_offset_commit_answers_per_topic_and_commits_what_is_allowed(gw):
    req = _commit(GROUP, (TOPIC, SECRET))
    with logged_in(gw, "mallory") as s:
        assert _codes(call(s, req, 8)[1].topics) == {TOPIC: [GROUP_DENIED], SECRET: [GROUP_DENIED]}
        assert still_serves(s)
    with logged_in(gw, "alice") as s:
        assert _codes(call(s, req, 8)[1].topics) == {TOPIC: [0], SECRET: [TOPIC_DENIED]}
        assert still_serves(s)
    assert _fetch_as_admin(gw, GROUP) == {TOPIC: 0}  # SECRET's offset was not committed


def _offset_fetch(group: str, topics: tuple[str, ...] | None, version: int = 7):
    from kio.index import load_request_schema
    from kio.schema.offset_fetch.v7.request import OffsetFetchRequestTopic

    cls = load_request_schema(9, version)
    asked = None if topics is None else tuple(
        OffsetFetchRequestTopic(name=t, partition_indexes=(0,)) for t in topics)
    if version < 2:
        from kio.schema.offset_fetch.v1.request import OffsetFetchRequestTopic as T1
        asked = tuple(T1(name=t, partition_indexes=(0,)) for t in topics or ())
        return cls(group_id=group, topics=asked)
    return cls(group_id=group, topics=asked, require_stable=False)


def _fetch_as_admin(gw, group: str) -> dict:
    with logged_in(gw, "admin") as s:
        answer = call(s, _offset_fetch(group, None), 7)[1]
    return {t.name: p.committed_offset for t in answer.topics for p in t.partitions}


def test_offset_fetch_answers_the_groups_code_or_per_topic(gw):
    with logged_in(gw, "admin") as s:
        assert _codes(call(s, _commit(GROUP, (TOPIC, SECRET)), 8)[1].topics) == \
            {TOPIC: [0], SECRET: [0]}
    with logged_in(gw, "mallory") as s:
        top = call(s, _offset_fetch(GROUP, (TOPIC,)), 7)[1]
        assert int(top.error_code) == GROUP_DENIED and top.topics == ()
        v1 = call(s, _offset_fetch(GROUP, (TOPIC,), 1), 1)[1]  # v1: no top-level code
        assert _codes(v1.topics) == {TOPIC: [GROUP_DENIED]}
        assert still_serves(s)
    with logged_in(gw, "alice") as s:
        named = call(s, _offset_fetch(GROUP, (TOPIC, SECRET)), 7)[1]
        assert int(named.error_code) == 0
        assert _codes(named.topics) == {TOPIC: [0], SECRET: [TOPIC_DENIED]}
        assert {t.name: t.partitions[0].committed_offset for t in named.topics} == \
            {TOPIC: 0, SECRET: -1}
        every = call(s, _offset_fetch(GROUP, None), 7)[1]  # all: SECRET left out
        assert [t.name for t in every.topics] == [TOPIC]
        assert still_serves(s)


def test_describe_groups_refuses_per_group_and_list_groups_filters(gw):
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
    from kio.schema.list_groups.v4.request import ListGroupsRequest

    with logged_in(gw, "admin") as s:  # OTHER exists (its committed offsets)
        call(s, _commit(OTHER, (TOPIC,)), 8)
        call(s, _commit(GROUP, (TOPIC,)), 8)
        listed = call(s, ListGroupsRequest(states_filter=()), 4)[1]
        assert {GROUP, OTHER} <= {g.group_id for g in listed.groups}
    describe = DescribeGroupsRequest(groups=(GROUP, OTHER), include_authorized_operations=False)
    with logged_in(gw, "alice") as s:
        groups = call(s, describe, 5)[1].groups
        assert [(g.group_id, int(g.error_code)) for g in groups] == \
            [(GROUP, 0), (OTHER, GROUP_DENIED)]
        listed = call(s, ListGroupsRequest(states_filter=()), 4)[1]
        assert int(listed.error_code) == 0 and [g.group_id for g in listed.groups] == [GROUP]
        assert still_serves(s)
    with logged_in(gw, "mallory") as s:
        groups = call(s, describe, 5)[1].groups
        assert [int(g.error_code) for g in groups] == [GROUP_DENIED, GROUP_DENIED]
        listed = call(s, ListGroupsRequest(states_filter=()), 4)[1]
        assert int(listed.error_code) == 0 and listed.groups == ()
        assert still_serves(s)


def test_create_and_delete_topics_answer_per_topic(gw):
    from kio.schema.create_topics.v7 import request as ct
    from kio.schema.delete_topics.v6 import request as dt

    def create(*names):
        return ct.CreateTopicsRequest(topics=tuple(ct.CreatableTopic(
            name=n, num_partitions=1, replication_factor=1, assignments=(), configs=())
            for n in names), timeout=datetime.timedelta(seconds=SEC), validate_only=False)

    def delete(*names):
        return dt.DeleteTopicsRequest(topics=tuple(dt.DeleteTopicState(name=n, topic_id=None)
                                                   for n in names),
                                      timeout=datetime.timedelta(seconds=SEC))

    with logged_in(gw, "mallory") as s:
        answer = call(s, create("den-new-m"), 7)[1].topics
        assert [(t.name, int(t.error_code)) for t in answer] == [("den-new-m", TOPIC_DENIED)]
        answer = call(s, delete(DOOMED), 6)[1].responses
        assert [(t.name, int(t.error_code)) for t in answer] == [(DOOMED, TOPIC_DENIED)]
        assert still_serves(s)
    with logged_in(gw, "alice") as s:
        answer = call(s, create("den-new-a", "den-x"), 7)[1].topics
        assert [(t.name, int(t.error_code)) for t in answer] == \
            [("den-new-a", 0), ("den-x", TOPIC_DENIED)]
        answer = call(s, delete(DOOMED, SECRET), 6)[1].responses
        assert [(t.name, int(t.error_code)) for t in answer] == \
            [(DOOMED, 0), (SECRET, TOPIC_DENIED)]
        assert still_serves(s)
    topics = set(open_log(gw.store_url).topics())
    assert {"den-new-a", SECRET} <= topics and not {"den-new-m", "den-x", DOOMED} & topics


def test_config_apis_answer_per_resource(gw):
    from kio.schema.alter_configs.v2 import request as ac
    from kio.schema.describe_configs.v4 import request as dc
    from kio.schema.incremental_alter_configs.v1 import request as iac

    def codes(answer, field):
        return [(r.resource_name, int(r.error_code)) for r in getattr(answer, field)]

    describe = dc.DescribeConfigsRequest(resources=tuple(
        dc.DescribeConfigsResource(resource_type=kind, resource_name=name,
                                   configuration_keys=None)
        for kind, name in ((2, TOPIC), (2, SECRET), (4, "0"))),
        include_synonyms=False, include_documentation=False)
    alter = ac.AlterConfigsRequest(resources=tuple(ac.AlterConfigsResource(
        resource_type=2, resource_name=n, configs=(ac.AlterableConfig(
            name="retention.ms", value="60000"),)) for n in (TOPIC, SECRET)), validate_only=True)
    incremental = iac.IncrementalAlterConfigsRequest(resources=tuple(iac.AlterConfigsResource(
        resource_type=2, resource_name=n, configs=(iac.AlterableConfig(
            name="retention.ms", config_operation=0, value="60000"),)) for n in (TOPIC, SECRET)),
        validate_only=True)
    with logged_in(gw, "alice") as s:
        answer = call(s, describe, 4)[1]
        assert codes(answer, "results") == [(TOPIC, 0), (SECRET, TOPIC_DENIED),
                                            ("0", CLUSTER_DENIED)]
        assert answer.results[1].error_message == "Topic authorization failed."
        assert answer.results[0].configs and not answer.results[1].configs
        assert codes(call(s, alter, 2)[1], "responses") == [(TOPIC, 0), (SECRET, TOPIC_DENIED)]
        assert codes(call(s, incremental, 1)[1], "responses") == \
            [(TOPIC, 0), (SECRET, TOPIC_DENIED)]
        assert still_serves(s)
    with logged_in(gw, "mallory") as s:
        assert [c for _, c in codes(call(s, describe, 4)[1], "results")] == \
            [TOPIC_DENIED, TOPIC_DENIED, CLUSTER_DENIED]
        assert [c for _, c in codes(call(s, alter, 2)[1], "responses")] == [TOPIC_DENIED] * 2
        assert still_serves(s)


def test_delete_records_and_offset_for_leader_epoch_answer_per_partition(gw):
    from kio.schema.delete_records.v2 import request as dr
    from kio.schema.offset_for_leader_epoch.v4 import request as ofle

    delete = dr.DeleteRecordsRequest(topics=tuple(dr.DeleteRecordsTopic(name=n, partitions=(
        dr.DeleteRecordsPartition(partition_index=0, offset=0),)) for n in (TOPIC, SECRET)),
        timeout=datetime.timedelta(seconds=SEC))
    epochs = ofle.OffsetForLeaderEpochRequest(replica_id=-1, topics=tuple(
        ofle.OffsetForLeaderTopic(topic=n, partitions=(ofle.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=-1, leader_epoch=0),)) for n in (TOPIC, SECRET)))
    with logged_in(gw, "alice") as s:
        assert _codes(call(s, delete, 2)[1].topics) == {TOPIC: [0], SECRET: [TOPIC_DENIED]}
        answer = call(s, epochs, 4)[1].topics
        assert _codes(answer, name="topic") == {TOPIC: [0], SECRET: [TOPIC_DENIED]}
        assert answer[1].partitions[0].end_offset == -1
        assert still_serves(s)
    with logged_in(gw, "mallory") as s:
        assert _codes(call(s, delete, 2)[1].topics) == \
            {TOPIC: [TOPIC_DENIED], SECRET: [TOPIC_DENIED]}
        assert _codes(call(s, epochs, 4)[1].topics, name="topic") == \
            {TOPIC: [TOPIC_DENIED], SECRET: [TOPIC_DENIED]}
        assert still_serves(s)


def _txn_calls(s, pid: int, epoch: int):
    """(AddPartitionsToTxn(topics), TxnOffsetCommit(group, topics)) callers on ``s``."""
    from kio.schema.add_partitions_to_txn.v3 import request as ap
    from kio.schema.txn_offset_commit.v3 import request as toc

    def add(*topics):
        answer = call(s, ap.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TXN, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=tuple(
                ap.AddPartitionsToTxnTopic(name=t, partitions=(0,)) for t in topics)), 3)[1]
        return _codes(answer.results_by_topic_v3_and_below, parts="results_by_partition",
                      code="partition_error_code")

    def commit(group, *topics):
        answer = call(s, toc.TxnOffsetCommitRequest(
            transactional_id=TXN, group_id=group, producer_id=pid, producer_epoch=epoch,
            generation_id=-1, member_id="", group_instance_id=None, topics=tuple(
                toc.TxnOffsetCommitRequestTopic(name=t, partitions=(
                    toc.TxnOffsetCommitRequestPartition(
                        partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                        committed_metadata=None),)) for t in topics)), 3)[1]
        return _codes(answer.topics)

    return add, commit


def test_transaction_apis_answer_per_partition(gw):
    from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
    from kio.schema.end_txn.v3.request import EndTxnRequest
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    with logged_in(gw, "alice") as alice, logged_in(gw, "mallory") as mallory:
        init = call(alice, InitProducerIdRequest(
            transactional_id=TXN, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=-1, producer_epoch=-1), 4)[1]
        assert int(init.error_code) == 0
        pid, epoch = init.producer_id, init.producer_epoch
        add, commit = _txn_calls(mallory, pid, epoch)
        assert add(TOPIC) == {TOPIC: [TXN_DENIED]}
        assert commit(GROUP, TOPIC) == {TOPIC: [TXN_DENIED]}
        assert still_serves(mallory)
        add, commit = _txn_calls(alice, pid, epoch)
        # one topic denied: nothing added, the others OPERATION_NOT_ATTEMPTED (55)
        assert add(TOPIC, SECRET) == {TOPIC: [55], SECRET: [TOPIC_DENIED]}
        assert add(TOPIC) == {TOPIC: [0]}
        assert commit(OTHER, TOPIC) == {TOPIC: [GROUP_DENIED]}
        assert int(call(alice, AddOffsetsToTxnRequest(
            transactional_id=TXN, producer_id=pid, producer_epoch=epoch, group_id=GROUP),
            3)[1].error_code) == 0
        assert commit(GROUP, TOPIC, SECRET) == {TOPIC: [0], SECRET: [TOPIC_DENIED]}
        assert int(call(alice, EndTxnRequest(transactional_id=TXN, producer_id=pid,
                                             producer_epoch=epoch, committed=False),
                        3)[1].error_code) == 0
        assert still_serves(alice)


# -- real clients ---------------------------------------------------------------------
def _error_code(future) -> int:
    with pytest.raises(KafkaException) as e:
        future.result(timeout=30)
    return e.value.args[0].code()


def test_confluent_admin_client_surfaces_the_authorization_errors(gw):
    mallory = AdminClient(client_conf(gw, "mallory"))
    assert _error_code(mallory.delete_topics([TOPIC], operation_timeout=SEC)[TOPIC]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _error_code(mallory.create_topics([NewTopic("den-new-c", 1)])["den-new-c"]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    resource = ConfigResource("topic", TOPIC)
    assert _error_code(mallory.describe_configs([resource])[resource]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    described = mallory.describe_consumer_groups([GROUP])[GROUP]
    assert _error_code(described) == KafkaError.GROUP_AUTHORIZATION_FAILED
    alice = AdminClient(client_conf(gw, "alice"))
    assert alice.describe_configs([resource])[resource].result(timeout=30)
    listed = alice.list_consumer_groups().result(timeout=30)
    assert {g.group_id for g in listed.valid} <= {GROUP, VIEW}
    assert TOPIC in open_log(gw.store_url).topics()


def test_a_consumer_commit_without_read_on_its_group_is_group_authorization_failed(gw):
    # Describe on VIEW finds the coordinator; OffsetCommit needs Read
    c = Consumer(client_conf(gw, "alice", **{"group.id": VIEW, "enable.auto.commit": False}))
    try:
        with pytest.raises(KafkaException) as e:
            c.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False)
        assert e.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        committed = c.committed([TopicPartition(TOPIC, 0)], timeout=30)  # Describe: allowed
        assert committed[0].error is None
    finally:
        c.close()
    c = Consumer(client_conf(gw, "alice", **{"group.id": GROUP, "enable.auto.commit": False}))
    try:  # librdkafka raises the first partition's error of a commit
        with pytest.raises(KafkaException) as e:
            c.commit(offsets=[TopicPartition(TOPIC, 0, 0), TopicPartition(SECRET, 0, 0)],
                     asynchronous=False)
        assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert still_serves_group(c)
    finally:
        c.close()


def still_serves_group(c: Consumer) -> bool:
    """The consumer's coordinator connection still answers (OffsetFetch)."""
    (tp,) = c.committed([TopicPartition(TOPIC, 0)], timeout=30)
    return tp.error is None
