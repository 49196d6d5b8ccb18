"""Transactions over the Kafka listener of a real gateway process (``kafka.txn``,
``kafka.txn_produce``), with unmodified confluent-kafka and kafka-python: a
consume-transform-produce transaction over two topics and three partitions with the
group's offsets, an aborted one, a zombie fenced, and what read_committed and
read_uncommitted readers see -- Kafka consumers, sparklog's own Consumer, and the
reverse (the HTTP transactional Producer read by a Kafka consumer)."""

from __future__ import annotations

import datetime
import uuid

import pytest

from ingest_gateway.client import Consumer, Producer
from jobs.gateway_process import wait_for
from tests.ingest_gateway.kafka.kafka_gateway import call, connect

ck = pytest.importorskip("confluent_kafka")

RC, RU = "read_committed", "read_uncommitted"


def new_topic(kafka_log, partitions: int) -> str:
    name = f"tx-{uuid.uuid4().hex[:10]}"
    kafka_log.create_topic(name, {"partitions": partitions})
    return name


def kafka_read(gw, kafka_log, tps, level) -> list[tuple[str, int, bytes]]:
    """(topic, partition, value) a confluent-kafka consumer at ``level`` is handed from
    offset 0 until its position reaches each partition's end (markers included)."""
    c = ck.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "unused",
                     "enable.auto.commit": False, "isolation.level": level,
                     "fetch.wait.max.ms": 50})
    c.assign([ck.TopicPartition(t, p, 0) for t, p in tps])
    ends = {tp: kafka_log.partition(*tp).snapshot().next_offset for tp in tps}
    got = []

    def at_end() -> bool:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            got.append((m.topic(), m.partition(), m.value()))
        pos = c.position([ck.TopicPartition(t, p) for t, p in tps])
        return all(ends[(x.topic, x.partition)] in (0, x.offset) for x in pos)

    try:
        wait_for(at_end, timeout=30, interval=0, what=f"a {level} consumer at the end")
    finally:
        c.close()
    return got


def sparklog_read(gw, tps, level) -> list[tuple[str, int, bytes]]:
    """The same through the gateway with sparklog's own Consumer."""
    with Consumer(gateway=gw.url, isolation_level=level, fetch_max_wait_ms=50) as c:
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out = []

        def at_end() -> bool:
            out.extend((r.topic, r.partition, r.value) for r in c.poll(timeout=0.2))
            return all(c.position(tp) >= c.watermarks(tp)[1] for tp in tps)

        wait_for(at_end, timeout=30, interval=0, what=f"a sparklog {level} consumer at the end")
        return out


