"""The ACL authorizer (``ingest_gateway.security.authorizer``): Kafka's StandardAuthorizer
rules one by one, a hypothesis test against a plain scan of every ACL (the rules as
Kafka's docs state them), and refreshes from the store."""

from __future__ import annotations

import json
import logging
import threading

import pytest
from hypothesis import HealthCheck, given, settings as hsettings
from hypothesis import strategies as st

import conf
from conf.errors import ConfigError
from ingest_gateway.errors import NotAuthorized
from ingest_gateway.security.authorizer import Authorizer
from log_layout import acls, open_log
from log_layout.acls import SUPPORTED_OPERATIONS, AclBinding
from log_layout.errors import CorruptDocument

HOST = "10.0.0.1"


def make_settings(**kw) -> conf.Settings:
    return conf.load({"authorizer.enabled": True, **{f"authorizer.{k.replace('_', '.')}": v
                                                      for k, v in kw.items()}})


def authorizer(log, bindings=(), *, background=False, **kw) -> Authorizer:
    acls.add_acls(log.store, list(bindings))
    return Authorizer(log, make_settings(**kw), background=background)


def allow(name="clicks", op="Read", principal="User:alice", **kw) -> AclBinding:
    return AclBinding.create(kw.pop("rtype", "Topic"), name, kw.pop("pattern", "LITERAL"),
                             principal=principal, operation=op, **kw)


def deny(name="clicks", op="Read", principal="User:alice", **kw) -> AclBinding:
    return allow(name, op, principal, permission="Deny", **kw)


def ok(a: Authorizer, op="Read", name="clicks", principal="User:alice", host=HOST,
       rtype="Topic") -> bool:
    return a.authorize(principal, host, op, rtype, name)


# -- each rule --------------------------------------------------------------------------
def test_literal_allow_and_nothing_else(local_log):
    a = authorizer(local_log, [allow()])
    assert ok(a)
    assert not ok(a, "Write")  # ACLs on the resource, none for this operation: refused
    assert not ok(a, principal="User:bob")
    assert not ok(a, name="clicks2") and not ok(a, name="click")  # default: deny
    assert not ok(a, rtype="Group")


def test_no_acl_on_the_resource_follows_allow_everyone_if_no_acl_found(local_log):
    a = authorizer(local_log, [allow()], allow_everyone_if_no_acl_found=True)
    assert ok(a, name="other", principal="User:anyone")  # no ACL names it
    assert not ok(a, principal="User:bob")  # clicks has ACLs: only they decide
    assert ok(a, "Read", "g", rtype="Group")


def test_deny_wins_over_allow(local_log):
    a = authorizer(local_log, [allow(op="All", principal="User:*"), deny()])
    assert not ok(a) and ok(a, "Write") and ok(a, principal="User:bob")
    b = authorizer(open_log(local_log.url + "-b"), [allow("clicks"),
                                                     deny("cl", pattern="PREFIXED")])
    assert not ok(b)  # a prefixed deny beats a literal allow
    c = authorizer(open_log(local_log.url + "-c"), [allow(), deny("*")])
    assert not ok(c) and not ok(c, name="other")


def test_super_users_may_do_everything(local_log):
    a = authorizer(local_log, [deny(op="All", principal="User:*")],
                   super_users="User:admin; User:root")
    assert a.super_users == {"User:admin", "User:root"}
    assert ok(a, "Alter", principal="User:root") and ok(a, principal="User:admin")
    assert ok(a, "ClusterAction", "kafka-cluster", "User:admin", rtype="Cluster")
    assert not ok(a)
    with pytest.raises(ConfigError, match="authorizer.super.users.*'admin'"):
        Authorizer(local_log, make_settings(super_users="User:root;admin"))


