"""The gateway's HTTP edges against a hostile client, over real sockets.

Body limits on every route (declared and chunked), JSON nesting, strict
numbers and topic names, the store's reserved names, slow clients and the cap
on connections. Each test talks raw HTTP/1.1 where a well-behaved client
library would hide the attack (a body that never ends, half a request).
"""

from __future__ import annotations

import json
import socket
import uuid
from urllib.parse import quote

import pytest

from jobs.gateway_process import GatewayProcess, wait_for

CONTROL_LIMIT = 256 * 1024
READ_TIMEOUT_MS = 1500
MAX_CONNECTIONS = 48
SAFETY_S = 30  # a bound that only a broken gateway reaches


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    """A gateway with a small control-body limit (256 KiB: tests stay fast, and bodies
    over 64 KiB take the parse-in-a-thread path)."""
    store = str(tmp_path_factory.mktemp("hostile") / "store")
    with GatewayProcess(store, settings={"gateway.max.control.request.size": CONTROL_LIMIT}) as g:
        yield g


@pytest.fixture(scope="module")
def edge_gw(tmp_path_factory):
    """A gateway with a short read timeout and a small cap on connections."""
    store = str(tmp_path_factory.mktemp("edges") / "store")
    settings = {"gateway.request.read.timeout.ms": READ_TIMEOUT_MS,
                "gateway.max.connections": MAX_CONNECTIONS}
    with GatewayProcess(store, settings=settings) as g:
        yield g


@pytest.fixture(scope="module")
def cluster(gw):
    status, body, _ = gw.request("GET", "/v3/clusters")
    assert status == 200, body
    return body["data"][0]["cluster_id"]


@pytest.fixture
def topic(gw, cluster):
    name = f"t-{uuid.uuid4().hex[:10]}"
    status, body, _ = gw.request("POST", f"/v3/clusters/{cluster}/topics",
                                 body={"topic_name": name, "partitions_count": 2})
    assert status == 201, body
    return name


