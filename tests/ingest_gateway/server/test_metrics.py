"""The gateway's metrics and logs, against a real gateway subprocess over sockets: each
metric read from ``/metrics`` before and after what should move it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from jobs.gateway_process import ROOT, GatewayProcess, wait_for
from log_layout import open_log
from tests.ingest_gateway.conftest import on_local_store

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


class Client:
    def __init__(self, url: str):
        self.url = url
        self.pool = urllib3.PoolManager(retries=False, timeout=30)

    def request(self, method: str, path: str, doc=None, content_type="application/json",
                accept="application/json") -> urllib3.BaseHTTPResponse:
        body = None if doc is None else json.dumps(doc).encode()
        return self.pool.request(method, self.url + path, body=body,
                                 headers={"Content-Type": content_type, "Accept": accept})

    def ok(self, method: str, path: str, doc=None, **kw) -> dict:
        r = self.request(method, path, doc, **kw)
        assert r.status in (200, 204), (path, r.status, r.data[:300])
        return json.loads(r.data) if r.data else {}

    def metrics(self) -> dict[tuple[str, tuple], float]:
        """Every sample of /metrics: {(name, sorted label pairs): value}."""
        text = self.pool.request("GET", self.url + "/metrics").data.decode()
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out


def value(m: dict, name: str, **labels) -> float:
    return m.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))), 0.0)


@pytest.fixture(scope="module")
def gw(gateway_store):
    """A gateway on each backend of tests/ingest_gateway/conftest.py (the store-read
    metrics read the store)."""
    url, options = gateway_store
    log = open_log(url, storage_options=options)
    log.create_topic("m", {"partitions": 2})
    log.create_topic("clicks", {"partitions": 4})
    with GatewayProcess(url, options) as g:
        yield g


@pytest.fixture(scope="module")
def client(gw):
    return Client(gw.url)


def produce(client: Client, n: int, partition: int = 0, topic: str = "m") -> int:
    """``n`` records to ``topic``-``partition`` in one request; returns the next offset."""
    doc = {"records": [{"key": f"k{i}", "value": {"i": i}} for i in range(n)]}
    got = client.ok("POST", f"/topics/{topic}/partitions/{partition}", doc,
                    content_type=JSON_V2)
    return got["offsets"][-1]["offset"] + 1


@on_local_store
def test_requests_are_counted_and_timed_per_request_type_and_status(client):
    before = client.metrics()
    for _ in range(3):
        produce(client, 2)
    assert client.request("POST", "/topics/nope", {"records": [{"value": 1}]},
                          content_type=JSON_V2).status == 404
    client.ok("GET", "/topics/m/partitions/0/offsets")
    client.ok("GET", "/groups")
    after = client.metrics()
    assert value(after, "sparklog_gateway_requests_total", request="Produce", status=200) - \
        value(before, "sparklog_gateway_requests_total", request="Produce", status=200) == 3
    assert value(after, "sparklog_gateway_requests_total", request="Produce", status=404) - \
        value(before, "sparklog_gateway_requests_total", request="Produce", status=404) == 1
    assert value(after, "sparklog_gateway_requests_total", request="ListOffsets", status=200) \
        - value(before, "sparklog_gateway_requests_total", request="ListOffsets", status=200) == 1
    assert value(after, "sparklog_gateway_requests_total", request="ListGroups", status=200) \
        - value(before, "sparklog_gateway_requests_total", request="ListGroups", status=200) == 1
    # the histogram: 4 more produce observations, each under its largest bucket
    count = value(after, "sparklog_gateway_request_seconds_count", request="Produce") - \
        value(before, "sparklog_gateway_request_seconds_count", request="Produce")
    assert count == 4
    assert value(after, "sparklog_gateway_request_seconds_sum", request="Produce") > \
        value(before, "sparklog_gateway_request_seconds_sum", request="Produce")
    assert value(after, "sparklog_gateway_request_seconds_bucket", request="Produce",
                 le="30.0") >= 4


@on_local_store
def test_records_and_bytes_out_count_what_fetches_answer(client):
    end = produce(client, 5, partition=1)
    before = client.metrics()
    got = client.ok("GET", f"/topics/m/partitions/1/messages?offset={end - 5}&count=5",
                    accept=BINARY_V2)
    assert len(got) == 5
    client.ok("GET", f"/topics/m/partitions/1/messages?offset={end - 2}&count=10",
              accept=BINARY_V2)
    after = client.metrics()
    assert value(after, "sparklog_gateway_records_out_total", topic="m") - \
        value(before, "sparklog_gateway_records_out_total", topic="m") == 7
    assert value(after, "sparklog_gateway_bytes_out_total", topic="m") > \
        value(before, "sparklog_gateway_bytes_out_total", topic="m")
    assert value(after, "sparklog_gateway_requests_total", request="Fetch", status=200) - \
        value(before, "sparklog_gateway_requests_total", request="Fetch", status=200) == 2


def test_partition_log_start_end_size_and_segments(client):
    end = produce(client, 4, partition=0)
    m = client.metrics()
    assert value(m, "sparklog_log_end_offset", topic="m", partition=0) == end
    assert value(m, "sparklog_log_start_offset", topic="m", partition=0) == 0
    size = value(m, "sparklog_log_size_bytes", topic="m", partition=0)
    segments = value(m, "sparklog_log_segments", topic="m", partition=0)
    assert size > 0 and segments >= 1
    end = produce(client, 4, partition=0)
    m = client.metrics()
    assert value(m, "sparklog_log_end_offset", topic="m", partition=0) == end
    assert value(m, "sparklog_log_size_bytes", topic="m", partition=0) > size
    assert value(m, "sparklog_log_segments", topic="m", partition=0) == segments + 1


@on_local_store
def test_consumer_lag_per_group_and_partition_and_rebalances(client):
    ends = [produce(client, 3, partition=p) for p in (0, 1)]
    a = client.ok("POST", "/groups/lagging/members", {"topics": ["m"],
                                                      "session_timeout_ms": 600_000})
    m = client.metrics()
    assert value(m, "sparklog_gateway_group_rebalances_total", group="lagging") == 1
    client.ok("POST", "/groups/lagging/offsets", {
        "member_id": a["member_id"], "generation": a["generation"],
        "offsets": [{"topic": "m", "partition": 0, "offset": ends[0] - 2},
                    {"topic": "m", "partition": 1, "offset": ends[1]}]})
    m = client.metrics()
    assert value(m, "sparklog_consumergroup_lag", group="lagging", topic="m", partition=0) == 2
    assert value(m, "sparklog_consumergroup_lag", group="lagging", topic="m", partition=1) == 0
    assert value(m, "sparklog_consumergroup_current_offset", group="lagging", topic="m",
                 partition=0) == ends[0] - 2
    assert value(m, "sparklog_consumergroup_members", group="lagging") == 1
    produce(client, 5, partition=1)
    m = client.metrics()
    assert value(m, "sparklog_consumergroup_lag", group="lagging", topic="m", partition=1) == 5
    # a second member: the first rejoins, generation 2 completes
    b = client.ok("POST", "/groups/lagging/members", {"topics": ["m"],
                                                      "session_timeout_ms": 600_000})
    hb = client.ok("POST", f"/groups/lagging/members/{a['member_id']}/heartbeat",
                   {"generation": a["generation"]})
    assert hb["rebalance"]
    client.ok("POST", "/groups/lagging/members", {"topics": ["m"], "member_id": a["member_id"],
                                                  "session_timeout_ms": 600_000})
    m = client.metrics()
    assert value(m, "sparklog_gateway_group_rebalances_total", group="lagging") == 2
    assert value(m, "sparklog_consumergroup_members", group="lagging") == 2
    for member in (a, b):
        assert client.request("DELETE", f"/groups/lagging/members/{member['member_id']}"
                              ).status == 204


@on_local_store
def test_open_connections_gauge_follows_connections(client, gw):
    def connections() -> float:
        return value(client.metrics(), "sparklog_gateway_connections")

    base = connections()
    port = int(gw.url.rsplit(":", 1)[1])
    socks = []
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        socks.append(s)
    assert connections() == base + 3
    for s in socks:
        s.close()
    wait_for(lambda: connections() == base, timeout=20, what="closed connections to be gone")


@on_local_store
def test_readme_keyed_produce_counts_no_out_of_order_sequence(client, gw):
    """The README's ``seq 1 100000 | sed 's/^/user-1:/' | sparklog produce clicks
    --key-separator :`` once added 28-40 out_of_order_sequence to errors_total: the
    idempotent Producer sends up to 5 batches of a partition at once over several
    connections, so one could arrive before its predecessor and was refused (then
    retried, so the data was right). The gateway now holds such a batch until its
    predecessor is in; nothing is refused, nothing counted."""
    before = client.metrics()
    lines = "".join(f"user-1:{i}\n" for i in range(1, 100_001)).encode()
    subprocess.run([sys.executable, "-m", "jobs.cli", "produce", "clicks", "--key-separator",
                    ":", "--bootstrap-server", gw.url], input=lines, check=True,
                   capture_output=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    after = client.metrics()
    assert value(after, "sparklog_gateway_records_in_total", topic="clicks") - \
        value(before, "sparklog_gateway_records_in_total", topic="clicks") == 100_000
    for code in ("out_of_order_sequence", "duplicate_sequence"):
        assert value(after, "sparklog_gateway_errors_total", code=code) == \
            value(before, "sparklog_gateway_errors_total", code=code)
    assert value(after, "sparklog_gateway_out_of_order_sequence_total") == \
        value(before, "sparklog_gateway_out_of_order_sequence_total")


def test_maintenance_runs_and_bytes_reclaimed(tmp_path):
    store = str(tmp_path / "store")
    log = open_log(store)
    log.create_topic("kv", {"partitions": 1, "cleanup.policy": "compact",
                            "min.cleanable.dirty.ratio": 0.01})
    with GatewayProcess(store) as g:
        c = Client(g.url)
        for _ in range(6):  # six segments of the same ten keys
            c.ok("POST", "/topics/kv/partitions/0",
                 {"records": [{"key": f"k{i}", "value": "x" * 200} for i in range(10)]},
                 content_type=JSON_V2)
        m = c.metrics()
        assert value(m, "sparklog_maintenance_runs_total") == 0
        size = value(m, "sparklog_log_size_bytes", topic="kv", partition=0)
    subprocess.run([sys.executable, "-m", "jobs.cli", "--store", store, "maintain",
                    "--no-spark", "--force"], check=True, capture_output=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": ROOT})
    with GatewayProcess(store) as g:  # a new gateway: the totals are cached for 30 s
        m = Client(g.url).metrics()
        assert value(m, "sparklog_maintenance_runs_total") == 1
        reclaimed = value(m, "sparklog_maintenance_bytes_reclaimed_total")
        after = value(m, "sparklog_log_size_bytes", topic="kv", partition=0)
        assert reclaimed > 0 and after < size
        assert reclaimed == pytest.approx(size - after, rel=0.01)


def read_log(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def test_json_logs_start_up_access_lines_and_group_events(tmp_path):
    store = str(tmp_path / "store")
    open_log(store).create_topic("j", {"partitions": 1})
    path = str(tmp_path / "gw.log")
    with GatewayProcess(store, settings={"gateway.log.format": "json",
                                         "gateway.access.log": "true"}, log_path=path) as g:
        c = Client(g.url)
        c.ok("POST", "/topics/j", {"records": [{"value": 1}]}, content_type=JSON_V2)
        m = c.ok("POST", "/groups/jg/members", {"topics": ["j"]})
        c.request("DELETE", f"/groups/jg/members/{m['member_id']}")
        c.request("GET", "/topics/j/partitions/0/messages?offset=0&count=1%0AFORGED",
                  accept=BINARY_V2)

        def lines() -> list[dict]:
            return [json.loads(x) for x in read_log(path) if x.startswith("{")]
        wait_for(lambda: any(x.get("request") == "LeaveGroup" for x in lines()), timeout=20,
                 what="the leave's access line")
    docs = lines()
    assert all({"ts", "level", "logger", "message"} <= d.keys() for d in docs)
    start = [d for d in docs if "listening on" in d["message"]]
    assert start and store in start[0]["message"] and g.url.replace("http://", "") in \
        start[0]["message"] and start[0]["level"] == "INFO"
    access = [d for d in docs if d["logger"] == "sparklog.access"]
    produce_line = next(d for d in access if d["request"] == "Produce")
    assert produce_line["method"] == "POST" and produce_line["path"] == "/topics/j"
    assert produce_line["status"] == 200 and produce_line["bytes"] > 0
    assert produce_line["duration_ms"] > 0
    forged = next(d for d in access if d["request"] == "Fetch")
    assert "%0AFORGED" in forged["path"]  # as sent: no second line can be forged
    groups = [d["message"] for d in docs if d["logger"] == "sparklog.groups"]
    assert any("joined" in x for x in groups)
    assert any("rebalanced to generation 1" in x for x in groups)
    assert any("left or expired" in x for x in groups)


def test_access_log_is_off_by_default_and_text_is_the_default_format(tmp_path):
    store = str(tmp_path / "store")
    open_log(store).create_topic("q", {"partitions": 1})
    path = str(tmp_path / "gw.log")
    with GatewayProcess(store, log_path=path) as g:
        c = Client(g.url)
        for _ in range(3):
            c.ok("POST", "/topics/q", {"records": [{"value": 1}]}, content_type=JSON_V2)
        # the requests were served (counted), and no access line was written
        assert value(c.metrics(), "sparklog_gateway_requests_total", request="Produce",
                     status=200) == 3
    text = read_log(path)
    assert any("INFO sparklog.gateway: listening on" in x and "access log off" in x
               and "hot tier off (gateway.hot.enable)" in x  # off on a local store
               for x in text)
    assert not any("sparklog.access" in x for x in text)
    assert not any(x.startswith("{") for x in text)


def test_bad_log_format_fails_at_start_up(tmp_path):
    store = str(tmp_path / "store")
    open_log(store)
    r = subprocess.run([sys.executable, "-m", "jobs.cli", "--store", store, "--set",
                        "gateway.log.format=xml", "gateway", "--port", "1"], cwd=ROOT,
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT},
                       timeout=60)
    assert r.returncode != 0
    assert "gateway.log.format" in r.stderr and "xml" in r.stderr


@on_local_store
def test_the_console_and_ops_routes_have_their_own_request_types(client):
    before = client.metrics()
    assert client.request("GET", "/ui").status == 200
    assert client.request("GET", "/healthz").status == 200
    after = client.metrics()
    assert value(after, "sparklog_gateway_requests_total", request="Console", status=200) - \
        value(before, "sparklog_gateway_requests_total", request="Console", status=200) == 1
    # /metrics itself is counted too: the scrape of `before` is in `after`
    assert value(after, "sparklog_gateway_requests_total", request="Operations", status=200) \
        - value(before, "sparklog_gateway_requests_total", request="Operations", status=200) == 2


def test_log_format_flag_and_start_up_line(tmp_path):
    """``sparklog gateway --log-format json``: the first lines are JSON, and one says where
    the gateway listens (the port given by ``--set``) and which store it uses."""
    import selectors
    import time

    from jobs.gateway_process import free_port

    store = str(tmp_path / "store")
    open_log(store)
    port = free_port()
    # the port by --set: an absent --port must not replace it
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", "--store", store, "--set",
                             f"gateway.port={port}", "gateway", "--log-format", "json"], cwd=ROOT,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONPATH": ROOT})
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + 30
        lines: list[dict] = []
        while not any("listening on" in d["message"] for d in lines):
            assert time.monotonic() < deadline, f"no start-up line in {lines}"
            if sel.select(timeout=1):
                line = proc.stderr.readline()
                assert line, f"the gateway exited: {proc.wait()}"
                lines.append(json.loads(line))
        start = next(d for d in lines if "listening on" in d["message"])
        assert f"http://127.0.0.1:{port}" in start["message"] and store in start["message"]
        assert start["logger"] == "sparklog.gateway" and start["level"] == "INFO"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()


def test_every_route_has_a_request_type():
    """Every route the gateway mounts is counted under a Kafka request type, never
    ``Other`` (kept for paths no route serves), so a new route cannot go uncounted."""
    import re

    from ingest_gateway.http.app import routes
    from ingest_gateway.server.metrics import request_type

    kinds = {}
    for route in routes():
        path = re.sub(r"\{[^}]+\}", "x", route.path)
        for method in route.methods or ():
            if method != "HEAD":
                kinds[(method, route.path)] = request_type(method, path)
    assert "Other" not in kinds.values(), [k for k, v in kinds.items() if v == "Other"]
    assert kinds[("POST", "/topics/{topic}")] == "Produce"
    assert kinds[("GET", "/topics/{topic}/partitions/{partition}/messages")] == "Fetch"
    assert kinds[("POST", "/groups/{group}/members")] == "JoinGroup"
    assert kinds[("DELETE", "/groups/{group}/members/{member}")] == "LeaveGroup"
    assert kinds[("POST", "/groups/{group}/offsets")] == "OffsetCommit"
    assert request_type("GET", "/no/such/route") == "Other"


def test_the_lag_history_is_bounded_least_recently_sampled_first():
    from ingest_gateway.server import metrics

    h = metrics.History([0, 0, 0, 0])
    for i in range(metrics.LAG_GROUPS + 5):
        h.record_lag(f"g{i}", i, now=i)
    assert h.lags("g4") == [] and h.lags("g5") == [(5, 5)]
    h.record_lag("g10", 1, now=2000)  # sampled again: now the most recent
    assert h.lags("g10") == [(10, 10), (2000, 1)]
    h.record_lag("new", 3, now=3000)
    assert h.lags("g5") == [] and h.lags("g6") == [(6, 6)] and h.lags("g10")
