"""The Kafka group APIs that read or write committed offsets and describe groups:
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups (the membership APIs and how a
Kafka member maps onto sparklog's coordinator: ``groups``).

Committed offsets are the coordinator's, so an offset committed over the Kafka
protocol is the one ``GET /groups/{g}/offsets`` shows, and the reverse. Differences
from Kafka's broker, each because the coordinator keeps less:

- a commit is all or nothing, so every partition of a refused OffsetCommit carries the
  same error code; it keeps one metadata string for the commit (the first partition's:
  clients send the same for all);
- OffsetFetch answers ``committed_leader_epoch`` -1 and empty metadata;
- ListGroups gives ``Stable`` for a group with members on this gateway and ``Empty``
  for one known only from the store (its document), without looking further; from v5
  its type (``consumer`` for a KIP-848 group, mixed ones too, else ``classic``);
- DescribeGroups answers a consumer-type group ``Dead``, as Kafka 4 does (it is
  described by ConsumerGroupDescribe); OffsetCommit below v9 from a KIP-848 member is
  UNSUPPORTED_VERSION (Kafka's rule).

ACLs (Kafka's, checked here so each resource gets its own code): OffsetCommit needs Read
on the group (else GROUP_AUTHORIZATION_FAILED on every partition) and Read on each
topic (else TOPIC_AUTHORIZATION_FAILED on its partitions, the other topics committed);
OffsetFetch Describe on the group (else the group's code: top-level from v2, per
partition in v1) and on each topic (a topic denied answers TOPIC_AUTHORIZATION_FAILED
when named, is left out when all are asked for); DescribeGroups Describe on each group
(GROUP_AUTHORIZATION_FAILED for that group); ListGroups lists every group to a
principal with Describe on the cluster, else only the groups it may Describe.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ingest_gateway.errors import UnknownGroup
from ingest_gateway.kafka import codes
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.admin_brokers import authorized_operations
from ingest_gateway.kafka.context import ZERO, KafkaContext
from ingest_gateway.kafka.groups_protocol import (encode_assignment, encode_subscription,
                                                  failed_code)
from ingest_gateway.kafka.wire import Header, error, make, response_module
from ingest_gateway.server.groups.state import CONSUMER

logger = logging.getLogger("sparklog.gateway.kafka")

NO_AUTHORIZED_OPERATIONS = -2147483648  # "not asked for" (Kafka's INT32 min)


class UnsupportedVersion(Exception):
    """A request version Kafka refuses for what it carries (answered UNSUPPORTED_VERSION)."""

    error_code = codes.UNSUPPORTED_VERSION


async def offset_commit(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """A member's commit (its id and generation checked, see the coordinator), or a
    member-less one (``member_id`` empty, generation -1: ``assign()`` consumers)."""
    mod = response_module(8, head.api_version)
    generation = getattr(req, "generation_id_or_member_epoch", -1)
    denied = _denied(ctx, "Read", req.group_id, [t.name for t in req.topics])
    offsets = {(t.name, p.partition_index): p.committed_offset
               for t in req.topics if not denied[t.name] for p in t.partitions}
    metadata = next((p.committed_metadata for t in req.topics for p in t.partitions), None)
    code = codes.NONE
    if offsets:
        hub = ctx.hub()
        try:
            hub.check_coordinator(req.group_id)
            if head.api_version < 9 and req.member_id and await hub.run(
                    hub.consumer_members.is_member, req.group_id, req.member_id):
                raise UnsupportedVersion("OffsetCommit version 9 or above must be used by "
                                         "members using the modern group protocol")
            await hub.run(hub.coordinator.check_instance, req.group_id, req.member_id,
                          getattr(req, "group_instance_id", None))
            await hub.run(lambda: hub.coordinator.commit(
                req.group_id, offsets, member_id=req.member_id or None, generation=generation,
                metadata=metadata or ""))
        except Exception as e:  # noqa: BLE001 - every failure is an error code
            code = failed_code(e, f"OffsetCommit of group {req.group_id}")
    topics = tuple(make(mod.OffsetCommitResponseTopic, name=t.name, partitions=tuple(
        make(mod.OffsetCommitResponsePartition, partition_index=p.partition_index,
             error_code=error(denied[t.name] or code)) for p in t.partitions))
        for t in req.topics)
    return make(mod.OffsetCommitResponse, throttle_time=ZERO, topics=topics)


async def offset_fetch(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """Committed offsets of the partitions asked for (-1 where none), or of every
    partition the group committed for (``topics`` null); from v8 of several groups, each
    answered on its own, and from v9 a KIP-848 member's epoch checked (UNKNOWN_MEMBER_ID,
    STALE_MEMBER_EPOCH on its group)."""
    mod = response_module(9, head.api_version)
    if head.api_version < 8:
        code, topics = await _fetch_group(ctx, head, mod, req.group_id, req.topics)
        return make(mod.OffsetFetchResponse, throttle_time=ZERO, topics=topics,
                    error_code=error(code))
    groups = []
    for g in req.groups:
        code, topics = await _fetch_group(ctx, head, mod, g.group_id, g.topics,
                                          getattr(g, "member_id", None),
                                          getattr(g, "member_epoch", -1))
        groups.append(make(mod.OffsetFetchResponseGroup, group_id=g.group_id, topics=topics,
                           error_code=error(code)))
    return make(mod.OffsetFetchResponse, throttle_time=ZERO, groups=tuple(groups))


async def _fetch_group(ctx: KafkaContext, head: Header, mod: Any, group: str, asked_topics: Any,
                       member_id: str | None = None, member_epoch: int = -1
                       ) -> tuple[int, tuple]:
    """(the group's error code, its topics' answers) of one group of an OffsetFetch."""
    v8 = head.api_version >= 8
    topic_cls = mod.OffsetFetchResponseTopics if v8 else mod.OffsetFetchResponseTopic
    part_cls = mod.OffsetFetchResponsePartitions if v8 else mod.OffsetFetchResponsePartition
    group_code = sec.refused(ctx, "Describe", "Group", group)
    if group_code and head.api_version >= 2:  # Kafka: the group's code alone, no topics
        return group_code, ()
    asked = None if asked_topics is None else \
        [(t.name, p) for t in asked_topics for p in t.partition_indexes]
    hub = ctx.hub()
    code, committed = codes.NONE, {}
    if not group_code:
        try:
            if member_id or member_epoch >= 0:
                await hub.run(hub.consumer_members.check_fetch, group, member_id or "",
                              member_epoch)
            committed = await hub.run(hub.coordinator.committed, group, asked)
        except Exception as e:  # noqa: BLE001 - every failure is an error code
            code = failed_code(e, f"OffsetFetch of group {group}")
            if member_id and v8:  # the member's refusal is its group's, no offsets
                return code, ()
    by_topic: dict[str, list[int]] = {}
    for t, p in (asked if asked is not None else sorted(committed)):
        by_topic.setdefault(t, []).append(p)
    denied = _denied(ctx, "Describe", group, list(by_topic), group_code)
    topics = tuple(make(topic_cls, name=t, partitions=tuple(
        make(part_cls, partition_index=p,
             committed_offset=-1 if denied[t] else committed.get((t, p), -1),
             committed_leader_epoch=-1, metadata="", error_code=error(denied[t] or code))
        for p in ps)) for t, ps in by_topic.items() if asked is not None or not denied[t])
    return code, topics


def _denied(ctx: KafkaContext, operation: str, group: str, topics: list[str],
            group_code: int | None = None) -> dict[str, int]:
    """Topic -> 0, or Kafka's code of a denial: the group's (``operation`` on the group,
    or ``group_code`` when given) for every topic, else TOPIC_AUTHORIZATION_FAILED for
    those without ``operation`` on them."""
    if group_code is None:
        group_code = sec.refused(ctx, operation, "Group", group)
    return {t: group_code or sec.refused(ctx, operation, "Topic", t) for t in topics}


async def describe_groups(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """State, strategy and members (subscription and assignment as the consumer
    protocol's bytes) of each group; a group nobody knows is ``Dead``, as in Kafka."""
    mod = response_module(15, head.api_version)
    hub = ctx.hub()
    out = []
    for group in req.groups:
        denied = sec.refused(ctx, "Describe", "Group", group)
        if denied:
            out.append(_described(mod, group, denied, "", "", ()))
            continue
        try:
            d = await hub.run(hub.coordinator.describe, group)
        except UnknownGroup:
            out.append(_described(mod, group, codes.NONE, "Dead", "", ()))
            continue
        except Exception as e:  # noqa: BLE001 - every failure is an error code
            out.append(_described(mod, group, failed_code(e, "DescribeGroups"), "", "", ()))
            continue
        if d.type == CONSUMER:  # Kafka: "not a classic group" (ConsumerGroupDescribe's)
            out.append(_described(mod, group, codes.NONE, "Dead", "", ()))
            continue
        members = tuple(make(
            mod.DescribedGroupMember, member_id=m["member_id"], group_instance_id=None,
            client_id=m["client_id"], client_host="",
            member_metadata=encode_subscription(m["topics"]),
            member_assignment=encode_assignment([(a["topic"], a["partition"])
                                                 for a in m["assignment"]]))
            for m in d.members)
        out.append(_described(mod, group, codes.NONE, d.state, d.strategy or "", members))
    if getattr(req, "include_authorized_operations", False):  # KIP-430, for those allowed
        out = [g if g.error_code == error(sec.GROUP_AUTHORIZATION_FAILED) else
               dataclasses.replace(g, authorized_operations=authorized_operations(
                   ctx, "Group", g.group_id)) for g in out]
    return make(mod.DescribeGroupsResponse, throttle_time=ZERO, groups=tuple(out))


def _described(mod: Any, group: str, code: int, state: str, strategy: str,
               members: tuple) -> Any:
    return make(mod.DescribedGroup, error_code=error(code), group_id=group, group_state=state,
                protocol_type="consumer" if state not in ("Dead", "") else "",
                protocol_data=strategy, members=members,
                authorized_operations=NO_AUTHORIZED_OPERATIONS)


async def list_groups(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """Every group with members here or a document in the store (v4: ``states_filter``)
    that the principal may describe (module doc)."""
    mod = response_module(16, head.api_version)
    hub = ctx.hub()
    try:  # both take the coordinator's lock, which a store write may hold: off the loop
        names, live = await hub.run(lambda: (hub.coordinator.groups(),
                                             set(hub.coordinator.live_groups())))
        code = codes.NONE
    except Exception as e:  # noqa: BLE001 - every failure is an error code
        names, live, code = [], set(), failed_code(e, "ListGroups")
    if not sec.allowed(ctx, "Describe", "Cluster", sec.CLUSTER_NAME):  # Kafka's rule
        names = [n for n in names if sec.allowed(ctx, "Describe", "Group", n)]
    wanted = {s.lower() for s in getattr(req, "states_filter", ()) or ()}
    kinds = {s.lower() for s in getattr(req, "types_filter", ()) or ()}
    types = await hub.run(hub.consumer_members.types, names) if head.api_version >= 5 else {}
    groups = []
    for name in names:
        state = "Stable" if name in live else "Empty"
        kind = types.get(name, "classic")
        if (not wanted or state.lower() in wanted) and (not kinds or kind in kinds):
            extra = {"group_type": kind} if head.api_version >= 5 else {}
            groups.append(make(mod.ListedGroup, group_id=name, protocol_type="consumer",
                               group_state=state, **extra))
    return make(mod.ListGroupsResponse, throttle_time=ZERO, error_code=error(code),
                groups=tuple(groups))
