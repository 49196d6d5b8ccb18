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
from ingest_gateway.errors import GroupFieldTooLong, IllegalGeneration, StaleMemberEpoch

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
#: a member's protocol: Kafka's classic one (JoinGroup/SyncGroup, and HTTP members) or
#: KIP-848's consumer protocol (ConsumerGroupHeartbeat)
CLASSIC, CONSUMER = "classic", "consumer"


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
    #: CLASSIC (JoinGroup, HTTP) or CONSUMER (KIP-848's ConsumerGroupHeartbeat; see
    #: ``epochs``); the fields below are a CONSUMER member's only
    protocol: str = CLASSIC
    member_epoch: int = 0
    previous_epoch: int = -1
    #: partitions it must give up before anyone else gets them (it still owns them)
    pending_revocation: tuple[TopicPartition, ...] = ()
    #: what the group's last plan gives it (``assignment`` moves towards it)
    target: tuple[TopicPartition, ...] = ()
    #: the server assignor it asked for (None: the group's default)
    assignor: str | None = None
    #: its subscription by regular expression (RE2; ``topics`` holds the matches)
    regex: str | None = None
    #: when a member still holding ``pending_revocation`` is removed (its rebalance timeout)
    revoke_deadline_ms: int = 0

    def describe(self, held: bool) -> dict[str, Any]:
        """The member as ``describe`` shows it (``last_heartbeat_ms`` only where the
        coordinator ``held`` it: elsewhere nobody knows)."""
        def tps(pairs: tuple[TopicPartition, ...]) -> list[dict[str, Any]]:
            return [{"topic": t, "partition": p} for t, p in pairs]

        consumer = {"member_epoch": self.member_epoch, "target": tps(self.target),
                    "regex": self.regex,
                    "pending_revocation": tps(self.pending_revocation)} \
            if self.protocol == CONSUMER else {}
        return {"member_id": self.member_id, "client_id": self.client_id,
                "protocol": self.protocol, "topics": sorted(self.topics),
                "assignment": tps(self.assignment), **consumer,
                "session_timeout_ms": self.session_timeout_ms,
                "last_heartbeat_ms": self.last_heartbeat_ms if held else None}

    def to_doc(self) -> dict[str, Any]:
        """The member as its group document keeps it (no liveness: deadlines restart
        when a coordinator loads the document)."""
        consumer = {"protocol": CONSUMER, "member_epoch": self.member_epoch,
                    "previous_epoch": self.previous_epoch,
                    "pending_revocation": [[t, p] for t, p in self.pending_revocation],
                    "target": [[t, p] for t, p in self.target], "assignor": self.assignor,
                    "regex": self.regex} \
            if self.protocol == CONSUMER else {}
        return {"member_id": self.member_id, "client_id": self.client_id,
                "topics": sorted(self.topics), "strategies": list(self.strategies),
                "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "assignment": [[t, p] for t, p in self.assignment],
                **({"instance_id": self.instance_id} if self.instance_id else {}), **consumer}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], generation: int, now_ms: int) -> Member:
        """A member of generation ``generation`` read back from a group document, its
        session starting at ``now_ms``. Raises KeyError, TypeError or ValueError for
        an entry this module did not write."""
        def pairs(key: str) -> tuple[TopicPartition, ...]:
            return tuple((str(t), int(p)) for t, p in doc.get(key) or ())

        m = cls(str(doc["member_id"]), str(doc.get("client_id", "")),
                frozenset(doc["topics"]), tuple(doc["strategies"]),
                int(doc["session_timeout_ms"]), int(doc["rebalance_timeout_ms"]),
                now_ms, generation, pairs("assignment"),
                str(doc["instance_id"]) if doc.get("instance_id") else None)
        if doc.get("protocol") == CONSUMER:
            m.protocol, m.member_epoch = CONSUMER, int(doc["member_epoch"])
            m.previous_epoch = int(doc.get("previous_epoch", -1))
            m.pending_revocation, m.target = pairs("pending_revocation"), pairs("target")
            m.assignor = str(doc["assignor"]) if doc.get("assignor") else None
            m.regex = str(doc["regex"]) if doc.get("regex") else None
            m.revoke_deadline_ms = now_ms + m.rebalance_timeout_ms
        return m


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
    #: Kafka's group type: classic, or consumer (KIP-848 members, alone or with classic ones)
    type: str = CLASSIC

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "type": self.type, "state": self.state,
                "generation": self.generation,
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
        #: Kafka's group type of an empty group: the protocol of its last members
        self.last_type: str = CONSUMER if doc.get("type") == CONSUMER else CLASSIC
        #: partitions per topic its last plan saw (a change makes a new plan: KIP-848)
        self.topic_counts: dict[str, int] = {}
        self.counts_checked_ms = 0
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
        if self.members and (doc.get("preparing") or doc.get("state") == "PreparingRebalance"):
            # a member had left (or a rebalance was under way) when the document was
            # written: the rebalance goes on here, its timeout counted from now
            self.preparing = True
            self.rebalance_deadline_ms = now + max(m.rebalance_timeout_ms
                                                   for m in self.members.values())

    @property
    def type(self) -> str:
        """Kafka's group type: ``consumer`` while a KIP-848 member is in it (a mixed group
        too, as in Kafka 4), ``classic`` while only classic members are, else the last."""
        if any(m.protocol == CONSUMER for m in self.members.values()):
            return CONSUMER
        return CLASSIC if self.members else self.last_type

    @property
    def state(self) -> str:
        """Kafka's state names: a classic group's (Empty, PreparingRebalance, Stable), or a
        consumer group's (Empty, Reconciling: a member not yet at the group's epoch, Stable)."""
        if self.type == CONSUMER and self.members:
            behind = any(m.member_epoch != self.generation or m.pending_revocation
                         for m in self.members.values() if m.protocol == CONSUMER)
            return "Reconciling" if behind or self.preparing else "Stable"
        if self.preparing:
            return "PreparingRebalance"
        return "Stable" if self.members else "Empty"

    def owners(self) -> dict[TopicPartition, str]:
        return {tp: m.member_id for m in self.members.values() for tp in m.assignment}

    def holders(self) -> dict[TopicPartition, str]:
        """Who holds each partition now: its owner, a KIP-848 member still revoking it,
        or a classic member withheld from (``revoking``) that has not rejoined yet."""
        out = {tp: owner for tp, owner in self.revoking.items() if owner in self.members}
        for m in self.members.values():
            out.update((tp, m.member_id) for tp in (*m.assignment, *m.pending_revocation))
        return out

    def snapshot_doc(self) -> tuple[int, dict[str, Any]]:
        self.doc_seq += 1
        return self.doc_seq, self.doc()

    def doc(self) -> dict[str, Any]:
        """The group's store document (``log_layout.group_offsets``)."""
        return {"group": self.name, "generation": self.generation, "strategy": self.strategy,
                "state": self.state, "type": self.type, "preparing": self.preparing,
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


def check_rebalance_timeout(v: object) -> None:
    """Raises ValueError unless ``v`` is an int of milliseconds from 1 to MAX_TIMEOUT_MS."""
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TIMEOUT_MS:
        raise ValueError(f"rebalance.timeout.ms must be an integer of milliseconds from 1 "
                         f"to {MAX_TIMEOUT_MS}, not {v!r}")


def check_epoch(g: Group, m: Member, generation: int) -> None:
    """Raises StaleMemberEpoch (a KIP-848 member's commit with another epoch than its
    own) or IllegalGeneration (a classic member's, of another generation)."""
    if m.protocol == CONSUMER and generation != m.member_epoch:
        raise StaleMemberEpoch(g.name, m.member_id, generation, m.member_epoch)
    if m.protocol != CONSUMER and generation != g.generation:
        raise IllegalGeneration(g.name, m.member_id, generation, g.generation)
