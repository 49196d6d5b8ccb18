"""The gateway's metadata service (server/topic_metadata.py), the one both adapters read
topics through, over a real local store."""

from __future__ import annotations

import pytest

import pyarrow as pa

from ingest_gateway.server.topic_metadata import EARLIEST, LATEST, ListedOffset, TopicMetadata
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
        meta.list_offset("a", 2, EARLIEST)
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


def test_list_offset_answers_the_ends_and_times_with_their_epochs(store):
    """Kafka's ListOffsets for one partition: the log's ends, the first record at or
    after a time (with its timestamp), none past the newest, each with the leader epoch
    its offset was written under."""
    meta = TopicMetadata(store)
    empty = meta.list_offset("b", 0, EARLIEST)
    assert (empty.timestamp_ms, empty.offset) == (-1, 0)
    assert meta.list_offset("b", 0, 0).offset == -1  # no record yet
    first = store.partition("b", 0).claim("g1")
    first.append(pa.table({"value": [b"a", b"b"]}), now_ms=1_000)
    second = store.partition("b", 0).claim("g2")  # a new leader: the next epoch
    second.append(pa.table({"value": [b"c"]}), now_ms=5_000)
    e1, e2 = first.epoch, second.epoch
    assert e2 > e1
    assert meta.list_offset("b", 0, EARLIEST) == ListedOffset(-1, 0, e1)
    assert meta.list_offset("b", 0, LATEST) == ListedOffset(-1, 3, e2)
    assert meta.list_offset("b", 0, LATEST, committed=True) == ListedOffset(-1, 3, e2)
    assert meta.list_offset("b", 0, 0) == ListedOffset(1_000, 0, e1)
    assert meta.list_offset("b", 0, 1_001) == ListedOffset(5_000, 2, e2)
    assert meta.list_offset("b", 0, 5_001) == ListedOffset(-1, -1, -1)
