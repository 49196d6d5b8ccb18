"""A long-poll fetch at a gateway that does not lead the partition (broker application).

No commit there wakes the fetch, so the hub re-reads the store every
``REMOTE_POLL_S``: a record produced at the leader reaches a fetch waiting at the
other gateway long before the fetch's own wait ends.
"""

from __future__ import annotations

import threading
import time

import pyarrow as pa

from jobs.gateway_process import wait_for
from log_layout import open_log
from log_layout.brokers import OFFSETS_PARTITIONS, OFFSETS_TOPIC, Assignment, BrokerRegistry
from tests.ingest_gateway.test_split_brain import leader, slot_gateway

JSON_V2 = "application/vnd.kafka.json.v2+json"
WAIT_MS = 60_000


def test_a_fetch_waiting_at_a_follower_sees_a_record_committed_at_the_leader(tmp_path):
    store = str(tmp_path / "store")
    log = open_log(store)
    log.create_topic("t", {"partitions": 1})
    with slot_gateway(store, 0) as lead, slot_gateway(store, 1) as follower:
        assert BrokerRegistry(log.store).publish(Assignment(
            1, 1, {0: lead.url, 1: follower.url}, (0, 1),
            {"t": (0,), OFFSETS_TOPIC: (0,) * OFFSETS_PARTITIONS}))
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
