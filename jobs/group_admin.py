"""What ``sparklog groups reset-offsets | delete | delete-offsets`` decide, without printing:
the partitions named, the new offsets, and whether the group may be changed.

Kafka's rules (``kafka-consumer-groups.sh``): offsets are reset, and a group or its
offsets deleted, only while the group has no active member (Kafka's
``NON_EMPTY_GROUP``); a new offset is clamped into ``[log start, high watermark]``;
``--to-datetime`` takes the first record at or after the time (the high watermark
when there is none); ``--shift-by`` needs a committed offset to shift.

Who the members are: the group's coordinator says (``groups._describe``); when no
gateway answers, the members its store document names (a coordinator writes the
document whenever a member joins, leaves or expires, so an empty list is
trustworthy; a list of members whose gateway died is stale, and refusing then
is the safe side).

Where a change goes: a reset is a member-less commit at the coordinator when one
answers (it refuses the commit if a member joined since the check: one step
there, as in Kafka), else straight to the store (``commit_to_store``). Deletes
run the gateway's own operation (``ingest_gateway.server.groups.deletes``, Kafka's
DeleteGroups and OffsetDelete) on the store: a group without members is held by no
gateway (``GroupTable.release``), so no coordinator's copy overwrites it; a member
joining between the check and the write is the window left (Kafka's
``kafka-consumer-groups.sh --delete`` against the listener has no such window: the
coordinator checks and deletes in one step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from conf.errors import ConfigError
from ingest_gateway.protocol.groups import GroupNotEmpty  # noqa: F401 - callers catch it
from log_layout import Log


@dataclasses.dataclass(frozen=True)
class ResetRow:
    topic: str
    partition: int
    current: int | None
    new: int
    log_start: int
    high_watermark: int


def parse_topic_partitions(text: str) -> tuple[str, tuple[int, ...] | None]:
    """``T`` or ``T:0,2`` (Kafka's ``--topic`` form) -> (topic, partitions or None = all).
    Raises ConfigError naming ``--topic``."""
    topic, sep, parts = text.partition(":")
    if not topic:
        raise ConfigError("--topic", text, "expected TOPIC or TOPIC:P,P,...")
    if not sep:
        return topic, None
    out = []
    for item in parts.split(","):
        item = item.strip()
        if not (item.isascii() and item.isdigit()):
            raise ConfigError("--topic", text, f"partition {item!r} is not an integer >= 0")
        out.append(int(item))
    return topic, tuple(dict.fromkeys(out))


def active_members(description: Mapping[str, Any] | None, log: Log,
                   group: str) -> tuple[list[str], str]:
    """(member ids, where that was learnt): from the coordinator's ``description`` if a
    gateway answered, else from the group's store document."""
    if description is not None:
        return [m["member_id"] for m in description.get("members", ())], \
            "as its coordinator says"
    doc = log.read_group_offsets(group) or {}
    return [str(m.get("member_id")) for m in doc.get("members", ())], \
        "as its store document says; no gateway answered"


def check_empty(description: Mapping[str, Any] | None, log: Log, group: str,
                action: str) -> None:
    """Raises GroupNotEmpty if the group has active members (see the module docstring)."""
    members, source = active_members(description, log, group)
    if members:
        raise GroupNotEmpty(group, action, members, source)


def committed(log: Log, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, as its store document has them."""
    doc = log.read_group_offsets(group) or {}
    return {(t, int(p)): int(e["offset"]) for t, parts in doc.get("offsets", {}).items()
            for p, e in parts.items()}


def selected_partitions(log: Log, group: str, topics: Sequence[str] | None,
                        ) -> list[tuple[str, int]]:
    """The partitions ``--topic T[:P,...]`` (repeatable) names, or with ``topics`` None
    (``--all-topics``) every partition of every topic the group committed for. Raises
    UnknownTopic, UnknownPartition, or ConfigError for a group with no offsets."""
    from log_layout import UnknownPartition

    if topics is None:
        have = sorted({t for t, _ in committed(log, group)})
        if not have:
            raise ConfigError("--all-topics", None, f"consumer group {group!r} has no "
                                                    "committed offsets; name topics with --topic")
        topics = have
    out: list[tuple[str, int]] = []
    for text in topics:
        topic, parts = parse_topic_partitions(text)
        count = log.topic(topic, refresh=True).partitions  # raises UnknownTopic
        for p in parts if parts is not None else range(count):
            if p >= count:
                raise UnknownPartition(topic, p, count)
            out.append((topic, p))
    return list(dict.fromkeys(out))


def reset_plan(log: Log, group: str, partitions: Sequence[tuple[str, int]], how: str,
               value: int | None) -> list[ResetRow]:
    """The new offset of each partition. ``how`` is ``earliest``, ``latest``,
    ``datetime`` (``value`` in ms), ``offset`` or ``shift`` (``value`` signed).
    Raises ConfigError for ``shift`` on a partition with nothing committed."""
    from jobs.cli_output import progress

    current = committed(log, group)
    rows = []
    for topic, p in progress(partitions, "planning", total=len(partitions)):
        plog = log.partition(topic, p)
        m = plog.snapshot()
        start, end = m.log_start_offset, m.next_offset
        now = current.get((topic, p))
        if how == "earliest":
            new = start
        elif how == "latest":
            new = end
        elif how == "datetime":
            found = plog.offset_for_timestamp(value, manifest=m)
            new = end if found is None else found
        elif how == "offset":
            new = value
        else:
            if now is None:
                raise ConfigError("--shift-by", value, f"{topic}-{p} has no committed offset "
                                                       f"in group {group!r} to shift")
            new = now + value
        rows.append(ResetRow(topic, p, now, min(max(new, start), end), start, end))
    return rows
