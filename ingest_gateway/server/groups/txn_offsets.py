"""A committed transaction's group offsets, written through the group coordinator.

``log_layout.transactions`` ends a committed transaction by writing its offsets into
each group's document. A gateway's coordinator that holds the group in memory would
not know them, and its next write of the document (a heartbeat's expiry, a member
leaving) would put the old offsets back: the transaction's offsets lost. So the
gateway ends transactions with :func:`offsets_writer`: the offsets go into the
coordinator's copy of the group (loaded from the store if it holds none) and the
document is written from it, under the coordinator's own ordering of writes. A
gateway of the broker application that does not coordinate the group writes the
document directly (the coordinator elsewhere reloads a document another gateway
wrote, ``table.GroupTable.retain``).

**KIP-447 fencing** (:func:`check_txn_committer`): a TxnOffsetCommit (v3+) names the
consumer's member id, generation and ``group.instance.id``, and the offsets join the
transaction only if that member is still in the group at that generation (a KIP-848
member: at its member epoch), as Kafka's group coordinator checks them; so a producer
whose consumer was fenced by a rebalance cannot commit offsets of partitions it lost
(Kafka's exactly-once across a rebalance). What a request leaves unset (member id
empty, generation -1: TxnOffsetCommit before v3, or a producer outside any group) is
not checked, as Kafka's coordinator does not check it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ingest_gateway.errors import (FencedInstanceId, IllegalGeneration, NotCoordinator,
                                   UnknownMemberId)
from ingest_gateway.server.groups.state import CONSUMER

Offsets = Mapping[str, Mapping[str, int]]


def offsets_writer(coordinator: Any, direct: Callable[[str, Offsets], None]
                   ) -> Callable[[str, Offsets], None]:
    """``log_layout.transactions.end_transaction``'s ``commit_offsets`` for this
    gateway's ``coordinator``; ``direct`` is the store-only write for a group this
    gateway does not coordinate."""

    def write(group: str, offsets: Offsets) -> None:
        table = coordinator.table
        try:
            with table.lock:
                g = table.load(group)
                g.busy += 1  # keeps g in memory while the lock is let go for the write
                now = coordinator.now_ms()
                for topic, parts in offsets.items():
                    for partition, offset in parts.items():
                        g.offsets.setdefault(topic, {})[int(partition)] = {
                            "offset": int(offset), "metadata": "", "commit_ms": now}
                seq, doc = g.snapshot_doc()
        except NotCoordinator:
            direct(group, offsets)
            return
        try:
            table.write(g, seq, doc)
        except NotCoordinator:
            direct(group, offsets)
        finally:
            with table.lock:
                g.busy -= 1
                table.release(g)

    return write


def check_txn_committer(coordinator: Any, group: str, member_id: str, generation: int,
                        instance_id: str | None) -> None:
    """KIP-447 (module doc), as Kafka's ``doTxnCommitOffsets``: raises FencedInstanceId
    (the static ``instance_id`` belongs to another member now), UnknownMemberId (a
    member id not in the group), IllegalGeneration (a generation given that is not the
    group's, or for a KIP-848 member not its member epoch: Kafka answers a
    transactional commit ILLEGAL_GENERATION, not STALE_MEMBER_EPOCH), NotCoordinator,
    InvalidGroupId. What the request leaves unset (member id "", generation -1, no
    instance id: TxnOffsetCommit before v3) is not checked."""
    if not member_id and generation < 0 and instance_id is None:
        return
    table = coordinator.table
    with table.lock:
        g = table.load(group)
        try:
            if instance_id is not None:
                owner = next((m.member_id for m in g.members.values()
                              if m.instance_id == instance_id), None)
                if owner is not None and owner != member_id:
                    raise FencedInstanceId(group, member_id, instance_id)
            m = g.members.get(member_id) if member_id else None
            if member_id and m is None:
                raise UnknownMemberId(group, member_id)
            current = m.member_epoch if m is not None and m.protocol == CONSUMER \
                else g.generation
            if generation >= 0 and generation != current:
                raise IllegalGeneration(group, member_id, generation, current)
        finally:
            table.release(g)
