"""DescribeAcls, CreateAcls and DeleteAcls over the Kafka listener of a real gateway
process with the authorizer on: confluent-kafka's AdminClient creates, describes (ANY,
MATCH) and deletes ACLs, which are the store's (``log_layout.acls``) and enforced at
once; refusals are Kafka's codes; a principal without Alter on the cluster is refused."""

from __future__ import annotations

import importlib

import pytest

from log_layout import acls as store_acls
from tests.ingest_gateway.kafka.sasl_gateway import (client_conf, logged_in, sasl_gateway,
                                                     still_serves)

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,  # noqa: E402
                                   AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)

TOPIC = "acl-t"


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with sasl_gateway(tmp_path_factory.mktemp("admin-acls"), users=("bob",), acls=[],
                      topics={TOPIC: 1}) as g:
        yield g


def _admin(gw, user="admin"):
    return AdminClient(client_conf(gw, user))


def _bob_reads(gw) -> bool:
    """Whether bob may read the topic's metadata (Describe, implied by Read)."""
    c = ck.Consumer(client_conf(gw, "bob", **{"group.id": "acl-g"}))
    try:
        md = c.list_topics(TOPIC, timeout=20)
        return md.topics[TOPIC].error is None
    finally:
        c.close()


def test_confluent_admin_creates_describes_and_deletes_acls(gw):
    admin = _admin(gw)
    read = AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:bob", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)
    pre = AclBinding(ResourceType.GROUP, "acl-", ResourcePatternType.PREFIXED, "User:bob", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)
    assert not _bob_reads(gw)
    for f in admin.create_acls([read, pre]).values():
        assert f.result(timeout=20) is None
    assert _bob_reads(gw)  # enforced at once by this gateway
    from log_layout import open_log

    stored = store_acls.list_acls(open_log(gw.store_url).store)
    assert {(b.name, b.pattern_type) for b in stored} == {(TOPIC, "LITERAL"),
                                                          ("acl-", "PREFIXED")}
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(every).result(timeout=20)
    assert {(b.restype, b.name, b.operation) for b in found} == \
        {(ResourceType.TOPIC, TOPIC, AclOperation.READ),
         (ResourceType.GROUP, "acl-", AclOperation.READ)}
    match = AclBindingFilter(ResourceType.GROUP, "acl-g", ResourcePatternType.MATCH, None,
                             None, AclOperation.ANY, AclPermissionType.ANY)
    assert [b.name for b in admin.describe_acls(match).result(timeout=20)] == ["acl-"]
    topic_only = AclBindingFilter(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL,
                                  None, None, AclOperation.ANY, AclPermissionType.ANY)
    (fut,) = admin.delete_acls([topic_only]).values()
    assert [b.name for b in fut.result(timeout=20)] == [TOPIC]
    assert not _bob_reads(gw)
    assert [b.name for b in admin.describe_acls(every).result(timeout=20)] == ["acl-"]


def kio(api: str, version: int):
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def test_refusals_are_kafkas_codes(gw):
    from tests.ingest_gateway.kafka.kafka_gateway import call

    m = kio("create_acls", 3)

    def creation(rt=2, name=TOPIC, pt=3, principal="User:x", op=3, perm=3):
        return m.AclCreation(resource_type=rt, resource_name=name, resource_pattern_type=pt,
                             principal=principal, host="*", operation=op, permission_type=perm)

    with logged_in(gw, "admin") as s:
        _, resp = call(s, m.CreateAclsRequest(creations=(
            creation(op=12),                   # IdempotentWrite: not a topic operation
            creation(rt=4, name="other"),      # a cluster not named kafka-cluster
            creation(pt=1),                    # ANY in a creation
            creation(rt=6, name="tok"),        # a delegation token: none kept here
            creation(principal="Group:x"),     # principals are users
            creation(op=0),                    # UNKNOWN
        )), 3)
        assert [r.error_code for r in resp.results] == [42] * 6
        assert all(r.error_message for r in resp.results)
        d = kio("describe_acls", 3)
        _, resp = call(s, d.DescribeAclsRequest(
            resource_type_filter=0, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1), 3)
        assert resp.error_code == 42
        assert still_serves(s)
    with logged_in(gw, "bob") as s:  # no Alter / Describe on the cluster
        _, resp = call(s, m.CreateAclsRequest(creations=(creation(),)), 3)
        assert resp.results[0].error_code == 31
        _, resp = call(s, d.DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1), 3)
        assert resp.error_code == 31 and resp.resources == ()
        assert still_serves(s)
