"""CreatePartitions, ElectLeaders, DescribeLogDirs and authorized operations over the Kafka
listener of a real gateway process, with confluent-kafka's AdminClient where it has the
call and raw kio requests where it has not."""

from __future__ import annotations

import datetime
import importlib
import uuid

import pytest

from tests.ingest_gateway.kafka.kafka_gateway import call, connect

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import (AclOperation, AdminClient, NewPartitions,  # noqa: E402
                                   NewTopic)

INVALID_REQUEST, INVALID_PARTITIONS, INVALID_REPLICA_ASSIGNMENT = 42, 37, 39
ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION = 84, 3


def kio(api: str, version: int, kind: str = "request"):
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


def _topic(admin: AdminClient, partitions: int) -> str:
    name = f"cp-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, partitions)])[name].result(timeout=20)
    return name


def _code(future) -> int | None:
    try:
        future.result(timeout=20)
        return None
    except ck.KafkaException as e:
        return e.args[0].code()


def test_create_partitions_grows_a_topic_that_then_takes_records(kafka_gateway, kafka_log):
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    name = _topic(admin, 2)
    dry = admin.create_partitions([NewPartitions(name, 5)], validate_only=True)
    assert _code(dry[name]) is None
    assert kafka_log.topic(name, refresh=True).partitions == 2  # validate_only: unchanged
    assert _code(admin.create_partitions([NewPartitions(name, 5)])[name]) is None
    assert kafka_log.topic(name, refresh=True).partitions == 5
    # Kafka's refusals: the same count, fewer, an unknown topic
    assert _code(admin.create_partitions([NewPartitions(name, 5)])[name]) == INVALID_PARTITIONS
    assert _code(admin.create_partitions([NewPartitions(name, 3)])[name]) == INVALID_PARTITIONS
    ghost = f"ghost-{uuid.uuid4().hex[:6]}"
    assert _code(admin.create_partitions([NewPartitions(ghost, 3)])[ghost]) == \
        UNKNOWN_TOPIC_OR_PARTITION
    # the new partition is served: metadata lists it and a record written there reads back
    assert len(admin.list_topics(name, timeout=20).topics[name].partitions) == 5
    p = ck.Producer({"bootstrap.servers": kafka_gateway.bootstrap,
                     "topic.metadata.refresh.interval.ms": 500})
    p.produce(name, b"in-4", partition=4)
    assert p.flush(30) == 0
    c = ck.Consumer({"bootstrap.servers": kafka_gateway.bootstrap, "group.id": name})
    c.assign([TopicPartition(name, 4, 0)])
    m = c.poll(20)
    c.close()
    assert m is not None and m.error() is None and (m.partition(), m.value()) == (4, b"in-4")


def test_create_partitions_refuses_an_assignment_and_a_duplicate(kafka_gateway, kafka_log):
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    name = _topic(admin, 1)
    m = kio("create_partitions", 3)
    req = m.CreatePartitionsRequest(
        topics=(m.CreatePartitionsTopic(name=name, count=2, assignments=(
                    m.CreatePartitionsAssignment(broker_ids=(0,)),)),
                m.CreatePartitionsTopic(name="dup", count=2, assignments=None),
                m.CreatePartitionsTopic(name="dup", count=3, assignments=None)),
        timeout=datetime.timedelta(seconds=10), validate_only=False)
    with connect(kafka_gateway) as s:
        _, resp = call(s, req, 3)
    got = [(r.name, r.error_code) for r in resp.results]
    assert got == [(name, INVALID_REPLICA_ASSIGNMENT), ("dup", INVALID_REQUEST),
                   ("dup", INVALID_REQUEST)]
    assert kafka_log.topic(name, refresh=True).partitions == 1


def test_elect_leaders_answers_election_not_needed(kafka_gateway):
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    name = _topic(admin, 2)
    from confluent_kafka import ElectionType

    fut = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(name, 0),
                                                       TopicPartition(name, 1)])
    result = fut.result(timeout=20)
    assert {tp.partition: err.code() for tp, err in result.items()} == \
        {0: ELECTION_NOT_NEEDED, 1: ELECTION_NOT_NEEDED}
    m = kio("elect_leaders", 2)
    with connect(kafka_gateway) as s:
        # an unknown partition, an unclean election, all partitions, a bad election type
        _, named = call(s, m.ElectLeadersRequest(election_type=1, topic_partitions=(
            m.TopicPartitions(topic=name, partitions=(1, 7)),),
            timeout=datetime.timedelta(seconds=5)), 2)
        _, every = call(s, m.ElectLeadersRequest(election_type=0, topic_partitions=None,
                                                 timeout=datetime.timedelta(seconds=5)), 2)
        _, bad = call(s, m.ElectLeadersRequest(election_type=9, topic_partitions=(),
                                               timeout=datetime.timedelta(seconds=5)), 2)
    (r,) = named.replica_election_results
    assert [(p.partition_id, p.error_code) for p in r.partition_result] == \
        [(1, ELECTION_NOT_NEEDED), (7, UNKNOWN_TOPIC_OR_PARTITION)]
    listed = {t.topic: t.partition_result for t in every.replica_election_results}
    assert name in listed and listed[name] == ()  # Kafka leaves out "not needed" for all
    assert bad.error_code == INVALID_REQUEST


