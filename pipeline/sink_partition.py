"""Which partition each row the sink writes goes to: Kafka's default partitioner.

A row's ``partition`` column wins; else a keyed row goes to
``toPositive(murmur2(key)) % partitions`` -- Kafka's Java client's choice, so a key
lands where a Kafka producer (and sparklog's gateway and ``Producer``) put it -- and
keyless rows are sticky (KIP-480): one task's keyless rows of one input batch go to
one partition, the next batch to the next one round-robin, starting at the task's
partition id so tasks spread out.

Why a second murmur2 and not ``ingest_gateway.partitioner``: the layers
(tests/test_architecture.py) let ``pipeline`` import ``log_layout`` and ``conf`` only,
and the gateway's version hashes one ``bytes`` at a time in Python (about 2 us a key);
a Spark task hashes whole Arrow columns, so this one is vectorised over the column
with numpy. tests/pipeline/test_sink.py checks it bit for bit against the gateway's
(every tail length, random keys). The right home of both is a module ``log_layout``
owns (a key's partition is part of what a topic means); moving it is a review decision.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_M = np.uint32(0x5BD1E995)
_SEED = 0x9747B28C


def murmur2(keys: pa.Array) -> np.ndarray:
    """Kafka's murmur2 of each non-null value of binary ``keys`` as int32 (nulls: 0)."""
    keys = keys.cast(pa.binary()) if keys.type != pa.binary() else keys
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    keys = pa.concat_arrays([keys]) if keys.offset else keys  # buffers from 0
    bufs = keys.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32, count=n + 1).astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None \
        else np.zeros(0, dtype=np.uint8)
    data = np.concatenate([data, np.zeros(4, dtype=np.uint8)])  # tail reads stay inside
    start, length = offsets[:-1], offsets[1:] - offsets[:-1]
    with np.errstate(over="ignore"):
        h = (np.uint32(_SEED) ^ length.astype(np.uint32)).astype(np.uint32)
        words = length // 4
        for i in range(int(words.max()) if n else 0):
            rows = np.nonzero(words > i)[0]
            at = start[rows] + 4 * i
            k = (data[at].astype(np.uint32) | (data[at + 1].astype(np.uint32) << 8)
                 | (data[at + 2].astype(np.uint32) << 16) | (data[at + 3].astype(np.uint32) << 24))
            k = k * _M
            k ^= k >> np.uint32(24)
            k = k * _M
            h[rows] = (h[rows] * _M) ^ k
        tail = start + words * 4
        rest = length & 3
        for r in (3, 2, 1):  # Kafka's switch falls through: 3 takes 2 and 1 too
            rows = np.nonzero(rest >= r)[0]
            h[rows] ^= data[tail[rows] + (r - 1)].astype(np.uint32) << np.uint32(8 * (r - 1))
        rows = np.nonzero(rest >= 1)[0]
        h[rows] = h[rows] * _M
        h ^= h >> np.uint32(13)
        h = h * _M
        h ^= h >> np.uint32(15)
    out = h.view(np.int32).copy()
    out[np.asarray(keys.is_null())] = 0
    return out


def key_partitions(keys: pa.Array, partitions: int) -> np.ndarray:
    """Kafka's ``toPositive(murmur2(key)) % partitions`` for each key."""
    return (murmur2(keys).astype(np.int64) & 0x7FFFFFFF) % partitions


class Assigner:
    """Partitions for one task's rows of one topic (see the module docstring)."""

    def __init__(self, first_sticky: int):
        self._sticky: dict[str, int] = {}
        self._first = first_sticky

    def assign(self, topic: str, partitions: int, keys: pa.Array | None,
               explicit: pa.Array | None) -> np.ndarray:
        """The partition of each row: ``explicit`` where not null, else by key, else
        sticky. ``explicit`` values are not range-checked here (the caller does)."""
        n = len(keys) if keys is not None else len(explicit) if explicit is not None else 0
        sticky = self._sticky.get(topic, self._first) % partitions
        self._sticky[topic] = sticky + 1  # the next batch's keyless rows move on
        out = np.full(n, sticky, dtype=np.int64)
        if keys is not None and keys.null_count < len(keys):
            keyed = np.asarray(keys.is_valid())
            out[keyed] = key_partitions(keys.filter(pa.array(keyed)), partitions)
        if explicit is not None and explicit.null_count < len(explicit):
            given = np.asarray(explicit.is_valid())
            out[given] = pc.filter(explicit, pa.array(given)).to_numpy().astype(np.int64)
        return out
