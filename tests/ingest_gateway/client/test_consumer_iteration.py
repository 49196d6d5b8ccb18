"""The README's consumer loop (``for record in consumer``) reads every record once.

Regression of issue 11: a new group with ``auto_offset_reset="earliest"``
iterating 1,000 records in 4 partitions started at about the middle (500 of
1,000; 900 with ``max_poll_records=100``) because the iterator threw away the
first fetch after the assignment changed, with the positions already past it,
and then committed the skipped offsets. Run through a real gateway (gateway
mode) and with records read from the store and membership through the same
gateway (direct mode).
"""

from __future__ import annotations

import base64
import contextlib
import threading
import uuid

import pytest

from ingest_gateway.client import Consumer

PARTITIONS, PER_PARTITION = 4, 250
SAFETY_S = 60  # a hang (the iterator waiting for records it skipped) fails, not blocks


def produce(gw, topic: str, partition: int, n: int) -> None:
    records = [{"value": base64.b64encode(b"%d-%d" % (partition, i)).decode()} for i in range(n)]
    status, body, _ = gw.request("POST", f"/topics/{topic}/partitions/{partition}",
                                 body={"records": records},
                                 content_type="application/vnd.kafka.binary.v2+json")
    assert status == 200, body


@pytest.fixture(scope="module")
def topic4(gateway, gateway_log):
    """One topic of 1,000 records in 4 partitions (read by a new group per test)."""
    name = f"it-{uuid.uuid4().hex[:10]}"
    gateway_log.create_topic(name, {"partitions": PARTITIONS})
    for p in range(PARTITIONS):
        produce(gateway, name, p, PER_PARTITION)
    return name


def consumer(mode: str, gateway, gateway_store, group: str, **kw) -> Consumer:
    url, options = gateway_store
    src = {"gateway": gateway.url} if mode == "gateway" else \
        {"store": url, "storage_options": options, "gateway": gateway.url}
    return Consumer(**src, group_id=group, auto_offset_reset="earliest",
                    fetch_max_wait_ms=50, heartbeat_interval_ms=100, **kw)


@contextlib.contextmanager
def closed_after_safety_timeout(c: Consumer):
    """Close ``c`` after SAFETY_S (which ends its iterator) so a skip fails, not hangs."""
    safety = threading.Timer(SAFETY_S, c.close)
    safety.start()
    try:
        yield c
    finally:
        safety.cancel()
        c.close()


@pytest.mark.parametrize("mode", ["gateway", "direct"])
@pytest.mark.parametrize("max_poll_records", [500, 100])
def test_for_record_in_consumer_reads_all_1000_records_from_the_start(
        mode, max_poll_records, gateway, gateway_store, topic4):
    group = f"readme-{uuid.uuid4().hex[:8]}"
    c = consumer(mode, gateway, gateway_store, group, max_poll_records=max_poll_records)
    c.subscribe([topic4])
    expected = dict.fromkeys(range(PARTITIONS), 0)
    n = 0
    with closed_after_safety_timeout(c):
        for record in c:
            # every partition from offset 0, without a gap or a repeat
            assert record.offset == expected[record.partition], (record, expected)
            assert record.value == b"%d-%d" % (record.partition, record.offset)
            expected[record.partition] += 1
            n += 1
            if n == PARTITIONS * PER_PARTITION:
                break
        assert expected == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
        c.commit()
    status, body, _ = gateway.request("GET", f"/groups/{group}/offsets")
    assert status == 200
    assert {(o["partition"], o["offset"]) for o in body["offsets"]} == \
        {(p, PER_PARTITION) for p in range(PARTITIONS)}


@pytest.mark.parametrize("mode", ["gateway", "direct"])
def test_iteration_and_poll_share_one_position(mode, gateway, gateway_store, topic4):
    """next() and poll() on one consumer hand out one contiguous stream per partition."""
    group = f"mix-{uuid.uuid4().hex[:8]}"
    got: list[tuple[int, int]] = []
    c = consumer(mode, gateway, gateway_store, group, max_poll_records=37)
    with closed_after_safety_timeout(c):
        c.subscribe([topic4])
        it = iter(c)
        while len(got) < PARTITIONS * PER_PARTITION:
            r = next(it)  # the first one blocks through the join
            got.append((r.partition, r.offset))
            got.extend((x.partition, x.offset) for x in c.poll(0.05 if len(got) % 3 else 0))
    for p in range(PARTITIONS):
        assert [o for q, o in got if q == p] == list(range(PER_PARTITION))
