"""What the web console (``http.console``) and the store-read metrics show, gathered from
the gateway's engine: topics and partitions from their manifests, consumer groups from
the coordinator (or the store), maintenance runs from the store's history.

Every function here does store I/O and runs off the event loop (the console's routes
and ``/metrics`` call them on worker threads). The metric families (:func:`collect`)
are computed at each scrape; Kafka's broker and kafka-exporter names, sparklog's prefix.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from conf.errors import SparklogError
from ingest_gateway.server.groups.state import GroupDescription
from ingest_gateway.server.groups.store import describe_from_store
from ingest_gateway.server.topic_metadata import TopicMetadata
from log_layout.errors import UnknownTopic

#: how long the maintenance totals of ``/metrics`` are reused before the history is read again
MAINTENANCE_CACHE_S = 30.0


@dataclasses.dataclass(frozen=True)
class PartitionRow:
    """One partition as its newest manifest has it."""
    topic: str
    partition: int
    log_start: int
    log_end: int
    bytes: int
    segments: int
    leader_epoch: int
    last_commit_ms: int

    @property
    def records(self) -> int:
        """Offsets between log start and end (compacted-away offsets included)."""
        return self.log_end - self.log_start


@dataclasses.dataclass(frozen=True)
class TopicRow:
    name: str
    partitions: tuple[PartitionRow, ...]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    @property
    def segments(self) -> int:
        return sum(p.segments for p in self.partitions)


def partition_rows(meta: TopicMetadata, topic: str) -> tuple[PartitionRow, ...]:
    """Every partition of ``topic`` from its newest manifest; raises UnknownTopic or
    InvalidTopicName."""
    rows = []
    for plog in meta.partitions(topic):
        m = plog.snapshot()
        rows.append(PartitionRow(topic, plog.partition, m.log_start_offset, m.next_offset,
                                 sum(s.bytes for s in m.segments), len(m.segments),
                                 m.leader_epoch, m.committed_ms))
    return tuple(rows)


def topic_rows(meta: TopicMetadata) -> list[TopicRow]:
    """Every topic with its partitions (a topic deleted meanwhile is left out)."""
    out = []
    for name in meta.names():
        try:
            out.append(TopicRow(name, partition_rows(meta, name)))
        except UnknownTopic:
            continue
    return out


def topic_configs(meta: TopicMetadata, topic: str, defaults: Any) -> list[tuple[str, str, bool]]:
    """(key, value, overridden) for every config of ``topic`` but ``partitions`` (shown
    as the partitions themselves, and no config in Kafka); ``overridden``: differs from
    the gateway's ``topic.*`` defaults. Raises UnknownTopic or InvalidTopicName."""
    mine = meta.topic(topic, refresh=True).config.to_kafka()
    base = defaults.to_kafka()
    return [(k, str(v), base.get(k) != v) for k, v in sorted(mine.items()) if k != "partitions"]


def describe_group(state: Any, group: str) -> GroupDescription:
    """Members, assignment and lag of ``group``: from this gateway's coordinator if it
    has one (members and heartbeats), else from the store alone. Records the group's
    total lag in the console's history. Raises InvalidGroupId or UnknownGroup."""
    hub = state.gateway.started_hub
    d = hub.coordinator.describe(group) if hub is not None \
        else describe_from_store(state.log, group)
    state.metrics.history.record_lag(group, total_lag(d))
    return d


def describe_groups(state: Any) -> list[GroupDescription]:
    """Every group (live here or with offsets in the store), described; a group that
    vanished or cannot be described right now is left out."""
    hub = state.gateway.started_hub
    names = hub.coordinator.groups() if hub is not None else state.gateway.metadata.groups()
    out = []
    for g in names:
        try:
            out.append(describe_group(state, g))
        except SparklogError:
            continue
    return out


