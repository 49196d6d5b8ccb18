"""The gateway's JSON/HTTP surface fuzzed: schemathesis stateful runs, and hand-made
hostile requests over raw sockets against every route.

Every hostile request must be answered with a JSON error that carries an
``error_code`` and a 4xx status: not a 5xx, not a plain-text answer, not a dropped
connection; and the gateway must still be up and serving afterwards.

The schemathesis part runs its CLI in a subprocess (its pytest plugin does not load
under this pytest, see test_fuzz.py) with ``--phases stateful``: sequences of calls
chained by OpenAPI links, the ones schemathesis infers from the schema plus the
document's own (``ingest_gateway.http.openapi_links``: consumer instance and group
member ids, which it cannot infer), a fixed seed, ``not_a_server_error``. Run longer with::

    SPARKLOG_FUZZ_EXAMPLES=500 .venv/bin/python -m pytest -p no:cacheprovider \\
        tests/ingest_gateway/http/test_http_fuzz.py tests/ingest_gateway/http/test_fuzz.py \\
        tests/ingest_gateway/http/test_fetch_fuzz.py -m slow
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ingest_gateway.http.openapi import document
from log_layout import open_log
from jobs.gateway_process import GatewayProcess

#: examples per operation of the schemathesis runs (and scenarios of the stateful phase)
FUZZ_EXAMPLES = os.environ.get("SPARKLOG_FUZZ_EXAMPLES")
CONTROL_LIMIT = 256 * 1024  # over 64 KiB: deep bodies take the parse-in-a-thread path
PRODUCE_LIMIT = 1024 * 1024
SAFETY_S = 30  # a bound only a broken gateway reaches
JSON_V2 = "application/vnd.kafka.json.v2+json"
TOPIC, GROUP, INSTANCE, MEMBER_GROUP = "fuzz", "fg", "fi", "fm"


def examples(normal: int) -> str:
    return FUZZ_EXAMPLES or str(normal)


# -- raw HTTP/1.1 -----------------------------------------------------------------------------
@dataclasses.dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def problem(self) -> str | None:
        """Why this answer is not a JSON 4xx error with an error_code (None if it is)."""
        if not 400 <= self.status < 500:
            return f"status {self.status}: {self.body[:200]!r}"
        if not self.headers.get("content-type", "").split(";")[0].strip().endswith("json"):
            return f"status {self.status} answered as {self.headers.get('content-type')!r}: " \
                   f"{self.body[:200]!r}"
        try:
            doc = json.loads(self.body)
        except ValueError:
            return f"status {self.status} with a body that is not JSON: {self.body[:200]!r}"
        if not isinstance(doc, dict) or not isinstance(doc.get("error_code"), int):
            return f"status {self.status} without an integer error_code: {self.body[:200]!r}"
        return None


def _read_answer(sock: socket.socket) -> Answer:
    """One HTTP/1.1 response (Content-Length, chunked, or until close).

    Raises ConnectionError if the connection ends before a whole answer."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError(f"connection closed before an answer: {buf[:200]!r}")
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if "content-length" in headers:
        need = int(headers["content-length"])
        while len(rest) < need:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("connection closed inside the answer's body")
            rest += data
        return Answer(status, headers, rest[:need])
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while not rest.endswith(b"0\r\n\r\n"):
            data = sock.recv(65536)
            if not data:
                raise ConnectionError("connection closed inside the answer's chunks")
            rest += data
        body, pos = b"", 0
        while True:
            size_end = rest.index(b"\r\n", pos)
            size = int(rest[pos:size_end].split(b";")[0], 16)
            if size == 0:
                return Answer(status, headers, body)
            body += rest[size_end + 2:size_end + 2 + size]
            pos = size_end + 4 + size
    while data := sock.recv(65536):
        rest += data
    return Answer(status, headers, rest)


