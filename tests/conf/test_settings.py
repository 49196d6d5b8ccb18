"""conf: defaults load, environment and explicit overrides, bad values name key and value."""

from __future__ import annotations

import dataclasses

import pytest

import conf
from conf import ConfigError, TopicConfig, load
from conf.topic import TOPIC_KEYS


def test_defaults_load_frozen():
    s = load(environ={})
    assert s.store.url == "./sparklog-data" and s.store.fsync is True
    assert s.gateway.host == "127.0.0.1" and s.gateway.port == 8082 and s.gateway.linger_ms == 0
    assert s.topic == TopicConfig()  # Kafka's defaults
    assert s.topic.retention_ms == 604_800_000 and s.topic.max_message_bytes == 1_048_588
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.gateway.port = 1  # type: ignore[misc]


def test_environment_overrides():
    s = load(environ={"SPARKLOG_GATEWAY_PORT": "9000", "SPARKLOG_STORE_FSYNC": "off",
                      "SPARKLOG_GATEWAY_LINGER_MS": "20", "SPARKLOG_TOPIC_RETENTION_MS": "1000",
                      "SPARKLOG_STORE_URL": "memory://x", "SPARKLOG_HOME": "/ignored",
                      "OTHER": "x"})
    assert (s.gateway.port, s.store.fsync, s.gateway.linger_ms) == (9000, False, 20)
    assert s.topic.retention_ms == 1000 and s.store.url == "memory://x"


def test_real_environment_is_read(monkeypatch):
    monkeypatch.setenv("SPARKLOG_GATEWAY_BATCH_SIZE", "4096")
    assert load().gateway.batch_size == 4096


def test_explicit_overrides_beat_environment():
    s = load({"gateway.port": 7000, "gateway.linger.ms": None},
             environ={"SPARKLOG_GATEWAY_PORT": "9000", "SPARKLOG_GATEWAY_LINGER_MS": "9"})
    assert s.gateway.port == 7000 and s.gateway.linger_ms == 9  # None = flag not given


@pytest.mark.parametrize("key,value,words", [
    ("SPARKLOG_GATEWAY_PORT", "eighty", "expected an integer"),
    ("SPARKLOG_GATEWAY_PORT", "70000", "at most 65535"),
    ("SPARKLOG_GATEWAY_LINGER_MS", "-1", "negative"),
    ("SPARKLOG_STORE_FSYNC", "maybe", "true or false"),
    ("SPARKLOG_GATEWAY_HOT_ENABLE", "maybe", "true, false or auto"),
    ("SPARKLOG_TOPIC_CLEANUP_POLICY", "shred", "one of"),
    ("SPARKLOG_TOPIC_MIN_CLEANABLE_DIRTY_RATIO", "1.5", "between 0 and 1"),
])
def test_bad_value_names_key_and_value(key, value, words):
    with pytest.raises(ConfigError) as e:
        load(environ={key: value})
    assert str(e.value.value) == value and words in str(e.value)
    dotted = key[len("SPARKLOG_"):].lower().replace("_", ".")
    assert e.value.key in (dotted, key) or e.value.key == dotted.split(".", 1)[1]
    assert value in str(e.value)


@pytest.mark.parametrize("url,hot", [
    ("s3://bucket/log", True), ("s3a://bucket/log", True), ("hdfs://nn:8020/log", True),
    ("webhdfs://nn:9870/log", True), ("S3://bucket/log", True),
    ("./sparklog-data", False), ("/abs/log", False), ("file:///tmp/log", False),
    ("memory://log", False), ("gs://bucket/log", False)])
def test_hot_tier_is_on_by_default_for_s3_and_hdfs_only(url, hot):
    assert load({"store.url": url}, environ={}).gateway.hot_enable is hot
    # "auto" given explicitly means the same; true and false win whatever the store
    assert load({"store.url": url, "gateway.hot.enable": "auto"},
                environ={}).gateway.hot_enable is hot
    assert load({"store.url": url}, environ={"SPARKLOG_GATEWAY_HOT_ENABLE": str(not hot)}
                ).gateway.hot_enable is (not hot)
    assert load({"store.url": url, "gateway.hot.enable": "off"},
                environ={"SPARKLOG_GATEWAY_HOT_ENABLE": "on"}).gateway.hot_enable is False
    assert load({"store.url": url, "gateway.hot.enable": True}, environ={}).gateway.hot_enable


def test_hot_tier_follows_the_store_url_from_the_environment():
    assert load(environ={"SPARKLOG_STORE_URL": "s3://b/x"}).gateway.hot_enable is True
    assert load({"store.url": "./d"}, environ={"SPARKLOG_STORE_URL": "s3://b/x"}
                ).gateway.hot_enable is False


def test_unknown_sparklog_variable_names_itself():
    with pytest.raises(ConfigError) as e:
        load(environ={"SPARKLOG_GATEWAY_PROT": "1"})
    assert e.value.key == "SPARKLOG_GATEWAY_PROT" and "SPARKLOG_GATEWAY_PROT" in str(e.value)
    assert "names no sparklog setting" in str(e.value)


def test_unknown_override_key():
    with pytest.raises(ConfigError, match="gateway.prot"):
        load({"gateway.prot": 1}, environ={})


def test_topic_config_round_trip_and_kafka_names():
    t = TopicConfig.from_kafka({"cleanup.policy": "delete,compact", "retention.ms": "-1",
                                "compression.type": "zstd", "partitions": 3})
    assert t.cleanup_policy == "compact,delete" and t.compacted and t.deletes
    assert t.retention_ms == -1 and t.compression == "zstd"
    assert TopicConfig.from_kafka(t.to_kafka()) == t
    assert set(t.to_kafka()) == set(TOPIC_KEYS)
    assert TopicConfig.from_kafka({"compression.type": "producer"}).compression is None
    assert TopicConfig.from_kafka({"retention.ms": 5}, base=t).partitions == 3


@pytest.mark.parametrize("key,value", [("partitions", True), ("partitions", "1.5"),
                                       ("retention.ms", -2), ("segment.bytes", 1),
                                       ("message.timestamp.type", "Now"),
                                       ("min.cleanable.dirty.ratio", "half"), ("nope", 1)])
def test_topic_config_bad_values(key, value):
    with pytest.raises(ConfigError) as e:
        TopicConfig.from_kafka({key: value})
    assert e.value.key == key and e.value.value == value
    assert key in str(e.value) and repr(value) in str(e.value)


def test_public_names():
    for name in conf.__all__:
        assert hasattr(conf, name)
