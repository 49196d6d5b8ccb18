"""The gateway's sticky partitioner for keyless records (:class:`StickyPartitioner`);
keyed records go by ``log_layout.partitioner`` (Kafka's murmur2, shared with every
writer of the log).
"""

from __future__ import annotations

from collections.abc import Callable


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
