"""The Kafka listener of a real gateway process: ApiVersions, Metadata, pipelining, and
hostile bytes (an error answer or a closed connection, the gateway serving after)."""

from __future__ import annotations

import struct
import uuid

import pytest

from tests.ingest_gateway.kafka.kafka_gateway import call, connect, frame, read_frame

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsV0  # noqa: E402
from kio.schema.api_versions.v3.request import ApiVersionsRequest  # noqa: E402
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic  # noqa: E402


def api_versions_v3() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="raw", client_software_version="1")


def test_api_versions_offer_kafka_floors_and_the_caps(kafka_gateway):
    with connect(kafka_gateway) as s:
        corr, resp = call(s, api_versions_v3(), 3, correlation_id=41)
    assert corr == 41 and resp.error_code == 0
    offered = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert offered[0] == (3, 13)  # Produce: topics by id at v13 (test_topic_ids)
    assert offered[1] == (4, 18)  # Fetch: topics by id from v13 (test_topic_ids)
    assert offered[3] == (0, 13) and offered[18] == (0, 3) and offered[2] == (1, 7)
    # the admin APIs of Kafka's tools (admin_partitions, admin_transactions)
    assert offered[37] == (0, 3) and offered[43] == (0, 2) and offered[35] == (1, 5)
    assert offered[61] == (0, 0) and offered[65] == (0, 0) and offered[66] == (0, 2)
    assert {19, 20, 22} <= offered.keys()
    assert offered[24] == (0, 3) and offered[26] == (0, 5)  # transactions (txn.OFFERED)
    # SCRAM credentials and client quotas (scram_admin, quota_admin)
    assert offered[50] == (0, 0) and offered[51] == (0, 0)
    assert offered[48] == (0, 1) and offered[49] == (0, 1)


def test_unknown_api_versions_version_answers_35_in_a_v0_body(kafka_gateway):
    with connect(kafka_gateway) as s:
        data = frame(ApiVersionsV0(), 0, correlation_id=5)
        # the same request at version 99: only the version field differs
        s.sendall(data[:6] + struct.pack(">h", 99) + data[8:])
        answer = read_frame(s)
    assert answer is not None
    corr, code, count = struct.unpack_from(">ihi", answer)
    assert (corr, code) == (5, 35)
    keys = {struct.unpack_from(">h", answer, 10 + 6 * i)[0] for i in range(count)}
    assert 18 in keys and 0 in keys


