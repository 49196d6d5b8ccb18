"""KIP-447 over real sockets: a transactional producer's TxnOffsetCommit carries its
consumer's member id and generation (librdkafka's ``send_offsets_to_transaction`` with
``consumer_group_metadata()``), and the gateway takes the offsets only while that
member is in the group at that generation: a consumer that left (its partitions
handed to another) cannot have its producer commit them."""

from __future__ import annotations

import uuid

import pytest

from log_layout import transactions as tx
from tests.ingest_gateway.kafka.test_transactions import new_topic

ck = pytest.importorskip("confluent_kafka")


def joined(gw, group: str, topic: str):
    """A confluent-kafka consumer of ``group`` that has its assignment."""
    c = ck.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000})
    c.subscribe([topic])
    for _ in range(100):
        c.poll(0.2)
        if c.assignment():
            return c
    raise AssertionError("the consumer got no assignment")


def producer(gw, tid: str):
    p = ck.Producer({"bootstrap.servers": gw.bootstrap, "transactional.id": tid,
                     "transaction.timeout.ms": 60_000})
    p.init_transactions(30)
    return p


@pytest.mark.slow  # a group join (~15 s); the fenced case below runs in the fast suite
def test_offsets_of_a_member_still_in_the_group_are_committed(kafka_gateway, kafka_log):
    topic, group = new_topic(kafka_log, 1), f"g-{uuid.uuid4().hex[:8]}"
    c = joined(kafka_gateway, group, topic)
    try:
        p = producer(kafka_gateway, f"t-{uuid.uuid4().hex[:8]}")
        p.begin_transaction()
        p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 0)],
                                      c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        committed = c.committed([ck.TopicPartition(topic, 0)], timeout=20)
        assert committed[0].offset == 0
    finally:
        c.close()


def test_a_fenced_member_cannot_commit_through_its_producer(kafka_gateway, kafka_log):
    topic, group = new_topic(kafka_log, 1), f"g-{uuid.uuid4().hex[:8]}"
    tid = f"t-{uuid.uuid4().hex[:8]}"
    old = joined(kafka_gateway, group, topic)
    stale = old.consumer_group_metadata()
    old.close()  # it left: the next member gets a new generation
    new = joined(kafka_gateway, group, topic)
    try:
        p = producer(kafka_gateway, tid)
        p.begin_transaction()
        with pytest.raises(ck.KafkaException) as raised:
            p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 5)], stale, 30)
        assert raised.value.args[0].name() in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION"), \
            raised.value.args[0]
        doc = tx.describe(kafka_log, tid)
        assert not doc["offsets"].get(group)  # nothing joined the transaction
        p.abort_transaction(30)
        # the current member's metadata is taken
        p.begin_transaction()
        p.send_offsets_to_transaction([ck.TopicPartition(topic, 0, 0)],
                                      new.consumer_group_metadata(), 30)
        p.commit_transaction(30)
    finally:
        new.close()
