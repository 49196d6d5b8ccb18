"""The ONE table from sparklog's typed errors to Kafka's numeric error codes.

Read-only, built here once. A class not in the table (and none of its bases) is
answered with ``UNKNOWN_SERVER_ERROR`` (-1) and logged by the caller. Retriable
conditions map to Kafka's retriable codes, so unmodified clients retry them:
a full buffer is ``REQUEST_TIMED_OUT``, a gateway shutting down or no longer leading
a partition ``NOT_LEADER_OR_FOLLOWER`` (clients then refresh their metadata).
"""

from __future__ import annotations

from types import MappingProxyType

from conf.errors import ConfigError
from conf.topic import InvalidTopicName
from ingest_gateway.errors import (BadRequest, BufferFull, FlushFailed, InvalidPartitions,
                                   MissingKey, NotLeader, ShuttingDown)
from log_layout import (Fenced, InvalidProducerEpoch, InvalidRecords, OffsetOutOfRange,
                        OutOfOrderSequence, ProducerFenced, RecordTooLarge, StoreError,
                        TopicExists, UnknownPartition, UnknownTopic)

UNKNOWN_SERVER_ERROR = -1
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REQUEST = 42
INVALID_CONFIG = 40
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
KAFKA_STORAGE_ERROR = 56
PRODUCER_FENCED = 90
UNKNOWN_TOPIC_ID = 100
INVALID_RECORD = 87

#: most specific class first (the first isinstance match wins)
CODES = MappingProxyType({
    OffsetOutOfRange: OFFSET_OUT_OF_RANGE,
    UnknownTopic: UNKNOWN_TOPIC_OR_PARTITION,
    UnknownPartition: UNKNOWN_TOPIC_OR_PARTITION,
    NotLeader: NOT_LEADER_OR_FOLLOWER,
    Fenced: NOT_LEADER_OR_FOLLOWER,
    ShuttingDown: NOT_LEADER_OR_FOLLOWER,
    BufferFull: REQUEST_TIMED_OUT,
    RecordTooLarge: MESSAGE_TOO_LARGE,
    InvalidTopicName: INVALID_TOPIC_EXCEPTION,
    TopicExists: TOPIC_ALREADY_EXISTS,
    OutOfOrderSequence: OUT_OF_ORDER_SEQUENCE_NUMBER,
    ProducerFenced: PRODUCER_FENCED,
    InvalidProducerEpoch: INVALID_PRODUCER_EPOCH,
    MissingKey: INVALID_RECORD,
    InvalidRecords: INVALID_RECORD,
    BadRequest: INVALID_REQUEST,
    InvalidPartitions: INVALID_PARTITIONS,
    ConfigError: INVALID_CONFIG,
    FlushFailed: KAFKA_STORAGE_ERROR,
    StoreError: KAFKA_STORAGE_ERROR,
})


def code_of(exc: BaseException) -> int:
    """Kafka's error code for ``exc`` (UNKNOWN_SERVER_ERROR if none is known). An error
    that carries its own Kafka code (``records``' errors: ``error_code``) answers it."""
    own = getattr(exc, "error_code", None)
    if isinstance(own, int) and not isinstance(own, bool):
        return own
    for cls, code in CODES.items():
        if isinstance(exc, cls):
            return code
    return UNKNOWN_SERVER_ERROR
