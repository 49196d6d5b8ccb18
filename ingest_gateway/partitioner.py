"""Kafka's default partitioning: murmur2 of the key, else sticky.

:func:`murmur2` is a bit-exact port of ``org.apache.kafka.common.utils.Utils.murmur2``
(seed ``0x9747b28c``, 32-bit signed arithmetic, the same tail handling), and
:func:`partition_for_key` is Kafka's ``Utils.toPositive(murmur2(key)) % numPartitions``,
so a key lands in the same partition number as it would in Apache Kafka.
"""

from __future__ import annotations

from collections.abc import Callable

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
    """Keyless records: Kafka's sticky partitioner, moving on when the batch closes.

    As in Kafka (KIP-480), keyless records stay on one partition until that
    partition's open batch is closed (its flush starts, or ``batch.size`` is reached:
    the batcher calls :meth:`batch_closed`); then the next partition round-robin
    takes over, skipping partitions whose flush is still under way as Kafka's
    adaptive partitioning (KIP-794) skips slow ones. One group of keyless
    requests thus makes one segment and one commit, not one per partition, and
    a new batch does not queue behind a flush in flight while a partition is free.
    """

    def __init__(self, busy: Callable[[str, int], bool] = lambda _topic, _partition: False):
        self._current: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        self._busy = busy

    def next(self, topic: str, partitions: int) -> int:
        """The partition for the next keyless request (or record run) of ``topic``."""
        self._counts[topic] = partitions
        p = self._current.get(topic)
        if p is None or p >= partitions:
            p = self._current[topic] = self._after(topic, -1, partitions)
        return p

    def batch_closed(self, topic: str, partition: int) -> None:
        """``partition``'s open batch was closed: the next keyless records move on."""
        if self._current.get(topic) == partition:
            self._current[topic] = self._after(topic, partition, self._counts[topic])

    def _after(self, topic: str, partition: int, partitions: int) -> int:
        for step in range(1, partitions + 1):
            p = (partition + step) % partitions
            if not self._busy(topic, p):
                return p
        return (partition + 1) % partitions
