"""Consumer groups: membership, generations, partition assignment, committed offsets.

The :class:`GroupCoordinator` is plain logic with an injected clock
(``now_ms``); the gateway's HTTP routes (``ingest_gateway.http.group_routes``) and
in-process consumers (``ingest_gateway.client``) call it. One coordinator owns a store's groups:
it is the only writer of their offset documents.

**Membership and generations** (Kafka's eager rebalance protocol with the
assignment computed by the coordinator, as in KIP-848):

* ``join`` adds a member (a fresh ``member_id``) with its subscription,
  ``session_timeout_ms`` and ``rebalance_timeout_ms``. The first member of an
  empty group completes a generation at once.
* A change of membership (join, ``leave``, a member whose heartbeats stop for
  its session timeout, a changed subscription) starts a rebalance: the group
  is *preparing* and every heartbeat answers ``rebalance=True``. Each member
  then revokes its partitions (committing first: commits of the current
  generation are still accepted while preparing) and calls ``join`` again with
  its ``member_id``. When every member has rejoined, or the rebalance timeout
  passes (members that did not rejoin are removed), the generation id is
  incremented and partitions are assigned. So a partition is never given to a
  new owner before its old owner had the chance to commit.
* Assignment strategies: ``range`` (per topic, contiguous ranges, Kafka's
  RangeAssignor), ``roundrobin`` (all partitions dealt in turn),
  ``sticky`` (keeps previous owners where the balance allows) and
  ``cooperative-sticky``: sticky, and incremental (KIP-429) — members keep
  their partitions while rejoining; a partition that moves is first withheld
  (its old owner sees it gone, commits and revokes only that one), and a
  follow-up rebalance, started at once, gives it to its new owner. The group uses
  the first strategy of its oldest member that every member supports. Members
  beyond the partition count get nothing and sit idle.

**Commits** carry ``member_id`` and ``generation``: an unknown member, a
stale generation, or a partition the member does not own in that generation
are refused with :class:`UnknownMemberId`, :class:`IllegalGeneration` or
:class:`PartitionNotAssigned` (a zombie cannot overwrite its successor's
progress). A consumer without a group membership (``assign()`` mode) commits
with ``member_id=None`` and is accepted only while the group has no members.

**Committed offsets** are the next offset to read (Kafka's meaning) and live in
the store, one document per group (format: ``log_layout.group_offsets``), with
the generation (so ids never repeat), the strategy and the members of the
generation: written on each commit, each completed generation and each member
that leaves or expires. Lag per partition = high watermark − committed offset.

**Which gateway coordinates**: see ``table`` (a slot of the broker application takes a
group over from its document, members included; a standalone gateway's restart forgets
members). **KIP-848 members** (``group.protocol=consumer``): ``epochs`` and ``consumer``.
**Static members** (``group.instance.id``, KIP-345): see ``static``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

from ingest_gateway.protocol.groups import (COOPERATIVE, STRATEGIES, MemberState,
                                            TopicPartition, validate_group_id)
from ingest_gateway.errors import (
    GroupFieldTooLong, IllegalGeneration, InconsistentGroupProtocol, InvalidSessionTimeout,
    NotCoordinator, PartitionNotAssigned, RebalanceInProgress, UnknownGroup, UnknownMemberId)
from ingest_gateway.server.groups import assignors, epochs, static
from ingest_gateway.server.groups.state import (
    CONSUMER, DEFAULT_REBALANCE_TIMEOUT_MS, DEFAULT_SESSION_TIMEOUT_MS, MAX_METADATA_CHARS,
    MAX_TIMEOUT_MS, MIN_SESSION_TIMEOUT_MS, Group, GroupDescription, Member, check_client_id,
    check_epoch, check_rebalance_timeout)
from ingest_gateway.protocol.group_offsets import checked_offsets
from ingest_gateway.server.groups.store import partition_counts, partition_lags
from ingest_gateway.server.groups.table import Cluster, GroupTable
from log_layout import Log, wall_clock_ms

logger = logging.getLogger("sparklog.groups")


class GroupCoordinator:
    """All consumer groups of one store. Thread-safe.

    ``now_ms`` is the clock (tests pass their own). Session expiry is checked
    lazily on every call and by :meth:`expire` (the gateway calls it
    periodically so a silent group still rebalances).

    **Memory holds only live groups.** A group is kept in memory while it has
    members or an operation on it is under way; once empty it is dropped, since
    everything worth keeping (offsets, generation, strategy) is in its store
    document by then. Lookups (heartbeat, leave, state, committed, describe)
    never add a group without members: otherwise every unknown name asked about
    would stay in memory for good (50,000 lookups held 40 MB). (With
    ``load_members`` a member's call loads a group whose document names members:
    it is live, taken over.) :meth:`groups_in_memory` counts what is held.

    Session timeouts a client gives are bounded by ``min_session_timeout_ms`` ..
    ``max_session_timeout_ms`` (the gateway passes group.min/max.session.timeout.ms).
    ``cluster`` (the gateway's cluster membership; None: standalone) and
    ``load_members`` decide which groups it may hold (see ``table``): every call that
    changes a group raises NotCoordinator when another gateway coordinates it.
    """

    def __init__(self, log: Log, *, now_ms: Callable[[], int] = wall_clock_ms,
                 default_session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 min_session_timeout_ms: int = MIN_SESSION_TIMEOUT_MS,
                 max_session_timeout_ms: int = MAX_TIMEOUT_MS,
                 cluster: Cluster | None = None, load_members: bool = False,
                 consumer_assignors: Sequence[str] = epochs.ASSIGNORS):
        self.log = log
        #: group.consumer.assignors: the server assignors of KIP-848 groups, the default first
        self.consumer_assignors = tuple(consumer_assignors)
        self.now_ms = now_ms
        self.default_session_timeout_ms = default_session_timeout_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        #: called with a group's name after its membership or assignment changed (on the
        #: thread that changed it): the gateway appends what wakes its long-polls
        self.change_listeners: list[Callable[[str], None]] = []
        #: called with the group name when a generation completes (the gateway's metrics)
        self.on_rebalance: Callable[[str], None] | None = None
        self.table = GroupTable(log, now_ms, cluster=cluster, load_members=load_members)
        self._lock = self.table.lock

    # -- lookup ---------------------------------------------------------------
    def groups_in_memory(self) -> int:
        """How many groups the coordinator holds in memory (live ones, or under way)."""
        with self._lock:
            return len(self.table.groups)

    def live_groups(self) -> list[str]:
        """The groups held in memory (the ones this gateway coordinates and has members)."""
        with self._lock:
            return sorted(self.table.groups)

    def retain(self) -> list[str]:
        """Drop the groups this gateway no longer coordinates (the gateway calls it after
        each new assignment); returns their names."""
        return self.table.retain()

    def _member(self, g: Group, member_id: object) -> Member:
        m = g.members.get(member_id) if isinstance(member_id, str) else None
        if m is None:
            raise UnknownMemberId(g.name, member_id)
        return m

    # -- membership -------------------------------------------------------------
    def check_session_timeout(self, group: str, session: object) -> None:
        """Raises InvalidSessionTimeout unless ``session`` is an int within the bounds."""
        lo, hi = self.min_session_timeout_ms, self.max_session_timeout_ms
        if isinstance(session, bool) or not isinstance(session, int) or not lo <= session <= hi:
            raise InvalidSessionTimeout(group, session, lo, hi)

    def _check_join(self, group: str, client_id: object, session: object,
                    rebalance_timeout_ms: object) -> None:
        """Raises GroupFieldTooLong, InvalidSessionTimeout or ValueError."""
        check_client_id(group, client_id)
        self.check_session_timeout(group, session)
        check_rebalance_timeout(rebalance_timeout_ms)

    def join(self, group: str, topics: Iterable[str], *, member_id: str | None = None,
             client_id: str = "", strategies: Sequence[str] = ("range",),
             session_timeout_ms: int | None = None,
             rebalance_timeout_ms: int = DEFAULT_REBALANCE_TIMEOUT_MS,
             instance_id: str | None = None) -> MemberState:
        """Join (``member_id=None``) or rejoin after a rebalance signal; a static member
        (``instance_id``) may take an old member's place (see ``static``).

        Raises InvalidGroupId, UnknownTopic (subscribed topics must exist),
        UnknownMemberId (a rejoin of a removed member), InconsistentGroupProtocol,
        InvalidSessionTimeout (outside the coordinator's bounds), GroupFieldTooLong
        (client_id over MAX_CLIENT_ID_CHARS), FencedInstanceId, or ValueError for other
        bad timeouts or strategies.
        """
        validate_group_id(group)
        topics = frozenset(topics)
        if not topics:
            raise ValueError("a group member must subscribe to at least one topic")
        for t in topics:
            self.log.topic(t)  # UnknownTopic / InvalidTopicName
        strategies = tuple(strategies)
        bad = [s for s in strategies if s not in STRATEGIES]
        if not strategies or bad:
            raise ValueError(f"unknown partition.assignment.strategy {bad or strategies!r}: "
                             f"use {', '.join(STRATEGIES)}")
        session = self.default_session_timeout_ms if session_timeout_ms is None \
            else session_timeout_ms
        self._check_join(group, client_id, session, rebalance_timeout_ms)
        with self._lock:
            g = self.table.live(group, member_id) if member_id is not None \
                else self.table.load(group)
            try:
                now = self.now_ms()
                self.tick(g, now)
                old = static.find(g, instance_id) if member_id is None else None
                if member_id is None and old is None:
                    self._check_protocol(g, strategies)
                    member_id = f"{client_id or 'consumer'}-{uuid.uuid4().hex[:12]}"
                    m = g.members[member_id] = Member(member_id, client_id, topics, strategies,
                                                      session, rebalance_timeout_ms, now, -1,
                                                      instance_id=instance_id)
                    logger.info("group %s: member %s joined, rebalancing", group, member_id)
                    self._start_rebalance(g, now)
                else:
                    if old is not None:  # a static member back: no rebalance unless changed
                        member_id = f"{client_id or 'consumer'}-{uuid.uuid4().hex[:12]}"
                        static.replace(g, old, member_id, client_id, now, self.table)
                    static.check(g, member_id, instance_id)
                    m = self._member(g, member_id)
                    m.last_heartbeat_ms = now
                    if m.topics != topics or m.strategies != strategies:
                        self._check_protocol(g, strategies, ignore=member_id)
                        m.topics, m.strategies = topics, strategies
                        self._start_rebalance(g, now)
                    m.session_timeout_ms, m.rebalance_timeout_ms = session, rebalance_timeout_ms
                if g.preparing:
                    m.joined_generation = g.generation + 1
                    if not self._cooperative(g, m):
                        m.assignment = ()  # rejoining = revoked everything (eager protocol)
                    self._maybe_complete(g, now)
                return self._state(g, m)
            finally:
                self.table.release(g)

    def heartbeat(self, group: str, member_id: str, generation: int) -> MemberState:
        """Keep a member alive; the answer says whether to rejoin and what it owns.

        A member that rejoined and waits for the others gets ``assigned=False``
        until the generation completes. Raises InvalidGroupId, UnknownMemberId (the
        member was removed: join again) or IllegalGeneration (a generation the group
        never had).
        """
        with self._lock:
            g = self.table.live(group, member_id)
            try:
                now = self.now_ms()
                self.tick(g, now)
                m = self._member(g, member_id)
                m.last_heartbeat_ms = now
                # Every member still here rejoined for the current generation (the others
                # were removed), so an older generation only means it has not heard of
                # the newest yet: answer with it. A generation from the future is a bug.
                if generation > max(g.generation, m.joined_generation):
                    raise IllegalGeneration(group, member_id, generation, g.generation)
                return self._state(g, m)
            finally:
                self.table.release(g)

    def leave(self, group: str, member_id: str) -> None:
        """Remove a member at once (a clean close); its partitions are rebalanced.

        Raises InvalidGroupId, or UnknownMemberId if it is no longer a member.
        """
        with self._lock:
            g = self.table.live(group, member_id)
            try:
                now = self.now_ms()
                self.tick(g, now)
                self._member(g, member_id)
                self.remove(g, [member_id], now)
            finally:
                self.table.release(g)

    def check_instance(self, group: str, member_id: str, instance_id: str | None) -> None:
        """Raises FencedInstanceId if a newer member took ``instance_id`` (see ``static``)."""
        with self._lock:
            static.check(self.table.groups.get(group), member_id, instance_id)

    def expire(self) -> list[tuple[str, str]]:
        """Remove members whose session timed out in every group (and groups left
        empty); returns (group, member) of those removed."""
        out: list[tuple[str, str]] = []
        with self._lock:
            now = self.now_ms()
            for g in list(self.table.groups.values()):
                try:
                    out.extend((g.name, m) for m in self.tick(g, now))
                except NotCoordinator:
                    continue  # moved away: dropped, its members go to the new coordinator
                self.table.release(g)
        return out

    def state(self, group: str, member_id: str) -> MemberState:
        """A member's current state without counting as a heartbeat.

        Raises InvalidGroupId or UnknownMemberId."""
        with self._lock:
            g = self.table.live(group, member_id)
            try:
                self.tick(g, self.now_ms())
                return self._state(g, self._member(g, member_id))
            finally:
                self.table.release(g)

    # -- internals of membership ---------------------------------------------------
    def _check_protocol(self, g: Group, offered: Sequence[str], ignore: str | None = None) -> None:
        others = [m for mid, m in g.members.items() if mid != ignore]
        if others and not self._common_strategy(others + [None], offered):
            raise InconsistentGroupProtocol(g.name, offered, others[0].strategies)

    @staticmethod
    def _common_strategy(members: Sequence[Member | None], extra: Sequence[str] = ()) -> str | None:
        """The oldest member's first strategy that every member supports (None stands
        for a joining member offering ``extra``)."""
        return assignors.common_strategy(
            [m.strategies if m is not None else tuple(extra) for m in members])

    def rebalance(self, g: Group, now: int) -> None:
        """Start a rebalance of ``g`` (under the lock) and complete it if every member is
        ready (at once when no classic member has to rejoin)."""
        self._start_rebalance(g, now)
        self._maybe_complete(g, now)

    def tick(self, g: Group, now: int) -> list[str]:
        """Expire silent members and end an overdue rebalance; returns removed ids."""
        gone = [mid for mid, m in g.members.items()
                if now - m.last_heartbeat_ms >= m.session_timeout_ms]
        gone += [mid for mid in epochs.overdue(g, now) if mid not in gone]
        if g.preparing and now >= g.rebalance_deadline_ms:
            gone += [mid for mid, m in g.members.items()
                     if not epochs.ready(g, m) and mid not in gone]
        if gone:
            self.remove(g, gone, now)
        elif g.preparing:
            self._maybe_complete(g, now)
        return gone

    def remove(self, g: Group, member_ids: Sequence[str], now: int) -> None:
        """Remove members and write the group's document (raises NotCoordinator if
        this gateway no longer coordinates the group)."""
        for mid in member_ids:
            g.members.pop(mid, None)
        logger.info("group %s: left or expired: %s", g.name, ", ".join(member_ids))
        generation = g.generation
        if g.members:
            self._start_rebalance(g, now)
            self._maybe_complete(g, now)
        else:
            g.preparing = False
            self.notify(g)
        if g.generation == generation:  # else the completed generation was just written
            # so a coordinator taking the group over does not wait for members that left
            self.table.write(g, *g.snapshot_doc())

    def _start_rebalance(self, g: Group, now: int) -> None:
        if not g.preparing:
            g.preparing = True
            g.rebalance_deadline_ms = now + max(m.rebalance_timeout_ms for m in g.members.values())
        self.notify(g)

    def _maybe_complete(self, g: Group, now: int) -> None:
        target = g.generation + 1
        if not g.preparing or not all(epochs.ready(g, m) for m in g.members.values()):
            return
        # the last plan's owners still here (eager members hold nothing while rejoining)
        previous = {tp: m for tp, m in g.last_owners.items() if m in g.members}
        members = sorted(g.members.values(), key=lambda m: (m.joined_generation, m.member_id))
        g.topic_counts = counts = partition_counts(self.log, set().union(*(m.topics
                                                                          for m in members)))
        # cooperative and KIP-848: what moves is withheld now, handed over by the
        # rebalance started below (or, from a KIP-848 member, when it has revoked it)
        strategy = epochs.preferred_assignor(members, self.consumer_assignors) \
            if epochs.mixed(g) else self._common_strategy(members) or "range"
        again = epochs.plan_generation(g, members, strategy, counts, previous, now)
        # Persist the generation so ids never repeat after a restart (a zombie of
        # generation N must not match a new generation N).
        self.table.write(g, *g.snapshot_doc())
        logger.info("group %s: rebalanced to generation %d (%s, %d member%s)", g.name, target,
                    strategy, len(members), "s" * (len(members) != 1))
        if self.on_rebalance is not None:
            self.on_rebalance(g.name)
        if again:
            self._start_rebalance(g, now)
        self.notify(g)

    def _cooperative(self, g: Group, m: Member | None = None) -> bool:
        strategy = self._common_strategy(list(g.members.values()))
        return epochs.cooperative(g, m, strategy) if m is not None else strategy == COOPERATIVE

    def _state(self, g: Group, m: Member) -> MemberState:
        waiting = g.preparing and m.joined_generation == g.generation + 1
        hb = max(1, m.session_timeout_ms // 3)
        # beside KIP-848 members each classic member is told its own first strategy
        strategy = m.strategies[0] if epochs.mixed(g) and m.strategies else g.strategy
        return MemberState(g.name, m.member_id, g.generation, g.preparing and not waiting,
                           () if waiting else m.assignment, not waiting, strategy, hb)

    def notify(self, g: Group) -> None:
        for listener in self.change_listeners:
            listener(g.name)

    # -- offsets ---------------------------------------------------------------------
    def commit(self, group: str, offsets: Mapping[TopicPartition, int], *,
               member_id: str | None = None, generation: int = -1,
               metadata: str = "") -> None:
        """Commit next-offsets-to-read for partitions, durably, all or nothing.

        Raises InvalidGroupId, UnknownMemberId, IllegalGeneration,
        PartitionNotAssigned (see the module docstring), RebalanceInProgress (a
        member that already rejoined no longer owns anything),
        UnknownTopic/UnknownPartition, InvalidCommitOffset (not an integer,
        negative, or past the high watermark) or GroupFieldTooLong (metadata over
        MAX_METADATA_CHARS).
        """
        validate_group_id(group)
        if not isinstance(metadata, str):
            raise ValueError(f"commit metadata must be a string, not {metadata!r}")
        if len(metadata) > MAX_METADATA_CHARS:
            raise GroupFieldTooLong(group, "metadata", len(metadata), MAX_METADATA_CHARS)
        with self._lock:
            if member_id is None:
                g = self.table.load(group)  # a member-less commit may be a group's first
            else:
                g = self.table.live(group, member_id)
            g.busy += 1  # keeps g in memory while the lock is let go below
        try:
            with self._lock:
                now = self.now_ms()
                self._check_committer(g, offsets, member_id, generation, now)
            checked = checked_offsets(self.log, group, offsets)
            with self._lock:
                # Re-check: a rebalance may have completed while we looked at high
                # watermarks outside the lock.
                if member_id is not None:
                    check_epoch(g, self._member(g, member_id), generation)
                elif g.members:
                    raise UnknownMemberId(group, member_id)
                for (topic, partition), offset in checked.items():
                    g.offsets.setdefault(topic, {})[partition] = {
                        "offset": offset, "metadata": metadata, "commit_ms": now}
                seq, doc = g.snapshot_doc()
            self.table.write(g, seq, doc)
        finally:
            with self._lock:
                g.busy -= 1
                self.table.release(g)

    def _check_committer(self, g: Group, offsets: Mapping[TopicPartition, int],
                         member_id: str | None, generation: int, now: int) -> None:
        """May this member commit these partitions now? (under the lock; see commit)"""
        self.tick(g, now)
        if member_id is None:
            if g.members:
                raise UnknownMemberId(g.name, member_id)
            return
        m = self._member(g, member_id)
        check_epoch(g, m, generation)
        if m.protocol == CONSUMER:  # Kafka checks a KIP-848 member's epoch, not what it owns
            m.last_heartbeat_ms = now
            return
        cooperative = self._cooperative(g, m)
        if m.joined_generation == g.generation + 1 and g.preparing and not cooperative:
            raise RebalanceInProgress(g.name, g.generation)
        # a cooperative member may still commit what it is giving up
        owned = set(m.assignment) | {tp for tp, o in g.revoking.items() if o == member_id}
        for tp in offsets:
            if tuple(tp) not in owned:
                raise PartitionNotAssigned(g.name, member_id, tp[0], tp[1], generation)
        m.last_heartbeat_ms = now  # a commit shows the member is alive

    def committed(self, group: str, partitions: Iterable[TopicPartition] | None = None,
                  ) -> dict[TopicPartition, int]:
        """Committed offsets of a group (all, or those of ``partitions`` that have one);
        empty for a group nobody committed for. Raises InvalidGroupId."""
        with self._lock:
            g = self.table.peek(group)
            if g is None:
                return {}
            allc = g.committed()
        if partitions is None:
            return allc
        return {tuple(tp): allc[tuple(tp)] for tp in partitions if tuple(tp) in allc}

    # -- describe ----------------------------------------------------------------------
    def groups(self) -> list[str]:
        """Groups with live members here or offsets in the store."""
        with self._lock:
            live = set(self.table.groups)
        return sorted(live | set(self.log.groups()))

    def describe(self, group: str) -> GroupDescription:
        """Members, assignment and lag per partition; raises InvalidGroupId or UnknownGroup.

        Any gateway describes any group: one it does not hold is described from its
        store document (members as last written, ``last_heartbeat_ms`` None)."""
        with self._lock:
            g = self.table.peek(group)
            if g is None:
                raise UnknownGroup(group)
            held = self.table.held(g)  # else a copy read from the store, only looked at
            if held:
                try:
                    self.tick(g, self.now_ms())
                except NotCoordinator:  # moved away (and dropped): what the store has
                    return self.describe(group)
                self.table.release(g)
            owners = g.owners()
            # only the coordinator knows when a member was last heard of
            members = tuple(m.describe(held) for m in sorted(g.members.values(),
                                                             key=lambda m: m.member_id))
            topics = set(g.offsets) | {t for m in g.members.values() for t in m.topics}
            offsets = g.committed()
            state, generation, strategy, kind = g.state, g.generation, g.strategy, g.type
        return GroupDescription(group, state, generation, strategy, members,
                                tuple(partition_lags(self.log, topics, offsets, owners)), kind)
