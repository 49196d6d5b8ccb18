"""Produce, Fetch and ListOffsets over the Kafka listener of a real gateway process, with
unmodified confluent-kafka (librdkafka) and kafka-python: exact records back (keys,
values, headers, timestamps, tombstones), every acks with and without idempotence,
the same records seen over REST and by sparklog's own Consumer, and the reverse."""

from __future__ import annotations

import base64
import datetime
import uuid

import pytest

from ingest_gateway.client import Consumer
from jobs.gateway_process import wait_for
from tests.ingest_gateway.kafka.kafka_gateway import call, connect

ck = pytest.importorskip("confluent_kafka")

BASE_TS = 1_700_000_000_000


def records(n: int) -> list[tuple]:
    """(key, value, headers, timestamp): null keys, a tombstone, empty and repeated headers."""
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else b"key-%d" % i
        value = None if i % 11 == 5 else b"value-%d-" % i + bytes(range(i % 50))
        headers = [] if i % 3 == 0 else [("h", b"x%d" % i), ("h", None), ("e", b"")]
        out.append((key, value, headers, BASE_TS + i))
    return out


def new_topic(kafka_log, partitions: int = 2) -> str:
    name = f"k-{uuid.uuid4().hex[:10]}"
    kafka_log.create_topic(name, {"partitions": partitions})
    return name


def _partition(key: bytes | None) -> int:
    return key[-1] % 2 if key else 0


def produce_confluent(gw, topic, recs, **config) -> list:
    p = ck.Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 5, **config})
    reports: list = [None] * len(recs)

    def report(i: int):
        return lambda err, m: reports.__setitem__(i, (err, m.partition(), m.offset()))

    for i, (key, value, headers, ts) in enumerate(recs):
        p.produce(topic, key=key, value=value, headers=headers, timestamp=ts,
                  partition=_partition(key), on_delivery=report(i))
    assert p.flush(20) == 0
    return reports  # in the records' order


