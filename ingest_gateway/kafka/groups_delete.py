"""Kafka's DeleteGroups (42) and OffsetDelete (47): thin adapters over the coordinator's
``ingest_gateway.server.groups.deletes`` (what ``sparklog groups delete |
delete-offsets`` runs too), answered as Kafka's KafkaApis and GroupCoordinator do.

**DeleteGroups**, per group: Delete on the group (else GROUP_AUTHORIZATION_FAILED),
then NOT_COORDINATOR where another gateway coordinates it, INVALID_GROUP_ID,
GROUP_ID_NOT_FOUND for a group with no members and no document, NON_EMPTY_GROUP while
it has members (or a rebalance under way), REBALANCE_IN_PROGRESS (retriable) while an
offset commit on it is being written.

**OffsetDelete**: Delete on the group (else GROUP_AUTHORIZATION_FAILED, top level, no
topics); per partition Read on its topic (else TOPIC_AUTHORIZATION_FAILED) and an
existing partition (else UNKNOWN_TOPIC_OR_PARTITION); a group-level error (NOT_COORDINATOR,
GROUP_ID_NOT_FOUND, INVALID_GROUP_ID) is answered top level with no topics, as Kafka's
``getErrorResponse``; else GROUP_SUBSCRIBED_TO_TOPIC on the partitions of a topic a
member is subscribed to, and no error on the others (deleted, or there was none).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from conf.topic import InvalidTopicName
from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import ZERO, KafkaContext
from ingest_gateway.kafka.groups_protocol import failed_code
from ingest_gateway.kafka.wire import Header, error, make, response_module
from ingest_gateway.server.groups import deletes
from ingest_gateway.server.topic_metadata import TopicMetadata
from log_layout import UnknownTopic

API_DELETE_GROUPS, API_OFFSET_DELETE = 42, 47
GROUP_SUBSCRIBED_TO_TOPIC = ErrorCode.group_subscribed_to_topic
UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.unknown_topic_or_partition


async def delete_groups(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """Each group deleted or refused with its own code (module doc)."""
    mod = response_module(API_DELETE_GROUPS, head.api_version)
    hub = ctx.hub()
    results = []
    for group in dict.fromkeys(req.groups_names):  # Kafka answers a repeated name once
        code = sec.refused(ctx, "Delete", "Group", group)
        if not code:
            try:
                hub.check_coordinator(group)
                await hub.run(deletes.delete_group, hub.coordinator.table, group)
            except Exception as e:  # noqa: BLE001 - every failure is an error code
                code = failed_code(e, f"DeleteGroups of group {group}")
        results.append(make(mod.DeletableGroupResult, group_id=group, error_code=error(code)))
    return make(mod.DeleteGroupsResponse, throttle_time=ZERO, results=tuple(results))


def _partition_codes(metadata: TopicMetadata, topics: Any) -> dict[tuple[str, int], int]:
    """Kafka's code of each partition asked for before the coordinator sees it: 0, or
    UNKNOWN_TOPIC_OR_PARTITION. Reads the store's metadata: call it off the event loop."""
    out: dict[tuple[str, int], int] = {}
    for t in topics:
        try:
            count = metadata.partition_count(t.name)
        except (UnknownTopic, InvalidTopicName):
            count = 0
        for p in t.partitions:
            i = p.partition_index
            out[(t.name, i)] = 0 if 0 <= i < count else UNKNOWN_TOPIC_OR_PARTITION
    return out


async def offset_delete(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """The group's offsets of the partitions asked for deleted, each answered (module doc)."""
    mod = response_module(API_OFFSET_DELETE, head.api_version)
    group = req.group_id

    def answer(code: int, topics: tuple = ()) -> Any:
        return make(mod.OffsetDeleteResponse, error_code=error(code), throttle_time=ZERO,
                    topics=topics)

    denied = sec.refused(ctx, "Delete", "Group", group)
    if denied:
        return answer(denied)
    hub = ctx.hub()
    # sec.refused reads the request's principal from a context variable, which the
    # executor thread does not see: the ACL checks stay on the loop
    acl = {t.name: sec.refused(ctx, "Read", "Topic", t.name) for t in req.topics}
    allowed = [t for t in req.topics if not acl[t.name]]
    try:
        found = await hub.run(_partition_codes, ctx.metadata, allowed)
        hub.check_coordinator(group)
        done = await hub.run(deletes.delete_offsets, hub.coordinator.table, group,
                             [tp for tp, c in found.items() if not c])
    except Exception as e:  # noqa: BLE001 - every failure is an error code
        return answer(failed_code(e, f"OffsetDelete of group {group}"))

    def code_of(topic: str, p: int) -> int:
        if acl[topic]:
            return acl[topic]
        return found.get((topic, p)) or (GROUP_SUBSCRIBED_TO_TOPIC
                                         if done.get((topic, p)) else codes.NONE)

    return answer(codes.NONE, tuple(
        make(mod.OffsetDeleteResponseTopic, name=t.name, partitions=tuple(
            make(mod.OffsetDeleteResponsePartition, partition_index=p.partition_index,
                 error_code=error(code_of(t.name, p.partition_index)))
            for p in t.partitions)) for t in req.topics))


#: api key -> (min version, max version): Kafka 4.0's
OFFERED: dict[int, tuple[int, int]] = {API_DELETE_GROUPS: (0, 2), API_OFFSET_DELETE: (0, 0)}
HANDLERS = {API_DELETE_GROUPS: delete_groups, API_OFFSET_DELETE: offset_delete}
