"""Consumer groups: membership, generations, partition assignment, committed offsets.

The :class:`GroupCoordinator` is plain logic with an injected clock
(``now_ms``); the gateway's HTTP routes (``group_routes.py``) and in-process
consumers (``consumer.py``) call it. One coordinator owns a store's groups:
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
the store, one document per group (``Log.write_group_offsets``)::

    {"group": "g", "generation": 7, "strategy": "range",
     "offsets": {"clicks": {"0": {"offset": 42, "metadata": "", "commit_ms": 1763...}}}}

Membership is in memory only (as Kafka keeps it in the coordinator's heap):
after a gateway restart, members get UnknownMemberId and join again, while
every group's offsets — and its generation, so ids never repeat — are read
back from the store. Lag per partition = high watermark − committed offset.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from conf.errors import SparklogError
from conf.topic import TOPIC_NAME_RE
from log_layout import Log, wall_clock_ms

COOPERATIVE = "cooperative-sticky"
STRATEGIES = ("range", "roundrobin", "sticky", COOPERATIVE)
DEFAULT_SESSION_TIMEOUT_MS = 10_000  # gateway.session.timeout.ms
DEFAULT_REBALANCE_TIMEOUT_MS = 60_000
#: the coordinator's own bounds on session.timeout.ms when none are given (tests use tiny
#: timeouts); the gateway passes group.min/max.session.timeout.ms (Kafka: 6000 / 1800000)
MIN_SESSION_TIMEOUT_MS = 1
MAX_TIMEOUT_MS = 2**31 - 1  # Kafka's timeouts are int32 milliseconds
#: longest client_id kept (it is held in memory and becomes part of the member id); Kafka's
#: protocol allows 32767, but 255 (the bound of Kafka's ids elsewhere) is plenty for a name
MAX_CLIENT_ID_CHARS = 255
#: longest commit metadata kept (Kafka's offset.metadata.max.bytes default: 4096)
MAX_METADATA_CHARS = 4096

TopicPartition = tuple[str, int]


# -- errors -------------------------------------------------------------------
class GroupError(SparklogError):
    """Base of the consumer-group errors."""

    code = "group_error"


class InvalidGroupId(GroupError, ValueError):
    code = "invalid_group_id"

    def __init__(self, group: object, reason: str):
        self.group, self.reason = group, reason
        super().__init__(f"invalid consumer group id {group!r}: {reason}")


class UnknownGroup(GroupError, LookupError):
    code = "unknown_group"

    def __init__(self, group: str):
        self.group = group
        super().__init__(f"consumer group {group!r} has no members and no committed offsets")


class UnknownMemberId(GroupError, LookupError):
    """The member left, expired, or was never part of the group (join again)."""

    code = "unknown_member_id"

    def __init__(self, group: str, member_id: object):
        self.group, self.member_id = group, member_id
        super().__init__(f"member {member_id!r} is not in consumer group {group!r} "
                         f"(it left or missed its session timeout): join again")


class IllegalGeneration(GroupError):
    """A request from an older generation than the group's (a zombie after a rebalance)."""

    code = "illegal_generation"

    def __init__(self, group: str, member_id: object, generation: int, current: int):
        self.group, self.member_id = group, member_id
        self.generation, self.current = generation, current
        super().__init__(f"member {member_id!r} of consumer group {group!r} sent generation "
                         f"{generation}, but the group is at generation {current}")


class RebalanceInProgress(GroupError):
    """The group is rebalancing: rejoin before fetching or committing more."""

    code = "rebalance_in_progress"

    def __init__(self, group: str, generation: int):
        self.group, self.generation = group, generation
        super().__init__(f"consumer group {group!r} is rebalancing after generation "
                         f"{generation}: rejoin the group")


class PartitionNotAssigned(GroupError):
    """A commit for a partition the member does not own in its generation."""

    code = "partition_not_assigned"

    def __init__(self, group: str, member_id: object, topic: str, partition: int,
                 generation: int):
        self.group, self.member_id = group, member_id
        self.topic, self.partition, self.generation = topic, partition, generation
        super().__init__(f"member {member_id!r} of consumer group {group!r} does not own "
                         f"{topic}-{partition} in generation {generation}")


