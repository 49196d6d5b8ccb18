"""Fetch's byte limits: ``partition_max_bytes`` bounds each partition's share (at least
one record of each partition with any), ``max_bytes`` the whole answer, and every
partition with records gets its share (before, one partition's backlog filled a whole
answer and librdkafka paused that partition's fetches for a second)."""

from __future__ import annotations

import datetime

import pyarrow as pa

from ingest_gateway.kafka.records import decode_batches
from ingest_gateway.server.consumer_hub import cut_partitions
from tests.ingest_gateway.kafka.kafka_gateway import call, connect
from tests.ingest_gateway.kafka.test_produce_fetch import ck, new_topic

VALUE = b"v" * 100


def _fill(gw, topic: str, partitions: int, per_partition: int) -> None:
    p = ck.Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(per_partition):
        for part in range(partitions):
            p.produce(topic, VALUE, partition=part)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def _fetch(gw, topic: str, offsets: dict[int, int], partition_max: int, total: int) -> dict:
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    req = FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
        max_bytes=total, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(FetchTopic(topic=topic, partitions=tuple(
            FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=off,
                           log_start_offset=-1, partition_max_bytes=partition_max)
            for p, off in offsets.items())),), forgotten_topics_data=(), rack_id="")
    with connect(gw) as s:
        _, resp = call(s, req, 12)
    out = {}
    for p in resp.responses[0].partitions:
        assert p.error_code == 0
        batches = decode_batches(p.records, max_bytes=1 << 30) if p.records else []
        out[p.partition_index] = (len(p.records or b""),
                                  [b.base_offset + int(d) for b in batches
                                   for d in b.offset_deltas])
    return out


def test_each_partition_gets_its_share_up_to_partition_max_bytes(kafka_gateway, kafka_log):
    topic = new_topic(kafka_log, 3)
    _fill(kafka_gateway, topic, 3, 2000)
    got = _fetch(kafka_gateway, topic, {0: 0, 1: 0, 2: 0}, 20_000, 10 << 20)
    for size, offsets in got.values():
        # ~110 B a record on the wire: a share of ~20 kB, never the whole backlog
        assert 50 <= len(offsets) <= 400 and size <= 2 * 20_000
        assert offsets == list(range(len(offsets)))
    nxt = {p: len(offsets) for p, (_, offsets) in got.items()}
    again = _fetch(kafka_gateway, topic, nxt, 20_000, 10 << 20)
    assert all(offsets[0] == nxt[p] for p, (_, offsets) in again.items())


def test_a_tiny_partition_max_bytes_still_moves_every_partition(kafka_gateway, kafka_log):
    topic = new_topic(kafka_log, 2)
    _fill(kafka_gateway, topic, 2, 10)
    got = _fetch(kafka_gateway, topic, {0: 3, 1: 0}, 1, 1 << 20)
    assert got[0][1] == [3] and got[1][1] == [0]


def _batch(first: int, n: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(first, first + n), pa.int64()),
                            pa.array([b"x" * 92] * n, pa.binary())], names=["offset", "value"])


def test_cut_partitions_keeps_whole_prefixes_per_partition():
    a, b = ("t", 0), ("t", 1)
    per = _batch(0, 1).nbytes
    got = cut_partitions([(a, _batch(0, 10), 10), (a, _batch(10, 10), 20),
                          (b, _batch(5, 3), 8)], 15 * per)
    assert [(tp, bt.column(0).to_pylist()[0], bt.num_rows, nxt) for tp, bt, nxt in got] == [
        (a, 0, 10, 10), (a, 10, 5, 15), (b, 5, 3, 8)]
    assert [bt.num_rows for _, bt, _ in cut_partitions([(a, _batch(0, 4), 4)], 1)] == [1]
