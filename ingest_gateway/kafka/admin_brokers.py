"""Several brokers: Metadata, FindCoordinator and DescribeCluster under the broker
application, where each gateway slot is one Kafka broker.

**Who the brokers are.** Node id = the slot (``gateway.broker.id``). Each slot's
gateway writes its Kafka listener's address in its registration
(``_brokers/gateways/<slot>.json``: ``kafka_host``, ``kafka_port``; the listener
hands it to ``ClusterMember.kafka_address`` when it listens, :func:`register`), so
every slot can name every other. The brokers listed are this gateway and the
slots the current assignment calls live whose registration names a Kafka listener.
The registrations are read at most every ``broker_directory.DIRECTORY_TTL_S`` (one
listing and one read per slot), shared by all requests of the gateway. A standalone gateway is one
broker, node 0, leading everything (``context.KafkaContext.leader``).

**Metadata** names each partition's leader from the assignment, with its leader
epoch: ours for the partitions this gateway writes, the leader's registration's
``leader_epochs`` otherwise (-1 if not yet registered: clients then skip epoch
validation). A partition whose leader slot has no known Kafka address (no
assignment yet, or the slot is down) answers ``LEADER_NOT_AVAILABLE`` (retriable:
clients ask again). Topic existence and auto-creation: ``broker.topic_metadata``.

**FindCoordinator** for a group names the slot the assignment makes its
coordinator (``Assignment.coordinator_slot``); the groups module answers the keys
this gateway coordinates, and those it does not (``COORDINATOR_NOT_AVAILABLE``
there) are answered here with the coordinating slot when that slot has a Kafka
address. Transaction coordinator keys are left to the groups module's answer.
"""

from __future__ import annotations

import dataclasses
import socket
from typing import Any

from conf.errors import ConfigError
from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.admin_topics import topic_metadata
from ingest_gateway.kafka.context import NO_TOPIC_ID, ZERO, KafkaContext, topic_uuid
from ingest_gateway.kafka.groups_protocol import COORDINATOR_NOT_AVAILABLE
from ingest_gateway.kafka.wire import API_METADATA, Header, error, make, response_module
from log_layout import UnknownTopic
from ingest_gateway.server.broker_directory import BrokerDirectory, GatewayInfo, tp_key

API_FIND_COORDINATOR, API_DESCRIBE_CLUSTER = 10, 60
#: Kafka 4.0's version floors up to what current clients use
OFFERED: dict[int, tuple[int, int]] = {API_DESCRIBE_CLUSTER: (0, 2)}
NO_AUTHORIZED_OPERATIONS = -2147483648
#: Kafka's AclOperation codes of the operations each resource type supports
#: (``AclEntry.supportedOperations``), the bits of an authorized-operations field
OPERATION_CODES = {"Read": 3, "Write": 4, "Create": 5, "Delete": 6, "Alter": 7, "Describe": 8,
                   "ClusterAction": 9, "DescribeConfigs": 10, "AlterConfigs": 11,
                   "IdempotentWrite": 12}
SUPPORTED = {
    "Topic": ("Read", "Write", "Create", "Delete", "Alter", "Describe", "DescribeConfigs",
              "AlterConfigs"),
    "Group": ("Read", "Delete", "Describe", "DescribeConfigs", "AlterConfigs"),
    "Cluster": ("Create", "ClusterAction", "DescribeConfigs", "AlterConfigs",
                "IdempotentWrite", "Alter", "Describe"),
}


def authorized_operations(ctx: KafkaContext, resource_type: str, name: str) -> int:
    """Kafka's authorized-operations bit field (KIP-430): bit ``code`` set for each
    operation of ``resource_type`` the request's principal may do on ``name``, as
    ``AuthHelper.authorizedOperations`` (every supported one without an authorizer)."""
    bits = 0
    for op in SUPPORTED[resource_type]:
        if sec.allowed(ctx, op, resource_type, name):
            bits |= 1 << OPERATION_CODES[op]
    return bits


def requested_operations(ctx: KafkaContext, wanted: bool, resource_type: str, name: str) -> int:
    """:func:`authorized_operations` when the request asked for them, else Kafka's
    "not asked" value (INT32_MIN)."""
    return authorized_operations(ctx, resource_type, name) if wanted \
        else NO_AUTHORIZED_OPERATIONS


