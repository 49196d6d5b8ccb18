"""The gateway's metadata service (server/topic_metadata.py), the one both adapters read
topics through, over a real local store."""

from __future__ import annotations

import pytest

from ingest_gateway.server.topic_metadata import TopicMetadata
from log_layout import InvalidTopicName, UnknownPartition, UnknownTopic, open_log


@pytest.fixture
def store(tmp_path):
    log = open_log(str(tmp_path / "store"), fsync=False)
    log.create_topic("a", {"partitions": 2, "cleanup.policy": "compact"})
    log.create_topic("b", {"partitions": 1})
    return log


def test_names_topic_and_partitions(store):
    meta = TopicMetadata(store)
    assert meta.names() == ["a", "b"]
    info = meta.topic("a")
    assert info.partitions == 2 and info.topic_id == store.topic("a").topic_id
    assert meta.topic("a").config.to_kafka()["cleanup.policy"] == "compact"
    assert meta.partition_count("b") == 1
    assert [p.partition for p in meta.partitions("a")] == [0, 1]
    m = meta.snapshot("a", 1)
    assert (m.log_start_offset, m.next_offset) == (0, 0)
    assert meta.store_url == str(store.url)


def test_unknown_names_raise_the_storage_errors(store):
    meta = TopicMetadata(store)
    with pytest.raises(UnknownTopic):
        meta.topic("nope")
    with pytest.raises(UnknownPartition):
        meta.partition("a", 2)
    with pytest.raises(UnknownPartition):
        meta.snapshot("b", -1)
    with pytest.raises(InvalidTopicName):
        meta.partition_count("bad/name")
    assert meta.existing(["b", "nope", "bad/name", "a"]) == ("b", "a")


def test_refresh_sees_another_writer_at_once(tmp_path, store):
    meta = TopicMetadata(store)
    assert meta.partition_count("b") == 1
    other = open_log(str(tmp_path / "store"), fsync=False)  # another gateway's Log
    other.alter_topic("b", {"partitions": 3})
    assert meta.topic("b", refresh=True).partitions == 3
    other.create_topic("c", {"partitions": 1})
    assert meta.names() == ["a", "b", "c"]