def sample_live_lags(state: Any) -> None:
    """Record the total lag of every group this gateway coordinates with members (the
    console's periodic sampler; groups elsewhere are sampled when looked at)."""
    hub = state.gateway.started_hub
    if hub is None:
        return
    for g in hub.coordinator.live_groups():
        try:
            describe_group(state, g)
        except SparklogError:
            continue


def total_lag(d: GroupDescription) -> int:
    return sum(p.lag or 0 for p in d.partitions)


def maintenance_runs(meta: TopicMetadata, limit: int = 100) -> list[dict[str, Any]]:
    """The newest ``limit`` maintenance runs, newest first."""
    return list(reversed(meta.history(limit)))


class MaintenanceTotals:
    """Runs, bytes reclaimed and files deleted over the whole history, reread at most
    every MAINTENANCE_CACHE_S (the history only grows; reading it is a listing and a
    read per run)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at = -MAINTENANCE_CACHE_S
        self._value = (0, 0, 0)

    def get(self, meta: TopicMetadata) -> tuple[int, int, int]:
        with self._lock:
            if time.monotonic() - self._at >= MAINTENANCE_CACHE_S:
                runs = [r for r in meta.history() if not r.get("dry_run")]
                self._value = (len(runs),
                               sum(max(0, int(r.get("bytes_before", 0)) -
                                       int(r.get("bytes_after", 0))) for r in runs),
                               sum(int(r.get("files_deleted", 0)) for r in runs))
                self._at = time.monotonic()
            return self._value


def collect(state: Any, maintenance: MaintenanceTotals) -> Iterable[Metric]:
    """The metric families read from the store at scrape time: per-partition log start,
    log end, size and segments; per group and partition the committed offset and lag;
    maintenance runs, bytes reclaimed and files deleted."""
    labels = ["topic", "partition"]
    start = GaugeMetricFamily("sparklog_log_start_offset", "first offset of the partition's "
                              "log", labels=labels)
    end = GaugeMetricFamily("sparklog_log_end_offset", "the partition's high watermark: the "
                            "next offset to be written", labels=labels)
    size = GaugeMetricFamily("sparklog_log_size_bytes", "bytes of the partition's segments",
                             labels=labels)
    segments = GaugeMetricFamily("sparklog_log_segments", "segments of the partition",
                                 labels=labels)
    for t in topic_rows(state.gateway.metadata):
        for p in t.partitions:
            key = [p.topic, str(p.partition)]
            start.add_metric(key, p.log_start)
            end.add_metric(key, p.log_end)
            size.add_metric(key, p.bytes)
            segments.add_metric(key, p.segments)
    yield from (start, end, size, segments)
    glabels = ["group", "topic", "partition"]
    lag = GaugeMetricFamily("sparklog_consumergroup_lag", "high watermark minus the group's "
                            "committed offset", labels=glabels)
    current = GaugeMetricFamily("sparklog_consumergroup_current_offset", "the group's "
                                "committed offset (the next to read)", labels=glabels)
    members = GaugeMetricFamily("sparklog_consumergroup_members", "members of the group's "
                                "generation", labels=["group"])
    for d in describe_groups(state):
        members.add_metric([d.group], len(d.members))
        for p in d.partitions:
            if p.committed is None:
                continue
            key = [d.group, p.topic, str(p.partition)]
            current.add_metric(key, p.committed)
            lag.add_metric(key, p.lag or 0)
    yield from (lag, current, members)
    runs, reclaimed, files = maintenance.get(state.gateway.metadata)
    yield CounterMetricFamily("sparklog_maintenance_runs", "maintenance runs recorded in the "
                              "store's history (not dry runs)", value=runs)
    yield CounterMetricFamily("sparklog_maintenance_bytes_reclaimed", "segment bytes removed "
                              "by compaction, retention and roll-up", value=reclaimed)
    yield CounterMetricFamily("sparklog_maintenance_files_deleted", "files deleted by vacuum",
                              value=files)
