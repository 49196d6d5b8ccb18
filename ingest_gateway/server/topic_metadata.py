"""What both protocols read about topics: one metadata service per gateway.

The HTTP routes (topic and partition listings, v3 configs and replicas, the console)
and the Kafka handlers (Metadata, Fetch, Produce, ListOffsets, DescribeTopicPartitions,
the group calls) ask :class:`TopicMetadata` (``Gateway.metadata``) instead of the
``Log``. It answers from the ``Log``'s topic cache (at most ``topic_cache_ms`` stale,
as before) unless ``refresh`` is asked for. Every method reads the store on a cache
miss: call it off the event loop. Auto-creating a topic is the batcher's
(``Batcher.topic_info``), not this service's.
"""

from __future__ import annotations

from typing import Any

from log_layout import (InvalidTopicName, Log, Manifest, PartitionLog, TopicInfo,
                        UnknownTopic)


class TopicMetadata:
    """Topic metadata of one gateway's store (see the module docstring)."""

    def __init__(self, log_: Log):
        self._log = log_

    @property
    def store_url(self) -> str:
        """The store's URL (for display and the brokers' log dirs)."""
        return str(self._log.url)

    def names(self) -> list[str]:
        """Every topic's name, sorted. Raises StoreError."""
        return self._log.topics()

    def topic(self, name: str, *, refresh: bool = False) -> TopicInfo:
        """A topic's metadata (id, config, partition count), from the cache unless
        ``refresh``. Raises InvalidTopicName, UnknownTopic, StoreError."""
        return self._log.topic(name, refresh=refresh)

    def partition_count(self, name: str) -> int:
        """How many partitions ``name`` has. Raises InvalidTopicName, UnknownTopic."""
        return self._log.topic(name).partitions

    def partition(self, topic: str, partition: int) -> PartitionLog:
        """One partition's log (its offsets, manifests and reads); checks it exists.
        Raises UnknownTopic, UnknownPartition, InvalidTopicName."""
        return self._log.partition(topic, partition)

    def partitions(self, topic: str) -> list[PartitionLog]:
        """Every partition's log of ``topic``. Raises UnknownTopic, InvalidTopicName."""
        return self._log.partitions(topic)

    def snapshot(self, topic: str, partition: int) -> Manifest:
        """The partition's newest committed manifest (its offsets: start, end, last
        stable). Raises UnknownTopic, UnknownPartition, StoreError."""
        return self._log.partition(topic, partition).snapshot()

    def existing(self, names: Any) -> tuple[str, ...]:
        """Those of ``names`` that are topics (an invalid name is none), in order.
        Raises StoreError."""
        out = []
        for name in names:
            try:
                self._log.topic(name)
            except (UnknownTopic, InvalidTopicName):
                continue
            out.append(name)
        return tuple(out)

    def groups(self) -> list[str]:
        """The consumer groups with offsets in the store."""
        return self._log.groups()

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Maintenance runs, oldest first (the newest ``limit`` if given)."""
        return self._log.history(limit)
