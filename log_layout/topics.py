"""The log: topics, their metadata and their partitions, on one store.

``_topic.json`` holds a topic's name, creation time, id (KIP-516: a fresh one
each time the name is created; see ``paths``) and configuration under Kafka's
key names. It is written last on create (after every partition's empty
manifest version 0), so a topic is visible only once complete; on delete it is
removed first, so a topic is never half visible. ``alter_topic`` never
rewrites it: each change is a new ``_config/<version>.json`` created
exclusively (the newest wins), so two concurrent alters cannot lose either
change, and a crash mid-alter leaves the old or the new config, nothing between.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import dataclasses

from conf.topic import TopicConfig
from log_layout import paths
from log_layout.errors import (CorruptManifest, SparklogError, TopicExists, UnknownPartition,
                               UnknownTopic)
from log_layout.manifest import Manifest
from log_layout.partition import PartitionLog, wall_clock_ms
from log_layout.store import Store, open_store

CLUSTER_META = paths.CLUSTER_META
_history_lock = threading.Lock()
_last_history_ns = 0
HISTORY_FOLDER = f"{paths.MAINTENANCE_FOLDER}/history"


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
        self._partitions: dict[tuple[str, int], PartitionLog] = {}
        self._lock = threading.Lock()

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
        m = Manifest(topic=topic, partition=partition, version=0, committed_ms=now)
        # Version 0 is empty; an existing one (a crashed create) is just as good.
        self.store.put_exclusive(f"{paths.manifest_folder(topic, partition)}/"
                                 f"{paths.manifest_name(0, topic_id)}", m.to_json())

    def topics(self) -> list[str]:
        """Names of all topics, sorted."""
        return sorted(name for name in self.store.list_folders("") if self._has_meta(name))

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
        self._topics[name] = (time.monotonic(), info)
        return info

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
        versions = sorted((v for f in self.store.list(folder)
                           if (v := paths.manifest_version(f.name)) is not None), reverse=True)
        for version in versions:
            change = f"{folder}/{paths.topic_config_name(version)}"
            try:
                raw = self.store.read(change)
            except FileNotFoundError:  # the topic was deleted after we read _topic.json
                raise UnknownTopic(name) from None
            altered = _parse_topic(change, raw)
            # a change made for an earlier incarnation (an alter racing its delete) is not ours
            if altered.get("topic_id", "") == doc.get("topic_id", ""):
                return _topic_info(change, {**doc, "configs": altered["configs"]}), versions[0]
        return _topic_info(path, doc), versions[0] if versions else 0

    def alter_topic(self, name: str, configs: Mapping[str, Any]) -> TopicInfo:
        """Change configs (Kafka names) over the current ones; partitions may grow, never
        shrink. Concurrent alters do not lose each other's changes: each change is a new
        config version created exclusively, and a loser re-applies its change on top of
        the winner's. Raises UnknownTopic, InvalidTopicName or ConfigError."""
        while True:
            info, version = self._read_topic(name)
            config = TopicConfig.from_kafka(configs, base=info.config)
            if config.partitions < info.config.partitions:
                from conf.errors import ConfigError

                raise ConfigError("partitions", config.partitions,
                                  f"partitions can only grow (topic {name!r} has "
                                  f"{info.config.partitions})")
            for p in range(info.config.partitions, config.partitions):
                self._create_partition(name, p, wall_clock_ms(), info.topic_id)
            new = TopicInfo(name, config, info.created_ms, info.topic_id)
            change = f"{paths.topic_config_folder(name)}/{paths.topic_config_name(version + 1)}"
            if self.store.put_exclusive(change, _encode_topic(new)):
                self._topics[name] = (time.monotonic(), new)
                return new

    def delete_topic(self, name: str) -> None:
        """Delete a topic and all its data; raises UnknownTopic."""
        self.topic(name, refresh=True)
        self.store.delete([paths.topic_meta(name)])
        self._topics.pop(name, None)
        with self._lock:
            for key in [k for k in self._partitions if k[0] == name]:
                del self._partitions[key]
        self.store.delete_tree(paths.topic_folder(name))

    # -- partitions ------------------------------------------------------------
    def partition(self, topic: str, partition: int) -> PartitionLog:
        """A partition of an existing topic; raises UnknownTopic or UnknownPartition."""
        key = (topic, partition)
        info = self.topic(topic)  # cached: at most topic_cache_ms stale
        with self._lock:
            hit = self._partitions.get(key)
        if hit is not None and hit.topic_id == info.topic_id:
            return hit
        if isinstance(partition, bool) or not isinstance(partition, int) \
                or not 0 <= partition < info.partitions:
            info = self.topic(topic, refresh=True)  # it may have grown
            if isinstance(partition, bool) or not isinstance(partition, int) \
                    or not 0 <= partition < info.partitions:
                raise UnknownPartition(topic, partition, info.partitions)
        with self._lock:
            hit = self._partitions.get(key)
            if hit is None or hit.topic_id != info.topic_id:  # new, or the topic was re-created
                hit = self._partitions[key] = PartitionLog(self, topic, partition, info.topic_id)
            return hit

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
        """A consumer group's committed-offsets document, or None."""
        try:
            return json.loads(self.store.read(paths.group_offsets(group)))
        except FileNotFoundError:
            return None

    def write_group_offsets(self, group: str, doc: Mapping[str, Any]) -> None:
        self.store.put_replace(paths.group_offsets(group), json.dumps(doc).encode())

    def groups(self) -> list[str]:
        return sorted(f.name[:-5] for f in self.store.list(paths.GROUPS_FOLDER)
                      if f.name.endswith(".json"))

    def append_history(self, record: Mapping[str, Any]) -> None:
        """Add one maintenance run's metrics (one file per run: object stores cannot append)."""
        # Nanoseconds, never repeating within a process, so runs list in the order they ran.
        global _last_history_ns
        with _history_lock:
            ns = _last_history_ns = max(time.time_ns(), _last_history_ns + 1)
        name = f"{HISTORY_FOLDER}/{ns:020d}-{uuid.uuid4().hex[:8]}.json"
        self.store.put_exclusive(name, json.dumps(dict(record)).encode())

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Maintenance runs, oldest first (the newest ``limit`` if given)."""
        names = sorted(f.name for f in self.store.list(HISTORY_FOLDER) if f.name.endswith(".json"))
        if limit is not None:
            names = names[-limit:]
        return [json.loads(self.store.read(f"{HISTORY_FOLDER}/{n}")) for n in names]


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


def open_log(url: str, *, storage_options: Mapping[str, Any] | None = None,
             fsync: bool = True, manifest_versions_retained: int = 100) -> Log:
    """Open the log stored at ``url`` (see ``store.open_store``)."""
    return Log(open_store(url, storage_options=storage_options, fsync=fsync),
               manifest_versions_retained=manifest_versions_retained)