def test_describe_log_dirs_answers_the_store_as_one_dir(kafka_gateway, kafka_store):
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    name = _topic(admin, 2)
    p = ck.Producer({"bootstrap.servers": kafka_gateway.bootstrap, "acks": "all"})
    for i in range(10):
        p.produce(name, b"x" * 100, partition=1)
    assert p.flush(30) == 0
    for version in (1, 4, 5):
        m = kio("describe_log_dirs", version)
        with connect(kafka_gateway) as s:
            _, resp = call(s, m.DescribeLogDirsRequest(topics=(m.DescribableLogDirTopic(
                topic=name, partitions=(0, 1, 9)),)), version)
        (d,) = resp.results
        assert d.error_code == 0 and d.log_dir == kafka_store
        (t,) = d.topics
        sizes = {q.partition_index: q.partition_size for q in t.partitions}
        assert set(sizes) == {0, 1} and sizes[0] == 0 and sizes[1] > 1000, sizes
        assert all(q.offset_lag == 0 and not q.is_future_key for q in t.partitions)


def test_authorized_operations_without_an_authorizer_are_every_supported_one(kafka_gateway):
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    name = _topic(admin, 1)
    from confluent_kafka import TopicCollection

    (desc,) = admin.describe_topics(TopicCollection([name]),
                                    include_authorized_operations=True).values()
    ops = set(desc.result(timeout=20).authorized_operations)
    assert ops == {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE,
                   AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=20)
    assert AclOperation.IDEMPOTENT_WRITE in set(cluster.authorized_operations)
    assert AclOperation.READ not in set(cluster.authorized_operations)
    # not asked: Kafka's "not asked" value (INT32_MIN)
    m = kio("metadata", 12)
    with connect(kafka_gateway) as s:
        _, resp = call(s, m.MetadataRequest(
            topics=(m.MetadataRequestTopic(topic_id=None, name=name),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False), 12)
    assert resp.topics[0].topic_authorized_operations == -2147483648


def test_describe_groups_answers_authorized_operations_when_asked(kafka_gateway):
    m = kio("describe_groups", 5)
    with connect(kafka_gateway) as s:
        _, asked = call(s, m.DescribeGroupsRequest(groups=("g-ops",),
                                                   include_authorized_operations=True), 5)
        _, not_asked = call(s, m.DescribeGroupsRequest(groups=("g-ops",),
                                                       include_authorized_operations=False), 5)
    ops = asked.groups[0].authorized_operations
    # without an authorizer: every operation a group supports (Kafka's codes)
    assert ops == sum(1 << c for c in (3, 6, 8, 10, 11))  # Read Delete Describe *Configs
    assert not_asked.groups[0].authorized_operations == -2147483648


def test_reassignments_and_log_dir_moves_are_answered_for_one_replica(kafka_gateway,
                                                                      kafka_store):
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    name = _topic(admin, 2)
    lr, ar, ad = (kio("list_partition_reassignments", 0),
                  kio("alter_partition_reassignments", 1), kio("alter_replica_log_dirs", 2))
    five = datetime.timedelta(seconds=5)
    with connect(kafka_gateway) as s:
        _, listed = call(s, lr.ListPartitionReassignmentsRequest(timeout=five, topics=None), 0)
        assert listed.error_code == 0 and listed.topics == ()
        _, moved = call(s, ar.AlterPartitionReassignmentsRequest(
            timeout=five, allow_replication_factor_change=True, topics=(ar.ReassignableTopic(
                name=name, partitions=(
                    ar.ReassignablePartition(partition_index=0, replicas=(0,)),
                    ar.ReassignablePartition(partition_index=1, replicas=(0, 1)),
                    ar.ReassignablePartition(partition_index=1, replicas=None),
                    ar.ReassignablePartition(partition_index=9, replicas=(0,)))),)), 1)
        got = [(p.partition_index, p.error_code) for p in moved.responses[0].partitions]
        assert got == [(0, 0), (1, INVALID_REPLICA_ASSIGNMENT), (1, 85),
                       (9, UNKNOWN_TOPIC_OR_PARTITION)]
        assert "one replica, the store" in moved.responses[0].partitions[1].error_message
        _, dirs = call(s, ad.AlterReplicaLogDirsRequest(dirs=(
            ad.AlterReplicaLogDir(path=kafka_store, topics=(
                ad.AlterReplicaLogDirTopic(name=name, partitions=(0,)),)),
            ad.AlterReplicaLogDir(path="/var/kafka-logs", topics=(
                ad.AlterReplicaLogDirTopic(name=name, partitions=(1, 5)),)))), 2)
        codes = [(r.topic_name, p.partition_index, p.error_code) for r in dirs.results
                 for p in r.partitions]
        assert codes == [(name, 0, 0), (name, 1, 57), (name, 5, UNKNOWN_TOPIC_OR_PARTITION)]


def test_replication_throttles_are_never_set_so_deleting_them_is_a_no_op(kafka_gateway):
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    name = _topic(admin, 1)
    m = kio("incremental_alter_configs", 1)

    def alter(rtype: int, rname: str, op: int, cfg: str) -> int:
        with connect(kafka_gateway) as s:
            _, resp = call(s, m.IncrementalAlterConfigsRequest(resources=(m.AlterConfigsResource(
                resource_type=rtype, resource_name=rname, configs=(m.AlterableConfig(
                    name=cfg, config_operation=op, value=None if op == 1 else "10"),)),),
                validate_only=False), 1)
        return resp.responses[0].error_code

    assert alter(4, "0", 1, "leader.replication.throttled.rate") == 0
    assert alter(2, name, 1, "follower.replication.throttled.replicas") == 0
    assert alter(4, "0", 0, "leader.replication.throttled.rate") == INVALID_REQUEST
    assert alter(2, name, 0, "leader.replication.throttled.replicas") == 40  # INVALID_CONFIG
