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
