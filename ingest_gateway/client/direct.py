"""The consumer's direct mode: group membership without a gateway.

Loaded only by a consumer that reads the store itself (``store=`` / ``log=``) or
is given an in-process coordinator (``coordinator=``): it brings in the group
document's offset functions (``protocol.group_offsets``), which a consumer through a
gateway never needs.
With a coordinator, membership and commits go to it (:class:`LocalMembership`);
without one, a ``group_id`` reads and commits that group's offsets in the store
itself, last writer wins (:class:`StoreOffsets`, ``assign()`` only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ingest_gateway.errors import IllegalState
from ingest_gateway.protocol.group_offsets import commit_to_store, committed_from_store
from ingest_gateway.protocol.groups import (Coordinator, MemberState, TopicPartition,
                                            validate_group_id)
from log_layout import Log


class LocalMembership:
    """Membership and commits through a coordinator in this process (``protocol.groups.
    Coordinator``, e.g. the server's GroupCoordinator)."""

    coordinated = True

    def __init__(self, coordinator: Coordinator, group: str):
        self.coordinator, self.group = coordinator, group

    def join(self, topics: Sequence[str], member_id: str | None, **cfg: Any) -> MemberState:
        return self.coordinator.join(self.group, topics, member_id=member_id, **cfg)

    def heartbeat(self, member_id: str, generation: int) -> MemberState:
        return self.coordinator.heartbeat(self.group, member_id, generation)

    def leave(self, member_id: str) -> None:
        self.coordinator.leave(self.group, member_id)

    def commit(self, offsets: Mapping[TopicPartition, int], member_id: str | None,
               generation: int) -> None:
        self.coordinator.commit(self.group, offsets, member_id=member_id, generation=generation)

    def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.coordinator.committed(self.group, tps)

    def close(self) -> None:
        pass


class StoreOffsets:
    """No coordinator: committed offsets read and written in the store (assign() only)."""

    #: no coordinator: subscribe() is refused, only assign() reads and commits here
    coordinated = False

    def __init__(self, log: Log, group: str):
        validate_group_id(group)
        self.log, self.group = log, group

    def join(self, *_: Any, **__: Any) -> MemberState:
        raise IllegalState("subscribe() needs a coordinator: give the Consumer a gateway= URL "
                           "(or coordinator=); a direct consumer without one can only assign()")

    def commit(self, offsets: Mapping[TopicPartition, int], member_id: str | None,
               generation: int) -> None:
        commit_to_store(self.log, self.group, offsets)

    def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        allc = committed_from_store(self.log, self.group)
        return {tp: allc[tp] for tp in tps if tp in allc}

    def close(self) -> None:
        pass


def membership(group: str, *, log: Log | None, coordinator: Coordinator | None,
               ) -> "LocalMembership | StoreOffsets":
    """The membership of a direct consumer: through ``coordinator`` if given, else the store."""
    if coordinator is not None:
        return LocalMembership(coordinator, group)
    assert log is not None
    return StoreOffsets(log, group)