def exchange(port: int, head: bytes, body: bytes | Iterator[bytes] = b"") -> Answer:
    """Send a request (``body`` whole, or chunk by chunk from an iterator) on a fresh
    connection; its answer. The client stops sending once the gateway has answered or
    stopped reading (an early 413), as a real client would."""
    with socket.create_connection(("127.0.0.1", port), timeout=SAFETY_S) as sock:
        try:
            sock.sendall(head)
            for piece in [body] if isinstance(body, bytes) else body:
                sock.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered before the whole body: read what it said
        return _read_answer(sock)


def request(port: int, method: str, target: str, body: bytes | None = None, *,
            content_type: str | None = "application/json",
            headers: dict[str, str] | None = None) -> Answer:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if body is not None:
        lines += [f"Content-Length: {len(body)}"]
        if content_type:
            lines += [f"Content-Type: {content_type}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return exchange(port, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), body or b"")


# -- the gateway and its state ----------------------------------------------------------------
@dataclasses.dataclass
class Target:
    gw: GatewayProcess
    cluster: str
    member: str

    @property
    def port(self) -> int:
        return self.gw.port


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Iterator[Target]:
    """A gateway with small body limits, a topic, a REST consumer instance subscribed to
    it and a group member, so that every route has something real to act on."""
    folder = tmp_path_factory.mktemp("http-fuzz")
    store = str(folder / "store")
    open_log(store).create_topic(TOPIC, {"partitions": 2})
    settings = {"gateway.linger.ms": 1, "gateway.max.control.request.size": CONTROL_LIMIT,
                "gateway.max.request.size": PRODUCE_LIMIT}
    with GatewayProcess(store, settings=settings, log_path=str(folder / "gateway.log")) as gw:
        status, body, _ = gw.request("GET", "/v3/clusters")
        assert status == 200, body
        cluster = body["data"][0]["cluster_id"]
        status, body, _ = gw.request("POST", f"/topics/{TOPIC}", content_type=JSON_V2,
                                     body={"records": [{"value": {"n": i}} for i in range(4)]})
        assert status == 200, body
        status, body, _ = gw.request("POST", f"/consumers/{GROUP}",
                                     body={"name": INSTANCE, "format": "json",
                                           "auto.offset.reset": "earliest"})
        assert status == 200, body
        status, body, _ = gw.request("POST",
                                     f"/consumers/{GROUP}/instances/{INSTANCE}/subscription",
                                     body={"topics": [TOPIC]})
        assert status == 204, body
        status, body, _ = gw.request("POST", f"/groups/{MEMBER_GROUP}/members",
                                     body={"topics": [TOPIC], "client_id": "fuzz",
                                           "rebalance_timeout_ms": 1000})
        assert status == 200, body
        yield Target(gw, cluster, body["member_id"])


def _body_routes(t: Target) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(name, path, content type, a valid body) of every route that reads a JSON body."""
    inst = f"/consumers/{GROUP}/instances/{INSTANCE}"
    offsets = {"offsets": [{"topic": TOPIC, "partition": 0, "offset": 0}]}
    record = {"key": "k", "value": {"n": 1}, "partition": 0, "timestamp": 1700000000000,
              "headers": [{"key": "h", "value": "v"}]}
    return [
        ("produce", f"/topics/{TOPIC}", JSON_V2, {"records": [record]}),
        ("produce_partition", f"/topics/{TOPIC}/partitions/1", JSON_V2,
         {"records": [{k: v for k, v in record.items() if k != "partition"}]}),
        ("create_topic", f"/v3/clusters/{t.cluster}/topics", "application/json",
         {"topic_name": "fz-new", "partitions_count": 1,
          "configs": [{"name": "retention.ms", "value": "1000"}]}),
        ("alter_configs", f"/v3/clusters/{t.cluster}/topics/{TOPIC}/configs:alter",
         "application/json", {"data": [{"name": "retention.ms", "value": "100000000"}]}),
        ("fetch", "/fetch", "application/json",
         {"partitions": [{"topic": TOPIC, "partition": 0, "offset": 0}], "max_records": 1,
          "max_bytes": 1000, "wait_ms": 0, "min_bytes": 1}),
        ("create_instance", f"/consumers/{GROUP}", "application/json",
         {"name": "fx", "format": "json", "auto.offset.reset": "earliest",
          "auto.commit.enable": "false", "session.timeout.ms": 10000,
          "consumer.instance.timeout.ms": 10000}),
        ("subscribe", f"{inst}/subscription", "application/json", {"topics": [TOPIC]}),
        ("seek", f"{inst}/positions", "application/json", offsets),
        ("instance_commit", f"{inst}/offsets", "application/json", offsets),
        ("join", f"/groups/{MEMBER_GROUP}/members", "application/json",
         {"topics": [TOPIC], "member_id": t.member, "client_id": "fuzz",
          "strategies": ["range"], "session_timeout_ms": 10000, "rebalance_timeout_ms": 1000}),
        ("member_heartbeat", f"/groups/{MEMBER_GROUP}/members/{t.member}/heartbeat",
         "application/json", {"generation": 1}),
        ("group_commit", f"/groups/{MEMBER_GROUP}/offsets", "application/json",
         {"member_id": t.member, "generation": 1, "metadata": "m", **offsets}),
    ]


BODY_ROUTE_NAMES = ["produce", "produce_partition", "create_topic", "alter_configs", "fetch",
                    "create_instance", "subscribe", "seek", "instance_commit", "join",
                    "member_heartbeat", "group_commit"]

#: texts that are invalid wherever a value stands: not JSON at all (NaN, Infinity), beyond
#: a double (1e400), beyond Python's int-from-text limit (5,000 digits), a lone surrogate
#: (no UTF-8 for it), 100,000 levels deep
HOSTILE_VALUES = {
    "NaN": b"NaN", "Infinity": b"Infinity", "-Infinity": b"-Infinity", "1e400": b"1e400",
    "-1e400": b"-1e400", "5000_digits": b"9" * 5000, "lone_surrogate": b'"\\ud800"',
    "low_surrogate": b'"a\\udc00b"', "deep_array": b"[" * 100_000 + b"]" * 100_000,
}
#: whole bodies
HOSTILE_BODIES = {
    "open_brackets": b"[" * 100_000,
    "deep_objects": b'{"a":' * 40_000 + b"1" + b"}" * 40_000,
    "truncated": b'{"records": [{"value": ',
    "not_utf8": b'{"records": [{"value": "\xff\xfe"}]}',
    "array": b"[]", "string": b'"x"', "null": b"null", "number": b"0",
    "trailing_garbage": b'{"records": []} x',
    "duplicate_keys": b'{"records": 1, "records": NaN}',
}
_MARK = "\x00hostile\x00"


def _leaf_paths(doc: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaf_paths(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaf_paths(v, (*path, i))
    else:
        yield path


def hostile_variants(doc: dict[str, Any]) -> Iterator[tuple[str, bytes]]:
    """(label, body): ``doc`` with each leaf in turn replaced by each hostile value,
    then the hostile whole bodies."""
    marker = json.dumps(_MARK).encode()
    for path in _leaf_paths(doc):
        mutated = copy.deepcopy(doc)
        slot = mutated
        for key in path[:-1]:
            slot = slot[key]
        slot[path[-1]] = _MARK
        text = json.dumps(mutated).encode()
        for name, value in HOSTILE_VALUES.items():
            yield f"{'/'.join(map(str, path))}={name}", text.replace(marker, value)
    yield from HOSTILE_BODIES.items()


def _failures(cases: Iterator[tuple[str, Any]]) -> list[str]:
    """'label: problem' for each (label, answer-or-exception) that is not a JSON 4xx."""
    out = []
    for label, got in cases:
        problem = f"{type(got).__name__}: {got}" if isinstance(got, Exception) else got.problem()
        if problem:
            out.append(f"{label}: {problem}")
    return out


def _ask(*args: Any, **kwargs: Any) -> Answer | Exception:
    try:
        return request(*args, **kwargs)
    except OSError as e:  # a dropped connection or a timeout is a failure to report
        return e


def _assert_all_refused(failures: list[str], tried: int) -> None:
    assert not failures, f"{len(failures)} of {tried} hostile requests were not a JSON 4xx " \
                         "error:\n" + "\n".join(failures[:60])


# -- hostile bodies ---------------------------------------------------------------------------
@pytest.mark.parametrize("route", BODY_ROUTE_NAMES)
def test_hostile_json_bodies_are_refused_with_a_json_4xx(target, route):
    name, path, ctype, doc = next(r for r in _body_routes(target) if r[0] == route)
    cases = list(hostile_variants(doc))
    failures = _failures((label, _ask(target.port, "POST", path, body, content_type=ctype))
                         for label, body in cases)
    _assert_all_refused(failures, len(cases))


def _chunks(total: int, piece: int = 64 * 1024) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        n = min(piece, total - sent)
        yield f"{n:x}\r\n".encode() + b" " * n + b"\r\n"
        sent += n
    yield b"0\r\n\r\n"


@pytest.mark.parametrize("route", BODY_ROUTE_NAMES)
def test_bodies_over_the_limit_are_refused_declared_or_chunked(target, route):
    name, path, ctype, _doc = next(r for r in _body_routes(target) if r[0] == route)
    limit = PRODUCE_LIMIT if name.startswith("produce") else CONTROL_LIMIT
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\n" \
           "Connection: close\r\n"
    cases = []
    for label, extra, body in [
            ("declared_200MB", "Content-Length: 200000000\r\n", b"{" + b" " * 1023),
            ("declared_limit+1", f"Content-Length: {limit + 1}\r\n", iter([b" " * (limit + 1)])),
            ("chunked_over", "Transfer-Encoding: chunked\r\n", _chunks(limit + 128 * 1024))]:
        try:
            got: Answer | Exception = exchange(target.port, (head + extra + "\r\n").encode(), body)
        except OSError as e:
            got = e
        cases.append((label, got))
    failures = _failures(iter(cases))
    failures += [f"{label}: status {got.status}, not 413" for label, got in cases
                 if isinstance(got, Answer) and not got.problem() and got.status != 413]
    _assert_all_refused(failures, len(cases))


def test_wrong_content_types_are_refused(target):
    inst = f"/consumers/{GROUP}/instances/{INSTANCE}"
    produce = f"/topics/{TOPIC}"
    arrow_magic = b"\xff\xff\xff\xff" + b"\x00" * 60
    cases = [
        ("produce text/plain", produce, b'{"records": [{"value": 1}]}', "text/plain"),
        ("produce form", produce, b"records=1", "application/x-www-form-urlencoded"),
        ("produce multipart", produce, b"--x\r\n\r\n--x--", "multipart/form-data; boundary=x"),
        ("produce none", produce, b'{"records": [{"value": 1}]}', None),
        ("produce arrow, JSON body", produce, b'{"records": [{"value": 1}]}',
         "application/vnd.apache.arrow.stream"),
        ("produce arrow, bad stream", produce, arrow_magic, "application/vnd.apache.arrow.stream"),
        ("produce arrow, empty", produce, b"", "application/vnd.apache.arrow.stream"),
        ("produce json, arrow body", produce, arrow_magic, JSON_V2),
        ("produce binary, bad base64", produce, b'{"records": [{"value": "%%%"}]}',
         "application/vnd.kafka.binary.v2+json"),
        ("produce avro", produce, b'{"records": [{"value": 1}]}',
         "application/vnd.kafka.avro.v2+json"),
        ("subscribe xml", f"{inst}/subscription", b"<topics/>", "application/xml"),
        ("join xml", f"/groups/{MEMBER_GROUP}/members", b"<topics/>", "application/xml"),
        ("fetch form", "/fetch", b"partitions=1", "application/x-www-form-urlencoded"),
    ]
    failures = _failures((label, _ask(target.port, "POST", path, body, content_type=ctype))
                         for label, path, body, ctype in cases)
    _assert_all_refused(failures, len(cases))


# -- hostile names, numbers and methods ---------------------------------------------------------
BAD_NUMBERS = {"space": "%201", "plus": "%2B1", "underscore": "1_0", "arabic_indic": "%D9%A1",
               "long": "9" * 10_000, "nul": "%00", "one_nul": "1%00", "empty": "",
               "hex": "0x10", "exponent": "1e3", "fraction": "1.0", "newline": "1%0A"}
BAD_NAMES = {"newline": "fuzz%0A", "nul": "fu%00zz", "dotdot": "..", "dot": ".",
             "encoded_dotdot": "%2E%2E", "slash": "a%2Fb", "too_long": "a" * 250,
             "very_long": "a" * 100_000, "space": "fu%20zz", "surrogate_utf8": "%ED%A0%80",
             "not_utf8": "%FF"}


def _query_cases(t: Target) -> Iterator[tuple[str, str, str, bytes | None]]:
    """(label, method, target, body) with each numeric query parameter set to each bad
    number, and each parameter given twice."""
    inst = f"/consumers/{GROUP}/instances/{INSTANCE}"
    record = json.dumps({"records": [{"value": 1}]}).encode()
    routes = [("GET", f"/topics/{TOPIC}/partitions/0/messages", {"offset": "0"},
               ["offset", "count", "max_bytes", "wait_ms", "min_bytes"], None),
              ("GET", f"{inst}/records", {"timeout": "0"},
               ["timeout", "max_bytes", "max_records"], None),
              ("POST", f"/topics/{TOPIC}", {"acks": "1"},
               ["acks", "producer_id", "producer_epoch", "sequence"], record)]
    for method, path, valid, names, body in routes:
        for name in names:
            for label, bad in BAD_NUMBERS.items():
                query = "&".join(f"{k}={v}" for k, v in {**valid, name: bad}.items())
                yield f"{method} {path} {name}={label}", method, f"{path}?{query}", body
            other = "0" if name != "acks" else "all"
            query = "&".join(f"{k}={v}" for k, v in {**valid, name: "1"}.items())
            yield f"{method} {path} {name} twice", method, f"{path}?{query}&{name}={other}", body
    for label, bad in BAD_NUMBERS.items():
        yield f"partitions query {label}", "GET", \
            f"/groups/{MEMBER_GROUP}/offsets?partitions={TOPIC}:{bad}", None
        if not bad:  # an empty path segment is another route (Starlette redirects it)
            continue
        yield f"partition path {label}", "GET", \
            f"/topics/{TOPIC}/partitions/{bad}/messages?offset=0", None
        yield f"produce partition path {label}", "POST", f"/topics/{TOPIC}/partitions/{bad}", record


def _name_cases(t: Target) -> Iterator[tuple[str, str, str, bytes | None]]:
    """(label, method, target, body) with each named path segment set to each bad name."""
    record = json.dumps({"records": [{"value": 1}]}).encode()
    templates = [("GET", "/topics/{t}", None), ("POST", "/topics/{t}", record),
                 ("GET", "/topics/{t}/partitions", None),
                 ("GET", "/topics/{t}/partitions/0/messages?offset=0", None),
                 ("GET", f"/v3/clusters/{t.cluster}/topics/{{t}}", None),
                 ("DELETE", f"/v3/clusters/{t.cluster}/topics/{{t}}", None),
                 ("GET", "/v3/clusters/{t}", None),
                 ("GET", "/groups/{t}", None), ("GET", "/groups/{t}/offsets", None),
                 ("POST", "/groups/{t}/members", json.dumps({"topics": [TOPIC]}).encode()),
                 ("DELETE", f"/groups/{MEMBER_GROUP}/members/{{t}}", None),
                 ("POST", f"/groups/{MEMBER_GROUP}/members/{{t}}/heartbeat", b"{}"),
                 ("POST", "/consumers/{t}", b"{}"),
                 ("GET", f"/consumers/{GROUP}/instances/{{t}}/subscription", None),
                 ("DELETE", f"/consumers/{GROUP}/instances/{{t}}", None)]
    for method, template, body in templates:
        for label, bad in BAD_NAMES.items():
            yield f"{method} {template} {label}", method, template.replace("{t}", bad), body
    names = [("newline", "fz\n"), ("nul", "fz\x00"), ("surrogate", "\ud800"), ("dotdot", ".."),
             ("store_file", "_cluster.json")]
    for label, name in names:
        body = json.dumps({"topic_name": name, "partitions_count": 1}).encode()
        yield f"create topic {label}", "POST", f"/v3/clusters/{t.cluster}/topics", body
    for label, name in names[:4]:  # an instance's name is never a file name
        body = json.dumps({"name": name}).encode()
        yield f"create instance {label}", "POST", f"/consumers/{GROUP}", body
    for label, name in names[:3]:  # a client id may hold any printable text
        body = json.dumps({"topics": [TOPIC], "client_id": name}).encode()
        yield f"join client_id {label}", "POST", "/groups/fz-client/members", body


@pytest.mark.parametrize("cases", [_query_cases, _name_cases], ids=["query", "names"])
def test_bad_numbers_and_names_are_refused(target, cases):
    tried = list(cases(target))
    failures = _failures((label, _ask(target.port, method, path, body))
                         for label, method, path, body in tried)
    _assert_all_refused(failures, len(tried))


def test_methods_not_allowed_are_refused(target):
    inst = f"/consumers/{GROUP}/instances/{INSTANCE}"
    allowed = {
        "/topics": {"GET"}, f"/topics/{TOPIC}": {"GET", "POST"},
        f"/topics/{TOPIC}/partitions": {"GET"}, f"/topics/{TOPIC}/partitions/0": {"GET", "POST"},
        f"/topics/{TOPIC}/partitions/0/messages": {"GET"},
        f"/topics/{TOPIC}/partitions/0/offsets": {"GET"},
        "/v3/clusters": {"GET"}, f"/v3/clusters/{target.cluster}": {"GET"},
        f"/v3/clusters/{target.cluster}/topics": {"GET", "POST"},
        f"/v3/clusters/{target.cluster}/topics/{TOPIC}": {"GET", "PATCH", "DELETE"},
        f"/v3/clusters/{target.cluster}/topics/{TOPIC}/configs": {"GET"},
        f"/v3/clusters/{target.cluster}/topics/{TOPIC}/configs:alter": {"POST"},
        f"/v3/clusters/{target.cluster}/topics/{TOPIC}/partitions": {"GET"},
        f"/v3/clusters/{target.cluster}/acls": {"GET", "POST", "DELETE"},
        f"/v3/clusters/{target.cluster}/acls:batch": {"POST"},
        "/v3/producers": {"POST"}, "/healthz": {"GET"}, "/readyz": {"GET"},
        "/metrics": {"GET"}, "/openapi.json": {"GET"}, "/fetch": {"POST"},
        "/fetch/waiting": {"GET"}, f"/consumers/{GROUP}": {"POST"},
        f"{inst}/subscription": {"GET", "POST", "DELETE"}, f"{inst}/assignments": {"GET", "POST"},
        f"{inst}/records": {"GET"}, f"{inst}/positions": {"POST"},
        f"{inst}/offsets": {"GET", "POST"}, f"{inst}/heartbeat": {"POST"}, inst: {"DELETE"},
        "/groups": {"GET"}, f"/groups/{MEMBER_GROUP}": {"GET"},
        f"/groups/{MEMBER_GROUP}/members": {"POST"},
        f"/groups/{MEMBER_GROUP}/members/{target.member}/heartbeat": {"POST"},
        f"/groups/{MEMBER_GROUP}/members/{target.member}": {"DELETE"},
        f"/groups/{MEMBER_GROUP}/offsets": {"GET", "POST"},
    }
    tried = [(f"{method} {path}", method, path)
             for path, ok in allowed.items()
             for method in ["GET", "POST", "PUT", "PATCH", "DELETE", "TRACE"] if method not in ok]
    answers = [(label, _ask(target.port, method, path, b"{}")) for label, method, path in tried]
    failures = _failures(iter(answers))
    failures += [f"{label}: status {got.status}, not 405" for label, got in answers
                 if isinstance(got, Answer) and not got.problem() and got.status != 405]
    _assert_all_refused(failures, len(tried))


def test_the_gateway_is_still_up_and_serving_after_the_hostile_requests(target):
    """Runs last in this module: everything above must have left the gateway alive,
    answering, and its data readable."""
    assert target.gw.proc.poll() is None, "the gateway process died"
    status, body, _ = target.gw.request("GET", "/healthz")
    assert status == 200, body
    status, body, _ = target.gw.request("POST", f"/topics/{TOPIC}", content_type=JSON_V2,
                                        body={"records": [{"value": {"after": True}}]})
    assert status == 200, body
    for partition in (0, 1):
        status, body, _ = target.gw.request(
            "GET", f"/topics/{TOPIC}/partitions/{partition}/messages?offset=0&count=1000",
            headers={"Accept": JSON_V2})
        assert status == 200, body
    status, body, _ = target.gw.request("GET", f"/groups/{MEMBER_GROUP}")
    assert status == 200, body


# -- schemathesis, stateful -------------------------------------------------------------------
def _stateful_run(tmp_path, max_examples: str, timeout: float) -> str:
    store = str(tmp_path / "store")
    open_log(store).create_topic(TOPIC, {"partitions": 2})
    schema = tmp_path / "openapi.json"
    schema.write_text(json.dumps(document()))
    schemathesis = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    log_path = tmp_path / "gateway.log"
    with GatewayProcess(store, settings={"gateway.linger.ms": 1}, log_path=str(log_path)) as gw:
        run = subprocess.run(
            [schemathesis, "run", str(schema), "--url", gw.url, "--phases", "stateful",
             "--checks", "not_a_server_error", "--max-examples", max_examples, "--seed", "7",
             "--request-timeout", "30", "--no-color"],
            capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
            env={**os.environ, "SCHEMATHESIS_HOOKS": ""})
        alive = gw.proc.poll() is None
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:] + log_path.read_text()[-3000:]
    assert alive, "the gateway died under the stateful fuzz:\n" + log_path.read_text()[-3000:]
    assert "Stateful" in output and "passed" in output, output[-3000:]
    return output


def test_links_name_real_operations():
    """Every link of the document points at an operation of the document (a renamed
    route must not leave the stateful fuzz silently unchained), and the ids schemathesis
    cannot infer are linked."""
    doc = document()
    members = doc["paths"]["/groups/{group}/members"]["post"]["responses"]["200"]["links"]
    instances = doc["paths"]["/consumers/{group}"]["post"]["responses"]["200"]["links"]
    assert {"MemberHeartbeat", "MemberCommit"} <= set(members)
    assert {"InstanceSubscribe", "InstanceRecords", "InstanceDelete"} <= set(instances)
    for item in doc["paths"].values():
        for op in item.values():
            for response in op.get("responses", {}).values() if isinstance(op, dict) else ():
                for link in response.get("links", {}).values():
                    _, _, ref = link["operationRef"].partition("#/paths/")
                    path, _, method = ref.rpartition("/")
                    path = path.replace("~1", "/").replace("~0", "~")
                    assert method in doc["paths"][path], link


def test_stateful_fuzz_finds_no_server_error(tmp_path):
    print(_stateful_run(tmp_path, examples(5), timeout=300)[-2000:])


@pytest.mark.slow
def test_stateful_fuzz_longer_finds_no_server_error(tmp_path):
    print(_stateful_run(tmp_path, examples(100), timeout=1800)[-2000:])
