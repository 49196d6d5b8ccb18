"""REST Proxy v3 ACLs (``v3_acls``) on a live gateway: created, listed, filtered and
deleted over HTTP in REST Proxy's shapes, the same ACLs ``log_layout.acls`` (and so
``sparklog acls`` and every gateway's authorizer) sees; hostile input refused with 400
naming the field, nothing written; a created ACL enforced by the gateway that wrote it
before its answer, with the authorizer on.

(Which principal may list, create and delete ACLs is in ``test_acl_matrix``: Describe
on the cluster, Alter on the cluster, as Kafka's DescribeAcls, CreateAcls, DeleteAcls.)
"""

from __future__ import annotations

import base64
from urllib.parse import quote

import pytest

from ingest_gateway.security import passwords
from jobs.gateway_process import GatewayProcess
from log_layout import open_log
from log_layout.acls import AclBinding, AclFilter, list_acls, remove_acls

ACL = {"resource_type": "TOPIC", "resource_name": "orders-", "pattern_type": "PREFIXED",
       "principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW"}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    url = str(tmp_path_factory.mktemp("v3-acls") / "store")
    lg = open_log(url, fsync=False)
    with GatewayProcess(url) as g:
        g.log = lg
        g.acls = "/v3/clusters/" + g.request("GET", "/v3/clusters")[1]["data"][0]["cluster_id"] \
            + "/acls"
        yield g


@pytest.fixture(autouse=True)
def no_acls(gw):
    remove_acls(gw.log.store, [AclFilter.create()])
    yield


def _query(**fields: str) -> str:
    return "?" + "&".join(f"{k}={quote(v, safe='*')}" for k, v in fields.items())


def test_created_acls_are_listed_and_deleted_in_rest_proxys_shapes(gw):
    status, body, headers = gw.request("POST", gw.acls, body=ACL)
    assert status == 201, body
    deny = {**ACL, "resource_type": "CLUSTER", "resource_name": "kafka-cluster",
            "pattern_type": "LITERAL", "operation": "DESCRIBE", "permission": "DENY"}
    status, body, _ = gw.request("POST", gw.acls + ":batch", body={"data": [deny, ACL]})
    assert status == 201, body  # ACL again: already there, nothing new (Kafka's answer)
    # the Location is the ACL's own URL, the list filtered to it
    status, one, _ = gw.request("GET", headers["Location"][len(gw.url):])
    assert status == 200 and [d["resource_name"] for d in one["data"]] == ["orders-"]
    assert one["data"][0]["metadata"]["self"] == headers["Location"]
    assert set(list_acls(gw.log.store)) == {  # the store's ACLs, what every gateway enforces
        AclBinding.create("Topic", "orders-", "PREFIXED", principal="User:alice",
                          operation="Read"),
        AclBinding.create("Cluster", "kafka-cluster", principal="User:alice",
                          operation="Describe", permission="Deny")}
    status, listed, _ = gw.request("GET", gw.acls)
    assert status == 200 and listed["kind"] == "KafkaAclList"
    assert listed["metadata"]["self"] == gw.url + gw.acls
    # REST Proxy's order: by resource type in Kafka's order (TOPIC before CLUSTER)
    assert [{k: d[k] for k in ACL} for d in listed["data"]] == [ACL, deny]
    assert all(d["kind"] == "KafkaAcl" and d["cluster_id"] == gw.acls.split("/")[3]
               for d in listed["data"])
    # filters: MATCH finds the prefixed ACL that applies to a name; lowercase accepted
    for query, found in [(_query(resource_type="topic", resource_name="orders-eu",
                                 pattern_type="MATCH"), ["orders-"]),
                         (_query(resource_name="orders-eu"), []),  # ANY: the name exactly
                         (_query(permission="DENY"), ["kafka-cluster"]),
                         (_query(principal="User:bob"), []),
                         (_query(resource_type="DELEGATION_TOKEN"), [])]:
        status, got, _ = gw.request("GET", gw.acls + query)
        assert status == 200 and [d["resource_name"] for d in got["data"]] == found, query
    status, gone, _ = gw.request("DELETE", gw.acls + _query(
        resource_type="ANY", pattern_type="ANY", operation="ANY", permission="DENY"))
    assert status == 200 and [{k: d[k] for k in ACL} for d in gone["data"]] == [deny]
    assert list(gone) == ["data"]  # REST Proxy's DeleteAclsResponse: the list only
    assert [b.resource_type for b in list_acls(gw.log.store)] == ["Topic"]


@pytest.mark.parametrize("field, value", [
    ("resource_type", "TABLE"), ("resource_type", "UNKNOWN"), ("resource_type", "ANY"),
    ("resource_type", "DELEGATION_TOKEN"), ("resource_type", 7),
    ("pattern_type", "ANY"), ("pattern_type", "MATCH"), ("pattern_type", "REGEX"),
    ("operation", "ANY"), ("operation", "FLY"), ("operation", "IDEMPOTENT_WRITE"),
    ("operation", "CLUSTER_ACTION"), ("permission", "MAYBE"), ("permission", "ANY"),
    ("principal", "alice"), ("principal", "Group:admins"), ("principal", ""),
    ("host", "example.com"), ("host", "10.0.0.300"), ("resource_name", ""),
    ("resource_name", "x" * 1001), ("resource_name", "a\nb"), ("resource_type", None),
    ("operation", None)])
