"""SIGKILL the gateway while an idempotent producer sends with acks=all.

Every acknowledged record must be in the log exactly once, at the offset it was
acknowledged with, and each partition's offsets must stay consecutive.
"""

from __future__ import annotations

import threading

import pytest

from ingest_gateway.client import Producer
from log_layout import open_log
from tests.conftest import make_log_url
from jobs.gateway_process import GatewayProcess, wait_for

pytestmark = pytest.mark.slow

RECORDS = 20_000
KILLS = 3


@pytest.mark.parametrize("hot", [False, True], ids=["per-partition", "hot"])
@pytest.mark.parametrize("backend", ["file", "s3", "hdfs"])
def test_acknowledged_records_survive_sigkill_exactly_once(backend, hot, request, tmp_path):
    url, options = make_log_url(backend, request, tmp_path)
    lg = open_log(url, storage_options=options)
    lg.create_topic("crash", {"partitions": 3})
    gw = GatewayProcess(url, options, settings={"store.fsync": "true", "gateway.linger.ms": 2,
                                                "gateway.hot.enable": str(hot).lower()},
                        log_path=str(tmp_path / "gateway.log"))
    gw.start()
    handles = []
    producer = Producer(gw.url, acks="all", linger_ms=2, batch_size=4096, max_in_flight=4,
                        delivery_timeout_ms=90_000, retry_backoff_ms=20)

    def send_all():
        for i in range(RECORDS):
            handles.append(producer.send("crash", b"%08d" % i, key=b"k%d" % (i % 31)))

    sender = threading.Thread(target=send_all)
    try:
        sender.start()
        for k in range(1, KILLS + 1):
            # kill once a further share of the records has been acknowledged
            target = RECORDS * k // (KILLS + 2)
            wait_for(lambda: len(handles) > target and handles[target].done(), timeout=120,
                     what=f"record {target} acknowledged")
            gw.restart()  # SIGKILL, then a fresh gateway on the same port
        sender.join(120)
        producer.flush(timeout=120)
    finally:
        producer.close(timeout=60)
        gw.stop()
        gw.kill()

    metas = [h.result(timeout=1) for h in handles]  # every send was acknowledged
    assert len(metas) == RECORDS
    seen = set()
    for p in range(3):
        table = lg.partition("crash", p).read_table(0)
        offsets = table.column("offset").to_pylist()
        assert offsets == list(range(len(offsets)))  # consecutive from 0
        values = table.column("value").to_pylist()
        assert len(values) == len(set(values))  # nothing written twice
        seen.update(values)
        for i, m in enumerate(metas):
            if m.partition == p:
                assert values[m.offset] == b"%08d" % i
    assert len(seen) == RECORDS
    # each gateway claims a partition when it first writes it, so after the kills the
    # epochs moved on (a gateway killed before touching a partition did not claim it)
    epochs = [p.snapshot().leader_epoch for p in lg.partitions("crash")]
    assert all(2 <= e <= KILLS + 1 for e in epochs), epochs