def consume_confluent(gw, topic, partitions, count) -> list[tuple]:
    c = ck.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "unused",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    c.assign([ck.TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[tuple] = []
    try:
        def more() -> bool:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                out.append((m.partition(), m.offset(), m.key(), m.value(),
                            [(k, v) for k, v in (m.headers() or [])], m.timestamp()[1]))
            return len(out) >= count
        wait_for(more, timeout=30, interval=0, what=f"{count} records of {topic}")
    finally:
        c.close()
    return sorted(out)


def expected(recs, placed) -> list[tuple]:
    """The records as a consumer must see them, given (partition, offset) per record."""
    return sorted((p, o, k, v, h, ts) for (k, v, h, ts), (p, o) in zip(recs, placed))


@pytest.mark.parametrize("acks,idempotent", [("0", False), ("1", False), ("all", False),
                                              ("all", True), ("1", True)])
def test_confluent_produce_then_assign_consume_exact(kafka_gateway, kafka_log, acks, idempotent):
    topic = new_topic(kafka_log)
    recs = records(40)
    config = {"acks": acks, "enable.idempotence": idempotent}
    if idempotent and acks != "all":
        config = {"acks": "all", "enable.idempotence": True}
    reports = produce_confluent(kafka_gateway, topic, recs, **config)
    assert [e for e, _, _ in reports] == [None] * len(recs)
    got = consume_confluent(kafka_gateway, topic, 2, len(recs))
    if acks == "0":  # no offsets reported: the records' own order per partition tells them
        placed = []
        seen = {0: 0, 1: 0}
        for key, *_ in recs:
            p = _partition(key)
            placed.append((p, seen[p]))
            seen[p] += 1
    else:
        placed = [(p, o) for _, p, o in reports]
    assert got == expected(recs, placed)


def test_list_offsets_earliest_latest_and_by_time(kafka_gateway, kafka_log):
    topic = new_topic(kafka_log, 1)
    recs = [(b"k", b"v%d" % i, [], BASE_TS + 10 * i) for i in range(10)]
    p = ck.Producer({"bootstrap.servers": kafka_gateway.bootstrap, "linger.ms": 0})
    for key, value, _, ts in recs:
        p.produce(topic, key=key, value=value, timestamp=ts, partition=0)
        p.flush(10)  # one batch (one segment) per record: the time index spans segments
    c = ck.Consumer({"bootstrap.servers": kafka_gateway.bootstrap, "group.id": "unused"})
    try:
        assert c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10) == (0, 10)
        found = c.offsets_for_times([ck.TopicPartition(topic, 0, BASE_TS + 35)], timeout=10)
        assert found[0].offset == 4 and found[0].error is None
        late = c.offsets_for_times([ck.TopicPartition(topic, 0, BASE_TS + 10_000)], timeout=10)
        assert late[0].offset == -1  # no record that new: the end (librdkafka's -1)
    finally:
        c.close()


def test_fetch_out_of_range_and_unknown_partition_answer_kafka_codes(kafka_gateway, kafka_log):
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    import datetime

    topic = new_topic(kafka_log, 1)
    produce_confluent(kafka_gateway, topic, records(3)[:1], acks="all")
    req = FetchRequest(replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
                       max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                       topics=(FetchTopic(topic=topic, partitions=(
                           FetchPartition(partition=0, current_leader_epoch=-1,
                                          fetch_offset=1000, log_start_offset=-1,
                                          partition_max_bytes=1 << 20),
                           FetchPartition(partition=7, current_leader_epoch=-1,
                                          fetch_offset=0, log_start_offset=-1,
                                          partition_max_bytes=1 << 20))),),
                       forgotten_topics_data=(), rack_id="")
    with connect(kafka_gateway) as s:
        _, resp = call(s, req, 12)
    got = {p.partition_index: (p.error_code, p.high_watermark, p.log_start_offset)
           for p in resp.responses[0].partitions}
    assert got == {0: (1, 1, 0), 7: (3, -1, -1)}


def test_kafka_records_read_identically_over_rest_and_by_the_consumer(kafka_gateway, kafka_log):
    topic = new_topic(kafka_log, 1)
    recs = [(b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)], BASE_TS + i) for i in range(5)]
    p = ck.Producer({"bootstrap.servers": kafka_gateway.bootstrap, "acks": "all"})
    for k, v, h, ts in recs:
        p.produce(topic, key=k, value=v, headers=h, timestamp=ts, partition=0)
    assert p.flush(20) == 0
    status, body, _ = kafka_gateway.request(
        "GET", f"/topics/{topic}/partitions/0/messages?offset=0&count=5",
        headers={"Accept": "application/vnd.kafka.binary.v2+json"})
    assert status == 200, body
    rest = [(r["offset"], base64.b64decode(r["key"]), base64.b64decode(r["value"]),
             [(h["key"], base64.b64decode(h["value"])) for h in r["headers"]], r["timestamp"])
            for r in body]
    assert rest == [(i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(recs)]
    consumer = Consumer(gateway=kafka_gateway.url, auto_offset_reset="earliest",
                        enable_auto_commit=False)
    seen: list = []
    try:
        consumer.assign([(topic, 0)])
        wait_for(lambda: seen.extend(consumer.poll(0.5)) or len(seen) >= 5, timeout=30,
                 interval=0, what="the Consumer's records")
    finally:
        consumer.close()
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in seen] == \
        [(i, k, v, h, ts) for i, (k, v, h, ts) in enumerate(recs)]


def test_rest_produced_records_read_by_kafka_clients(kafka_gateway, kafka_log):
    topic = new_topic(kafka_log, 1)
    body = {"records": [{"key": base64.b64encode(b"rk%d" % i).decode(),
                         "value": base64.b64encode(b"rv%d" % i).decode(),
                         "timestamp": BASE_TS + i,
                         "headers": [{"key": "src", "value": base64.b64encode(b"rest").decode()}]}
                        for i in range(4)]}
    status, answer, _ = kafka_gateway.request(
        "POST", f"/topics/{topic}/partitions/0", body=body,
        content_type="application/vnd.kafka.binary.v2+json")
    assert status == 200, answer
    got = consume_confluent(kafka_gateway, topic, 1, 4)
    assert got == [(0, i, b"rk%d" % i, b"rv%d" % i, [("src", b"rest")], BASE_TS + i)
                   for i in range(4)]
    kp = pytest.importorskip("kafka")
    c = kp.KafkaConsumer(bootstrap_servers=kafka_gateway.bootstrap, enable_auto_commit=False,
                         consumer_timeout_ms=10_000)
    tp = kp.TopicPartition(topic, 0)
    c.assign([tp])
    c.seek(tp, 0)
    seen = []
    for m in c:
        seen.append((m.offset, m.key, m.value, list(m.headers), m.timestamp))
        if len(seen) == 4:
            break
    c.close()
    assert seen == [(i, b"rk%d" % i, b"rv%d" % i, [("src", b"rest")], BASE_TS + i)
                    for i in range(4)]


