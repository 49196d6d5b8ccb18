"""REST Proxy v2 consumer instances (issue 11): they expire after
consumer.instance.timeout.ms of no use without any request arriving, and a record
that is not strict JSON is never skipped: not by the position, not by an auto-commit.

Expiry runs against a gateway served in this process (uvicorn on a thread, real
sockets) whose clock the test sets, so no test waits for time to pass.
"""

from __future__ import annotations

import base64
import threading
import uuid

import pytest

import conf
from ingest_gateway.http.app import create_app
from ingest_gateway.server.consumer_hub import ConsumerHub
from log_layout import open_log
from jobs.gateway_process import GatewayProcess, wait_for
from tests.ingest_gateway.support import produce
from tests.clock import Clock

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
TIMEOUT_MS = 60_000  # the gateway's consumer.instance.timeout.ms here


class InProcessGateway(GatewayProcess):
    """The gateway app on uvicorn in a thread of this process, with ``clock`` as its
    clock (``create_app(now_ms=)``), so its consumer hub can be looked at directly."""

    def __init__(self, store_url: str, clock: Clock, settings: dict):
        super().__init__(store_url, settings=settings)
        self.clock = clock

    def start(self) -> "InProcessGateway":
        import uvicorn

        settings = conf.load({"store.url": self.store_url, **self.settings})
        self.app = create_app(settings, open_log(self.store_url, fsync=False), now_ms=self.clock)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, lifespan="on",
                                loop="asyncio", ws="none", log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="gateway", daemon=True)
        self.thread.start()
        wait_for(lambda: self.server.started, timeout=30, what="the in-process gateway")
        return self

    def stop(self, timeout: float = 30) -> int:
        self.server.should_exit = True
        self.thread.join(timeout)
        return 0

    def kill(self) -> None:
        self.stop()

    @property
    def hub(self) -> ConsumerHub:
        return self.app.state.gateway.hub()


@pytest.fixture
def clocked(tmp_path):
    url = str(tmp_path / "store")
    lg = open_log(url, fsync=False)
    lg.create_topic("t", {"partitions": 2})
    clock = Clock()
    with InProcessGateway(url, clock, {"gateway.consumer.instance.timeout.ms": TIMEOUT_MS}) as gw:
        yield gw


def test_idle_instance_expires_and_leaves_its_group_without_a_request(clocked):
    gw = clocked
    status, _, _ = gw.request("POST", "/consumers/g", body={"name": "idle",
                                                            "session.timeout.ms": 1_800_000})
    assert status == 200
    inst = "/consumers/g/instances/idle"
    assert gw.request("POST", f"{inst}/subscription", body={"topics": ["t"]})[0] == 204
    assert len(gw.request("GET", "/groups/g")[1]["members"]) == 1
    gw.clock.t += TIMEOUT_MS - 1
    assert gw.request("GET", f"{inst}/subscription")[0] == 200  # still there: used again now
    gw.clock.t += TIMEOUT_MS
    # no request to any instance: the hub's own expiry drops it and leaves the group
    wait_for(lambda: ("g", "idle") not in gw.hub.instances, timeout=30,
             what="the idle instance to expire")
    wait_for(lambda: gw.hub.coordinator.groups_in_memory() == 0, timeout=30,
             what="the instance's member to leave")
    assert gw.request("GET", "/groups/g")[1]["members"] == []
    status, body, _ = gw.request("GET", f"{inst}/subscription")
    assert status == 404 and body["error"] == "unknown_consumer_instance"


def test_an_instance_past_its_timeout_is_gone_for_the_next_request(clocked):
    gw = clocked
    assert gw.request("POST", "/consumers/g", body={"name": "a"})[0] == 200
    gw.clock.t += TIMEOUT_MS  # whether or not the periodic expiry has run yet
    assert gw.request("GET", "/consumers/g/instances/a/subscription")[0] == 404
    assert gw.request("POST", "/consumers/g", body={"name": "a"})[0] == 200  # name free again


