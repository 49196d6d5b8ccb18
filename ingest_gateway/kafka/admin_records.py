"""DeleteRecords and OffsetForLeaderEpoch over the Kafka protocol.

**DeleteRecords** moves each partition's log start offset forward with
``server.records_admin`` (the same commit as ``sparklog records delete``): one
manifest version, so every reader stops returning the records below it at once, and
the partition's leader rebases its next append on it. Offset -1 means the high
watermark (Kafka's convention). Answered per partition with the new low watermark,
or ``OFFSET_OUT_OF_RANGE`` (past the high watermark, or below -1) or
``UNKNOWN_TOPIC_OR_PARTITION``.

**OffsetForLeaderEpoch.** A partition's leader epochs are its manifest's history
(``server.records_admin.epoch_end``: each claim adds its epoch at the log end offset),
and the answer is Kafka's (``LeaderEpochFileCache.endOffsetFor``): the current epoch
answers the log end offset; an older one the largest epoch at most the requested
one with the first offset written after it; an epoch after the current one, or one
the history does not hold (a log written before it was kept), answers epoch -1 and
offset -1. ``current_leader_epoch`` fences as Kafka's: older than the manifest's
``FENCED_LEADER_EPOCH``, newer ``UNKNOWN_LEADER_EPOCH``.

**ACLs** (Kafka's): DeleteRecords needs Delete on the topic, OffsetForLeaderEpoch
ClusterAction on the cluster or Describe on the topic; a topic denied answers
TOPIC_AUTHORIZATION_FAILED for each of its partitions, the others are served.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import ZERO, KafkaContext
from ingest_gateway.kafka.wire import Header, error, make, response_module
from ingest_gateway.server import records_admin


API_DELETE_RECORDS, API_OFFSET_FOR_LEADER_EPOCH = 21, 23
#: Kafka 4.0's version floors up to what current clients use
OFFERED: dict[int, tuple[int, int]] = {
    API_DELETE_RECORDS: (0, 2),
    API_OFFSET_FOR_LEADER_EPOCH: (2, 4),
}

FENCED_LEADER_EPOCH = ErrorCode.fenced_leader_epoch
UNKNOWN_LEADER_EPOCH = ErrorCode.unknown_leader_epoch
#: Kafka's answer for an epoch it cannot place
UNDEFINED = (-1, -1)


async def delete_records(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_DELETE_RECORDS, head.api_version)
    topics = []
    for t in req.topics:
        denied = sec.refused(ctx, "Delete", "Topic", t.name)
        parts = []
        for p in t.partitions:
            code, low = (denied, -1) if denied else \
                await _delete_one(ctx, t.name, p.partition_index, p.offset)
            parts.append(make(mod.DeleteRecordsPartitionResult,
                              partition_index=p.partition_index, low_watermark=low,
                              error_code=error(code)))
        topics.append(make(mod.DeleteRecordsTopicResult, name=t.name, partitions=tuple(parts)))
    return make(mod.DeleteRecordsResponse, throttle_time=ZERO, topics=tuple(topics))


async def _delete_one(ctx: KafkaContext, topic: str, partition: int,
                      offset: int) -> tuple[int, int]:
    """(error code, the new low watermark or -1) of one partition's DeleteRecords."""
    try:
        return codes.NONE, await records_admin.delete_records(ctx.gateway, topic, partition,
                                                              offset)
    except Exception as e:  # noqa: BLE001 - per-partition error codes
        return codes.code_logged(e, "DeleteRecords"), -1


async def offset_for_leader_epoch(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_OFFSET_FOR_LEADER_EPOCH, head.api_version)
    topics = []
    # KIP-320: consumers ask too, so Describe on the topic does as well as ClusterAction
    replica = sec.allowed(ctx, "ClusterAction", "Cluster", sec.CLUSTER_NAME)
    for t in req.topics:
        denied = 0 if replica else sec.refused(ctx, "Describe", "Topic", t.topic)
        parts = []
        for p in t.partitions:
            code, (epoch, end) = denied, UNDEFINED
            try:
                if not denied:
                    found = await records_admin.epoch_end(ctx.gateway, t.topic,
                                                          p.partition, p.leader_epoch)
                    code, epoch, end = _fenced(p.current_leader_epoch, found)
            except Exception as e:  # noqa: BLE001 - per-partition error codes
                code = codes.code_logged(e, "OffsetForLeaderEpoch")
            parts.append(make(mod.EpochEndOffset, error_code=error(code),
                              partition=p.partition, leader_epoch=epoch, end_offset=end))
        topics.append(make(mod.OffsetForLeaderTopicResult, topic=t.topic,
                           partitions=tuple(parts)))
    return make(mod.OffsetForLeaderEpochResponse, throttle_time=ZERO, topics=tuple(topics))


def _fenced(current: int, found: records_admin.EpochEnd) -> tuple[int, int, int]:
    """(error code, epoch, end offset): ``current_leader_epoch`` fences as Kafka's (module
    doc)."""
    if current >= 0 and current != found.current:
        return (FENCED_LEADER_EPOCH if current < found.current else UNKNOWN_LEADER_EPOCH,
                *UNDEFINED)
    return codes.NONE, found.epoch, found.end_offset


HANDLERS = {API_DELETE_RECORDS: delete_records,
            API_OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch}
