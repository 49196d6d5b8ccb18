"""Typed errors of the gateway and its clients (the log's own live in ``log_layout.errors``).

Each carries its facts as attributes and reads as a sentence; ``code`` is the
machine-readable name the gateway puts beside the numeric REST-Proxy-style
``error_code`` (the one table: ``ingest_gateway.error_table``). The
consumer-group errors are raised by the coordinator and, read back from a
gateway's answer, by the clients; the last section holds the clients' own. A
client process loads this module, so it holds no server code.
"""

from __future__ import annotations

from collections.abc import Sequence

from conf.errors import ConfigError, SparklogError


class BadRequest(SparklogError, ValueError):
    """The request body or a parameter is malformed (JSON, base64, Arrow, a field)."""

    code = "malformed_request"

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class ProtocolError(SparklogError):
    """A Kafka request that cannot be answered (bad framing, header or body, an API or
    version not offered): the listener closes the connection, as Kafka's broker does."""

    code = "kafka_protocol_error"

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"bad Kafka request: {reason}")


class InvalidPartitions(ConfigError):
    """A partition count that is not a positive integer, or fewer than the topic has
    (partitions only grow). A ConfigError of ``partitions``; Kafka's INVALID_PARTITIONS."""

    def __init__(self, topic: str, count: object, had: int | None = None):
        self.topic, self.count, self.had = topic, count, had
        reason = f"topic {topic!r} has {had} partitions; they only grow" if had is not None \
            else f"topic {topic!r} needs a positive number of partitions"
        super().__init__("partitions", count, reason)


class InvalidRequiredAcks(BadRequest):
    """``acks`` other than 0, 1 or -1 (all); Kafka's INVALID_REQUIRED_ACKS (over HTTP a
    ``malformed_request``, as before it had a class of its own)."""

    def __init__(self, acks: object):
        self.acks = acks
        super().__init__(f"acks must be 0, 1 or all (-1), not {acks!r}")


class InvalidKey(BadRequest):
    code = "invalid_key"


class InvalidValue(BadRequest):
    code = "invalid_value"


class UnsupportedContentType(SparklogError):
    code = "unsupported_content_type"

    def __init__(self, content_type: str, supported: tuple[str, ...]):
        self.content_type, self.supported = content_type, supported
        super().__init__(f"content type {content_type!r} is not supported here; use one of "
                         + ", ".join(supported))


class RequestTooLarge(SparklogError):
    code = "request_too_large"

    def __init__(self, size: int, limit: int):
        self.size, self.limit = size, limit
        super().__init__(f"the request body has at least {size} bytes, more than "
                         f"max.request.size={limit}")


class MissingKey(SparklogError, ValueError):
    """A record without a key sent to a compacted topic (Kafka refuses these too)."""

    code = "missing_key"

    def __init__(self, topic: str, row: int):
        self.topic, self.row = topic, row
        super().__init__(f"topic {topic!r} has cleanup.policy=compact, so every record needs a "
                         f"key; record {row} of the request has none")


class BufferFull(SparklogError):
    """Back-pressure: accepted-but-unflushed bytes would exceed ``buffer.memory``."""

    code = "buffer_full"

    def __init__(self, buffered: int, incoming: int, limit: int, retry_after_s: int = 1):
        self.buffered, self.incoming, self.limit = buffered, incoming, limit
        self.retry_after_s = retry_after_s
        super().__init__(f"the gateway holds {buffered} unflushed bytes; {incoming} more would "
                         f"exceed buffer.memory={limit}: retry after {retry_after_s} s")


class ShuttingDown(SparklogError):
    code = "shutting_down"

    def __init__(self) -> None:
        super().__init__("the gateway is shutting down and accepts no more records")


class NotLeader(SparklogError):
    """This gateway does not write the partition (another gateway leads it, or it was
    fenced): retriable. ``leader`` is the current leader's ``{"slot": .., "url": ..}``
    when known (Kafka's NOT_LEADER_OR_FOLLOWER, with the leader it would send in metadata)."""

    code = "not_leader"

    def __init__(self, topic: str, partition: int, reason: str,
                 leader: dict | None = None):
        self.topic, self.partition, self.reason, self.leader = topic, partition, reason, leader
        where = f"; its leader is {leader['url']}" if leader and leader.get("url") else ""
        super().__init__(f"this gateway does not lead {topic}-{partition}: {reason}{where}")


