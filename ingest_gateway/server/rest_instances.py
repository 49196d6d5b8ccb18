"""A REST Proxy v2 consumer instance: a consumer the gateway runs for a REST client.

The instance keeps its positions; :meth:`Instance.sync` follows the group
(heartbeat, a rebalance: commit and rejoin, a new assignment: positions from the
committed offsets or ``auto.offset.reset``). It gets its partitions one of three
mutually exclusive ways, as Kafka's consumer: ``topics`` (subscribe), ``pattern``
(subscribe to the topics whose whole name matches, looked up again at each sync,
so a new matching topic joins the subscription) or ``manual`` (assign: no group
membership, commits as a member-less consumer). The hub heartbeats an idle
subscribed instance in the background (Kafka's consumer heartbeat thread), so its
membership lasts as long as the instance, ``consumer.instance.timeout.ms``.
Its group calls go through a ``CoordinatorLink`` (``server.groups.link``) to the
group's coordinator, which may be another gateway of the broker application, and
may move; its records are read here. The hub holds the instances and expires idle
ones; the routes are
``ingest_gateway.http.rest_consumers``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Callable, Mapping, Sequence

from ingest_gateway.protocol.groups import MemberState
from ingest_gateway.errors import (GroupError, NotCoordinator, PartitionNotAssigned,
                                   UnknownMemberId)
from ingest_gateway.server.groups.link import CoordinatorLink

#: how long a topic_pattern's matches are used before the topics are listed again. Kafka
#: refreshes them with its metadata (metadata.max.age.ms, 5 minutes); here a new topic
#: joins within seconds, and a records request does not list the store every time
PATTERN_REFRESH_S = 5.0

#: (topic, partition) -> (log start offset, high watermark)
Watermarks = Callable[[tuple[str, int]], tuple[int, int]]


@dataclasses.dataclass
class Instance:
    """A consumer the gateway runs on behalf of a REST client (positions live here)."""

    group: str
    name: str
    #: the way to the group's coordinator (the hub makes one per instance)
    link: CoordinatorLink
    fmt: str
    auto_offset_reset: str
    auto_commit: bool
    session_timeout_ms: int | None
    topics: tuple[str, ...] = ()
    member_id: str | None = None
    generation: int = -1
    assignment: tuple[tuple[str, int], ...] = ()
    positions: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)
    timeout_ms: int = 300_000  # consumer.instance.timeout.ms
    last_used_ms: int = 0  # by the hub's clock
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)
    #: a topic_pattern subscription, and how to list the topics it is matched against
    pattern: re.Pattern[str] | None = None
    list_topics: Callable[[], Sequence[str]] | None = None
    #: partitions given by POST assignments (None: none, or group management)
    manual: tuple[tuple[str, int], ...] | None = None
    #: when the instance last heard from its coordinator (hub clock): background heartbeats
    last_sync_ms: int = 0
    heartbeat_interval_ms: int = 3_000
    #: the topics of the last join (a pattern's matches may change between syncs)
    joined_topics: frozenset[str] = frozenset()
    #: when the pattern's matches were last listed (time.monotonic; None: not yet)
    pattern_listed_at: float | None = None

    def subscription_kind(self) -> str | None:
        """"topics", "topic_pattern", "assignments" or None: what the instance uses now."""
        if self.manual is not None:
            return "assignments"
        if self.pattern is not None:
            return "topic_pattern"
        return "topics" if self.topics else None

    def _follow_pattern(self) -> None:
        if self.pattern is None or self.list_topics is None:
            return
        now = time.monotonic()
        if self.pattern_listed_at is not None and now - self.pattern_listed_at < \
                PATTERN_REFRESH_S:
            return
        match = self.pattern.fullmatch  # Kafka's Pattern.matcher(topic).matches()
        self.topics = tuple(sorted(t for t in self.list_topics() if match(t)))
        self.pattern_listed_at = now

    def _take(self, assignment: Sequence[tuple[str, int]], watermarks: Watermarks) -> None:
        """Own ``assignment`` from now: positions from the committed offsets, else
        auto.offset.reset."""
        self.assignment = tuple(assignment)
        self.positions = {}
        committed = self.link.committed(self.assignment)
        for tp in self.assignment:
            if tp in committed:
                self.positions[tp] = committed[tp]
            else:
                start, end = watermarks(tp)
                self.positions[tp] = start if self.auto_offset_reset == "earliest" else end

    def assign(self, partitions: Sequence[tuple[str, int]], watermarks: Watermarks) -> None:
        """Blocking: manual assignment (Kafka's assign()), replacing the previous one."""
        self.manual = tuple(dict.fromkeys(partitions))
        self._take(self.manual, watermarks)

    def unsubscribe(self) -> None:
        """Blocking: commit (auto-commit), leave the group, forget topics, pattern and
        manual assignment (Kafka's unsubscribe()). Raises nothing for a group that is
        gone or unreachable: the session then runs out at the coordinator."""
        if self.auto_commit:
            self.commit(None, quiet=True)
        if self.member_id is not None:
            try:
                self.link.leave(self.member_id)
            except (GroupError, NotCoordinator):
                pass
        self.topics, self.pattern, self.manual = (), None, None
        self.member_id, self.generation, self.assignment = None, -1, ()
        self.positions.clear()

    def sync(self, watermarks: Watermarks, now_ms: int | None = None) -> None:
        """Blocking: heartbeat, follow a rebalance (commit, rejoin), take a new assignment.
        ``now_ms`` (the hub's clock) records when the coordinator was last heard.

        Raises the coordinator's GroupError, or NotCoordinator when it cannot be reached
        (the instance keeps its membership and tries again at its next call)."""
        if self.manual is not None:
            return  # assigned by hand: no group to follow
        self._follow_pattern()
        if not self.topics:
            if self.member_id is not None:  # a pattern that matches nothing any more
                self.unsubscribe_members_only()
            return
        st = None
        if self.member_id is not None:
            try:
                st = self.link.heartbeat(self.member_id, self.generation)
            except UnknownMemberId:  # expired: start over from the committed offsets
                self.member_id, self.generation, self.assignment = None, -1, ()
                self.positions.clear()
        if st is not None and frozenset(self.topics) != self.joined_topics:
            st = self._join()  # the pattern matched other topics: rejoin with them
        if st is None:
            st = self._join()
        if st.rebalance:
            if self.auto_commit:
                self.commit(None, quiet=True)
            self.assignment = ()
            self.positions.clear()
            st = self._join()
        if now_ms is not None:
            self.last_sync_ms = now_ms
        self.heartbeat_interval_ms = st.heartbeat_interval_ms
        if st.assigned and st.generation != self.generation:
            self.generation = st.generation
            self._take(st.assignment, watermarks)

    def unsubscribe_members_only(self) -> None:
        """Leave the group but keep the pattern (it matches no topic now)."""
        pattern = self.pattern
        self.unsubscribe()
        self.pattern = pattern

    def _join(self) -> MemberState:
        st = self.link.join(self.topics, self.member_id, client_id=self.name,
                            session_timeout_ms=self.session_timeout_ms)
        self.member_id = st.member_id
        self.joined_topics = frozenset(self.topics)
        return st

    def commit(self, offsets: Mapping[tuple[str, int], int] | None, *,
               quiet: bool = False) -> None:
        """Commit ``offsets`` (None: every position); ``quiet`` swallows a GroupError
        (NotCoordinator too: an auto-commit is tried again at the next call).

        Raises PartitionNotAssigned for a partition the instance does not own (checked
        here: the instance knows its assignment of its generation, and a remote
        coordinator's refusal would not name the partition), or the coordinator's
        GroupError (NotCoordinator included) for the rest."""
        todo = dict(self.positions) if offsets is None else dict(offsets)
        if not todo or (self.member_id is None and self.manual is None):
            return
        try:
            for t, p in todo:
                if (t, p) not in self.assignment:
                    raise PartitionNotAssigned(self.group, self.member_id, t, p,
                                               self.generation)
            # manually assigned: a member-less commit (Kafka's generation -1)
            self.link.commit(todo, self.member_id, self.generation)  # type: ignore[arg-type]
        except (GroupError, NotCoordinator):
            if not quiet:
                raise
