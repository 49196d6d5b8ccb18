"""What the group coordinator holds about a group, and what it reports.

:class:`Group` is one group in memory (members, generation, committed offsets)
and builds the group's store document (format: see ``coordinator``);
:class:`GroupDescription` and :class:`PartitionLag` are what ``describe`` answers.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

from ingest_gateway.client.group_protocol import TopicPartition
from ingest_gateway.errors import GroupFieldTooLong

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


class Group:
    """One group in memory; the coordinator reads and changes it under its lock."""

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

    def committed(self) -> dict[TopicPartition, int]:
        """Every committed offset of the group."""
        return {(t, p): v["offset"] for t, parts in self.offsets.items() for p, v in parts.items()}


def check_client_id(group: str, client_id: object) -> None:
    """Raises GroupFieldTooLong (over MAX_CLIENT_ID_CHARS) or ValueError (not printable text)."""
    if not isinstance(client_id, str):
        raise ValueError(f"client_id must be a string, not {client_id!r}")
    if len(client_id) > MAX_CLIENT_ID_CHARS:
        raise GroupFieldTooLong(group, "client_id", len(client_id), MAX_CLIENT_ID_CHARS)
    if not client_id.isprintable():
        # it becomes part of the member id, which is logged and put in URLs
        raise ValueError(f"client_id must be printable text (no control characters), "
                         f"not {client_id[:64]!r}")