def test_wildcard_principal_and_host(local_log):
    a = authorizer(local_log, [allow(principal="User:*", host="10.0.0.9"),
                               allow("t2", host="*")])
    assert ok(a, principal="User:bob", host="10.0.0.9")
    assert not ok(a, principal="User:bob", host="10.0.0.8")
    assert ok(a, name="t2", host="192.168.1.1") and not ok(a, name="t2", principal="User:bob")
    assert ok(a, principal="User:bob", host="::ffff:10.0.0.9")  # a dual-stack socket's
    assert not ok(a, principal="User:bob", host="::ffff:10.0.0.8")
    b = authorizer(open_log(local_log.url + "-b"), [allow(host="0:0:0:0:0:0:0:1")])
    assert ok(b, host="::1") and not ok(b, host="::2")  # ACL hosts are stored compressed
    # an ACL written with an IPv4-mapped address is the IPv4 one (it never matched before)
    c = authorizer(open_log(local_log.url + "-c"), [allow(host="::ffff:10.0.0.1")])
    assert acls.parse_host("::ffff:10.0.0.1") == "10.0.0.1"
    assert ok(c, host="10.0.0.1") and ok(c, host="::ffff:10.0.0.1") and not ok(c, host="10.0.0.2")


def test_literal_star_matches_every_name(local_log):
    a = authorizer(local_log, [allow("*", "Write", "User:bob")])
    assert ok(a, "Write", "anything", "User:bob") and ok(a, "Write", "*", "User:bob")
    assert not ok(a, "Write", "anything", "User:alice")
    assert not ok(a, "Write", "g", "User:bob", rtype="Group")


def test_prefixed_matches_by_prefix(local_log):
    a = authorizer(local_log, [allow("logs-", pattern="PREFIXED"),
                               allow("l", "Write", pattern="PREFIXED")])
    assert ok(a, name="logs-") and ok(a, name="logs-app") and not ok(a, name="logs")
    assert ok(a, "Write", "logs") and ok(a, "Write", "l")
    assert not ok(a, name="xlogs-app")
    # a literal name that is a prefix of the resource does not apply to it
    b = authorizer(open_log(local_log.url + "-b"), [allow("log")],
                   allow_everyone_if_no_acl_found=True)
    assert ok(b, "Write", "logs", "User:bob")  # no ACL applies to "logs": the default


def test_all_matches_every_operation(local_log):
    a = authorizer(local_log, [allow(op="All")])
    assert all(ok(a, op) for op in SUPPORTED_OPERATIONS["Topic"] - {"All"})
    b = authorizer(open_log(local_log.url + "-b"), [allow(op="All"), deny(op="All")])
    assert not any(ok(b, op) for op in SUPPORTED_OPERATIONS["Topic"] - {"All"})


@pytest.mark.parametrize("op", ["Read", "Write", "Delete", "Alter", "Describe"])
def test_describe_is_implied_by_an_allow(local_log, op):
    a = authorizer(local_log, [allow(op=op)])
    assert ok(a, "Describe")
    assert not ok(a, "DescribeConfigs")


def test_describe_configs_is_implied_by_alter_configs(local_log):
    a = authorizer(local_log, [allow(op="AlterConfigs")])
    assert ok(a, "DescribeConfigs") and ok(a, "AlterConfigs") and not ok(a, "Describe")


def test_a_deny_implies_nothing(local_log):
    a = authorizer(local_log, [allow(op="All"), deny(op="Read"), deny(op="AlterConfigs")])
    assert not ok(a, "Read") and ok(a, "Describe")  # Deny Read does not deny Describe
    assert not ok(a, "AlterConfigs") and ok(a, "DescribeConfigs")
    b = authorizer(open_log(local_log.url + "-b"), [allow(op="All"), deny(op="Describe")])
    assert not ok(b, "Describe") and ok(b, "Read")  # nor does Deny Describe deny Read


def test_check_raises_not_authorized(local_log):
    a = authorizer(local_log, [allow()])
    a.check("User:alice", HOST, "Read", "Topic", "clicks")
    with pytest.raises(NotAuthorized) as e:
        a.check("User:bob", HOST, "Write", "Topic", "clicks")
    assert (e.value.principal, e.value.operation, e.value.resource_type, e.value.name) == (
        "User:bob", "Write", "Topic", "clicks")
    assert str(e.value) == "User:bob is not authorized to Write Topic 'clicks'"


def test_a_caller_naming_no_real_operation_is_a_bug(local_log):
    a = authorizer(local_log)
    for op, rtype in (("read", "Topic"), ("All", "Topic"), ("Read", "topic")):
        with pytest.raises(ValueError, match="cannot authorize"):
            a.authorize("User:a", HOST, op, rtype, "t")


