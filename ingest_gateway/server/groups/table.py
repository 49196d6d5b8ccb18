"""The groups a coordinator holds in memory: loaded from their store documents,
written back, dropped when idle or when another gateway coordinates them.

**Who may hold a group.** A standalone gateway (``cluster=None``) coordinates
every group. A gateway that is a slot of the broker application coordinates
the groups its cluster membership says it does (``cluster.check_coordinator``,
the leader of the group's offsets-topic partition, ``log_layout.brokers``):
every operation that changes a group checks that first, so a gateway that is not
the coordinator never loads one, and :meth:`GroupTable.retain` drops the groups
a new assignment took away (the gateway calls it after each assignment), and
those another gateway wrote since this one last did: the coordinator moved away
and back between two assignments this gateway read (each write stamps the
document with a fresh ``write_id``), so its copy is stale.

**Taking over.** With ``load_members`` (the cluster mode) a group is loaded with
the members of its document's generation, their session deadlines restarting
at load time, so the members of a group whose coordinator moved carry on with
their member id and generation at the new one (Kafka's coordinator loads its
groups from ``__consumer_offsets`` the same way). Without it (a standalone
gateway) a restart forgets members as it always did: they join again.

**Zombies.** Before every document write the coordinator is checked again, and
a group object that was dropped meanwhile (its operation was under way when the
assignment moved it) is never written. A frozen coordinator that resumes drops
its copies when it reads the assignment that moved them (or, moved back to it
meanwhile, the successor's ``write_id``). What remains is a window, not a fence:
a gateway frozen *after* that check, or whose cluster membership has not yet
read the assignment that moved the group away (it reads it every few hundred
milliseconds), can still replace the document its successor wrote, losing the
successor's changes since. The store has no conditional replace to close it.
The harm is bounded: the successor holds the group in memory and writes it whole
at its next change (a commit, a heartbeat's expiry, a generation), which puts its
state back; only what it acknowledged in between and then never wrote again (it
crashed too) is lost, and those records are read again (at least once).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from ingest_gateway.protocol.groups import validate_group_id
from ingest_gateway.errors import NotCoordinator, UnknownMemberId
from ingest_gateway.server.groups.state import Group
from log_layout import Log


class Cluster(Protocol):
    """What the table asks of the gateway's cluster membership (``ClusterMember``)."""

    def coordinator(self, group: str) -> dict[str, Any] | None: ...

    def is_coordinator(self, group: str) -> bool: ...

    def check_coordinator(self, group: str) -> None: ...


class GroupTable:
    """Groups in memory by name, under one lock (``lock``, reentrant) the coordinator
    also holds while it changes them."""

    def __init__(self, log: Log, now_ms: Callable[[], int], *, cluster: Cluster | None = None,
                 load_members: bool = False):
        self.log = log
        self.now_ms = now_ms
        self.cluster = cluster
        self.load_members = load_members
        self.lock = threading.RLock()
        self.groups: dict[str, Group] = {}

    def check(self, group: str) -> None:
        """Raises NotCoordinator (naming the coordinator) unless this gateway coordinates
        ``group``, dropping the group if it held it (before :meth:`retain` ran);
        nothing to check for a standalone gateway."""
        if self.cluster is None:
            return
        try:
            self.cluster.check_coordinator(group)
        except NotCoordinator:
            with self.lock:
                self.groups.pop(group, None)
            raise

    def _read(self, group: str) -> Group | None:
        doc = self.log.read_group_offsets(group)
        if doc is None:
            return None
        return Group(group, doc, loaded_at_ms=self.now_ms() if self.load_members else None)

    def load(self, group: str) -> Group:
        """The group in memory, loaded from the store (or new) and kept. Only operations
        that change a group call this, each ending with :meth:`release`. Raises
        InvalidGroupId or NotCoordinator."""
        validate_group_id(group)
        self.check(group)
        g = self.groups.get(group)
        if g is None:
            g = self.groups[group] = self._read(group) or Group(group, None)
        return g

    def live(self, group: str, member_id: object) -> Group:
        """The group of a member's call: in memory, or loaded from a document that has
        members (a taken-over group); a group with no members is not kept. Raises
        InvalidGroupId, NotCoordinator or UnknownMemberId."""
        validate_group_id(group)
        self.check(group)
        g = self.groups.get(group)
        if g is None and self.load_members:
            loaded = self._read(group)
            if loaded is not None and loaded.members:
                g = self.groups[group] = loaded
        if g is None:
            raise UnknownMemberId(group, member_id)
        return g

    def peek(self, group: str) -> Group | None:
        """For lookups: the group in memory, else a copy read from the store that is not
        kept (None if the store has none). Raises InvalidGroupId."""
        validate_group_id(group)
        return self.groups.get(group) or self._read(group)

    def held(self, g: Group) -> bool:
        """Is ``g`` the object this table holds for its name (not a dropped one, nor a
        lookup's copy)?"""
        return self.groups.get(g.name) is g

    def release(self, g: Group) -> None:
        """Drop ``g`` from memory if nothing there is worth keeping: no members, no
        rebalance, no operation under way (all its documents are then written)."""
        if not g.members and not g.preparing and g.busy == 0 and self.held(g):
            del self.groups[g.name]

    def write(self, g: Group, seq: int, doc: dict[str, Any]) -> None:
        """Write a group document unless a newer one (which includes it) already was.

        Documents are numbered under the lock and written under the group's write
        lock, so the store never goes back to an older state and the slow store write
        does not hold up other groups. Raises NotCoordinator, without writing, if this
        gateway no longer coordinates the group or dropped ``g`` meanwhile (the group
        is then dropped from memory: its successor owns the document).
        """
        self._fence(g)
        with g.write_lock:
            if seq > g.written_seq:
                write_id = uuid.uuid4().hex[:16]
                self.log.write_group_offsets(g.name, {**doc, "write_id": write_id})
                g.written_seq, g.write_id = seq, write_id

    def _fence(self, g: Group) -> None:
        if self.cluster is None:
            return
        with self.lock:
            try:
                self.cluster.check_coordinator(g.name)
                if not self.held(g):
                    raise NotCoordinator(g.name, self.cluster.coordinator(g.name))
            except NotCoordinator:
                if self.held(g):
                    del self.groups[g.name]
                raise

    def retain(self) -> list[str]:
        """Drop every group this gateway no longer coordinates, or whose document another
        gateway wrote since this one read or wrote it; returns their names. (Their
        members reach the coordinator, which loads the group's document.) Reads each
        document still held: call it off the event loop."""
        if self.cluster is None:
            return []
        with self.lock:
            gone = [name for name in self.groups if not self.cluster.is_coordinator(name)]
            for name in gone:
                del self.groups[name]
            kept = list(self.groups.items())
        for name, g in kept:
            doc = self.log.read_group_offsets(name)
            # a write of our own racing this read only costs a reload at the next call
            if doc is not None and doc.get("write_id") != g.write_id:
                with self.lock:
                    if self.held(g):
                        del self.groups[name]
                        gone.append(name)
        return gone
