"""Idempotent batches that overtake each other, and group commit (issue 18).

The Producer sends up to 5 batches of a partition at once over several
connections, so a later one can reach the gateway first. The gateway holds it
until its predecessor is accepted (bounded, ``SEQUENCE_HOLD_S``) instead of
answering ``out_of_order_sequence``; every such answer is counted in
``sparklog_gateway_out_of_order_sequence_total``, which stays 0 in normal
operation. Flushes are a group commit: a lone request is flushed on its own,
requests arriving during a flush go together in the next.
"""

from __future__ import annotations

import re
import threading
import time

from ingest_gateway.client import Producer
from ingest_gateway.server.sequencing import SEQUENCE_HOLD_S


def metric(gateway, name: str) -> float:
    _, text, _ = gateway.request("GET", "/metrics")
    m = re.search(rf"^{re.escape(name)} (\S+)$", text.decode(), re.MULTILINE)
    return float(m.group(1)) if m else 0.0


OOO = "sparklog_gateway_out_of_order_sequence_total"
FLUSHES = "sparklog_gateway_batch_records_count"


def test_idempotent_producer_at_a_steady_rate_is_never_answered_out_of_order(
        gateway, gateway_log, topic):
    before = metric(gateway, OOO)
    sent: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    handles = []
    # linger 0 and 5 requests per partition in flight: the most overtaking there can be
    with Producer(gateway.url, linger_ms=0, max_in_flight=5) as producer:
        t0 = time.perf_counter()
        for n in range(3000):  # 3,000 records/s for about a second, over 3 partitions
            time.sleep(max(0.0, t0 + n / 3000 - time.perf_counter()))
            value = b"r-%d" % n
            sent[n % 3].append(value)
            handles.append(producer.send(topic, value, partition=n % 3))
        metas = [h.result(timeout=60) for h in handles]
        assert producer.records_failed == 0
    assert metric(gateway, OOO) == before
    for p in range(3):  # every record once, in send order
        rows = gateway_log.partition(topic, p).read_table(0).to_pylist()
        assert [r["value"] for r in rows] == sent[p]
        assert sorted(m.offset for m in metas if m.partition == p) == list(range(len(sent[p])))


def test_a_batch_ahead_of_its_predecessor_waits_for_it(gateway, gateway_log, topic):
    before = metric(gateway, OOO)
    path = f"/topics/{topic}/partitions/1?producer_id=4242&producer_epoch=0&sequence=%d"
    body = {"records": [{"value": i} for i in range(5)]}
    answers = {}

    def post(seq: int) -> None:
        answers[seq] = gateway.request("POST", path % seq, body=body)

    later = threading.Thread(target=post, args=(5,))
    later.start()  # sequence 5 arrives first ...
    time.sleep(0.1)
    post(0)  # ... and is accepted once sequence 0 is
    later.join(30)
    assert answers[0][0] == answers[5][0] == 200, answers
    assert answers[0][1]["offsets"][0]["offset"] == 0
    assert answers[5][1]["offsets"][0]["offset"] == 5
    assert gateway_log.partition(topic, 1).high_watermark() == 10
    assert metric(gateway, OOO) == before


def test_a_gap_never_filled_is_refused_after_the_hold_and_counted(gateway, topic):
    before = metric(gateway, OOO)
    path = f"/topics/{topic}/partitions/0?producer_id=4343&producer_epoch=0&sequence=%d"
    body = {"records": [{"value": 1}]}
    assert gateway.request("POST", path % 0, body=body)[0] == 200
    t0 = time.perf_counter()
    status, out, _ = gateway.request("POST", path % 7, body=body)
    assert status == 409 and out["error"] == "out_of_order_sequence"
    assert (out["expected_sequence"], out["sequence"]) == (1, 7)
    assert time.perf_counter() - t0 >= SEQUENCE_HOLD_S * 0.9
    # a sequence already passed (an overlap, not a retry) is refused at once, counted too
    t0 = time.perf_counter()
    assert gateway.request("POST", path % 0, body={"records": [{"value": 1}] * 2})[0] == 409
    assert time.perf_counter() - t0 < SEQUENCE_HOLD_S
    assert metric(gateway, OOO) == before + 2


def test_group_commit_lone_requests_flush_alone_concurrent_ones_together(gateway, topic):
    path = f"/topics/{topic}/partitions/2"
    body = {"records": [{"value": 1}]}
    flushes = metric(gateway, FLUSHES)
    for _ in range(10):  # one at a time: each is flushed on its own, none waits for more
        assert gateway.request("POST", path, body=body)[0] == 200
    assert metric(gateway, FLUSHES) - flushes == 10
    flushes = metric(gateway, FLUSHES)
    threads = [threading.Thread(target=gateway.request, args=("POST", path), kwargs={"body": body})
               for _ in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert metric(gateway, FLUSHES) - flushes < 64  # arrivals during a flush went together