def advertised(gateway: Any, scheme: str, host: str, port: int) -> tuple[str, int]:
    """The (host, port) Kafka clients are told for this gateway: Kafka's
    ``advertised.listeners`` (``gateway.kafka.advertised.listeners``) when set, else the
    listener's own address, with this machine's name for a wildcard host (0.0.0.0,
    ::). Raises ConfigError naming the setting for a bad one, or one whose scheme is
    not the listener's."""
    text = gateway.kafka_advertised_listeners.strip()
    if not text:
        return (socket.getfqdn() if host in ("0.0.0.0", "::", "") else host), port
    key = "gateway.kafka.advertised.listeners"
    try:
        adv_scheme, adv_host, adv_port = sec.parse_listener(text)
    except ConfigError as e:
        raise ConfigError(key, text, e.reason) from None
    if adv_scheme != scheme:
        raise ConfigError(key, text, f"its scheme must be the listener's, {scheme}")
    return adv_host, adv_port


def register(ctx: KafkaContext) -> None:
    """Tell the cluster membership (if any) this gateway's Kafka address; its next
    heartbeat writes it into the slot's registration."""
    if ctx.cluster is not None:
        ctx.cluster.kafka_address = (ctx.host, ctx.port)


async def _registrations(ctx: KafkaContext) -> dict[int, GatewayInfo]:
    """Every slot's registration (``server.broker_directory``: read at most every
    second, shared by the gateway's requests)."""
    if ctx.registrations is None:
        ctx.registrations = BrokerDirectory(ctx.gateway)
    return await ctx.registrations.registrations()


async def brokers(ctx: KafkaContext) -> dict[int, tuple[str, int]]:
    """node id -> (host, port) of every broker clients may use (see the module doc)."""
    out = {ctx.node_id: (ctx.host, ctx.port)}
    cluster = ctx.cluster
    if cluster is None or cluster.assignment is None:
        return out
    live = set(cluster.assignment.live)
    for slot, info in (await _registrations(ctx)).items():
        if slot in live and slot != ctx.node_id and info.kafka_port > 0 and info.kafka_host:
            out[slot] = (info.kafka_host, info.kafka_port)
    return out


