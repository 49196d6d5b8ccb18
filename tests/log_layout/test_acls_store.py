"""The ACL and quota documents of the store (``log_layout.acls``, ``log_layout.quotas``,
``log_layout.versioned_doc``): validation, the format, and concurrent writers that
never lose an update, on the local store, memory, the S3 server and HDFS."""

from __future__ import annotations

import json
import threading

import pytest

from conf.errors import ConfigError
from log_layout import acls, open_store, quotas
from log_layout.acls import AclBinding, AclFilter
from log_layout.errors import CorruptDocument, InvalidAcl
from log_layout.versioned_doc import KEPT, Version, VersionedDoc

#: the backends of the race tests: a local folder, memory, a real S3 server, a real HDFS
RACE_BACKENDS = ["file", "memory", "s3", "hdfs"]


@pytest.fixture
def st(store):
    url, options = store
    return open_store(url, storage_options=options)


def acl(name="clicks", op="Read", principal="User:alice", **kw) -> AclBinding:
    return AclBinding.create(kw.pop("rtype", "Topic"), name, kw.pop("pattern", "LITERAL"),
                             principal=principal, operation=op, **kw)


# -- validation -------------------------------------------------------------------------
def test_create_spells_every_field_canonically():
    b = AclBinding.create("transactional-id", "tx", "prefixed", principal="User:bob",
                          host="0:0:0:0:0:0:0:1", operation="WRITE", permission="deny")
    assert b == AclBinding("TransactionalId", "tx", "PREFIXED", "User:bob", "::1", "Write",
                           "Deny")
    assert AclBinding.create("TOPIC", "t", principal="User:*", operation="describe_configs") \
        .operation == "DescribeConfigs"
    assert acl(rtype="cluster", name="kafka-cluster", op="IdempotentWrite").resource_type \
        == "Cluster"


@pytest.mark.parametrize("kw, field, says", [
    ({"rtype": "Broker"}, "resource_type", "expected one of Topic, Group, Cluster"),
    ({"pattern": "MATCH"}, "pattern_type", "expected one of LITERAL, PREFIXED"),
    ({"name": ""}, "name", "non-empty"),
    ({"name": "a\nb"}, "name", "control character"),
    ({"name": "x" * 1001}, "name", "longer than 1000"),
    ({"principal": "alice"}, "principal", "User:<name>"),
    ({"principal": "Group:g"}, "principal", "User:<name>"),
    ({"principal": "User:"}, "principal", "User:<name>"),
    ({"host": "gateway.example"}, "host", "IP address"),
    ({"op": "Frobnicate"}, "operation", "IdempotentWrite"),
    ({"op": "Write", "rtype": "Group"}, "operation", "Group only supports"),
    ({"rtype": "Cluster", "name": "c1"}, "name", "kafka-cluster"),
    ({"permission": "Maybe"}, "permission", "Allow, Deny"),
])
def test_invalid_bindings_name_the_field(kw, field, says):
    with pytest.raises(InvalidAcl) as e:
        acl(**kw)
    assert e.value.field == field and says in str(e.value), str(e.value)
    assert isinstance(e.value, ConfigError)


def test_filters_match_as_kafka():
    lit, star, pre = acl("clicks"), acl("*"), acl("cl", pattern="PREFIXED")
    other = acl("clicks", rtype="Group")
    every = [lit, star, pre, other]
    assert [b for b in every if AclFilter.create("Topic", "clicks", "LITERAL").matches(b)] \
        == [lit]
    assert [b for b in every if AclFilter.create("Topic", "clicks", "MATCH").matches(b)] \
        == [lit, star, pre]
    assert [b for b in every if AclFilter.create(None, "clicks", "ANY").matches(b)] \
        == [lit, other]
    assert [b for b in every if AclFilter.create("Topic", "cl", "PREFIXED").matches(b)] == [pre]
    assert AclFilter.create(principal="User:bob").matches(lit) is False
    assert AclFilter.exact(lit).matches(lit) and not AclFilter.exact(lit).matches(star)


def test_subject_bindings_are_the_registrys_and_any_means_kafkas_types():
    """Subject (the Schema Registry's) takes its operations only, and an "any" resource
    type matches Kafka's four types only: Kafka's DescribeAcls/DeleteAcls and REST v3
    /acls, which filter by "any", never see or remove a Subject binding."""
    subj = acl("clicks-", op="Write", rtype="subject", pattern="PREFIXED")
    assert (subj.resource_type, subj.pattern_type) == ("Subject", "PREFIXED")
    with pytest.raises(InvalidAcl, match="Subject only supports"):
        acl("x", op="Create", rtype="Subject")
    topic = acl("clicks")
    assert AclFilter.create().matches(topic) and not AclFilter.create().matches(subj)
    assert AclFilter.create(None, "clicks-", "ANY").matches(subj) is False
    assert AclFilter.create("Subject").matches(subj)
    assert AclFilter.create("Subject", "clicks-value", "MATCH").matches(subj)
    assert acls.Acls(1, (subj, topic)).matching() == [subj, topic]  # listing: every binding