def test_disabled_allows_everything_and_reads_nothing(local_log):
    local_log.store.put_exclusive("_security/acls/00000000000000000001.json", b"garbage")
    a = Authorizer(local_log, conf.load({"authorizer.enabled": False}))
    assert a.authorize("User:x", HOST, "Alter", "Cluster", "kafka-cluster")
    a.close()


# -- the model --------------------------------------------------------------------------
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
HOSTS = ["*", "10.0.0.1", "10.0.0.2"]
NAMES = st.text("ab", min_size=1, max_size=3)


@st.composite
def bindings(draw):
    rtype = draw(st.sampled_from(["Topic", "Group"]))
    pattern = draw(st.sampled_from(["LITERAL", "PREFIXED"]))
    name = draw(NAMES | st.just("*")) if pattern == "LITERAL" else draw(NAMES)
    return AclBinding.create(rtype, name, pattern, principal=draw(st.sampled_from(PRINCIPALS)),
                             host=draw(st.sampled_from(HOSTS)),
                             operation=draw(st.sampled_from(sorted(SUPPORTED_OPERATIONS[rtype]))),
                             permission=draw(st.sampled_from(["Allow", "Deny"])))


def model(rules, supers, default, principal, host, op, rtype, name) -> bool:
    """Kafka's rules as its documentation states them, by scanning every ACL."""
    if principal in supers:
        return True
    applies = [b for b in rules if b.resource_type == rtype and (
        (b.pattern_type == "LITERAL" and b.name in (name, "*"))
        or (b.pattern_type == "PREFIXED" and name.startswith(b.name)))]
    if not applies:
        return default
    implied = {"Describe": {"Read", "Write", "Delete", "Alter"},
               "DescribeConfigs": {"AlterConfigs"}}.get(op, set())

    def matches(b: AclBinding) -> bool:
        return (b.principal in (principal, "User:*") and b.host in ("*", host)
                and (b.operation in ("All", op)
                     or (b.permission == "Allow" and b.operation in implied)))

    if any(matches(b) for b in applies if b.permission == "Deny"):
        return False
    return any(matches(b) for b in applies if b.permission == "Allow")


REQUEST_OPS = ["Read", "Write", "Describe", "DescribeConfigs", "AlterConfigs", "Delete"]


#: the model's cases: ACLs, the default, and what to ask (drawn in the test)
acl_cases = given(rules=st.lists(bindings(), max_size=12), default=st.booleans(),
                  data=st.data())


@hsettings(max_examples=50, deadline=None,
           suppress_health_check=[HealthCheck.function_scoped_fixture])
@acl_cases
def test_the_index_decides_as_a_scan_of_every_acl(rules, default, data):
    """50 cases, for make test-fast; the slow test below draws 300."""
    index_decides_as_the_model(rules, default, data)


@pytest.mark.slow
@hsettings(max_examples=300, deadline=None,
           suppress_health_check=[HealthCheck.function_scoped_fixture])
@acl_cases
def test_the_index_decides_as_a_scan_of_every_acl_long(rules, default, data):
    index_decides_as_the_model(rules, default, data)


def index_decides_as_the_model(rules, default, data):
    log = open_log("memory://authorizer-model")
    log.store.delete_tree("_security")
    a = authorizer(log, rules, allow_everyone_if_no_acl_found=default,
                   super_users="User:root")
    # names the rules use (and names they extend, for prefixes) are the interesting ones
    named = sorted({b.name for b in rules if b.name != "*"})
    names = NAMES | st.sampled_from(named) | st.builds(
        lambda n, tail: n + tail, st.sampled_from(named), NAMES) if named else NAMES
    for _ in range(20):
        principal = data.draw(st.sampled_from(["User:alice", "User:bob", "User:root"]))
        host = data.draw(st.sampled_from(["10.0.0.1", "10.0.0.2"]))
        op = data.draw(st.sampled_from(REQUEST_OPS))
        rtype, name = data.draw(st.sampled_from(["Topic", "Group"])), data.draw(names)
        assert a.authorize(principal, host, op, rtype, name) == model(
            set(rules), {"User:root"}, default, principal, host, op, rtype, name), (
            principal, host, op, rtype, name)


