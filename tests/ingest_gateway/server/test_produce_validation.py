"""Everything that could fail a flush is refused when its request is parsed.

A bad record (NaN, 1e400, a lone surrogate, a header key UTF-8 cannot encode)
gets its own 422 and never shares a batch with innocent requests; a compression
bomb gets 413 before it is expanded; deep JSON and out-of-range Arrow
timestamps get a 4xx; a flush that fails after acks=1 answered is counted
(Prometheus) and logged at ERROR. One gateway subprocess on a local store:
``flush.messages=5`` makes a batch flush exactly when five records are in it.
"""

from __future__ import annotations

import json
import re
import uuid
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pytest

from log_layout import open_log
from jobs.gateway_process import GatewayProcess, wait_for

JSON_V2 = "application/vnd.kafka.json.v2+json"
ARROW = "application/vnd.apache.arrow.stream"
MAX_UNCOMPRESSED = 4 * 1024 * 1024
INNOCENTS = 5  # = flush.messages: the innocent requests fill one batch


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return str(tmp_path_factory.mktemp("validation") / "store")


@pytest.fixture(scope="module")
def log_path(tmp_path_factory):
    return str(tmp_path_factory.mktemp("validation-log") / "gateway.log")


@pytest.fixture(scope="module")
def gw(store, log_path):
    # linger.ms is a backstop only: every batch here is flushed by flush.messages. With
    # fsync a flush runs on a flush thread, after an acks=1 answer (without, a small one
    # runs inline, before it: the answer then tells its failure, and no loss is left to count)
    settings = {"store.fsync": "true", "gateway.linger.ms": 60_000,
                "gateway.flush.messages": INNOCENTS,
                "gateway.max.uncompressed.request.size": MAX_UNCOMPRESSED}
    with GatewayProcess(store, settings=settings, log_path=log_path) as g:
        yield g


@pytest.fixture
def topic(store):
    name = f"v-{uuid.uuid4().hex[:10]}"
    open_log(store).create_topic(name, {"partitions": 1})
    return name


def post(gw, topic, body, *, acks="all", content_type=JSON_V2):
    raw = body if isinstance(body, bytes) else body.encode()
    return gw.request("POST", f"/topics/{topic}/partitions/0?acks={acks}", body=raw,
                      content_type=content_type)


def arrow_body(table: pa.Table, compression: str | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema,
                           options=pa.ipc.IpcWriteOptions(compression=compression)) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


# Bodies as a client would send them: json.dumps writes a lone surrogate as "\ud800".
BAD_RECORDS = {
    "header key with a lone surrogate": (
        json.dumps({"records": [{"value": 1, "headers": [{"key": "\ud800", "value": "v"}]}]}),
        42203),
    "header value with a lone surrogate": (
        json.dumps({"records": [{"value": 1, "headers": [{"key": "h", "value": "\udfff"}]}]}),
        42203),
    "key with a lone surrogate": (json.dumps({"records": [{"key": "\udc00", "value": 1}]}), 42201),
    "nested value with a lone surrogate": (
        json.dumps({"records": [{"value": {"a": ["ok", "\ud83d"]}}]}), 42202),
    "value NaN": ('{"records":[{"value":NaN}]}', 42202),
    "value 1e400": ('{"records":[{"value":{"x":1e400}}]}', 42202),
    "key -Infinity": ('{"records":[{"key":-Infinity,"value":1}]}', 42201),
}


@pytest.mark.parametrize("acks", ["all", "1"])
@pytest.mark.parametrize("bad", list(BAD_RECORDS))
def test_a_bad_record_fails_only_its_own_request(gw, store, topic, bad, acks):
    body, code = BAD_RECORDS[bad]
    # Sent first: had it been accepted, it would sit in the open batch the innocent join.
    status, out, _ = post(gw, topic, body, acks="1")
    assert (status, out["error_code"]) == (422, code), out
    innocent = [json.dumps({"records": [{"key": f"k{i}", "value": {"n": i, "s": "é😀"}}]})
                for i in range(INNOCENTS)]
    with ThreadPoolExecutor(INNOCENTS) as pool:
        answers = list(pool.map(lambda b: post(gw, topic, b, acks=acks), innocent))
    assert [a[0] for a in answers] == [200] * INNOCENTS, answers
    plog = open_log(store).partition(topic, 0)
    wait_for(lambda: plog.high_watermark() == INNOCENTS, timeout=30, what="innocent records")
    values = sorted(json.loads(v)["n"] for v in plog.read_table(0).column("value").to_pylist())
    assert values == list(range(INNOCENTS))
    # and the partition stays servable as JSON
    status, got, _ = gw.request("GET", f"/topics/{topic}/partitions/0/messages?offset=0&count=10",
                                headers={"Accept": JSON_V2})
    assert status == 200 and sorted(r["value"]["n"] for r in got) == list(range(INNOCENTS))


