"""Fetch answers in the topic's ``compression.type``: the batches a raw Fetch gets carry
the topic's codec in their attributes (none for ``producer``), are smaller than the
uncompressed ones, and unmodified confluent-kafka and kafka-python read them exactly
(keys, values, headers, timestamps, tombstones)."""

from __future__ import annotations

import datetime
import struct
import time

import pytest

from ingest_gateway.kafka.records import CODECS
from tests.ingest_gateway.kafka.kafka_gateway import call, connect
from tests.ingest_gateway.kafka.test_produce_fetch import (consume_confluent, expected,
                                                            new_topic, produce_confluent,
                                                            records)

ATTRIBUTES_AT = 8 + 4 + 4 + 1 + 4  # base offset, length, leader epoch, magic, crc


def fetched(gw, topic: str) -> bytes:
    """Partition 0's records bytes of a raw Fetch v12 from offset 0."""
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    req = FetchRequest(replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
                       max_bytes=1 << 22, isolation_level=0, session_id=0, session_epoch=-1,
                       topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
                           partition=0, current_leader_epoch=-1, fetch_offset=0,
                           log_start_offset=-1, partition_max_bytes=1 << 22),)),),
                       forgotten_topics_data=(), rack_id="")
    with connect(gw) as s:
        _, resp = call(s, req, 12)
    part = resp.responses[0].partitions[0]
    assert part.error_code == 0
    return bytes(part.records)


def codecs_of(data: bytes) -> set[str]:
    """The codec of every batch in a Fetch answer's records."""
    out, pos = set(), 0
    while pos + ATTRIBUTES_AT + 2 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        (attributes,) = struct.unpack_from(">h", data, pos + ATTRIBUTES_AT)
        out.add(CODECS[attributes & 0x07])
        pos += 12 + length
    return out


def consume_kafka_python(gw, topic: str, count: int) -> list[tuple]:
    kp = pytest.importorskip("kafka")
    c = kp.KafkaConsumer(bootstrap_servers=gw.bootstrap, enable_auto_commit=False,
                         consumer_timeout_ms=10_000)
    tps = [kp.TopicPartition(topic, p) for p in (0, 1)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    seen = []
    for m in c:
        seen.append((m.partition, m.offset, m.key, m.value,
                     [(k, v) for k, v in m.headers], m.timestamp))
        if len(seen) == count:
            break
    c.close()
    return sorted(seen)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd", "producer", "uncompressed"])
def test_fetch_in_the_topics_codec_read_exactly_by_both_clients(kafka_gateway, kafka_log,
                                                                codec):
    topic = new_topic(kafka_log)
    kafka_log.alter_topic(topic, {"compression.type": codec})
    recs = records(300)
    # the producer sends uncompressed batches: what the fetch answers is the topic's doing
    reports = produce_confluent(kafka_gateway, topic, recs, acks="all",
                                **{"compression.type": "none"})
    assert [e for e, _, _ in reports] == [None] * len(recs)
    data = fetched(kafka_gateway, topic)
    compressed = codec in CODECS
    assert codecs_of(data) == {codec if compressed else "none"}
    if compressed:
        # against the same batches answered plain (how records fall into batches varies
        # with the load: a size fetched from another topic compared batches of other sizes)
        kafka_log.alter_topic(topic, {"compression.type": "uncompressed"})
        deadline = time.monotonic() + 60
        while codecs_of(plain := fetched(kafka_gateway, topic)) != {"none"}:
            assert time.monotonic() < deadline, "the gateway never saw the codec change"
            time.sleep(0.1)
        assert len(data) < len(plain) * 0.8, (len(data), len(plain))
        kafka_log.alter_topic(topic, {"compression.type": codec})
    want = expected(recs, [(p, o) for _, p, o in reports])
    assert consume_confluent(kafka_gateway, topic, 2, len(recs)) == want
    assert consume_kafka_python(kafka_gateway, topic, len(recs)) == want
