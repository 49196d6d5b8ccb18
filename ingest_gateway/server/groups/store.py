"""Group documents in the store without a coordinator: describe a group, its lag.

The CLI and the console describe groups from the store alone. Committing and reading
offsets without a coordinator is ``protocol.group_offsets`` (a direct consumer does it
too, and loads no server code).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ingest_gateway.protocol.groups import TopicPartition, validate_group_id
from ingest_gateway.errors import UnknownGroup
from ingest_gateway.server.groups.state import Group, GroupDescription, PartitionLag
from log_layout import Log, UnknownTopic


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


def partition_counts(log: Log, topics: Iterable[str]) -> dict[str, int]:
    """Partitions of each of ``topics`` that exists (a KIP-848 member may subscribe to
    one that does not yet)."""
    out = {}
    for t in topics:
        try:
            out[t] = log.topic(t).partitions
        except UnknownTopic:
            continue
    return out


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
                            tuple(partition_lags(log, g.offsets, g.committed())), g.type)