class NotCoordinator(SparklogError):
    """This gateway does not coordinate the group (Kafka's NOT_COORDINATOR): retriable.
    ``coordinator`` is ``{"slot": .., "url": ..}`` when known."""

    code = "not_coordinator"

    def __init__(self, group: str, coordinator: dict | None = None):
        self.group, self.coordinator = group, coordinator
        where = f"; it is {coordinator['url']}" if coordinator and coordinator.get("url") \
            else "; no gateway coordinates it right now"
        super().__init__(f"this gateway is not the coordinator of group {group!r}{where}")


class FlushFailed(SparklogError):
    """Writing a batch to the store failed; nothing of it is visible (retriable)."""

    code = "flush_failed"

    def __init__(self, topic: str, partition: int, reason: str):
        self.topic, self.partition, self.reason = topic, partition, reason
        super().__init__(f"flushing {topic}-{partition} to the store failed: {reason}; "
                         "none of the batch's records were committed, retry")


class UnknownCluster(SparklogError, LookupError):
    code = "unknown_cluster"

    def __init__(self, cluster_id: str, known: str):
        self.cluster_id, self.known = cluster_id, known
        super().__init__(f"cluster {cluster_id!r} is not this one ({known!r})")


class NestingTooDeep(BadRequest):
    """A JSON body nests arrays/objects deeper than ``max.json.nesting.depth``."""

    code = "nesting_too_deep"

    def __init__(self, limit: int, where: str = "the body"):
        self.limit, self.where = limit, where
        super().__init__(f"{where} nests JSON arrays/objects deeper than "
                         f"max.json.nesting.depth={limit}")


class UncompressedTooLarge(RequestTooLarge):
    """An Arrow body whose buffers, once expanded, would exceed
    ``max.uncompressed.request.size`` (a compression bomb, or a huge declared length)."""

    code = "uncompressed_too_large"

    def __init__(self, size: int, limit: int):
        self.size, self.limit = size, limit
        SparklogError.__init__(self, f"the Arrow body expands to at least {size} bytes, more than "
                                     f"max.uncompressed.request.size={limit}")


class ControlRequestTooLarge(RequestTooLarge):
    """The body of a route other than produce passed ``max.control.request.size``
    (413 like any RequestTooLarge; the message names the limit that applies)."""

    def __init__(self, size: int, limit: int):
        self.size, self.limit = size, limit
        SparklogError.__init__(self, f"the request body has at least {size} bytes, more than "
                                     f"max.control.request.size={limit}")


class RequestTimeout(SparklogError):
    """A request did not arrive whole (headers and body) within ``request.read.timeout.ms``
    of its first byte, or of the connection's start (answered 408, connection closed)."""

    code = "request_timeout"

    def __init__(self, timeout_ms: int):
        self.timeout_ms = timeout_ms
        super().__init__(f"the request did not arrive whole within "
                         f"request.read.timeout.ms={timeout_ms}")


class TooManyConnections(SparklogError):
    """A connection beyond ``max.connections`` (answered 503, connection closed)."""

    code = "too_many_connections"

    def __init__(self, open_connections: int, limit: int):
        self.open_connections, self.limit = open_connections, limit
        super().__init__(f"the gateway has {open_connections} connections open, more than "
                         f"max.connections={limit}; retry later")


class RecordNotJson(SparklogError):
    """A record asked for in the JSON format whose key or value is not strict JSON
    (NaN, a number past a double, a lone surrogate, bytes written by the binary or
    Arrow paths). Like Kafka's RecordDeserializationException it names where the
    record is, so the client can read it in the binary format or seek past it."""

    code = "record_not_json"

    def __init__(self, topic: str, partition: int, offset: int, part: str, reason: str):
        self.topic, self.partition, self.offset = topic, partition, offset
        self.part, self.reason = part, reason
        super().__init__(f"the {part} of record {topic}-{partition}@{offset} is not strict JSON "
                         f"({reason}): read it in the binary format (a consumer instance "
                         f"created with format binary; on a fetch, Accept: "
                         f"application/vnd.kafka.binary.v2+json), or seek to offset {offset + 1}")


# -- consumer groups (raised by the coordinator, raised again by the clients) --------
class GroupError(SparklogError):
    """Base of the consumer-group errors."""
    code = "group_error"


class InvalidGroupId(GroupError, ValueError):
    code = "invalid_group_id"

    def __init__(self, group: object, reason: str):
        self.group, self.reason = group, reason
        super().__init__(f"invalid consumer group id {group!r}: {reason}")


class UnknownGroup(GroupError, LookupError):
    code = "unknown_group"

    def __init__(self, group: str):
        self.group = group
        super().__init__(f"consumer group {group!r} has no members and no committed offsets")


