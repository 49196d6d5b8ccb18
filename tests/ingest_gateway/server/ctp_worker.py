"""A consume-transform-produce worker, for the crash tests (``test_transactions_crash``).

``python -m tests.ingest_gateway.server.ctp_worker <gateway url> <input topic> <input partitions>
<output topic> <output partitions> <group> <transactional id>``: Kafka's exactly-once
loop with the real clients -- a read_committed Consumer of the group (assigned every
input partition, resuming at the group's committed offsets) and a Producer with the
transactional id: poll a batch, begin, send each record's :func:`transform`, send the
consumer's positions to the transaction, commit. It exits 0 once it has consumed
the input to the end it found at start.

``CTP_CRASH_AT=<step>@<round>`` makes it SIGKILL itself in that round (from 0) of the
loop, after printing ``dying at <step> <round>``:

- ``poll``: a batch polled, no transaction begun;
- ``send``: the batch's records sent and acknowledged (the transaction Ongoing);
- ``offsets``: the consumer's positions sent to the transaction too;
- ``commit-sent``: the commit request sent to the gateway, its answer not awaited;
- ``commit``: the transaction committed.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import sys
from urllib.parse import urlsplit

from ingest_gateway.client import Consumer, Producer

CRASH_ENV = "CTP_CRASH_AT"
STEPS = ("poll", "send", "offsets", "commit-sent", "commit")
#: records per transaction at most
BATCH = 7


def transform(value: bytes) -> bytes:
    """The worker's transformation of one record's value."""
    return b"out-" + value[::-1]


def output_partition(partition: int, offset: int, out_partitions: int) -> int:
    """Where a record's output goes: spread, so one transaction spans several partitions."""
    return (partition + offset) % out_partitions


def _die(step: str, round_: int) -> None:
    print(f"dying at {step} {round_}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def _at(step: str, round_: int, crash_at: str) -> None:
    if crash_at == f"{step}@{round_}":
        _die(step, round_)


def _send_commit_and_die(url: str, producer: Producer, round_: int) -> None:
    """POST the commit as the Producer would, then die before the answer comes."""
    address = urlsplit(url)
    conn = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    body = json.dumps({"producer_id": producer.producer_id,
                       "producer_epoch": producer.producer_epoch})
    conn.request("POST", f"/v3/transactions/{producer.transactional_id}:commit", body=body,
                 headers={"Content-Type": "application/json"})  # sent in full on return
    _die("commit-sent", round_)


def run(url: str, in_topic: str, in_partitions: int, out_topic: str, out_partitions: int,
        group: str, tid: str, crash_at: str) -> None:
    tps = [(in_topic, p) for p in range(in_partitions)]
    with Consumer(gateway=url, group_id=group, enable_auto_commit=False,
                  isolation_level="read_committed", auto_offset_reset="earliest",
                  fetch_max_wait_ms=50) as consumer, \
            Producer(url, transactional_id=tid, linger_ms=1) as producer:
        producer.init_transactions()  # fences a dead predecessor, ends its transaction
        consumer.assign(tps)
        for tp in tps:  # resume where the last committed transaction left off
            consumer.seek(tp, consumer.committed(tp) or 0)
        ends = {tp: consumer.watermarks(tp)[1] for tp in tps}
        round_ = 0
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            records = consumer.poll(timeout=1.0, max_records=BATCH)
            if not records:
                continue
            _at("poll", round_, crash_at)
            producer.begin_transaction()
            for r in records:
                producer.send(out_topic, transform(r.value),
                              partition=output_partition(r.partition, r.offset, out_partitions))
            producer.flush()
            _at("send", round_, crash_at)
            producer.send_offsets_to_transaction(
                {tp: consumer.position(tp) for tp in tps}, group)
            _at("offsets", round_, crash_at)
            if crash_at == f"commit-sent@{round_}":
                _send_commit_and_die(url, producer, round_)
            producer.commit_transaction()
            _at("commit", round_, crash_at)
            round_ += 1


if __name__ == "__main__":
    u, it, ip, ot, op, g, t = sys.argv[1:8]
    run(u, it, int(ip), ot, int(op), g, t, os.environ.get(CRASH_ENV, ""))
