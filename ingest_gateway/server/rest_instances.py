"""A REST Proxy v2 consumer instance: a consumer the gateway runs for a REST client.

The instance keeps its positions; :meth:`Instance.sync` follows the group
(heartbeat, a rebalance: commit and rejoin, a new assignment: positions from the
committed offsets or ``auto.offset.reset``). The hub holds the instances and
expires idle ones; the routes are ``ingest_gateway.http.rest_consumers``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from collections.abc import Callable

from ingest_gateway.client.group_protocol import MemberState
from ingest_gateway.errors import GroupError, UnknownMemberId
from ingest_gateway.server.groups.coordinator import GroupCoordinator

#: (topic, partition) -> (log start offset, high watermark)
Watermarks = Callable[[tuple[str, int]], tuple[int, int]]


@dataclasses.dataclass
class Instance:
    """A consumer the gateway runs on behalf of a REST client (positions live here)."""

    group: str
    name: str
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

    def sync(self, coord: GroupCoordinator, watermarks: Watermarks) -> None:
        """Blocking: heartbeat, follow a rebalance (commit, rejoin), take a new assignment."""
        if not self.topics:
            return
        st = None
        if self.member_id is not None:
            try:
                st = coord.heartbeat(self.group, self.member_id, self.generation)
            except UnknownMemberId:  # expired: start over from the committed offsets
                self.member_id, self.generation, self.assignment = None, -1, ()
                self.positions.clear()
        if st is None:
            st = self._join(coord)
        if st.rebalance:
            if self.auto_commit:
                self.commit(coord, None, quiet=True)
            self.assignment = ()
            self.positions.clear()
            st = self._join(coord)
        if st.assigned and st.generation != self.generation:
            self.generation, self.assignment = st.generation, st.assignment
            self.positions = {}
            committed = coord.committed(self.group, self.assignment)
            for tp in self.assignment:
                if tp in committed:
                    self.positions[tp] = committed[tp]
                else:
                    start, end = watermarks(tp)
                    self.positions[tp] = start if self.auto_offset_reset == "earliest" else end

    def _join(self, coord: GroupCoordinator) -> MemberState:
        st = coord.join(self.group, self.topics, member_id=self.member_id, client_id=self.name,
                        session_timeout_ms=self.session_timeout_ms)
        self.member_id = st.member_id
        return st

    def commit(self, coord: GroupCoordinator, offsets: Mapping[tuple[str, int], int] | None, *,
               quiet: bool = False) -> None:
        """Commit ``offsets`` (None: every position); ``quiet`` swallows a GroupError."""
        todo = dict(self.positions) if offsets is None else dict(offsets)
        if not todo or self.member_id is None:
            return
        try:
            coord.commit(self.group, todo, member_id=self.member_id,
                                   generation=self.generation)
        except GroupError:
            if not quiet:
                raise
