"""A gateway stopped while Kafka clients hold connections open (Spark's executors keep
their consumers): the connections end and the log says no error."""

from __future__ import annotations

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess, call, connect


def test_stop_with_open_connections_logs_no_error(tmp_path):
    log_path = tmp_path / "gateway.log"
    gw = KafkaGatewayProcess(f"file://{tmp_path / 'store'}", log_path=str(log_path))
    with gw:
        sockets = [connect(gw) for _ in range(3)]
        for s in sockets:  # each connection served, then left open and idle
            _, answer = call(s, ApiVersionsRequest(client_software_name="t",
                                                   client_software_version="1"), 3)
            assert answer.error_code == 0
        assert gw.stop() in (0, -15)  # SIGTERM: uvicorn re-raises it after a clean stop
    for s in sockets:
        assert s.recv(1) == b""  # closed by the gateway
        s.close()
    text = log_path.read_text()
    assert "flushed and stopped" in text
    assert " ERROR " not in text and "Traceback" not in text, text
