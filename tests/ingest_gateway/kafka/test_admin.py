"""CreateTopics, DeleteTopics and InitProducerId over the Kafka listener of a real gateway
process, with confluent-kafka's and kafka-python's admin clients and raw requests."""

from __future__ import annotations

import datetime
import uuid

import pytest

from tests.ingest_gateway.kafka.kafka_gateway import call, connect

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest  # noqa: E402


def _result(future):
    try:
        future.result(timeout=20)
        return None
    except ck.KafkaException as e:
        return e.args[0].code()


def test_confluent_admin_creates_with_configs_and_deletes(kafka_gateway, kafka_log):
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    name = f"adm-{uuid.uuid4().hex[:8]}"
    fs = admin.create_topics([NewTopic(name, 4, replication_factor=1,
                                       config={"retention.ms": "3600000"})])
    assert _result(fs[name]) is None
    info = kafka_log.topic(name, refresh=True)
    assert info.partitions == 4 and info.config.retention_ms == 3_600_000
    again = admin.create_topics([NewTopic(name, 1)])
    assert _result(again[name]) == ck.KafkaError.TOPIC_ALREADY_EXISTS
    bad = admin.create_topics([NewTopic("bad/name", 1)])
    assert _result(bad["bad/name"]) == ck.KafkaError.TOPIC_EXCEPTION
    fs = admin.delete_topics([name])
    assert _result(fs[name]) is None
    assert name not in kafka_log.topics()
    fs = admin.delete_topics([name])
    assert _result(fs[name]) == ck.KafkaError.UNKNOWN_TOPIC_OR_PART


def test_kafka_python_admin_creates_and_deletes(kafka_gateway, kafka_log):
    kp_admin = pytest.importorskip("kafka.admin")
    admin = kp_admin.KafkaAdminClient(bootstrap_servers=kafka_gateway.bootstrap)
    name = f"kpa-{uuid.uuid4().hex[:8]}"
    try:
        admin.create_topics([kp_admin.NewTopic(name, num_partitions=2, replication_factor=1)])
        assert kafka_log.topic(name, refresh=True).partitions == 2
        assert name in admin.list_topics()
        admin.delete_topics([name])
        assert name not in kafka_log.topics()
    finally:
        admin.close()


def _init(sock, **kw):
    req = InitProducerIdRequest(transactional_id=kw.get("tid"),
                                transaction_timeout=datetime.timedelta(seconds=60),
                                producer_id=kw.get("pid", -1), producer_epoch=kw.get("epoch", -1))
    return call(sock, req, 4)[1]


def test_init_producer_id_fresh_ids_epoch_bump_and_transactional_ids(kafka_gateway):
    with connect(kafka_gateway) as s:
        a, b = _init(s), _init(s)
        assert (a.error_code, b.error_code) == (0, 0)
        assert a.producer_id != b.producer_id and a.producer_id >= 0 and a.producer_epoch == 0
        bumped = _init(s, pid=a.producer_id, epoch=0)  # KIP-360
        assert (bumped.producer_id, bumped.producer_epoch) == (a.producer_id, 1)
        txn = _init(s, tid=f"my-transactions-{a.producer_id}")  # served: txn.py
        assert txn.error_code == 0 and txn.producer_id >= 0 and txn.producer_epoch == 0
