"""DeleteRecords and OffsetForLeaderEpoch over the Kafka listener of a real gateway
process: confluent-kafka's and kafka-python's admin clients, raw kio requests for
the epoch lookups and refusals."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from tests.ingest_gateway.kafka.kafka_gateway import call, connect

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402
from kio.schema.offset_for_leader_epoch.v4 import request as ofle4  # noqa: E402

TIMEOUT = 20


def _produce(gw, topic, n):
    p = ck.Producer({"bootstrap.servers": gw.bootstrap, "enable.idempotence": True,
                     "linger.ms": 1})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=0)
    assert p.flush(TIMEOUT) == 0


def _consume_all(gw, topic):
    c = ck.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "enable.partition.eof": True})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    out = []
    try:
        while True:
            m = c.poll(TIMEOUT)
            assert m is not None, "no answer within the timeout"
            if m.error() and m.error().code() == ck.KafkaError._PARTITION_EOF:
                return out
            assert not m.error(), m.error()
            out.append((m.offset(), m.value()))
    finally:
        c.close()


def test_delete_records_moves_the_log_start_for_every_reader(kafka_gateway, kafka_log):
    topic = f"del-{uuid.uuid4().hex[:8]}"
    kafka_log.create_topic(topic, {"partitions": 2})
    _produce(kafka_gateway, topic, 5)
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    tp = ck.TopicPartition(topic, 0, 2)
    deleted = admin.delete_records([tp])[tp].result(timeout=TIMEOUT)
    assert deleted.low_watermark == 2
    assert kafka_log.partition(topic, 0).snapshot(refresh=True).log_start_offset == 2
    assert _consume_all(kafka_gateway, topic) == [(2, b"v2"), (3, b"v3"), (4, b"v4")]
    past = ck.TopicPartition(topic, 0, 99)
    with pytest.raises(ck.KafkaException) as e:
        admin.delete_records([past])[past].result(timeout=TIMEOUT)
    assert e.value.args[0].code() == ck.KafkaError.OFFSET_OUT_OF_RANGE
    assert kafka_log.partition(topic, 0).snapshot(refresh=True).log_start_offset == 2


def test_kafka_python_deletes_to_the_high_watermark(kafka_gateway, kafka_log):
    kp = pytest.importorskip("kafka.admin")
    from kafka.structs import TopicPartition

    topic = f"kdel-{uuid.uuid4().hex[:8]}"
    kafka_log.create_topic(topic, {"partitions": 1})
    _produce(kafka_gateway, topic, 3)
    client = kp.KafkaAdminClient(bootstrap_servers=kafka_gateway.bootstrap)
    try:
        client.delete_records({TopicPartition(topic, 0): -1})
    finally:
        client.close()
    m = kafka_log.partition(topic, 0).snapshot(refresh=True)
    assert (m.log_start_offset, m.next_offset) == (3, 3)
    assert _consume_all(kafka_gateway, topic) == []


def _epochs(gw, topic, *asks, partition=0):
    """OffsetForLeaderEpoch v4 answers for (leader_epoch, current_leader_epoch) pairs."""
    with connect(gw) as s:
        answers = []
        for wanted, current in asks:
            req = ofle4.OffsetForLeaderEpochRequest(replica_id=-1, topics=(
                ofle4.OffsetForLeaderTopic(topic=topic, partitions=(
                    ofle4.OffsetForLeaderPartition(partition=partition, leader_epoch=wanted,
                                                   current_leader_epoch=current),)),))
            (p,) = call(s, req, 4)[1].topics[0].partitions
            answers.append((int(p.error_code), p.leader_epoch, p.end_offset))
        return answers


def test_offset_for_leader_epoch_answers_each_epochs_end(kafka_gateway, kafka_log):
    topic = f"ep-{uuid.uuid4().hex[:8]}"
    kafka_log.create_topic(topic, {"partitions": 1})
    plog = kafka_log.partition(topic, 0)
    base = plog.snapshot(refresh=True).leader_epoch
    for leader, n in (("a", 3), ("b", 2), ("c", 4)):  # three claims: three epochs
        plog.claim(leader).append(pa.table({"key": [b"k"] * n, "value": [b"v"] * n}))
    e1, e2, e3 = base + 1, base + 2, base + 3
    assert plog.snapshot(refresh=True).leader_epoch == e3
    assert _epochs(kafka_gateway, topic, (e3, -1), (e2, -1), (e1, -1), (base, -1),
                   (e3 + 1, -1)) == [(0, e3, 9), (0, e2, 5), (0, e1, 3), (0, base, 0),
                                     (0, -1, -1)]
    assert _epochs(kafka_gateway, topic, (e2, e2), (e2, e3 + 1), (e2, e3)) == \
        [(74, -1, -1), (75, -1, -1), (0, e2, 5)]  # FENCED, UNKNOWN_LEADER_EPOCH, fine
    assert _epochs(kafka_gateway, "no-such-topic", (0, -1))[0][0] == 3
    assert _epochs(kafka_gateway, topic, (0, -1), partition=7)[0][0] == 3


def test_records_carry_the_leader_epoch_they_were_written_under(kafka_gateway, kafka_log):
    """Fetched batches and ListOffsets name the epoch of the offset (the manifest's epoch
    history), as Kafka's do: a client that checks its position after a leader change
    (KIP-320) asks OffsetForLeaderEpoch for its last record's epoch, and an epoch
    answered wrongly would make it see a truncation and read the partition again."""
    from confluent_kafka.admin import OffsetSpec

    topic = f"st-{uuid.uuid4().hex[:8]}"
    kafka_log.create_topic(topic, {"partitions": 1})
    plog = kafka_log.partition(topic, 0)
    base = plog.snapshot(refresh=True).leader_epoch
    for leader, n in (("a", 3), ("idle", 0), ("b", 2)):  # the idle epoch writes nothing
        w = plog.claim(leader)
        if n:
            w.append(pa.table({"key": [b"k"] * n, "value": [b"v"] * n}))
    m = plog.snapshot(refresh=True)
    assert m.epochs == ((base + 1, 0), (base + 3, 3))
    c = ck.Consumer({"bootstrap.servers": kafka_gateway.bootstrap, "group.id": "unused",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    try:
        got = []
        while len(got) < 5:
            msg = c.poll(TIMEOUT)
            assert msg is not None and not msg.error(), msg and msg.error()
            got.append((msg.offset(), msg.leader_epoch()))
    finally:
        c.close()
    assert got == [(0, base + 1), (1, base + 1), (2, base + 1), (3, base + 3), (4, base + 3)]
    # the epoch that wrote nothing ends where the next one starts
    assert _epochs(kafka_gateway, topic, (base + 1, -1), (base + 2, -1)) == \
        [(0, base + 1, 3), (0, base + 1, 3)]
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    tp = ck.TopicPartition(topic, 0)
    for spec, want in ((OffsetSpec.earliest(), (0, base + 1)),
                       (OffsetSpec.latest(), (5, base + 3))):
        info = admin.list_offsets({tp: spec})[tp].result(timeout=TIMEOUT)
        assert (info.offset, info.leader_epoch) == want