def test_a_bad_field_is_refused_naming_it_and_nothing_is_written(gw, field, value):
    bad = {**ACL, field: value}
    for path, body in ((gw.acls, bad), (gw.acls + ":batch", {"data": [ACL, bad]})):
        status, answer, _ = gw.request("POST", path, body=body)
        assert status == 400, (path, answer)
        assert answer["error_code"] == 40002 and answer["error"] == "invalid_acl", answer
        assert answer["message"].startswith(f"invalid ACL {field} "), answer
    assert list_acls(gw.log.store) == []  # the batch's good ACL was not written either


def test_the_cluster_is_named_kafka_cluster_as_in_kafka(gw):
    bad = {**ACL, "resource_type": "CLUSTER", "resource_name": "prod", "pattern_type": "LITERAL",
           "operation": "DESCRIBE"}
    status, answer, _ = gw.request("POST", gw.acls, body=bad)
    assert (status, answer["error_code"]) == (400, 40002)
    assert "resource_name" in answer["message"] and "kafka-cluster" in answer["message"]


@pytest.mark.parametrize("field, value", [
    ("resource_type", "TABLE"), ("resource_type", "UNKNOWN"), ("pattern_type", "UNKNOWN"),
    ("pattern_type", "REGEX"), ("operation", "FLY"), ("permission", "UNKNOWN"),
    ("principal", "alice"), ("host", "example.com")])
def test_a_bad_filter_is_refused_naming_the_field(gw, field, value):
    every = dict(resource_type="ANY", pattern_type="ANY", operation="ANY", permission="ANY")
    for method, query in (("GET", {field: value}), ("DELETE", {**every, field: value})):
        status, answer, _ = gw.request(method, gw.acls + _query(**query))
        assert status == 400 and answer["error_code"] == 40002, (method, query, answer)
        assert answer["message"].startswith(f"invalid ACL {field} "), answer


def test_delete_needs_the_four_enumerations_as_rest_proxy(gw):
    gw.request("POST", gw.acls, body=ACL)
    every = dict(resource_type="ANY", pattern_type="ANY", operation="ANY", permission="ANY")
    for missing in every:
        status, answer, _ = gw.request("DELETE", gw.acls + _query(
            **{k: v for k, v in every.items() if k != missing}))
        assert status == 400 and missing in answer["message"], answer
    assert len(list_acls(gw.log.store)) == 1  # nothing deleted


def test_a_query_parameter_given_twice_or_a_malformed_body_is_refused(gw):
    assert gw.request("GET", gw.acls + "?operation=READ&operation=WRITE")[0] == 400
    for body in (b"[]", b"{}", b'{"data": []}', b'{"data": {}}', b"nope"):
        status, answer, _ = gw.request("POST", gw.acls + ":batch", body=body,
                                       content_type="application/json")
        assert status == 400, (body, answer)
    assert gw.request("POST", gw.acls, body=b"[1]", content_type="application/json")[0] == 400
    assert gw.request("GET", "/v3/clusters/other/acls")[0] == 404
    assert list_acls(gw.log.store) == []


def test_a_created_acl_is_enforced_by_this_gateway_before_the_answer(tmp_path):
    store = str(tmp_path / "store")
    open_log(store).create_topic("orders-eu", {"partitions": 1})
    pw = str(tmp_path / "passwords")
    for user in ("admin", "alice"):
        passwords.add(pw, user, "pw-" + user)

    def auth(user: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(
            f"{user}:pw-{user}".encode()).decode()}

    # a refresh far away: only the create's own reading can make the ACL count at once
    settings = {"authentication.method": "basic", "authentication.password.file": pw,
                "authorizer.enabled": "true", "authorizer.super.users": "User:admin",
                "authorizer.refresh.ms": "3600000"}
    with GatewayProcess(store, settings=settings) as g:
        cluster = g.request("GET", "/v3/clusters", headers=auth("admin"))[1]["data"][0]
        acls = f"/v3/clusters/{cluster['cluster_id']}/acls"
        assert g.request("GET", "/topics/orders-eu", headers=auth("alice"))[0] == 403
        status, answer, _ = g.request("POST", acls, body=ACL, headers=auth("alice"))
        assert status == 403 and answer["operation"] == "Alter", answer  # not her own ACL
        assert g.request("POST", acls, body=ACL, headers=auth("admin"))[0] == 201
        assert g.request("GET", "/topics/orders-eu", headers=auth("alice"))[0] == 200
        status, _, _ = g.request("DELETE", acls + _query(
            resource_type="TOPIC", pattern_type="PREFIXED", operation="READ",
            permission="ALLOW"), headers=auth("admin"))
        assert status == 200
        assert g.request("GET", "/topics/orders-eu", headers=auth("alice"))[0] == 403
