"""Kafka's consumer protocol bytes (what the group APIs carry opaquely), and the Kafka
error codes of sparklog's group errors.

A JoinGroup's ``protocols[].metadata`` is a ``ConsumerProtocolSubscription`` (not a
flexible version; every integer big-endian)::

    version int16, topics array(int32 count) of string(int16 length),
    user_data nullable bytes (int32 length), then by version: owned partitions (v1+),
    generation id (v2+), rack id (v3+)

Only ``version`` and ``topics`` matter here (the coordinator assigns on the server).
A SyncGroup's ``assignment`` is a ``ConsumerProtocolAssignment`` v0::

    version int16 = 0, partitions array of (topic string, partitions array of int32),
    user_data nullable bytes (-1)
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Sequence

from kio.schema.errors import ErrorCode

from conf.errors import SparklogError
from ingest_gateway.errors import GroupFieldTooLong
from ingest_gateway.kafka import codes

OFFSET_METADATA_TOO_LARGE = ErrorCode.offset_metadata_too_large
COORDINATOR_NOT_AVAILABLE = ErrorCode.coordinator_not_available
NOT_COORDINATOR = ErrorCode.not_coordinator
ILLEGAL_GENERATION = ErrorCode.illegal_generation
INCONSISTENT_GROUP_PROTOCOL = ErrorCode.inconsistent_group_protocol
INVALID_GROUP_ID = ErrorCode.invalid_group_id
REBALANCE_IN_PROGRESS = ErrorCode.rebalance_in_progress

logger = logging.getLogger("sparklog.gateway.kafka")


def code_of(exc: BaseException) -> int:
    """Kafka's code for a group operation's error (the group errors' codes are in the
    gateway's error table, ``codes.code_of``)."""
    if isinstance(exc, GroupFieldTooLong) and exc.name == "metadata":
        return OFFSET_METADATA_TOO_LARGE
    if isinstance(exc, ValueError) and not isinstance(exc, SparklogError):
        return codes.INVALID_REQUEST  # the coordinator's plain ValueErrors: bad arguments
    return codes.code_of(exc)


def failed_code(exc: Exception, what: str) -> int:
    """``code_of(exc)``; an unexpected error (UNKNOWN_SERVER_ERROR) is logged with its
    traceback, naming ``what`` failed."""
    code = code_of(exc)
    if code == codes.UNKNOWN_SERVER_ERROR:
        logger.exception("%s failed", what)
    return code


class BadSubscription(ValueError):
    """Member metadata that is not a ConsumerProtocolSubscription."""


def parse_subscription(metadata: bytes) -> tuple[str, ...]:
    """The topics of a ConsumerProtocolSubscription; raises BadSubscription."""
    try:
        version, count = struct.unpack_from(">hi", metadata, 0)
        if version < 0 or not 0 <= count <= (len(metadata) - 6) // 2:
            raise BadSubscription(f"subscription version {version} with {count} topics")
        pos, topics = 6, []
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            if n < 0 or pos + 2 + n > len(metadata):
                raise BadSubscription(f"a topic name of {n} bytes at byte {pos}")
            topics.append(metadata[pos + 2:pos + 2 + n].decode("utf-8"))
            pos += 2 + n
    except (struct.error, UnicodeDecodeError) as e:
        raise BadSubscription(f"the subscription does not parse: {e}") from None
    return tuple(topics)


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack(">h", len(b)) + b


def encode_subscription(topics: Iterable[str]) -> bytes:
    """A ConsumerProtocolSubscription v0 (what DescribeGroups shows as a member's
    metadata)."""
    topics = sorted(topics)
    return struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in topics) \
        + struct.pack(">i", -1)


def encode_assignment(partitions: Sequence[tuple[str, int]]) -> bytes:
    """A ConsumerProtocolAssignment v0 of (topic, partition) pairs."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    out = [struct.pack(">hi", 0, len(by_topic))]
    for t, ps in sorted(by_topic.items()):
        out.append(_string(t) + struct.pack(f">i{len(ps)}i", len(ps), *sorted(ps)))
    out.append(struct.pack(">i", -1))
    return b"".join(out)


def parse_assignment(data: bytes) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a ConsumerProtocolAssignment (tests read what
    DescribeGroups answers with it); raises BadSubscription."""
    try:
        _version, count = struct.unpack_from(">hi", data, 0)
        pos, out = 6, []
        for _ in range(count):
            (n,) = struct.unpack_from(">h", data, pos)
            topic = data[pos + 2:pos + 2 + n].decode("utf-8")
            pos += 2 + n
            (k,) = struct.unpack_from(">i", data, pos)
            out.extend((topic, p) for p in struct.unpack_from(f">{k}i", data, pos + 4))
            pos += 4 + 4 * k
    except (struct.error, UnicodeDecodeError) as e:
        raise BadSubscription(f"the assignment does not parse: {e}") from None
    return out
