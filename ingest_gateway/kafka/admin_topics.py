"""The metadata and admin APIs:
ApiVersions, a Metadata answer's topics, InitProducerId, CreateTopics, DeleteTopics.

**Brokers and leaders.** A gateway on its own is one broker (node id 0) that leads
every partition. Under the broker application (``gateway.broker.id`` = slot N) the
node id is the slot and each partition's leader is the slot the application's
assignment names (``ClusterMember``). The listener serves Metadata with
``admin_brokers.metadata`` (every live slot that registered its Kafka listener is a
broker), built on :func:`topic_metadata` here.
A leader epoch is known for the partitions this gateway writes (-1 otherwise,
which clients read as "unknown" and skip epoch validation for).

**Producer ids** are random 63-bit numbers, as the HTTP route ``POST /v3/producers``
and the Producer client draw them: unique across gateways without coordination.
A request naming its current producer id and epoch (KIP-360) gets the same id with
the epoch bumped. **Transactions**: the listener sends InitProducerId to
``txn.init_producer_id``, which serves a ``transactional_id`` and passes the others
here (``init_producer_id`` below still refuses one, called alone).
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import NO_TOPIC_ID, ZERO, KafkaContext, topic_uuid
from ingest_gateway.kafka.wire import Header, error, make, response_module

logger = logging.getLogger("sparklog.gateway.kafka")

#: the features ApiVersions (v3+) reports, supported and finalized at the top level:
#: Kafka's transaction.version 2 (KIP-890, transactions v2: Kafka 4 clients bump the
#: epoch at each EndTxn v5 and add partitions implicitly with Produce v12, ``kafka.txn``)
FEATURES = {"transaction.version": (0, 2)}


async def api_versions(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(18, head.api_version)
    keys = tuple(mod.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                 for k, (lo, hi) in sorted(ctx.offered.items()))
    features: dict[str, Any] = {}
    if hasattr(mod, "FinalizedFeatureKey"):
        features = dict(
            supported_features=tuple(mod.SupportedFeatureKey(name=n, min_version=lo,
                                                             max_version=hi)
                                     for n, (lo, hi) in FEATURES.items()),
            finalized_features_epoch=0,
            finalized_features=tuple(mod.FinalizedFeatureKey(name=n, min_version_level=hi,
                                                             max_version_level=hi)
                                     for n, (lo, hi) in FEATURES.items()))
    return make(mod.ApiVersionsResponse, error_code=error(codes.NONE), api_keys=keys,
                throttle_time=ZERO, **features)


async def topic_metadata(ctx: KafkaContext, mod: Any, name: str, may_create: bool) -> Any:
    """One topic of a Metadata answer (``mod``: its version's module): its partitions,
    leaders as this gateway knows them, or the topic's error code. A missing topic is
    created when ``may_create`` (``auto.create.topics.enable`` permitting)."""
    try:
        if may_create:
            info = await ctx.batcher.topic_info(name)
        else:
            info = await ctx.batcher.run_blocking(ctx.metadata.topic, name)
    except Exception as e:  # noqa: BLE001 - every failure is a per-topic error code
        code = codes.code_of(e)
        if code == codes.UNKNOWN_SERVER_ERROR:
            logger.warning("metadata of topic %r: %s", name, e)
        return make(mod.MetadataResponseTopic, error_code=error(code), name=name,
                    topic_id=NO_TOPIC_ID, is_internal=False, partitions=(),
                    topic_authorized_operations=-2147483648)
    parts = []
    for p in range(info.partitions):
        leader, epoch = ctx.leader(name, p)
        known = leader == ctx.node_id or ctx.cluster is None
        parts.append(make(mod.MetadataResponsePartition,
                          error_code=error(codes.NONE if known else codes.LEADER_NOT_AVAILABLE),
                          partition_index=p, leader_id=leader if known else -1,
                          leader_epoch=epoch, replica_nodes=(leader,) if known else (),
                          isr_nodes=(leader,) if known else (), offline_replicas=()))
    return make(mod.MetadataResponseTopic, error_code=error(codes.NONE), name=name,
                topic_id=topic_uuid(info.topic_id), is_internal=False,
                partitions=tuple(parts), topic_authorized_operations=-2147483648)


async def init_producer_id(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(22, head.api_version)
    if req.transactional_id is not None:
        return make(mod.InitProducerIdResponse, throttle_time=ZERO,
                    error_code=error(codes.UNSUPPORTED_VERSION), producer_id=-1,
                    producer_epoch=-1)
    pid, epoch = getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < 32767:  # KIP-360: same id, next epoch
        new_pid, new_epoch = pid, epoch + 1
    else:
        new_pid, new_epoch = secrets.randbits(63), 0
    return make(mod.InitProducerIdResponse, throttle_time=ZERO, error_code=error(codes.NONE),
                producer_id=new_pid, producer_epoch=new_epoch)


async def create_topics(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """Each topic with its partition count (-1: the default) and configs (Kafka's names);
    ``validate_only`` checks without creating (``TopicAdmin.create``). Replica counts are
    ignored: the store replicates (DESIGN.md). ACLs (Kafka's): Create on the cluster,
    else on each topic (TOPIC_AUTHORIZATION_FAILED for a topic without it)."""
    mod = response_module(19, head.api_version)
    results = []
    on_cluster = sec.allowed(ctx, "Create", "Cluster", sec.CLUSTER_NAME)
    for t in req.topics:
        configs = {c.name: c.value for c in t.configs if c.value is not None}
        code, message, partitions = codes.NONE, None, -1
        try:
            if not on_cluster:
                sec.check(ctx, "Create", "Topic", t.name)
            config = await ctx.topics.create(
                t.name, configs, partitions=None if t.num_partitions == -1 else t.num_partitions,
                validate_only=req.validate_only)
            partitions = config.partitions
        except Exception as e:  # noqa: BLE001 - per-topic error codes
            code, message = codes.code_of(e), str(e)
        results.append(make(mod.CreatableTopicResult, name=t.name, topic_id=NO_TOPIC_ID,
                            error_code=error(code), error_message=message,
                            topic_config_error_code=error(codes.NONE),
                            num_partitions=partitions, replication_factor=1, configs=()))
    return make(mod.CreateTopicsResponse, throttle_time=ZERO, topics=tuple(results))


async def delete_topics(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """Each topic named (by name; ids are answered UNKNOWN_TOPIC_ID); Delete on the
    topic is needed (else TOPIC_AUTHORIZATION_FAILED for it, as Kafka)."""
    mod = response_module(20, head.api_version)
    names = list(req.topic_names) if hasattr(req, "topic_names") else \
        [t.name for t in req.topics]
    results = []
    for name in names:
        code, message = codes.NONE, None
        try:
            if name is None:  # v6 by topic id: ids are not stable yet
                raise _UnknownId()
            sec.check(ctx, "Delete", "Topic", name)
            await ctx.topics.delete(name)
        except _UnknownId:
            code, message = codes.UNKNOWN_TOPIC_ID, "topics are deleted by name"
        except Exception as e:  # noqa: BLE001 - per-topic error codes
            code, message = codes.code_of(e), str(e)
        results.append(make(mod.DeletableTopicResult, name=name, topic_id=NO_TOPIC_ID,
                            error_code=error(code), error_message=message))
    return make(mod.DeleteTopicsResponse, throttle_time=ZERO, responses=tuple(results))


class _UnknownId(LookupError):
    pass
