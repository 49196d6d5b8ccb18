"""What both sides' workloads share: latency summaries, the send-time stamp, disk usage."""

from __future__ import annotations

import os
import struct
import time

import numpy as np

VALUE_BYTES = 100
#: the end-to-end records carry their send time (perf_counter_ns) in their first 8 bytes
STAMP = struct.Struct(">q")
PAD = b"p" * (VALUE_BYTES - STAMP.size)


def stamped() -> bytes:
    return STAMP.pack(time.perf_counter_ns()) + PAD


def sent_ns(value: bytes) -> int:
    return STAMP.unpack_from(value)[0]


def summary(count: int, elapsed: float, latencies_s: list[float] | None = None, **extra) -> dict:
    """records/s, and p50/p99 in ms when latencies are given."""
    out = {"msgs_per_s": count / elapsed, "records": count, "elapsed_s": elapsed, **extra}
    if latencies_s:
        lat = np.asarray(latencies_s) * 1000
        out["p50_ms"] = float(np.percentile(lat, 50))
        out["p99_ms"] = float(np.percentile(lat, 99))
    return out


def disk_usage(files: list[str]) -> dict:
    """Bytes of ``files`` as written (apparent size) and as allocated on disk (``du``).

    A file with several names (sparklog commits a segment by hard-linking it under
    its version name) counts once, as du counts it."""
    apparent = allocated = 0
    seen: set[tuple[int, int]] = set()
    for path in files:
        st = os.stat(path)
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        apparent += st.st_size
        allocated += st.st_blocks * 512
    return {"apparent_bytes": apparent, "du_bytes": allocated, "files": len(seen)}