# -- refresh ----------------------------------------------------------------------------
def test_refresh_picks_up_a_change_made_through_another_log(tmp_path):
    a = Authorizer(open_log(str(tmp_path / "s")), make_settings(), background=False)
    assert a.version == 0 and not ok(a)
    other = open_log(str(tmp_path / "s"))  # as another process would
    acls.add_acls(other.store, [allow()])
    assert not ok(a)  # not before the refresh
    assert a.refresh() and ok(a) and a.version == 1
    assert not a.refresh()  # unchanged: nothing read
    acls.remove_acls(other.store, [acls.AclFilter.create("Topic")])
    assert a.refresh() and not ok(a)


def test_the_thread_refreshes_every_refresh_ms(tmp_path):
    with Authorizer(open_log(str(tmp_path / "s")), make_settings(refresh_ms=20)) as a:
        acls.add_acls(open_log(str(tmp_path / "s")).store, [allow()])
        assert a.wait_for_version(1, timeout_s=30)
        assert ok(a)
    assert a._refresher is None


class _Seen(logging.Handler):
    """Sets ``event`` when a record holding ``text`` is logged (from any thread)."""

    def __init__(self, text: str):
        super().__init__(logging.WARNING)
        self.text, self.event = text, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


def test_a_failed_refresh_keeps_the_rules_in_force(tmp_path):
    log = open_log(str(tmp_path / "s"))
    seen = _Seen("refresh failed")
    logger = logging.getLogger("ingest_gateway.security.authorizer")
    logger.addHandler(seen)
    try:
        with authorizer(log, [allow()], background=True, refresh_ms=10) as a:
            bad = {"version": 2, "acls": [{"resource_type": "Topic"}]}
            log.store.put_exclusive("_security/acls/00000000000000000002.json",
                                    json.dumps(bad).encode())
            with pytest.raises(CorruptDocument):
                a.refresh()
            assert seen.event.wait(30)  # the thread met it too, and logged
            assert ok(a) and a.version == 1  # the rules loaded before stay in force
            good = [allow(), allow(op="Write")]
            log.store.put_exclusive("_security/acls/00000000000000000003.json", json.dumps(
                {"version": 3, "acls": [b.to_json() for b in good]}).encode())
            assert a.wait_for_version(3, timeout_s=30) and ok(a, "Write")
    finally:
        logger.removeHandler(seen)


def test_the_first_load_must_succeed(local_log):
    local_log.store.put_exclusive("_security/acls/00000000000000000001.json", b"[]")
    with pytest.raises(CorruptDocument, match="expected a JSON object"):
        Authorizer(local_log, make_settings())


# -- authorize_by_resource_type (InitProducerId: Write on any topic) -----------------------
def test_by_resource_type_needs_one_allow_no_deny_covers(local_log):
    a = authorizer(local_log, [allow("orders", "Write"),
                               allow("logs-", "Write", pattern="PREFIXED"),
                               allow("x", "Read", principal="User:bob"),
                               deny("orders", "Write", principal="User:carol"),
                               allow("orders", "Write", principal="User:carol"),
                               allow("pay-", "All", pattern="PREFIXED", principal="User:dan"),
                               deny("pay", "Write", pattern="PREFIXED", principal="User:dan"),
                               allow("a", "Write", principal="User:erin"),
                               deny("*", "Write", principal="User:erin")])

    def any_write(principal: str, host: str = HOST) -> bool:
        return a.authorize_by_resource_type(principal, host, "Write", "Topic")

    assert any_write("User:alice")          # two allows, no deny
    assert not any_write("User:bob")        # Read only: no implication here
    assert not any_write("User:carol")      # its one allow is denied by the same literal
    assert not any_write("User:dan")        # the deny prefix covers the allow prefix
    assert not any_write("User:erin")       # a deny of literal * denies every name
    assert not any_write("User:nobody")
    # no ACL of the type at all: allow.everyone.if.no.acl.found decides (off, then on)
    assert not a.authorize_by_resource_type("User:alice", HOST, "Write", "Group")
    b = authorizer(open_log(str(local_log.url) + "-other"), allow_everyone_if_no_acl_found=True)
    assert b.authorize_by_resource_type("User:nobody", HOST, "Write", "Topic")