class UnknownMemberId(GroupError, LookupError):
    """The member left, expired, or was never part of the group (join again)."""

    code = "unknown_member_id"

    def __init__(self, group: str, member_id: object):
        self.group, self.member_id = group, member_id
        super().__init__(f"member {member_id!r} is not in consumer group {group!r} "
                         f"(it left or missed its session timeout): join again")


class FencedInstanceId(UnknownMemberId):
    """A static member replaced by a newer one with its group.instance.id (KIP-345)."""

    code = "fenced_instance_id"

    def __init__(self, group: str, member_id: object, instance_id: str):
        self.instance_id = instance_id
        super().__init__(group, member_id)
        self.args = (f"member {member_id!r} of consumer group {group!r} was fenced: another "
                     f"member joined with its group.instance.id {instance_id!r}",)


class IllegalGeneration(GroupError):
    """A request from an older generation than the group's (a zombie after a rebalance)."""

    code = "illegal_generation"

    def __init__(self, group: str, member_id: object, generation: int, current: int):
        self.group, self.member_id = group, member_id
        self.generation, self.current = generation, current
        super().__init__(f"member {member_id!r} of consumer group {group!r} sent generation "
                         f"{generation}, but the group is at generation {current}")


class FencedMemberEpoch(IllegalGeneration):
    """A KIP-848 member's epoch is not the one the coordinator holds: it rejoins."""


class StaleMemberEpoch(IllegalGeneration):
    """A KIP-848 member's commit with another epoch than its own (Kafka: not fenced)."""


class RebalanceInProgress(GroupError):
    """The group is rebalancing: rejoin before fetching or committing more."""

    code = "rebalance_in_progress"

    def __init__(self, group: str, generation: int):
        self.group, self.generation = group, generation
        super().__init__(f"consumer group {group!r} is rebalancing after generation "
                         f"{generation}: rejoin the group")


class PartitionNotAssigned(GroupError):
    """A commit for a partition the member does not own in its generation."""

    code = "partition_not_assigned"

    def __init__(self, group: str, member_id: object, topic: str, partition: int,
                 generation: int):
        self.group, self.member_id = group, member_id
        self.topic, self.partition, self.generation = topic, partition, generation
        super().__init__(f"member {member_id!r} of consumer group {group!r} does not own "
                         f"{topic}-{partition} in generation {generation}")


class InconsistentGroupProtocol(GroupError):
    code = "inconsistent_group_protocol"

    def __init__(self, group: str, offered: Sequence[str], group_strategies: Sequence[str]):
        self.group, self.offered, self.group_strategies = group, tuple(offered), tuple(group_strategies)
        super().__init__(f"consumer group {group!r} uses assignment strategies "
                         f"{', '.join(group_strategies)}; the joining member supports only "
                         f"{', '.join(offered)}")


class UnsupportedAssignor(InconsistentGroupProtocol, ValueError):
    """A KIP-848 member's server assignor is not in group.consumer.assignors."""


class InvalidCommitOffset(GroupError, ValueError):
    code = "invalid_commit_offset"

    def __init__(self, group: str, topic: str, partition: int, offset: object, reason: str):
        self.group, self.topic, self.partition, self.offset = group, topic, partition, offset
        self.reason = reason
        super().__init__(f"cannot commit offset {offset!r} for {topic}-{partition} in consumer "
                         f"group {group!r}: {reason}")


class InvalidSessionTimeout(GroupError, ValueError):
    """A session timeout outside group.min/max.session.timeout.ms (Kafka's
    INVALID_SESSION_TIMEOUT, error 26)."""

    code = "invalid_session_timeout"

    def __init__(self, group: str, value: object, lo: int, hi: int):
        self.group, self.value, self.lo, self.hi = group, value, lo, hi
        super().__init__(f"session.timeout.ms={value!r} for consumer group {group!r} is outside "
                         f"group.min.session.timeout.ms={lo} .. group.max.session.timeout.ms={hi}")


class GroupFieldTooLong(GroupError, ValueError):
    """A client-given string the coordinator would hold (client_id, commit metadata)
    longer than its bound."""

    code = "field_too_long"

    def __init__(self, group: str, name: str, length: int, limit: int):
        self.group, self.name, self.length, self.limit = group, name, length, limit
        super().__init__(f"{name} for consumer group {group!r} has {length} characters, "
                         f"more than {limit}")


