"""Which operation on which resource each route of the gateway needs: Kafka's checks.

Each route maps to what the Kafka request doing the same job asks its authorizer
(Kafka's ``KafkaApis``): producing needs Write on the topic, fetching Read on the
topic, a group's offsets Read on the group, a topic's configs DescribeConfigs, and
so on. A rule is one of:

- :data:`OPEN`: no authentication either (``/healthz``, ``/readyz``: load balancers
  and orchestrators probe them without credentials; they reveal nothing);
- :data:`AUTHENTICATED`: any authenticated principal (the API's own documents, the
  cluster and broker listings, which Kafka's Metadata and DescribeCluster give every
  client);
- a tuple of :class:`Need`: every one must be allowed;
- a :class:`Need` tuple ending in :data:`IN_HANDLER`: the route's handler checks
  what its body names (the topics of a fetch or a commit, a new topic's name) or
  filters a listing to what the principal may Describe, as Kafka's Metadata and
  ListGroups do (``ingest_gateway.http.access``).

:func:`rule_for` finds a request's rule from its method and path; a path no rule
knows needs Describe on the cluster (so a route added without a rule is closed,
not open).
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: Kafka's one cluster resource name
CLUSTER = "kafka-cluster"

#: the operations of Kafka's ACLs (``AclOperation``), in kafka-acls.sh's spelling
OPERATIONS = ("Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
              "DescribeConfigs", "AlterConfigs", "IdempotentWrite")
RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId", "Subject")


class Need(NamedTuple):
    """``operation`` on the resource of ``resource_type`` named by the path parameter
    ``param`` (or the cluster)."""

    operation: str
    resource_type: str
    param: str = ""

    def name(self, params: dict[str, str]) -> str:
        return CLUSTER if self.resource_type == "Cluster" else params[self.param]


OPEN = "open"
AUTHENTICATED = "authenticated"
IN_HANDLER = "in-handler"

_T = "Topic"
_G = "Group"
_C = "Cluster"
_GROUP_READ = (Need("Read", _G, "group"),)
_V3 = "/v3/clusters/{cluster_id}"
_TXN_WRITE = Need("Write", "TransactionalId", "tid")

#: (methods, path template, rule); GET rules cover HEAD
RULES: tuple[tuple[str, str, object], ...] = (
    # produce: Write on the topic (Kafka's Produce; an idempotent one needs no more
    # since Kafka 2.8: Write on a topic implies IdempotentWrite)
    ("POST", "/topics/{topic}", (Need("Write", _T, "topic"),)),
    ("POST", "/topics/{topic}/partitions/{partition}", (Need("Write", _T, "topic"),)),
    ("POST", _V3 + "/topics/{topic}/records", (Need("Write", _T, "topic"),)),
    ("POST", _V3 + "/topics/{topic}/records:batch", (Need("Write", _T, "topic"),)),
    ("POST", "/v3/producers", (IN_HANDLER,)),  # InitProducerId: IdempotentWrite or a Write
    # transactions (InitProducerId, AddPartitionsToTxn, EndTxn: Write on the
    # TransactionalId; AddOffsetsToTxn also Read on the group; listing: Describe,
    # filtered in the handler as Kafka's ListTransactions is)
    ("GET", "/v3/transactions", (IN_HANDLER,)),
    ("POST", "/v3/transactions/{tid}:init", (_TXN_WRITE,)),
    ("POST", "/v3/transactions/{tid}:commit", (_TXN_WRITE,)),
    ("POST", "/v3/transactions/{tid}:abort", (_TXN_WRITE,)),
    ("POST", "/v3/transactions/{tid}/partitions", (_TXN_WRITE, IN_HANDLER)),  # + Write topics
    ("POST", "/v3/transactions/{tid}/offsets", (_TXN_WRITE, IN_HANDLER)),  # + Read on the group
    ("GET", "/v3/transactions/{tid}", (Need("Describe", "TransactionalId", "tid"),)),
    # reads: Fetch needs Read on the topic; ListOffsets Describe
    ("GET", "/topics/{topic}/partitions/{partition}/messages", (Need("Read", _T, "topic"),)),
    ("GET", "/topics/{topic}/partitions/{partition}/offsets", (Need("Describe", _T, "topic"),)),
    ("GET", _V3 + "/topics/{topic}/partitions/{partition}/offset",
     (Need("Describe", _T, "topic"),)),
    # Read on each topic fetched; Kafka's Fetch names no group (a group is checked where
    # it is named: joins, heartbeats, commits, OffsetFetch)
    ("POST", "/fetch", (IN_HANDLER,)),
    ("GET", "/fetch/waiting", (Need("Describe", _C),)),
    # topic metadata and admin (Metadata, CreateTopics, DeleteTopics, *Configs)
    ("GET", "/topics", (IN_HANDLER,)),
    ("GET", "/topics/{topic}", (Need("Describe", _T, "topic"),)),
    ("GET", "/topics/{topic}/partitions", (Need("Describe", _T, "topic"),)),
    ("GET", "/topics/{topic}/partitions/{partition}", (Need("Describe", _T, "topic"),)),
    ("GET", _V3 + "/topics", (IN_HANDLER,)),
    ("POST", _V3 + "/topics", (IN_HANDLER,)),  # Create on the topic or on the cluster
    ("GET", _V3 + "/topics/{topic}", (Need("Describe", _T, "topic"),)),
    ("PATCH", _V3 + "/topics/{topic}", (Need("Alter", _T, "topic"),)),  # CreatePartitions
    ("DELETE", _V3 + "/topics/{topic}", (Need("Delete", _T, "topic"),)),
    ("GET", _V3 + "/topics/{topic}/partitions", (Need("Describe", _T, "topic"),)),
    ("GET", _V3 + "/topics/{topic}/partitions/{partition}", (Need("Describe", _T, "topic"),)),
    ("GET", _V3 + "/topics/-/configs", (IN_HANDLER,)),
    ("GET", _V3 + "/topics/{topic}/configs", (Need("DescribeConfigs", _T, "topic"),)),
    ("GET", _V3 + "/topics/{topic}/configs/{name}", (Need("DescribeConfigs", _T, "topic"),)),
    ("POST", _V3 + "/topics/{topic}/configs:alter", (Need("AlterConfigs", _T, "topic"),)),
    ("PUT", _V3 + "/topics/{topic}/configs/{name}", (Need("AlterConfigs", _T, "topic"),)),
    ("DELETE", _V3 + "/topics/{topic}/configs/{name}", (Need("AlterConfigs", _T, "topic"),)),
    ("GET", _V3 + "/topics/-/partitions/-/reassignment", (Need("Describe", _C),)),
    ("GET", _V3 + "/topics/{topic}/partitions/-/reassignment", (Need("Describe", _T, "topic"),)),
    ("GET", _V3 + "/topics/{topic}/partitions/{partition}/reassignment",
     (Need("Describe", _T, "topic"),)),
    ("GET", _V3 + "/topics/{topic}/partitions/{partition}/replicas",
     (Need("Describe", _T, "topic"),)),
    ("GET", _V3 + "/topics/{topic}/partitions/{partition}/replicas/{broker_id}",
     (Need("Describe", _T, "topic"),)),
    ("GET", _V3 + "/brokers/{broker_id}/partition-replicas", (Need("Describe", _C),)),
    # ACLs: DescribeAcls needs Describe on the cluster, CreateAcls and DeleteAcls Alter
    ("GET", _V3 + "/acls", (Need("Describe", _C),)),
    ("POST", _V3 + "/acls", (Need("Alter", _C),)),
    ("POST", _V3 + "/acls:batch", (Need("Alter", _C),)),
    ("DELETE", _V3 + "/acls", (Need("Alter", _C),)),
    # cluster: what Kafka's Metadata and DescribeCluster give any client
    ("GET", "/brokers", AUTHENTICATED),
    ("GET", "/v3/clusters", AUTHENTICATED),
    ("GET", _V3, AUTHENTICATED),
    ("GET", _V3 + "/brokers", AUTHENTICATED),
    ("GET", _V3 + "/brokers/{broker_id}", AUTHENTICATED),
    ("GET", "/metadata", (IN_HANDLER,)),  # partitions of the topics it may Describe
    # consumer groups (JoinGroup, Heartbeat, LeaveGroup, OffsetCommit: Read on the group;
    # DescribeGroups, OffsetFetch: Describe)
    ("GET", "/groups", (IN_HANDLER,)),
    ("GET", "/groups/{group}", (Need("Describe", _G, "group"),)),
    ("POST", "/groups/{group}/members", _GROUP_READ),
    ("POST", "/groups/{group}/members/{member}/heartbeat", _GROUP_READ),
    ("DELETE", "/groups/{group}/members/{member}", _GROUP_READ),
    ("POST", "/groups/{group}/offsets", (*_GROUP_READ, IN_HANDLER)),  # + Read on each topic
    ("GET", "/groups/{group}/offsets", (Need("Describe", _G, "group"), IN_HANDLER)),
    ("GET", _V3 + "/consumer-groups", (IN_HANDLER,)),
    ("GET", _V3 + "/consumer-groups/{group}", (Need("Describe", _G, "group"),)),
    ("GET", _V3 + "/consumer-groups/{group}/consumers", (Need("Describe", _G, "group"),)),
    ("GET", _V3 + "/consumer-groups/{group}/consumers/{consumer}",
     (Need("Describe", _G, "group"),)),
    ("GET", _V3 + "/consumer-groups/{group}/consumers/{consumer}/assignments",
     (Need("Describe", _G, "group"),)),
    ("GET", _V3 + "/consumer-groups/{group}/consumers/{consumer}/assignments/{topic}"
     "/partitions/{partition}", (Need("Describe", _G, "group"),)),
    ("GET", _V3 + "/consumer-groups/{group}/lags",
     (Need("Describe", _G, "group"), IN_HANDLER)),
    ("GET", _V3 + "/consumer-groups/{group}/lags/{topic}/partitions/{partition}",
     (Need("Describe", _G, "group"), Need("Describe", _T, "topic"))),
    ("GET", _V3 + "/consumer-groups/{group}/lag-summary",
     (Need("Describe", _G, "group"), IN_HANDLER)),
    # REST Proxy v2 consumer instances: a member of the group
    ("POST", "/consumers/{group}", _GROUP_READ),
    ("POST", "/consumers/{group}/", _GROUP_READ),
    ("POST", "/consumers/{group}/instances/{instance}/subscription", (*_GROUP_READ, IN_HANDLER)),
    ("GET", "/consumers/{group}/instances/{instance}/subscription", _GROUP_READ),
    ("DELETE", "/consumers/{group}/instances/{instance}/subscription", _GROUP_READ),
    ("GET", "/consumers/{group}/instances/{instance}/records", _GROUP_READ),
    ("POST", "/consumers/{group}/instances/{instance}/positions", (*_GROUP_READ, IN_HANDLER)),
    ("POST", "/consumers/{group}/instances/{instance}/positions/beginning",
     (*_GROUP_READ, IN_HANDLER)),
    ("POST", "/consumers/{group}/instances/{instance}/positions/end",
     (*_GROUP_READ, IN_HANDLER)),
    ("POST", "/consumers/{group}/instances/{instance}/assignments",
     (*_GROUP_READ, IN_HANDLER)),
    ("GET", "/consumers/{group}/instances/{instance}/assignments", _GROUP_READ),
    ("POST", "/consumers/{group}/instances/{instance}/offsets", (*_GROUP_READ, IN_HANDLER)),
    ("GET", "/consumers/{group}/instances/{instance}/offsets", (*_GROUP_READ, IN_HANDLER)),
    ("POST", "/consumers/{group}/instances/{instance}/heartbeat", _GROUP_READ),
    ("DELETE", "/consumers/{group}/instances/{instance}", _GROUP_READ),
    # operations and documents
    ("GET", "/healthz", OPEN),
    ("GET", "/readyz", OPEN),
    ("GET", "/metrics", (Need("Describe", _C),)),
    ("GET", "/openapi.json", AUTHENTICATED),
    ("GET", "/docs", AUTHENTICATED),
    ("GET", "/redoc", AUTHENTICATED),
    ("GET", "/docs/static/{file}", AUTHENTICATED),
    # the web console: an operator's view of the whole cluster
    ("GET", "/ui", (Need("Describe", _C),)),
    ("GET", "/ui/", (Need("Describe", _C),)),
    ("GET", "/ui/static/{name}", AUTHENTICATED),
    ("GET", "/ui/topics", (Need("Describe", _C),)),
    ("GET", "/ui/topics/{topic}", (Need("Describe", _T, "topic"),)),
    ("GET", "/ui/topics/{topic}/messages", (Need("Read", _T, "topic"),)),
    ("POST", "/ui/topics/{topic}/produce", (Need("Write", _T, "topic"),)),
    ("GET", "/ui/groups", (Need("Describe", _C),)),
    ("GET", "/ui/groups/{group}", (Need("Describe", _G, "group"),)),
    ("GET", "/ui/maintenance", (Need("Describe", _C),)),
    # the registry's subjects: listed as the principal may Read them, a subject's page
    # Read on it (``http.console_schemas``), as the registry's own routes
    ("GET", "/ui/schemas", (IN_HANDLER,)),
)

#: the rule of a path no rule knows
UNKNOWN_ROUTE = (Need("Describe", _C),)
#: the Schema Registry's routes (under ``gateway.schema.registry.path``): each handler
#: checks its Subject (Read, Write, Delete, DescribeConfigs, AlterConfigs) or, for the
#: global config and mode, the cluster's DescribeConfigs/AlterConfigs, and filters its
#: listings to the subjects the principal may Read (``http.schema_registry``). A subject
#: may hold ``/`` (sent as ``%2F``), which this decoded path cannot tell from a separator.
REGISTRY_ROUTE = (IN_HANDLER,)


def _compile(template: str) -> re.Pattern[str]:
    pattern = re.escape(template).replace(r"\{", "{").replace(r"\}", "}")
    return re.compile("^" + re.sub(r"{(\w+)}", r"(?P<\1>[^/]+)", pattern) + "$")


_COMPILED = tuple((methods, _compile(template), rule) for methods, template, rule in RULES)


def rule_for(method: str, path: str, *, registry: str = "") -> tuple[object, dict[str, str]]:
    """(rule, path parameters) of a request. ``path`` is the ASGI scope's, already
    percent-decoded, as the routes match it. A path that several templates match takes the first, in
    :data:`RULES` order (``topics/-/configs`` before ``topics/{topic}/configs``).
    ``registry``: the Schema Registry's prefix (empty: none), whose paths take
    :data:`REGISTRY_ROUTE`."""
    method = "GET" if method == "HEAD" else method
    if registry and (path == registry or path.startswith(registry + "/")):
        return REGISTRY_ROUTE, {}
    for methods, pattern, rule in _COMPILED:
        if methods != method:
            continue
        match = pattern.match(path)
        if match is not None:
            return rule, match.groupdict()
    return UNKNOWN_ROUTE, {}
