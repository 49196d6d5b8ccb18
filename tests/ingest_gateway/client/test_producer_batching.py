"""Producer batching: linger counted from a batch's first record, and send()'s fast path.

No timed assertions: a sliding linger (restarted by every record) would keep one batch
open for as long as records keep coming, so the tests count batches, not milliseconds.
"""

from __future__ import annotations

import time

import pytest

from ingest_gateway.client import Producer
from log_layout.partitioner import partition_for_key

pytestmark = pytest.mark.parametrize("gateway_store", ["file"], indirect=True)


def test_linger_counts_from_the_first_record_of_a_batch(gateway, topic):
    # a record every ~10 ms, linger 100 ms: the first batch is sent while records keep
    # coming (a timer restarted by each record would never fire while they come)
    with Producer(gateway.url, linger_ms=100, batch_size=1 << 20) as producer:
        handles = []
        first = producer.send(topic, b"first", partition=0)
        deadline = time.monotonic() + 60
        while not first.done() and time.monotonic() < deadline:
            handles.append(producer.send(topic, b"x", partition=0))
            time.sleep(0.01)  # the send rate, not a wait for a condition
        assert first.done(), "the first batch waited for the records to stop"
        for _ in range(3):  # and records sent after it go in later batches
            handles.append(producer.send(topic, b"y", partition=0))
        producer.flush()
        bases = {h._batch.future.result().base_offset for h in [first, *handles]}
    assert len(bases) >= 2
    assert first.result().offset == 0


def test_a_plain_record_after_a_keyed_one_in_the_same_batch_keeps_the_keys_aligned(
        gateway, gateway_log, topic):
    # send()'s fast path only takes batches holding values alone (SendBatch.plain)
    with Producer(gateway.url, linger_ms=50) as producer:
        a = producer.send(topic, b"a")  # opens the sticky partition's batch
        p = a._batch.partition
        # a keyed record for that partition joins the same open batch
        key = next(k for k in (b"k%d" % i for i in range(1000))
                   if partition_for_key(k, 3) == p)
        b = producer.send(topic, b"b", key=key)
        c = producer.send(topic, b"c")
        assert b._batch is a._batch and not a._batch.plain
        producer.flush()
    if c._batch is a._batch:
        assert a._batch.count == 3
    rows = gateway_log.partition(topic, p).read_table(0).to_pylist()
    by_value = {r["value"]: r["key"] for r in rows}
    assert by_value[b"a"] is None and by_value[b"b"] == key
    assert by_value.get(b"c", None) is None


def test_send_converts_values_on_every_path_and_refuses_other_types(gateway, gateway_log, topic):
    # a producer without transactions has the accumulator's append as its send (one call
    # less per record): the conversion of str/bytearray/memoryview values and the refusal
    # of other types must hold there, on the fast (plain) path and the general one, and
    # on a transactional producer's send
    with Producer(gateway.url, linger_ms=1) as producer:
        assert producer.send.__func__ is not Producer.send  # the forwarding frame is gone
        producer.send(topic, "plain-str")
        producer.send(topic, bytearray(b"plain-bytearray"))
        producer.send(topic, memoryview(b"plain-memoryview"))
        producer.send(topic, None)
        producer.send(topic, "keyed-str", key="k")
        producer.send(topic, "partitioned-str", partition=2, headers=[("h", b"1")])
        for bad in (1, 1.5, ["x"], object()):
            with pytest.raises(TypeError, match="value must be bytes or str"):
                producer.send(topic, bad)
            with pytest.raises(TypeError, match="value must be bytes or str"):
                producer.send(topic, bad, key=b"k")
        producer.flush()
    with Producer(gateway.url, transactional_id=f"tx-{topic}", linger_ms=1) as producer:
        assert producer.send.__func__ is Producer.send
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, "txn-str", partition=1)
        with pytest.raises(TypeError, match="value must be bytes or str"):
            producer.send(topic, 7, partition=0)
        producer.commit_transaction()
    values = sorted((v for p in range(3)
                     for v in gateway_log.partition(topic, p).read_table(0).column("value")
                     .to_pylist()), key=lambda v: (v is None, v or b""))
    assert values == [b"keyed-str", b"partitioned-str", b"plain-bytearray",
                      b"plain-memoryview", b"plain-str", b"txn-str", None]