def test_instance_timeout_may_be_shorter_than_the_gateways_not_longer(clocked):
    gw = clocked
    status, body, _ = gw.request("POST", "/consumers/g", body={
        "name": "long", "consumer.instance.timeout.ms": TIMEOUT_MS + 1})
    assert status == 400 and str(TIMEOUT_MS) in body["message"]
    status, _, _ = gw.request("POST", "/consumers/g", body={
        "name": "short", "consumer.instance.timeout.ms": 1000})
    assert status == 200
    gw.clock.t += 1000
    wait_for(lambda: ("g", "short") not in gw.hub.instances, timeout=30,
             what="the instance to expire after its own 1000 ms")


def test_an_idle_subscribed_instance_keeps_its_membership_and_positions(clocked):
    """Issue 16: an instance was dropped from its group after session.timeout.ms (10 s)
    unless it called a non-standard heartbeat; the hub now heartbeats it in the
    background (Kafka's heartbeat thread), for as long as the instance lives."""
    gw = clocked
    produce(gw, "t", 0, [b"a", b"b"])
    assert gw.request("POST", "/consumers/g", body={
        "name": "keep", "auto.offset.reset": "earliest"})[0] == 200  # session: 10 s
    inst = "/consumers/g/instances/keep"
    assert gw.request("POST", f"{inst}/subscription", body={"topics": ["t"]})[0] == 204
    status, first, _ = gw.request("GET", f"{inst}/records?timeout=0",
                                  headers={"Accept": BINARY_V2})
    assert status == 200 and len(first) == 2
    live = gw.hub.instances[("g", "keep")]
    member, generation = live.member_id, live.generation
    for _ in range(10):  # 50 s of idleness, 5 s at a time; no request at all
        gw.clock.t += 5_000
        wait_for(lambda: live.last_sync_ms == gw.clock.t, timeout=30,
                 what="the background heartbeat at the new time")
    members = gw.request("GET", "/groups/g")[1]["members"]
    assert [m["member_id"] for m in members] == [member]  # not expired after 50 s > 10 s
    produce(gw, "t", 0, [b"c"])
    status, after, _ = gw.request("GET", f"{inst}/records?timeout=1000",
                                  headers={"Accept": BINARY_V2})
    assert status == 200 and [base64.b64decode(r["value"]) for r in after] == [b"c"]
    assert (live.member_id, live.generation) == (member, generation)  # no rejoin, no rewind
    assert gw.request("POST", f"{inst}/heartbeat")[0] == 200  # the old call still works


def test_a_long_poll_longer_than_the_session_keeps_the_membership(clocked):
    """A records request holds its instance while it waits (the background heartbeat
    skips it); the wait itself heartbeats every interval, so a 7 s long-poll with a
    6 s session keeps the member (the hub's clock moves 4 s after each heartbeat)."""
    gw = clocked
    assert gw.request("POST", "/consumers/g", body={
        "name": "poll", "session.timeout.ms": 6_000})[0] == 200
    inst = "/consumers/g/instances/poll"
    assert gw.request("POST", f"{inst}/subscription", body={"topics": ["t"]})[0] == 204
    live = gw.hub.instances[("g", "poll")]
    member = live.member_id
    answer: list = []
    poll = threading.Thread(target=lambda: answer.append(gw.request(
        "GET", f"{inst}/records?timeout=7000", headers={"Accept": BINARY_V2})))
    poll.start()
    wait_for(lambda: live.lock.locked(), timeout=30, what="the long-poll to hold the instance")
    for _ in range(2):  # 8 s of the hub's clock in all, more than the session
        gw.clock.t += 4_000
        wait_for(lambda: live.last_sync_ms == gw.clock.t or not poll.is_alive(), timeout=30,
                 what="a heartbeat from inside the long-poll")
    poll.join(30)
    assert answer and answer[0][0] == 200 and answer[0][1] == []
    members = gw.request("GET", "/groups/g")[1]["members"]
    assert [m["member_id"] for m in members] == [member] == [live.member_id]


# -- records that cannot be answered as JSON ------------------------------------------------
def _instance(gw, group, **kw):
    name = f"i-{uuid.uuid4().hex[:6]}"
    status, body, _ = gw.request("POST", f"/consumers/{group}", body={
        "name": name, "format": "json", "auto.offset.reset": "earliest", **kw})
    assert status == 200, body
    return f"/consumers/{group}/instances/{name}"


def _records(gw, inst, accept=JSON_V2):
    return gw.request("GET", f"{inst}/records?timeout=0", headers={"Accept": accept})


