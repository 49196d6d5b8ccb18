"""Kafka's classic consumer-group protocol, served by sparklog's own group coordinator
(``ingest_gateway.server.groups``): FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup here; OffsetCommit, OffsetFetch, DescribeGroups, ListGroups in
``groups_offsets``; KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe in
``groups_consumer``; DeleteGroups and OffsetDelete in ``groups_delete``. :data:`OFFERED`
and :data:`HANDLERS` are what the listener adds to its own tables.

**One group, whichever protocol its members speak.** A Kafka member is a member of
the coordinator's group like an HTTP one: JoinGroup is the coordinator's ``join``
(the topics read from the ``consumer`` protocol's subscription bytes, less those
that do not exist while one does; the strategies from the protocol names it offers
that sparklog knows: ``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``),
so both kinds of members share generations, assignment and committed offsets, and
may even be in one group.

**The assignment stays on the server.** Kafka's classic protocol lets the leader
member compute the assignment and hand it over in SyncGroup; sparklog's coordinator
computes it itself (as KIP-848 does). Both fit: the JoinGroup answer names a leader
that is no member (:data:`LEADER`), so every Kafka client is a follower, sends an
empty SyncGroup, and gets its partitions from the coordinator's plan encoded as a
``ConsumerProtocolAssignment``. The client's own assignor never runs, so its
user data (e.g. the sticky assignors' generation) is never read.

**Refused:** a protocol type other than ``consumer`` (Kafka Connect's ``connect``:
its metadata is not a subscription), or no strategy in common with the group's
members: INCONSISTENT_GROUP_PROTOCOL. FindCoordinator for transactions:
UNSUPPORTED_VERSION (transactions are not served over this protocol yet).

**Static membership** (``group.instance.id``, KIP-345; the coordinator's ``static``):
a JoinGroup with no member id and a known instance id takes the old member's place
(its partitions, no rebalance); the old member id, named with that instance id in
SyncGroup, Heartbeat, LeaveGroup or OffsetCommit, then gets FENCED_INSTANCE_ID. LeaveGroup
v3+ may name a member by its instance id alone.

**Blocking JoinGroup.** Kafka answers a JoinGroup only once the rebalance completes
(every member rejoined, or the rebalance timeout removed those that did not). The
handler waits for that (``join_waiters``: woken by the coordinator's change
listeners), and counts the
wait as the member's heartbeats (Kafka pauses the session timer of a member inside
JoinGroup). Heartbeat answers REBALANCE_IN_PROGRESS while the group prepares a
rebalance and ILLEGAL_GENERATION to a member behind the group's generation, which
make every client rejoin.

**Coordinator.** A standalone gateway coordinates every group. In the broker
application only the slot the assignment names does: elsewhere the group APIs
answer NOT_COORDINATOR and FindCoordinator COORDINATOR_NOT_AVAILABLE (the other
slots' Kafka addresses are not registered yet, so it cannot point at them).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from ingest_gateway.protocol.groups import STRATEGIES, MemberState, validate_group_id
from ingest_gateway.kafka import codes, groups_consumer, groups_delete, groups_offsets
from ingest_gateway.kafka.context import ZERO, KafkaContext
from ingest_gateway.kafka.groups_protocol import (COORDINATOR_NOT_AVAILABLE,
                                                  ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL,
                                                  NOT_COORDINATOR, REBALANCE_IN_PROGRESS,
                                                  BadSubscription, encode_assignment, failed_code,
                                                  parse_subscription)
from ingest_gateway.kafka.wire import Header, error, make, response_module
from ingest_gateway.server.groups import static

logger = logging.getLogger("sparklog.gateway.kafka")

API_OFFSET_COMMIT, API_OFFSET_FETCH, API_FIND_COORDINATOR, API_JOIN_GROUP = 8, 9, 10, 11
API_HEARTBEAT, API_LEAVE_GROUP, API_SYNC_GROUP, API_DESCRIBE_GROUPS = 12, 13, 14, 15
API_LIST_GROUPS = 16

#: the JoinGroup answers' leader: no member has this id, so every member is a follower
LEADER = "sparklog-coordinator"
PROTOCOL_TYPE = "consumer"
#: how often a waiting JoinGroup looks at its group even without a change (the
#: rebalance timeout is acted on when someone looks)
RECHECK_S = 1.0


def _ms(value: Any) -> int:
    """kio's timedelta (or int) milliseconds as int."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


