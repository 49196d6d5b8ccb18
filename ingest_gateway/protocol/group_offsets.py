"""A group's committed offsets in the store, read and written without a coordinator.

The group's document (``log_layout.group_offsets`` specifies it) belongs to the group
coordinator (``server.groups.state.Group`` builds it whole); this module touches only
its ``offsets`` entry, ``{topic: {"<partition>": {"offset", "metadata", "commit_ms"}}}``,
and keeps the rest (members, generation, strategy) as it finds it. Its users have no
coordinator: a direct consumer in ``assign()`` mode with a ``group_id``
(``client.direct``) and ``sparklog groups reset-offsets``. The coordinator checks the
offsets it commits with :func:`checked_offsets` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ingest_gateway.errors import InvalidCommitOffset
from ingest_gateway.protocol.groups import TopicPartition, validate_group_id
from log_layout import Log, wall_clock_ms


def committed_from_store(log: Log, group: str) -> dict[TopicPartition, int]:
    """A group's committed offsets as the store has them; raises InvalidGroupId."""
    validate_group_id(group)
    doc = log.read_group_offsets(group) or {}
    return {(t, int(p)): v["offset"] for t, parts in (doc.get("offsets") or {}).items()
            for p, v in parts.items()}


def commit_to_store(log: Log, group: str, offsets: Mapping[TopicPartition, int], *,
                    now_ms: int | None = None, metadata: str = "") -> None:
    """Commit offsets of a member-less consumer (``assign()`` in direct mode) straight
    to the store: read the group document, merge, write it back.

    Without a coordinator in between this is last-writer-wins: two processes
    committing to the same group at the same moment may lose one's update, and
    a live gateway coordinating the group overwrites it with its own copy. Use
    it only for groups no gateway coordinates (why Kafka routes commits through
    one coordinator). Raises InvalidGroupId, UnknownTopic, UnknownPartition or
    InvalidCommitOffset.
    """
    validate_group_id(group)
    now = wall_clock_ms() if now_ms is None else now_ms
    checked = checked_offsets(log, group, offsets)
    # members kept as they are: a coordinator taking the group over still finds them
    doc: dict[str, Any] = dict(log.read_group_offsets(group) or {
        "group": group, "generation": 0, "strategy": None, "state": "Empty", "members": [],
        "revoking": []})
    # written by no coordinator: whichever wrote the previous document reads this one again
    doc.pop("write_id", None)
    merged = {t: dict(parts) for t, parts in (doc.get("offsets") or {}).items()}
    for (topic, partition), offset in checked.items():
        merged.setdefault(topic, {})[str(partition)] = {
            "offset": offset, "metadata": metadata, "commit_ms": now}
    doc["offsets"] = {t: dict(sorted(parts.items(), key=lambda kv: int(kv[0])))
                      for t, parts in sorted(merged.items())}
    log.write_group_offsets(group, doc)


def checked_offsets(log: Log, group: str, offsets: Mapping[TopicPartition, int],
                    ) -> dict[TopicPartition, int]:
    """``offsets`` checked against their partitions (store reads: the coordinator calls
    this outside its lock). Raises UnknownTopic/UnknownPartition or InvalidCommitOffset
    (not a non-negative integer, or past the high watermark)."""
    checked = {}
    for tp, offset in offsets.items():
        topic, partition = tp
        plog = log.partition(topic, partition)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidCommitOffset(group, topic, partition, offset,
                                      "expected a non-negative integer")
        # the cached snapshot first: only an offset past it costs a store read
        if offset > plog.snapshot(refresh=False).next_offset \
                and offset > plog.high_watermark():
            raise InvalidCommitOffset(group, topic, partition, offset,
                                      f"the high watermark is {plog.high_watermark()}")
        checked[(topic, partition)] = offset
    return checked
