"""Group documents in the store without a coordinator: describe, commit, read back.

The CLI describes groups from the store alone, and a direct consumer in
``assign()`` mode with a ``group_id`` but no coordinator commits here (last
writer wins: see :func:`commit_to_store`). The coordinator checks the offsets
it commits with :func:`checked_offsets` too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ingest_gateway.protocol.groups import TopicPartition, validate_group_id
from ingest_gateway.errors import InvalidCommitOffset, UnknownGroup
from ingest_gateway.server.groups.state import Group, GroupDescription, PartitionLag
from log_layout import Log, UnknownTopic, wall_clock_ms


def partition_lags(log: Log, topics: Iterable[str], offsets: Mapping[TopicPartition, int],
                   owners: Mapping[TopicPartition, str] | None = None) -> list[PartitionLag]:
    """Lag rows for every partition of ``topics`` (deleted topics are skipped)."""
    rows = []
    for t in sorted(topics):
        try:
            plogs = log.partitions(t)
        except UnknownTopic:
            continue
        for plog in plogs:
            m = plog.snapshot()
            tp = (t, plog.partition)
            rows.append(PartitionLag(t, plog.partition, offsets.get(tp), m.log_start_offset,
                                     m.next_offset, (owners or {}).get(tp)))
    return rows


def describe_from_store(log: Log, group: str) -> GroupDescription:
    """A group's committed offsets and lag read from the store alone (no members).

    Raises InvalidGroupId or UnknownGroup.
    """
    validate_group_id(group)
    doc = log.read_group_offsets(group)
    if doc is None:
        raise UnknownGroup(group)
    g = Group(group, doc)
    return GroupDescription(group, "Unknown", g.generation, g.strategy, (),
                            tuple(partition_lags(log, g.offsets, g.committed())))


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
    g = Group(group, log.read_group_offsets(group), loaded_at_ms=now)
    for (topic, partition), offset in checked.items():
        g.offsets.setdefault(topic, {})[partition] = {"offset": offset, "metadata": metadata,
                                                      "commit_ms": now}
    log.write_group_offsets(group, g.doc())


def committed_from_store(log: Log, group: str) -> dict[TopicPartition, int]:
    """A group's committed offsets as the store has them; raises InvalidGroupId."""
    validate_group_id(group)
    return Group(group, log.read_group_offsets(group)).committed()


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
