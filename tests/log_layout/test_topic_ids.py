"""Topic ids (Kafka's KIP-516): a writer that outlives its topic's delete and re-create
can never write into the new topic; readers follow the new one; old names still work."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from log_layout import Manifest, TopicRecreated, open_log, paths

DAY = 86_400_000


def values(*vs: bytes) -> pa.Table:
    return pa.table({"value": pa.array(list(vs), pa.binary())})


def second_log(log):
    return open_log(log.url, storage_options=getattr(log.store, "storage_options", None))


def test_each_incarnation_gets_its_own_id(log):
    first = log.create_topic("t")
    assert len(first.topic_id) == 22 and second_log(log).topic("t").topic_id == first.topic_id
    log.delete_topic("t")
    again = log.create_topic("t")
    assert again.topic_id != first.topic_id
    assert log.alter_topic("t", {"retention.ms": 1000}).topic_id == again.topic_id


@pytest.mark.parametrize("new_versions", [2, 12])  # the old writer behind or ahead of the new
def test_a_writer_that_outlived_its_topic_never_writes_the_new_one(log, new_versions):
    log.create_topic("t")
    stale_log = second_log(log)
    stale = stale_log.partition("t", 0).claim("old-gateway")
    for i in range(5):
        stale.append(values(b"old-%d" % i))  # versions 1..5 of the first incarnation
    log.delete_topic("t")
    log.create_topic("t")
    fresh = log.partition("t", 0).claim("new-gateway")
    for i in range(new_versions):
        fresh.append(values(b"new-%d" % i))
    # The stale writer does not know yet. Its commits go to names of the dead incarnation:
    # it neither wins a version of the new topic nor gets rebased into it.
    stale.append(values(b"ghost"))
    part = second_log(log).partition("t", 0)
    assert part.read_table(0).column("value").to_pylist() == \
        [b"new-%d" % i for i in range(new_versions)]
    fresh.append(values(b"after"))  # the new writer is not disturbed either
    assert part.high_watermark() == new_versions + 1
    # what the stale writer left is garbage that vacuum removes after the delay
    left = {f.reason for f in part.orphans()}
    assert "foreign" in left
    part.vacuum(now_ms=part.snapshot().committed_ms + DAY, delay_ms=1000)
    assert {f.reason for f in part.orphans()} == set()
    assert part.read_table(0).num_rows == new_versions + 1


def test_a_stale_writer_is_fenced_once_its_partition_follows_the_new_topic(log):
    log.create_topic("t")
    stale_log = second_log(log)
    stale = stale_log.partition("t", 0).claim("old")
    stale.append(values(b"a"))
    log.delete_topic("t")
    log.create_topic("t")
    log.partition("t", 0).claim("new").append(values(b"b"))
    # a read through the writer's own partition follows the new incarnation ... (through
    # the Log it is the same object only while the Log's topic cache is fresh: on S3 under
    # load it expired first, the Log handed out a new partition and the writer never saw it)
    assert stale.partition.read_table(0).column("value").to_pylist() == [b"b"]
    # ... and from then on the old writer is refused, like a writer of an old epoch
    with pytest.raises(TopicRecreated, match="deleted and created again"):
        stale.append(values(b"ghost"))
    with pytest.raises(TopicRecreated):
        stale.append(values(b"ghost"))  # it stays fenced
    assert log.partition("t", 0).high_watermark() == 1


def test_an_alter_made_for_an_earlier_incarnation_is_ignored(log):
    old = log.create_topic("t")
    log.delete_topic("t")
    log.create_topic("t", {"retention.ms": 5000})
    # an alter of the old topic landing after the re-create (it raced the delete)
    stale = {"name": "t", "created_ms": old.created_ms, "topic_id": old.topic_id,
             "configs": {**old.config.to_kafka(), "retention.ms": "1"}}
    folder = paths.topic_config_folder("t")
    assert log.store.put_exclusive(f"{folder}/{paths.topic_config_name(1)}",
                                   json.dumps(stale).encode())
    assert second_log(log).topic("t").config.retention_ms == 5000
    assert log.alter_topic("t", {"retention.ms": 7000}).config.retention_ms == 7000
    assert second_log(log).topic("t").config.retention_ms == 7000


def test_topics_made_before_ids_keep_their_names(log):
    # what an earlier version of sparklog wrote: no topic_id, manifests without a suffix
    doc = {"name": "legacy", "created_ms": 1, "configs": {"partitions": "1"}}
    assert log.store.put_exclusive(paths.topic_meta("legacy"), json.dumps(doc).encode())
    m = Manifest(topic="legacy", partition=0, version=0, committed_ms=1)
    folder = paths.manifest_folder("legacy", 0)
    assert log.store.put_exclusive(f"{folder}/{paths.manifest_name(0)}", m.to_json())
    part = log.partition("legacy", 0)
    assert part.topic_id == ""
    part.claim("w").append(values(b"x", b"y"))
    assert sorted(f.name for f in log.store.list(folder)) == \
        [paths.manifest_name(v) for v in range(3)]  # 0, the claim, the append
    assert second_log(log).partition("legacy", 0).read_table(0).num_rows == 2
    assert part.orphans() == []


def test_manifest_names_parse_only_for_their_incarnation():
    name = paths.manifest_name(7, "abcDEF_-123")
    assert name == "00000000000000000007-abcDEF_-123.json"
    assert paths.manifest_version(name, "abcDEF_-123") == 7
    assert paths.manifest_version(name) is None and paths.manifest_version(name, "other") is None
    assert paths.manifest_version(paths.manifest_name(7)) == 7
    assert paths.manifest_version(paths.manifest_name(7), "abcDEF_-123") is None
    assert paths.any_manifest_version(name) == 7 == paths.any_manifest_version("0" * 19 + "7.json")
    assert paths.any_manifest_version(".tmp-00000000000000000007.json") is None


def test_a_listing_that_raced_a_claim_does_not_fence_the_new_writer(tmp_path):
    # A reader lists the manifests (seeing only version 0), a writer claims the partition
    # (version 1, epoch 1) before the reader's listing returns: the reader's older
    # snapshot must not replace the writer's, or the writer would see epoch 0 and take
    # itself for fenced (seen once under load in the maintenance concurrency test).
    import threading

    from log_layout import Log
    from log_layout.local_store import LocalStore

    listed, release = threading.Event(), threading.Event()

    class SlowListing(LocalStore):
        def list(self, folder):
            out = super().list(folder)
            if threading.current_thread().name == "reader" and folder.endswith("/_log"):
                listed.set()
                release.wait(10)
            return out

    log = Log(SlowListing(str(tmp_path), fsync=False))
    log.create_topic("t")
    plog = log.partition("t", 0)
    reader = threading.Thread(target=plog.snapshot, name="reader")
    reader.start()
    assert listed.wait(10)
    writer = plog.claim("w")  # version 1, while the reader still holds its listing
    release.set()
    reader.join(10)
    assert plog.snapshot(refresh=False).version == 1
    writer.append(values(b"x"))  # not Fenced
    assert plog.high_watermark() == 1
