"""ACL checks of the Kafka APIs whose answer has one error code, made before their
handler runs.

The APIs whose answers carry an error code per resource check in their handlers, as
Kafka's ``KafkaApis`` does, so that a denied topic, partition, group or config resource
gets its own code and the others are served: Produce, Fetch, ListOffsets, Metadata
(``kafka.security.allowed``), OffsetCommit, OffsetFetch, DescribeGroups, ListGroups
(``groups_offsets``), DeleteGroups, OffsetDelete (``groups_delete``), CreateTopics,
DeleteTopics (``admin_topics``), DeleteRecords,
OffsetForLeaderEpoch (``admin_records``), AddPartitionsToTxn, TxnOffsetCommit (``txn``),
Describe/Alter/IncrementalAlterConfigs (``admin_configs``),
Describe/AlterUserScramCredentials (``scram_admin``), Describe/AlterClientQuotas
(``quota_admin``), CreatePartitions, ElectLeaders,
DescribeLogDirs (``admin_partitions``), ListTransactions, DescribeTransactions,
DescribeProducers, WriteTxnMarkers (``admin_transactions``), DescribeAcls, CreateAcls,
DeleteAcls (``admin_acls``), AlterReplicaLogDirs,
AlterPartitionReassignments, ListPartitionReassignments (``admin_reassign``). Those are
:data:`OWN_CHECKS`.

The others are checked here with the operations Kafka's broker checks ("Operations and
Resources on Protocols"): JoinGroup, SyncGroup, Heartbeat, LeaveGroup Read on the
Group; FindCoordinator Describe on the Group or TransactionalId; AddOffsetsToTxn Write
on the TransactionalId and Read on the group; EndTxn Write on the TransactionalId;
InitProducerId Write on the TransactionalId or, without one, IdempotentWrite on the
cluster or Write on some topic; DescribeCluster Describe on the cluster. A denial is
answered, without running the handler, with Kafka's code of the first resource
refused (GROUP_AUTHORIZATION_FAILED 30, TRANSACTIONAL_ID_AUTHORIZATION_FAILED 53,
CLUSTER_AUTHORIZATION_FAILED 31; FindCoordinator v4+ per key); the connection stays
open. An API in neither table is served only to a super user (and, should its answer
have no top-level error code, a denial closes the connection: fail closed).
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

CLUSTER = ("Cluster", sec.CLUSTER_NAME)
#: APIs checked by their handlers (per resource), or served to anyone (ApiVersions, SASL)
OWN_CHECKS = frozenset({0, 1, 2, 3, 8, 9, 15, 16, 17, 18, 19, 20, 21, 23, 24, 27, 28, 29, 30,
                        31, 32, 33, 34, 35, 36, 37, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51,
                        61, 65, 66})

Need = tuple[str, str, str]  # (operation, resource type, name)


def _group(req: Any, op: str = "Read") -> list[Need]:
    return [(op, "Group", req.group_id)]


def _find_coordinator(req: Any) -> list[Need]:
    keys = getattr(req, "coordinator_keys", None) or (req.key,)
    rtype = "TransactionalId" if int(req.key_type) == 1 else "Group"
    return [("Describe", rtype, k) for k in keys]


def _txn(req: Any) -> list[Need]:
    return [("Write", "TransactionalId", req.transactional_id)]


NEEDS: dict[int, Callable[[Any], list[Need]]] = {
    10: _find_coordinator,
    11: _group, 12: _group, 13: _group, 14: _group,
    25: lambda r: _txn(r) + _group(r),
    26: _txn,
    60: lambda r: [("Describe", *CLUSTER)],
}


def _denied(authorize: Callable[[str, str, str], bool], api_key: int, req: Any,
            any_topic: Callable[[str], bool]) -> Iterator[Need]:
    """What the request needs and is not allowed (empty: allowed)."""
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


def check(ctx: Any, who: Any, head: Header, req: Any) -> Any:
    """None when the gateway has no authorizer or ``who`` may do what this request
    asks; else the refusal to answer (module doc). Raises ProtocolError (the connection
    is closed) for a refusal the API's answer cannot carry."""
    api_key = head.api_key
    authorizer = ctx.gateway.authorizer
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
    code = sec.CODES[refused[0][1]]
    answer = _coordinators_refused(head, req, code) if api_key == 10 \
        and head.api_version >= 4 else refusal(head, code)
    if answer is None:
        said = "; ".join(f"{op} on {rtype} {name}" for op, rtype, name in refused)
        raise ProtocolError(f"{who.principal} is not authorized: {said}")
    return answer