@pytest.fixture(scope="module")
def ctp(kafka_gateway, kafka_log):
    """One consume-transform-produce run with confluent-kafka: input ``src`` (5 records)
    consumed by group ``group``; a committed transaction writing to ``a`` (2 partitions)
    and ``b`` (1) with the group's offset 5; then an aborted transaction to both."""
    src, a, b = new_topic(kafka_log, 1), new_topic(kafka_log, 2), new_topic(kafka_log, 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    plain = ck.Producer({"bootstrap.servers": kafka_gateway.bootstrap})
    for i in range(5):
        plain.produce(src, value=b"in-%d" % i, partition=0)
    assert plain.flush(20) == 0
    consumer = ck.Consumer({"bootstrap.servers": kafka_gateway.bootstrap, "group.id": group,
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            "isolation.level": RC})
    consumer.subscribe([src])
    inputs: list[bytes] = []

    def consumed() -> bool:
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            inputs.append(m.value())
        return len(inputs) == 5

    p = ck.Producer({"bootstrap.servers": kafka_gateway.bootstrap,
                     "transactional.id": f"ctp-{uuid.uuid4().hex[:8]}", "linger.ms": 5})
    try:
        wait_for(consumed, timeout=30, interval=0, what="the input consumed")
        p.init_transactions(20)
        p.begin_transaction()
        for i, v in enumerate(inputs):
            p.produce(a, value=v.upper(), partition=i % 2)
            p.produce(b, value=v + b"!", partition=0)
        p.send_offsets_to_transaction([ck.TopicPartition(src, 0, 5)],
                                      consumer.consumer_group_metadata(), 20)
        p.commit_transaction(20)
        p.begin_transaction()
        p.produce(a, value=b"aborted-a", partition=1)
        p.produce(b, value=b"aborted-b", partition=0)
        assert p.flush(20) == 0
        p.abort_transaction(20)
        committed = consumer.committed([ck.TopicPartition(src, 0)], timeout=20)[0].offset
    finally:
        consumer.close()
    return {"src": src, "a": a, "b": b, "group": group, "inputs": inputs,
            "committed": committed, "tps": [(a, 0), (a, 1), (b, 0)]}


def expected(ctp, level):
    a, b = ctp["a"], ctp["b"]
    out = [(a, i % 2, v.upper()) for i, v in enumerate(ctp["inputs"])]
    out += [(b, 0, v + b"!") for v in ctp["inputs"]]
    if level == RU:
        out += [(a, 1, b"aborted-a"), (b, 0, b"aborted-b")]
    return sorted(out)


@pytest.mark.parametrize("level", [RC, RU])
def test_kafka_transaction_seen_by_kafka_consumers(kafka_gateway, kafka_log, ctp, level):
    assert ctp["inputs"] == [b"in-%d" % i for i in range(5)]
    got = kafka_read(kafka_gateway, kafka_log, ctp["tps"], level)
    assert sorted(got) == expected(ctp, level)
    per_partition = [v for t, p, v in got if (t, p) == (ctp["a"], 0)]
    assert per_partition == [b"IN-0", b"IN-2", b"IN-4"]  # in order within a partition


def test_send_offsets_to_transaction_commits_the_group_offset(kafka_log, ctp):
    from log_layout import group_offsets

    assert ctp["committed"] == 5  # OffsetFetch after the commit
    doc = group_offsets.read_group_offsets(kafka_log.store, ctp["group"])
    assert doc["offsets"][ctp["src"]]["0"]["offset"] == 5  # in the group's document


@pytest.mark.parametrize("level", [RC, RU])
def test_kafka_transaction_seen_by_sparklogs_consumer(kafka_gateway, ctp, level):
    got = sparklog_read(kafka_gateway, ctp["tps"], level)
    assert sorted(got) == expected(ctp, level)


def test_a_zombie_is_fenced_by_a_second_producer_with_the_same_id(kafka_gateway, kafka_log):
    topic, name = new_topic(kafka_log, 1), f"zombie-{uuid.uuid4().hex[:8]}"
    conf = {"bootstrap.servers": kafka_gateway.bootstrap, "transactional.id": name}
    zombie, successor = ck.Producer(conf), ck.Producer(conf)
    zombie.init_transactions(20)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    assert zombie.flush(20) == 0
    successor.init_transactions(20)  # a new epoch: the zombie's transaction is aborted
    with pytest.raises(ck.KafkaException) as e:
        zombie.commit_transaction(20)
    err = e.value.args[0]
    assert err.fatal() and err.code() in (ck.KafkaError._FENCED,
                                          ck.KafkaError.PRODUCER_FENCED,
                                          ck.KafkaError.INVALID_PRODUCER_EPOCH), err
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(20)
    tps = [(topic, 0)]
    assert [v for *_, v in kafka_read(kafka_gateway, kafka_log, tps, RC)] == [b"successor"]
    assert [v for *_, v in kafka_read(kafka_gateway, kafka_log, tps, RU)] == \
        [b"zombie", b"successor"]


def test_kafka_python_transactional_producer(kafka_gateway, kafka_log):
    kafka = pytest.importorskip("kafka")
    from kafka.structs import OffsetAndMetadata, TopicPartition

    from log_layout import group_offsets

    topic, group = new_topic(kafka_log, 2), f"kpg-{uuid.uuid4().hex[:8]}"
    p = kafka.KafkaProducer(bootstrap_servers=kafka_gateway.bootstrap,
                            transactional_id=f"kp-{uuid.uuid4().hex[:8]}")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(4):
            p.send(topic, value=b"kp-%d" % i, partition=i % 2)
        p.send_offsets_to_transaction({TopicPartition(topic, 1): OffsetAndMetadata(7, "", -1)},
                                      group)  # a bare group id: kafka-python's older form
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, value=b"kp-aborted", partition=0)
        p.flush()
        p.abort_transaction()
    finally:
        p.close()
    tps = [(topic, 0), (topic, 1)]
    committed = sorted(b"kp-%d" % i for i in range(4))
    assert sorted(v for *_, v in kafka_read(kafka_gateway, kafka_log, tps, RC)) == committed
    assert sorted(v for *_, v in kafka_read(kafka_gateway, kafka_log, tps, RU)) == \
        sorted(committed + [b"kp-aborted"])
    doc = group_offsets.read_group_offsets(kafka_log.store, group)
    assert doc["offsets"][topic]["1"]["offset"] == 7