def test_kafka_python_produces_idempotently_and_reads_back(kafka_gateway, kafka_log):
    kp = pytest.importorskip("kafka")
    topic = new_topic(kafka_log, 2)
    p = kp.KafkaProducer(bootstrap_servers=kafka_gateway.bootstrap, acks="all",
                         enable_idempotence=True, linger_ms=5)
    futures = [p.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2,
                      headers=[("n", b"%d" % i)], timestamp_ms=BASE_TS + i) for i in range(20)]
    metas = [f.get(timeout=20) for f in futures]
    p.close()
    assert sorted((m.partition, m.offset) for m in metas) == \
        sorted((i % 2, i // 2) for i in range(20))
    got = consume_confluent(kafka_gateway, topic, 2, 20)
    assert got == sorted((i % 2, i // 2, b"k%d" % i, b"v%d" % i, [("n", b"%d" % i)], BASE_TS + i)
                         for i in range(20))


def test_acks_all_answers_after_the_commit(kafka_gateway, kafka_log):
    """At acks=all the reported offsets are already in the store's manifests."""
    topic = new_topic(kafka_log, 2)
    reports = produce_confluent(kafka_gateway, topic, records(10), acks="all")
    assert all(err is None for err, _, _ in reports)
    for partition in (0, 1):
        last = max(o for _, p, o in reports if p == partition)
        assert kafka_log.partition(topic, partition).snapshot().next_offset == last + 1


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_a_consumer_moves_past_a_transaction_marker_at_the_end(kafka_gateway, kafka_log,
                                                                isolation):
    from log_layout import transactions as tx
    from tests.log_layout.txn_helpers import txn_append

    topic = new_topic(kafka_log, 1)
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    pid, epoch = tx.init_transactions(kafka_log, tid, 60_000)
    tx.add_partitions(kafka_log, tid, pid, epoch, [(topic, 0)])
    txn_append(kafka_log, topic, 0, pid, epoch, [b"a", b"b"])
    tx.end_transaction(kafka_log, tid, pid, epoch, True)  # the commit marker: offset 2
    assert kafka_log.partition(topic, 0).snapshot().next_offset == 3
    c = ck.Consumer({"bootstrap.servers": kafka_gateway.bootstrap, "group.id": "unused",
                     "enable.auto.commit": False, "isolation.level": isolation,
                     "fetch.wait.max.ms": 50})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    values = []
    try:
        def at_end() -> bool:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                values.append(m.value())
            return c.position([ck.TopicPartition(topic, 0)])[0].offset == 3
        wait_for(at_end, timeout=20, interval=0, what="the consumer past the marker")
    finally:
        c.close()
    assert values == [b"a", b"b"]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_produce_through_the_gateway_reads_back_exact(kafka_gateway, kafka_log,
                                                                 codec):
    topic = new_topic(kafka_log)
    recs = records(30)
    reports = produce_confluent(kafka_gateway, topic, recs, acks="all",
                                **{"enable.idempotence": True, "compression.type": codec})
    assert [e for e, _, _ in reports] == [None] * len(recs)
    got = consume_confluent(kafka_gateway, topic, 2, len(recs))
    assert got == expected(recs, [(p, o) for _, p, o in reports])


def test_a_produce_with_unknown_acks_is_refused_whole(kafka_gateway, kafka_log):
    """acks other than 0, 1, -1: INVALID_REQUIRED_ACKS for every partition, nothing
    written (the check is the batcher's, shared with HTTP's acks)."""
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, \
        TopicProduceData

    import pyarrow as pa

    from ingest_gateway.kafka.records import encode_batch

    topic = f"acks-{uuid.uuid4().hex[:8]}"
    kafka_log.create_topic(topic, {"partitions": 2})
    batch = encode_batch(pa.table({"key": pa.array([None], pa.binary()),
                                   "value": pa.array([b"v"], pa.binary()),
                                   "timestamp": pa.array([1], pa.int64())}),
                         base_offset=0, codec="none")
    req = ProduceRequest(transactional_id=None, acks=5, timeout=datetime.timedelta(seconds=5),
                         topic_data=(TopicProduceData(name=topic, partition_data=tuple(
                             PartitionProduceData(index=p, records=batch) for p in (0, 1))),))
    with connect(kafka_gateway) as s:
        parts = call(s, req, 9)[1].responses[0].partition_responses
    assert sorted((p.index, int(p.error_code)) for p in parts) == [(0, 21), (1, 21)]
    assert [kafka_log.partition(topic, p).high_watermark() for p in (0, 1)] == [0, 0]
