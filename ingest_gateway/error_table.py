"""THE error table of the gateway: each typed error's HTTP status, REST Proxy code and Kafka code.

Declared once, here; the HTTP adapter (``http/errors.py``) and the Kafka adapter
(``kafka/codes.py``) both answer from it. An error is looked up along its class's MRO,
so the most specific class listed wins; an error no class of which is listed is a 500
``50001`` and Kafka's ``UNKNOWN_SERVER_ERROR``.

HTTP statuses and codes follow REST Proxy where it has one (40401 unknown topic, 40402
unknown partition, 42201/42202 bad key/value). Kafka codes are kio's ``ErrorCode``
members; retriable conditions map to Kafka's retriable codes so unmodified clients
retry them (a full buffer is ``REQUEST_TIMED_OUT``; a gateway shutting down or no
longer leading a partition ``NOT_LEADER_OR_FOLLOWER``, after which clients refresh
their metadata). Where Kafka's answer depends on the request (its API version for
PRODUCER_FENCED, the resource type of an authorization failure, a transaction's
state), the Kafka adapter decides and this table holds the default.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from kio.schema.errors import ErrorCode

from conf.errors import ConfigError, SparklogError
from conf.topic import InvalidTopicName
from ingest_gateway.errors import (BadRequest, BufferFull, ConsumerFormatMismatch, FencedInstanceId,
                                   FencedMemberEpoch, StaleMemberEpoch, UnsupportedAssignor,
                                   FlushFailed, GroupFieldTooLong, IllegalGeneration,
                                   InconsistentGroupProtocol,
                                   InvalidCommitOffset, InvalidGroupId,
                                   InvalidKey, InvalidPartitions, InvalidRequiredAcks,
                                   InvalidSessionTimeout,
                                   InvalidValue, MissingKey, NotAuthenticated, NotAuthorized,
                                   NotCoordinator, NotLeader, PartitionNotAssigned,
                                   RebalanceInProgress, RecordNotJson, RequestTimeout,
                                   RequestTooLarge, ShuttingDown, SubscriptionConflict,
                                   TooManyConnections, UnknownBroker, UnknownCluster,
                                   UnknownConsumerInstance, UnknownGroup, UnknownMemberId,
                                   UnknownTopicConfig, UnknownTransactionalId,
                                   UnsupportedContentType)
from log_layout import (CorruptManifest, CorruptSegment, Fenced, InvalidProducerEpoch,
                        InvalidRecords, InvalidTxnState, MaintenanceConflict, OffsetOutOfRange,
                        OutOfOrderSequence, ProducerFenced, RecordTooLarge, StoreError,
                        TopicExists, UnknownPartition, UnknownTopic)
from log_layout.errors import InvalidAcl
from ingest_gateway.protocol.groups import GroupNotEmpty
from ingest_gateway.server.schema_codec_errors import (InvalidEmbeddedSchema,
                                                       SchemaSerializationFailed)

E = ErrorCode


@dataclasses.dataclass(frozen=True)
class Answer:
    """How each protocol answers one error."""

    http_status: int
    rest_code: int
    kafka: ErrorCode


def _a(status: int, rest: int, kafka: ErrorCode) -> Answer:
    return Answer(status, rest, kafka)


TABLE: MappingProxyType[type[BaseException], Answer] = MappingProxyType({
    UnknownTopic: _a(404, 40401, E.unknown_topic_or_partition),
    UnknownPartition: _a(404, 40402, E.unknown_topic_or_partition),
    UnknownCluster: _a(404, 40403, E.unknown_server_error),
    OffsetOutOfRange: _a(416, 41601, E.offset_out_of_range),
    InvalidKey: _a(422, 42201, E.invalid_request),
    InvalidValue: _a(422, 42202, E.invalid_request),
    InvalidRecords: _a(422, 42203, E.invalid_record),
    MissingKey: _a(422, 42204, E.invalid_record),
    InvalidRequiredAcks: _a(400, 40001, E.invalid_required_acks),
    BadRequest: _a(400, 40001, E.invalid_request),
    TopicExists: _a(400, 40002, E.topic_already_exists),
    InvalidTopicName: _a(400, 40003, E.invalid_topic_exception),
    InvalidPartitions: _a(400, 40004, E.invalid_partitions),
    ConfigError: _a(400, 40004, E.invalid_config),
    # REST Proxy's code for a request Kafka refuses as invalid (its spec documents it
    # for an ACL naming the cluster wrongly); the message names the field
    InvalidAcl: _a(400, 40002, E.invalid_config),
    OutOfOrderSequence: _a(409, 40901, E.out_of_order_sequence_number),
    InvalidProducerEpoch: _a(409, 40902, E.invalid_producer_epoch),
    MaintenanceConflict: _a(409, 40903, E.unknown_server_error),
    RequestTimeout: _a(408, 40801, E.request_timed_out),
    RecordTooLarge: _a(413, 41301, E.message_too_large),
    RequestTooLarge: _a(413, 41302, E.message_too_large),
    UnsupportedContentType: _a(415, 41501, E.invalid_request),
    BufferFull: _a(429, 42901, E.request_timed_out),
    NotLeader: _a(503, 50301, E.not_leader_or_follower),
    NotCoordinator: _a(503, 50305, E.not_coordinator),
    Fenced: _a(503, 50301, E.not_leader_or_follower),
    FlushFailed: _a(503, 50302, E.kafka_storage_error),
    ShuttingDown: _a(503, 50303, E.not_leader_or_follower),
    TooManyConnections: _a(503, 50304, E.unknown_server_error),
    StoreError: _a(500, 50002, E.kafka_storage_error),
    CorruptManifest: _a(500, 50003, E.kafka_storage_error),
    CorruptSegment: _a(500, 50004, E.kafka_storage_error),
    # consumer groups and fetches
    FencedInstanceId: _a(404, 40403, E.fenced_instance_id),
    UnknownMemberId: _a(404, 40403, E.unknown_member_id),  # REST: instance not found
    UnknownConsumerInstance: _a(404, 40403, E.unknown_member_id),
    UnknownGroup: _a(404, 40404, E.group_id_not_found),
    IllegalGeneration: _a(409, 40911, E.illegal_generation),
    RebalanceInProgress: _a(409, 40912, E.rebalance_in_progress),
    # KIP-848 members (the Kafka protocol only): conflicts with the coordinator's state
    FencedMemberEpoch: _a(409, 40917, E.fenced_member_epoch),
    StaleMemberEpoch: _a(409, 40918, E.stale_member_epoch),
    UnsupportedAssignor: _a(400, 40015, E.unsupported_assignor),
    # a commit for a partition the member does not own in this generation: it missed a
    # rebalance, and ILLEGAL_GENERATION makes every Kafka client rejoin
    PartitionNotAssigned: _a(409, 40913, E.illegal_generation),
    InconsistentGroupProtocol: _a(409, 40914, E.inconsistent_group_protocol),
    GroupNotEmpty: _a(409, 40919, E.non_empty_group),
    InvalidGroupId: _a(400, 40011, E.invalid_group_id),
    # negative or past the high watermark (Kafka itself takes any offset)
    InvalidCommitOffset: _a(400, 40012, E.offset_out_of_range),
    InvalidSessionTimeout: _a(400, 40013, E.invalid_session_timeout),
    GroupFieldTooLong: _a(400, 40014, E.invalid_request),  # Kafka adapter: metadata's own
    RecordNotJson: _a(422, 42206, E.unknown_server_error),  # Kafka: a client-side error
    # REST Proxy's embedded formats (server/schema_codec_errors.py; HTTP only)
    InvalidEmbeddedSchema: _a(422, 42205, E.invalid_record),
    SchemaSerializationFailed: _a(422, 42207, E.invalid_record),
    ConsumerFormatMismatch: _a(406, 40601, E.unknown_server_error),  # REST Proxy's
    SubscriptionConflict: _a(409, 40903, E.unknown_server_error),  # REST Proxy's
    UnknownTopicConfig: _a(404, 40405, E.invalid_config),
    UnknownBroker: _a(404, 40406, E.unknown_server_error),
    NotAuthenticated: _a(401, 40101, E.sasl_authentication_failed),  # REST Proxy's
    NotAuthorized: _a(403, 40301, E.cluster_authorization_failed),  # Kafka adapter: per resource
    # transactions: a conflict with the id's state or a newer producer, not a malformed
    # request, so 409
    ProducerFenced: _a(409, 40915, E.producer_fenced),
    InvalidTxnState: _a(409, 40916, E.invalid_txn_state),
    UnknownTransactionalId: _a(404, 40407, E.transactional_id_not_found),
    SparklogError: _a(500, 50001, E.unknown_server_error),
})

UNKNOWN = Answer(500, 50001, E.unknown_server_error)


def answer_of(exc: BaseException) -> Answer:
    """How ``exc`` is answered: its most specific class in TABLE, else UNKNOWN."""
    for cls in type(exc).__mro__:
        answer = TABLE.get(cls)
        if answer is not None:
            return answer
    return UNKNOWN
