"""ACL checks of the Kafka APIs whose handlers do not check per resource themselves.

Produce, Fetch, ListOffsets and Metadata check each topic in their handlers and answer
Kafka's per-topic error codes (``kafka.security.allowed``). The other APIs are checked
here, before their handler runs, with the operations Kafka's broker checks
("Operations and Resources on Protocols"): group APIs Read on the Group (OffsetCommit
also Read on its topics, OffsetFetch Describe on the group and its topics),
FindCoordinator Describe on the Group or TransactionalId, the transaction APIs Write on
the TransactionalId (AddPartitionsToTxn also Write on the topics, AddOffsetsToTxn and
TxnOffsetCommit Read on the group), InitProducerId Write on the TransactionalId or,
without one, IdempotentWrite on the cluster or Write on some topic, CreateTopics Create
on the cluster or each topic, DeleteTopics and DeleteRecords Delete on each topic,
DescribeConfigs/AlterConfigs on the topic (a broker: the cluster),
OffsetForLeaderEpoch Describe on each topic, ListGroups and DescribeCluster Describe on
the cluster.

A denial here closes the connection (:func:`check` raises ProtocolError) rather than
answering the API's own error code (GROUP_AUTHORIZATION_FAILED and the others): fail
closed, nothing done; the per-API error answers are not built yet. An API not in the
table is served only to a principal allowed ``All`` on the cluster (a super user).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ingest_gateway.kafka.wire import ProtocolError

CLUSTER = ("Cluster", "kafka-cluster")
#: APIs checked by their handlers, or served to anyone (ApiVersions, SASL)
OWN_CHECKS = frozenset({0, 1, 2, 3, 17, 18, 36})

Need = tuple[str, str, str]  # (operation, resource type, name)


def _topics(req: Any, field: str = "topics", name: str = "name") -> list[str]:
    return [getattr(t, name) for t in (getattr(req, field, None) or ())]


def _group(req: Any, op: str = "Read") -> list[Need]:
    return [(op, "Group", req.group_id)]


def _find_coordinator(req: Any) -> list[Need]:
    keys = getattr(req, "coordinator_keys", None) or (req.key,)
    rtype = "TransactionalId" if int(req.key_type) == 1 else "Group"
    return [("Describe", rtype, k) for k in keys]


def _offset_commit(req: Any) -> list[Need]:
    return _group(req) + [("Read", "Topic", t) for t in _topics(req)]


def _offset_fetch(req: Any) -> list[Need]:
    groups = getattr(req, "groups", None)
    if groups is None:  # before v8: one group
        groups = (req,)
    needs: list[Need] = []
    for g in groups:
        needs.append(("Describe", "Group", g.group_id))
        needs += [("Describe", "Topic", t) for t in _topics(g)]
    return needs


def _txn(req: Any) -> list[Need]:
    return [("Write", "TransactionalId", req.transactional_id)]


def _configs(op: str) -> Callable[[Any], list[Need]]:
    def needs(req: Any) -> list[Need]:
        out: list[Need] = []
        for r in req.resources:
            if int(r.resource_type) == 2:  # TOPIC
                out.append((op, "Topic", r.resource_name))
            else:  # a broker or broker logger: the cluster
                out.append((op, *CLUSTER))
        return out
    return needs


def _delete_topics(req: Any) -> list[Need]:
    names = getattr(req, "topic_names", None)
    if names is None:
        names = [t.name for t in req.topics]
    return [("Delete", "Topic", n) for n in names]


NEEDS: dict[int, Callable[[Any], list[Need]]] = {
    8: _offset_commit,
    9: _offset_fetch,
    10: _find_coordinator,
    11: _group, 12: _group, 13: _group, 14: _group,
    15: lambda r: [("Describe", "Group", g) for g in r.groups],
    16: lambda r: [("Describe", *CLUSTER)],
    20: _delete_topics,
    21: lambda r: [("Delete", "Topic", t) for t in _topics(r)],
    23: lambda r: [("Describe", "Topic", t) for t in _topics(r, name="topic")],
    24: lambda r: _txn(r) + [("Write", "Topic", t) for t in _topics(r)],
    25: lambda r: _txn(r) + _group(r),
    26: _txn,
    28: lambda r: _txn(r) + _group(r) + [("Read", "Topic", t) for t in _topics(r)],
    32: _configs("DescribeConfigs"),
    33: _configs("AlterConfigs"),
    44: _configs("AlterConfigs"),
    60: lambda r: [("Describe", *CLUSTER)],
}


def _denied(authorize: Callable[[str, str, str], bool], api_key: int, req: Any,
            any_topic: Callable[[str], bool]) -> Iterator[str]:
    """What the request needs and is not allowed (empty: allowed)."""
    if api_key == 19:  # CreateTopics: Create on the cluster, else on each topic
        if not authorize("Create", *CLUSTER):
            yield from (f"Create on Topic {t}" for t in _topics(req)
                        if not authorize("Create", "Topic", t))
        return
    if api_key == 22:  # InitProducerId
        tid = req.transactional_id
        if tid is not None:
            if not authorize("Write", "TransactionalId", tid):
                yield f"Write on TransactionalId {tid}"
        elif not authorize("IdempotentWrite", *CLUSTER) and not any_topic("Write"):
            yield "IdempotentWrite on the cluster (or Write on a topic)"
        return
    needs = NEEDS.get(api_key)
    if needs is None:
        if not authorize("All", *CLUSTER):
            yield f"All on the cluster (API {api_key})"
        return
    for op, rtype, name in needs(req):
        if not authorize(op, rtype, name):
            yield f"{op} on {rtype} {name}"


def check(broker: Any, who: Any, api_key: int, req: Any) -> None:
    """Raises ProtocolError (the connection is closed) when the gateway has an
    authorizer and ``who`` may not do what this request asks (module doc)."""
    authorizer = getattr(broker.state, "authorizer", None)
    if authorizer is None or api_key in OWN_CHECKS:
        return

    def authorize(op: str, rtype: str, name: str) -> bool:
        if op == "All":  # "All" is not an operation to ask for: only super users have it
            return who.principal in authorizer.super_users
        return authorizer.authorize(who.principal, who.host, op, rtype, name)

    def any_topic(op: str) -> bool:
        return authorizer.authorize_by_resource_type(who.principal, who.host, op, "Topic")

    try:
        refused = list(_denied(authorize, api_key, req, any_topic))
    except (AttributeError, TypeError, ValueError) as e:  # a shape not foreseen: fail closed
        raise ProtocolError(f"API {api_key}: cannot tell what it needs ({e})") from None
    if refused:
        raise ProtocolError(f"{who.principal} is not authorized: {'; '.join(refused)}")