def test_http_transactions_seen_by_kafka_consumers(kafka_gateway, kafka_log):
    topic = new_topic(kafka_log, 2)
    with Producer(kafka_gateway.url, transactional_id=f"http-{uuid.uuid4().hex[:8]}",
                  linger_ms=1) as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(6):
            p.send(topic, b"h-%d" % i, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"h-aborted", partition=1)
        p.flush()
        p.abort_transaction()
    tps = [(topic, 0), (topic, 1)]
    committed = sorted(b"h-%d" % i for i in range(6))
    assert sorted(v for *_, v in kafka_read(kafka_gateway, kafka_log, tps, RC)) == committed
    assert sorted(v for *_, v in kafka_read(kafka_gateway, kafka_log, tps, RU)) == \
        sorted(committed + [b"h-aborted"])


# -- Kafka's error codes, over a raw socket ---------------------------------------------
def _init(s, tid, timeout_ms=60_000, version=4):
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    return call(s, InitProducerIdRequest(
        transactional_id=tid, transaction_timeout=datetime.timedelta(milliseconds=timeout_ms),
        producer_id=-1, producer_epoch=-1), version)[1]


def _add(s, tid, pid, epoch, topic, partitions):
    from kio.schema.add_partitions_to_txn.v3.request import (AddPartitionsToTxnRequest,
                                                             AddPartitionsToTxnTopic)

    resp = call(s, AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
            AddPartitionsToTxnTopic(name=topic, partitions=tuple(partitions)),)), 3)[1]
    return [r.partition_error_code.value for t in resp.results_by_topic_v3_and_below
            for r in t.results_by_partition]


def _end(s, tid, pid, epoch, commit, version):
    from kio.index import load_request_schema

    cls = load_request_schema(26, version)
    return call(s, cls(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                       committed=commit), version)[1].error_code.value


def _produce(s, tid, topic, partition, pid, epoch, transactional=True):
    import pyarrow as pa
    from kio.schema.produce.v9.request import (PartitionProduceData, ProduceRequest,
                                               TopicProduceData)

    from ingest_gateway.kafka.records import encode_batch

    table = pa.table({"key": [b"k"], "value": [b"v"], "timestamp": [1_700_000_000_000],
                      "headers": pa.array([[]], pa.list_(pa.struct([("key", pa.string()),
                                                                    ("value", pa.binary())])))})
    data = encode_batch(table, base_offset=0, producer_id=pid, producer_epoch=epoch,
                        base_sequence=0, is_transactional=transactional)
    req = ProduceRequest(transactional_id=tid, acks=-1, timeout=datetime.timedelta(seconds=10),
                         topic_data=(TopicProduceData(name=topic, partition_data=(
                             PartitionProduceData(index=partition, records=data),)),))
    return call(s, req, 9)[1].responses[0].partition_responses[0].error_code.value


def test_transaction_error_codes(kafka_gateway, kafka_log):
    topic, tid = new_topic(kafka_log, 2), f"codes-{uuid.uuid4().hex[:8]}"
    with connect(kafka_gateway) as s:
        assert _init(s, tid, timeout_ms=900_001).error_code.value == 50  # over Kafka's max
        assert _init(s, "bad id!").error_code.value == 42
        assert _add(s, tid, 1, 0, topic, [0]) == [49]  # before InitProducerId
        old = _init(s, tid)
        new = _init(s, tid)
        assert (new.producer_id, new.producer_epoch) == (old.producer_id, old.producer_epoch + 1)
        pid, epoch = new.producer_id, new.producer_epoch
        assert _add(s, tid, pid, old.producer_epoch, topic, [0]) == [90]  # fenced
        assert _end(s, tid, pid, old.producer_epoch, True, 3) == 90
        assert _end(s, tid, pid, old.producer_epoch, True, 1) == 47  # before KIP-588
        assert _add(s, tid, pid, epoch, topic, [0, 7]) == [3, 3]  # all or nothing
        assert _produce(s, tid, topic, 0, pid, epoch) == 48  # not added to the transaction
        assert _add(s, tid, pid, epoch, topic, [0]) == [0]
        assert _produce(s, tid, topic, 0, pid, epoch, transactional=False) == 87
        assert _produce(s, tid, topic, 0, pid, old.producer_epoch) == 47
        assert _produce(s, tid, topic, 0, pid, epoch) == 0
        assert _end(s, tid, pid, epoch, False, 3) == 0
        assert _end(s, tid, pid, epoch, True, 3) == 0  # nothing under way: a no-op
    assert kafka_log.partition(topic, 0).snapshot().next_offset == 2  # the record + marker
    assert [v for *_, v in kafka_read(kafka_gateway, kafka_log, [(topic, 0)], RC)] == []


def test_find_coordinator_for_transactional_ids(kafka_gateway):
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    with connect(kafka_gateway) as s:
        resp = call(s, FindCoordinatorRequest(key_type=1,
                                              coordinator_keys=("etl-1", "bad id!")), 4)[1]
    assert [(c.error_code.value, c.port) for c in resp.coordinators] == \
        [(0, kafka_gateway.kafka_port), (42, -1)]


