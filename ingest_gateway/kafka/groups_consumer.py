"""KIP-848's consumer group protocol over Kafka's wire: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69), adapters over the coordinator's ``server.groups.consumer``
(membership, epochs, reconciliation) and ``describe``.

Partitions travel by topic id here (a topic's store id as a UUID, as Metadata answers
it): a heartbeat's owned partitions are resolved among the member's subscribed topics
(every topic if one is not found there), and ids no topic has are dropped (Kafka drops
partitions of deleted topics the same way).

Kafka's answers: a refused heartbeat carries only its error code and message (member
epoch 0); INVALID_REQUEST for a malformed one (empty member id, a first heartbeat
without its subscription), INVALID_REGULAR_EXPRESSION (RE2 refuses it),
UNSUPPORTED_ASSIGNOR, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, NOT_COORDINATOR,
GROUP_AUTHORIZATION_FAILED without Read on the group. ConsumerGroupDescribe answers
GROUP_ID_NOT_FOUND for a group nobody knows and for a classic group ("is not a consumer
group", as Kafka), GROUP_AUTHORIZATION_FAILED without Describe on it; members of a
mixed group are each marked classic (0) or consumer (1) from v1; the group's authorized
operations (KIP-430) when asked for.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import logging
import uuid
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from ingest_gateway.errors import UnknownGroup
from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.admin_brokers import requested_operations
from ingest_gateway.kafka.context import NO_TOPIC_ID, ZERO, KafkaContext, topic_uuid
from ingest_gateway.kafka.groups_protocol import failed_code
from ingest_gateway.kafka.wire import Header, error, make, response_module
from ingest_gateway.protocol.groups import TopicPartition
from ingest_gateway.server.groups.consumer import Heartbeat
from ingest_gateway.server.groups.state import CONSUMER
from ingest_gateway.server.topic_metadata import TopicMetadata
from log_layout import UnknownTopic

logger = logging.getLogger("sparklog.gateway.kafka")

API_CONSUMER_GROUP_HEARTBEAT, API_CONSUMER_GROUP_DESCRIBE = 68, 69
GROUP_ID_NOT_FOUND = ErrorCode.group_id_not_found
GROUP_AUTHORIZATION_FAILED = ErrorCode.group_authorization_failed


def _ms_or_none(value: Any) -> int | None:
    ms = int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)
    return None if ms == -1 else ms


def _topic_id(metadata: TopicMetadata, name: str) -> uuid.UUID | None:
    try:
        tid = topic_uuid(metadata.topic(name).topic_id)
    except UnknownTopic:
        return None
    return None if tid == NO_TOPIC_ID else tid


def _owned(ctx: KafkaContext, group: str, req: Any) -> frozenset[TopicPartition] | None:
    """The owned partitions of a heartbeat by topic name (None: not sent)."""
    if req.topic_partitions is None:
        return None
    wanted = {tp.topic_id for tp in req.topic_partitions}
    if not wanted:
        return frozenset()
    hub = ctx.hub()
    names: dict[uuid.UUID, str] = {}
    cands = set(req.subscribed_topic_names or ()) | \
        hub.consumer_members.topics_of(group, req.member_id)
    for search in (cands, None):
        for t in (ctx.metadata.names() if search is None else search):
            tid = _topic_id(ctx.metadata, t)
            if tid is not None:
                names[tid] = t
        if wanted <= set(names):
            break
    return frozenset((names[tp.topic_id], int(p)) for tp in req.topic_partitions
                     if tp.topic_id in names for p in tp.partitions)


def _by_topic(pairs: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(pairs):
        out.setdefault(t, []).append(p)
    return out


def _heartbeat_of(head: Header, req: Any, member_id: str) -> Heartbeat:
    topics = req.subscribed_topic_names
    return Heartbeat(member_id, int(req.member_epoch), client_id=head.client_id or "",
                     topics=frozenset(topics) if topics is not None else None,
                     regex=req.subscribed_topic_regex, assignor=req.server_assignor,
                     rebalance_timeout_ms=_ms_or_none(req.rebalance_timeout),
                     instance_id=req.instance_id)


async def consumer_group_heartbeat(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """Join, heartbeat, reconcile or leave (``server.groups.consumer``)."""
    mod = response_module(API_CONSUMER_GROUP_HEARTBEAT, head.api_version)

    def refused(code: int, message: str | None) -> Any:
        return make(mod.ConsumerGroupHeartbeatResponse, throttle_time=ZERO,
                    error_code=error(code), error_message=message, member_id=None,
                    member_epoch=0, heartbeat_interval=ZERO, assignment=None)

    group, member_id = req.group_id, req.member_id
    if head.api_version == 0 and not member_id and req.member_epoch == 0:
        # v0: the coordinator names a member that did not name itself (v1: the client must)
        member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    denied = sec.refused(ctx, "Read", "Group", group)
    if denied:
        return refused(denied, f"not authorized to read group {group!r}")
    hub = ctx.hub()
    try:
        hub.check_coordinator(group)
        if req.member_epoch == 0 and req.topic_partitions:  # before unknown ids are dropped
            raise ValueError("TopicPartitions must be empty when (re-)joining")
        hb = dataclasses.replace(_heartbeat_of(head, req, member_id),
                                 owned=await hub.run(_owned, ctx, group, req))
        ans = await hub.run(hub.consumer_members.heartbeat, group, hb)
        assignment = None
        if ans.assignment is not None:
            ids = await hub.run(lambda: {t: _topic_id(ctx.metadata, t)
                                         for t in _by_topic(ans.assignment)})
            assignment = make(mod.Assignment, topic_partitions=tuple(
                make(mod.TopicPartitions, topic_id=ids[t], partitions=tuple(ps))
                for t, ps in _by_topic(ans.assignment).items() if ids[t] is not None))
    except Exception as e:  # noqa: BLE001 - every failure is an error code
        code = failed_code(e, f"ConsumerGroupHeartbeat of group {group}")
        logger.info("ConsumerGroupHeartbeat of member %s of group %s refused: %s",
                    member_id, group, e)
        return refused(code, str(e))
    return make(mod.ConsumerGroupHeartbeatResponse, throttle_time=ZERO,
                error_code=error(codes.NONE), error_message=None, member_id=ans.member_id,
                member_epoch=ans.member_epoch,
                heartbeat_interval=datetime.timedelta(milliseconds=ans.heartbeat_interval_ms),
                assignment=assignment)


def _assignment(mod: Any, ctx: KafkaContext, pairs: Iterable[dict[str, Any]]) -> Any:
    by = _by_topic((a["topic"], a["partition"]) for a in pairs)
    return make(mod.Assignment, topic_partitions=tuple(
        make(mod.TopicPartitions, topic_id=_topic_id(ctx.metadata, t) or NO_TOPIC_ID,
             topic_name=t, partitions=tuple(ps)) for t, ps in by.items()))


def _described(ctx: KafkaContext, mod: Any, version: int, d: Any) -> Any:
    members = []
    for m in d.members:
        consumer = m.get("protocol") == CONSUMER
        fields = dict(
            member_id=m["member_id"], instance_id=None, rack_id=None,
            member_epoch=m.get("member_epoch", d.generation), client_id=m["client_id"],
            client_host="", subscribed_topic_names=tuple(m["topics"]),
            subscribed_topic_regex=m.get("regex"),
            assignment=_assignment(mod, ctx, m["assignment"]),
            target_assignment=_assignment(mod, ctx, m.get("target", m["assignment"])))
        if version >= 1:
            fields["member_type"] = 1 if consumer else 0
        members.append(make(mod.Member, **fields))
    return make(mod.DescribedGroup, error_code=error(codes.NONE), error_message=None,
                group_id=d.group, group_state=d.state, group_epoch=d.generation,
                assignment_epoch=d.generation, assignor_name=d.strategy or "",
                members=tuple(members), authorized_operations=-2147483648)


async def consumer_group_describe(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """Each consumer group's epochs, assignor and members with their assignment and
    target (module docstring for the refusals)."""
    mod = response_module(API_CONSUMER_GROUP_DESCRIBE, head.api_version)
    hub = ctx.hub()

    def failed(group: str, code: int, message: str) -> Any:
        return make(mod.DescribedGroup, error_code=error(code), error_message=message,
                    group_id=group, group_state="", group_epoch=-1, assignment_epoch=-1,
                    assignor_name="", members=(), authorized_operations=-2147483648)

    out = []
    for group in req.group_ids:
        if sec.refused(ctx, "Describe", "Group", group):
            out.append(failed(group, GROUP_AUTHORIZATION_FAILED,
                              f"not authorized to describe group {group!r}"))
            continue
        try:
            d = await hub.run(hub.coordinator.describe, group)
            if d.type != CONSUMER:
                out.append(failed(group, GROUP_ID_NOT_FOUND,
                                  f"Group {group} is not a consumer group."))
                continue
            described = await hub.run(_described, ctx, mod, head.api_version, d)
            out.append(dataclasses.replace(described, authorized_operations=requested_operations(
                ctx, req.include_authorized_operations, "Group", group)))
        except UnknownGroup:
            out.append(failed(group, GROUP_ID_NOT_FOUND, f"Group {group} not found."))
        except Exception as e:  # noqa: BLE001 - every failure is an error code
            out.append(failed(group, failed_code(e, "ConsumerGroupDescribe"), str(e)))
    return make(mod.ConsumerGroupDescribeResponse, throttle_time=ZERO, groups=tuple(out))


OFFERED: dict[int, tuple[int, int]] = {
    API_CONSUMER_GROUP_HEARTBEAT: (0, 1),
    API_CONSUMER_GROUP_DESCRIBE: (0, 1),
}

HANDLERS = {
    API_CONSUMER_GROUP_HEARTBEAT: consumer_group_heartbeat,
    API_CONSUMER_GROUP_DESCRIBE: consumer_group_describe,
}
