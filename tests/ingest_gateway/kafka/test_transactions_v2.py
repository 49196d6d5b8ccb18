"""Transactions v2 (KIP-890) over real sockets against a gateway process: ApiVersions
finalizes ``transaction.version`` 2; Produce v12 adds its partition to the
transaction itself (no AddPartitionsToTxn); EndTxn v5 moves the producer to the next
epoch and answers it; a retried EndTxn gets the same answer; a zombie write of the
ended transaction's epoch is refused; and a marker of an ended transaction that
arrives late (as a recovering gateway's can) leaves the next transaction's records
open instead of ending them -- the window README's known limits named."""

from __future__ import annotations

import datetime
import uuid

import pyarrow as pa
import pytest
from kio.index import load_request_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.produce.v12.request import (PartitionProduceData, ProduceRequest,
                                            TopicProduceData)

from ingest_gateway.kafka.records import encode_batch
from log_layout import transactions as tx
from tests.ingest_gateway.kafka.kafka_gateway import call, connect
from tests.ingest_gateway.kafka.test_transactions import RC, RU, _init, kafka_read, new_topic


def produce12(s, tid, topic, partition, pid, epoch, value: bytes, seq: int = 0) -> int:
    table = pa.table({"key": [b"k"], "value": [value], "timestamp": [1_700_000_000_000],
                      "headers": pa.array([[]], pa.list_(pa.struct([("key", pa.string()),
                                                                    ("value", pa.binary())])))})
    data = encode_batch(table, base_offset=0, producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=True)
    req = ProduceRequest(transactional_id=tid, acks=-1, timeout=datetime.timedelta(seconds=10),
                         topic_data=(TopicProduceData(name=topic, partition_data=(
                             PartitionProduceData(index=partition, records=data),)),))
    return call(s, req, 12)[1].responses[0].partition_responses[0].error_code.value


def end5(s, tid, pid, epoch, commit: bool) -> tuple[int, int, int]:
    """EndTxn v5: (error code, producer id, epoch) of the answer."""
    cls = load_request_schema(26, 5)
    answer = call(s, cls(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                         committed=commit), 5)[1]
    return answer.error_code.value, answer.producer_id, answer.producer_epoch


def test_api_versions_finalizes_transaction_version_2(kafka_gateway):
    with connect(kafka_gateway) as s:
        answer = call(s, ApiVersionsRequest(client_software_name="t",
                                            client_software_version="1"), 3)[1]
    finalized = {f.name: f.max_version_level for f in answer.finalized_features}
    assert finalized == {"transaction.version": 2}
    assert {k.api_key: k.max_version for k in answer.api_keys}[26] >= 5  # EndTxn v5


def test_each_end_bumps_the_epoch_and_produce_v12_adds_its_partition(kafka_gateway, kafka_log):
    topic, tid = new_topic(kafka_log, 2), f"v2-{uuid.uuid4().hex[:8]}"
    with connect(kafka_gateway) as s:
        init = _init(s, tid)
        pid, epoch = init.producer_id, init.producer_epoch
        # no AddPartitionsToTxn: the Produce v12 adds the partition
        assert produce12(s, tid, topic, 0, pid, epoch, b"first") == 0
        assert tx.describe(kafka_log, tid)["partitions"] == [[topic, 0]]
        assert end5(s, tid, pid, epoch, True) == (0, pid, epoch + 1)
        # the answer was lost: the retry at the old epoch is answered the same
        assert end5(s, tid, pid, epoch, True) == (0, pid, epoch + 1)
        # a zombie write of the ended transaction's epoch is refused in its partition
        assert produce12(s, tid, topic, 0, pid, epoch, b"zombie", seq=1) == 47
        # the next transaction, at the epoch EndTxn gave back; an abort bumps it too
        assert produce12(s, tid, topic, 1, pid, epoch + 1, b"second") == 0
        assert end5(s, tid, pid, epoch + 1, False) == (0, pid, epoch + 2)
        # the old epoch is fenced for the coordinator as well
        assert end5(s, tid, pid, epoch + 1, True)[0] == 90
    assert [v for *_, v in kafka_read(kafka_gateway, kafka_log, [(topic, 0), (topic, 1)], RC)] \
        == [b"first"]
    doc = tx.describe(kafka_log, tid)
    assert (doc["state"], doc["epoch"]) == ("CompleteAbort", epoch + 2)


