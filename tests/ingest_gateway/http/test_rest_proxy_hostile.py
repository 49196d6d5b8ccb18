"""Hostile input to every client-controlled input of the REST Proxy parity routes (issue 16).

Bad JSON, wrong types, unknown topics, partitions, instances, groups, consumers and
brokers, huge and negative offsets and partitions, bad ``topic_pattern`` regular
expressions (unparsable, catastrophic backtracking, too long), bad config names and
values, bad v3 records: each is answered with REST Proxy's typed error (status and
``error_code``), never a 5xx, and nothing is lost or changed: the topic's records,
the group's committed offsets and an instance's position are the same after all of
them. A real gateway over real sockets with a real store.
"""

from __future__ import annotations

import base64
import json

import pytest

from jobs.gateway_process import GatewayProcess
from log_layout import open_log

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
RECORDS = 5


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    """A gateway with topic h (2 partitions of RECORDS records), an instance ``hg/a``
    assigned h-0 and reading from offset 2 (committed), an instance ``hg2/s``
    subscribed to h."""
    url = str(tmp_path_factory.mktemp("hostile") / "store")
    open_log(url, fsync=False).create_topic("h", {"partitions": 2})
    with GatewayProcess(url) as g:
        for p in range(2):
            body = {"records": [{"value": base64.b64encode(b"v%d" % i).decode()}
                                for i in range(RECORDS)]}
            assert g.request("POST", f"/topics/h/partitions/{p}", body=body,
                             content_type=BINARY_V2)[0] == 200
        g.cluster = g.request("GET", "/v3/clusters")[1]["data"][0]["cluster_id"]
        ok = [g.request("POST", "/consumers/hg", body={"name": "a", "format": "binary",
                                                       "auto.commit.enable": "false"}),
              g.request("POST", "/consumers/hg/instances/a/assignments",
                        body={"partitions": [{"topic": "h", "partition": 0}]}),
              g.request("POST", "/consumers/hg/instances/a/offsets",
                        body={"offsets": [{"topic": "h", "partition": 0, "offset": 2}]}),
              g.request("POST", "/consumers/hg/instances/a/positions",
                        body={"offsets": [{"topic": "h", "partition": 0, "offset": 2}]}),
              g.request("POST", "/consumers/hg2", body={"name": "s"}),
              g.request("POST", "/consumers/hg2/instances/s/subscription",
                        body={"topics": ["h"]})]
        assert all(status in (200, 204) for status, _, _ in ok), ok
        yield g


def ask(gw, method: str, path: str, body=None, headers=None) -> tuple[int, object]:
    """(status, parsed body) of a request whose body is sent as given (bytes: raw)."""
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    raw = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    r = gw.http.request(method, gw.url + path, body=raw, headers=hdrs, redirect=False)
    try:
        return r.status, json.loads(r.data) if r.data else None
    except ValueError:
        return r.status, r.data[:200]


A = "/consumers/hg/instances/a"
S = "/consumers/hg2/instances/s"
BIG = 2**63
HUGE = 10**30