# -- raw HTTP ------------------------------------------------------------------------------
def connect(gateway: GatewayProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", gateway.port), timeout=SAFETY_S)


def read_response(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one response (Content-Length framed, as the gateway's)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"connection closed before a whole response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = s.recv(65536)
        assert chunk, "connection closed mid-body"
        rest += chunk
    return int(lines[0].split()[1]), headers, rest[:length]


def read_to_eof(s: socket.socket) -> bytes:
    """Everything until the gateway closes the connection (fails after SAFETY_S)."""
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def head(method: str, path: str, *extra: str) -> bytes:
    return "\r\n".join([f"{method} {path} HTTP/1.1", "Host: gw", *extra, "", ""]).encode()


def error_of(body: bytes) -> dict:
    doc = json.loads(body)
    assert set(doc) >= {"error_code", "message", "error"}, doc
    return doc


def body_routes(cluster: str, topic: str) -> list[str]:
    """Every POST route other than produce that reads a JSON body."""
    return ["/consumers/g1", "/groups/g1/members", "/groups/g1/offsets", "/fetch",
            f"/v3/clusters/{cluster}/topics",
            f"/v3/clusters/{cluster}/topics/{topic}/configs:alter"]


# -- body limits -------------------------------------------------------------------------
def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(gw, cluster, topic):
    # Nothing but the headers is ever sent: a gateway that waits for the body never answers.
    for path in [*body_routes(cluster, topic), "/topics", "/healthz"]:
        with connect(gw) as s:
            s.sendall(head("POST", path, "Content-Type: application/json",
                           f"Content-Length: {200 * 1024 * 1024}"))
            status, _, body = read_response(s)
        assert status == 413, (path, body)
        doc = error_of(body)
        assert doc["error_code"] == 41302 and f"max.control.request.size={CONTROL_LIMIT}" \
            in doc["message"], doc


def test_a_chunked_body_is_refused_once_it_passes_the_limit(gw, cluster, topic):
    chunk = b"[" * 16384
    framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    for path in ["/consumers/g1", "/groups/g1/members", "/fetch", f"/v3/clusters/{cluster}/topics"]:
        with connect(gw) as s:
            s.sendall(head("POST", path, "Content-Type: application/json",
                           "Transfer-Encoding: chunked"))
            # past the limit, and never the last chunk: only refusing early answers at all
            s.sendall(framed * (CONTROL_LIMIT // len(chunk) + 2))
            status, _, body = read_response(s)
        assert status == 413, (path, body)
        assert error_of(body)["error_code"] == 41302


def test_a_body_under_the_limit_but_over_the_inline_size_is_served(gw):
    # ~150 KiB: parsed on a worker thread, answered as any other
    doc = {"name": f"i-{uuid.uuid4().hex[:8]}", "format": "binary", "pad": "x" * 150_000}
    status, body, _ = gw.request("POST", "/consumers/big-body-group", body=doc)
    assert status == 200, body


@pytest.mark.parametrize("depth", [65, 100, 5000])
def test_json_nested_too_deep_is_a_400_on_every_body_route(gw, cluster, topic, depth):
    nested = ("[" * depth + "]" * depth).encode()
    for path in body_routes(cluster, topic):
        status, body, _ = gw.request("POST", path, body=nested,
                                     headers={"Content-Type": "application/json"})
        assert status == 400, (path, depth, body)
        assert body["error"] == "nesting_too_deep", body
        assert "max.json.nesting.depth=64" in body["message"]


def test_json_at_the_nesting_limit_is_parsed(gw):
    nested = "[" * 63 + "]" * 63  # 64 levels with the body's object
    status, body, _ = gw.request("POST", "/groups/g-depth/members",
                                 body=f'{{"topics": [], "x": {nested}}}'.encode(),
                                 headers={"Content-Type": "application/json"})
    assert status != 500 and body.get("error") != "nesting_too_deep", body


def test_nan_in_a_control_body_is_not_json(gw):
    status, body, _ = gw.request("POST", "/groups/g-nan/members",
                                 body=b'{"topics": [], "session_timeout_ms": NaN}',
                                 headers={"Content-Type": "application/json"})
    assert status == 400 and "NaN" in body["message"], body


# -- strict numbers and names ------------------------------------------------------------
# what int() reads as 1 (or 10), and a few it never did
LENIENT_NUMBERS = [" 1", "1 ", "+1", "1_0", "\u0661", "\uff11", "0x1", "1.0", "-0 "]


@pytest.mark.parametrize("raw", LENIENT_NUMBERS)
def test_a_partition_in_a_path_is_ascii_digits_only(gw, topic, raw):
    p = quote(raw, safe="")
    status, body, _ = gw.request("GET", f"/topics/{topic}/partitions/{p}/offsets")
    assert status == 404 and body["error_code"] == 40402, (raw, body)
    status, body, _ = gw.request("POST", f"/topics/{topic}/partitions/{p}",
                                 body={"records": [{"value": 1}]},
                                 content_type="application/vnd.kafka.json.v2+json")
    assert status == 404 and body["error_code"] == 40402, (raw, body)


@pytest.mark.parametrize("raw", [*LENIENT_NUMBERS, ""])
def test_a_number_in_a_query_string_is_ascii_digits_only(gw, topic, raw):
    q = quote(raw, safe="")
    status, body, _ = gw.request("GET", f"/topics/{topic}/partitions/0/messages?offset={q}")
    assert status == 400 and "offset" in body["message"], (raw, body)
    status, body, _ = gw.request("POST", f"/topics/{topic}?producer_id={q}&sequence=0",
                                 body={"records": [{"value": 1}]},
                                 content_type="application/vnd.kafka.json.v2+json")
    assert status == 400 and "producer_id" in body["message"], (raw, body)
    status, body, _ = gw.request("GET", f"/groups/g1/offsets?partitions={topic}:{q}")
    assert status == 400, (raw, body)


def test_a_plain_number_is_still_a_number(gw, topic):
    status, body, _ = gw.request("GET", f"/topics/{topic}/partitions/1/messages?offset=0")
    assert status == 200, body
    status, body, _ = gw.request("GET", f"/topics/{topic}/partitions/1/offsets")
    assert status == 200 and body == {"beginning_offset": 0, "end_offset": 0}, body


def test_a_topic_name_with_a_trailing_newline_is_refused(gw, cluster):
    status, body, _ = gw.request("POST", f"/v3/clusters/{cluster}/topics",
                                 body={"topic_name": "newline\n"})
    assert status == 400 and body["error_code"] == 40003, body
    status, body, _ = gw.request("GET", "/topics/newline%0A")
    assert status == 400 and body["error_code"] == 40003, body


@pytest.mark.parametrize("name", ["_cluster.json", "_groups", "_maintenance", ".tmp-abc"])
def test_the_stores_own_names_are_refused_as_topics(gw, cluster, name):
    status, body, _ = gw.request("POST", f"/v3/clusters/{cluster}/topics",
                                 body={"topic_name": name})
    assert status == 400 and body["error_code"] == 40003, body
    assert "reserved" in body["message"], body
    for method, path in [("GET", f"/topics/{name}"), ("POST", f"/topics/{name}"),
                         ("GET", f"/v3/clusters/{cluster}/topics/{name}")]:
        status, body, _ = gw.request(method, path, body={"records": [{"value": 1}]}
                                     if method == "POST" else None,
                                     content_type="application/vnd.kafka.json.v2+json")
        assert status == 400 and body["error_code"] == 40003, (path, body)
    status, body, _ = gw.request("GET", "/v3/clusters")  # the cluster file is intact
    assert status == 200 and body["data"][0]["cluster_id"] == cluster


# -- slow clients and the connection cap ---------------------------------------------------
def _half_requests() -> list[bytes]:
    """The ways to start a request and stall: nothing, half a request line, headers
    without their end, a body shorter than declared, a chunked body never finished."""
    return [b"", b"POST /topics/x HT", b"GET /healthz HTTP/1.1\r\nHost: gw\r\nAcc",
            head("POST", "/groups/g/members", "Content-Type: application/json",
                 "Content-Length: 100") + b'{"topics":',
            head("POST", "/fetch", "Content-Type: application/json", "Transfer-Encoding: chunked") + b"5\r\n{\"par\r\n"]


def test_slow_clients_are_timed_out_and_others_are_served_meanwhile(edge_gw):
    starts = _half_requests()
    slow = []
    for i in range(40):
        s = connect(edge_gw)
        if starts[i % len(starts)]:
            s.sendall(starts[i % len(starts)])
        slow.append(s)
    try:
        # normal clients, on fresh connections and on a kept-alive one, while the 40 stall
        for _ in range(20):
            status, body, _ = edge_gw.request("GET", "/healthz")
            assert status == 200, body
        with connect(edge_gw) as s:
            s.sendall(head("GET", "/v3/clusters"))
            assert read_response(s)[0] == 200
        # every slow connection is answered 408 and closed by the gateway
        for i, s in enumerate(slow):
            got = read_to_eof(s)
            assert got.startswith(b"HTTP/1.1 408 "), (i, got)
            body = got.partition(b"\r\n\r\n")[2]
            doc = error_of(body)
            assert doc["error_code"] == 40801 and doc["error"] == "request_timeout"
            assert f"request.read.timeout.ms={READ_TIMEOUT_MS}" in doc["message"]
    finally:
        for s in slow:
            s.close()


def test_a_request_answered_early_is_still_timed_out_if_its_body_stalls(edge_gw):
    with connect(edge_gw) as s:
        s.sendall(head("POST", "/groups/g/members", "Content-Type: application/json",
                       "Content-Length: 100000000"))
        status, _, _ = read_response(s)  # 413 at once, from the declared length
        assert status == 413
        s.sendall(b"[" * 1000)  # then a trickle of the body, and nothing more
        assert read_to_eof(s) == b""  # closed (no second answer: one was sent already)


def test_connections_beyond_max_connections_get_503_and_are_closed(edge_gw):
    held: list[socket.socket] = []
    statuses = []
    try:
        for _ in range(MAX_CONNECTIONS + 5):
            s = connect(edge_gw)
            held.append(s)
            s.sendall(head("GET", "/healthz"))  # keep-alive: the connection stays open
            status, headers, body = read_response(s)
            statuses.append(status)
            if status == 503:
                doc = error_of(body)
                assert doc["error_code"] == 50304 and doc["error"] == "too_many_connections"
                assert headers.get("connection") == "close"
                assert read_to_eof(s) == b""
                break
        assert statuses[0] == 200 and statuses[-1] == 503, statuses
        assert statuses.count(200) <= MAX_CONNECTIONS
    finally:
        for s in held:
            s.close()
    # once the held connections are gone, new clients are served again
    wait_for(lambda: edge_gw.request("GET", "/healthz")[0] == 200, timeout=SAFETY_S,
             what="the gateway to serve again after the connections closed")


# -- the helpers, without a gateway -----------------------------------------------------------
@pytest.mark.parametrize("raw", [" 1", "1 ", "+1", "1_0", "\u0661", "\uff11", "", "-", "1\n",
                                 "0x1", "1" * 41, None])
def test_parse_int_takes_ascii_decimal_only(raw):
    from ingest_gateway.http.params import parse_int

    with pytest.raises(ValueError):
        parse_int(raw)


def test_parse_int_reads_plain_numbers():
    from ingest_gateway.http.params import parse_int

    assert [parse_int(x) for x in ["0", "7", "-3", "0012", "9" * 40]] == \
        [0, 7, -3, 12, int("9" * 40)]


def test_parse_json_bounds_depth_without_recursion():
    from ingest_gateway.http.body import json_depth, parse_json
    from ingest_gateway.errors import BadRequest, NestingTooDeep

    assert json_depth({"a": [1, {"b": []}]}) == 4 and json_depth(5) == 0
    assert parse_json(b'{"a": [[1]], "s": "[[[[[[[[[["}', max_depth=3) == {"a": [[1]],
                                                                           "s": "[[[[[[[[[["}
    for depth in (4, 100, 100_000):
        with pytest.raises(NestingTooDeep):
            parse_json(b"[" * depth + b"]" * depth, max_depth=3)
    for bad in (b"{", b"NaN", b'{"x": Infinity}', b"\xff"):
        with pytest.raises(BadRequest):
            parse_json(bad, max_depth=3)
