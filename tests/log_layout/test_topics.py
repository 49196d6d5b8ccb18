"""Topics on every backend: create, list, describe, alter, delete; bad names and configs."""

from __future__ import annotations

import threading

import pyarrow as pa

import pytest

from conf import ConfigError, TopicConfig
from log_layout import (InvalidTopicName, SparklogError, TopicExists, UnknownPartition,
                        UnknownTopic, open_log)
from tests.conftest import on_local_store

BAD_NAMES = ["", ".", "..", "a/b", "/", "../etc", "x" * 250, "white space", "ümlaut", "a\\b",
             "tab\t", "nul\x00", "newline\n", "\nnewline", "digit\u0661"]


def test_create_list_describe(log):
    assert log.topics() == []
    info = log.create_topic("orders", {"partitions": 3, "retention.ms": "3600000",
                                       "cleanup.policy": "compact"}, now_ms=1234)
    assert info.partitions == 3 and info.created_ms == 1234
    log.create_topic("a.b_c-1")
    assert log.topics() == ["a.b_c-1", "orders"]
    got = open_log(log.url, storage_options=getattr(log.store, "storage_options", None)) \
        .topic("orders")  # a second Log sees the same metadata
    assert got.config == TopicConfig.from_kafka({"partitions": 3, "retention.ms": 3600000,
                                                 "cleanup.policy": "compact"})
    assert got.config.to_kafka()["retention.ms"] == "3600000"
    assert [p.partition for p in log.partitions("orders")] == [0, 1, 2]
    for p in log.partitions("orders"):
        assert p.high_watermark() == 0 and p.log_start_offset() == 0
    assert len("x" * 249) == 249
    log.create_topic("x" * 249)  # the longest legal name


@on_local_store
def test_create_twice_and_unknown(log):
    log.create_topic("t")
    with pytest.raises(TopicExists, match="'t' already exists"):
        log.create_topic("t", {"partitions": 2})
    with pytest.raises(UnknownTopic, match="'nope' does not exist"):
        log.topic("nope")
    with pytest.raises(UnknownTopic):
        log.partition("nope", 0)
    with pytest.raises(UnknownTopic):
        log.delete_topic("nope")
    with pytest.raises(UnknownTopic):
        log.alter_topic("nope", {"retention.ms": 1})
    for bad in (1, -1, "0", None, True):
        with pytest.raises(UnknownPartition) as e:
            log.partition("t", bad)
        assert e.value.partitions == 1


@pytest.mark.parametrize("name", BAD_NAMES, ids=lambda n: repr(n[:12]))
@on_local_store
def test_invalid_topic_names(log, name):
    for call in (lambda: log.create_topic(name), lambda: log.topic(name),
                 lambda: log.partition(name, 0), lambda: log.delete_topic(name),
                 lambda: log.alter_topic(name, {})):
        with pytest.raises(InvalidTopicName) as e:
            call()
        assert e.value.key == "topic" and e.value.value == name
        assert isinstance(e.value, SparklogError)
    assert log.topics() == []


def test_invalid_topic_name_messages():
    for name, words in [("", "empty"), ("x" * 250, "250"), ("..", "'..'"), ("a/b", "only contain"),
                        (7, "string")]:
        with pytest.raises(InvalidTopicName, match=words):
            open_log("memory://names").create_topic(name)


@on_local_store
def test_bad_configs_name_key_and_value(log):
    with pytest.raises(ConfigError) as e:
        log.create_topic("t", {"retention.ms": "soon"})
    assert (e.value.key, e.value.value) == ("retention.ms", "soon")
    assert "retention.ms" in str(e.value) and "'soon'" in str(e.value)
    with pytest.raises(ConfigError, match="unknown topic config"):
        log.create_topic("t", {"retention.hours": 1})
    for key, value in [("partitions", 0), ("cleanup.policy", "shred"), ("compression.type", "brotli"),
                       ("min.cleanable.dirty.ratio", 2), ("partitions", 10_001)]:
        with pytest.raises(ConfigError) as e:
            log.create_topic("t", {key: value})
        assert e.value.key == key
    assert log.topics() == []  # nothing half created is visible