def _cases(cid: str) -> list[tuple[str, str, str, object, dict | None, int, int]]:
    """(label, method, path, body, headers, status, error_code)."""
    v3 = f"/v3/clusters/{cid}"
    rec = f"{v3}/topics/h/records"
    batch = f"{v3}/topics/h/records:batch"
    cfg = f"{v3}/topics/h/configs"
    grp = f"{v3}/consumer-groups"
    off = lambda o, p=0, t="h": {"offsets": [{"topic": t, "partition": p, "offset": o}]}  # noqa
    parts = lambda p, t="h": {"partitions": [{"topic": t, "partition": p}]}  # noqa
    return [
        # v2 GET partition, brokers
        ("partition not a number", "GET", "/topics/h/partitions/x", None, None, 404, 40402),
        ("partition negative", "GET", "/topics/h/partitions/-1", None, None, 404, 40402),
        ("partition huge", "GET", "/topics/h/partitions/" + "9" * 30, None, None, 404, 40402),
        ("partition 1_0", "GET", "/topics/h/partitions/1_0", None, None, 404, 40402),
        ("partition past the end", "GET", "/topics/h/partitions/2", None, None, 404, 40402),
        ("unknown topic", "GET", "/topics/nope/partitions/0", None, None, 404, 40401),
        ("bad topic name", "GET", "/topics/a%20b/partitions/0", None, None, 400, 40003),
        # seek
        ("seek: not JSON", "POST", f"{A}/positions", b"{", None, 400, 40001),
        ("seek: body a list", "POST", f"{A}/positions", [1], None, 400, 40001),
        ("seek: offsets not a list", "POST", f"{A}/positions", {"offsets": 1}, None, 400, 40001),
        ("seek: negative", "POST", f"{A}/positions", off(-1), None, 400, 40001),
        ("seek: 2^63", "POST", f"{A}/positions", off(BIG), None, 400, 40001),
        ("seek: 10^30", "POST", f"{A}/positions", off(HUGE), None, 400, 40001),
        ("seek: offset a string", "POST", f"{A}/positions", off("3"), None, 400, 40001),
        ("seek: offset a bool", "POST", f"{A}/positions", off(True), None, 400, 40001),
        ("seek: offset a float", "POST", f"{A}/positions", off(1.5), None, 400, 40001),
        ("seek: partition 2^40", "POST", f"{A}/positions", off(0, 2**40), None, 400, 40001),
        ("seek: not assigned", "POST", f"{A}/positions", off(0, 1), None, 409, 40913),
        ("seek: unknown topic", "POST", f"{A}/positions", off(0, 0, "nope"), None, 409, 40913),
        ("seek: unknown instance", "POST", "/consumers/hg/instances/zz/positions", off(0),
         None, 404, 40403),
        ("seek: bad group", "POST", "/consumers/h%20g/instances/a/positions", off(0), None,
         400, 40011),
        ("beginning: not a list", "POST", f"{A}/positions/beginning", {"partitions": "h"},
         None, 400, 40001),
        ("beginning: not assigned", "POST", f"{A}/positions/beginning", parts(1), None,
         409, 40913),
        ("end: partition a string", "POST", f"{A}/positions/end", parts("0"), None, 400, 40001),
        ("end: too many", "POST", f"{A}/positions/end",
         {"partitions": [{"topic": "h", "partition": i} for i in range(10_001)]}, None,
         400, 40001),
        # manual assignment
        ("assign: unknown topic", "POST", f"{A}/assignments", parts(0, "nope"), None,
         404, 40401),
        ("assign: unknown partition", "POST", f"{A}/assignments", parts(7), None, 404, 40402),
        ("assign: negative partition", "POST", f"{A}/assignments", parts(-1), None,
         404, 40402),
        ("assign: bad topic name", "POST", f"{A}/assignments", parts(0, "../x"), None,
         400, 40003),
        ("assign: not JSON", "POST", f"{A}/assignments", b"[", None, 400, 40001),
        ("assign: subscribed", "POST", f"{S}/assignments", parts(0), None, 409, 40903),
        # subscription
        ("subscribe: both", "POST", f"{S}/subscription",
         {"topics": ["h"], "topic_pattern": "h"}, None, 409, 40903),
        ("subscribe: neither", "POST", f"{S}/subscription", {}, None, 400, 40001),
        ("subscribe: assigned", "POST", f"{A}/subscription", {"topics": ["h"]}, None,
         409, 40903),
        ("subscribe: pattern not a regex", "POST", f"{S}/subscription",
         {"topic_pattern": "(h"}, None, 400, 40001),
        ("subscribe: pattern backtracks", "POST", f"{S}/subscription",
         {"topic_pattern": "(a+)+$"}, None, 400, 40001),
        ("subscribe: pattern (x*)*", "POST", f"{S}/subscription",
         {"topic_pattern": "(x*)*y"}, None, 400, 40001),
        ("subscribe: pattern ((a*))*b", "POST", f"{S}/subscription",
         {"topic_pattern": "((a*))*b"}, None, 400, 40001),
        ("subscribe: pattern (a|aa)+$", "POST", f"{S}/subscription",
         {"topic_pattern": "(a|aa)+$"}, None, 400, 40001),
        ("subscribe: pattern backreference", "POST", f"{S}/subscription",
         {"topic_pattern": "(h)\\1"}, None, 400, 40001),
        ("subscribe: pattern of many repetitions", "POST", f"{S}/subscription",
         {"topic_pattern": ".*a.*a.*a.*a.*b"}, None, 400, 40001),
        ("subscribe: pattern too long", "POST", f"{S}/subscription",
         {"topic_pattern": "a" * 1001}, None, 400, 40001),
        ("subscribe: pattern a number", "POST", f"{S}/subscription", {"topic_pattern": 1},
         None, 400, 40001),
        ("subscribe: pattern empty", "POST", f"{S}/subscription", {"topic_pattern": ""},
         None, 400, 40001),
        ("subscribe: unknown topic", "POST", f"{S}/subscription", {"topics": ["nope"]},
         None, 404, 40401),
        ("unsubscribe: unknown instance", "DELETE", "/consumers/hg/instances/zz/subscription",
         None, None, 404, 40403),
        # records' format
        ("records: JSON Accept on binary", "GET", f"{A}/records?timeout=0", None,
         {"Accept": JSON_V2}, 406, 40601),
        ("records: Avro Accept", "GET", f"{A}/records?timeout=0", None,
         {"Accept": "application/vnd.kafka.avro.v2+json"}, 406, 40601),
        ("records: unknown Accept", "GET", f"{A}/records?timeout=0", None,
         {"Accept": "text/csv"}, 415, 41501),
        # v3 records
        ("v3 record: not JSON", "POST", rec, b"{", None, 400, 40001),
        ("v3 record: not an object", "POST", rec, [1], None, 400, 40001),
        ("v3 record: bad base64", "POST", rec, {"value": {"type": "BINARY", "data": "!"}},
         None, 400, 40001),
        ("v3 record: base64 a number", "POST", rec, {"value": {"type": "BINARY", "data": 1}},
         None, 400, 40001),
        ("v3 record: unknown type", "POST", rec, {"value": {"type": "XML", "data": "x"}},
         None, 400, 40001),
        ("v3 record: STRING not a string", "POST", rec,
         {"value": {"type": "STRING", "data": 1}}, None, 400, 40001),
        ("v3 record: key not an object", "POST", rec, {"key": "k"}, None, 400, 40001),
        ("v3 record: partition past the end", "POST", rec,
         {"partition_id": 2, "value": {"type": "STRING", "data": "x"}}, None, 404, 40402),
        ("v3 record: partition negative", "POST", rec,
         {"partition_id": -1, "value": {"type": "STRING", "data": "x"}}, None, 404, 40402),
        ("v3 record: partition a string", "POST", rec,
         {"partition_id": "0", "value": {"type": "STRING", "data": "x"}}, None, 400, 40001),
        ("v3 record: timestamp garbage", "POST", rec,
         {"timestamp": "yesterday", "value": {"type": "STRING", "data": "x"}}, None,
         400, 40001),
        ("v3 record: timestamp before 1970", "POST", rec,
         {"timestamp": "1960-01-01T00:00:00Z", "value": {"type": "STRING", "data": "x"}},
         None, 400, 40001),
        ("v3 record: headers not a list", "POST", rec,
         {"headers": {"a": "b"}, "value": {"type": "STRING", "data": "x"}}, None, 400, 40001),
        ("v3 record: header value not base64", "POST", rec,
         {"headers": [{"name": "a", "value": "!"}], "value": {"type": "STRING", "data": "x"}},
         None, 400, 40001),
        ("v3 record: too deep", "POST", rec, b"[" * 100 + b"]" * 100, None, 400, 40001),
        ("v3 record: empty body", "POST", rec, b"", None, 400, 40001),
        ("v3 record: unknown topic", "POST", f"{v3}/topics/nope/records",
         {"value": {"type": "STRING", "data": "x"}}, None, 404, 40401),
        ("v3 record: unknown cluster", "POST", "/v3/clusters/nope/topics/h/records",
         {"value": {"type": "STRING", "data": "x"}}, None, 404, 40403),
        ("v3 batch: not a list", "POST", batch, {"entries": 1}, None, 400, 40001),
        ("v3 batch: empty", "POST", batch, {"entries": []}, None, 400, 40001),
        ("v3 batch: no id", "POST", batch, {"entries": [{"value": None}]}, None, 400, 40001),
        ("v3 batch: id too long", "POST", batch, {"entries": [{"id": "x" * 81}]}, None,
         400, 40001),
        ("v3 batch: duplicate ids", "POST", batch, {"entries": [{"id": "1"}, {"id": "1"}]},
         None, 400, 40001),
        # PATCH topic
        ("patch: fewer partitions", "PATCH", f"{v3}/topics/h", {"partitions_count": 1}, None,
         400, 40004),
        ("patch: a string", "PATCH", f"{v3}/topics/h", {"partitions_count": "3"}, None,
         400, 40001),
        ("patch: missing", "PATCH", f"{v3}/topics/h", {}, None, 400, 40001),
        ("patch: huge", "PATCH", f"{v3}/topics/h", {"partitions_count": 2**40}, None,
         400, 40004),
        ("patch: unknown topic", "PATCH", f"{v3}/topics/nope", {"partitions_count": 3}, None,
         404, 40401),
        # configs
        ("config: unknown name", "GET", f"{cfg}/no.such", None, None, 404, 40405),
        ("config: name too long", "GET", f"{cfg}/{'x' * 300}", None, None, 400, 40001),
        ("config: set unknown name", "PUT", f"{cfg}/no.such", {"value": "1"}, None,
         400, 40004),
        ("config: set bad value", "PUT", f"{cfg}/retention.ms", {"value": "soon"}, None,
         400, 40004),
        ("config: set a number", "PUT", f"{cfg}/retention.ms", {"value": 5}, None, 400, 40001),
        ("config: set no value", "PUT", f"{cfg}/retention.ms", {}, None, 400, 40001),
        ("config: reset unknown name", "DELETE", f"{cfg}/no.such", None, None, 400, 40004),
        ("config: shrink partitions", "PUT", f"{cfg}/partitions", {"value": "1"}, None,
         400, 40004),
        ("alter: bad operation", "POST", f"{cfg}:alter",
         {"data": [{"name": "retention.ms", "operation": "APPEND", "value": "1"}]}, None,
         400, 40001),
        ("alter: validate_only a string", "POST", f"{cfg}:alter",
         {"data": [], "validate_only": "yes"}, None, 400, 40001),
        ("alter: one bad of two", "POST", f"{cfg}:alter",
         {"data": [{"name": "retention.ms", "value": "1"},
                   {"name": "cleanup.policy", "value": "shred"}]}, None, 400, 40004),
        ("alter: validate_only bad", "POST", f"{cfg}:alter",
         {"data": [{"name": "retention.ms", "value": "x"}], "validate_only": True}, None,
         400, 40004),
        # v3 consumer groups, brokers, replicas
        ("group: unknown", "GET", f"{grp}/nope", None, None, 404, 40404),
        ("group: bad id", "GET", f"{grp}/a%20b", None, None, 400, 40011),
        ("group: unknown consumer", "GET", f"{grp}/hg2/consumers/nobody", None, None,
         404, 40403),
        ("group: lag of a partition never committed", "GET", f"{grp}/hg2/lags/h/partitions/9",
         None, None, 404, 40402),
        ("group: lag partition not a number", "GET", f"{grp}/hg/lags/h/partitions/x", None,
         None, 404, 40402),
        ("broker: not a number", "GET", f"{v3}/brokers/x", None, None, 404, 40406),
        ("broker: negative", "GET", f"{v3}/brokers/-1", None, None, 404, 40406),
        ("broker: unknown", "GET", f"{v3}/brokers/7", None, None, 404, 40406),
        ("replica: unknown broker", "GET", f"{v3}/topics/h/partitions/0/replicas/7", None,
         None, 404, 40406),
        ("replica: unknown partition", "GET", f"{v3}/topics/h/partitions/5/replicas", None,
         None, 404, 40402),
        ("create: replicas_assignments", "POST", f"{v3}/topics",
         {"topic_name": "r", "replicas_assignments": {"0": [1]}}, None, 400, 40001),
        ("create: validate_only of an existing topic", "POST", f"{v3}/topics",
         {"topic_name": "h", "validate_only": True}, None, 400, 40002),
    ]


