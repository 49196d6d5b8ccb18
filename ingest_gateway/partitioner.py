"""Kafka's default partitioning: murmur2 of the key, else sticky.

:func:`murmur2` is a bit-exact port of ``org.apache.kafka.common.utils.Utils.murmur2``
(seed ``0x9747b28c``, 32-bit signed arithmetic, the same tail handling), and
:func:`partition_for_key` is Kafka's ``Utils.toPositive(murmur2(key)) % numPartitions``,
so a key lands in the same partition number as it would in Apache Kafka.
"""

from __future__ import annotations

import itertools

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


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


class StickyPartitioner:
    """Keyless records: one partition per batch, moving round-robin between batches.

    Kafka's sticky partitioner keeps a partition until its batch is sent; the
    gateway's unit of batching is a request, so each keyless request (and each
    client batch) goes whole to the next partition.
    """

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count] = {}

    def next(self, topic: str, partitions: int) -> int:
        counter = self._counters.get(topic)
        if counter is None:
            counter = self._counters.setdefault(topic, itertools.count())
        return next(counter) % partitions
