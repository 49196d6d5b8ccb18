"""A REST Proxy v2 consumer instance: a consumer the gateway runs for a REST client.

The instance keeps its positions; :meth:`Instance.sync` follows the group
(heartbeat, a rebalance: commit and rejoin, a new assignment: positions from the
committed offsets or ``auto.offset.reset``). Its group calls go through a
``CoordinatorLink`` (``server.groups.link``) to the group's coordinator, which
may be another gateway of the broker application, and may move; its records are
read here. The hub holds the instances and expires idle ones; the routes are
``ingest_gateway.http.rest_consumers``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping

from ingest_gateway.client.group_protocol import MemberState
from ingest_gateway.errors import (GroupError, NotCoordinator, PartitionNotAssigned,
                                   UnknownMemberId)
from ingest_gateway.server.groups.link import CoordinatorLink

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

    def sync(self, watermarks: Watermarks) -> None:
        """Blocking: heartbeat, follow a rebalance (commit, rejoin), take a new assignment.

        Raises the coordinator's GroupError, or NotCoordinator when it cannot be reached
        (the instance keeps its membership and tries again at its next call)."""
        if not self.topics:
            return
        st = None
        if self.member_id is not None:
            try:
                st = self.link.heartbeat(self.member_id, self.generation)
            except UnknownMemberId:  # expired: start over from the committed offsets
                self.member_id, self.generation, self.assignment = None, -1, ()
                self.positions.clear()
        if st is None:
            st = self._join()
        if st.rebalance:
            if self.auto_commit:
                self.commit(None, quiet=True)
            self.assignment = ()
            self.positions.clear()
            st = self._join()
        if st.assigned and st.generation != self.generation:
            self.generation, self.assignment = st.generation, st.assignment
            self.positions = {}
            committed = self.link.committed(self.assignment)
            for tp in self.assignment:
                if tp in committed:
                    self.positions[tp] = committed[tp]
                else:
                    start, end = watermarks(tp)
                    self.positions[tp] = start if self.auto_offset_reset == "earliest" else end

    def _join(self) -> MemberState:
        st = self.link.join(self.topics, self.member_id, client_id=self.name,
                            session_timeout_ms=self.session_timeout_ms)
        self.member_id = st.member_id
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
        if not todo or self.member_id is None:
            return
        try:
            for t, p in todo:
                if (t, p) not in self.assignment:
                    raise PartitionNotAssigned(self.group, self.member_id, t, p,
                                               self.generation)
            self.link.commit(todo, self.member_id, self.generation)
        except (GroupError, NotCoordinator):
            if not quiet:
                raise