def test_a_late_marker_of_an_ended_transaction_does_not_end_the_next(kafka_gateway, kafka_log):
    topic, tid = new_topic(kafka_log, 1), f"late-{uuid.uuid4().hex[:8]}"
    with connect(kafka_gateway) as s:
        init = _init(s, tid)
        pid, epoch = init.producer_id, init.producer_epoch
        assert produce12(s, tid, topic, 0, pid, epoch, b"n") == 0
        assert end5(s, tid, pid, epoch, True) == (0, pid, epoch + 1)
        # transaction N+1 writes to the same partition at the epoch it was given
        assert produce12(s, tid, topic, 0, pid, epoch + 1, b"n+1") == 0
        # transaction N's commit marker arrives again, late: what a recovering gateway
        # that read N's PrepareCommit before the producer completed it would write
        # (log_layout.transactions._complete's marker at N's bumped epoch, strict)
        tx._marker(kafka_log, topic, 0, pid, epoch + 1, True, None, True)
        plog = kafka_log.partition(topic, 0)
        snap = plog.snapshot()
        assert pid in snap.open_txns  # N+1 is still open: not ended early
        # n at 0, N's marker at 1, n+1 at 2: read_committed readers stop before n+1
        assert (snap.open_txns[pid], snap.last_stable_offset, snap.next_offset) == (2, 2, 3)
        # N+1 ends as its producer says: aborted, its record never committed
        assert end5(s, tid, pid, epoch + 1, False) == (0, pid, epoch + 2)
    assert pid not in kafka_log.partition(topic, 0).snapshot().open_txns
    assert [v for *_, v in kafka_read(kafka_gateway, kafka_log, [(topic, 0)], RC)] == [b"n"]
    assert [v for *_, v in kafka_read(kafka_gateway, kafka_log, [(topic, 0)], RU)] == \
        [b"n", b"n+1"]


@pytest.mark.parametrize("strict", [False, True])
def test_the_marker_rule_itself(kafka_log, strict):
    """The partition side alone: a marker at the epoch of the open records ends them
    (transactions v1, no bump) unless strict (v2: they are the next transaction's)."""
    from tests.log_layout.txn_helpers import txn_append

    topic = new_topic(kafka_log, 1)
    txn_append(kafka_log, topic, 0, 77, 3, [b"x"])
    kafka_log.partition(topic, 0).writer().write_marker(77, 3, True, strict=strict)
    assert (77 in kafka_log.partition(topic, 0).snapshot().open_txns) == strict


def test_a_v1_end_over_kafka_bounds_its_markers(kafka_gateway, kafka_log):
    """EndTxn v4 (librdkafka's): no bump, but the Prepare document holds each partition's
    end offset, which its markers respect (log_layout.transactions)."""
    import json

    from log_layout import paths
    from tests.ingest_gateway.kafka.test_transactions import _add, _end, _produce

    topic, tid = new_topic(kafka_log, 1), f"v1-{uuid.uuid4().hex[:8]}"
    with connect(kafka_gateway) as s:
        init = _init(s, tid)
        pid, epoch = init.producer_id, init.producer_epoch
        assert _add(s, tid, pid, epoch, topic, [0]) == [0]
        assert _produce(s, tid, topic, 0, pid, epoch) == 0
        assert _end(s, tid, pid, epoch, True, 4) == 0
    folder = paths.transaction_folder(tid)
    docs = [json.loads(kafka_log.store.read(f"{folder}/{f.name}"))
            for f in kafka_log.store.list(folder)]
    prepared = [d for d in docs if d["state"] == "PrepareCommit"][-1]
    assert prepared["bounds"] == [[topic, 0, 1]] and prepared["epoch"] == epoch
