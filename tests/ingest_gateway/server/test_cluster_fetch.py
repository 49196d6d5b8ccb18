"""A long-poll fetch at a gateway that does not lead the partition (broker application).

No commit there wakes the fetch, so the hub re-reads the store every
``REMOTE_POLL_S``: a record produced at the leader reaches a fetch waiting at the
other gateway long before the fetch's own wait ends.
"""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from jobs.gateway_process import wait_for
from tests.ingest_gateway.slots import SlotApplication, leader

#: slow (not in ``make test-fast``, issue 28): two gateways, fetches waiting at a
#: follower; 110 s in all, measured beside three other workers
pytestmark = pytest.mark.slow

JSON_V2 = "application/vnd.kafka.json.v2+json"
WAIT_MS = 60_000


def test_a_fetch_waiting_at_a_follower_sees_a_record_committed_at_the_leader(tmp_path):
    app = SlotApplication(str(tmp_path / "store"))
    log = app.log
    log.create_topic("t", {"partitions": 1})
    with app.running():
        lead, follower = app.gateways[0], app.gateways[1]
        app.publish_assignment({"t": (0,)})
        wait_for(lambda: leader(log, 0).startswith("gw0"), what="slot 0 to claim")

        def produce_soon() -> None:
            time.sleep(1.0)
            status, body, _ = lead.request("POST", "/topics/t/partitions/0",
                                           body={"records": [{"value": "hello"}]},
                                           content_type=JSON_V2)
            assert status == 200, body

        producer = threading.Thread(target=produce_soon)
        started = time.monotonic()
        producer.start()
        status, data, _ = follower.request("POST", "/fetch", body={
            "partitions": [{"topic": "t", "partition": 0, "offset": 0}],
            "max_records": 10, "wait_ms": WAIT_MS, "min_bytes": 1})
        waited = time.monotonic() - started
        producer.join(30)
    assert status == 200
    batches = [b for b in pa.ipc.open_stream(data) if b.num_rows]
    assert [v for b in batches for v in b.column("value").to_pylist()] == [b'"hello"']
    # a liveness bound, 30x the poll: without the poll it would wait the whole WAIT_MS
    assert waited < WAIT_MS / 1000 / 2, waited


def test_a_consumer_long_polls_every_leader_at_once_and_drops_stale_answers(tmp_path):
    """Partitions on two gateways: each has one long-poll in flight. A poll answered by
    one gateway leaves the other's long-poll in flight; a seek then makes its answer
    stale: it is dropped, and the records are read from the new position exactly once."""
    from ingest_gateway.client import Consumer, Producer

    app = SlotApplication(str(tmp_path / "store"))
    log = app.log
    log.create_topic("t", {"partitions": 2})
    with app.running():
        app.publish_assignment({"t": (0, 1)})
        wait_for(lambda: leader(log, 0).startswith("gw0") and leader(log, 1).startswith("gw1"),
                 what="both slots to claim")
        bootstrap = f"{app.url(0)},{app.url(1)}"
        producer = Producer(bootstrap, acks="all")
        consumer = Consumer(gateway=bootstrap, auto_offset_reset="latest",
                            fetch_max_wait_ms=20_000)
        try:
            for i in range(5):
                producer.send("t", b"early-%d" % i, partition=1)
            producer.flush()
            consumer.assign([("t", 0), ("t", 1)])
            assert (consumer.position(("t", 0)), consumer.position(("t", 1))) == (0, 5)
            producer.send("t", b"zero", partition=0).result(30)
            # both long-polls go out at once: gateway 0 answers "zero" at once, gateway
            # 1's long-poll (at offset 5, up to 20 s) stays in flight past this poll
            first = consumer.poll(30)
            assert [r.value for r in first] == [b"zero"]
            consumer.seek(("t", 1), 0)  # the answer gateway 1 will give (at 5) is stale
            producer.send("t", b"late", partition=1).result(30)
            got: list = []
            deadline = time.monotonic() + 60
            while len(got) < 6 and time.monotonic() < deadline:
                got += consumer.poll(0.5)
        finally:
            consumer.close()
            producer.close()
    assert [(r.partition, r.value) for r in got] == \
        [(1, b"early-%d" % i) for i in range(5)] + [(1, b"late")]
