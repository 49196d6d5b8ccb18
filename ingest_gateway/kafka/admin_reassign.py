"""Replica placement over the Kafka protocol: AlterPartitionReassignments,
ListPartitionReassignments and AlterReplicaLogDirs (``kafka-reassign-partitions.sh``),
answered truthfully for a store-replicated log.

Each partition has one replica, the store, led by the broker the assignment names
(``Gateway.leader``; Metadata lists it as the partition's only replica). So:

- **ListPartitionReassignments** lists none: no reassignment is ever in progress
  (``kafka-reassign-partitions.sh --list`` prints "No partition reassignments found").
- **AlterPartitionReassignments**: a reassignment to the replicas a partition has (its
  leader alone) is done at once (``NONE``, as Kafka's controller answers one that
  changes nothing); any other set answers ``INVALID_REPLICA_ASSIGNMENT`` with why (the
  gateways hold no replicas to move); a cancellation (null replicas)
  ``NO_REASSIGNMENT_IN_PROGRESS``; an unknown partition ``UNKNOWN_TOPIC_OR_PARTITION``.
- **AlterReplicaLogDirs**: the one log directory is the store (``DescribeLogDirs``
  answers it by its URL): a move to it of a partition this broker leads is already done
  (``NONE``); any other directory answers ``LOG_DIR_NOT_FOUND``, a partition another
  broker leads ``REPLICA_NOT_AVAILABLE``, as Kafka's broker answers for a replica it
  does not hold.

ACLs (Kafka's): Alter on the cluster for both Alter APIs, Describe on the cluster for
the list; a denial is the answer's top-level ``CLUSTER_AUTHORIZATION_FAILED``
(AlterReplicaLogDirs, which has none: each partition's).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.admin_partitions import partition_counts, store_name
from ingest_gateway.kafka.context import ZERO, KafkaContext
from ingest_gateway.kafka.wire import Header, error, make, response_module

API_ALTER_REPLICA_LOG_DIRS, API_ALTER_REASSIGNMENTS, API_LIST_REASSIGNMENTS = 34, 45, 46
#: Kafka 4.0's version floors up to the newest kio reads
OFFERED: dict[int, tuple[int, int]] = {
    API_ALTER_REPLICA_LOG_DIRS: (1, 2),
    API_ALTER_REASSIGNMENTS: (0, 1),
    API_LIST_REASSIGNMENTS: (0, 0),
}
INVALID_REPLICA_ASSIGNMENT = ErrorCode.invalid_replica_assignment
NO_REASSIGNMENT_IN_PROGRESS = ErrorCode.no_reassignment_in_progress
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.unknown_topic_or_partition
LOG_DIR_NOT_FOUND = ErrorCode.log_dir_not_found
REPLICA_NOT_AVAILABLE = ErrorCode.replica_not_available
_ONE_REPLICA = ("each partition has one replica, the store, led by the broker the "
                "assignment names: there are no replicas to move")


async def list_reassignments(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_LIST_REASSIGNMENTS, head.api_version)
    code = sec.refused(ctx, "Describe", "Cluster")
    return make(mod.ListPartitionReassignmentsResponse, throttle_time=ZERO,
                error_code=error(code), error_message=None, topics=())


async def alter_reassignments(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_ALTER_REASSIGNMENTS, head.api_version)
    denied = sec.refused(ctx, "Alter", "Cluster")
    if denied:
        return make(mod.AlterPartitionReassignmentsResponse, throttle_time=ZERO,
                    allow_replication_factor_change=True, error_code=error(denied),
                    error_message="Cluster authorization failed.", responses=())
    counts = await ctx.batcher.run_blocking(partition_counts, ctx,
                                            {t.name for t in req.topics})
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            code, message = _reassign(ctx, t.name, p.partition_index, p.replicas,
                                      counts.get(t.name, 0))
            parts.append(make(mod.ReassignablePartitionResponse,
                              partition_index=p.partition_index, error_code=error(code),
                              error_message=message))
        topics.append(make(mod.ReassignableTopicResponse, name=t.name, partitions=tuple(parts)))
    return make(mod.AlterPartitionReassignmentsResponse, throttle_time=ZERO,
                allow_replication_factor_change=getattr(req, "allow_replication_factor_change",
                                                        True),
                error_code=error(codes.NONE), error_message=None, responses=tuple(topics))


def _reassign(ctx: KafkaContext, topic: str, partition: int, replicas: Any,
              count: int) -> tuple[int, str | None]:
    if not 0 <= partition < count:
        return UNKNOWN_TOPIC_OR_PARTITION, f"The partition {topic}-{partition} does not exist."
    if replicas is None:
        return NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."
    if tuple(replicas) == (ctx.gateway.leader(topic, partition),):
        return codes.NONE, None  # its replicas already: nothing to move
    return INVALID_REPLICA_ASSIGNMENT, _ONE_REPLICA


async def alter_replica_log_dirs(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_ALTER_REPLICA_LOG_DIRS, head.api_version)
    denied = sec.refused(ctx, "Alter", "Cluster")
    counts = {} if denied else await ctx.batcher.run_blocking(
        partition_counts, ctx, {t.name for d in req.dirs for t in d.topics})
    store = store_name(ctx)
    results: dict[str, list[Any]] = {}
    for d in req.dirs:
        for t in d.topics:
            for p in t.partitions:
                if denied:
                    code = denied
                elif not 0 <= p < counts.get(t.name, 0):
                    code = UNKNOWN_TOPIC_OR_PARTITION
                elif ctx.gateway.leader(t.name, p) != ctx.node_id:
                    code = REPLICA_NOT_AVAILABLE
                else:
                    code = codes.NONE if d.path == store else LOG_DIR_NOT_FOUND
                results.setdefault(t.name, []).append(make(
                    mod.AlterReplicaLogDirPartitionResult, partition_index=p,
                    error_code=error(code)))
    return make(mod.AlterReplicaLogDirsResponse, throttle_time=ZERO, results=tuple(
        make(mod.AlterReplicaLogDirTopicResult, topic_name=name, partitions=tuple(ps))
        for name, ps in results.items()))


HANDLERS = {API_LIST_REASSIGNMENTS: list_reassignments,
            API_ALTER_REASSIGNMENTS: alter_reassignments,
            API_ALTER_REPLICA_LOG_DIRS: alter_replica_log_dirs}
