"""The consumer-group protocol as both sides see it: strategies, a member's state, group ids,
and GroupNotEmpty (Kafka's NON_EMPTY_GROUP, which the CLI and the coordinator both raise).

The coordinator (``ingest_gateway.server.groups``) answers join and heartbeat
with a :class:`MemberState`; the gateway sends it as JSON (``to_json``) and the
client reads it back (``from_json``). This module is the one definition of that
shape, and holds no server code, so a client process may load it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from conf.topic import TOPIC_NAME_RE
from ingest_gateway.errors import GroupError, InvalidGroupId

COOPERATIVE = "cooperative-sticky"
STRATEGIES = ("range", "roundrobin", "sticky", COOPERATIVE)

TopicPartition = tuple[str, int]


def validate_group_id(group: object) -> str:
    """A group id as Kafka allows it in a file name: ``[a-zA-Z0-9._-]{1,249}``."""
    if not isinstance(group, str) or not TOPIC_NAME_RE.match(group) or group in (".", ".."):
        raise InvalidGroupId(group, "use 1 to 249 characters of a-z, A-Z, 0-9, '.', '_', '-'")
    return group


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

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "MemberState":
        """The state :meth:`to_json` wrote (a gateway's answer); raises KeyError."""
        return cls(doc["group"], doc["member_id"], doc["generation"], doc["rebalance"],
                   tuple((a["topic"], a["partition"]) for a in doc["assignment"]),
                   doc["assigned"], doc.get("strategy"), doc["heartbeat_interval_ms"])


class Coordinator(Protocol):
    """What a consumer calls on a group coordinator in its own process (``Consumer(
    coordinator=...)``, for embedding and tests): ``server.groups.coordinator.
    GroupCoordinator`` is one. The consumer names only this, so the client imports no
    server code."""

    def join(self, group: str, topics: Iterable[str], *, member_id: str | None = None,
             **options: Any) -> MemberState: ...

    def heartbeat(self, group: str, member_id: str, generation: int) -> MemberState: ...

    def leave(self, group: str, member_id: str) -> None: ...

    def commit(self, group: str, offsets: Mapping[TopicPartition, int], *,
               member_id: str | None = None, generation: int = -1,
               metadata: str = "") -> None: ...

    def committed(self, group: str, partitions: Iterable[TopicPartition] | None = None,
                  ) -> dict[TopicPartition, int]: ...


class GroupNotEmpty(GroupError):
    """Kafka's NON_EMPTY_GROUP: the group has active members, so it is not deleted (nor
    its offsets reset) while they consume."""

    code = "non_empty_group"

    def __init__(self, group: str, action: str, members: Sequence[str], source: str):
        self.group, self.action, self.members = group, action, tuple(members)
        shown = ", ".join(members[:3]) + (", ..." if len(members) > 3 else "")
        count = f"{len(members)} active member{'' if len(members) == 1 else 's'}"
        super().__init__(f"cannot {action} consumer group {group!r}: it has {count} "
                         f"({shown}, {source}); stop its consumers first")
