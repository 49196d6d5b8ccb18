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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ingest_gateway.errors import NotCoordinator

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
