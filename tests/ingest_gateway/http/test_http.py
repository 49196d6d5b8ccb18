"""The gateway through real HTTP on 127.0.0.1, on the local and the S3 store.

Each endpoint, each content type, each refusal (nothing partly written), acks,
idempotent retries and a restart with the idempotence state intact.
"""

from __future__ import annotations

import base64
import json
import uuid

import pyarrow as pa
import pytest

from log_layout.partitioner import partition_for_key
from tests.ingest_gateway.conftest import on_local_store

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
ARROW = "application/vnd.apache.arrow.stream"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def arrow_body(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def read_all(log, topic, partition):
    return log.partition(topic, partition).read_table(0).to_pylist()


def hw(log, topic):
    return [p.high_watermark() for p in log.partitions(topic)]


# -- produce: content types ------------------------------------------------------------
@on_local_store
def test_json_v2_produce_routes_by_key_and_commits_before_answering(gateway, gateway_log, topic):
    records = [{"key": f"user-{i}", "value": {"n": i}} for i in range(20)]
    status, body, headers = gateway.request("POST", f"/topics/{topic}", body={"records": records},
                                            content_type=JSON_V2)
    assert status == 200, body
    assert headers["content-type"].startswith("application/vnd.kafka.v2+json")
    offsets = body["offsets"]
    assert len(offsets) == 20
    for rec, off in zip(records, offsets):
        # the same partition Kafka's Java client would pick for the key's bytes
        key_bytes = json.dumps(rec["key"]).encode()
        assert off["partition"] == partition_for_key(key_bytes, 3)
        assert off["error_code"] is None and off["error"] is None
    # acks=all (the default): visible as soon as the answer arrives
    for off, rec in zip(offsets, records):
        row = read_all(gateway_log, topic, off["partition"])[off["offset"]]
        assert json.loads(row["value"]) == rec["value"]
        assert row["key"] == json.dumps(rec["key"]).encode()
    per_partition = {}
    for off in offsets:
        per_partition.setdefault(off["partition"], []).append(off["offset"])
    for p, offs in per_partition.items():
        assert offs == list(range(len(offs)))  # consecutive, in request order


@on_local_store
def test_binary_v2_with_headers_timestamps_and_tombstones(gateway, gateway_log, topic):
    records = [{"key": b64(b"k1"), "value": b64(b"\x00\x01binary"), "timestamp": 1_700_000_000_123,
                "headers": [{"key": "trace", "value": b64(b"abc")}, {"key": "empty", "value": None}]},
               {"key": b64(b"k2"), "value": None}]
    status, body, _ = gateway.request("POST", f"/topics/{topic}/partitions/1",
                                      body={"records": records}, content_type=BINARY_V2)
    assert status == 200, body
    assert [o["partition"] for o in body["offsets"]] == [1, 1]
    rows = read_all(gateway_log, topic, 1)
    assert rows[0]["value"] == b"\x00\x01binary" and rows[0]["key"] == b"k1"
    assert rows[0]["timestamp"].timestamp() * 1000 == pytest.approx(1_700_000_000_123)
    assert rows[0]["headers"] == [{"key": "trace", "value": b"abc"}, {"key": "empty", "value": None}]
    assert rows[1]["value"] is None  # a tombstone


@on_local_store
def test_plain_json_is_json_v2_and_keyless_records_stick_to_one_partition(gateway, gateway_log,
                                                                             topic):
    status, body, _ = gateway.request("POST", f"/topics/{topic}",
                                      body={"records": [{"value": i} for i in range(10)]},
                                      content_type="application/json")
    assert status == 200, body
    assert len({o["partition"] for o in body["offsets"]}) == 1  # sticky per batch
    p = body["offsets"][0]["partition"]
    assert [r["value"] for r in read_all(gateway_log, topic, p)] == [str(i).encode() for i in range(10)]


@on_local_store
def test_arrow_stream_splits_by_partition_column(gateway, gateway_log, topic):
    n = 3000
    table = pa.table({"value": pa.array([b"v%d" % i for i in range(n)]),
                      "key": pa.array([b"k%d" % i for i in range(n)]),
                      "partition": pa.array([i % 3 for i in range(n)], pa.int32()),
                      "timestamp": pa.array([1_000 + i for i in range(n)], pa.int64())})
    status, body, _ = gateway.request("POST", f"/topics/{topic}", body=arrow_body(table),
                                      content_type=ARROW)
    assert status == 200, body
    got = {o["partition"]: o for o in body["offsets"]}
    assert sorted(got) == [0, 1, 2]
    assert all(o["count"] == 1000 and o["base_offset"] == 0 for o in got.values())
    rows = read_all(gateway_log, topic, 2)
    assert [r["value"] for r in rows[:3]] == [b"v2", b"v5", b"v8"]


@on_local_store
def test_arrow_stream_to_one_partition_with_string_columns(gateway, gateway_log, topic):
    table = pa.table({"value": ["a", "b", "c"], "key": ["x", None, "z"]})
    status, body, _ = gateway.request("POST", f"/topics/{topic}/partitions/0",
                                      body=arrow_body(table), content_type=ARROW)
    assert status == 200, body
    assert body["offsets"] == [{"partition": 0, "base_offset": 0, "count": 3, "error_code": None,
                                "error": None}]
    assert [r["key"] for r in read_all(gateway_log, topic, 0)] == [b"x", None, b"z"]


# -- acks -------------------------------------------------------------------------------------
@on_local_store
def test_acks_zero_one_and_all(gateway, gateway_log, topic):
    body = {"records": [{"value": 1}, {"value": 2}]}
    status, out, _ = gateway.request("POST", f"/topics/{topic}/partitions/0?acks=0", body=body)
    assert status == 200 and [o["offset"] for o in out["offsets"]] == [None, None]
    status, out, _ = gateway.request("POST", f"/topics/{topic}/partitions/0?acks=1", body=body)
    assert status == 200 and [o["offset"] for o in out["offsets"]] == [2, 3]
    status, out, _ = gateway.request("POST", f"/topics/{topic}/partitions/0",
                                     body=body, headers={"X-Sparklog-Acks": "all"})
    assert status == 200 and [o["offset"] for o in out["offsets"]] == [4, 5]
    assert gateway_log.partition(topic, 0).high_watermark() == 6
    status, out, _ = gateway.request("POST", f"/topics/{topic}?acks=2", body=body)
    assert status == 400 and out["error"] == "malformed_request"


# -- refusals: typed, with a code, nothing written ------------------------------------------------
@pytest.mark.parametrize("path,body,ctype,status,code", [
    ("/topics/no-such-topic", {"records": [{"value": 1}]}, JSON_V2, 404, 40401),
    ("/topics/bad$name", {"records": [{"value": 1}]}, JSON_V2, 400, 40003),
    ("/topics/{topic}/partitions/7", {"records": [{"value": 1}]}, JSON_V2, 404, 40402),
    ("/topics/{topic}/partitions/x", {"records": [{"value": 1}]}, JSON_V2, 404, 40402),
    ("/topics/{topic}", {"records": [{"value": 1, "partition": 3}]}, JSON_V2, 404, 40402),
    ("/topics/{topic}", b'{"records": [', JSON_V2, 400, 40001),
    ("/topics/{topic}", {"records": []}, JSON_V2, 400, 40001),
    ("/topics/{topic}", {"rec": []}, JSON_V2, 400, 40001),
    ("/topics/{topic}", {"records": [{"value": 1}, {"value": 1, "timestamp": -5}]}, JSON_V2, 400, 40001),
    ("/topics/{topic}", {"records": [{"value": "QQ=="}, {"value": "not base64!"}]}, BINARY_V2, 422, 42202),
    ("/topics/{topic}", {"records": [{"key": 12, "value": "QQ=="}]}, BINARY_V2, 422, 42201),
    ("/topics/{topic}", b"\x00\x01 not arrow", ARROW, 400, 40001),
    ("/topics/{topic}", b"hello", "text/plain", 415, 41501),
    ("/topics/{topic}?producer_id=1", {"records": [{"value": 1}]}, JSON_V2, 400, 40001),
])
@on_local_store
def test_bad_requests_get_a_typed_error_and_write_nothing(gateway, gateway_log, topic, path, body,
                                                           ctype, status, code):
    before = hw(gateway_log, topic)
    got, out, _ = gateway.request("POST", path.format(topic=topic), body=body, content_type=ctype)
    assert got == status, out
    assert out["error_code"] == code and out["message"] and out["error"]
    assert hw(gateway_log, topic) == before


@on_local_store
def test_record_over_max_message_bytes_is_413(gateway, gateway_log):
    name = f"small-{uuid.uuid4().hex[:8]}"
    gateway_log.create_topic(name, {"max.message.bytes": 100})
    ok = {"records": [{"value": b64(b"x" * 50)}]}
    big = {"records": [{"value": b64(b"x" * 50)}, {"value": b64(b"x" * 101)}]}
    assert gateway.request("POST", f"/topics/{name}", body=ok, content_type=BINARY_V2)[0] == 200
    status, out, _ = gateway.request("POST", f"/topics/{name}", body=big, content_type=BINARY_V2)
    assert status == 413 and out["error"] == "record_too_large" and "101" in out["message"]
    assert gateway_log.partition(name, 0).high_watermark() == 1


@on_local_store
def test_keyless_record_on_compacted_topic_is_refused(gateway, gateway_log):
    name = f"compact-{uuid.uuid4().hex[:8]}"
    gateway_log.create_topic(name, {"cleanup.policy": "compact"})
    body = {"records": [{"key": "a", "value": 1}, {"value": 2}]}
    status, out, _ = gateway.request("POST", f"/topics/{name}", body=body)
    assert status == 422 and out["error"] == "missing_key" and "record 1" in out["message"]
    table = pa.table({"value": [b"1"], "key": pa.array([None], pa.binary())})
    status, out, _ = gateway.request("POST", f"/topics/{name}", body=arrow_body(table),
                                     content_type=ARROW)
    assert status == 422 and out["error"] == "missing_key"
    assert gateway_log.partition(name, 0).high_watermark() == 0


@on_local_store
def test_body_over_max_request_size_is_413(gateway, topic):
    """Refused from the Content-Length header alone, before the body is read."""
    import socket

    limit = 104857600  # the default max.request.size
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        s.sendall(f"POST /topics/{topic} HTTP/1.1\r\nHost: x\r\nContent-Type: {JSON_V2}\r\n"
                  f"Content-Length: {limit + 1}\r\n\r\n{{".encode())
        head = b""
        while b"request_too_large" not in head:
            chunk = s.recv(65536)
            if not chunk:
                break
            head += chunk
    head = head.decode()
    assert head.startswith("HTTP/1.1 413") and "request_too_large" in head


# -- idempotence -------------------------------------------------------------------------------------
@on_local_store
def test_retried_batch_is_acknowledged_with_its_offsets_and_written_once(gateway, gateway_log, topic):
    body = {"records": [{"value": i} for i in range(5)]}
    path = f"/topics/{topic}/partitions/2?producer_id=77&producer_epoch=0&sequence=0"
    first = gateway.request("POST", path, body=body)
    again = gateway.request("POST", path, body=body)
    assert first[0] == again[0] == 200
    assert first[1]["offsets"] == again[1]["offsets"]
    assert gateway_log.partition(topic, 2).high_watermark() == 5
    # the next batch continues the sequence; a gap or a stale epoch is refused
    nxt = gateway.request("POST", path.replace("sequence=0", "sequence=5"), body=body)
    assert nxt[0] == 200 and nxt[1]["offsets"][0]["offset"] == 5
    gap = gateway.request("POST", path.replace("sequence=0", "sequence=20"), body=body)
    assert gap[0] == 409 and gap[1]["error"] == "out_of_order_sequence"
    assert gap[1]["expected_sequence"] == 10
    bumped = gateway.request("POST", path.replace("producer_epoch=0", "producer_epoch=1"), body=body)
    assert bumped[0] == 200
    stale = gateway.request("POST", path.replace("sequence=0", "sequence=5"), body=body)
    assert stale[0] == 409 and stale[1]["error"] == "invalid_producer_epoch"
    assert gateway_log.partition(topic, 2).high_watermark() == 15


@on_local_store
def test_retry_before_the_flush_is_not_written_twice(gateway, gateway_log, topic):
    """acks=1 returns before the flush; the retry finds the pending batch."""
    table = pa.table({"value": [b"a", b"b", b"c"]})
    path = f"/topics/{topic}/partitions/1?acks=1&producer_id=99&sequence=0"
    a = gateway.request("POST", path, body=arrow_body(table), content_type=ARROW)
    b = gateway.request("POST", path.replace("acks=1", "acks=all"), body=arrow_body(table),
                        content_type=ARROW)
    assert a[0] == b[0] == 200
    assert a[1]["offsets"][0]["base_offset"] == b[1]["offsets"][0]["base_offset"] == 0
    assert gateway_log.partition(topic, 1).high_watermark() == 3


@on_local_store
def test_multi_partition_idempotent_request_needs_a_sequence_per_partition(gateway, topic):
    body = {"records": [{"value": 1, "partition": 0}, {"value": 2, "partition": 1}]}
    status, out, _ = gateway.request("POST", f"/topics/{topic}?producer_id=5&sequence=0", body=body)
    assert status == 400 and "P:SEQ" in out["message"]
    status, out, _ = gateway.request("POST", f"/topics/{topic}?producer_id=5&sequence=0:0,1:0",
                                     body=body)
    assert status == 200 and [o["offset"] for o in out["offsets"]] == [0, 0]


# -- admin ----------------------------------------------------------------------------------------------
@on_local_store
def test_v3_topic_admin_round_trip(gateway, gateway_log):
    status, clusters, _ = gateway.request("GET", "/v3/clusters")
    assert status == 200 and len(clusters["data"]) == 1
    cid = clusters["data"][0]["cluster_id"]
    assert cid == gateway_log.cluster_id()
    base = f"/v3/clusters/{cid}/topics"
    name = f"admin-{uuid.uuid4().hex[:8]}"
    status, created, _ = gateway.request("POST", base, body={
        "topic_name": name, "partitions_count": 2,
        "configs": [{"name": "retention.ms", "value": "3600000"}]})
    assert status == 201, created
    assert created["partitions_count"] == 2
    assert created["configs"]["related"] == f"{gateway.url}{base}/{name}/configs"  # REST Proxy
    status, config, _ = gateway.request("GET", f"{base}/{name}/configs/retention.ms")
    assert status == 200 and config["value"] == "3600000" and config["is_default"] is False
    assert gateway.request("POST", base, body={"topic_name": name})[1]["error"] == "topic_exists"
    bad = gateway.request("POST", base, body={"topic_name": "x", "configs": [
        {"name": "retention.ms", "value": "soon"}]})
    assert bad[0] == 400 and bad[1]["error"] == "invalid_config"
    assert gateway.request("GET", "/v3/clusters/nope/topics")[0] == 404
    status, listing, _ = gateway.request("GET", base)
    assert name in [t["topic_name"] for t in listing["data"]]
    status, configs, _ = gateway.request("GET", f"{base}/{name}/configs")
    assert {c["name"]: c["value"] for c in configs["data"]}["retention.ms"] == "3600000"
    status, _, _ = gateway.request("POST", f"{base}/{name}/configs:alter", body={"data": [
        {"name": "retention.ms", "value": "60000"}, {"name": "cleanup.policy", "operation": "SET",
                                                     "value": "compact"}]})
    assert status == 204
    assert gateway_log.topic(name, refresh=True).config.retention_ms == 60000
    gateway.request("POST", f"/topics/{name}/partitions/1", body={"records": [{"key": 1, "value": 2}]})
    status, parts, _ = gateway.request("GET", f"{base}/{name}/partitions")
    p1 = parts["data"][1]
    assert p1["high_watermark"] == 1 and p1["segments"] == 1 and p1["bytes"] > 0
    assert p1["log_start_offset"] == 0 and p1["leader_gateway"].startswith("gateway-")
    assert p1["leader"] == {"related": f"{gateway.url}{base}/{name}/partitions/1/replicas/0"}
    status, desc, _ = gateway.request("GET", f"{base}/{name}")
    assert status == 200 and desc["partitions"]["related"].endswith(f"{name}/partitions")
    assert gateway.request("DELETE", f"{base}/{name}")[0] == 204
    assert gateway.request("GET", f"{base}/{name}")[0] == 404
    assert name not in gateway_log.topics()


@on_local_store
def test_v2_topic_reads(gateway, topic):
    status, names, _ = gateway.request("GET", "/topics")
    assert status == 200 and topic in names
    status, desc, _ = gateway.request("GET", f"/topics/{topic}")
    assert desc["name"] == topic and len(desc["partitions"]) == 3
    assert desc["configs"]["cleanup.policy"] == "delete"
    status, parts, _ = gateway.request("GET", f"/topics/{topic}/partitions")
    assert [p["partition"] for p in parts] == [0, 1, 2]
    assert all({"log_start_offset", "high_watermark", "bytes", "segments"} <= set(p) for p in parts)
    # REST Proxy's shape: an int broker id, never null or a string (issue 16)
    assert all(p["leader"] == 0 and p["replicas"] == [{"broker": 0, "leader": True,
                                                       "in_sync": True}] for p in parts)
    status, one, _ = gateway.request("GET", f"/topics/{topic}/partitions/2")
    assert status == 200 and one["partition"] == 2 and one["leader"] == 0
    assert gateway.request("GET", f"/topics/{topic}/partitions/3")[1]["error_code"] == 40402
    assert gateway.request("GET", "/topics/nothing-here")[1]["error_code"] == 40401


@on_local_store
def test_health_readiness_metrics_openapi_and_producer_ids(gateway, topic):
    assert gateway.request("GET", "/healthz")[0] == 200
    assert gateway.request("GET", "/readyz")[0] == 200
    gateway.request("POST", f"/topics/{topic}", body={"records": [{"value": 1}]})
    gateway.request("POST", "/topics/absent", body={"records": [{"value": 1}]})
    status, text, _ = gateway.request("GET", "/metrics")
    text = text.decode()
    assert f'sparklog_gateway_records_in_total{{topic="{topic}"}}' in text
    assert 'sparklog_gateway_errors_total{code="unknown_topic"}' in text
    assert "sparklog_gateway_flush_seconds_bucket" in text
    assert "sparklog_gateway_buffer_bytes" in text
    status, doc, _ = gateway.request("GET", "/openapi.json")
    assert doc["openapi"].startswith("3.") and "/topics/{topic}" in doc["paths"]
    status, pid, _ = gateway.request("POST", "/v3/producers")
    assert 0 <= pid["producer_id"] < 2**63 and pid["producer_epoch"] == 0
    assert gateway.request("GET", "/no/such/route")[1]["error"] == "not_found"


def test_concurrent_first_requests_claim_each_partition_once(gateway, gateway_log):
    """Regression: a request arriving while the first claim completed claimed again,
    fencing the gateway's own writer."""
    from concurrent.futures import ThreadPoolExecutor

    name = f"burst-{uuid.uuid4().hex[:8]}"
    gateway_log.create_topic(name, {"partitions": 2})

    def post(i):
        return gateway.request("POST", f"/topics/{name}/partitions/{i % 2}?acks=1",
                               body={"records": [{"value": i}]})[0]

    with ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(post, range(200)))
    assert statuses == [200] * 200
    status, parts, _ = gateway.request("GET", f"/topics/{name}/partitions")
    assert [p["leader_epoch"] for p in parts] == [1, 1]


def test_a_fenced_gateway_stops_writing_the_partition(gateway, gateway_log, topic):
    body = {"records": [{"value": 1}]}
    assert gateway.request("POST", f"/topics/{topic}/partitions/0", body=body)[0] == 200
    gateway_log.partition(topic, 0).claim("another-gateway")  # bumps the leader epoch
    status, out, _ = gateway.request("POST", f"/topics/{topic}/partitions/0", body=body)
    assert status == 503 and out["error"] == "not_leader" and out["error_code"] == 50301
    status, out, _ = gateway.request("POST", f"/topics/{topic}/partitions/0", body=body)
    assert status == 503 and out["error"] == "not_leader"  # refused up front from now on
    assert gateway_log.partition(topic, 0).high_watermark() == 1
    # other partitions are unaffected
    assert gateway.request("POST", f"/topics/{topic}/partitions/1", body=body)[0] == 200
