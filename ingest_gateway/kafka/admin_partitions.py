"""CreatePartitions, ElectLeaders and DescribeLogDirs over the Kafka protocol: what
``kafka-topics.sh --alter --partitions``, ``kafka-leader-election.sh`` and
``kafka-log-dirs.sh`` send.

**CreatePartitions** grows a topic with ``TopicAdmin.add_partitions``, the one
implementation the REST v3 ``PATCH .../topics/<name>`` (``partitions_count``) calls.
Kafka's rules: fewer partitions than the topic has, or the same number ("Topic already
has N partitions"), answer ``INVALID_PARTITIONS``; a topic named twice in one request
answers ``INVALID_REQUEST`` for each; ``validate_only`` checks and writes nothing. A
replica assignment (``--replica-assignment``) answers ``INVALID_REPLICA_ASSIGNMENT``:
replicas are the store's (DESIGN.md), the gateways place no replicas, and leaders
follow the broker application's assignment. ACL: Alter on the topic.

**ElectLeaders**: a partition's one replica is the store, and its leader the gateway
the assignment names (the standalone gateway, or the slot ``ClusterMember`` gives it):
there is no other replica to elect, preferred or unclean. So every partition named
answers Kafka's ``ELECTION_NOT_NEEDED`` (the tool prints "Valid replica already elected"),
an unknown one ``UNKNOWN_TOPIC_OR_PARTITION``; with no partitions named (all), Kafka's
controller leaves out those whose election was not needed, so the answer lists the
topics with no partitions. An election type other than 0 (preferred) or 1 (unclean)
answers ``INVALID_REQUEST``. ACL: Alter on the cluster (else
``CLUSTER_AUTHORIZATION_FAILED`` at the top, as Kafka).

**DescribeLogDirs**: the gateways have no broker-local log directories; the records live
in the store. Answering no directory at all would be true too, but then
``kafka-log-dirs.sh`` shows an empty list and says nothing about where the data is. So
the store is answered as the broker's one log directory, named by its URL (without
user information: the store's ``url``), holding the partitions this broker
leads with their size (the bytes of their live segments in the manifest; ``offset_lag`` 0,
for there is no future replica to catch up) and ``total_bytes``/``usable_bytes`` -1
(unknown: an object store has no capacity to report), which is what Kafka answers for a
directory whose capacity it cannot read. ACL: Describe on the cluster (else the answer's
top-level ``CLUSTER_AUTHORIZATION_FAILED``, no directories).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import ZERO, KafkaContext
from ingest_gateway.kafka.wire import Header, error, make, response_module
from log_layout import UnknownTopic

logger = logging.getLogger("sparklog.gateway.kafka")

API_DESCRIBE_LOG_DIRS, API_CREATE_PARTITIONS, API_ELECT_LEADERS = 35, 37, 43
#: Kafka 4.0's version floors up to the newest kio reads
OFFERED: dict[int, tuple[int, int]] = {
    API_DESCRIBE_LOG_DIRS: (1, 5),
    API_CREATE_PARTITIONS: (0, 3),
    API_ELECT_LEADERS: (0, 2),
}
PREFERRED, UNCLEAN = 0, 1
INVALID_PARTITIONS = ErrorCode.invalid_partitions
INVALID_REPLICA_ASSIGNMENT = ErrorCode.invalid_replica_assignment
ELECTION_NOT_NEEDED = ErrorCode.election_not_needed
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.unknown_topic_or_partition


async def create_partitions(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_CREATE_PARTITIONS, head.api_version)
    named = Counter(t.name for t in req.topics)
    results = []
    for t in req.topics:
        code, message = await _grow(ctx, t, named[t.name] > 1, req.validate_only)
        results.append(make(mod.CreatePartitionsTopicResult, name=t.name,
                            error_code=error(code), error_message=message))
    return make(mod.CreatePartitionsResponse, throttle_time=ZERO, results=tuple(results))


async def _grow(ctx: KafkaContext, t: Any, duplicate: bool,
                validate_only: bool) -> tuple[int, str | None]:
    """(error code, message) of one topic of a CreatePartitions (module doc)."""
    if duplicate:
        return codes.INVALID_REQUEST, f"Duplicate topic {t.name} in request."
    if not sec.allowed(ctx, "Alter", "Topic", t.name):
        return sec.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."
    if t.assignments is not None:
        return INVALID_REPLICA_ASSIGNMENT, ("replicas are the store's: partitions are "
                                            "not assigned to brokers")
    try:
        info = await ctx.batcher.run_blocking(
            lambda: ctx.metadata.topic(t.name, refresh=True))
        if t.count == info.partitions:  # Kafka refuses a no-op; TopicAdmin allows it
            return INVALID_PARTITIONS, f"Topic already has {info.partitions} partitions."
        await ctx.topics.add_partitions(t.name, t.count, validate_only=validate_only)
    except Exception as e:  # noqa: BLE001 - per-topic error codes
        code = codes.code_of(e)
        if code == codes.UNKNOWN_SERVER_ERROR:
            logger.warning("CreatePartitions of %r: %s", t.name, e)
        return code, str(e)
    return codes.NONE, None


async def elect_leaders(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_ELECT_LEADERS, head.api_version)
    top = codes.NONE
    if not sec.allowed(ctx, "Alter", "Cluster", sec.CLUSTER_NAME):
        top = sec.CLUSTER_AUTHORIZATION_FAILED
    elif getattr(req, "election_type", PREFERRED) not in (PREFERRED, UNCLEAN):
        top = codes.INVALID_REQUEST
    if top != codes.NONE:
        if head.api_version == 0:  # v0 has no top-level code: each partition carries it
            return _elected(mod, [(t.topic, [(p, top, None) for p in t.partitions])
                                  for t in req.topic_partitions or ()])
        return _elected(mod, [], top)
    if req.topic_partitions is None:  # all: none needed an election, none listed
        names = await ctx.batcher.run_blocking(ctx.metadata.names)
        return _elected(mod, [(name, []) for name in names])
    counts = await ctx.batcher.run_blocking(partition_counts, ctx,
                                            {t.topic for t in req.topic_partitions})
    results = []
    for t in req.topic_partitions:
        count = counts.get(t.topic, 0)
        results.append((t.topic, [
            (p, ELECTION_NOT_NEEDED, None) if 0 <= p < count else
            (p, UNKNOWN_TOPIC_OR_PARTITION,
             f"The partition {t.topic}-{p} does not exist.") for p in t.partitions]))
    return _elected(mod, results)


def partition_counts(ctx: KafkaContext, names: set[str]) -> dict[str, int]:
    """Blocking: topic -> partition count, for the topics of ``names`` that exist."""
    out = {}
    for name in names:
        try:
            out[name] = ctx.metadata.topic(name).partitions
        except UnknownTopic:
            pass
    return out


def _elected(mod: Any, results: list[tuple[str, list[tuple[int, int, str | None]]]],
             top: int = codes.NONE) -> Any:
    return make(mod.ElectLeadersResponse, throttle_time=ZERO, error_code=error(top),
                replica_election_results=tuple(
                    make(mod.ReplicaElectionResult, topic=topic, partition_result=tuple(
                        make(mod.PartitionResult, partition_id=p, error_code=error(code),
                             error_message=message) for p, code, message in parts))
                    for topic, parts in results))


async def describe_log_dirs(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_DESCRIBE_LOG_DIRS, head.api_version)
    if not sec.allowed(ctx, "Describe", "Cluster", sec.CLUSTER_NAME):
        return make(mod.DescribeLogDirsResponse, throttle_time=ZERO,
                    error_code=error(sec.CLUSTER_AUTHORIZATION_FAILED), results=())
    wanted = None if req.topics is None else {t.topic: set(t.partitions) for t in req.topics}
    sizes = await ctx.hub().run(_sizes, ctx, wanted)
    topics = tuple(make(mod.DescribeLogDirsTopic, name=name, partitions=tuple(
        make(mod.DescribeLogDirsPartition, partition_index=p, partition_size=size,
             offset_lag=0, is_future_key=False) for p, size in sorted(parts.items())))
        for name, parts in sorted(sizes.items()))
    result = make(mod.DescribeLogDirsResult, error_code=error(codes.NONE),
                  log_dir=store_name(ctx), topics=topics, total_bytes=-1,
                  usable_bytes=-1, is_cordoned=False)
    return make(mod.DescribeLogDirsResponse, throttle_time=ZERO,
                error_code=error(codes.NONE), results=(result,))


def store_name(ctx: KafkaContext) -> str:
    """The store's URL without user information (a password never leaves in an answer)."""
    from urllib.parse import urlsplit, urlunsplit

    url = ctx.metadata.store_url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=host))


def _sizes(ctx: KafkaContext, wanted: dict[str, set[int]] | None) -> dict[str, dict[int, int]]:
    """Blocking: topic -> partition -> bytes of its live segments, for the partitions
    this broker leads (of ``wanted``: None, all; a topic or partition that does not exist
    is left out, as Kafka leaves out what a directory does not hold)."""
    out: dict[str, dict[int, int]] = {}
    names = ctx.metadata.names() if wanted is None else sorted(wanted)
    for name in names:
        try:
            count = ctx.metadata.topic(name).partitions
        except UnknownTopic:
            continue
        for p in range(count):
            if wanted is not None and p not in wanted[name]:
                continue
            if ctx.gateway.leader(name, p) != ctx.node_id:
                continue
            m = ctx.metadata.snapshot(name, p)
            out.setdefault(name, {})[p] = sum(s.bytes for s in m.segments)
    return out


HANDLERS = {API_CREATE_PARTITIONS: create_partitions, API_ELECT_LEADERS: elect_leaders,
            API_DESCRIBE_LOG_DIRS: describe_log_dirs}