def _state(gw) -> dict[str, object]:
    """What must not change: records, committed offsets, partitions, configs."""
    v3 = f"/v3/clusters/{gw.cluster}"
    return {"ends": [gw.request("GET", f"/topics/h/partitions/{p}/offsets")[1]
                     for p in range(2)],
            "committed": gw.request("GET", "/groups/hg/offsets")[1],
            "partitions": gw.request("GET", f"{v3}/topics/h")[1]["partitions_count"],
            "configs": {c["name"]: c["value"]
                        for c in gw.request("GET", f"{v3}/topics/h/configs")[1]["data"]},
            "topics": gw.request("GET", "/topics")[1]}


def test_every_hostile_input_gets_its_typed_error_and_nothing_changes(gw):
    before = _state(gw)
    cases = _cases(gw.cluster)
    wrong = []
    for label, method, path, body, headers, status, code in cases:
        got_status, got = ask(gw, method, path, body, headers)
        if (got_status, isinstance(got, dict) and got.get("error_code")) != (status, code):
            wrong.append(f"{label}: {method} {path[:80]} -> {got_status} {str(got)[:200]}")
    assert wrong == [], "\n".join(wrong)
    assert len(cases) > 90
    assert _state(gw) == before
    # the instance still reads from the position it had: no refused seek moved it
    status, records = ask(gw, "GET", f"{A}/records?timeout=0", headers={"Accept": BINARY_V2})
    assert status == 200 and [r["offset"] for r in records] == list(range(2, RECORDS))
    assert ask(gw, "GET", "/readyz")[0] == 200


