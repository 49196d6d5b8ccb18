"""Small builders shared by the maintenance tests (records written through log_layout)."""

from __future__ import annotations

import pyarrow as pa

T0 = 1_700_000_000_000


def keyed(pairs: list[tuple[str, str | None]], ts: int, *, pad: int = 0) -> pa.Table:
    """Records from ``(key, value)`` pairs (value None = tombstone), all at ``ts`` ms."""
    return pa.table({
        "key": pa.array([k.encode() for k, _ in pairs], pa.binary()),
        "value": pa.array([None if v is None else v.encode().ljust(pad, b".")
                           for _, v in pairs], pa.binary()),
        "timestamp": pa.array([ts] * len(pairs), pa.int64()),
    })


def rows(plog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every live record of a partition."""
    t = plog.read_table(plog.log_start_offset())
    return list(zip(t.column("offset").to_pylist(), t.column("key").to_pylist(),
                    t.column("value").to_pylist()))
