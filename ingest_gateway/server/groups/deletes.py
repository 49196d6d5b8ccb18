"""Deleting a consumer group, or some of its committed offsets: the one implementation
behind Kafka's DeleteGroups and OffsetDelete (``ingest_gateway.kafka.groups_delete``)
and ``sparklog groups delete | delete-offsets`` (``jobs.commands.groups``).

Kafka's rules (its GroupCoordinator):

- **delete a group** only while it has no members and no rebalance under way (else
  :class:`GroupNotEmpty`, NON_EMPTY_GROUP); a group with neither members nor a store
  document is :class:`UnknownGroup` (GROUP_ID_NOT_FOUND). Its document goes: offsets,
  generation and strategy are forgotten, the name is free.
- **delete offsets** of a group whatever its members, except on topics a member is
  subscribed to (:data:`SUBSCRIBED`, GROUP_SUBSCRIBED_TO_TOPIC, per partition); a
  partition with no committed offset is answered as deleted (Kafka does the same).

Both check first that this coordinator coordinates the group (NotCoordinator), as
every operation that changes a group does (``table``). With ``load_members`` (the
broker application, and the CLI working on the store) the members a document names
count as members, as they do when a coordinator takes a group over.

The group delete holds the coordinator's lock across the store delete, so no member
joins between the check and the delete (a join would write the document again);
deletes are rare admin calls, so other groups waiting that long is acceptable. An
offset commit under way on the group (it lets go of the lock while it writes) makes
the delete answer RebalanceInProgress (retriable) rather than race it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ingest_gateway.errors import RebalanceInProgress, UnknownGroup
from ingest_gateway.protocol.groups import GroupNotEmpty, TopicPartition, validate_group_id
from ingest_gateway.server.groups.table import GroupTable
from log_layout.group_offsets import delete_group_offsets

#: a partition whose topic a member of the group is subscribed to: its offset is kept
SUBSCRIBED = "subscribed"


def delete_group(table: GroupTable, group: str) -> None:
    """Delete ``group``'s document (members, offsets, generation) and forget it.

    Raises InvalidGroupId, NotCoordinator, UnknownGroup (no members, no document),
    GroupNotEmpty (members or a rebalance) or RebalanceInProgress (a commit under way).
    """
    validate_group_id(group)
    table.check(group)
    with table.lock:
        g = table.peek(group)  # held, else the document (with its members if load_members)
        if g is None:
            raise UnknownGroup(group)
        if g.members or g.preparing:
            raise GroupNotEmpty(group, "delete", list(g.members) or ["a rebalance under way"],
                                "as its coordinator says")
        if g.busy:
            raise RebalanceInProgress(group, g.generation)
        with g.write_lock:
            if not delete_group_offsets(table.log.store, group):
                raise UnknownGroup(group)
        if table.held(g):
            del table.groups[group]


def delete_offsets(table: GroupTable, group: str, partitions: Iterable[TopicPartition]
                   ) -> dict[TopicPartition, str | None]:
    """Delete ``group``'s committed offsets of ``partitions``; per partition None
    (deleted, or there was none) or :data:`SUBSCRIBED` (kept: a member reads its topic).

    The partitions are not checked against the topics here (the callers answer unknown
    ones their own way). Raises InvalidGroupId, NotCoordinator, UnknownGroup (no
    members, no document) or what the store write raises.
    """
    validate_group_id(group)
    table.check(group)
    asked = [(str(t), int(p)) for t, p in partitions]
    with table.lock:
        if table.peek(group) is None:
            raise UnknownGroup(group)
        g = table.load(group)  # held while it is changed, as a commit does
        g.busy += 1
    try:
        with table.lock:
            subscribed = {t for m in g.members.values() for t in m.topics}
            out: dict[TopicPartition, str | None] = {
                tp: SUBSCRIBED if tp[0] in subscribed else None for tp in asked}
            gone = [tp for tp, why in out.items() if why is None
                    and tp[1] in g.offsets.get(tp[0], {})]
            for topic, p in gone:
                del g.offsets[topic][p]
                if not g.offsets[topic]:
                    del g.offsets[topic]
            seq, doc = g.snapshot_doc()
        if gone:
            table.write(g, seq, doc)
    finally:
        with table.lock:
            g.busy -= 1
            table.release(g)
    return out