def test_a_batch_with_a_bad_entry_writes_the_good_ones_and_reports_the_bad(gw):
    """records:batch is per entry, as REST Proxy's: a refused entry is a failure with its
    error code; the others are written once each."""
    end = gw.request("GET", "/topics/h/partitions/1/offsets")[1]["end_offset"]
    status, out = ask(gw, "POST", f"/v3/clusters/{gw.cluster}/topics/h/records:batch", {
        "entries": [{"id": "ok", "partition_id": 1, "value": {"type": "STRING", "data": "x"}},
                    {"id": "bad", "partition_id": 1, "value": {"type": "BINARY", "data": "!"}},
                    {"id": "far", "partition_id": 9, "value": None}]})
    assert status == 207
    assert [(s["id"], s["offset"]) for s in out["successes"]] == [("ok", end)]
    assert {f["id"]: f["error_code"] for f in out["failures"]} == {"bad": 40001, "far": 40402}
    assert gw.request("GET", "/topics/h/partitions/1/offsets")[1]["end_offset"] == end + 1


def test_streamed_records_report_each_one_in_order(gw):
    """Concatenated records (REST Proxy's streaming mode): one report each, in order; a
    bad one is reported and the rest are written."""
    body = b"".join(json.dumps(d).encode() for d in [
        {"partition_id": 0, "value": {"type": "STRING", "data": "a"}},
        {"partition_id": 0, "value": {"type": "JSON", "data": [1]}},
        {"partition_id": 0, "value": {"type": "BINARY", "data": "%%"}}])
    r = gw.http.request("POST", f"{gw.url}/v3/clusters/{gw.cluster}/topics/h/records",
                        body=body, headers={"Content-Type": "application/json"})
    assert r.status == 200
    reports = [json.loads(line) for line in r.data.decode().splitlines()]
    assert [x["error_code"] for x in reports] == [200, 200, 40001]
    assert reports[1]["offset"] == reports[0]["offset"] + 1
    assert reports[1]["value"] == {"type": "JSON", "size": 3}