def test_alter_topic(log):
    log.create_topic("t", {"partitions": 2})
    info = log.alter_topic("t", {"retention.ms": 5000, "partitions": 4})
    assert info.partitions == 4 and info.config.retention_ms == 5000
    assert log.topic("t", refresh=True).config.retention_ms == 5000
    assert [p.high_watermark() for p in log.partitions("t")] == [0, 0, 0, 0]
    log.partition("t", 3).claim("w").append(pa_table(1))
    with pytest.raises(ConfigError, match="only grow"):
        log.alter_topic("t", {"partitions": 3})
    with pytest.raises(ConfigError):
        log.alter_topic("t", {"retention.ms": "x"})
    assert log.topic("t", refresh=True).config.retention_ms == 5000


def test_partition_cache_sees_growth_from_another_log(log):
    log.create_topic("t")
    other = open_log(log.url, storage_options=getattr(log.store, "storage_options", None))
    other.topic("t")
    log.alter_topic("t", {"partitions": 2})
    assert other.partition("t", 1).high_watermark() == 0


@on_local_store
def test_a_partition_is_handed_each_config_its_log_reads(log):
    """A partition never asks its log: the log hands it every newer config it reads,
    from its own alters at once and from another process's on its next read."""
    log.create_topic("t")
    part = log.partition("t", 0)
    w = part.claim("w")
    log.alter_topic("t", {"message.timestamp.type": "LogAppendTime"})
    assert part.config().message_timestamp_type == "LogAppendTime"
    w.append(pa.table({"value": [b"v"], "timestamp": pa.array([5], pa.int64())}), now_ms=99)
    assert part.read_table(0).column("timestamp").cast(pa.int64()).to_pylist() == [99_000]
    other = open_log(log.url, storage_options=getattr(log.store, "storage_options", None))
    other.alter_topic("t", {"compression.type": "zstd"})
    assert part.config().compression is None  # not read yet
    log.topic("t", refresh=True)
    assert part.config().compression == "zstd" and log.partition("t", 0) is part


def test_delete_topic(log):
    log.create_topic("t", {"partitions": 2})
    log.partition("t", 1).claim("w").append(pa_table(3))
    log.delete_topic("t")
    assert log.topics() == []
    with pytest.raises(UnknownTopic):
        log.partition("t", 1)
    log.create_topic("t")  # the name is free again, and the topic starts empty
    assert log.partition("t", 0).high_watermark() == 0
    with pytest.raises(UnknownPartition):
        log.partition("t", 1)


def test_create_topic_racing_itself(log):
    """Eight threads create the same topic: exactly one wins, the rest get TopicExists."""
    results: list[object] = []
    barrier = threading.Barrier(8)

    def create(i):
        barrier.wait()
        try:
            results.append(log.create_topic("raced", {"partitions": 1 + i % 3}))
        except TopicExists as e:
            results.append(e)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if not isinstance(r, TopicExists)]
    assert len(results) == 8 and len(winners) == 1
    n = winners[0].partitions
    assert log.topic("raced", refresh=True).partitions == n
    for p in log.partitions("raced"):
        assert p.claim("w").append(pa_table(2)).base_offset == 0


def test_group_offsets_and_history(log):
    assert log.read_group_offsets("g1") is None and log.groups() == []
    log.write_group_offsets("g1", {"t": {"0": 5}})
    log.write_group_offsets("g1", {"t": {"0": 7}})
    assert log.read_group_offsets("g1") == {"t": {"0": 7}} and log.groups() == ["g1"]
    with pytest.raises(InvalidTopicName):
        log.write_group_offsets("../x", {})
    log.append_history({"job": "retention", "n": 1})
    log.append_history({"job": "compaction", "n": 2})
    assert [h["n"] for h in log.history()] == [1, 2]
    assert log.cluster_id() == log.cluster_id()


def pa_table(n: int):
    return pa.table({"value": [b"x"] * n})


def test_recreate_after_a_crashed_delete_starts_empty(log):
    """delete_topic removes _topic.json first; if it dies before the data is gone, creating
    the topic again must not adopt the old partitions."""
    log.create_topic("t", {"partitions": 2})
    log.partition("t", 0).claim("w").append(pa_table(3))
    log.store.delete(["t/_topic.json"])  # the crash: metadata gone, data left
    log.create_topic("t", {"partitions": 2})
    fresh = open_log(log.url, storage_options=getattr(log.store, "storage_options", None))
    for p in fresh.partitions("t"):
        assert p.high_watermark() == 0 and p.snapshot().version == 0
        assert p.orphans() == [] and p.unreferenced(0) == []


def test_create_after_a_crashed_create_reuses_empty_manifests(log):
    log.create_topic("t", {"partitions": 2})
    log.store.delete(["t/_topic.json"])  # as if the create died before its last step
    log.create_topic("t", {"partitions": 3})
    assert [p.high_watermark() for p in log.partitions("t")] == [0, 0, 0]