class InconsistentGroupProtocol(GroupError):
    code = "inconsistent_group_protocol"

    def __init__(self, group: str, offered: Sequence[str], group_strategies: Sequence[str]):
        self.group, self.offered, self.group_strategies = group, tuple(offered), tuple(group_strategies)
        super().__init__(f"consumer group {group!r} uses assignment strategies "
                         f"{', '.join(group_strategies)}; the joining member supports only "
                         f"{', '.join(offered)}")


class InvalidCommitOffset(GroupError, ValueError):
    code = "invalid_commit_offset"

    def __init__(self, group: str, topic: str, partition: int, offset: object, reason: str):
        self.group, self.topic, self.partition, self.offset = group, topic, partition, offset
        self.reason = reason
        super().__init__(f"cannot commit offset {offset!r} for {topic}-{partition} in consumer "
                         f"group {group!r}: {reason}")


class InvalidSessionTimeout(GroupError, ValueError):
    """A session timeout outside group.min/max.session.timeout.ms (Kafka's
    INVALID_SESSION_TIMEOUT, error 26)."""

    code = "invalid_session_timeout"

    def __init__(self, group: str, value: object, lo: int, hi: int):
        self.group, self.value, self.lo, self.hi = group, value, lo, hi
        super().__init__(f"session.timeout.ms={value!r} for consumer group {group!r} is outside "
                         f"group.min.session.timeout.ms={lo} .. group.max.session.timeout.ms={hi}")


class GroupFieldTooLong(GroupError, ValueError):
    """A client-given string the coordinator would hold (client_id, commit metadata)
    longer than its bound."""

    code = "field_too_long"

    def __init__(self, group: str, name: str, length: int, limit: int):
        self.group, self.name, self.length, self.limit = group, name, length, limit
        super().__init__(f"{name} for consumer group {group!r} has {length} characters, "
                         f"more than {limit}")


def validate_group_id(group: object) -> str:
    """A group id as Kafka allows it in a file name: ``[a-zA-Z0-9._-]{1,249}``."""
    if not isinstance(group, str) or not TOPIC_NAME_RE.match(group) or group in (".", ".."):
        raise InvalidGroupId(group, "use 1 to 249 characters of a-z, A-Z, 0-9, '.', '_', '-'")
    return group


