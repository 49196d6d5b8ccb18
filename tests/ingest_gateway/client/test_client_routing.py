"""The clients' routing (``client.cluster``) against fake gateways on real sockets.

The fakes (``fake_gateways``) answer the documented shapes of ``GET /metadata``
and the 503 NOT_LEADER / NOT_COORDINATOR refusals, so each rule is checked alone:
resolution, caching, failover between bootstrap servers, hints, rate limits, and
the producer's and the group membership's retries. The same paths against real
gateways in cluster mode are in ``server/test_cluster_failover``.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from ingest_gateway.client import Consumer, Producer
from ingest_gateway.client.cluster import ClusterRouter, parse_bootstrap
from ingest_gateway.client.gateway_transport import HttpMembership
from ingest_gateway.errors import NotCoordinator
from jobs.gateway_process import free_port
from log_layout.errors import UnknownTopic
from tests.ingest_gateway.client.fake_gateways import (
    FakeGateway,
    endpoint,
    metadata,
    not_coordinator,
    not_leader,
    produce_ok,
    topic_doc,
)


def dead_url() -> str:
    """A loopback address nothing listens on: connections are refused at once."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def gateways():
    with FakeGateway() as a, FakeGateway() as b:
        yield a, b


# -- bootstrap lists ------------------------------------------------------------------------
def test_bootstrap_lists_are_normalised():
    assert parse_bootstrap("127.0.0.1:1, http://h:2/ ,,https://x:3,") == [
        "http://127.0.0.1:1", "http://h:2", "https://x:3"]
    assert parse_bootstrap(["a:1", "http://a:1"]) == ["http://a:1"]
    assert parse_bootstrap(("b:2",)) == ["http://b:2"]


@pytest.mark.parametrize("bad, words", [
    ("", "names no gateway"), (" , ", "names no gateway"), ([], "names no gateway"),
    ("a:1,ftp://x", "'ftp://x'"), (["http://"], "'http://'"), ("a:1,:80", "':80'"),
])
def test_bad_bootstrap_lists_are_value_errors_naming_the_entry(bad, words):
    for make in (parse_bootstrap, ClusterRouter, Producer, lambda b: Consumer(gateway=b),
                 lambda b: Consumer(bootstrap_servers=b)):
        with pytest.raises(ValueError, match=re.escape(words)):
            make(bad)


def test_non_string_entries_and_two_addresses_are_refused():
    with pytest.raises(TypeError, match="strings"):
        parse_bootstrap(["a:1", 8082])
    with pytest.raises(ValueError, match="not both"):
        Consumer(gateway="a:1", bootstrap_servers="a:1")


# -- resolution and caching ------------------------------------------------------------------
def test_leaders_and_coordinators_resolve_and_are_cached(gateways):
    a, b = gateways
    a.on("GET", "/metadata", metadata({"t": [endpoint(None), endpoint(b, 1), None]},
                                      {"g": endpoint(b, 1)}, gateways=[a, b]))
    with ClusterRouter(a.url.removeprefix("http://"), retry_backoff_ms=60_000) as router:
        assert router.leader("t", 0).base == a.url  # url null: the gateway that answered
        assert router.leader("t", 1).base == b.url
        assert router.leader("t", 2) is None  # no leader now: ask again later
        assert router.coordinator("g").base == b.url
        for _ in range(1000):
            assert router.leader("t", 1) is router.session(b.url)  # one Session per gateway
        asked = a.asked("GET", "/metadata")
        assert len(asked) == 2  # one per name never asked about (topic t, then group g)
        assert asked[0].query == {"topics": "t"}
        assert asked[1].query == {"topics": "t", "groups": "g"}  # everything known, again
        assert router.gateways() == [a.url, b.url]  # the metadata named b: known now
        assert router.generation == 1


def test_unknown_topics_and_partitions_go_to_the_gateway_that_answered(gateways):
    a, _ = gateways
    a.on("GET", "/metadata", metadata({"t": [endpoint(None)]}))
    with ClusterRouter(a.url) as router:
        with pytest.raises(UnknownTopic):
            router.partition_count("nope")
        assert router.partition_count("t") == 1
        # it answers 404 (or auto-creates the topic, or names the leader) itself
        assert router.leader("nope", 0).base == a.url
        assert router.leader("t", 7).base == a.url


def test_metadata_comes_from_the_next_bootstrap_server_when_one_is_down(gateways):
    a, _ = gateways
    a.on("GET", "/metadata", metadata({"t": [endpoint(None)]}))
    dead = dead_url()
    with ClusterRouter([dead, a.url]) as router:
        assert router.leader("t", 0).base == a.url
        assert router.gateways() == [a.url, dead]  # the one that answered is asked first


