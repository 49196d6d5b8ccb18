"""Topic ids (KIP-516) over the Kafka listener: Fetch v13+ names topics by the id
Metadata answers (the one kept in the store), an id no topic has answers
UNKNOWN_TOPIC_ID, a deleted and re-created topic has a new id (its old one is unknown),
Produce v12 is served, and confluent-kafka, negotiating the highest versions, reads exactly.
"""

from __future__ import annotations

import base64
import datetime
import importlib
import uuid

import pyarrow as pa
import pytest

from ingest_gateway.kafka.context import topic_uuid
from ingest_gateway.kafka.records import encode_batch
from tests.ingest_gateway.kafka.kafka_gateway import call, connect
from tests.ingest_gateway.kafka.test_produce_fetch import (consume_confluent, expected,
                                                            new_topic, produce_confluent,
                                                            records)

ck = pytest.importorskip("confluent_kafka")
UNKNOWN_TOPIC_ID = 100


def kio(api: str, version: int, kind: str = "request"):
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


def metadata_id(gw, topic: str) -> uuid.UUID:
    m = kio("metadata", 12)
    req = m.MetadataRequest(topics=(m.MetadataRequestTopic(topic_id=None, name=topic),),
                            allow_auto_topic_creation=False,
                            include_topic_authorized_operations=False)
    with connect(gw) as s:
        _, resp = call(s, req, 12)
    (t,) = resp.topics
    assert t.error_code == 0
    return t.topic_id


def fetch_by_id(gw, topic_id: uuid.UUID, version: int, partitions=(0,)):
    """A raw Fetch at ``version`` (13+) from offset 0; {partition: (error, records)}
    and the answer's topic id."""
    m = kio("fetch", version)
    parts = tuple(m.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,
                                   log_start_offset=-1, partition_max_bytes=1 << 20)
                  for p in partitions)
    extra = {"replica_id": -1} if version < 15 else {}
    req = m.FetchRequest(max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
                         max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                         topics=(m.FetchTopic(topic_id=topic_id, partitions=parts),),
                         forgotten_topics_data=(), rack_id="", **extra)
    with connect(gw) as s:
        _, resp = call(s, req, version)
    (t,) = resp.responses
    return t.topic_id, {p.partition_index: (p.error_code, bytes(p.records or b""))
                        for p in t.partitions}


def test_metadata_ids_are_the_stores_and_fetch_v13_to_v17_reads_by_id(kafka_gateway, kafka_log):
    topic = new_topic(kafka_log)
    recs = records(20)
    reports = produce_confluent(kafka_gateway, topic, recs, acks="all")
    tid = metadata_id(kafka_gateway, topic)
    stored = kafka_log.topic(topic, refresh=True).topic_id  # Kafka's base64 display form
    assert tid.bytes == base64.urlsafe_b64decode(stored + "==") and tid != topic_uuid("")
    assert metadata_id(kafka_gateway, topic) == tid  # stable
    # the same batches whichever version (by name at 12, by id from 13)
    with_names = kio("fetch", 12)
    req = with_names.FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(with_names.FetchTopic(topic=topic, partitions=(with_names.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=1 << 20),)),), forgotten_topics_data=(), rack_id="")
    with connect(kafka_gateway) as s:
        by_name = bytes(call(s, req, 12)[1].responses[0].partitions[0].records)
    assert by_name
    for version in (13, 15, 16, 17):
        answered, got = fetch_by_id(kafka_gateway, tid, version)
        assert answered == tid
        assert got == {0: (0, by_name)}, version
    # confluent-kafka negotiates the highest Fetch version offered: exact records
    want = expected(recs, [(p, o) for _, p, o in reports])
    assert consume_confluent(kafka_gateway, topic, 2, len(recs)) == want


def test_an_unknown_topic_id_answers_unknown_topic_id(kafka_gateway):
    stranger = uuid.uuid4()
    answered, got = fetch_by_id(kafka_gateway, stranger, 13, partitions=(0, 1))
    assert answered == stranger
    assert got == {0: (UNKNOWN_TOPIC_ID, b""), 1: (UNKNOWN_TOPIC_ID, b"")}


