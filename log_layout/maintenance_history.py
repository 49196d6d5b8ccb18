"""The maintenance history: one JSON file per maintenance run, in the order they ran.

Each run is ``_maintenance/history/<ns:020d>-<8 hex>.json``: the nanoseconds
when it was recorded (never repeating within a process, so names sort in the
order runs were recorded) and a random suffix (so two processes never pick the
same name). One file per run because object stores cannot append; each is
created exclusively, so a reader sees a run whole or not at all. The record's
content is the maintenance job's (``jobs.maintain.RunSummary.history_record``).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from log_layout import paths
from log_layout.store import Store

HISTORY_FOLDER = f"{paths.MAINTENANCE_FOLDER}/history"
_lock = threading.Lock()
_last_ns = 0


def append_history(store: Store, record: Mapping[str, Any]) -> None:
    """Add one maintenance run's record."""
    global _last_ns
    with _lock:
        ns = _last_ns = max(time.time_ns(), _last_ns + 1)
    name = f"{HISTORY_FOLDER}/{ns:020d}-{uuid.uuid4().hex[:8]}.json"
    store.put_exclusive(name, json.dumps(dict(record)).encode())


def history(store: Store, limit: int | None = None) -> list[dict[str, Any]]:
    """Maintenance runs, oldest first (the newest ``limit`` if given)."""
    names = sorted(f.name for f in store.list(HISTORY_FOLDER) if f.name.endswith(".json"))
    if limit is not None:
        names = names[-limit:]
    return [json.loads(store.read(f"{HISTORY_FOLDER}/{n}")) for n in names]