def test_a_gateway_too_slow_to_answer_metadata_is_passed_over(gateways):
    a, b = gateways

    def frozen(request):
        time.sleep(3)
        return metadata({"t": [endpoint(a, 0)]})(request)

    a.on("GET", "/metadata", frozen)
    b.on("GET", "/metadata", metadata({"t": [endpoint(b, 1)]}))
    with ClusterRouter([a.url, b.url], request_timeout_s=0.3) as router:
        start = time.monotonic()
        assert router.leader("t", 0).base == b.url
        assert time.monotonic() - start < 2
        assert router.gateways() == [b.url, a.url]


def test_no_gateway_reachable_is_an_oserror_naming_them():
    dead = dead_url()
    with ClusterRouter(dead) as router:
        assert router.leader("t", 0) is None and isinstance(router.last_error, OSError)
        with pytest.raises(OSError, match=re.escape(dead)):
            router.refresh(topics=["t"])
        assert not router.reached


def test_gateways_named_by_the_metadata_survive_the_bootstrap_gateway(gateways):
    a, b = gateways
    for gw in (a, b):
        gw.on("GET", "/metadata", metadata({"t": [endpoint(a, 0)]}, gateways=[a, b]))
    with ClusterRouter(a.url, retry_backoff_ms=0) as router:
        assert router.leader("t", 0).base == a.url
        a.stop()
        b.on("GET", "/metadata", metadata({"t": [endpoint(b, 1)]}, gateways=[b]))
        router.invalidate(failed=router.session(a.url))  # what a failed request does
        assert router.leader("t", 0).base == b.url
        assert len(b.asked("GET", "/metadata")) == 1


def test_a_refusal_naming_the_leader_is_followed_without_asking_for_metadata(gateways):
    a, b = gateways
    a.on("GET", "/metadata", metadata({"t": [endpoint(a, 0)]}, {"g": endpoint(a, 0)}))
    with ClusterRouter(a.url, retry_backoff_ms=60_000) as router:
        asked = router.leader("t", 0)
        assert router.coordinator("g") is asked
        assert router.invalidate(topic="t", partition=0, hint=endpoint(b, 1), asked=asked)
        assert router.invalidate(group="g", hint=endpoint(b, 1), asked=asked)
        assert router.leader("t", 0).base == b.url and router.coordinator("g").base == b.url
        assert len(a.asked("GET", "/metadata")) == 2  # t, then g: none for the hints
        # A hint naming nobody usable (no gateway in that slot, the gateway asked, or
        # "the gateway you asked" from a standalone one) forgets the entry instead.
        b_session = router.leader("t", 0)
        for hint in (None, {"slot": 2, "url": None}, {"slot": None, "url": None},
                     endpoint(b, 1)):
            router._leaders[("t", 0)] = b_session
            assert router.invalidate(topic="t", partition=0, hint=hint,
                                     asked=b_session) is False
            assert ("t", 0) not in router._leaders


def test_refreshes_are_rate_limited_and_metadata_ages(gateways):
    a, _ = gateways
    a.on("GET", "/metadata", metadata({"t": [None]}))  # no leader: every lookup misses
    with ClusterRouter(a.url, retry_backoff_ms=500) as router:
        start = time.monotonic()
        for _ in range(50):
            assert router.leader("t", 0) is None
        if time.monotonic() - start < 0.45:
            assert len(a.asked("GET", "/metadata")) == 1
        time.sleep(0.55)
        assert router.leader("t", 0) is None
        assert len(a.asked("GET", "/metadata")) == 2
    a.on("GET", "/metadata", metadata({"t": [endpoint(None)]}))
    with ClusterRouter(a.url, retry_backoff_ms=0, metadata_max_age_ms=100) as router:
        before = len(a.asked("GET", "/metadata"))
        router.leader("t", 0)
        router.leader("t", 0)
        time.sleep(0.15)
        router.leader("t", 0)
        assert len(a.asked("GET", "/metadata")) - before == 2  # first, then once aged


# -- the producer --------------------------------------------------------------------------
def test_producer_follows_not_leader_to_the_named_gateway_with_the_same_sequence(gateways):
    a, b = gateways
    a.on("GET", "/metadata", metadata({"t": [endpoint(a, 0)]}, gateways=[a, b]))
    a.on("GET", "/topics/t", topic_doc("t", 1))
    a.on("POST", "/topics/t/partitions/0", not_leader(endpoint(b, 1)))
    b.on("POST", "/topics/t/partitions/0", produce_ok())
    with Producer(a.url, linger_ms=0, retry_backoff_ms=60_000) as producer:
        assert producer.partitions_for("t") == 1
        assert producer.send("t", b"x", partition=0).result(10).offset == 0
        assert producer.send("t", b"y", partition=0).result(10).offset == 1
    [refused] = a.asked("POST", "/topics/t")
    first, second = b.asked("POST", "/topics/t")
    assert refused.body == first.body
    assert {k: refused.query[k] for k in ("producer_id", "producer_epoch", "sequence")} == \
        {k: first.query[k] for k in ("producer_id", "producer_epoch", "sequence")}
    assert first.query["sequence"] == "0" and second.query["sequence"] == "1"
    # the refusal named b: no metadata round trip, and no backoff (60 s) either
    assert len(a.asked("GET", "/metadata")) == 1