# -- the format -------------------------------------------------------------------------
def test_document_round_trip_and_format(local_log):
    st = local_log.store
    assert acls.load(st) == acls.Acls(0, ())
    b1, b2 = acl(), acl("logs-", "Write", "User:*", pattern="PREFIXED", host="10.0.0.7",
                        permission="Deny")
    assert acls.add_acls(st, [b2, b1], now_ms=123) == [b1, b2]
    assert acls.add_acls(st, [b1]) == []  # already there: no new version
    names = [f.name for f in st.list("_security/acls")]
    assert names == ["00000000000000000001.json"]
    doc = json.loads(st.read("_security/acls/00000000000000000001.json"))
    lineage = doc.pop("_lineage")  # versioned_doc's: this version's id (nothing before it)
    assert lineage["number"] == 1 and len(lineage["ids"]) == 1
    assert doc == {"version": 1, "written_ms": 123, "acls": [
        {"resource_type": "Topic", "name": "clicks", "pattern_type": "LITERAL",
         "principal": "User:alice", "host": "*", "operation": "Read", "permission": "Allow"},
        {"resource_type": "Topic", "name": "logs-", "pattern_type": "PREFIXED",
         "principal": "User:*", "host": "10.0.0.7", "operation": "Write",
         "permission": "Deny"}]}
    assert acls.load(st) == acls.Acls(1, (b1, b2))
    assert acls.load(st, known=1) is None  # unchanged: the listing was all it read
    assert acls.remove_acls(st, [AclFilter.create("Topic", "clicks", "MATCH")]) == [b1]
    assert acls.load(st, known=1) == acls.Acls(2, (b2,))
    assert acls.remove_acls(st, [AclFilter.create("Group")]) == []


def test_a_refresh_that_finds_no_change_only_lists(local_log):
    st = local_log.store
    acls.add_acls(st, [acl()])
    reads = []
    real_read = st.read
    st.read = lambda path: reads.append(path) or real_read(path)  # type: ignore[method-assign]
    for _ in range(5):
        assert acls.load(st, known=1) is None
    assert reads == []


def test_a_hand_written_bad_document_is_corrupt(local_log):
    st = local_log.store
    st.put_exclusive("_security/acls/00000000000000000001.json", b"{not json")
    with pytest.raises(CorruptDocument, match="not JSON"):
        acls.load(st)
    st.put_exclusive("_security/acls/00000000000000000002.json", json.dumps(
        {"acls": [{"resource_type": "Topic", "name": "t", "pattern_type": "LITERAL",
                   "principal": "alice", "host": "*", "operation": "Read",
                   "permission": "Allow"}]}).encode())
    with pytest.raises(CorruptDocument, match="principal 'alice'"):
        acls.load(st)


def test_old_versions_are_pruned(local_log):
    st = local_log.store
    for i in range(KEPT + 5):
        acls.add_acls(st, [acl(f"t{i}")])
    names = sorted(f.name for f in st.list("_security/acls"))
    assert len(names) == KEPT and names[-1] == f"{KEPT + 5:020d}.json"
    assert len(acls.load(st).bindings) == KEPT + 5


def test_a_number_used_and_pruned_meanwhile_is_not_taken(local_log):
    """A writer whose snapshot is so old that its next number was created and pruned
    since must not commit under it (the listing would never show its change)."""
    docs = VersionedDoc(local_log.store, "_security/test", kept=2)
    for i in range(5):
        docs.update(lambda cur, i=i: {"n": cur.doc.get("n", 0) + 1})
    assert [v.number for v in [docs.newest()]] == [5]
    stale = [Version(1, {"n": 1})]  # what a very slow writer read long ago
    real = docs.newest
    docs.newest = lambda known=None: stale.pop() if stale else real(known=known)  # type: ignore
    won = docs.update(lambda cur: {"n": cur.doc["n"] + 1})
    assert won is not None and won.number == 6 and docs.newest().doc == {"n": 6}
    assert "00000000000000000002.json" not in {f.name for f in local_log.store.list(
        "_security/test")}


