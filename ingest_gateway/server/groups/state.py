"""What the group coordinator holds about a group, and what it reports.

:class:`Group` is one group in memory (members, generation, committed offsets); it
builds the group's store document and reads it back (the format is specified in
``log_layout.group_offsets``); :class:`GroupDescription` and :class:`PartitionLag`
are what ``describe`` answers.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

from ingest_gateway.protocol.groups import TopicPartition
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
    #: a static member's ``group.instance.id`` (KIP-345; None: a dynamic member)
    instance_id: str | None = None

    def to_doc(self) -> dict[str, Any]:
        """The member as its group document keeps it (no liveness: deadlines restart
        when a coordinator loads the document)."""
        return {"member_id": self.member_id, "client_id": self.client_id,
                "topics": sorted(self.topics), "strategies": list(self.strategies),
                "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "assignment": [[t, p] for t, p in self.assignment],
                **({"instance_id": self.instance_id} if self.instance_id else {})}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], generation: int, now_ms: int) -> Member:
        """A member of generation ``generation`` read back from a group document, its
        session starting at ``now_ms``. Raises KeyError, TypeError or ValueError for
        an entry this module did not write."""
        return cls(str(doc["member_id"]), str(doc.get("client_id", "")),
                   frozenset(doc["topics"]), tuple(doc["strategies"]),
                   int(doc["session_timeout_ms"]), int(doc["rebalance_timeout_ms"]),
                   now_ms, generation,
                   tuple((str(t), int(p)) for t, p in doc.get("assignment", ())),
                   str(doc["instance_id"]) if doc.get("instance_id") else None)


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
    """One group in memory; the coordinator reads and changes it under its lock.

    Built from the group's store document (None: a new group). With ``loaded_at_ms``
    the members of the document's generation come back too, their sessions (and a
    rebalance the document was preparing) starting at that time; without it the
    group starts with no members (a standalone gateway's restart). Raises KeyError,
    TypeError or ValueError for a member entry that is not one ``Member.to_doc`` wrote.
    """

    def __init__(self, name: str, doc: Mapping[str, Any] | None, *,
                 loaded_at_ms: int | None = None):
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
        #: the ``write_id`` of the document as last read or written here (see ``table``)
        self.write_id: str | None = doc.get("write_id")
        if loaded_at_ms is not None:
            self._load_members(doc, loaded_at_ms)

    def _load_members(self, doc: Mapping[str, Any], now: int) -> None:
        for entry in doc.get("members") or ():
            m = Member.from_doc(entry, self.generation, now)
            self.members[m.member_id] = m  # in the document's order: the oldest first
        self.revoking = {(str(t), int(p)): str(owner)
                         for t, p, owner in doc.get("revoking") or ()
                         if owner in self.members}
        self.last_owners = self.owners()
        if self.members and doc.get("state") == "PreparingRebalance":
            # a member had left (or a rebalance was under way) when the document was
            # written: the rebalance goes on here, its timeout counted from now
            self.preparing = True
            self.rebalance_deadline_ms = now + max(m.rebalance_timeout_ms
                                                   for m in self.members.values())

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
        """The group's store document (``log_layout.group_offsets``)."""
        return {"group": self.name, "generation": self.generation, "strategy": self.strategy,
                "state": self.state,
                "members": [m.to_doc() for m in self.members.values()],
                "revoking": [[t, p, owner] for (t, p), owner in sorted(self.revoking.items())],
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