async def metadata(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """Metadata: brokers (every live slot with a Kafka listener; standalone, this
    gateway), the topics asked for (None: all; ``broker.topic_metadata``) and their
    leaders from the assignment. ACLs (Kafka's): a topic needs Describe (else left out
    of "all topics", TOPIC_AUTHORIZATION_FAILED when named); auto-creation needs
    Create on the cluster or the topic. The topics' and the cluster's authorized
    operations (KIP-430) when the request asks for them."""
    mod = response_module(API_METADATA, head.api_version)
    b = ctx.batcher
    if req.topics is None:
        names = await b.run_blocking(ctx.metadata.names)
    else:
        names = [t.name for t in req.topics if t.name is not None]
        # v10+: a topic named by its id alone (KIP-848 clients look assignments up so)
        ids = {t.topic_id for t in req.topics if t.name is None
               and getattr(t, "topic_id", NO_TOPIC_ID) not in (None, NO_TOPIC_ID)}
        if ids:
            found = await b.run_blocking(_names_of, ctx, ids)
            names += [n for n in found.values() if n not in names]
    may_create = req.topics is None or getattr(req, "allow_auto_topic_creation", True)
    known = await brokers(ctx)
    epochs = await _epochs(ctx)
    topics = []
    topic_ops = getattr(req, "include_topic_authorized_operations", False)
    create_all = may_create and sec.allowed(ctx, "Create", "Cluster", "kafka-cluster")
    for name in names:
        if not sec.allowed(ctx, "Describe", "Topic", name):
            if req.topics is not None:
                topics.append(make(mod.MetadataResponseTopic,
                                   error_code=error(sec.TOPIC_AUTHORIZATION_FAILED), name=name,
                                   topic_id=NO_TOPIC_ID, is_internal=False, partitions=(),
                                   topic_authorized_operations=-2147483648))
            continue
        create = create_all or (may_create and sec.allowed(ctx, "Create", "Topic", name))
        t = await topic_metadata(ctx, mod, name, create)
        if ctx.cluster is not None and t.error_code == error(codes.NONE):
            t = dataclasses.replace(t, partitions=tuple(
                _partition(ctx, mod, name, p.partition_index, known, epochs)
                for p in t.partitions))
        if topic_ops and t.error_code == error(codes.NONE):
            t = dataclasses.replace(t, topic_authorized_operations=authorized_operations(
                ctx, "Topic", name))
        topics.append(t)
    listed = tuple(make(mod.MetadataResponseBroker, node_id=n, host=h, port=p, rack=None)
                   for n, (h, p) in sorted(known.items()))
    return make(mod.MetadataResponse, throttle_time=ZERO, brokers=listed,
                cluster_id=await ctx.cluster_id(), controller_id=min(known),
                topics=tuple(topics), error_code=error(codes.NONE),
                cluster_authorized_operations=requested_operations(
                    ctx, getattr(req, "include_cluster_authorized_operations", False),
                    "Cluster", sec.CLUSTER_NAME))


def _names_of(ctx: KafkaContext, ids: set) -> dict:
    """Topic id -> name of the ``ids`` some topic has (the others are left out)."""
    out = {}
    for name in ctx.metadata.names():
        try:
            tid = topic_uuid(ctx.metadata.topic(name).topic_id)
        except UnknownTopic:
            continue
        if tid in ids:
            out[tid] = name
    return out


async def _epochs(ctx: KafkaContext) -> dict[str, int]:
    """``topic/partition`` -> leader epoch, from the other slots' registrations then
    this gateway's own writers (the freshest for what it leads)."""
    out: dict[str, int] = {}
    if ctx.cluster is not None:
        for slot, info in (await _registrations(ctx)).items():
            if slot != ctx.node_id:
                out.update(info.leader_epochs)
    out.update({tp_key(*tp): e for tp, e in ctx.batcher.leading().items()})
    return out


def _partition(ctx: KafkaContext, mod: Any, topic: str, p: int,
               known: dict[int, tuple[str, int]], epochs: dict[str, int]) -> Any:
    leader, _ = ctx.leader(topic, p)
    ok = leader in known
    node = leader if ok else -1
    return make(mod.MetadataResponsePartition,
                error_code=error(codes.NONE if ok else codes.LEADER_NOT_AVAILABLE),
                partition_index=p, leader_id=node,
                leader_epoch=epochs.get(tp_key(topic, p), -1) if ok else -1,
                replica_nodes=(node,) if ok else (), isr_nodes=(node,) if ok else (),
                offline_replicas=())


def find_coordinator(inner: Any) -> Any:
    """The FindCoordinator handler: ``inner``'s answer (the groups and transactions
    modules'), with the groups another slot coordinates named (module doc)."""
    async def handle(ctx: KafkaContext, head: Header, req: Any) -> Any:
        answer = await inner(ctx, head, req)
        if ctx.cluster is None or getattr(req, "key_type", 0) != 0:
            return answer
        known = await brokers(ctx)

        def elsewhere(key: str, code: Any) -> tuple[int, str, int] | None:
            if code != error(COORDINATOR_NOT_AVAILABLE):
                return None
            where = ctx.cluster.coordinator(key)
            if where is None or where["slot"] not in known:
                return None
            return where["slot"], *known[where["slot"]]

        if hasattr(answer, "coordinators"):  # v4+: one per key
            return dataclasses.replace(answer, coordinators=tuple(
                c if (found := elsewhere(c.key, c.error_code)) is None else
                dataclasses.replace(c, node_id=found[0], host=found[1], port=found[2],
                                    error_code=error(codes.NONE), error_message=None)
                for c in answer.coordinators))
        found = elsewhere(req.key, answer.error_code)
        if found is None:
            return answer
        return make(type(answer), throttle_time=ZERO, error_code=error(codes.NONE),
                    error_message=None, node_id=found[0], host=found[1], port=found[2])

    return handle


async def describe_cluster(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """The cluster id, the brokers (as Metadata lists them) and a controller among
    them (the lowest node id: there is no controller, the driver decides); the
    cluster's authorized operations when asked; no broker is ever fenced (v2)."""
    mod = response_module(API_DESCRIBE_CLUSTER, head.api_version)
    if getattr(req, "endpoint_type", 1) != 1:
        return make(mod.DescribeClusterResponse, throttle_time=ZERO,
                    error_code=error(codes.UNSUPPORTED_VERSION),
                    error_message="only brokers (endpoint type 1) are described",
                    endpoint_type=req.endpoint_type, cluster_id=await ctx.cluster_id(),
                    controller_id=-1, brokers=())
    known = await brokers(ctx)
    listed = tuple(make(mod.DescribeClusterBroker, broker_id=n, host=h, port=p, rack=None,
                        is_fenced=False) for n, (h, p) in sorted(known.items()))
    return make(mod.DescribeClusterResponse, throttle_time=ZERO, error_code=error(codes.NONE),
                error_message=None, endpoint_type=1, cluster_id=await ctx.cluster_id(),
                controller_id=min(known), brokers=listed,
                cluster_authorized_operations=requested_operations(
                    ctx, req.include_cluster_authorized_operations, "Cluster",
                    sec.CLUSTER_NAME))


def handlers(table: dict[int, Any]) -> dict[int, Any]:
    """What the listener puts over its ``table``: Metadata, DescribeCluster, and
    FindCoordinator around the one ``table`` has."""
    return {API_METADATA: metadata, API_DESCRIBE_CLUSTER: describe_cluster,
            API_FIND_COORDINATOR: find_coordinator(table[API_FIND_COORDINATOR])}
