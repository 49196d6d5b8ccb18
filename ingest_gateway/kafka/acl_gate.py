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

A denial is answered, without running the handler, with Kafka's error code of the
first resource refused (GROUP_AUTHORIZATION_FAILED 30, TRANSACTIONAL_ID_AUTHORIZATION_FAILED
53, CLUSTER_AUTHORIZATION_FAILED 31, TOPIC_AUTHORIZATION_FAILED 29) when the API's
answer has one top-level error code (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
FindCoordinator before v4, InitProducerId, AddOffsetsToTxn, EndTxn); for the others
(answers with per-resource codes) it closes the connection: fail closed, nothing done.
An API not in the table is served only to a super user.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from kio.index import load_response_schema

from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.wire import Header, ProtocolError, error

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


#: Kafka's error code of a denial, by the type of the resource refused
CODES = {"Group": sec.GROUP_AUTHORIZATION_FAILED, "Topic": sec.TOPIC_AUTHORIZATION_FAILED,
         "TransactionalId": sec.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
         "Cluster": sec.CLUSTER_AUTHORIZATION_FAILED}


def _denied(authorize: Callable[[str, str, str], bool], api_key: int, req: Any,
            any_topic: Callable[[str], bool]) -> Iterator[Need]:
    """What the request needs and is not allowed (empty: allowed)."""
    if api_key == 19:  # CreateTopics: Create on the cluster, else on each topic
        if not authorize("Create", *CLUSTER):
            yield from (("Create", "Topic", t) for t in _topics(req)
                        if not authorize("Create", "Topic", t))
        return
    if api_key == 22:  # InitProducerId
        tid = req.transactional_id
        if tid is not None:
            if not authorize("Write", "TransactionalId", tid):
                yield "Write", "TransactionalId", tid
        elif not authorize("IdempotentWrite", *CLUSTER) and not any_topic("Write"):
            yield "IdempotentWrite", *CLUSTER
        return
    needs = NEEDS.get(api_key)
    if needs is None:
        if not authorize("All", *CLUSTER):
            yield "All", *CLUSTER
        return
    for op, rtype, name in needs(req):
        if not authorize(op, rtype, name):
            yield op, rtype, name


def _zero(f: dataclasses.Field, code: int) -> Any:
    """A field's value in a refusal: the error code, else an empty or -1 value."""
    kind = f.metadata.get("kafka_type")
    if kind == "error_code":
        return error(code)
    if kind is None:
        return ()  # a list of entities
    if kind.startswith("timedelta"):
        return datetime.timedelta(0)
    if kind.startswith("int") or kind.startswith("uint"):
        return -1
    if kind == "string":
        return None if "None" in str(f.type) else ""
    if kind == "bytes":
        return b""
    if kind == "bool":
        return False
    if kind == "uuid":
        return uuid.UUID(int=0)
    raise TypeError(f"no empty value for {kind}")


def refusal(head: Header, code: int) -> Any:
    """The API's answer carrying only ``code``, or None when its answer has no
    top-level error code (per-resource codes: not built here; FindCoordinator v4+, whose
    answer is per key, is answered ``code`` for every key)."""
    cls = load_response_schema(head.api_key, head.api_version)
    fields = dataclasses.fields(cls)
    if head.api_key == 10 and head.api_version >= 4:
        return None  # answered by _coordinators_refused, which knows the keys
    if "error_code" not in {f.name for f in fields}:
        return None
    try:
        return cls(**{f.name: _zero(f, code) for f in fields if f.default is dataclasses.MISSING
                      and f.default_factory is dataclasses.MISSING})
    except TypeError:
        return None


def _coordinators_refused(head: Header, req: Any, code: int) -> Any:
    """FindCoordinator v4+ refused: ``code`` for each key asked."""
    import sys

    cls = load_response_schema(head.api_key, head.api_version)
    mod = sys.modules[cls.__module__]
    return cls(throttle_time=datetime.timedelta(0), coordinators=tuple(
        mod.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=error(code),
                        error_message="not authorized") for k in req.coordinator_keys))


def check(broker: Any, who: Any, head: Header, req: Any) -> Any:
    """None when the gateway has no authorizer or ``who`` may do what this request
    asks; else the refusal to answer (module doc). Raises ProtocolError (the connection
    is closed) for a refusal the API's answer cannot carry."""
    api_key = head.api_key
    authorizer = getattr(broker.state, "authorizer", None)
    if authorizer is None or api_key in OWN_CHECKS:
        return None

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
    if not refused:
        return None
    code = CODES[refused[0][1]]
    answer = _coordinators_refused(head, req, code) if api_key == 10 \
        and head.api_version >= 4 else refusal(head, code)
    if answer is None:
        said = "; ".join(f"{op} on {rtype} {name}" for op, rtype, name in refused)
        raise ProtocolError(f"{who.principal} is not authorized: {said}")
    return answer