def test_metadata_names_this_gateway_and_leaders(kafka_gateway, kafka_log):
    topic = f"md-{uuid.uuid4().hex[:8]}"
    kafka_log.create_topic(topic, {"partitions": 3})
    md = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap}).list_topics(timeout=10)
    assert {b.id: (b.host, b.port) for b in md.brokers.values()} == \
        {0: ("127.0.0.1", kafka_gateway.kafka_port)}
    parts = md.topics[topic].partitions
    assert sorted(parts) == [0, 1, 2] and {p.leader for p in parts.values()} == {0}
    with connect(kafka_gateway) as s:
        _, resp = call(s, MetadataRequest(topics=(MetadataRequestTopic(
            topic_id=None, name="no-such-topic-here"),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False), 12)
    assert [(t.name, t.error_code) for t in resp.topics] == [("no-such-topic-here", 3)]


def test_pipelined_requests_are_answered_in_order(kafka_gateway):
    requests = b"".join(frame(api_versions_v3(), 3, correlation_id=i) for i in range(8))
    with connect(kafka_gateway) as s:
        s.sendall(requests)  # one write: the gateway holds 8 requests at once
        answers = [read_frame(s) for _ in range(8)]
    assert [struct.unpack_from(">i", a)[0] for a in answers] == list(range(8))


def _closed(sock) -> bool:
    return read_frame(sock) is None


@pytest.mark.parametrize("payload", [
    struct.pack(">i", 2**31 - 1) + b"\0" * 64,          # over socket.request.max.bytes
    struct.pack(">i", -5),                               # negative size
    struct.pack(">i", 3) + b"abc",                       # shorter than a header
    struct.pack(">ihhih", 10, 9999, 0, 1, -1),           # unknown api key
    struct.pack(">ihhih", 10, 1, 99, 1, -1),             # Fetch at a version not offered
    struct.pack(">ihhih", 14, 3, 12, 1, -1) + b"\xff\xff\xff\xff",  # Metadata body garbage
], ids=["oversized", "negative", "short", "unknown-api", "unknown-version", "bad-body"])
def test_hostile_bytes_close_the_connection_and_the_gateway_serves_on(kafka_gateway, payload):
    with connect(kafka_gateway) as s:
        s.sendall(payload)
        assert _closed(s)
    with connect(kafka_gateway) as s:  # a truncated frame: the client goes away mid-request
        s.sendall(struct.pack(">i", 100) + b"\0" * 10)
    with connect(kafka_gateway) as s:
        corr, resp = call(s, api_versions_v3(), 3, correlation_id=9)
    assert (corr, resp.error_code) == (9, 0)


def test_a_batch_with_a_bad_crc_is_refused_with_corrupt_message(kafka_gateway, kafka_log):
    import datetime

    import pyarrow as pa
    from kio.schema.produce.v9.request import (PartitionProduceData, ProduceRequest,
                                               TopicProduceData)

    from ingest_gateway.kafka.records import encode_batch

    topic = f"crc-{uuid.uuid4().hex[:8]}"
    kafka_log.create_topic(topic, {"partitions": 1})
    table = pa.table({"key": [b"k"], "value": [b"v"], "timestamp": [1_700_000_000_000],
                      "headers": pa.array([[]], pa.list_(pa.struct([("key", pa.string()),
                                                                    ("value", pa.binary())])))})
    good = encode_batch(table, base_offset=0)
    bad = good[:-1] + bytes([good[-1] ^ 0xFF])  # a flipped bit inside the CRC'd records

    def produce(data: bytes):
        req = ProduceRequest(transactional_id=None, acks=-1,
                             timeout=datetime.timedelta(seconds=10),
                             topic_data=(TopicProduceData(name=topic, partition_data=(
                                 PartitionProduceData(index=0, records=data),)),))
        with connect(kafka_gateway) as s:
            _, resp = call(s, req, 9)
        return resp.responses[0].partition_responses[0]

    refused = produce(bad)
    assert refused.error_code == 2 and refused.base_offset == -1
    assert kafka_log.partition(topic, 0).snapshot().next_offset == 0  # nothing written
    accepted = produce(good)
    assert (accepted.error_code, accepted.base_offset) == (0, 0)

    def produce_acks0(data: bytes, s) -> None:
        req = ProduceRequest(transactional_id=None, acks=0,
                             timeout=datetime.timedelta(seconds=10),
                             topic_data=(TopicProduceData(name=topic, partition_data=(
                                 PartitionProduceData(index=0, records=data),)),))
        s.sendall(frame(req, 9, correlation_id=70))

    with connect(kafka_gateway) as s:  # acks=0: no answer; the next request's comes first
        produce_acks0(good, s)
        corr, _ = call(s, api_versions_v3(), 3, correlation_id=71)
        assert corr == 71
    with connect(kafka_gateway) as s:  # acks=0 refused: the connection is closed
        produce_acks0(bad, s)
        assert _closed(s)
    assert kafka_log.partition(topic, 0).snapshot().next_offset == 2


def test_a_plaintext_listener_refuses_to_start_with_authentication_on():
    import asyncio
    import types

    import conf
    from ingest_gateway.kafka.listener import KafkaListener, parse_listener

    settings = conf.load({"gateway.kafka.listeners": "PLAINTEXT://127.0.0.1:0",
                          "authentication.method": "bearer"})
    with pytest.raises(conf.ConfigError, match="gateway.kafka.listeners"):
        asyncio.run(KafkaListener.start(types.SimpleNamespace(settings=settings, authorizer=None,
                                                              verifiers=None)))
    for text in ("SASL_FOO://h:9092", "PLAINTEXT://h", "http://h:1",
                 "PLAINTEXT://a:1,PLAINTEXT://b:2"):
        with pytest.raises(conf.ConfigError):
            parse_listener(text)
    assert parse_listener("PLAINTEXT://127.0.0.1:9092") == ("127.0.0.1", 9092)


def test_an_idempotent_retry_is_answered_with_its_offsets_and_not_written_twice(
        kafka_gateway, kafka_log):
    import datetime

    import pyarrow as pa
    from kio.schema.produce.v9.request import (PartitionProduceData, ProduceRequest,
                                               TopicProduceData)

    from ingest_gateway.kafka.records import encode_batch

    topic = f"idem-{uuid.uuid4().hex[:8]}"
    kafka_log.create_topic(topic, {"partitions": 1})
    table = pa.table({"key": [b"k", b"l"], "value": [b"v", b"w"],
                      "timestamp": [1_700_000_000_000] * 2,
                      "headers": pa.array([[], []], pa.list_(pa.struct(
                          [("key", pa.string()), ("value", pa.binary())])))})

    def send(s, sequence: int):
        data = encode_batch(table, base_offset=0, producer_id=4242, producer_epoch=0,
                            base_sequence=sequence)
        req = ProduceRequest(transactional_id=None, acks=-1,
                             timeout=datetime.timedelta(seconds=10),
                             topic_data=(TopicProduceData(name=topic, partition_data=(
                                 PartitionProduceData(index=0, records=data),)),))
        return call(s, req, 9)[1].responses[0].partition_responses[0]

    with connect(kafka_gateway) as s:
        first, retry = send(s, 0), send(s, 0)
        assert (first.error_code, first.base_offset) == (0, 0)
        assert (retry.error_code, retry.base_offset) == (0, 0)  # the same batch's offsets
        assert send(s, 2).error_code == 0
        gap = send(s, 9)  # sequences 4..8 never came
        assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert kafka_log.partition(topic, 0).snapshot().next_offset == 4