def test_a_flush_failure_after_acks_1_is_counted_and_logged(gw, store, topic, log_path):
    records = {"records": [{"value": i} for i in range(INNOCENTS)]}
    assert post(gw, topic, json.dumps(records))[0] == 200  # the gateway now leads topic-0
    open_log(store).partition(topic, 0).claim("another-gateway")  # fences it
    status, out, _ = post(gw, topic, json.dumps(records), acks="1")
    assert status == 200 and len(out["offsets"]) == INNOCENTS  # answered before the flush

    def lost():
        text = gw.request("GET", "/metrics")[1].decode()
        m = re.search(rf'sparklog_gateway_records_lost_total{{topic="{topic}"}} (\S+)', text)
        return m is not None and (m.group(1), text)

    value, text = wait_for(lost, timeout=30, what="the records-lost counter")
    assert float(value) == INNOCENTS
    assert re.search(rf'sparklog_gateway_flush_failures_total{{error="not_leader",'
                     rf'topic="{topic}"}} 1\.0', text), text
    with open(log_path, encoding="utf-8") as f:
        lines = [line for line in f if f"flush of {topic}-0 failed" in line]
    assert len(lines) == 1 and " ERROR " in lines[0] and f"{INNOCENTS} of them" in lines[0]


def test_compression_bombs_are_refused_before_they_expand(gw, topic):
    bomb = pa.table({"value": [b"\0" * (2 * MAX_UNCOMPRESSED)]})
    for compression in ("zstd", "lz4"):
        body = arrow_body(bomb, compression)
        assert len(body) < MAX_UNCOMPRESSED // 100
        status, out, _ = post(gw, topic, body, content_type=ARROW)
        assert status == 413 and out["error"] == "uncompressed_too_large", out
        assert str(MAX_UNCOMPRESSED) in out["message"]
    # a column of type null has no buffers: a billion rows cost 200 bytes to send
    status, out, _ = post(gw, topic, arrow_body(pa.table({"value": pa.nulls(10**9)})),
                          content_type=ARROW)
    assert status == 413 and out["error"] == "uncompressed_too_large", out
    # under the limit, compressed bodies are taken as before
    fine = pa.table({"value": [b"x" * 1000] * 100})
    status, out, _ = post(gw, topic, arrow_body(fine, "zstd"), content_type=ARROW)
    assert status == 200 and out["offsets"][0]["count"] == 100


@pytest.mark.parametrize("depth", [70, 100_000])
def test_deep_json_is_400(gw, topic, depth):
    body = '{"records":[{"value":' + "[" * depth + "]" * depth + "}]}"
    status, out, _ = post(gw, topic, body)
    assert status == 400 and out["error"] == "nesting_too_deep", out


@pytest.mark.parametrize("column", [
    pa.array([2**64 - 1], pa.uint64()),
    pa.array([2**63 - 1], pa.int64()),
    pa.array([-1], pa.int64()),
    pa.array([2**62], pa.timestamp("s", tz="UTC")),
    pa.array([-(2**62)], pa.timestamp("ns")),
], ids=["uint64-max", "int64-max-ms", "negative", "seconds-overflow", "ns-negative"])
def test_arrow_timestamps_out_of_range_are_422(gw, topic, column):
    body = arrow_body(pa.table({"value": [b"v"], "timestamp": column}))
    status, out, _ = post(gw, topic, body, content_type=ARROW)
    assert (status, out["error_code"]) == (422, 42203), out


def test_arrow_nanosecond_timestamps_are_truncated_to_milliseconds(gw, store, topic):
    ns = 1_700_000_000_123_456_789
    body = arrow_body(pa.table({"value": [b"v"], "timestamp": pa.array([ns], pa.timestamp("ns"))}))
    assert post(gw, topic, body, content_type=ARROW, acks="1")[0] == 200
    # one record does not fill a batch (flush.messages=5): fill it with four more
    assert post(gw, topic, json.dumps({"records": [{"value": i} for i in range(4)]}))[0] == 200
    ts = open_log(store).partition(topic, 0).read_table(0).column("timestamp")[:1]
    assert ts.cast(pa.int64()).to_pylist() == [ns // 1_000_000 * 1000]