def test_producer_asks_for_metadata_after_a_dead_leader_or_an_unnamed_one(gateways):
    a, b = gateways
    dead = dead_url()
    answers = iter([{"slot": 0, "url": dead}, endpoint(a, 1)])
    moved = metadata({"t": [endpoint(b, 2)]})

    def leader_then_moved(request):
        lead = next(answers, None)
        return moved(request) if lead is None else metadata({"t": [lead]})(request)

    a.on("GET", "/metadata", leader_then_moved)
    a.on("GET", "/topics/t", topic_doc("t", 1))
    a.on("POST", "/topics/t/partitions/0", not_leader(None))  # leader unknown: ask again
    b.on("POST", "/topics/t/partitions/0", produce_ok())
    with Producer(a.url, linger_ms=0, retry_backoff_ms=5) as producer:
        assert producer.send("t", b"x", partition=0).result(10).offset == 0
    assert [r.query["sequence"] for r in a.asked("POST", "/topics/t")] == ["0"]
    assert [r.query["sequence"] for r in b.asked("POST", "/topics/t")] == ["0"]
    assert len(a.asked("GET", "/metadata")) == 3


def test_producer_reads_partition_counts_from_any_reachable_gateway(gateways):
    a, _ = gateways
    a.on("GET", "/topics/t", topic_doc("t", 4))
    with Producer(f"{dead_url()},{a.url}") as producer:
        assert producer.partitions_for("t") == 4


# -- group calls ---------------------------------------------------------------------------
def test_group_calls_follow_the_coordinator(gateways):
    a, b = gateways
    a.on("GET", "/metadata", metadata(groups={"g": endpoint(a, 0)}, gateways=[a, b]))
    a.on("POST", "/groups/g", not_coordinator(endpoint(b, 1)))
    a.on("GET", "/groups/g", not_coordinator(endpoint(b, 1)))
    b.on("POST", "/groups/g/offsets", lambda r: (204, b""))
    b.on("GET", "/groups/g/offsets", lambda r: (200, {"offsets": [
        {"topic": "t", "partition": 0, "offset": 5}]}))
    with ClusterRouter(a.url, retry_backoff_ms=60_000) as router:
        group = HttpMembership(router, "g", request_timeout_s=5)
        group.commit({("t", 0): 5}, None, -1)
        assert group.committed([("t", 0)]) == {("t", 0): 5}
    [commit] = b.asked("POST", "/groups/g/offsets")
    assert json.loads(commit.body)["offsets"] == [{"topic": "t", "partition": 0, "offset": 5}]
    assert len(a.asked("POST", "/groups/g")) == 1  # then b, directly


def test_a_commit_is_retried_at_the_new_coordinator_after_a_failure(gateways):
    a, b = gateways
    dead = dead_url()
    answers = iter([{"slot": 0, "url": dead}, None])  # dead, then none for a moment, then b

    def coordinator(request):
        lead = next(answers, endpoint(b, 1))
        return metadata(groups={"g": lead})(request)

    a.on("GET", "/metadata", coordinator)
    b.on("POST", "/groups/g/offsets", lambda r: (204, b""))
    with ClusterRouter(a.url, retry_backoff_ms=5) as router:
        HttpMembership(router, "g", request_timeout_s=5).commit({("t", 0): 9}, "m", 3)
    assert len(b.asked("POST", "/groups/g/offsets")) == 1


def test_a_commit_nobody_coordinates_raises_after_the_request_timeout(gateways):
    a, _ = gateways
    a.on("GET", "/metadata", metadata(groups={"g": endpoint(a, 0)}))
    a.on("POST", "/groups/g", not_coordinator(None))
    with ClusterRouter(a.url, retry_backoff_ms=5) as router:
        start = time.monotonic()
        with pytest.raises(NotCoordinator, match="'g'"):
            HttpMembership(router, "g", request_timeout_s=0.5).commit({("t", 0): 1}, None, -1)
        assert 0.3 < time.monotonic() - start < 5
    assert len(a.asked("POST", "/groups/g/offsets")) > 1


def test_a_group_call_with_no_gateway_ever_reached_fails_at_once():
    with ClusterRouter(dead_url()) as router:
        start = time.monotonic()
        with pytest.raises(OSError, match="unreachable"):
            HttpMembership(router, "g", request_timeout_s=30).commit({("t", 0): 1}, None, -1)
        assert time.monotonic() - start < 5

