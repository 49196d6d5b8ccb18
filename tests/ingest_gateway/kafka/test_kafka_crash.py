"""SIGKILL the gateway while unmodified confluent-kafka produces to its Kafka listener
(idempotent, acks=all), restart it on the same ports, and let the producer carry on.

Every record the client saw acknowledged is in the log exactly once, at the offset it
was acknowledged with, and each partition's offsets stay consecutive: the producer
state that makes retries safe lives in the manifests, so a retry that crossed the
kill is recognised by the restarted gateway (or, KIP-360, the producer is told to bump
its epoch and its sequence starts again without a gap or a duplicate)."""

from __future__ import annotations

import threading

import pytest

from jobs.gateway_process import wait_for
from log_layout import open_log
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess

ck = pytest.importorskip("confluent_kafka")

TOPIC, PARTITIONS, RECORDS, KILLS, TIMEOUT = "crash", 3, 20_000, 3, 120


def test_acknowledged_records_survive_sigkill_exactly_once(tmp_path):
    url = f"file://{tmp_path / 'store'}"
    lg = open_log(url)
    lg.create_topic(TOPIC, {"partitions": PARTITIONS})
    gw = KafkaGatewayProcess(url, settings={"store.fsync": "true", "gateway.linger.ms": "2"},
                             log_path=str(tmp_path / "gateway.log"))
    gw.start()
    acked: dict[int, tuple[int, int]] = {}   # record -> (partition, offset)
    failed: list = []
    lock = threading.Lock()

    def on_delivery(err, msg):
        with lock:
            if err is not None:
                failed.append(err)
            else:
                acked[int(msg.value())] = (msg.partition(), msg.offset())

    def acknowledged_past(n: int) -> bool:
        p.poll(0.01)  # serves the delivery callbacks
        return len(acked) > n

    p = ck.Producer({"bootstrap.servers": gw.bootstrap, "enable.idempotence": True,
                     "acks": "all", "linger.ms": 2, "batch.num.messages": 200,
                     "delivery.timeout.ms": 90_000, "retry.backoff.ms": 20,
                     "reconnect.backoff.max.ms": 200})
    try:
        for k in range(1, KILLS + 2):
            part = RECORDS * k // (KILLS + 1)
            for i in range(RECORDS * (k - 1) // (KILLS + 1), part):
                while True:
                    try:
                        p.produce(TOPIC, value=b"%08d" % i, key=b"k%d" % (i % 31),
                                  on_delivery=on_delivery)
                        break
                    except BufferError:  # the client's queue is full: let it drain
                        p.poll(0.05)
            if k <= KILLS:
                # kill once some of this share is acknowledged and more is in flight
                wait_for(lambda: acknowledged_past(RECORDS * (k - 1) // (KILLS + 1) + 200),
                         timeout=TIMEOUT, what=f"acknowledgements before kill {k}")
                gw.restart()  # SIGKILL, then a fresh gateway on the same ports
        assert p.flush(TIMEOUT) == 0
    finally:
        gw.stop()
        gw.kill()
    assert failed == [] and len(acked) == RECORDS
    seen = set()
    for part in range(PARTITIONS):
        table = lg.partition(TOPIC, part).read_table(0)
        offsets = table.column("offset").to_pylist()
        assert offsets == list(range(len(offsets)))       # consecutive from 0
        values = table.column("value").to_pylist()
        assert len(values) == len(set(values))            # nothing written twice
        seen.update(values)
        for i, (q, off) in acked.items():
            if q == part:
                assert values[off] == b"%08d" % i         # where it was acknowledged
    assert seen == {b"%08d" % i for i in range(RECORDS)}