# -- assignment strategies -------------------------------------------------------
def assign_range(members: Mapping[str, frozenset[str]],
                 partitions: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: per topic, members sorted, contiguous ranges,
    the first ``n % m`` members one extra."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic in sorted(partitions):
        subs = sorted(m for m, topics in members.items() if topic in topics)
        if not subs:
            continue
        n = partitions[topic]
        each, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = each + (1 if i < extra else 0)
            out[m].extend((topic, p) for p in range(start, start + count))
            start += count
    return out


def assign_roundrobin(members: Mapping[str, frozenset[str]],
                      partitions: Mapping[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's RoundRobinAssignor: all partitions in order, dealt to the
    subscribed members in turn."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    order = sorted(members)
    if not order:
        return out
    i = 0
    for topic in sorted(partitions):
        for p in range(partitions[topic]):
            for _ in range(len(order)):
                m = order[i % len(order)]
                i += 1
                if topic in members[m]:
                    out[m].append((topic, p))
                    break
    return out


def assign_sticky(members: Mapping[str, frozenset[str]], partitions: Mapping[str, int],
                  previous: Mapping[TopicPartition, str]) -> dict[str, list[TopicPartition]]:
    """Balanced like round-robin, but a partition stays with its previous owner
    unless that owner has more than its share (Kafka's StickyAssignor, simplified)."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    if not members:
        return out
    all_tps = [(t, p) for t in sorted(partitions) for p in range(partitions[t])]
    eligible = {tp: sorted(m for m in members if tp[0] in members[m]) for tp in all_tps}
    todo = []
    for tp in all_tps:
        owner = previous.get(tp)
        if owner in members and tp[0] in members[owner]:
            out[owner].append(tp)
        elif eligible[tp]:
            todo.append(tp)
    # Everyone's fair share: total / members (the first `extra` may hold one more).
    total = sum(1 for tp in all_tps if eligible[tp])
    each, extra = divmod(total, len(members))
    # Take away from members above their share (most loaded first), newest partitions first.
    allowed = {m: each for m in members}
    for m in sorted(members, key=lambda m: (-len(out[m]), m))[:extra]:
        allowed[m] += 1
    for m in members:
        while len(out[m]) > allowed[m]:
            todo.append(out[m].pop())
    for tp in sorted(todo):
        cands = [m for m in eligible[tp]]
        m = min(cands, key=lambda m: (len(out[m]) >= allowed[m], len(out[m]), m))
        out[m].append(tp)
    for m in out:
        out[m].sort()
    return out


# -- the coordinator --------------------------------------------------------------
@dataclasses.dataclass
class Member:
    member_id: str
    client_id: str
    topics: frozenset[str]
    strategies: tuple[str, ...]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_heartbeat_ms: int
    joined_generation: int  # the generation this member joined for (rejoined = current target)
    assignment: tuple[TopicPartition, ...] = ()


@dataclasses.dataclass(frozen=True)
class MemberState:
    """What a member needs to know after join/heartbeat/sync."""

    group: str
    member_id: str
    generation: int
    #: True while the group prepares a rebalance: revoke, commit, then ``join`` again
    rebalance: bool
    #: partitions owned in ``generation`` (empty while waiting for a rebalance to complete)
    assignment: tuple[TopicPartition, ...]
    #: False after this member rejoined and waits for the others
    assigned: bool
    strategy: str | None
    heartbeat_interval_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "member_id": self.member_id, "generation": self.generation,
                "rebalance": self.rebalance, "assigned": self.assigned, "strategy": self.strategy,
                "heartbeat_interval_ms": self.heartbeat_interval_ms,
                "assignment": [{"topic": t, "partition": p} for t, p in self.assignment]}


@dataclasses.dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_start_offset: int
    high_watermark: int
    owner: str | None

    @property
    def lag(self) -> int | None:
        """High watermark − committed offset (None if nothing is committed)."""
        if self.committed is None:
            return None
        return max(0, self.high_watermark - max(self.committed, self.log_start_offset))


@dataclasses.dataclass(frozen=True)
class GroupDescription:
    group: str
    state: str  # Empty | PreparingRebalance | Stable
    generation: int
    strategy: str | None
    members: tuple[dict[str, Any], ...]
    partitions: tuple[PartitionLag, ...]

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "state": self.state, "generation": self.generation,
                "strategy": self.strategy, "members": list(self.members),
                "partitions": [{**dataclasses.asdict(p), "lag": p.lag} for p in self.partitions]}


class _Group:
    def __init__(self, name: str, doc: Mapping[str, Any] | None):
        self.name = name
        doc = doc or {}
        self.generation = int(doc.get("generation", 0))
        self.strategy: str | None = doc.get("strategy")
        # {topic: {partition: {"offset":..,"metadata":..,"commit_ms":..}}}
        self.offsets: dict[str, dict[int, dict[str, Any]]] = {
            t: {int(p): dict(v) for p, v in parts.items()}
            for t, parts in (doc.get("offsets") or {}).items()}
        self.members: dict[str, Member] = {}
        self.preparing = False
        self.rebalance_deadline_ms = 0
        #: cooperative: partitions withheld from their new owner while the old one revokes
        self.revoking: dict[TopicPartition, str] = {}
        self.last_owners: dict[TopicPartition, str] = {}
        self.write_lock = threading.Lock()
        self.doc_seq = 0  # documents built (under the coordinator lock)
        #: operations under way that let go of the coordinator lock midway (a commit
        #: writing to the store): the group stays in memory until they end
        self.busy = 0
        self.written_seq = 0  # the newest one written (under write_lock)

    @property
    def state(self) -> str:
        if self.preparing:
            return "PreparingRebalance"
        return "Stable" if self.members else "Empty"

    def owners(self) -> dict[TopicPartition, str]:
        return {tp: m.member_id for m in self.members.values() for tp in m.assignment}

    def snapshot_doc(self) -> tuple[int, dict[str, Any]]:
        self.doc_seq += 1
        return self.doc_seq, self.doc()

    def doc(self) -> dict[str, Any]:
        return {"group": self.name, "generation": self.generation, "strategy": self.strategy,
                "offsets": {t: {str(p): v for p, v in sorted(parts.items())}
                            for t, parts in sorted(self.offsets.items())}}


class GroupCoordinator:
    """All consumer groups of one store. Thread-safe.

    ``now_ms`` is the clock (tests pass their own). Session expiry is checked
    lazily on every call and by :meth:`expire` (the gateway calls it
    periodically so a silent group still rebalances).

    **Memory holds only live groups.** A group is kept in memory while it has
    members or an operation on it is under way; once empty it is dropped, since
    everything worth keeping (offsets, generation, strategy) is in its store
    document by then. Lookups (heartbeat, leave, state, committed, describe)
    never add a group: otherwise every unknown name asked about would stay in
    memory for good (50,000 lookups held 40 MB). :meth:`groups_in_memory`
    counts what is held.

    Session timeouts a client gives are bounded by ``min_session_timeout_ms`` ..
    ``max_session_timeout_ms`` (the gateway passes group.min/max.session.timeout.ms).
    """

    def __init__(self, log: Log, *, now_ms: Callable[[], int] = wall_clock_ms,
                 default_session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 min_session_timeout_ms: int = MIN_SESSION_TIMEOUT_MS,
                 max_session_timeout_ms: int = MAX_TIMEOUT_MS,
                 on_change: Callable[[str], None] | None = None):
        self.log = log
        self.now_ms = now_ms
        self.default_session_timeout_ms = default_session_timeout_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        #: called with the group name after membership or assignment changed
        #: (the gateway wakes long-polling members with it)
        self.on_change = on_change
        self._groups: dict[str, _Group] = {}
        self._lock = threading.RLock()

    # -- lookup ---------------------------------------------------------------
    def _group(self, group: str) -> _Group:
        """The group in memory, loaded from the store (or new) if it is not there yet.

        Only operations that change a group call this, and every one of them ends
        with :meth:`_release`. Raises InvalidGroupId.
        """
        validate_group_id(group)
        g = self._groups.get(group)
        if g is None:
            g = self._groups[group] = _Group(group, self.log.read_group_offsets(group))
        return g

    def _peek(self, group: str) -> _Group | None:
        """For lookups: the group in memory, else a copy read from the store that is
        not kept (None if the store has none). Raises InvalidGroupId."""
        validate_group_id(group)
        g = self._groups.get(group)
        if g is not None:
            return g
        doc = self.log.read_group_offsets(group)
        return None if doc is None else _Group(group, doc)

    def _live(self, group: str, member_id: object) -> _Group:
        """The group in memory, for calls of a member; a group that is not in memory
        has no members. Raises InvalidGroupId or UnknownMemberId."""
        validate_group_id(group)
        g = self._groups.get(group)
        if g is None:
            raise UnknownMemberId(group, member_id)
        return g

    def _release(self, g: _Group) -> None:
        """Drop ``g`` from memory if nothing there is worth keeping: no members, no
        rebalance, no operation under way (all its documents are then written)."""
        if (not g.members and not g.preparing and g.busy == 0
                and self._groups.get(g.name) is g):
            del self._groups[g.name]

    def groups_in_memory(self) -> int:
        """How many groups the coordinator holds in memory (live ones, or under way)."""
        with self._lock:
            return len(self._groups)

    def _member(self, g: _Group, member_id: object) -> Member:
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
        if not isinstance(client_id, str):
            raise ValueError(f"client_id must be a string, not {client_id!r}")
        if len(client_id) > MAX_CLIENT_ID_CHARS:
            raise GroupFieldTooLong(group, "client_id", len(client_id), MAX_CLIENT_ID_CHARS)
        if not client_id.isprintable():
            # it becomes part of the member id, which is logged and put in URLs
            raise ValueError(f"client_id must be printable text (no control characters), "
                             f"not {client_id[:64]!r}")
        self.check_session_timeout(group, session)
        v = rebalance_timeout_ms
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TIMEOUT_MS:
            raise ValueError(f"rebalance.timeout.ms must be an integer of milliseconds from 1 "
                             f"to {MAX_TIMEOUT_MS}, not {v!r}")

    def join(self, group: str, topics: Iterable[str], *, member_id: str | None = None,
             client_id: str = "", strategies: Sequence[str] = ("range",),
             session_timeout_ms: int | None = None,
             rebalance_timeout_ms: int = DEFAULT_REBALANCE_TIMEOUT_MS) -> MemberState:
        """Join (``member_id=None``) or rejoin after a rebalance signal.

        Raises InvalidGroupId, UnknownTopic (subscribed topics must exist),
        UnknownMemberId (a rejoin of a removed member), InconsistentGroupProtocol,
        InvalidSessionTimeout (outside the coordinator's bounds), GroupFieldTooLong
        (client_id over MAX_CLIENT_ID_CHARS) or ValueError for other bad timeouts
        or strategies.
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
            g = self._live(group, member_id) if member_id is not None else self._group(group)
            try:
                now = self.now_ms()
                self._tick(g, now)
                if member_id is None:
                    self._check_protocol(g, strategies)
                    member_id = f"{client_id or 'consumer'}-{uuid.uuid4().hex[:12]}"
                    m = g.members[member_id] = Member(member_id, client_id, topics, strategies,
                                                      session, rebalance_timeout_ms, now, -1)
                    self._start_rebalance(g, now)
                else:
                    m = self._member(g, member_id)
                    m.last_heartbeat_ms = now
                    if m.topics != topics or m.strategies != strategies:
                        self._check_protocol(g, strategies, ignore=member_id)
                        m.topics, m.strategies = topics, strategies
                        self._start_rebalance(g, now)
                    m.session_timeout_ms, m.rebalance_timeout_ms = session, rebalance_timeout_ms
                if g.preparing:
                    m.joined_generation = g.generation + 1
                    if not self._cooperative(g):
                        m.assignment = ()  # rejoining = revoked everything (eager protocol)
                    self._maybe_complete(g, now)
                return self._state(g, m)
            finally:
                self._release(g)

    def heartbeat(self, group: str, member_id: str, generation: int) -> MemberState:
        """Keep a member alive; the answer says whether to rejoin and what it owns.

        A member that rejoined and waits for the others gets ``assigned=False``
        until the generation completes. Raises InvalidGroupId, UnknownMemberId (the
        member was removed: join again) or IllegalGeneration (a generation the group
        never had).
        """
        with self._lock:
            g = self._live(group, member_id)
            try:
                now = self.now_ms()
                self._tick(g, now)
                m = self._member(g, member_id)
                m.last_heartbeat_ms = now
                # Every member still here rejoined for the current generation (the others
                # were removed), so an older generation only means it has not heard of
                # the newest yet: answer with it. A generation from the future is a bug.
                if generation > max(g.generation, m.joined_generation):
                    raise IllegalGeneration(group, member_id, generation, g.generation)
                return self._state(g, m)
            finally:
                self._release(g)

    def leave(self, group: str, member_id: str) -> None:
        """Remove a member at once (a clean close); its partitions are rebalanced.

        Raises InvalidGroupId, or UnknownMemberId if it is no longer a member.
        """
        with self._lock:
            g = self._live(group, member_id)
            try:
                now = self.now_ms()
                self._tick(g, now)
                self._member(g, member_id)
                self._remove(g, [member_id], now)
            finally:
                self._release(g)

    def expire(self) -> list[tuple[str, str]]:
        """Remove members whose session timed out in every group (and groups left
        empty); returns (group, member) of those removed."""
        out: list[tuple[str, str]] = []
        with self._lock:
            now = self.now_ms()
            for g in list(self._groups.values()):
                out.extend((g.name, m) for m in self._tick(g, now))
                self._release(g)
        return out

    def state(self, group: str, member_id: str) -> MemberState:
        """A member's current state without counting as a heartbeat.

        Raises InvalidGroupId or UnknownMemberId."""
        with self._lock:
            g = self._live(group, member_id)
            try:
                self._tick(g, self.now_ms())
                return self._state(g, self._member(g, member_id))
            finally:
                self._release(g)

    # -- internals of membership ---------------------------------------------------
    def _check_protocol(self, g: _Group, offered: Sequence[str], ignore: str | None = None) -> None:
        others = [m for mid, m in g.members.items() if mid != ignore]
        if others and not self._common_strategy(others + [None], offered):
            raise InconsistentGroupProtocol(g.name, offered, others[0].strategies)

    @staticmethod
    def _common_strategy(members: Sequence[Member | None], extra: Sequence[str] = ()) -> str | None:
        """The oldest member's first strategy that every member supports."""
        lists = [m.strategies if m is not None else tuple(extra) for m in members]
        lists = [lst for lst in lists if lst]
        if not lists:
            return None
        for s in lists[0]:
            if all(s in lst for lst in lists):
                return s
        return None

    def _tick(self, g: _Group, now: int) -> list[str]:
        """Expire silent members and end an overdue rebalance; returns removed ids."""
        gone = [mid for mid, m in g.members.items()
                if now - m.last_heartbeat_ms >= m.session_timeout_ms]
        if g.preparing and now >= g.rebalance_deadline_ms:
            gone += [mid for mid, m in g.members.items()
                     if m.joined_generation != g.generation + 1 and mid not in gone]
        if gone:
            self._remove(g, gone, now)
        elif g.preparing:
            self._maybe_complete(g, now)
        return gone

    def _remove(self, g: _Group, member_ids: Sequence[str], now: int) -> None:
        for mid in member_ids:
            g.members.pop(mid, None)
        if g.members:
            self._start_rebalance(g, now)
            self._maybe_complete(g, now)
        else:
            g.preparing = False
            self._notify(g)

    def _start_rebalance(self, g: _Group, now: int) -> None:
        if not g.preparing:
            g.preparing = True
            g.rebalance_deadline_ms = now + max(m.rebalance_timeout_ms for m in g.members.values())
        self._notify(g)

    def _maybe_complete(self, g: _Group, now: int) -> None:
        target = g.generation + 1
        if not g.preparing or any(m.joined_generation != target for m in g.members.values()):
            return
        # Owners of the last generation (eager members hold nothing while rejoining,
        # so ask the last plan, not the members), without members that are gone.
        previous = {tp: m for tp, m in g.last_owners.items() if m in g.members}
        members = sorted(g.members.values(), key=lambda m: (m.joined_generation, m.member_id))
        strategy = self._common_strategy(members) or "range"
        subs = {m.member_id: m.topics for m in members}
        counts = {t: self.log.topic(t).partitions for t in set().union(*subs.values())}
        if strategy == "roundrobin":
            plan = assign_roundrobin(subs, counts)
        elif strategy in ("sticky", COOPERATIVE):
            plan = assign_sticky(subs, counts, previous)
        else:
            plan = assign_range(subs, counts)
        g.generation, g.strategy, g.preparing = target, strategy, False
        g.revoking = {}
        if strategy == COOPERATIVE:
            # Incremental (KIP-429): members kept their partitions while rejoining. A
            # partition moving from A to B is withheld from B in this generation; A
            # learns that it lost it, commits and revokes just that one, and the
            # follow-up rebalance started below hands it to B.
            for m in members:
                mine = plan[m.member_id]
                plan[m.member_id] = [tp for tp in mine if previous.get(tp) in (None, m.member_id)]
                g.revoking.update({tp: previous[tp] for tp in mine
                                   if previous.get(tp) not in (None, m.member_id)})
        for m in members:
            m.assignment = tuple(plan[m.member_id])
        g.last_owners = g.owners()
        # Persist the generation so ids never repeat after a restart (a zombie of
        # generation N must not match a new generation N).
        self._persist(g, now)
        if g.revoking:
            self._start_rebalance(g, now)
        self._notify(g)

    def _cooperative(self, g: _Group) -> bool:
        return self._common_strategy(list(g.members.values())) == COOPERATIVE

    def _state(self, g: _Group, m: Member) -> MemberState:
        waiting = g.preparing and m.joined_generation == g.generation + 1
        hb = max(1, m.session_timeout_ms // 3)
        return MemberState(g.name, m.member_id, g.generation, g.preparing and not waiting,
                           () if waiting else m.assignment, not waiting, g.strategy, hb)

    def _notify(self, g: _Group) -> None:
        if self.on_change is not None:
            self.on_change(g.name)

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
                g = self._group(group)  # a member-less commit may be a group's first
            else:
                g = self._live(group, member_id)
            g.busy += 1  # keeps g in memory while the lock is let go below
        try:
            with self._lock:
                now = self.now_ms()
                self._check_committer(g, offsets, member_id, generation, now)
            checked = self._checked_offsets(group, offsets)
            with self._lock:
                # Re-check: a rebalance may have completed while we looked at high
                # watermarks outside the lock.
                if member_id is not None:
                    if member_id not in g.members:
                        raise UnknownMemberId(group, member_id)
                    if g.generation != generation:
                        raise IllegalGeneration(group, member_id, generation, g.generation)
                elif g.members:
                    raise UnknownMemberId(group, member_id)
                for (topic, partition), offset in checked.items():
                    g.offsets.setdefault(topic, {})[partition] = {
                        "offset": offset, "metadata": metadata, "commit_ms": now}
                seq, doc = g.snapshot_doc()
            self._write(g, seq, doc)
        finally:
            with self._lock:
                g.busy -= 1
                self._release(g)

    def _check_committer(self, g: _Group, offsets: Mapping[TopicPartition, int],
                         member_id: str | None, generation: int, now: int) -> None:
        """May this member commit these partitions now? (under the lock; see commit)"""
        self._tick(g, now)
        if member_id is None:
            if g.members:
                raise UnknownMemberId(g.name, member_id)
            return
        m = self._member(g, member_id)
        if generation != g.generation:
            raise IllegalGeneration(g.name, member_id, generation, g.generation)
        cooperative = self._cooperative(g)
        if m.joined_generation == g.generation + 1 and g.preparing and not cooperative:
            raise RebalanceInProgress(g.name, g.generation)
        # a cooperative member may still commit what it is giving up
        owned = set(m.assignment) | {tp for tp, o in g.revoking.items() if o == member_id}
        for tp in offsets:
            if tuple(tp) not in owned:
                raise PartitionNotAssigned(g.name, member_id, tp[0], tp[1], generation)
        m.last_heartbeat_ms = now  # a commit shows the member is alive

    def _checked_offsets(self, group: str, offsets: Mapping[TopicPartition, int],
                         ) -> dict[TopicPartition, int]:
        """``offsets`` checked against their partitions (store reads: outside the lock).

        Raises UnknownTopic/UnknownPartition or InvalidCommitOffset.
        """
        checked = {}
        for tp, offset in offsets.items():
            topic, partition = tp
            plog = self.log.partition(topic, partition)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise InvalidCommitOffset(group, topic, partition, offset,
                                          "expected a non-negative integer")
            if offset > plog.snapshot(refresh=False).next_offset \
                    and offset > plog.high_watermark():
                raise InvalidCommitOffset(group, topic, partition, offset,
                                          f"the high watermark is {plog.high_watermark()}")
            checked[(topic, partition)] = offset
        return checked

    def _persist(self, g: _Group, now: int) -> None:
        self._write(g, *g.snapshot_doc())

    def _write(self, g: _Group, seq: int, doc: dict[str, Any]) -> None:
        """Write a group document unless a newer one (which includes it) already was.

        Documents are numbered under the coordinator lock and written under the
        group's write lock, so the store never goes back to an older state and
        the slow store write does not hold up other groups.
        """
        with g.write_lock:
            if seq > g.written_seq:
                self.log.write_group_offsets(g.name, doc)
                g.written_seq = seq

    def committed(self, group: str, partitions: Iterable[TopicPartition] | None = None,
                  ) -> dict[TopicPartition, int]:
        """Committed offsets of a group (all, or those of ``partitions`` that have one);
        empty for a group nobody committed for. Raises InvalidGroupId."""
        with self._lock:
            g = self._peek(group)
            if g is None:
                return {}
            allc = {(t, p): v["offset"] for t, parts in g.offsets.items() for p, v in parts.items()}
        if partitions is None:
            return allc
        return {tuple(tp): allc[tuple(tp)] for tp in partitions if tuple(tp) in allc}

    # -- describe ----------------------------------------------------------------------
    def groups(self) -> list[str]:
        """Groups with live members here or offsets in the store."""
        with self._lock:
            live = set(self._groups)
        return sorted(live | set(self.log.groups()))

    def describe(self, group: str) -> GroupDescription:
        """Members, assignment and lag per partition; raises InvalidGroupId or UnknownGroup."""
        with self._lock:
            g = self._peek(group)
            if g is None:
                raise UnknownGroup(group)
            self._tick(g, self.now_ms())
            self._release(g)
            owners = g.owners()
            members = tuple({"member_id": m.member_id, "client_id": m.client_id,
                             "topics": sorted(m.topics),
                             "assignment": [{"topic": t, "partition": p} for t, p in m.assignment],
                             "session_timeout_ms": m.session_timeout_ms,
                             "last_heartbeat_ms": m.last_heartbeat_ms}
                            for m in sorted(g.members.values(), key=lambda m: m.member_id))
            topics = set(g.offsets) | {t for m in g.members.values() for t in m.topics}
            offsets = {(t, p): v["offset"] for t, parts in g.offsets.items()
                       for p, v in parts.items()}
            state, generation, strategy = g.state, g.generation, g.strategy
        return GroupDescription(group, state, generation, strategy, members,
                                tuple(partition_lags(self.log, topics, offsets, owners)))


def partition_lags(log: Log, topics: Iterable[str], offsets: Mapping[TopicPartition, int],
                   owners: Mapping[TopicPartition, str] | None = None) -> list[PartitionLag]:
    """Lag rows for every partition of ``topics`` (deleted topics are skipped)."""
    from log_layout import UnknownTopic

    rows = []
    for t in sorted(topics):
        try:
            plogs = log.partitions(t)
        except UnknownTopic:
            continue
        for plog in plogs:
            m = plog.snapshot()
            tp = (t, plog.partition)
            rows.append(PartitionLag(t, plog.partition, offsets.get(tp), m.log_start_offset,
                                     m.next_offset, (owners or {}).get(tp)))
    return rows


def describe_from_store(log: Log, group: str) -> GroupDescription:
    """A group's committed offsets and lag read from the store alone (no members).

    Raises InvalidGroupId or UnknownGroup.
    """
    validate_group_id(group)
    doc = log.read_group_offsets(group)
    if doc is None:
        raise UnknownGroup(group)
    g = _Group(group, doc)
    offsets = {(t, p): v["offset"] for t, parts in g.offsets.items() for p, v in parts.items()}
    return GroupDescription(group, "Unknown", g.generation, g.strategy, (),
                            tuple(partition_lags(log, g.offsets, offsets)))


def commit_to_store(log: Log, group: str, offsets: Mapping[TopicPartition, int], *,
                    now_ms: int | None = None, metadata: str = "") -> None:
    """Commit offsets of a member-less consumer (``assign()`` in direct mode) straight
    to the store: read the group document, merge, write it back.

    Without a coordinator in between this is last-writer-wins: two processes
    committing to the same group at the same moment may lose one's update, and
    a live gateway coordinating the group overwrites it with its own copy. Use
    it only for groups no gateway coordinates (why Kafka routes commits through
    one coordinator). Raises InvalidGroupId, UnknownTopic, UnknownPartition or
    InvalidCommitOffset.
    """
    validate_group_id(group)
    now = wall_clock_ms() if now_ms is None else now_ms
    checked = {}
    for (topic, partition), offset in offsets.items():
        plog = log.partition(topic, partition)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidCommitOffset(group, topic, partition, offset,
                                      "expected a non-negative integer")
        hw = plog.high_watermark()
        if offset > hw:
            raise InvalidCommitOffset(group, topic, partition, offset,
                                      f"the high watermark is {hw}")
        checked[(topic, partition)] = offset
    g = _Group(group, log.read_group_offsets(group))
    for (topic, partition), offset in checked.items():
        g.offsets.setdefault(topic, {})[partition] = {"offset": offset, "metadata": metadata,
                                                      "commit_ms": now}
    log.write_group_offsets(group, g.doc())


def committed_from_store(log: Log, group: str) -> dict[TopicPartition, int]:
    """A group's committed offsets as the store has them; raises InvalidGroupId."""
    validate_group_id(group)
    g = _Group(group, log.read_group_offsets(group))
    return {(t, p): v["offset"] for t, parts in g.offsets.items() for p, v in parts.items()}