class UnknownConsumerInstance(GroupError, LookupError):
    """A REST Proxy consumer instance that does not exist (or expired)."""

    code = "unknown_consumer_instance"

    def __init__(self, group: str, instance: str):
        self.group, self.instance = group, instance
        super().__init__(f"consumer instance {instance!r} of group {group!r} does not exist")


class ConsumerFormatMismatch(SparklogError):
    """A REST consumer instance read with an ``Accept`` naming another embedded format
    than the one it was created with (REST Proxy: 406, error code 40601)."""

    code = "consumer_format_mismatch"

    def __init__(self, instance: str, fmt: str, asked: str):
        self.instance, self.fmt, self.asked = instance, fmt, asked
        super().__init__(f"consumer instance {instance!r} was created with format {fmt!r}: "
                         f"read it with Accept: {asked} is not possible")


class SubscriptionConflict(SparklogError):
    """Topics, a topic pattern and manual assignment mixed in one consumer instance
    (REST Proxy: 409, error code 40903)."""

    code = "subscription_conflict"

    def __init__(self, instance: str, has: str, asked: str):
        self.instance, self.has, self.asked = instance, has, asked
        super().__init__(f"consumer instance {instance!r} already uses {has}; {asked} is "
                         "mutually exclusive with it (unsubscribe first)")


class UnknownBroker(SparklogError, LookupError):
    """A v3 broker id that is not one of the cluster's (its gateway slots; 0 standalone)."""

    code = "unknown_broker"

    def __init__(self, broker: str, brokers: Sequence[int]):
        self.broker, self.brokers = broker, tuple(brokers)
        super().__init__(f"broker {broker!r} does not exist; the brokers are "
                         f"{', '.join(map(str, self.brokers))}")


class UnknownTopicConfig(SparklogError, LookupError):
    """A topic config name the topic does not have (v3 ``configs/{name}``)."""

    code = "unknown_config"

    def __init__(self, topic: str, name: str):
        self.topic, self.name = topic, name
        super().__init__(f"topic {topic!r} has no config named {name[:200]!r}")


class NotAuthenticated(SparklogError):
    """No credentials, or credentials that do not prove who the client is (401). The
    reason never repeats a password or a token."""

    code = "not_authenticated"

    def __init__(self, reason: str, realm: str = "sparklog", schemes: Sequence[str] = ()):
        self.reason, self.realm, self.schemes = reason, realm, tuple(schemes)
        super().__init__(f"authentication failed: {reason}")


class NotAuthorized(SparklogError, PermissionError):
    """The principal may not do this operation on this resource (403), as Kafka's
    TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""

    code = "not_authorized"

    def __init__(self, principal: str, operation: str, resource_type: str, name: str):
        self.principal, self.operation = principal, operation
        self.resource_type, self.name = resource_type, name
        super().__init__(f"{principal} is not authorized to {operation} {resource_type} "
                         f"{name!r}")


# -- the clients' own ---------------------------------------------------------------------
class ProduceError(SparklogError):
    """The gateway refused a batch (or the delivery timeout passed)."""

    code = "produce_failed"

    def __init__(self, topic: str, partition: int, status: int | None, error: str, message: str):
        self.topic, self.partition, self.status = topic, partition, status
        self.error, self.message = error, message
        where = f"{topic}-{partition}" if partition >= 0 else f"topic {topic!r}"
        super().__init__(f"producing to {where} failed"
                         f"{'' if status is None else f' with HTTP {status}'}: {message}")


class NoOffsetForPartition(SparklogError, LookupError):
    """``auto_offset_reset='none'`` and the partition has no committed offset."""

    code = "no_offset_for_partition"

    def __init__(self, topic: str, partition: int, group: str | None):
        self.topic, self.partition, self.group = topic, partition, group
        super().__init__(f"{topic}-{partition} has no committed offset in group {group!r} and "
                         f"auto_offset_reset is 'none': seek() before polling")


class IllegalState(SparklogError, RuntimeError):
    code = "illegal_state"

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


class GatewayError(SparklogError):
    """An error answer of the gateway without a more specific local type."""

    def __init__(self, status: int, code: str, message: str):
        self.status, self.code, self.message = status, code, message
        super().__init__(f"gateway answered {status} {code}: {message}")


class UnknownTransactionalId(SparklogError, LookupError):
    """A transactional id that no producer has initialised (Kafka's
    TRANSACTIONAL_ID_NOT_FOUND)."""

    code = "unknown_transactional_id"

    def __init__(self, transactional_id: str):
        self.transactional_id = transactional_id
        super().__init__(f"transactional id {transactional_id!r} has never been initialised "
                         "(POST /v3/transactions/{id}:init)")