def test_a_recreated_topic_has_a_new_id_and_the_old_one_is_unknown(kafka_gateway, kafka_log):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = new_topic(kafka_log, 1)
    produce_confluent(kafka_gateway, topic, records(3), acks="all")
    old = metadata_id(kafka_gateway, topic)
    assert fetch_by_id(kafka_gateway, old, 13)[1][0][0] == 0
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=20)
    admin.create_topics([NewTopic(topic, 1)])[topic].result(timeout=20)
    new = metadata_id(kafka_gateway, topic)
    assert new != old
    assert fetch_by_id(kafka_gateway, old, 16)[1] == {0: (UNKNOWN_TOPIC_ID, b"")}
    assert fetch_by_id(kafka_gateway, new, 16)[1] == {0: (0, b"")}  # new and empty


def test_produce_v12_appends(kafka_gateway, kafka_log):
    topic = new_topic(kafka_log, 1)
    table = pa.table({"offset": pa.array([0, 1], pa.int64()),
                      "timestamp": pa.array([1_700_000_000_000] * 2, pa.timestamp("ms")),
                      "key": pa.array([b"a", None], pa.binary()),
                      "value": pa.array([b"v0", b"v1"], pa.binary())})
    m = kio("produce", 12)
    req = m.ProduceRequest(transactional_id=None, acks=-1,
                           timeout=datetime.timedelta(seconds=10),
                           topic_data=(m.TopicProduceData(name=topic, partition_data=(
                               m.PartitionProduceData(index=0, records=encode_batch(
                                   table, base_offset=0)),)),))
    with connect(kafka_gateway) as s:
        _, resp = call(s, req, 12)
    part = resp.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (0, 0)
    got = consume_confluent(kafka_gateway, topic, 1, 2)
    assert [(o, k, v) for _, o, k, v, _, _ in got] == [(0, b"a", b"v0"), (1, None, b"v1")]


def _produce_v13(gw, topic_ids, acks=-1):
    """A raw Produce v13 of two records to partition 0 of each of ``topic_ids``."""
    table = pa.table({"offset": pa.array([0, 1], pa.int64()),
                      "timestamp": pa.array([1_700_000_000_000] * 2, pa.timestamp("ms")),
                      "key": pa.array([b"a", None], pa.binary()),
                      "value": pa.array([b"v0", b"v1"], pa.binary())})
    m = kio("produce", 13)
    req = m.ProduceRequest(transactional_id=None, acks=acks,
                           timeout=datetime.timedelta(seconds=10),
                           topic_data=tuple(m.TopicProduceData(topic_id=tid, partition_data=(
                               m.PartitionProduceData(index=0, records=encode_batch(
                                   table, base_offset=0)),)) for tid in topic_ids))
    with connect(gw) as s:
        _, resp = call(s, req, 13)
    return {t.topic_id: [(p.index, p.error_code, p.base_offset) for p in t.partition_responses]
            for t in resp.responses}


def test_produce_v13_by_topic_id_appends_and_an_unknown_id_is_refused(kafka_gateway, kafka_log):
    topic = new_topic(kafka_log, 1)
    tid, stranger = metadata_id(kafka_gateway, topic), uuid.uuid4()
    answered = _produce_v13(kafka_gateway, [tid, stranger])
    assert answered == {tid: [(0, 0, 0)], stranger: [(0, UNKNOWN_TOPIC_ID, -1)]}
    assert _produce_v13(kafka_gateway, [tid]) == {tid: [(0, 0, 2)]}
    got = consume_confluent(kafka_gateway, topic, 1, 4)
    assert [(o, v) for _, o, _k, v, _, _ in got] == [(0, b"v0"), (1, b"v1"), (2, b"v0"),
                                                     (3, b"v1")]
    # Fetch v18 (the newest kio reads) by id: the same four records
    answered_id, parts = fetch_by_id(kafka_gateway, tid, 18)
    assert answered_id == tid and parts[0][0] == 0 and parts[0][1].count(b"v0") == 2