def test_instance_stops_at_a_record_that_is_not_json_and_never_commits_past_it(gateway, gateway_log):
    topic = f"j-{uuid.uuid4().hex[:8]}"
    gateway_log.create_topic(topic, {"partitions": 1})
    produce(gateway, topic, 0, [b"1", b"2", b"NaN", b"3"])  # binary: stored as given
    group = f"g-{uuid.uuid4().hex[:8]}"
    inst = _instance(gateway, group)  # auto-commit on
    assert gateway.request("POST", f"{inst}/subscription", body={"topics": [topic]})[0] == 204
    status, body, _ = _records(gateway, inst)
    assert status == 200 and [r["value"] for r in body] == [1, 2]  # the records before it
    for _ in range(2):  # asked again: the same record, the same answer
        status, body, _ = _records(gateway, inst)
        assert status == 422 and body["error"] == "record_not_json", body
        assert (body["topic"], body["partition"], body["offset"]) == (topic, 0, 2)
        assert body["error_code"] == 42206 and "binary" in body["message"]
    assert gateway.request("POST", f"{inst}/offsets", body={})[0] == 204  # commit consumed
    status, body, _ = gateway.request("GET", f"/groups/{group}/offsets")
    assert body["offsets"][0]["offset"] == 2  # not past the record never delivered
    # the client reads it as binary: REST Proxy answers the instance's own format only
    # (406, 40601), so with a binary instance of the group, from the committed offset ...
    status, body, _ = _records(gateway, inst, accept=BINARY_V2)
    assert status == 406 and body["error_code"] == 40601
    assert gateway.request("DELETE", inst)[0] == 204
    binary = _instance(gateway, group, format="binary")
    assert gateway.request("POST", f"{binary}/subscription", body={"topics": [topic]})[0] == 204
    status, body, _ = _records(gateway, binary, accept=BINARY_V2)
    assert status == 200 and [base64.b64decode(r["value"]) for r in body] == [b"NaN", b"3"]
    # ... or, in a second instance of another group, seeks past it
    other = _instance(gateway, f"h-{uuid.uuid4().hex[:8]}")
    assert gateway.request("POST", f"{other}/subscription", body={"topics": [topic]})[0] == 204
    _records(gateway, other)
    status, _, _ = gateway.request("POST", f"{other}/positions", body={
        "offsets": [{"topic": topic, "partition": 0, "offset": 3}]})
    assert status == 204
    status, body, _ = _records(gateway, other)
    assert status == 200 and [r["value"] for r in body] == [3]
    status, body, _ = gateway.request("POST", f"{other}/positions", body={
        "offsets": [{"topic": topic, "partition": 1, "offset": 0}]})
    assert status == 409 and body["error"] == "partition_not_assigned"


def test_a_topic_pattern_picks_up_a_new_matching_topic(gateway, gateway_log):
    """Kafka's pattern subscription follows the topics: one created later that matches
    joins the assignment (its matches are listed again every PATTERN_REFRESH_S)."""
    prefix = f"p{uuid.uuid4().hex[:6]}"
    gateway_log.create_topic(f"{prefix}-a", {"partitions": 1})
    gateway_log.create_topic(f"x{prefix}-b", {"partitions": 1})  # does not match whole
    inst = _instance(gateway, f"g-{uuid.uuid4().hex[:8]}")
    assert gateway.request("POST", f"{inst}/subscription",
                           body={"topic_pattern": f"{prefix}-.*"})[0] == 204
    assert gateway.request("GET", f"{inst}/subscription")[1] == {"topics": [f"{prefix}-a"]}
    gateway_log.create_topic(f"{prefix}-c", {"partitions": 2})
    produce(gateway, f"{prefix}-c", 1, [b"1"])

    def assigned() -> set:
        body = gateway.request("GET", f"{inst}/assignments")[1]
        return {(p["topic"], p["partition"]) for p in body["partitions"]}

    wait_for(lambda: len(assigned()) == 3, timeout=30, what="the new topic's partitions")
    assert assigned() == {(f"{prefix}-a", 0), (f"{prefix}-c", 0), (f"{prefix}-c", 1)}
    status, body, _ = _records(gateway, inst)
    assert status == 200 and [(r["topic"], r["value"]) for r in body] == [(f"{prefix}-c", 1)]