def test_an_open_transaction_holds_read_committed_at_the_last_stable_offset(kafka_gateway,
                                                                           kafka_log):
    topic = new_topic(kafka_log, 1)
    p = ck.Producer({"bootstrap.servers": kafka_gateway.bootstrap,
                     "transactional.id": f"open-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(topic, value=b"pending", partition=0)
    assert p.flush(20) == 0

    def high(level: str) -> int:  # ListOffsets latest at the consumer's isolation level
        c = ck.Consumer({"bootstrap.servers": kafka_gateway.bootstrap, "group.id": "unused",
                         "isolation.level": level})
        try:
            return c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=20)[1]
        finally:
            c.close()

    assert (high(RC), high(RU)) == (0, 1)  # the open transaction's record is above the LSO
    p.commit_transaction(20)
    assert (high(RC), high(RU)) == (2, 2)  # the record and its commit marker
    assert [v for *_, v in kafka_read(kafka_gateway, kafka_log, [(topic, 0)], RC)] == \
        [b"pending"]


def test_an_abandoned_kafka_transaction_is_aborted_after_its_timeout(kafka_gateway, kafka_log):
    from log_layout import transactions

    topic, tid = new_topic(kafka_log, 1), f"abandoned-{uuid.uuid4().hex[:8]}"
    with connect(kafka_gateway) as s:
        init = _init(s, tid, timeout_ms=500)
        pid, epoch = init.producer_id, init.producer_epoch
        assert _add(s, tid, pid, epoch, topic, [0]) == [0]
        assert _produce(s, tid, topic, 0, pid, epoch) == 0
        # the gateway's TimeoutAborter (every second) aborts it at a bumped epoch
        wait_for(lambda: transactions.describe(kafka_log, tid)["state"] == "CompleteAbort",
                 timeout=20, what="the transaction aborted by its timeout")
        assert _end(s, tid, pid, epoch, True, 3) == 90  # the producer is fenced
    assert [v for *_, v in kafka_read(kafka_gateway, kafka_log, [(topic, 0)], RC)] == []
    assert [v for *_, v in kafka_read(kafka_gateway, kafka_log, [(topic, 0)], RU)] == [b"v"]


def test_coordinator_failures_map_to_kafkas_codes():
    from ingest_gateway.kafka.txn import code_of
    from ingest_gateway.kafka.wire import Header
    from log_layout import StoreError
    from log_layout.errors import InvalidTxnState

    add_v3 = Header(24, 3, 1, None)
    assert code_of(InvalidTxnState("t", "PrepareCommit", "add partitions"), add_v3) == 51
    assert code_of(InvalidTxnState("t", "CompleteAbort", "commit"), add_v3) == 48
    assert code_of(InvalidTxnState("t", "Unknown", "commit"), add_v3) == 49
    assert code_of(StoreError("s3://b", "unreachable"), add_v3) == 15  # retriable
    assert code_of(OSError(5, "Input/output error"), add_v3) == 15


def test_interleaved_commits_aborts_and_plain_records_in_one_partition(kafka_gateway,
                                                                      kafka_log):
    """Aborted records in the middle of a partition, between committed and
    non-transactional ones: read_committed skips exactly them, in order."""
    topic = new_topic(kafka_log, 1)
    boot = kafka_gateway.bootstrap
    p = ck.Producer({"bootstrap.servers": boot, "transactional.id": f"mix-{uuid.uuid4().hex[:8]}",
                     "linger.ms": 0})
    plain = ck.Producer({"bootstrap.servers": boot, "linger.ms": 0})
    p.init_transactions(20)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True),
                           ([b"a3"], False)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v, partition=0)
        assert p.flush(20) == 0
        (p.commit_transaction if commit else p.abort_transaction)(20)
        if values == [b"a1", b"a2"]:
            plain.produce(topic, value=b"plain", partition=0)
            assert plain.flush(20) == 0
    p.begin_transaction()
    p.produce(topic, value=b"c4", partition=0)
    p.commit_transaction(20)
    tps = [(topic, 0)]
    assert [v for *_, v in kafka_read(kafka_gateway, kafka_log, tps, RC)] == \
        [b"c1", b"c2", b"plain", b"c3", b"c4"]
    assert [v for *_, v in kafka_read(kafka_gateway, kafka_log, tps, RU)] == \
        [b"c1", b"c2", b"a1", b"a2", b"plain", b"c3", b"a3", b"c4"]
    assert [v for *_, v in sparklog_read(kafka_gateway, tps, RC)] == \
        [b"c1", b"c2", b"plain", b"c3", b"c4"]
