"""Restarts, graceful shutdown and back-pressure of a real gateway process."""

from __future__ import annotations

import pyarrow as pa
import pytest

from jobs.gateway_process import GatewayProcess
from tests.ingest_gateway.http.test_http import ARROW, arrow_body


def test_restart_keeps_idempotence_state(gateway, gateway_log, topic):
    body = {"records": [{"value": i} for i in range(5)]}
    path = f"/topics/{topic}/partitions/0?producer_id=4242&sequence=0"
    status, first, _ = gateway.request("POST", path, body=body)
    assert status == 200
    gateway.restart()  # SIGKILL, then a new process that claims the partition again
    status, again, _ = gateway.request("POST", path, body=body)
    assert status == 200 and again["offsets"] == first["offsets"]
    assert gateway_log.partition(topic, 0).high_watermark() == 5
    status, nxt, _ = gateway.request("POST", path.replace("sequence=0", "sequence=5"), body=body)
    assert status == 200 and nxt["offsets"][0]["offset"] == 5
    m = gateway_log.partition(topic, 0).snapshot()
    assert m.leader_epoch == 2 and m.producers[4242].last_sequence == 9


@pytest.fixture
def lingering_gateway(tmp_path):
    """A gateway that would hold batches for a minute and buffers at most 4 KB."""
    from log_layout import open_log

    url = str(tmp_path / "store")
    lg = open_log(url)
    lg.create_topic("slow", {"partitions": 2})
    gw = GatewayProcess(url, settings={"gateway.linger.ms": 60_000, "gateway.buffer.memory": 4096})
    with gw:
        yield gw, lg


def test_graceful_shutdown_flushes_everything_accepted(lingering_gateway):
    gw, lg = lingering_gateway
    for p in (0, 1):
        status, out, _ = gw.request("POST", f"/topics/slow/partitions/{p}?acks=1",
                                    body={"records": [{"value": i} for i in range(3)]})
        assert status == 200 and [o["offset"] for o in out["offsets"]] == [0, 1, 2]
    assert [p.high_watermark() for p in lg.partitions("slow")] == [0, 0]  # still lingering
    assert gw.stop() in (0, -15)  # SIGTERM (uvicorn re-raises it after a clean shutdown)
    assert [p.high_watermark() for p in lg.partitions("slow")] == [3, 3]
    assert [r["value"] for r in lg.partition("slow", 1).read_table(0).to_pylist()] == \
        [b"0", b"1", b"2"]


def test_full_buffer_answers_429_with_retry_after(lingering_gateway):
    gw, lg = lingering_gateway
    table = pa.table({"value": [b"x" * 1000] * 3})
    status, _, _ = gw.request("POST", "/topics/slow/partitions/0?acks=1", body=arrow_body(table),
                              content_type=ARROW)
    assert status == 200
    status, out, headers = gw.request("POST", "/topics/slow/partitions/0?acks=1",
                                      body=arrow_body(table), content_type=ARROW)
    assert status == 429 and out["error"] == "buffer_full" and out["error_code"] == 42901
    assert int(headers["Retry-After"]) >= 1
    status, text, _ = gw.request("GET", "/metrics")
    assert 'sparklog_gateway_errors_total{code="buffer_full"}' in text.decode()
    assert gw.stop() in (0, -15)
    assert lg.partition("slow", 0).high_watermark() == 3  # the accepted request, once


def test_auto_create_topics_enable(tmp_path):
    from log_layout import open_log

    url = str(tmp_path / "store")
    with GatewayProcess(url, settings={"gateway.auto.create.topics.enable": "true",
                                       "topic.partitions": 2}) as gw:
        status, out, _ = gw.request("POST", "/topics/fresh", body={"records": [{"value": 1}]})
        assert status == 200, out
        assert gw.request("POST", "/topics/bad$name", body={"records": [{"value": 1}]})[0] == 400
    info = open_log(url).topic("fresh")
    assert info.partitions == 2  # the topic.* defaults from the settings


def test_flush_messages_and_batch_size_flush_before_linger(tmp_path):
    """With a one-minute linger, only the count and size thresholds can flush."""
    from log_layout import open_log

    url = str(tmp_path / "store")
    lg = open_log(url)
    lg.create_topic("th", {"partitions": 2})
    with GatewayProcess(url, settings={"gateway.linger.ms": 60_000, "gateway.flush.messages": 3,
                                       "gateway.batch.size": 2000}) as gw:
        status, out, _ = gw.request("POST", "/topics/th/partitions/0",  # acks=all
                                    body={"records": [{"value": i} for i in range(3)]})
        assert status == 200 and [o["offset"] for o in out["offsets"]] == [0, 1, 2]
        table = pa.table({"value": [b"x" * 3000]})
        status, out, _ = gw.request("POST", "/topics/th/partitions/1", body=arrow_body(table),
                                    content_type=ARROW)
        assert status == 200 and out["offsets"][0]["base_offset"] == 0
        assert [p.high_watermark() for p in lg.partitions("th")] == [3, 1]
        assert [len(p.snapshot().segments) for p in lg.partitions("th")] == [1, 1]
