"""The log: topics, their metadata and their partitions, on one store.

``_topic.json`` holds a topic's name, creation time, id (KIP-516: a fresh one
each time the name is created; see ``paths``) and configuration under Kafka's
key names. It is written last on create (after every partition's empty
manifest version 0), so a topic is visible only once complete; on delete it is
removed first, so a topic is never half visible. ``alter_topic`` never
rewrites it: each change is a new ``_config/<version>.json`` created
exclusively (the newest wins), so two concurrent alters cannot lose either
change, and a crash mid-alter leaves the old or the new config, nothing between.
An alter is the optimistic loop of ``commit.run``: read the newest config
version, build the change on it, create the next version, and on a lost race
read again and re-apply the change on top of the winner's.

:class:`Log` also hands out the store's small documents kept by other layers:
consumer groups' offsets (``group_offsets``) and the maintenance history
(``maintenance_history``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from conf.errors import ConfigError
from conf.topic import TopicConfig
from log_layout import commit, group_offsets, maintenance_history, paths, versions
from log_layout.errors import (CorruptManifest, SparklogError, TopicExists, UnknownPartition,
                               UnknownTopic)
from log_layout.hot_journal import Journals
from log_layout.partition import PartitionLog, wall_clock_ms
from log_layout.store import Store

CLUSTER_META = paths.CLUSTER_META


@dataclasses.dataclass(frozen=True)
class TopicInfo:
    name: str
    config: TopicConfig
    created_ms: int
    #: drawn at creation (Kafka's topic id, KIP-516); "" for topics made before ids
    topic_id: str = ""

    @property
    def partitions(self) -> int:
        return self.config.partitions


class Log:
    """Entry point to a store's topics. Thread-safe; one per process is plenty.

    ``topic_cache_ms`` bounds how stale a cached topic config may be (the
    gateway reads configs on every request).
    """

    def __init__(self, store: Store, *, manifest_versions_retained: int = 100,
                 topic_cache_ms: int = 1000):
        self.store = store
        self.manifest_versions_retained = manifest_versions_retained
        self._topic_cache_ms = topic_cache_ms
        self._topics: dict[str, tuple[float, TopicInfo]] = {}
        #: topic -> partition number -> its PartitionLog (by topic: a read hands them configs)
        self._partitions: dict[str, dict[int, PartitionLog]] = {}
        self._lock = threading.Lock()
        #: the hot journals' entries read or written here, shared by every partition
        self.journals = Journals(store)

    @property
    def url(self) -> str:
        return self.store.url

    def __repr__(self) -> str:
        return f"Log({self.store.url})"

    # -- cluster -----------------------------------------------------------
    def cluster_id(self) -> str:
        """A stable id of this store, created on first use."""
        doc = json.dumps({"cluster_id": uuid.uuid4().hex[:22]}).encode()
        self.store.put_exclusive(CLUSTER_META, doc)
        return json.loads(self.store.read(CLUSTER_META))["cluster_id"]

    # -- topics --------------------------------------------------------------
    def create_topic(self, name: str, config: TopicConfig | Mapping[str, Any] | None = None,
                     *, now_ms: int | None = None) -> TopicInfo:
        """Create a topic; raises InvalidTopicName, ConfigError or TopicExists."""
        paths.topic_folder(name)  # a legal name, and none of the store's own (see paths)
        if not isinstance(config, TopicConfig):
            config = TopicConfig.from_kafka(config)
        if self.store.exists(paths.topic_meta(name)):
            raise TopicExists(name)
        self._clear_leftovers(name)
        created = wall_clock_ms() if now_ms is None else now_ms
        topic_id = paths.new_topic_id()
        for p in range(config.partitions):
            self._create_partition(name, p, created, topic_id)
        info = TopicInfo(name, config, created, topic_id)
        if not self.store.put_exclusive(paths.topic_meta(name), _encode_topic(info)):
            raise TopicExists(name)
        return info

    def _clear_leftovers(self, name: str) -> None:
        """Remove what a crashed ``delete_topic`` left of an earlier topic of this name.

        Without this, the new topic would adopt the old partitions' manifests (and
        serve their records) or the old config changes. Only a folder holding more
        than empty version-0 manifests is cleared: those are what a concurrent create
        of the same name writes before its ``_topic.json``, and they must survive.
        """
        if not self._has_leftovers(name):
            return
        if self.store.exists(paths.topic_meta(name)):  # created meanwhile: not leftovers
            raise TopicExists(name)
        self.store.delete_tree(name)

    def _has_leftovers(self, name: str) -> bool:
        if self.store.list(paths.topic_config_folder(name)):
            return True
        for folder in self.store.list_folders(name):
            if not folder.isdigit():
                continue
            manifests = self.store.list(f"{name}/{folder}/{paths.MANIFEST_FOLDER}")
            if any(paths.any_manifest_version(f.name) not in (0, None) for f in manifests) \
                    or any(paths.is_segment_name(f.name) for f in self.store.list(f"{name}/{folder}")):
                return True
        return False

    def _create_partition(self, topic: str, partition: int, now: int, topic_id: str) -> None:
        # Version 0 is empty; an existing one (a crashed create) is just as good.
        versions.create_first_version(self.store, topic, partition, topic_id, now)

    def topics(self) -> list[str]:
        """Names of all topics, sorted."""
        return sorted(name for name in self.store.list_folders("") if self._has_meta(name))

    def topic_names(self) -> list[str]:
        """Names of the folders that may hold a topic, sorted: one listing, without
        :meth:`topics`' read of each one's metadata (a poller reads only the new
        names; a folder a deleted topic left behind is named too, and ``topic()``
        raises UnknownTopic for it)."""
        out = []
        for name in self.store.list_folders(""):
            try:
                paths.topic_meta(name)  # refuses the store's own names
            except ValueError:
                continue
            out.append(name)
        return sorted(out)

    def _has_meta(self, name: str) -> bool:
        try:
            meta = paths.topic_meta(name)  # refuses the store's own names (InvalidTopicName)
        except ValueError:
            return False
        return self.store.exists(meta)

    def topic(self, name: str, *, refresh: bool = False) -> TopicInfo:
        """A topic's metadata; raises InvalidTopicName or UnknownTopic."""
        hit = self._topics.get(name)
        if hit is not None and not refresh and time.monotonic() - hit[0] < self._topic_cache_ms / 1e3:
            return hit[1]
        info, _version = self._read_topic(name)
        self._remember(info)
        return info

    def _remember(self, info: TopicInfo) -> None:
        """Cache ``info`` and hand its config to the topic's partitions (they never ask)."""
        self._topics[info.name] = (time.monotonic(), info)
        with self._lock:
            cached = list(self._partitions.get(info.name, {}).values())
        for p in cached:
            p.use_config(info.config)

    def _read_topic(self, name: str) -> tuple[TopicInfo, int]:
        """The topic's metadata and config version: ``_topic.json`` as created, with the
        configs of the newest ``_config/<version>.json`` if it was ever altered."""
        path = paths.topic_meta(name)
        try:
            raw = self.store.read(path)
        except FileNotFoundError:
            self._topics.pop(name, None)
            raise UnknownTopic(name) from None
        doc = _parse_topic(path, raw)
        folder = paths.topic_config_folder(name)
        numbers = sorted((v for f in self.store.list(folder)
                           if (v := paths.manifest_version(f.name)) is not None), reverse=True)
        for version in numbers:
            change = f"{folder}/{paths.topic_config_name(version)}"
            try:
                raw = self.store.read(change)
            except FileNotFoundError:  # the topic was deleted after we read _topic.json
                raise UnknownTopic(name) from None
            altered = _parse_topic(change, raw)
            # a change made for an earlier incarnation (an alter racing its delete) is not ours
            if altered.get("topic_id", "") == doc.get("topic_id", ""):
                return _topic_info(change, {**doc, "configs": altered["configs"]}), numbers[0]
        return _topic_info(path, doc), numbers[0] if numbers else 0

    def alter_topic(self, name: str, configs: Mapping[str, Any]) -> TopicInfo:
        """Change configs (Kafka names) over the current ones; partitions may grow, never
        shrink. Concurrent alters do not lose each other's changes: each change is a new
        config version created exclusively, and a loser re-applies its change on top of
        the winner's. Raises UnknownTopic, InvalidTopicName or ConfigError."""
        def build(read: tuple[TopicInfo, int]) -> TopicInfo:
            info, _version = read
            config = TopicConfig.from_kafka(configs, base=info.config)
            if config.partitions < info.config.partitions:
                raise ConfigError("partitions", config.partitions,
                                  f"partitions can only grow (topic {name!r} has "
                                  f"{info.config.partitions})")
            return TopicInfo(name, config, info.created_ms, info.topic_id)

        def attempt(read: tuple[TopicInfo, int], new: TopicInfo) -> TopicInfo | None:
            info, version = read
            for p in range(info.config.partitions, new.config.partitions):
                self._create_partition(name, p, wall_clock_ms(), info.topic_id)
            change = f"{paths.topic_config_folder(name)}/{paths.topic_config_name(version + 1)}"
            return new if self.store.put_exclusive(change, _encode_topic(new)) else None

        new = commit.run(lambda: self._read_topic(name), build, attempt)
        self._remember(new)
        return new

    def delete_topic(self, name: str) -> None:
        """Delete a topic and all its data; raises UnknownTopic."""
        self.topic(name, refresh=True)
        self.store.delete([paths.topic_meta(name)])
        self._topics.pop(name, None)
        with self._lock:
            self._partitions.pop(name, None)
        self.store.delete_tree(paths.topic_folder(name))

    # -- partitions ------------------------------------------------------------
    def partition(self, topic: str, partition: int) -> PartitionLog:
        """A partition of an existing topic; raises UnknownTopic or UnknownPartition."""
        info = self.topic(topic)  # cached: at most topic_cache_ms stale
        with self._lock:
            hit = self._partitions.get(topic, {}).get(partition)
        if hit is not None and hit.topic_id == info.topic_id:
            return hit
        if isinstance(partition, bool) or not isinstance(partition, int) \
                or not 0 <= partition < info.partitions:
            info = self.topic(topic, refresh=True)  # it may have grown
            if isinstance(partition, bool) or not isinstance(partition, int) \
                    or not 0 <= partition < info.partitions:
                raise UnknownPartition(topic, partition, info.partitions)
        with self._lock:
            cached = self._partitions.setdefault(topic, {})
            hit = cached.get(partition)
            if hit is None or hit.topic_id != info.topic_id:  # new, or the topic was re-created
                hit = cached[partition] = self._new_partition(info, partition)
            return hit

    def _new_partition(self, info: TopicInfo, partition: int) -> PartitionLog:
        topic = info.name
        newest = self._topics.get(topic, (0.0, info))[1]  # read meanwhile, not yet handed out
        config = newest.config if newest.topic_id == info.topic_id else info.config
        return PartitionLog(self.store, topic, partition, info.topic_id, config=config,
                            current_topic_id=lambda: self.topic(topic, refresh=True).topic_id,
                            manifest_versions_retained=self.manifest_versions_retained,
                            journals=self.journals)

    def partitions(self, topic: str) -> list[PartitionLog]:
        return [self.partition(topic, p) for p in range(self.topic(topic).partitions)]

    def compression(self, topic: str) -> str | None:
        return self.topic(topic).config.compression

    def file_delete_delay_ms(self, topic: str) -> int:
        return self.topic(topic).config.file_delete_delay_ms

    def log_append_time(self, topic: str) -> bool:
        return self.topic(topic).config.message_timestamp_type == "LogAppendTime"

    # -- small documents other layers keep in the store -----------------------
    def read_group_offsets(self, group: str) -> dict[str, Any] | None:
        """A consumer group's committed-offsets document, or None (see ``group_offsets``)."""
        return group_offsets.read_group_offsets(self.store, group)

    def write_group_offsets(self, group: str, doc: Mapping[str, Any]) -> None:
        group_offsets.write_group_offsets(self.store, group, doc)

    def groups(self) -> list[str]:
        return group_offsets.groups(self.store)

    def append_history(self, record: Mapping[str, Any]) -> None:
        """Add one maintenance run's record (see ``maintenance_history``)."""
        maintenance_history.append_history(self.store, record)

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Maintenance runs, oldest first (the newest ``limit`` if given)."""
        return maintenance_history.history(self.store, limit)


def _parse_topic(path: str, raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or not isinstance(doc.get("configs"), dict):
            raise ValueError("not a topic document")
        return doc
    except ValueError as e:
        raise CorruptManifest(path, f"{type(e).__name__}: {e}") from None


def _topic_info(path: str, doc: dict[str, Any]) -> TopicInfo:
    try:
        topic_id = doc.get("topic_id", "")
        if not isinstance(topic_id, str) or (topic_id and not _TOPIC_ID.fullmatch(topic_id)):
            raise ValueError(f"bad topic_id {topic_id!r}")
        return TopicInfo(doc["name"], TopicConfig.from_kafka(doc["configs"]),
                         int(doc["created_ms"]), topic_id)
    except (ValueError, KeyError, TypeError) as e:
        if isinstance(e, SparklogError):  # a ConfigError names the key and the value
            raise
        raise CorruptManifest(path, f"{type(e).__name__}: {e}") from None


_TOPIC_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _encode_topic(info: TopicInfo) -> bytes:
    doc = {"name": info.name, "created_ms": info.created_ms, "configs": info.config.to_kafka()}
    if info.topic_id:
        doc["topic_id"] = info.topic_id
    return json.dumps(doc, indent=1).encode()
