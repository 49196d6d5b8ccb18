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

import dataclasses
from typing import Any

from log_layout import (InvalidTopicName, Log, Manifest, PartitionLog, TopicInfo,
                        UnknownTopic)
from log_layout.leader_epochs import epoch_at

#: what an offset lookup may ask for besides a timestamp (Kafka's ListOffsets values)
EARLIEST, LATEST = -2, -1


@dataclasses.dataclass(frozen=True)
class ListedOffset:
    """One partition's answer to an offset lookup, as Kafka's ListOffsets gives it:
    the record's timestamp (ms; -1 unless looked up by time), its offset (-1: no record
    at or after the time) and the leader epoch it was written under (-1 with no offset;
    at the log end, the latest epoch)."""

    timestamp_ms: int
    offset: int
    leader_epoch: int


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

    def list_offset(self, topic: str, partition: int, spec: int, *,
                    committed: bool = False) -> ListedOffset:
        """Kafka's ListOffsets for one partition: ``spec`` :data:`EARLIEST` (the log
        start), :data:`LATEST` (the log end; the last stable offset when
        ``committed``) or a timestamp in ms (the first record at or after it). Raises
        UnknownTopic, UnknownPartition, InvalidTopicName, StoreError."""
        plog = self._log.partition(topic, partition)
        m = plog.snapshot()
        if spec == EARLIEST:
            stamp, offset = -1, m.log_start_offset
        elif spec == LATEST:
            stamp, offset = -1, m.last_stable_offset if committed else m.next_offset
        else:
            stamp, offset = _by_time(plog, m, spec)
        return ListedOffset(stamp, offset, epoch_at(m.epochs, offset) if offset >= 0 else -1)

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


def _by_time(plog: PartitionLog, manifest: Manifest, ts: int) -> tuple[int, int]:
    """(timestamp, offset) of the first record at or after ``ts``; (-1, -1) if none."""
    offset = plog.offset_for_timestamp(ts, manifest=manifest)
    if offset is None:
        return -1, -1
    table = plog.read_table(offset, offset + 1, manifest=manifest)
    if table.num_rows == 0:
        return -1, offset
    stamp = table.column("timestamp")[0].value  # microseconds since the epoch
    return stamp // 1000, offset