def test_a_large_stream_of_records_is_parsed_off_the_loop_and_written_whole(gw):
    """Over 64 KiB of concatenated records (parsed on a worker thread): every one written
    once, in order, while the gateway keeps answering."""
    n = 2_000
    body = b"\n".join(json.dumps({"partition_id": 1, "value": {
        "type": "STRING", "data": f"r{i:05d}" + "x" * 40}}).encode() for i in range(n))
    assert len(body) > 64 * 1024
    end = gw.request("GET", "/topics/h/partitions/1/offsets")[1]["end_offset"]
    r = gw.http.request("POST", f"{gw.url}/v3/clusters/{gw.cluster}/topics/h/records",
                        body=body, headers={"Content-Type": "application/json"})
    assert r.status == 200
    offsets = [json.loads(line)["offset"] for line in r.data.decode().splitlines()]
    assert offsets == list(range(end, end + n))
    assert gw.request("GET", "/topics/h/partitions/1/offsets")[1]["end_offset"] == end + n


@pytest.mark.parametrize("pattern, ok", [
    ("test.*", True), ("clicks-[0-9]+", True), (".*foo.*bar.*", True), ("^t$", True),
    ("(?:orders|payments)-.*", True), ("foo(bar)?baz", True),
    ("(a+)+$", False), ("((a*))*b", False), ("(a|aa)+$", False), ("(x)\\1", False),
    ("(?=(a+)+)b", False), ("a{2,}{2,}", False), (".*a.*a.*a.*b", False), ("[", False),
    ("", False), ("a" * 1001, False)])
def test_topic_pattern_refuses_what_could_backtrack_without_bound(pattern, ok):
    from ingest_gateway.errors import BadRequest
    from ingest_gateway.http.topic_pattern import compile_topic_pattern

    if ok:
        assert compile_topic_pattern(pattern).pattern == pattern
    else:
        with pytest.raises(BadRequest):
            compile_topic_pattern(pattern)


def test_v3_produce_is_bounded_by_max_request_size_not_the_control_limit(gw):
    """v3 records are produce: a 2 MiB batch passes (max.control.request.size is 1 MiB),
    while a 2 MiB body to a control route is still refused before it is read."""
    value = base64.b64encode(b"x" * 1000).decode()
    entries = [{"id": str(i), "partition_id": 1, "value": {"type": "BINARY", "data": value}}
               for i in range(1600)]
    body = json.dumps({"entries": entries}).encode()
    assert len(body) > 2 * 1024 * 1024
    status, out = ask(gw, "POST", f"/v3/clusters/{gw.cluster}/topics/h/records:batch", body)
    assert status == 207 and len(out["successes"]) == 1600 and out["failures"] == []
    status, out = ask(gw, "POST", f"/v3/clusters/{gw.cluster}/topics", body)
    assert status == 413 and "max.control.request.size" in out["message"]
