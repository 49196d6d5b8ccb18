"""Every route x every operation x allow / deny / no ACL, literal and prefixed: each
route allows exactly what Kafka's authorizer would.

One gateway (a subprocess, HTTP Basic, the authorizer on) and one user per case,
all ACLs written once: ``allow-lit-<Op>`` holds one ALLOW ACL of <Op> on the topic
``orders``, the group ``g1``, the transactional id ``tx1`` and the cluster, by
LITERAL name; ``allow-pre-<Op>`` the same by PREFIXED names (``ord``, ``g``, ``tx``);
``deny-lit-<Op>`` ALLOW All by literal name and DENY <Op> by the same literal name;
``deny-pre-<Op>`` ALLOW All by literal name and DENY <Op> by the prefix (deny wins,
whatever pattern allows: Kafka's StandardAuthorizer; the cluster is only ever
literal); ``nobody`` has no ACL; ``elsewhere`` may do All on everything but only from
another host. The expectation of each route is written here from Kafka's request
that does the same job (Produce: Write on the topic; Fetch: Read; Metadata:
Describe; OffsetCommit: Read on the group and the topic; EndTxn: Write on the
TransactionalId; DescribeAcls: Describe on the cluster, CreateAcls and DeleteAcls
Alter; ...), not read from the gateway's own table; :func:`expected` applies Kafka's
implications (Read, Write, Delete or Alter imply Describe; AlterConfigs implies
DescribeConfigs; All is all; an implication never denies).

:func:`routes` holds one case per route of the app (a test fails naming a route
with none); listings (``GET /topics``, groups, transactions, ...) answer everyone
and show only what the principal may Describe, checked per user by
:func:`test_listings_show_only_what_the_principal_may_describe`.
"""

from __future__ import annotations

import base64
import json
import uuid

import pytest
import urllib3

from ingest_gateway.security import passwords
from jobs.gateway_process import GatewayProcess, wait_for
from log_layout import open_log
from log_layout.acls import AclBinding, add_acls

#: slow (not in ``make test-fast``, issue 28): every route as each of 46 principals
#: (Basic auth); 230 s in all, measured beside three other workers
pytestmark = pytest.mark.slow

