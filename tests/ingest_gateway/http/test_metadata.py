"""``GET /metadata`` of a standalone gateway, and what a hostile query string gets.

Every refusal is a 400 ``malformed_request`` / ``invalid_topic_name`` /
``invalid_group_id`` with a message naming what was wrong, never a 500, and the
gateway keeps answering.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from ingest_gateway.http.cluster_routes import MAX_NAMES


def test_a_standalone_gateway_leads_everything_and_says_so(gateway, topic):
    status, doc, _ = gateway.request("GET", f"/metadata?topics={topic},absent&groups=g1,g2")
    assert status == 200, doc
    assert doc["generation"] is None and doc["gateways"] == [
        {"slot": None, "url": None, "live": True}]
    mine, absent = doc["topics"]
    assert mine == {"topic": topic, "partitions": [
        {"partition": p, "leader": {"slot": None, "url": None}} for p in range(3)]}
    assert absent == {"topic": "absent", "error": "unknown_topic"}
    assert doc["groups"] == [{"group": g, "coordinator": {"slot": None, "url": None}}
                             for g in ("g1", "g2")]
    # nothing asked: the gateways alone
    status, doc, _ = gateway.request("GET", "/metadata")
    assert status == 200 and doc["topics"] == [] and doc["groups"] == []


@pytest.mark.parametrize("query, needle", [
    ("topics=a,,b", "topic"),                                   # an empty name
    ("topics=" + "x" * 300, "topic"),                           # a name too long
    ("topics=" + quote("a/b"), "topic"),                        # a character topics refuse
    ("topics=" + quote(".."), "topic"),                        # a reserved name
    ("topics=" + ",".join(f"t{i}" for i in range(MAX_NAMES + 1)), "at most"),  # too many
    ("topics=a&topics=b", "more than once"),                    # a parameter twice
    ("groups=" + quote("g\x00h"), "group"),                     # a control character
    ("groups=" + quote("g" * 300), "group"),                    # a group id too long
    ("groups=" + ",".join(f"g{i}" for i in range(MAX_NAMES + 1)), "at most"),
    ("groups=" + quote("\udcff", errors="surrogatepass"), "group"),  # not UTF-8
])
def test_a_hostile_query_is_refused_with_a_reason(gateway, query, needle):
    status, body, _ = gateway.request("GET", f"/metadata?{query}")
    assert status == 400, (query[:80], status, body)
    assert needle in body["message"].lower() or needle in body["error"], body
    assert gateway.request("GET", "/healthz")[0] == 200
