"""Fetch, long-poll and consumer groups through a real gateway on 127.0.0.1
(subprocess, local and S3 store): the REST Proxy v2 shapes and the Python
Consumer in gateway mode."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid

import pyarrow as pa
import pytest
import urllib3

from ingest_gateway.client import Consumer
from ingest_gateway.client.cluster import ClusterRouter
from ingest_gateway.client.gateway_transport import HttpMembership
from ingest_gateway.errors import UnknownMemberId
from tests.ingest_gateway.consumers import drive
from jobs.gateway_process import GatewayProcess, wait_for
from tests.ingest_gateway.conftest import on_local_store
from tests.ingest_gateway.support import BINARY_V2, JSON_V2, produce

ARROW = "application/vnd.apache.arrow.stream"


def generation(c: Consumer) -> int:
    """The generation ``c`` was last assigned in (its group metadata)."""
    return c.group_metadata().generation


@pytest.fixture(scope="module")
def gateway(gateway_store):
    """conftest's gateway, but members here may have short sessions (1.5 s: a killed
    member's partitions move within the test), below Kafka's 6 s minimum."""
    url, options = gateway_store
    with GatewayProcess(url, options, settings={"gateway.linger.ms": 2,
                                                "gateway.group.min.session.timeout.ms": 100},
                        ) as gw:
        yield gw


@pytest.fixture
def topic6(gateway_log):
    name = f"c-{uuid.uuid4().hex[:10]}"
    gateway_log.create_topic(name, {"partitions": 6})
    return name


@on_local_store
def test_long_poll_is_woken_by_the_commit_that_brings_data(gateway, topic):
    produce(gateway, topic, 0, [b"old"])
    out = {}

    def fetch():
        t0 = time.monotonic()
        r = gateway.http.request("GET", f"{gateway.url}/topics/{topic}/partitions/0/messages"
                                 "?offset=1&count=10&wait_ms=60000", headers={"Accept": BINARY_V2})
        out["elapsed"], out["status"], out["body"] = time.monotonic() - t0, r.status, r.data

    th = threading.Thread(target=fetch)
    th.start()
    wait_for(lambda: gateway.request("GET", "/fetch/waiting")[1]["waiting"] >= 1,
             what="the fetch to park")
    produce(gateway, topic, 0, [b"new-1", b"new-2"])  # acks=all: committed when answered
    th.join(60)
    assert out["status"] == 200, out
    got = json.loads(out["body"])
    assert [(r["offset"], base64.b64decode(r["value"])) for r in got] == [(1, b"new-1"),
                                                                         (2, b"new-2")]
    # woken by the commit, not by the end of the 60 s wait
    assert out["elapsed"] < 30


@on_local_store
def test_messages_in_every_format_and_typed_errors(gateway, topic):
    produce(gateway, topic, 1, [{"n": 1}, "two", None], fmt=JSON_V2)
    base = f"/topics/{topic}/partitions/1/messages"
    status, body, headers = gateway.request("GET", f"{base}?offset=0&count=3",
                                            headers={"Accept": JSON_V2})
    assert status == 200 and headers["content-type"].startswith("application/vnd.kafka.v2+json")
    assert [r["value"] for r in body] == [{"n": 1}, "two", None]
    assert {r["topic"] for r in body} == {topic} and [r["offset"] for r in body] == [0, 1, 2]
    status, body, _ = gateway.request("GET", f"{base}?offset=1", headers={"Accept": BINARY_V2})
    assert [base64.b64decode(r["value"]) for r in body] == [b'"two"']  # count defaults to 1
    status, data, headers = gateway.request("GET", f"{base}?offset=0&count=10",
                                            headers={"Accept": ARROW})
    assert status == 200 and headers["content-type"] == ARROW
    table = pa.ipc.open_stream(data).read_all()
    assert table.column("offset").to_pylist() == [0, 1, 2]
    assert table.column("value").to_pylist() == [b'{"n":1}', b'"two"', None]
    # past the high watermark: 416 with log start and high watermark
    status, body, _ = gateway.request("GET", f"{base}?offset=9", headers={"Accept": BINARY_V2})
    assert status == 416 and body["error"] == "offset_out_of_range"
    assert (body["log_start_offset"], body["high_watermark"], body["offset"]) == (0, 3, 9)
    status, body, _ = gateway.request("GET", f"{base}?offset=0&wait_ms=0",
                                      headers={"Accept": "text/csv"})
    assert status == 415
    status, body, _ = gateway.request("GET", f"{base}?count=2")
    assert status == 400 and "offset" in body["message"]
    status, body, _ = gateway.request("GET", f"/topics/{topic}/partitions/7/messages?offset=0")
    assert status == 404 and body["error"] == "unknown_partition"
    status, body, _ = gateway.request("GET", "/topics/nope-x/partitions/0/messages?offset=0")
    assert status == 404 and body["error"] == "unknown_topic"
    status, body, _ = gateway.request("GET", f"/topics/{topic}/partitions/1/offsets")
    assert body == {"beginning_offset": 0, "end_offset": 3}


NOT_JSON = {"nan": b"NaN", "minus-infinity": b"-Infinity", "past-a-double": b"1e400",
            "lone-surrogate": b'"\\ud800"', "bytes": b"\xff\xfe\x00", "text": b"not json",
            "deep": b"[" * 100_000 + b"]" * 100_000}


@pytest.mark.parametrize("bad", list(NOT_JSON), ids=list(NOT_JSON))
@on_local_store
def test_a_record_that_is_not_json_answers_422_not_500_and_its_neighbours_are_served(
        gateway, topic, bad):
    # stored through the binary format, which takes any bytes
    produce(gateway, topic, 0, [b'{"a":1}', NOT_JSON[bad], b'"\\ud83d\\ude00 ok"'])
    base = f"/topics/{topic}/partitions/0/messages"
    status, body, _ = gateway.request("GET", f"{base}?offset=0&count=10",
                                      headers={"Accept": JSON_V2})
    assert status == 200 and [r["offset"] for r in body] == [0]  # the records before it
    status, body, _ = gateway.request("GET", f"{base}?offset=1&count=10",
                                      headers={"Accept": JSON_V2})
    assert status == 422 and body["error"] == "record_not_json", body
    assert (body["topic"], body["partition"], body["offset"]) == (topic, 0, 1)
    status, body, _ = gateway.request("GET", f"{base}?offset=2", headers={"Accept": JSON_V2})
    assert status == 200 and body[0]["value"] == "\U0001f600 ok"  # a surrogate pair is fine
    status, body, _ = gateway.request("GET", f"{base}?offset=1", headers={"Accept": BINARY_V2})
    assert status == 200 and base64.b64decode(body[0]["value"]) == NOT_JSON[bad]


@on_local_store
def test_a_key_that_is_not_json_answers_422(gateway, topic):
    status, body, _ = gateway.request(
        "POST", f"/topics/{topic}/partitions/2",
        body={"records": [{"key": base64.b64encode(b"Infinity").decode(), "value": None}]},
        content_type=BINARY_V2)
    assert status == 200, body
    status, body, _ = gateway.request("GET", f"/topics/{topic}/partitions/2/messages?offset=0",
                                      headers={"Accept": JSON_V2})
    assert status == 422 and "key" in body["message"] and body["offset"] == 0


@on_local_store
def test_rest_proxy_consumer_instance(gateway, topic):
    for p in range(3):
        produce(gateway, topic, p, [b"p%d-%d" % (p, i) for i in range(4)])
    group = f"rest-{uuid.uuid4().hex[:8]}"
    status, body, _ = gateway.request("POST", f"/consumers/{group}",
                                      body={"name": "c1", "format": "binary",
                                            "auto.offset.reset": "earliest",
                                            "auto.commit.enable": "false"},
                                      content_type="application/vnd.kafka.v2+json")
    assert status == 200 and body["instance_id"] == "c1"
    assert body["base_uri"].endswith(f"/consumers/{group}/instances/c1")
    inst = f"/consumers/{group}/instances/c1"
    status, _, _ = gateway.request("POST", f"{inst}/subscription", body={"topics": [topic]})
    assert status == 204
    assert gateway.request("GET", f"{inst}/subscription")[1] == {"topics": [topic]}
    seen = []
    wait_for(lambda: seen.extend(gateway.request("GET", f"{inst}/records?timeout=200",
                                                 headers={"Accept": BINARY_V2})[1])
             or len(seen) >= 12, what="all 12 records")
    assert sorted((r["partition"], r["offset"]) for r in seen) == \
        [(p, o) for p in range(3) for o in range(4)]
    status, _, _ = gateway.request("POST", f"{inst}/offsets", body={})  # commit all consumed
    assert status == 204
    status, body, _ = gateway.request("GET", f"{inst}/offsets")
    assert sorted((o["partition"], o["offset"]) for o in body["offsets"]) == [(0, 4), (1, 4), (2, 4)]
    status, body, _ = gateway.request("GET", f"/groups/{group}")
    assert status == 200 and len(body["members"]) == 1
    assert {p["partition"]: p["lag"] for p in body["partitions"]} == {0: 0, 1: 0, 2: 0}
    assert gateway.request("DELETE", inst)[0] == 204
    status, body, _ = gateway.request("GET", f"{inst}/records")
    assert status == 404 and body["error"] == "unknown_consumer_instance"
    status, body, _ = gateway.request("POST", "/consumers/bad%20name", body={})
    assert status == 400 and body["error"] == "invalid_group_id"


# -- the Python Consumer through the gateway ------------------------------------------------
def member(gw, client_id, **kw):
    kw.setdefault("auto_offset_reset", "earliest")
    return Consumer(gateway=gw.url, client_id=client_id, session_timeout_ms=1500,
                    heartbeat_interval_ms=50, fetch_max_wait_ms=50, enable_auto_commit=False, **kw)


def balanced(cs, n):
    return (all(len(c.assignment()) == n for c in cs)
            and len({generation(c) for c in cs}) == 1)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
@on_local_store
def test_group_of_three_over_six_partitions_gets_two_each(gateway, topic6, strategy):
    group = f"g-{uuid.uuid4().hex[:8]}"
    cs = [member(gateway, f"c{i}", partition_assignment_strategy=strategy) for i in range(3)]
    for c in cs:
        c.subscribe([topic6], group=group)
    drive(cs, lambda: balanced(cs, 2) and gateway.request("GET", f"/groups/{group}")[1]["state"]
          == "Stable", "2 partitions each")
    assert sorted(tp for c in cs for tp in c.assignment()) == [(topic6, p) for p in range(6)]
    for c in cs:
        c.close()
    status, body, _ = gateway.request("GET", f"/groups/{group}")
    assert body["state"] == "Empty" and body["members"] == []


@on_local_store
def test_killed_member_loses_partitions_others_resume_at_least_once(gateway, topic6):
    group = f"g-{uuid.uuid4().hex[:8]}"
    for p in range(6):
        produce(gateway, topic6, p, [b"%d-%d" % (p, i) for i in range(20)])
    everything = {(p, o) for p in range(6) for o in range(20)}
    processed = []

    def process_and_commit(c, recs):
        processed.extend((r.partition, r.offset) for r in recs)
        if recs:
            c.commit()

    a, b = member(gateway, "a", max_poll_records=5), member(gateway, "b", max_poll_records=5)
    a.subscribe(topic6, group=group)
    b.subscribe(topic6, group=group)
    drive([a, b], lambda: balanced([a, b], 3), "a balanced group", sink=process_and_commit)
    drive([a, b], lambda: any(tp in b.assignment() for tp in [(topic6, p) for p, _ in processed])
          and len(processed) >= 20, "progress", sink=process_and_commit)
    last = b.poll(5)  # processed, never committed: the only records allowed twice
    processed.extend((r.partition, r.offset) for r in last)
    uncommitted = {(r.partition, r.offset) for r in last}
    b_member, b_generation = b.group_metadata().member_id, generation(b)
    b._abandon()  # killed: no leave, no commit, no heartbeats
    drive([a], lambda: len(a.assignment()) == 6 and set(processed) >= everything,
          "a to take over after b's session timeout", sink=process_and_commit)
    seen, dups = set(), set()
    for x in processed:
        (dups if x in seen else seen).add(x)
    assert seen == everything and dups <= uncommitted
    # the zombie's commit after the rebalance is rejected
    with pytest.raises(UnknownMemberId):
        HttpMembership(ClusterRouter(gateway.url), group).commit({(topic6, 0): 1}, b_member,
                                                                b_generation)
    a.close()
    status, body, _ = gateway.request("GET", f"/groups/{group}/offsets")
    assert {(o["partition"], o["offset"]) for o in body["offsets"]} == {(p, 20) for p in range(6)}


@on_local_store
def test_two_groups_publish_subscribe_and_queue(gateway, topic6):
    q = f"q-{uuid.uuid4().hex[:8]}"
    other = f"o-{uuid.uuid4().hex[:8]}"
    q1, q2, pub = member(gateway, "q1"), member(gateway, "q2"), member(gateway, "pub")
    q1.subscribe(topic6, group=q)
    q2.subscribe(topic6, group=q)
    pub.subscribe(topic6, group=other)
    drive([q1, q2], lambda: balanced([q1, q2], 3), "the queue group to balance")
    drive([pub], lambda: len(pub.assignment()) == 6, "the other group")
    for p in range(6):
        produce(gateway, topic6, p, [b"%d-%d" % (p, i) for i in range(5)])
    got = {"q1": [], "q2": [], "pub": []}

    def sink(c, recs):
        got[c.client_id].extend((r.partition, r.offset) for r in recs)

    drive([q1, q2, pub], lambda: len(got["pub"]) == 30 and len(got["q1"]) + len(got["q2"]) == 30,
          "both groups to read everything", sink=sink)
    everything = {(p, o) for p in range(6) for o in range(5)}
    assert set(got["pub"]) == everything
    assert set(got["q1"]) | set(got["q2"]) == everything
    assert not set(got["q1"]) & set(got["q2"])
    for c in (q1, q2, pub):
        c.close()


@on_local_store
def test_consumer_iterator_and_batches_through_gateway(gateway, topic):
    produce(gateway, topic, 2, [b"a", b"b", b"c"])
    with Consumer(gateway=gateway.url, auto_offset_reset="earliest", fetch_max_wait_ms=100) as c:
        c.assign([(topic, 2)])
        assert c.watermarks((topic, 2)) == (0, 3)
        it = iter(c)
        assert [next(it).value for _ in range(3)] == [b"a", b"b", b"c"]
        c.seek((topic, 2), 1)
        b = c.poll_batches(5)
        assert [x.records.column("value").to_pylist() for x in b] == [[b"b", b"c"]]
        c.seek((topic, 2), 50)  # out of range -> earliest
        assert [r.offset for r in c.poll(5)] == [0, 1, 2]


def test_direct_reads_with_gateway_membership(gateway, gateway_store, topic6):
    url, options = gateway_store
    group = f"d-{uuid.uuid4().hex[:8]}"
    produce(gateway, topic6, 3, [b"x"])
    c = Consumer(store=url, storage_options=options, gateway=gateway.url, group_id=group,
                 auto_offset_reset="earliest", fetch_max_wait_ms=50, heartbeat_interval_ms=100)
    c.subscribe([topic6])
    got = []
    drive([c], lambda: got, "the record", sink=lambda _c, recs: got.extend(recs))
    assert [(r.partition, r.value) for r in got] == [(3, b"x")]
    c.commit()
    c.close()
    status, body, _ = gateway.request("GET", f"/groups/{group}/offsets")
    assert {(o["partition"], o["offset"]) for o in body["offsets"]} >= {(3, 1)}


@on_local_store
def test_group_routes_refuse_bad_input(gateway, topic):
    assert gateway.request("POST", "/groups/g1/members", body={"topics": ["nope-y"]})[0] == 404
    status, body, _ = gateway.request("POST", "/groups/g1/members", body={"topics": "x"})
    assert status == 400
    status, body, _ = gateway.request("POST", "/groups/g1/members/zzz/heartbeat",
                                      body={"generation": 1})
    assert status == 404 and body["error"] == "unknown_member_id"
    status, body, _ = gateway.request("POST", "/groups/g1/offsets",
                                      body={"offsets": [{"topic": topic, "partition": 0,
                                                         "offset": 99}]})
    assert status == 400 and body["error"] == "invalid_commit_offset"
    status, body, _ = gateway.request("POST", "/fetch", body={"partitions": [
        {"topic": topic, "partition": 0, "offset": 0}], "wait_ms": -1})
    assert status == 400
    status, body, _ = gateway.request("GET", "/groups/never-seen-group")
    assert status == 404 and body["error"] == "unknown_group"
    r = urllib3.PoolManager().request("POST", f"{gateway.url}/groups/g1/offsets", body=b"{nope",
                                      headers={"Content-Type": "application/json"})
    assert r.status == 400
    # untyped, or typed as a cross-site page may send it without a preflight: 415
    for headers in ({}, {"Content-Type": "text/plain"}):
        r = urllib3.PoolManager().request("POST", f"{gateway.url}/groups/g1/offsets",
                                          body=b'{"offsets": []}', headers=headers)
        assert r.status == 415 and r.json()["error_code"] == 41501, (headers, r.data)


def test_restarted_gateway_knows_committed_offsets(gateway, topic6):
    group = f"r-{uuid.uuid4().hex[:8]}"
    for p in range(6):
        produce(gateway, topic6, p, [b"a", b"b", b"c"])
    c = member(gateway, "before")
    c.subscribe(topic6, group=group)
    got = []
    drive([c], lambda: len(got) >= 18, "everything", sink=lambda _c, r: got.extend(r))
    c.commit(offsets={(topic6, p): 2 for p in range(6)})
    c._abandon()  # no leave: the restart must not depend on a clean goodbye
    gateway.restart()
    status, body, _ = gateway.request("GET", f"/groups/{group}/offsets")
    assert {(o["partition"], o["offset"]) for o in body["offsets"]} == {(p, 2) for p in range(6)}
    c2 = member(gateway, "after")
    c2.subscribe(topic6, group=group)
    again = []
    drive([c2], lambda: len(again) >= 6, "the uncommitted tail", sink=lambda _c, r: again.extend(r))
    assert sorted((r.partition, r.offset) for r in again) == [(p, 2) for p in range(6)]
    c2.close()


@on_local_store
def test_min_bytes_waits_for_enough_and_max_bytes_cuts(gateway, topic):
    produce(gateway, topic, 0, [b"x" * 100])
    out = {}

    def fetch():
        t0 = time.monotonic()
        status, data, _ = gateway.request(
            "GET", f"/topics/{topic}/partitions/0/messages?offset=0&count=1000"
                   "&min_bytes=10000&wait_ms=60000", headers={"Accept": ARROW})
        out["elapsed"], out["status"], out["data"] = time.monotonic() - t0, status, data

    th = threading.Thread(target=fetch)
    th.start()
    # 100 bytes are there, not 10,000: the fetch parks
    wait_for(lambda: gateway.request("GET", "/fetch/waiting")[1]["waiting"] >= 1,
             what="the fetch to park")
    produce(gateway, topic, 0, [b"y" * 100] * 200)
    th.join(60)
    assert out["status"] == 200 and out["elapsed"] < 30
    table = pa.ipc.open_stream(out["data"]).read_all()
    assert table.num_rows == 201  # woken by the commit that brought enough
    status, data, _ = gateway.request("GET", f"/topics/{topic}/partitions/0/messages"
                                             "?offset=0&count=1000&max_bytes=1",
                                      headers={"Accept": ARROW})
    assert pa.ipc.open_stream(data).read_all().num_rows == 1  # at least one record
    status, data, _ = gateway.request("GET", f"/topics/{topic}/partitions/0/messages"
                                             "?offset=0&count=1000&max_bytes=5000",
                                      headers={"Accept": ARROW})
    assert 1 < pa.ipc.open_stream(data).read_all().num_rows < 201


@on_local_store
def test_idle_rest_instance_expires_and_leaves_its_group(gateway, topic):
    group = f"idle-{uuid.uuid4().hex[:8]}"
    status, body, _ = gateway.request("POST", f"/consumers/{group}",
                                      body={"name": "sleepy", "session.timeout.ms": "abc"})
    assert status == 400 and "session.timeout.ms" in body["message"]
    status, _, _ = gateway.request("POST", f"/consumers/{group}",
                                   body={"name": "sleepy", "consumer.instance.timeout.ms": 200})
    assert status == 200
    inst = f"/consumers/{group}/instances/sleepy"
    assert gateway.request("POST", f"{inst}/subscription", body={"topics": [topic]})[0] == 204
    assert len(gateway.request("GET", f"/groups/{group}")[1]["members"]) == 1
    # nobody touches it: it expires, and the group loses its member (the probe itself
    # touches a live instance, so it probes less often than the 200 ms timeout)
    wait_for(lambda: gateway.request("GET", f"{inst}/subscription")[0] == 404,
             what="the idle instance to expire", interval=0.3)
    wait_for(lambda: gateway.request("GET", f"/groups/{group}")[1]["members"] == [],
             what="the member to leave")
