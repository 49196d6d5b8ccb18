"""Small builders shared by the storage tests."""

from __future__ import annotations

import pyarrow as pa


def values(start: int, n: int, *, size: int = 0) -> list[bytes]:
    """``n`` distinct values ``v<start>``..; padded to ``size`` bytes when given."""
    return [f"v{i}".encode().ljust(size, b".") for i in range(start, start + n)]


def table(start: int, n: int, *, ts: int | None = None) -> pa.Table:
    """``n`` records with keys ``k<i>`` and values ``v<i>`` (and timestamps if given)."""
    cols = {"key": [f"k{i}".encode() for i in range(start, start + n)],
            "value": values(start, n)}
    if ts is not None:
        cols["timestamp"] = pa.array([ts] * n, pa.int64())
    return pa.table(cols)


def offsets_and_values(t: pa.Table) -> list[tuple[int, bytes | None]]:
    return list(zip(t.column("offset").to_pylist(), t.column("value").to_pylist()))
