"""KIP-848's consumer group protocol on the group coordinator: one heartbeat call that
joins, keeps alive, reconciles and leaves (Kafka's ConsumerGroupHeartbeat, whatever
protocol carries it; the Kafka listener's adapter is ``kafka.groups_consumer``).

A member names itself (the client makes its member id) and sends its **member epoch**:
0 to join (with its subscription, rebalance timeout and an empty owned list), -1 to
leave, -2 a static member (``group.instance.id``) leaving for a while: it keeps its
partitions until its session timeout, and a member joining with its instance id takes
its place, partitions and epoch, without a new plan (UnreleasedInstanceId while the old
one has not left), else the epoch the coordinator last gave it. Its subscription, server
assignor and rebalance timeout are sent when they change; its owned partitions when
it has finished a reconciliation (and in full requests). The answer carries its epoch,
the heartbeat interval (``group.consumer.heartbeat.interval.ms``) and its assignment
when that changed (or the request was a full one), as Kafka's coordinator answers.

Membership lives in the coordinator's :class:`~state.Group` beside classic members
(the same generations, committed offsets and store document: a coordinator taking the
group over loads these members, epochs and assignments with the others), and each
heartbeat reconciles the member towards its target (``epochs``). A new member, a
leaving or expired one (``group.consumer.session.timeout.ms``), a changed subscription
or assignor, or a subscribed topic's partition count changing starts a new plan (the
group epoch is the coordinator's generation).

A KIP-848 member may join a group of classic members (Kafka's online upgrade) unless
``group.consumer.migration.policy`` is ``downgrade`` or ``disabled`` (NotConsumerGroup,
Kafka's GROUP_ID_NOT_FOUND); classic members may always join a consumer group, and a
group whose last KIP-848 member left is a classic group again (as Kafka's downgrade).

Refused as Kafka refuses: an epoch above the member's (FencedMemberEpoch), below it
unless it is the previous one and the owned partitions are within the assignment (a
lost answer), an unknown member (UnknownMemberId), an assignor outside
``group.consumer.assignors`` (UnsupportedAssignor), a first heartbeat without its
subscription, rebalance timeout or empty owned list (ValueError), a regular expression
RE2 does not take (InvalidRegularExpression). A subscription by regular expression
(Kafka 4's SubscribedTopicRegex, RE2 as Kafka's RE2J) subscribes to every topic whose
whole name it matches, looked at again each second (a new topic joins the plan).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ingest_gateway.errors import (FencedMemberEpoch, GroupError, UnknownGroup,
                                   UnknownMemberId, UnsupportedAssignor)
from ingest_gateway.protocol.groups import TopicPartition, validate_group_id
from ingest_gateway.server.groups import epochs, static
from ingest_gateway.server.groups.coordinator import GroupCoordinator
from ingest_gateway.server.groups.state import (CONSUMER, MAX_CLIENT_ID_CHARS, Group, Member,
                                                check_client_id, check_epoch,
                                                check_rebalance_timeout)
from ingest_gateway.server.groups.store import partition_counts

#: the member epoch of a static member leaving for a while (Kafka's LEAVE_GROUP_STATIC_...)
STATIC_LEAVE = -2
#: how often a heartbeat looks whether a subscribed topic's partition count changed
METADATA_CHECK_MS = 1000
#: longest subscription regular expression taken
MAX_REGEX_CHARS = 4096
#: most topics one member may subscribe to (a bound on what a request makes us hold)
MAX_SUBSCRIBED_TOPICS = 10_000


class UnreleasedInstanceId(GroupError):
    """A member joining with the instance id of a static member that has not left
    (Kafka's UNRELEASED_INSTANCE_ID). Here, not in ``errors``: only the Kafka protocol
    raises it, and ``errors`` is at the module size limit."""

    code = "unreleased_instance_id"
    error_code = 111  # kio's ErrorCode.unreleased_instance_id (the server imports no kio)

    def __init__(self, group: str, member_id: str, instance_id: str | None):
        self.group, self.member_id, self.instance_id = group, member_id, instance_id
        super().__init__(f"member {member_id!r} cannot join consumer group {group!r} with "
                         f"instance id {instance_id!r}: another member still has it")


class NotConsumerGroup(UnknownGroup):
    """A KIP-848 member joining a group of classic members while
    group.consumer.migration.policy forbids the upgrade (Kafka's GROUP_ID_NOT_FOUND)."""

    def __init__(self, group: str):
        super().__init__(group)
        self.args = (f"Group {group} is not a consumer group.",)


class InvalidRegularExpression(GroupError, ValueError):
    """A subscription's regular expression RE2 does not take (Kafka's
    INVALID_REGULAR_EXPRESSION; here for the reason UnreleasedInstanceId is)."""

    code = "invalid_regular_expression"
    error_code = 128  # kio's ErrorCode.invalid_regular_expression

    def __init__(self, group: str, regex: str, reason: str):
        self.group, self.regex = group, regex
        super().__init__(f"subscription regular expression {regex[:200]!r} of consumer group "
                         f"{group!r} is invalid: {reason}")


def compile_regex(group: str, regex: str):
    """``regex`` compiled by RE2 (linear time whatever the pattern: a client's regular
    expression cannot hold the coordinator, as Kafka's RE2J). Raises
    InvalidRegularExpression (also over MAX_REGEX_CHARS)."""
    import re2

    if len(regex) > MAX_REGEX_CHARS:
        raise InvalidRegularExpression(group, regex, f"over {MAX_REGEX_CHARS} characters")
    options = re2.Options()
    options.log_errors = False  # the refusal says why; no line on stderr per bad pattern
    try:
        return re2.compile(regex, options=options)
    except re2.error as e:
        raise InvalidRegularExpression(group, regex, str(e)) from None


@dataclasses.dataclass(frozen=True)
class Heartbeat:
    """What a member's heartbeat says; None: unchanged since its last one."""

    member_id: str
    member_epoch: int
    client_id: str = ""
    topics: frozenset[str] | None = None
    #: None: unchanged; "": no regular expression (librdkafka sends "" with topic names)
    regex: str | None = None
    assignor: str | None = None
    rebalance_timeout_ms: int | None = None
    owned: frozenset[TopicPartition] | None = None
    instance_id: str | None = None

    @property
    def full(self) -> bool:
        """Kafka's full request: a join, or every optional field sent (after an error)."""
        return self.member_epoch == 0 or (self.rebalance_timeout_ms is not None
                                          and self.topics is not None
                                          and self.owned is not None)


@dataclasses.dataclass(frozen=True)
class Answer:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    #: the partitions it may use now; None: unchanged (Kafka sends none then)
    assignment: tuple[TopicPartition, ...] | None


class ConsumerMembers:
    """KIP-848 members of ``coordinator``'s groups (thread-safe: under its lock)."""

    def __init__(self, coordinator: GroupCoordinator, *, heartbeat_interval_ms: int = 5000,
                 session_timeout_ms: int = 45_000, assignors: Sequence[str] = epochs.ASSIGNORS,
                 upgrade: bool = True):
        self.coordinator = coordinator
        #: group.consumer.migration.policy allows an upgrade: a KIP-848 member may join a
        #: group of classic members (else NotConsumerGroup, Kafka's GROUP_ID_NOT_FOUND)
        self.upgrade = upgrade
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.assignors = tuple(assignors)

    def check(self, group: str, hb: Heartbeat) -> None:
        """Raises InvalidGroupId, UnsupportedAssignor, GroupFieldTooLong or ValueError
        for a heartbeat Kafka would refuse before looking at the group."""
        validate_group_id(group)
        if not hb.member_id or len(hb.member_id) > MAX_CLIENT_ID_CHARS \
                or not hb.member_id.isprintable():
            raise ValueError(f"member id must be 1 to {MAX_CLIENT_ID_CHARS} printable "
                             f"characters, not {hb.member_id[:64]!r}")
        check_client_id(group, hb.client_id)
        if hb.member_epoch < -2:
            raise ValueError(f"member epoch {hb.member_epoch} is invalid")
        if hb.regex:
            compile_regex(group, hb.regex)
        if hb.topics is not None and len(hb.topics) > MAX_SUBSCRIBED_TOPICS:
            raise ValueError(f"{len(hb.topics)} subscribed topics, over {MAX_SUBSCRIBED_TOPICS}")
        if hb.assignor is not None and hb.assignor not in self.assignors:
            raise UnsupportedAssignor(group, (hb.assignor,), self.assignors)
        if hb.rebalance_timeout_ms is not None:
            check_rebalance_timeout(hb.rebalance_timeout_ms)
        if hb.member_epoch == 0:
            if hb.rebalance_timeout_ms is None:
                raise ValueError("RebalanceTimeoutMs must be provided in first request")
            if hb.topics is None and not hb.regex:
                raise ValueError("SubscribedTopicNames or SubscribedTopicRegex must be set "
                                 "in first request")
            if hb.owned is None or hb.owned:
                raise ValueError("TopicPartitions must be empty when (re-)joining")

    def heartbeat(self, group: str, hb: Heartbeat) -> Answer:
        """Join, keep alive, reconcile or leave (module docstring). Raises what
        :meth:`check` raises, NotCoordinator, UnknownMemberId or FencedMemberEpoch."""
        self.check(group, hb)
        c = self.coordinator
        with c.table.lock:
            g = c.table.load(group) if hb.member_epoch == 0 \
                else c.table.live(group, hb.member_id)
            try:
                return self._beat(g, hb, c.now_ms())
            finally:
                c.table.release(g)

    def _beat(self, g: Group, hb: Heartbeat, now: int) -> Answer:
        c = self.coordinator
        c.tick(g, now)
        m = g.members.get(hb.member_id)
        if m is not None and m.protocol != CONSUMER:
            raise UnknownMemberId(g.name, hb.member_id)  # a classic member's id
        if hb.member_epoch == STATIC_LEAVE and m is not None and m.instance_id:
            # a static member away for a while keeps its partitions until its session
            # ends; a member joining with its instance id takes its place (KIP-848)
            m.previous_epoch, m.member_epoch = m.member_epoch, STATIC_LEAVE
            c.table.write(g, *g.snapshot_doc())
            return Answer(m.member_id, STATIC_LEAVE, self.heartbeat_interval_ms, None)
        if hb.member_epoch < 0:
            if m is None:
                raise UnknownMemberId(g.name, hb.member_id)
            c.remove(g, [hb.member_id], now)
            return Answer(hb.member_id, hb.member_epoch, self.heartbeat_interval_ms, None)
        replan = False
        if hb.member_epoch == 0:
            returned = self._static_return(g, hb, now) if m is None else None
            if returned is not None:
                m = returned
            elif m is None:
                if g.members and g.type != CONSUMER and not self.upgrade:
                    raise NotConsumerGroup(g.name)
                m = g.members[hb.member_id] = Member(
                    hb.member_id, hb.client_id, frozenset(), (), self.session_timeout_ms,
                    hb.rebalance_timeout_ms or 0, now, -1, protocol=CONSUMER,
                    instance_id=hb.instance_id)
                replan = True
            if returned is None:  # joining again (fenced, or lost its state): holds nothing
                m.assignment, m.pending_revocation, m.member_epoch = (), (), 0
        elif m is None:
            raise UnknownMemberId(g.name, hb.member_id)
        else:
            self._check_epoch(g, m, hb)
        before = m.assignment
        m.last_heartbeat_ms = now
        replan = self._update(m, hb) or replan or self._topics_changed(g, now)
        if replan:
            c.rebalance(g, now)
        changed = epochs.reconcile(g, m, hb.owned, now)
        if epochs.released(g, m):  # classic members waited for these: they rejoin now
            c.rebalance(g, now)
        if changed or replan:
            c.table.write(g, *g.snapshot_doc())
        if changed:
            c.notify(g)
        sent = m.assignment if hb.full or m.assignment != before else None
        return Answer(m.member_id, m.member_epoch, self.heartbeat_interval_ms, sent)

    def _static_return(self, g: Group, hb: Heartbeat, now: int) -> Member | None:
        """The member that takes the place of a static member with the joining one's
        instance id, away (epoch -2): its partitions, target and epoch (no new plan).
        None if there is none. Raises UnreleasedInstanceId if that member is not away."""
        old = static.find(g, hb.instance_id)
        if old is None or old.protocol != CONSUMER:
            return None
        if old.member_epoch != STATIC_LEAVE:
            raise UnreleasedInstanceId(g.name, hb.member_id, hb.instance_id)
        new = static.replace(g, old, hb.member_id, hb.client_id or old.client_id, now,
                             self.coordinator.table)
        new.member_epoch = old.previous_epoch
        self.coordinator.table.write(g, *g.snapshot_doc())
        return new

    @staticmethod
    def _check_epoch(g: Group, m: Member, hb: Heartbeat) -> None:
        """Kafka's fencing: a greater epoch than the member's, or a smaller one that is
        not the previous epoch with owned partitions within the assignment."""
        epoch = hb.member_epoch
        if epoch > m.member_epoch or (epoch < m.member_epoch and (
                epoch != m.previous_epoch or hb.owned is None
                or not hb.owned <= set(m.assignment))):
            raise FencedMemberEpoch(g.name, m.member_id, epoch, m.member_epoch)

    def _update(self, m: Member, hb: Heartbeat) -> bool:
        """Take what the heartbeat changed; returns whether the group needs a new plan."""
        replan = False
        if hb.regex is not None and (hb.regex or None) != m.regex:  # "": none any more
            m.regex, replan = hb.regex or None, True
            m.topics = self._matching(m.regex) if m.regex else hb.topics or frozenset()
        elif hb.topics is not None and hb.topics != m.topics and m.regex is None:
            m.topics, replan = hb.topics, True
        if hb.assignor is not None and hb.assignor != m.assignor:
            m.assignor, replan = hb.assignor, True
        if hb.rebalance_timeout_ms is not None:
            m.rebalance_timeout_ms = hb.rebalance_timeout_ms
        if hb.client_id:
            m.client_id = hb.client_id
        return replan

    def _topics_changed(self, g: Group, now: int) -> bool:
        """Did a subscribed topic appear, vanish or grow since the last plan? (Looked
        at once a second: it reads topic metadata.)"""
        if now - g.counts_checked_ms < METADATA_CHECK_MS:
            return False
        g.counts_checked_ms = now
        changed = False
        for m in g.members.values():  # a regular expression may match a new topic
            if m.regex is not None:
                matches = self._matching(m.regex)
                changed, m.topics = changed or matches != m.topics, matches
        topics = set().union(*(m.topics for m in g.members.values()))
        return changed or partition_counts(self.coordinator.log, topics) != g.topic_counts

    def _matching(self, regex: str) -> frozenset[str]:
        """The topics whose whole name ``regex`` matches (RE2, as Kafka's RE2J)."""
        pattern = compile_regex("", regex)
        return frozenset(t for t in self.coordinator.log.topics() if pattern.fullmatch(t))

    def topics_of(self, group: str, member_id: str) -> frozenset[str]:
        """The topics a member of a group held in memory subscribes to (empty if none):
        the Kafka adapter resolves the topic ids of owned partitions among them."""
        with self.coordinator.table.lock:
            g = self.coordinator.table.groups.get(group)
            m = g.members.get(member_id) if g is not None else None
            return m.topics if m is not None else frozenset()

    def check_fetch(self, group: str, member_id: str, member_epoch: int) -> None:
        """OffsetFetch v9's check (Kafka's ``validateOffsetFetch``): in a consumer group
        (one with a KIP-848 member) a member's id and epoch must be a member's, at its
        current epoch (a classic member's generation). Raises UnknownMemberId or
        StaleMemberEpoch / IllegalGeneration. Nothing to check for an admin's fetch (no
        member id, epoch -1) nor in a classic group (Kafka checks none there)."""
        if not member_id and member_epoch < 0:
            return
        with self.coordinator.table.lock:
            g = self.coordinator.table.groups.get(group)
            if g is None or g.type != CONSUMER:
                return
            m = g.members.get(member_id)
            if m is None:
                raise UnknownMemberId(group, member_id)
            check_epoch(g, m, member_epoch)

    def is_member(self, group: str, member_id: str) -> bool:
        """Is ``member_id`` a KIP-848 member of a group held in memory? (Kafka takes its
        commits at OffsetCommit v9 and above only.)"""
        with self.coordinator.table.lock:
            g = self.coordinator.table.groups.get(group)
            m = g.members.get(member_id) if g is not None else None
            return m is not None and m.protocol == CONSUMER

    def types(self, names: Sequence[str]) -> dict[str, str]:
        """Kafka's group type of each group (``consumer`` or ``classic``): from memory,
        else from its store document (ListGroups v5 answers it)."""
        c = self.coordinator
        with c.table.lock:
            held = {n: g.type for n, g in c.table.groups.items()}
        out = {}
        for n in names:
            if n not in held:
                doc = c.log.read_group_offsets(n) or {}
                held[n] = CONSUMER if doc.get("type") == CONSUMER else "classic"
            out[n] = held[n]
        return out