def test_concurrent_alters_lose_no_change(log):
    """Eight threads each change a different config at once: every change survives."""
    log.create_topic("t")
    keys = [("retention.ms", 1000), ("retention.bytes", 2000), ("segment.bytes", 3000),
            ("segment.ms", 4000), ("min.compaction.lag.ms", 5000),
            ("delete.retention.ms", 6000), ("max.message.bytes", 7000),
            ("file.delete.delay.ms", 8000)]
    barrier = threading.Barrier(len(keys))
    errors = []

    def alter(key, value):
        try:
            other = open_log(log.url, storage_options=getattr(log.store, "storage_options", None))
            barrier.wait()
            other.alter_topic("t", {key: value})
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=alter, args=kv) for kv in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = log.topic("t", refresh=True).config.to_kafka()
    assert {k: got[k] for k, _ in keys} == {k: str(v) for k, v in keys}


def test_recreate_after_a_crashed_delete_forgets_old_configs(log):
    log.create_topic("t")
    log.alter_topic("t", {"retention.ms": 5})
    log.store.delete(["t/_topic.json"])  # crashed delete
    assert log.create_topic("t").config.retention_ms == 604_800_000
    assert log.topic("t", refresh=True).config.retention_ms == 604_800_000


def test_a_long_lived_log_follows_a_recreated_topic(log):
    log.create_topic("t")
    old = open_log(log.url, storage_options=getattr(log.store, "storage_options", None))
    w = old.partition("t", 0).claim("w")
    for i in range(4):
        w.append(pa_table(1))
    assert old.partition("t", 0).high_watermark() == 4  # caches version 5
    log.delete_topic("t")
    log.create_topic("t")
    log.partition("t", 0).claim("w2").append(pa_table(2))  # versions 0..2
    assert old.partition("t", 0).high_watermark() == 2
    assert old.partition("t", 0).read_table(0).num_rows == 2


@on_local_store
def test_underscore_topics_are_listed_and_reserved_names_refused(log):
    log.create_topic("__consumer_offsets")
    log.create_topic("_internal")
    log.write_group_offsets("g", {"x": 1})
    log.append_history({"job": "x"})
    assert log.topics() == ["__consumer_offsets", "_internal"]
    for name in ("_groups", "_maintenance"):
        with pytest.raises(InvalidTopicName, match="reserved"):
            log.create_topic(name)


@pytest.mark.parametrize("name", ["_cluster.json", "_groups", "_maintenance", ".tmp-x",
                                  ".tmp-0123456789abcdef", "_security", "_tables", "_brokers"])
@on_local_store
def test_the_stores_own_names_are_no_topic_names(log, name):
    log.cluster_id()
    for call in (lambda: log.create_topic(name), lambda: log.topic(name),
                 lambda: log.partition(name, 0), lambda: log.delete_topic(name),
                 lambda: log.alter_topic(name, {})):
        with pytest.raises(InvalidTopicName, match="reserved for the store's own files"):
            call()
    assert log.cluster_id() == log.cluster_id()  # _cluster.json untouched
    assert log.topics() == []


def test_every_name_at_a_used_stores_root_is_reserved_or_a_topic(log):
    """A store after every kind of write: each internal name at its root must be
    refused as a topic name, or a topic could land on it (paths, "Reserved names")."""
    from log_layout import paths

    log.cluster_id()
    log.create_topic("t", {"partitions": 2})
    log.partition("t", 0).claim("w").append(pa_table(3))
    log.alter_topic("t", {"retention.ms": 1000})
    log.write_group_offsets("g", {"t": {"0": 1}})
    log.append_history({"job": "retention"})
    from log_layout import acls, quotas
    acls.add_acls(log.store, [acls.AclBinding.create("Topic", "t", principal="User:a",
                                                     operation="Read")])
    quotas.alter_quotas(log.store, "User:a", add={"producer_byte_rate": 1000})
    root = {f.name for f in log.store.list("")} | set(log.store.list_folders(""))
    internal = root - {"t"}
    assert internal >= {"_cluster.json", "_groups", "_maintenance", "_security"}, root
    for name in internal:
        with pytest.raises(InvalidTopicName, match="reserved"):
            paths.topic_folder(name)


def test_temp_files_are_reserved_under_the_stores_prefix():
    from log_layout import paths, store

    assert store.TMP_PREFIX in paths.RESERVED_PREFIXES
