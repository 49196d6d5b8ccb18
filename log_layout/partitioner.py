"""Kafka's default partitioner for keyed records: which partition a key goes to.

:func:`murmur2` is a bit-exact port of ``org.apache.kafka.common.utils.Utils.murmur2``
(seed ``0x9747b28c``, 32-bit signed arithmetic, the same tail handling), and
:func:`partition_for_key` is Kafka's ``Utils.toPositive(murmur2(key)) % numPartitions``,
so a key lands in the same partition number as it would in Apache Kafka. A key's
partition is part of what a topic means, so it lives here, for every writer: the
gateway and the Producer hash one key at a time (:func:`partition_for_key`, ~2 us),
the Spark sink whole Arrow columns (:func:`murmur2_column`, vectorised with numpy).
Keyless records are each writer's own policy (the gateway's sticky partitioner,
``ingest_gateway.partitioner``; the sink's, ``pipeline.sink_partition``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF
_M32 = np.uint32(_M)


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as a signed 32-bit int (Java's ``int``)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[n4 + 2] << 16
    if rest >= 2:
        h ^= data[n4 + 1] << 8
    if rest >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's Java client picks for a non-null ``key``."""
    return to_positive(murmur2(key)) % partitions


def murmur2_column(keys: pa.Array) -> np.ndarray:
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
            k = k * _M32
            k ^= k >> np.uint32(24)
            k = k * _M32
            h[rows] = (h[rows] * _M32) ^ k
        tail = start + words * 4
        rest = length & 3
        for r in (3, 2, 1):  # Kafka's switch falls through: 3 takes 2 and 1 too
            rows = np.nonzero(rest >= r)[0]
            h[rows] ^= data[tail[rows] + (r - 1)].astype(np.uint32) << np.uint32(8 * (r - 1))
        rows = np.nonzero(rest >= 1)[0]
        h[rows] = h[rows] * _M32
        h ^= h >> np.uint32(13)
        h = h * _M32
        h ^= h >> np.uint32(15)
    out = h.view(np.int32).copy()
    out[np.asarray(keys.is_null())] = 0
    return out


def key_partitions(keys: pa.Array, partitions: int) -> np.ndarray:
    """Kafka's ``toPositive(murmur2(key)) % partitions`` for each key."""
    return (murmur2_column(keys).astype(np.int64) & 0x7FFFFFFF) % partitions
