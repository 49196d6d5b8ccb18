"""Consumer groups' committed offsets and membership: one JSON document per group.

A group's document is ``_groups/<group>.json`` (``paths.group_offsets``; the
group name follows the topic-name rules). Its content belongs to the gateway's
group coordinator (``ingest_gateway.server.groups``, ``state.Group`` builds and
reads it); this module only stores it, replaced whole on each change
(``Store.put_replace``: readers see the old or the new document, never a mix)::

    {"group": "g",
     "generation": 7,                 # the last completed generation (ids never repeat)
     "strategy": "range",             # its assignment strategy (null before the first)
     "state": "Stable",               # Empty | Stable | PreparingRebalance, when written
     "members": [                     # the members, oldest first (join order decides
       {"member_id": "c1-3f2a9b1c0d4e", "client_id": "c1",      # the strategy)
        "topics": ["clicks"], "strategies": ["range", "roundrobin"],
        "session_timeout_ms": 10000, "rebalance_timeout_ms": 60000,
        "assignment": [["clicks", 0], ["clicks", 1]]}],         # owned in ``generation``
     "revoking": [["clicks", 2, "c1-3f2a9b1c0d4e"]],   # cooperative: withheld, old owner
     "type": "classic",               # Kafka's group type: "consumer" with a KIP-848 member
     "preparing": false,              # a rebalance under way (classic members rejoining)
     "offsets": {"clicks": {"0": {"offset": 42, "metadata": "", "commit_ms": 1763...}}},
     "write_id": "5c1f0e9a7b3d2c4e"}  # fresh on every write: who wrote last

Written on every commit, every completed generation and every member that leaves
or expires, so the document always names the members of the current generation:
a gateway that becomes the group's coordinator loads it and the members carry on
(their session deadlines restart then; a ``PreparingRebalance`` document resumes
the rebalance). No liveness is stored: nothing here says a member is still alive.
A coordinator that finds another ``write_id`` than its own last one knows another
gateway coordinated the group meanwhile, and reloads it.

A KIP-848 member (``group.protocol=consumer``) has also ``"protocol": "consumer"``,
``member_epoch``, ``previous_epoch``, ``pending_revocation`` (partitions it still holds
and must give up), ``target`` (its share of the last plan), ``assignor`` and ``regex``
(null when not used); ``assignment`` is what it holds now.

Compatibility: documents written before membership was kept have only ``group``,
``generation``, ``strategy`` and ``offsets``; they read as a group with no members
(``state`` Empty), and missing ``members``/``revoking``/``state``/``write_id`` always
mean none.
A crash mid-write leaves the previous document whole (the replace is atomic).
Deleting a group (``delete_group_offsets``) deletes its document.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from log_layout import paths
from log_layout.store import Store


def read_group_offsets(store: Store, group: str) -> dict[str, Any] | None:
    """A consumer group's committed-offsets document, or None if it has none.
    Raises InvalidTopicName for an illegal group name."""
    try:
        return json.loads(store.read(paths.group_offsets(group)))
    except FileNotFoundError:
        return None


def write_group_offsets(store: Store, group: str, doc: Mapping[str, Any]) -> None:
    """Replace a group's document atomically. Raises InvalidTopicName for an illegal name."""
    store.put_replace(paths.group_offsets(group), json.dumps(doc).encode())


def delete_group_offsets(store: Store, group: str) -> bool:
    """Delete a group's document (``kafka-consumer-groups --delete``): its committed
    offsets and members are gone, the name is free. False if it had none. Raises
    InvalidTopicName for an illegal name."""
    path = paths.group_offsets(group)
    if not store.exists(path):
        return False
    store.delete([path])
    return True


def groups(store: Store) -> list[str]:
    """Names of the groups that have a document, sorted."""
    return sorted(f.name[:-5] for f in store.list(paths.GROUPS_FOLDER)
                  if f.name.endswith(".json"))