OPS = ("Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
       "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "All")
IMPLIED_BY = {"Describe": {"Read", "Write", "Delete", "Alter"},
              "DescribeConfigs": {"AlterConfigs"}}
PASSWORD = "pw-matrix"
T, G, C, X = "Topic", "Group", "Cluster", "TransactionalId"
JSON = "application/json"
V2_JSON = "application/vnd.kafka.json.v2+json"
V2_BINARY = "application/vnd.kafka.binary.v2+json"
FORM = "application/x-www-form-urlencoded"


#: Kafka's operations of each resource type (an ACL of another is refused)
SUPPORTED = {T: {"All", "Read", "Write", "Create", "Describe", "Delete", "Alter",
                 "DescribeConfigs", "AlterConfigs"},
             G: {"All", "Read", "Describe", "Delete", "DescribeConfigs", "AlterConfigs"},
             C: {"All", "Create", "ClusterAction", "DescribeConfigs", "AlterConfigs",
                 "IdempotentWrite", "Alter", "Describe"},
             X: {"All", "Describe", "Write"}}
#: the resources of each user's ACLs: (type, literal name, prefix); the cluster has no prefix
RESOURCES = ((T, "orders", "ord"), (G, "g1", "g"), (X, "tx1", "tx"),
             (C, "kafka-cluster", None))
#: the principal the matrix's own ACL requests create and delete (no user of the matrix)
OUTSIDER = "User:outsider"


def grants(held: str, needed: str, rtype: str) -> bool:
    """An ALLOW of ``held`` (if it can exist on ``rtype``) grants ``needed``."""
    return held in SUPPORTED[rtype] and (
        held in ("All", needed) or held in IMPLIED_BY.get(needed, ()))


def expected(user: str, needs) -> bool:
    """Whether Kafka lets ``user`` (see module doc) do a request needing ``needs``: a
    tuple of (operation, resource type), "open", "authenticated", "listing" (answered
    to everyone, filtered) or "idempotent"."""
    if needs in ("open", "authenticated", "listing"):
        return True
    if user.startswith("allow"):
        held = user.split("-", 2)[2]
        if needs == "idempotent":  # InitProducerId: IdempotentWrite, or Write on a topic
            return grants(held, "IdempotentWrite", C) or grants(held, "Write", T)
        return all(grants(held, op, rtype) for op, rtype in needs)
    if user.startswith("deny"):
        denied = user.split("-", 2)[2]
        if needs == "idempotent":
            return denied != "All"  # allowed by All, through either way in
        return not any(denied in ("All", op) and denied in SUPPORTED[rtype]
                       for op, rtype in needs)
    return False  # nobody, elsewhere (wrong host)


USERS = [f"{kind}-{op}" for kind in ("allow-lit", "allow-pre", "deny-lit", "deny-pre")
         for op in OPS] + ["nobody", "elsewhere"]


def acl(rtype, name, pattern, principal, host, operation, permission) -> AclBinding:
    return AclBinding.create(rtype, name, pattern, principal=principal, host=host,
                             operation=operation, permission=permission)


def _bindings():
    for user in USERS:
        principal = f"User:{user}"
        if user in ("nobody", "elsewhere"):
            if user == "elsewhere":
                for rtype, name, _ in RESOURCES:
                    yield acl(rtype, name, "LITERAL", principal, "10.1.2.3", "All", "Allow")
            continue
        permission, kind, op = user.split("-", 2)
        for rtype, name, prefix in RESOURCES:
            by_prefix = kind == "pre" and prefix is not None
            pattern, target = ("PREFIXED", prefix) if by_prefix else ("LITERAL", name)
            if permission == "deny":
                yield acl(rtype, name, "LITERAL", principal, "*", "All", "Allow")
            if op in SUPPORTED[rtype]:
                yield acl(rtype, target, pattern, principal, "*", op, permission.capitalize())


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("acl-matrix")
    store = str(root / "store")
    log = open_log(store)
    log.create_topic("orders", {"partitions": 2})
    for user in [*USERS, "admin"]:
        passwords.add(str(root / "passwords"), user, PASSWORD)
    add_acls(log.store, list(_bindings()))
    settings = {"authentication.method": "basic",
                "authentication.password.file": str(root / "passwords"),
                "authorizer.enabled": "true", "authorizer.super.users": "User:admin"}
    with GatewayProcess(store, settings=settings) as gw:
        s = Secured(gw, log)
        s.instance("m")  # the group g1 (a member) and the transactional id tx1 exist
        assert s.call("admin", "POST", "/v3/transactions/tx1:init", {})[0] == 200
        yield s


class Secured:
    def __init__(self, gw: GatewayProcess, log):
        self.gw, self.log = gw, log
        self.http = urllib3.PoolManager(retries=False, timeout=30)
        self.cluster = self.call("admin", "GET", "/v3/clusters")[1]["data"][0]["cluster_id"]

    def call(self, user: str | None, method: str, path: str, body=None,
             content_type: str = JSON, headers=None):
        h = {"Accept": "application/json", **(headers or {})}
        if user is not None:
            h["Authorization"] = "Basic " + base64.b64encode(
                f"{user}:{PASSWORD}".encode()).decode()
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h["Content-Type"] = content_type
        r = self.http.request(method, self.gw.url + path, body=data, headers=h)
        try:
            doc = json.loads(r.data) if r.data else None
        except ValueError:
            doc = None
        return r.status, doc

    def instance(self, name: str) -> str:
        """A REST consumer instance of g1 subscribed to orders (made by admin)."""
        self.call("admin", "POST", "/consumers/g1", {"name": name, "format": "binary"},
                  V2_JSON)
        base = f"/consumers/g1/instances/{name}"
        self.call("admin", "POST", base + "/subscription", {"topics": ["orders"]}, V2_JSON)
        return base


def routes(cluster: str):
    """(method, path, body, content type, needs) of a request to every route of the app."""
    v3 = f"/v3/clusters/{cluster}"
    inst = "/consumers/g1/instances/m"
    tp = [{"topic": "orders", "partition": 0}]
    tpo = [{"topic": "orders", "partition": 0, "offset": 0}]
    W, R, D = (("Write", T),), (("Read", T),), (("Describe", T),)
    GR, GD = (("Read", G),), (("Describe", G),)
    CD, CA = (("Describe", C),), (("Alter", C),)
    XW = (("Write", X),)
    record = {"records": [{"value": "x"}]}
    producer = {"producer_id": 1, "producer_epoch": 0}
    outsider = {"resource_type": "TOPIC", "resource_name": "elsewhere", "pattern_type": "LITERAL",
                "principal": OUTSIDER, "host": "*", "operation": "READ", "permission": "ALLOW"}
    outsiders = (f"?resource_type=ANY&pattern_type=ANY&operation=ANY&permission=ANY"
                 f"&principal={OUTSIDER}")
    return [
        ("POST", "/topics/orders", record, V2_JSON, W),
        ("POST", "/topics/orders/partitions/0", record, V2_JSON, W),
        ("POST", f"{v3}/topics/orders/records", {"value": {"type": "JSON", "data": 1}}, JSON, W),
        ("POST", f"{v3}/topics/orders/records:batch",
         {"entries": [{"id": "1", "value": {"type": "JSON", "data": 1}}]}, JSON, W),
        ("POST", "/v3/producers", None, JSON, "idempotent"),
        # transactions: InitProducerId, AddPartitionsToTxn (+ Write on each topic),
        # AddOffsetsToTxn (+ Read on the group) and TxnOffsetCommit (+ Read on each
        # topic), EndTxn: Write on the TransactionalId; DescribeTransactions: Describe
        ("GET", "/v3/transactions", None, JSON, "listing"),
        ("POST", "/v3/transactions/tx1:init", {}, JSON, XW),
        ("POST", "/v3/transactions/tx1/partitions", {**producer, "partitions": tp}, JSON,
         XW + W),
        ("POST", "/v3/transactions/tx1/offsets",
         {**producer, "group_id": "g1", "offsets": tpo}, JSON, XW + GR + R),
        ("POST", "/v3/transactions/tx1:commit", producer, JSON, XW),
        ("POST", "/v3/transactions/tx1:abort", producer, JSON, XW),
        ("GET", "/v3/transactions/tx1", None, JSON, (("Describe", X),)),
        ("GET", "/topics/orders/partitions/0/messages?offset=0&count=1", None, JSON, R),
        ("GET", "/topics/orders/partitions/0/offsets", None, JSON, D),
        ("GET", f"{v3}/topics/orders/partitions/0/offset", None, JSON, D),
        ("POST", "/fetch", {"partitions": tpo}, JSON, R),
        ("GET", "/fetch/waiting", None, JSON, CD),
        ("GET", "/topics", None, JSON, "listing"),
        ("GET", "/topics/orders", None, JSON, D),
        ("GET", "/topics/orders/partitions", None, JSON, D),
        ("GET", "/topics/orders/partitions/0", None, JSON, D),
        ("GET", f"{v3}/topics", None, JSON, "listing"),
        ("POST", f"{v3}/topics", {"topic_name": "orders", "partitions_count": 2}, JSON,
         (("Create", C),)),
        ("GET", f"{v3}/topics/orders", None, JSON, D),
        ("PATCH", f"{v3}/topics/orders", {"partitions_count": 2}, JSON, (("Alter", T),)),
        ("GET", f"{v3}/topics/orders/partitions", None, JSON, D),
        ("GET", f"{v3}/topics/orders/partitions/0", None, JSON, D),
        ("GET", f"{v3}/topics/-/configs", None, JSON, "listing"),
        ("GET", f"{v3}/topics/orders/configs", None, JSON, (("DescribeConfigs", T),)),
        ("GET", f"{v3}/topics/orders/configs/retention.ms", None, JSON,
         (("DescribeConfigs", T),)),
        ("POST", f"{v3}/topics/orders/configs:alter",
         {"data": [{"name": "retention.ms", "value": "604800000"}]}, JSON,
         (("AlterConfigs", T),)),
        ("PUT", f"{v3}/topics/orders/configs/retention.ms", {"value": "604800000"}, JSON,
         (("AlterConfigs", T),)),
        ("DELETE", f"{v3}/topics/orders/configs/retention.ms", None, JSON,
         (("AlterConfigs", T),)),
        ("GET", f"{v3}/topics/-/partitions/-/reassignment", None, JSON, CD),
        ("GET", f"{v3}/topics/orders/partitions/-/reassignment", None, JSON, D),
        ("GET", f"{v3}/topics/orders/partitions/0/reassignment", None, JSON, D),
        ("GET", f"{v3}/topics/orders/partitions/0/replicas", None, JSON, D),
        ("GET", f"{v3}/topics/orders/partitions/0/replicas/0", None, JSON, D),
        ("GET", f"{v3}/brokers/0/partition-replicas", None, JSON, CD),
        # ACLs: DescribeAcls Describe on the cluster, CreateAcls and DeleteAcls Alter (the
        # ACLs made and deleted name OUTSIDER only: the matrix's own stay as they are)
        ("GET", f"{v3}/acls", None, JSON, CD),
        ("POST", f"{v3}/acls", outsider, JSON, CA),
        ("POST", f"{v3}/acls:batch", {"data": [outsider]}, JSON, CA),
        ("DELETE", f"{v3}/acls{outsiders}", None, JSON, CA),
        ("GET", "/brokers", None, JSON, "authenticated"),
        ("GET", "/v3/clusters", None, JSON, "authenticated"),
        ("GET", v3, None, JSON, "authenticated"),
        ("GET", f"{v3}/brokers", None, JSON, "authenticated"),
        ("GET", f"{v3}/brokers/0", None, JSON, "authenticated"),
        ("GET", "/metadata?topics=orders&groups=g1", None, JSON, "listing"),
        ("GET", "/groups", None, JSON, "listing"),
        ("GET", "/groups/g1", None, JSON, GD),
        ("POST", "/groups/g1/members", {"topics": ["orders"]}, JSON, GR),
        ("POST", "/groups/g1/members/nobody-here/heartbeat", {"generation": 1}, JSON, GR),
        ("DELETE", "/groups/g1/members/nobody-here", None, JSON, GR),
        ("POST", "/groups/g1/offsets", {"offsets": tpo}, JSON, GR + R),
        ("GET", "/groups/g1/offsets", None, JSON, GD),
        ("GET", f"{v3}/consumer-groups", None, JSON, "listing"),
        ("GET", f"{v3}/consumer-groups/g1", None, JSON, GD),
        ("GET", f"{v3}/consumer-groups/g1/consumers", None, JSON, GD),
        ("GET", f"{v3}/consumer-groups/g1/consumers/x", None, JSON, GD),
        ("GET", f"{v3}/consumer-groups/g1/consumers/x/assignments", None, JSON, GD),
        ("GET", f"{v3}/consumer-groups/g1/consumers/x/assignments/orders/partitions/0", None,
         JSON, GD),
        ("GET", f"{v3}/consumer-groups/g1/lags", None, JSON, GD),
        ("GET", f"{v3}/consumer-groups/g1/lags/orders/partitions/0", None, JSON, GD + D),
        ("GET", f"{v3}/consumer-groups/g1/lag-summary", None, JSON, GD),
        ("POST", "/consumers/g1", {"format": "binary"}, V2_JSON, GR),
        ("POST", "/consumers/g1/", {"format": "binary"}, V2_JSON, GR),
        ("POST", f"{inst}/subscription", {"topics": ["orders"]}, V2_JSON, GR + R),
        ("GET", f"{inst}/subscription", None, JSON, GR),
        ("GET", f"{inst}/records?timeout=0", None, V2_BINARY, GR),
        ("POST", f"{inst}/positions", {"offsets": tpo}, V2_JSON, GR + R),
        ("POST", f"{inst}/positions/beginning", {"partitions": tp}, V2_JSON, GR + R),
        ("POST", f"{inst}/positions/end", {"partitions": tp}, V2_JSON, GR + R),
        ("POST", f"{inst}/assignments", {"partitions": tp}, V2_JSON, GR + R),
        ("GET", f"{inst}/assignments", None, JSON, GR),
        ("POST", f"{inst}/offsets", {"offsets": tpo}, V2_JSON, GR + R),
        ("GET", f"{inst}/offsets", None, JSON, GR),
        ("POST", f"{inst}/heartbeat", None, JSON, GR),
        ("DELETE", f"{inst}/subscription", None, JSON, GR),
        ("DELETE", inst, None, JSON, GR),
        ("GET", "/healthz", None, JSON, "open"),
        ("GET", "/readyz", None, JSON, "open"),
        ("GET", "/metrics", None, JSON, CD),
        ("GET", "/openapi.json", None, JSON, "authenticated"),
        ("GET", "/docs", None, JSON, "authenticated"),
        ("GET", "/redoc", None, JSON, "authenticated"),
        ("GET", "/docs/static/swagger-ui.css", None, JSON, "authenticated"),
        ("GET", "/ui", None, JSON, CD),
        ("GET", "/ui/", None, JSON, CD),
        ("GET", "/ui/static/console.css", None, JSON, "authenticated"),
        ("GET", "/ui/topics", None, JSON, CD),
        ("GET", "/ui/topics/orders", None, JSON, D),
        ("GET", "/ui/topics/orders/messages", None, JSON, R),
        # the console's form (its own page's, so no Sec-Fetch-Site: cross-site)
        ("POST", "/ui/topics/orders/produce", b"value=x", FORM, W),
        ("GET", "/ui/groups", None, JSON, CD),
        ("GET", "/ui/groups/g1", None, JSON, GD),
        ("GET", "/ui/maintenance", None, JSON, CD),
        ("GET", "/ui/schemas", None, JSON, "listing"),  # subjects: test_console_schemas
        ("DELETE", f"{v3}/topics/orders", None, JSON, (("Delete", T),)),
    ]


def _restore(s: Secured, method: str, path: str) -> None:
    """Undo what an allowed request changed that later requests need."""
    if method == "DELETE" and path.endswith("/topics/orders"):
        if "orders" not in s.log.topics():
            s.log.create_topic("orders", {"partitions": 2})
    elif path.startswith("/consumers/g1/instances/m"):
        s.instance("m")  # deleted, unsubscribed or manually assigned: make it again


def test_each_route_allows_exactly_what_kafka_would(secured):
    s = secured
    wrong = []
    for method, path, body, ctype, needs in routes(s.cluster):
        for user in USERS:
            status, doc = s.call(user, method, path, body, ctype)
            allowed = status not in (401, 403)
            if allowed != expected(user, needs):
                wrong.append(f"{method} {path} as {user}: {status} {doc}")
            if status == 403:
                assert doc["error_code"] == 40301, doc
            if allowed and method != "GET":
                _restore(s, method, path)
    assert not wrong, f"{len(wrong)} wrong answers:\n" + "\n".join(wrong[:40])


def test_without_credentials_only_the_probes_answer(secured):
    s = secured
    for method, path, body, ctype, needs in routes(s.cluster):
        status, doc = s.call(None, method, path, body, ctype)
        if needs == "open":
            assert status == 200, (path, status, doc)
        else:
            assert status == 401 and doc["error_code"] == 40101, (method, path, status, doc)


@pytest.mark.parametrize("user", USERS)
def test_listings_show_only_what_the_principal_may_describe(secured, user):
    s = secured
    may = expected(user, (("Describe", T),))
    status, names = s.call(user, "GET", "/topics")
    assert status == 200 and ("orders" in names) == may, (user, names)
    status, doc = s.call(user, "GET", f"/v3/clusters/{s.cluster}/topics")
    assert status == 200
    assert ("orders" in [t["topic_name"] for t in doc["data"]]) == may, (user, doc)
    status, doc = s.call(user, "GET", "/metadata?topics=orders")
    assert status == 200 and (doc["topics"][0].get("error") != "not_authorized") == may, doc
    may_configs = expected(user, (("DescribeConfigs", T),))
    status, doc = s.call(user, "GET", f"/v3/clusters/{s.cluster}/topics/-/configs")
    assert status == 200 and bool(doc["data"]) == may_configs, (user, doc)


@pytest.mark.parametrize("user", USERS)
def test_group_and_transaction_listings_show_only_what_the_principal_may_describe(
        secured, user):
    """Kafka's ListGroups, DescribeGroups through Metadata's FindCoordinator, and
    ListTransactions leave out what the principal may not Describe."""
    s = secured
    may = expected(user, (("Describe", G),))
    status, doc = s.call(user, "GET", "/groups")
    assert status == 200 and ("g1" in doc["groups"]) == may, (user, doc)
    status, doc = s.call(user, "GET", f"/v3/clusters/{s.cluster}/consumer-groups")
    assert status == 200
    assert ("g1" in [g["consumer_group_id"] for g in doc["data"]]) == may, (user, doc)
    status, doc = s.call(user, "GET", "/metadata?groups=g1")
    assert status == 200 and (doc["groups"][0].get("error") != "not_authorized") == may, doc
    may = expected(user, (("Describe", X),))
    status, doc = s.call(user, "GET", "/v3/transactions")
    assert status == 200
    assert ("tx1" in [t["transactional_id"] for t in doc["data"]]) == may, (user, doc)


def test_a_new_acl_is_enforced_by_the_running_gateway(secured):
    s = secured
    user = f"late-{uuid.uuid4().hex[:6]}"
    passwords.add(s.gw.settings["authentication.password.file"], user, PASSWORD)
    # the gateway reads the password file again within a second: known, then refused
    wait_for(lambda: s.call(user, "GET", "/topics/orders")[0] != 401, timeout=30,
             what="the gateway to read the new password")
    assert s.call(user, "GET", "/topics/orders")[0] == 403
    add_acls(s.log.store, [acl(T, "orders", "LITERAL", f"User:{user}", "*", "Describe",
                               "Allow")])
    wait_for(lambda: s.call(user, "GET", "/topics/orders")[0] == 200, timeout=30,
             what="the gateway to read the new ACL")


def test_every_route_of_the_gateway_has_a_case_in_the_matrix():
    """Each route of the app is the one Starlette sends some case of :func:`routes` to
    (the first route matching, as it dispatches): a route added to the app without a
    case here fails this, naming it."""
    from starlette.routing import Match

    from ingest_gateway.http.app import routes as app_routes

    app = app_routes()
    reached = set()
    for method, path, *_ in routes("c1"):
        scope = {"type": "http", "method": method, "path": path.split("?")[0],
                 "root_path": ""}
        route = next((r for r in app if r.matches(scope)[0] == Match.FULL), None)
        assert route is not None, f"{method} {path}: no route of the app"
        reached.add((method, route.path))
    missing = [f"{m} {r.path}" for r in app for m in sorted((r.methods or set()) - {"HEAD"})
               if (m, r.path) not in reached]
    assert not missing, f"routes without a case in the ACL matrix: {missing}"


def test_every_route_of_the_gateway_has_a_rule():
    """A route added without a rule would need Describe on the cluster (closed, not
    open): this says which route lacks one, so route_acls keeps up with the app."""
    from ingest_gateway.http.app import routes as app_routes
    from ingest_gateway.security.route_acls import UNKNOWN_ROUTE, rule_for

    missing = []
    for route in app_routes():
        path = route.path.replace("{", "").replace("}", "")  # a name per parameter
        for method in sorted(route.methods or ()):
            if method == "HEAD":
                continue
            rule, _ = rule_for(method, path)
            if rule is UNKNOWN_ROUTE:
                missing.append(f"{method} {route.path}")
    assert not missing, missing