# -- racing writers ---------------------------------------------------------------------
def _race(n: int, work) -> None:
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            work(i)
        except BaseException as e:  # noqa: BLE001 - reported by the test below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("backend", RACE_BACKENDS)
def test_racing_writers_lose_no_acl(st):
    writers, each = 6, 3
    acls.add_acls(st, [acl("gone")])

    added: list[AclBinding] = []

    def work(i: int) -> None:
        for j in range(each):
            got = acls.add_acls(st, [acl(f"w{i}-{j}"), acl(f"shared-{j}")])
            assert acl(f"w{i}-{j}") in got, (i, j, got)  # its own: new, whoever built on it
            added.extend(got)
        if i == 0:
            assert acls.remove_acls(st, [AclFilter.create("Topic", "gone")]) == [acl("gone")]

    _race(writers, work)
    # what the writers report is what happened: each shared ACL added by exactly one
    assert sorted(b.name for b in added if b.name.startswith("shared-")) == \
        [f"shared-{j}" for j in range(each)]
    found = acls.load(st)
    assert {b.name for b in found.bindings} == (
        {f"w{i}-{j}" for i in range(writers) for j in range(each)}
        | {f"shared-{j}" for j in range(each)})
    # one version per change that changed something: the first add, each writer's own
    # adds, the remove; a shared ACL is new only to the first writer adding it
    assert found.version == 1 + writers * each + 1
    assert len(st.list("_security/acls")) <= KEPT


@pytest.mark.parametrize("backend", RACE_BACKENDS)
def test_racing_quota_changes_lose_none(st):
    def work(i: int) -> None:
        quotas.alter_quotas(st, f"User:u{i}", add={"producer_byte_rate": 1000 + i})
        quotas.alter_quotas(st, "<default>", add={"consumer_byte_rate" if i % 2 else
                                                  "producer_byte_rate": 7})

    _race(5, work)
    found = quotas.describe(st)
    assert found.entries == {**{f"User:u{i}": {"producer_byte_rate": 1000 + i}
                                for i in range(5)},
                             "<default>": {"producer_byte_rate": 7, "consumer_byte_rate": 7}}


# -- quotas -----------------------------------------------------------------------------
def test_quotas_round_trip_and_precedence(local_log):
    st = local_log.store
    assert quotas.describe(st) == quotas.Quotas(0, {})
    quotas.alter_quotas(st, "<default>", add={"producer_byte_rate": "100",
                                              "consumer_byte_rate": 200}, now_ms=5)
    after = quotas.alter_quotas(st, "User:alice", add={"producer_byte_rate": 10})
    assert after.quota("User:alice", "producer_byte_rate") == 10
    assert after.quota("User:alice", "consumer_byte_rate") == 200  # config by config
    assert after.quota("User:bob", "producer_byte_rate") == 100
    doc = json.loads(st.read("_security/quotas/00000000000000000002.json"))
    assert doc["quotas"] == {"<default>": {"producer_byte_rate": 100, "consumer_byte_rate": 200},
                             "User:alice": {"producer_byte_rate": 10}}
    assert quotas.load(st, known=2) is None
    gone = quotas.alter_quotas(st, "User:alice", delete=["producer_byte_rate"])
    assert "User:alice" not in gone.entries and gone.version == 3
    again = quotas.alter_quotas(st, "User:alice", delete=["producer_byte_rate"])
    assert again.version == 3  # nothing to change: no version
    assert quotas.describe(st).quota("User:alice", "producer_byte_rate") == 100


@pytest.mark.parametrize("who, add, delete, says", [
    ("alice", {}, [], "User:<name>"),
    ("User:*", {}, [], "<default>"),
    ("User:a", {"producer_byte_rate": 0}, [], "at least 1"),
    ("User:a", {"producer_byte_rate": "1.5"}, [], "whole number"),
    ("User:a", {"producer_byte_rate": True}, [], "whole number"),
    ("User:a", {"controller_mutation_rate": 5}, [], "not a quota config"),
    ("User:a", {"request_percentage": 0}, [], "above 0"),
    ("User:a/Client:", {}, [], "Client:<client id>"),
    ("User:a", {}, ["nope"], "not a quota config"),
    ("User:a", {"producer_byte_rate": 5}, ["producer_byte_rate"], "both added and deleted"),
])
def test_bad_quotas_are_refused_before_writing(local_log, who, add, delete, says):
    with pytest.raises(ConfigError, match=says):
        quotas.alter_quotas(local_log.store, who, add=add, delete=delete)
    assert local_log.store.list("_security/quotas") == []
