"""Consumer groups' committed offsets: one JSON document per group in the store.

A group's document is ``_groups/<group>.json`` (``paths.group_offsets``; the
group name follows the topic-name rules). Its content belongs to the gateway's
group coordinator (``ingest_gateway.server.groups``); this module only stores it,
replaced whole on each commit (``Store.put_replace``: readers see the old or the
new document, never a mix).
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


def groups(store: Store) -> list[str]:
    """Names of the groups that have a document, sorted."""
    return sorted(f.name[:-5] for f in store.list(paths.GROUPS_FOLDER)
                  if f.name.endswith(".json"))
