"""Kafka's ACLs on issue 31's admin APIs, over a SASL_PLAINTEXT listener with the authorizer
on (raw requests as a logged-in user): CreatePartitions needs Alter on the topic,
ElectLeaders Alter on the cluster, DescribeLogDirs Describe on the cluster,
DescribeProducers Read on the topic, DescribeTransactions Describe on the transactional
id, and ListTransactions lists only the ids the principal may Describe; authorized
operations (KIP-430) are the principal's own. A denial is Kafka's code and the connection
stays open."""

from __future__ import annotations

import datetime
import importlib

import pytest

from tests.ingest_gateway.kafka.sasl_gateway import (allow, logged_in, sasl_gateway,
                                                     still_serves)

pytest.importorskip("kio")

TOPIC, OTHER = "den-t", "den-other"
TOPIC_AUTH, CLUSTER_AUTH, TXN_AUTH = 29, 31, 53
#: Kafka's AclOperation codes
READ, WRITE, ALTER, DESCRIBE = 3, 4, 7, 8


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    acls = [allow("Topic", TOPIC, "reader", "Read"), allow("Topic", TOPIC, "alterer", "Alter"),
            allow("Topic", TOPIC, "alterer", "Describe"),
            allow("TransactionalId", "mine", "reader", "Describe"),
            allow("Cluster", "kafka-cluster", "alterer", "Describe")]
    with sasl_gateway(tmp_path_factory.mktemp("admin-denials"), users=("reader", "alterer"),
                      acls=acls, topics={TOPIC: 1, OTHER: 1}) as g:
        yield g


def kio(api: str, version: int):
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def _call(s, req, version):
    from tests.ingest_gateway.kafka.kafka_gateway import call

    return call(s, req, version)[1]


def test_create_partitions_needs_alter_on_the_topic(gw):
    m = kio("create_partitions", 3)

    def grow(user: str, name: str) -> int:
        with logged_in(gw, user) as s:
            resp = _call(s, m.CreatePartitionsRequest(topics=(m.CreatePartitionsTopic(
                name=name, count=2, assignments=None),), timeout=datetime.timedelta(seconds=5),
                validate_only=True), 3)
            assert still_serves(s)
        return resp.results[0].error_code

    assert grow("reader", TOPIC) == TOPIC_AUTH
    assert grow("alterer", OTHER) == TOPIC_AUTH
    assert grow("alterer", TOPIC) == 0


def test_cluster_apis_need_their_cluster_operation(gw):
    el, ld = kio("elect_leaders", 2), kio("describe_log_dirs", 4)
    with logged_in(gw, "reader") as s:
        resp = _call(s, el.ElectLeadersRequest(election_type=0, topic_partitions=None,
                                               timeout=datetime.timedelta(seconds=5)), 2)
        assert resp.error_code == CLUSTER_AUTH
        resp = _call(s, ld.DescribeLogDirsRequest(topics=None), 4)
        assert resp.error_code == CLUSTER_AUTH and resp.results == ()
        assert still_serves(s)
    with logged_in(gw, "admin") as s:  # the super user
        assert _call(s, ld.DescribeLogDirsRequest(topics=None), 4).error_code == 0


def test_transaction_views_are_filtered_by_acls(gw):
    dp = kio("describe_producers", 0)
    lt = kio("list_transactions", 0)
    with logged_in(gw, "alterer") as s:  # no Read on the topic
        resp = _call(s, dp.DescribeProducersRequest(topics=(dp.TopicRequest(
            name=TOPIC, partition_indexes=(0,)),)), 0)
        assert resp.topics[0].partitions[0].error_code == TOPIC_AUTH
    with logged_in(gw, "reader") as s:
        resp = _call(s, dp.DescribeProducersRequest(topics=(dp.TopicRequest(
            name=TOPIC, partition_indexes=(0,)),)), 0)
        assert resp.topics[0].partitions[0].error_code == 0
        listed = _call(s, lt.ListTransactionsRequest(state_filters=(), producer_id_filters=()),
                       0)
        assert listed.error_code == 0 and listed.transaction_states == ()  # none it may see
        assert still_serves(s)
    # DescribeTransactions of an id it may not Describe: the denial's code
    import struct

    from tests.ingest_gateway.kafka.kafka_gateway import frame, read_frame

    dt = kio("describe_transactions", 0)
    with logged_in(gw, "alterer") as s:
        s.sendall(frame(dt.DescribeTransactionsRequest(transactional_ids=("mine",)), 0))
        data = read_frame(s)
        assert struct.unpack_from(">h", data, 10)[0] == TXN_AUTH
        assert still_serves(s)


def test_authorized_operations_are_the_principals(gw):
    m = kio("metadata", 12)
    with logged_in(gw, "reader") as s:
        resp = _call(s, m.MetadataRequest(
            topics=(m.MetadataRequestTopic(topic_id=None, name=TOPIC),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=True), 12)
    ops = resp.topics[0].topic_authorized_operations
    assert ops & (1 << READ) and ops & (1 << DESCRIBE)  # Read implies Describe (Kafka's)
    assert not ops & (1 << WRITE) and not ops & (1 << ALTER)
    with logged_in(gw, "alterer") as s:
        resp = _call(s, m.MetadataRequest(
            topics=(m.MetadataRequestTopic(topic_id=None, name=TOPIC),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=True), 12)
    ops = resp.topics[0].topic_authorized_operations
    assert ops & (1 << ALTER) and not ops & (1 << READ)
    dc = kio("describe_cluster", 1)
    with logged_in(gw, "alterer") as s:
        resp = _call(s, dc.DescribeClusterRequest(include_cluster_authorized_operations=True,
                                                  endpoint_type=1), 1)
    assert resp.cluster_authorized_operations == 1 << DESCRIBE  # its one cluster ACL