async def find_coordinator(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """This gateway for the groups it coordinates (every group when standalone)."""
    mod = response_module(API_FIND_COORDINATOR, head.api_version)
    keys = list(req.coordinator_keys) if hasattr(req, "coordinator_keys") else [req.key]
    key_type = getattr(req, "key_type", 0)
    found = []
    for key in keys:
        code, message = codes.NONE, None
        if key_type != 0:
            code, message = codes.UNSUPPORTED_VERSION, \
                "transactions are not served over the Kafka protocol yet"
        else:
            try:
                validate_group_id(key)
                ctx.hub().check_coordinator(key)
            except Exception as e:  # noqa: BLE001 - every failure is an error code
                code, message = failed_code(e, "FindCoordinator"), str(e)
                if code == NOT_COORDINATOR:
                    code = COORDINATOR_NOT_AVAILABLE
        ok = code == codes.NONE
        found.append((key, ctx.node_id if ok else -1, ctx.host if ok else "",
                      ctx.port if ok else -1, code, message))
    return coordinator_answer(mod, found)


def coordinator_answer(mod: Any, found: list[tuple[str, int, str, int, int, str | None]]
                       ) -> Any:
    """A FindCoordinator answer (``mod``: its version's module) of ``(key, node id, host,
    port, error code, message)`` per key: one per key from v4, else the first."""
    if hasattr(mod, "Coordinator"):  # v4+: one answer per key
        return make(mod.FindCoordinatorResponse, throttle_time=ZERO, coordinators=tuple(
            make(mod.Coordinator, key=k, node_id=n, host=h, port=p, error_code=error(c),
                 error_message=m) for k, n, h, p, c, m in found))
    _, n, h, p, c, m = found[0]
    return make(mod.FindCoordinatorResponse, throttle_time=ZERO, error_code=error(c),
                error_message=m, node_id=n, host=h, port=p)


def _subscription(req: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(topics, strategies sparklog knows, in the member's order of preference) of a
    JoinGroup; raises BadSubscription."""
    if req.protocol_type != PROTOCOL_TYPE:
        raise BadSubscription(f"protocol type {req.protocol_type!r}, not {PROTOCOL_TYPE!r}")
    known = [p for p in req.protocols if p.name in STRATEGIES]
    if not known:
        raise BadSubscription(f"no strategy in {[p.name for p in req.protocols]} is one of "
                              f"{STRATEGIES}")
    strategies = tuple(dict.fromkeys(p.name for p in known))
    return parse_subscription(known[0].metadata), strategies


async def join_group(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """Join or rejoin; answered when the group's next generation is complete."""
    mod = response_module(API_JOIN_GROUP, head.api_version)

    def answer(code: int, st: MemberState | None = None) -> Any:
        return make(mod.JoinGroupResponse, throttle_time=ZERO, error_code=error(code),
                    generation_id=st.generation if st else -1, protocol_type=PROTOCOL_TYPE,
                    protocol_name=(st.strategy or "") if st else "", leader=LEADER,
                    skip_assignment=False, member_id=st.member_id if st else req.member_id,
                    members=())

    try:
        topics, strategies = _subscription(req)
    except BadSubscription as e:
        logger.info("JoinGroup of group %s refused: %s", req.group_id, e)
        return answer(INCONSISTENT_GROUP_PROTOCOL)
    group, rebalance_ms = req.group_id, _ms(req.rebalance_timeout)
    hub = ctx.hub()
    coordinator = hub.coordinator
    try:
        hub.check_coordinator(group)
        # Java consumers subscribe to topics that do not exist (yet); Kafka's broker takes
        # them, the coordinator refuses them: join with those that exist, if any (the
        # client rejoins when its metadata shows a new topic)
        topics = await hub.run(ctx.metadata.existing, topics) or topics
        st = await hub.run(lambda: coordinator.join(
            group, topics, member_id=req.member_id or None, client_id=head.client_id or "",
            strategies=strategies, session_timeout_ms=_ms(req.session_timeout),
            rebalance_timeout_ms=rebalance_ms,
            instance_id=getattr(req, "group_instance_id", None) or None))
        st = await _until_assigned(ctx, group, st, rebalance_ms)
    except Exception as e:  # noqa: BLE001 - every failure is an error code
        return answer(failed_code(e, f"JoinGroup of group {group}"))
    return answer(codes.NONE if st.assigned else REBALANCE_IN_PROGRESS, st)


async def _until_assigned(ctx: KafkaContext, group: str, st: MemberState, rebalance_ms: int
                          ) -> MemberState:
    """The member's state once its generation is complete (or the rebalance timeout
    passed). Each look is a heartbeat: the member is waiting on its connection."""
    hub = ctx.hub()
    waiters = ctx.join_waiters()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + rebalance_ms / 1000 + RECHECK_S
    while not st.assigned and loop.time() < deadline:
        fut = waiters.register(group)  # before looking: a change in between wakes it
        try:
            st = await hub.run(hub.coordinator.heartbeat, group, st.member_id, st.generation)
            if not st.assigned:
                await asyncio.wait({fut}, timeout=max(0, min(RECHECK_S, deadline - loop.time())))
        finally:
            waiters.forget(group, fut)
    return st


async def _member_state(ctx: KafkaContext, group: str, member_id: str, generation: int,
                        instance_id: str | None = None) -> MemberState:
    """A heartbeat on the coordinator; raises what it raises, NotCoordinator, or
    FencedInstanceId (a newer member has the static member's instance id)."""
    hub = ctx.hub()
    hub.check_coordinator(group)
    await hub.run(hub.coordinator.check_instance, group, member_id, instance_id)
    return await hub.run(hub.coordinator.heartbeat, group, member_id, generation)


async def sync_group(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """The member's partitions of its generation (any assignments sent are ignored:
    the coordinator assigned them)."""
    mod = response_module(API_SYNC_GROUP, head.api_version)
    code, assignment, strategy = codes.NONE, b"", ""
    try:
        st = await _member_state(ctx, req.group_id, req.member_id, req.generation_id,
                                 getattr(req, "group_instance_id", None))
        if not st.assigned:
            code = REBALANCE_IN_PROGRESS
        elif st.generation != req.generation_id:
            code = ILLEGAL_GENERATION
        else:
            assignment, strategy = encode_assignment(st.assignment), st.strategy or ""
    except Exception as e:  # noqa: BLE001 - every failure is an error code
        code = failed_code(e, f"SyncGroup of group {req.group_id}")
    return make(mod.SyncGroupResponse, throttle_time=ZERO, error_code=error(code),
                protocol_type=PROTOCOL_TYPE, protocol_name=strategy, assignment=assignment)


async def heartbeat(ctx: KafkaContext, head: Header, req: Any) -> Any:
    mod = response_module(API_HEARTBEAT, head.api_version)
    try:
        st = await _member_state(ctx, req.group_id, req.member_id, req.generation_id,
                                 getattr(req, "group_instance_id", None))
        code = ILLEGAL_GENERATION if st.generation != req.generation_id \
            else REBALANCE_IN_PROGRESS if st.rebalance or not st.assigned else codes.NONE
    except Exception as e:  # noqa: BLE001 - every failure is an error code
        code = failed_code(e, f"Heartbeat of group {req.group_id}")
    return make(mod.HeartbeatResponse, throttle_time=ZERO, error_code=error(code))


async def leave_group(ctx: KafkaContext, head: Header, req: Any) -> Any:
    """v0-2 one member; v3+ a list, each answered with its own error code."""
    mod = response_module(API_LEAVE_GROUP, head.api_version)
    many = hasattr(req, "members")
    ids = [(m.member_id, m.group_instance_id) for m in req.members] if many \
        else [(req.member_id, None)]
    hub = ctx.hub()
    results = []
    for member_id, instance in ids:
        try:
            hub.check_coordinator(req.group_id)
            await hub.run(static.leave, hub.coordinator.table, hub.coordinator.leave,
                          req.group_id, member_id, instance)
            results.append((member_id, instance, codes.NONE))
        except Exception as e:  # noqa: BLE001 - every failure is an error code
            results.append((member_id, instance, failed_code(e, f"LeaveGroup of {req.group_id}")))
    if not many:
        return make(mod.LeaveGroupResponse, throttle_time=ZERO, error_code=error(results[0][2]))
    return make(mod.LeaveGroupResponse, throttle_time=ZERO, error_code=error(codes.NONE),
                members=tuple(make(mod.MemberResponse, member_id=m, group_instance_id=i,
                                   error_code=error(c)) for m, i, c in results))


#: api key -> (min version, max version) of the group APIs (Kafka 4.0's floors)
OFFERED: dict[int, tuple[int, int]] = {
    API_OFFSET_COMMIT: (2, 9),
    API_OFFSET_FETCH: (1, 9),
    API_FIND_COORDINATOR: (0, 4),
    API_JOIN_GROUP: (2, 9),
    API_HEARTBEAT: (0, 4),
    API_LEAVE_GROUP: (0, 5),
    API_SYNC_GROUP: (0, 5),
    API_DESCRIBE_GROUPS: (0, 5),
    API_LIST_GROUPS: (0, 5),
    **groups_consumer.OFFERED,
    **groups_delete.OFFERED,
}

HANDLERS = {
    API_OFFSET_COMMIT: groups_offsets.offset_commit,
    API_OFFSET_FETCH: groups_offsets.offset_fetch,
    API_FIND_COORDINATOR: find_coordinator,
    API_JOIN_GROUP: join_group,
    API_HEARTBEAT: heartbeat,
    API_LEAVE_GROUP: leave_group,
    API_SYNC_GROUP: sync_group,
    API_DESCRIBE_GROUPS: groups_offsets.describe_groups,
    API_LIST_GROUPS: groups_offsets.list_groups,
    **groups_consumer.HANDLERS,
    **groups_delete.HANDLERS,
}
