"""ListTransactions, DescribeTransactions and DescribeProducers over the Kafka listener of a
real gateway process (raw kio requests: confluent-kafka's AdminClient has none of
them; Kafka's own kafka-transactions.sh drives them in test_kafka_tools), about a
transaction confluent-kafka holds open and then commits."""

from __future__ import annotations

import importlib
import time
import uuid

import pytest

from tests.ingest_gateway.kafka.kafka_gateway import call, connect

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TRANSACTIONAL_ID_NOT_FOUND, INVALID_REGULAR_EXPRESSION = 105, 128


def kio(api: str, version: int, kind: str = "request"):
    return importlib.import_module(f"kio.schema.{api}.v{version}.{kind}")


def _list(gw, version=2, **kw):
    m = kio("list_transactions", version)
    fields = {"state_filters": (), "producer_id_filters": (), "duration_filter": -1,
              "transactional_id_pattern": None, **kw}
    from ingest_gateway.kafka.wire import make

    with connect(gw) as s:
        return call(s, make(m.ListTransactionsRequest, **fields), version)[1]


def _describe(gw, *tids):
    m = kio("describe_transactions", 0)
    with connect(gw) as s:
        return call(s, m.DescribeTransactionsRequest(transactional_ids=tids), 0)[1]


def _unknown_id_code(gw, tid: str) -> int:
    """The error code of DescribeTransactions of one id, read from the answer's bytes:
    kio's reader refuses the start time -1 Kafka answers for an id it does not know."""
    import struct

    from tests.ingest_gateway.kafka.kafka_gateway import frame, read_frame

    m = kio("describe_transactions", 0)
    with connect(gw) as s:
        s.sendall(frame(m.DescribeTransactionsRequest(transactional_ids=(tid,)), 0))
        data = read_frame(s)
    # correlation id, header tags, throttle time, array length (one byte), error code
    assert data is not None and data[9] == 2
    return struct.unpack_from(">h", data, 10)[0]


def _producers(gw, topic, partitions):
    m = kio("describe_producers", 0)
    with connect(gw) as s:
        _, resp = call(s, m.DescribeProducersRequest(topics=(
            m.TopicRequest(name=topic, partition_indexes=partitions),)), 0)
    return {p.partition_index: p for p in resp.topics[0].partitions}


def test_an_open_transaction_is_listed_described_and_its_producer_shown(kafka_gateway):
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    topic, tid = f"tx-{uuid.uuid4().hex[:8]}", f"etl-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 2)])[topic].result(timeout=20)
    before = int(time.time() * 1000)
    p = ck.Producer({"bootstrap.servers": kafka_gateway.bootstrap, "transactional.id": tid,
                     "transaction.timeout.ms": 60_000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"a", partition=1)
    p.produce(topic, b"b", partition=1)
    assert p.flush(30) == 0

    listed = {t.transactional_id: t for t in _list(kafka_gateway).transaction_states}
    assert listed[tid].transaction_state == "Ongoing"
    pid = listed[tid].producer_id
    assert pid >= 0
    # filters: by producer id, by state, by an unknown state, by pattern, by duration (v1)
    assert [t.transactional_id for t in _list(
        kafka_gateway, producer_id_filters=(pid,)).transaction_states] == [tid]
    assert tid not in {t.transactional_id for t in _list(
        kafka_gateway, state_filters=("CompleteCommit",)).transaction_states}
    odd = _list(kafka_gateway, state_filters=("Ongoing", "Nonsense"))
    assert odd.unknown_state_filters == ("Nonsense",)
    assert tid in {t.transactional_id for t in odd.transaction_states}
    assert [t.transactional_id for t in _list(
        kafka_gateway, transactional_id_pattern=tid[:6] + ".*").transaction_states
        if t.transactional_id == tid] == [tid]
    assert _list(kafka_gateway, transactional_id_pattern="etl").transaction_states == () or \
        tid not in {t.transactional_id for t in _list(
            kafka_gateway, transactional_id_pattern="etl").transaction_states}
    assert _list(kafka_gateway, transactional_id_pattern="(").error_code == \
        INVALID_REGULAR_EXPRESSION
    assert tid not in {t.transactional_id for t in _list(
        kafka_gateway, 1, duration_filter=3_600_000).transaction_states}

    (d,) = _describe(kafka_gateway, tid).transaction_states
    assert (d.error_code, d.transaction_state, d.producer_id) == (0, "Ongoing", pid)
    assert d.transaction_timeout.total_seconds() == 60
    assert before - 60_000 <= d.transaction_start_time.timestamp() * 1000 <= time.time() * 1000
    assert [(t.topic, t.partitions) for t in d.topics] == [(topic, (1,))]
    assert _unknown_id_code(kafka_gateway, "nobody-tx") == TRANSACTIONAL_ID_NOT_FOUND

    parts = _producers(kafka_gateway, topic, (0, 1, 5))
    assert parts[0].error_code == 0 and parts[0].active_producers == ()
    (state,) = parts[1].active_producers
    assert (state.producer_id, state.current_txn_start_offset, state.last_sequence) == \
        (pid, 0, 1)
    assert state.last_timestamp >= before - 1000 and state.coordinator_epoch == -1
    assert parts[5].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION

    p.commit_transaction(30)
    # (described, its start time is -1 now: no transaction under way, which kio's
    # reader refuses; Kafka's tool prints it, test_kafka_tools)
    assert [t.transaction_state for t in _list(
        kafka_gateway, producer_id_filters=(pid,)).transaction_states] == ["CompleteCommit"]
    (state,) = _producers(kafka_gateway, topic, (1,))[1].active_producers
    assert state.current_txn_start_offset == -1


def test_a_backtracking_pattern_is_answered_at_once(kafka_gateway):
    # RE2: linear time; Python's re would backtrack for minutes on this against long ids
    import time as clock

    t0 = clock.monotonic()
    resp = _list(kafka_gateway, transactional_id_pattern="(a+)+$")
    assert resp.error_code == 0 and clock.monotonic() - t0 < 10
    assert _list(kafka_gateway, transactional_id_pattern="a" * 5000).error_code == \
        INVALID_REGULAR_EXPRESSION


def test_write_txn_markers_aborts_only(kafka_gateway):
    admin = AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})
    topic = f"wm-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1)])[topic].result(timeout=20)
    m = kio("write_txn_markers", 1)

    def marker(commit: bool, partitions=(0,), pid=77, epoch=0):
        with connect(kafka_gateway) as s:
            _, resp = call(s, m.WriteTxnMarkersRequest(markers=(m.WritableTxnMarker(
                producer_id=pid, producer_epoch=epoch, transaction_result=commit,
                topics=(m.WritableTxnMarkerTopic(name=topic, partition_indexes=partitions),),
                coordinator_epoch=0),)), 1)
        return [p.error_code for p in resp.markers[0].topics[0].partitions]

    assert marker(True) == [42]  # INVALID_REQUEST: COMMIT markers are the coordinator's
    assert marker(False, (0, 4)) == [0, 3]  # nothing open in 0: done; 4 does not exist
