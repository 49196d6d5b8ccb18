"""The cleaner's rules one at a time, at their boundaries, on every backend."""

from __future__ import annotations

import pytest

from compaction.cleaner import compact_partition, plan_clean, split_by_bytes
from tests.compaction.helpers import T0, keyed, rows
from tests.conftest import on_local_store


def make(log, topic="c", **configs):
    log.create_topic(topic, {"cleanup.policy": "compact", "delete.retention.ms": 1000,
                             "min.cleanable.dirty.ratio": 0.5, **configs})
    return log.partition(topic, 0), log.topic(topic).config


@on_local_store
def test_latest_value_per_key_survives_with_its_offset(log):
    plog, config = make(log)
    w = plog.claim("t")
    w.append(keyed([("a", "1"), ("b", "1"), ("a", "2")], T0), now_ms=T0)
    w.append(keyed([("b", "2"), ("c", "1")], T0), now_ms=T0)
    w.append(keyed([("a", "3")], T0), now_ms=T0)  # the active segment
    r = compact_partition(plog, config, T0)
    assert r.changed and r.records_before == 5 and r.records_after == 3
    assert rows(plog) == [(2, b"a", b"2"), (3, b"b", b"2"), (4, b"c", b"1"), (5, b"a", b"3")]
    m = plog.snapshot()
    assert m.cleaned_offset == 5 and m.next_offset == 6
    assert plog.read_table(0, 3).column("offset").to_pylist() == [2]  # gaps are reads' business


@on_local_store
def test_active_segment_is_never_cleaned(log):
    plog, config = make(log)
    plog.claim("t").append(keyed([("a", "1"), ("a", "2"), ("a", "3")], T0), now_ms=T0)
    assert plan_clean(plog.snapshot(), config, T0 + 10**9) is None
    assert not compact_partition(plog, config, T0 + 10**9).changed
    assert len(rows(plog)) == 3


@on_local_store
def test_min_compaction_lag_stops_at_first_young_segment(log):
    plog, config = make(log, **{"min.compaction.lag.ms": 1000})
    w = plog.claim("t")
    w.append(keyed([("a", "1")], T0), now_ms=T0)
    w.append(keyed([("a", "2")], T0 + 500), now_ms=T0)
    w.append(keyed([("a", "3")], T0), now_ms=T0)  # old, but behind a young segment
    w.append(keyed([("x", "1")], T0), now_ms=T0)  # active
    plan = plan_clean(plog.snapshot(), config, T0 + 1000)
    assert [s.base_offset for s in plan.segments] == [0]  # T0 + 500 > now - lag
    plan = plan_clean(plog.snapshot(), config, T0 + 1500)  # exactly at the lag: eligible
    assert [s.base_offset for s in plan.segments] == [0, 1, 2]
    assert compact_partition(plog, config, T0 + 1500).changed
    assert rows(plog) == [(2, b"a", b"3"), (3, b"x", b"1")]


@on_local_store
def test_dirty_ratio_threshold_counts_clean_head_bytes(log):
    plog, config = make(log, **{"min.cleanable.dirty.ratio": 0.5})
    w = plog.claim("t")
    for i in range(4):
        w.append(keyed([(f"k{j}", f"v{i}") for j in range(50)], T0, pad=20), now_ms=T0)
    w.append(keyed([("z", "1")], T0), now_ms=T0)
    assert compact_partition(plog, config, T0).changed  # never cleaned: ratio 1
    head = plog.snapshot().segments[0].bytes
    w.append(keyed([("z", "2")], T0), now_ms=T0)  # small dirty tail behind the big clean head
    plan = plan_clean(plog.snapshot(), config, T0)
    assert plan.clean_bytes == head and 0 < plan.dirty_ratio < 0.5
    r = compact_partition(plog, config, T0)
    assert not r.changed and "below" in r.note
    assert compact_partition(plog, config, T0, force=True).changed
    # exactly at the ratio cleans (Kafka: cleanable when ratio >= min)
    plan = plan_clean(plog.snapshot(), config, T0)
    import dataclasses
    at = dataclasses.replace(plan, clean_bytes=100, dirty_bytes=100)
    assert at.dirty_ratio == 0.5 and at.due


@on_local_store
def test_tombstone_kept_by_first_pass_then_expires(log):
    plog, config = make(log, **{"delete.retention.ms": 1000, "min.cleanable.dirty.ratio": 0.0})
    w = plog.claim("t")
    w.append(keyed([("a", "1"), ("b", "1")], T0), now_ms=T0)
    w.append(keyed([("a", None)], T0), now_ms=T0)
    w.append(keyed([("c", "1")], T0), now_ms=T0)
    # first pass at a time far past delete.retention.ms: the earlier value of "a" goes at
    # once, the tombstone stays (it was dirty, no pass had kept it before)
    assert compact_partition(plog, config, T0 + 10_000).changed
    assert rows(plog) == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    w.append(keyed([("d", "1")], T0 + 10_000), now_ms=T0)
    # second pass: the tombstone lies in the clean head; at now = ts + retention - 1 it stays
    assert compact_partition(plog, config, T0 + 999).changed
    assert (2, b"a", None) in rows(plog)
    w.append(keyed([("e", "1")], T0 + 10_000), now_ms=T0)
    assert compact_partition(plog, config, T0 + 1000).changed  # exactly at the horizon: gone
    assert rows(plog) == [(1, b"b", b"1"), (3, b"c", b"1"), (4, b"d", b"1"), (5, b"e", b"1")]


@on_local_store
def test_not_a_compacted_topic_is_left_alone(log):
    log.create_topic("d", {"cleanup.policy": "delete"})
    plog = log.partition("d", 0)
    w = plog.claim("t")
    w.append(keyed([("a", "1"), ("a", "2")], T0), now_ms=T0)
    w.append(keyed([("a", "3")], T0), now_ms=T0)
    r = compact_partition(plog, log.topic("d").config, T0)
    assert not r.changed and r.note == "not a compacted topic"


@on_local_store
def test_output_is_cut_at_segment_bytes_and_dry_run_writes_nothing(log):
    plog, config = make(log, **{"segment.bytes": 4000})
    w = plog.claim("t")
    for i in range(3):
        w.append(keyed([(f"k{j}", f"v{i}") for j in range(100)], T0, pad=40), now_ms=T0)
    w.append(keyed([("z", "1")], T0), now_ms=T0)
    before = plog.snapshot()
    dry = compact_partition(plog, config, T0, dry_run=True)
    assert dry.changed and dry.dry_run and dry.records_after == 100 and dry.segments_after > 1
    assert plog.snapshot().version == before.version
    r = compact_partition(plog, config, T0)
    assert (r.records_after, r.segments_after) == (dry.records_after, dry.segments_after)
    m = plog.snapshot()
    cleaned = [s for s in m.segments if s.last_offset < m.cleaned_offset]
    assert len(cleaned) == r.segments_after > 1
    assert sum(s.count for s in cleaned) == 100
    # tiles the replaced range: no offset lost between output segments
    assert cleaned[0].base_offset == 0
    for a, b in zip(cleaned, cleaned[1:]):
        assert b.base_offset == a.last_offset + 1


def test_split_by_bytes_keeps_oversized_record_alone():
    import pyarrow as pa

    from log_layout import SEGMENT_SCHEMA
    t = pa.table({"offset": pa.array([0, 1, 2], pa.int64()),
                  "timestamp": pa.array([0, 0, 0], pa.timestamp("us", tz="UTC")),
                  "key": pa.array([b"a", b"b", b"c"]), "value": pa.array([b"x", b"y" * 500, b"z"]),
                  "headers": pa.nulls(3, SEGMENT_SCHEMA.field("headers").type)})
    parts = split_by_bytes(t, 100)
    assert [p.column("offset").to_pylist() for p in parts] == [[0], [1], [2]]
    assert split_by_bytes(t.slice(0, 0), 100) == []


@pytest.mark.parametrize("backend", ["memory"], indirect=True)
def test_null_keys_are_kept_as_written(log):
    # a compacted topic refuses null keys at produce time; written by hand they pass through
    plog, config = make(log)
    w = plog.claim("t")
    import pyarrow as pa
    w.append(pa.table({"key": pa.array([None, b"a", None, b"a"], pa.binary()),
                       "value": [b"1", b"2", b"3", b"4"]}), now_ms=T0)
    w.append(keyed([("z", "1")], T0), now_ms=T0)
    compact_partition(plog, config, T0)
    assert rows(plog) == [(0, None, b"1"), (2, None, b"3"), (3, b"a", b"4"), (4, b"z", b"1")]


def test_conflicting_maintenance_gives_up_cleanly(log):
    # retention commits between the cleaner's read and its commit: the cleaner reports a
    # conflict, leaves no file behind and the next run cleans what is left
    log.create_topic("cd", {"cleanup.policy": "compact,delete", "retention.ms": 1000})
    plog, config = log.partition("cd", 0), log.topic("cd").config
    w = plog.claim("t")
    w.append(keyed([("a", "1"), ("a", "2")], T0), now_ms=T0)
    w.append(keyed([("b", "1"), ("b", "2")], T0 + 5000), now_ms=T0)
    w.append(keyed([("c", "1")], T0 + 5000), now_ms=T0)
    from retention.policy import retain_partition

    read_segment = plog.read_segment
    calls = []

    def racing_read(*args, **kwargs):
        if not calls:
            calls.append(1)
            assert retain_partition(plog, config, T0 + 5000).changed  # drops segment 0
        return read_segment(*args, **kwargs)

    plog.read_segment = racing_read
    try:
        files_before = {f.name for f in plog.store.list(plog.folder)}
        r = compact_partition(plog, config, T0 + 5000)
    finally:
        del plog.read_segment
    assert not r.changed and r.conflict and r.note.startswith("conflict")
    assert {f.name for f in plog.store.list(plog.folder)} == files_before  # nothing left over
    assert not plog.orphans(T0 + 10**12)
    assert compact_partition(plog, config, T0 + 5000).changed
    assert rows(plog) == [(3, b"b", b"2"), (4, b"c", b"1")]


def test_compaction_rebases_over_a_new_leader(log):
    # a gateway claims the partition (new leader epoch) and appends during compaction:
    # maintenance is not a leader, so it rebases; the new leader's records stay
    plog, config = make(log)
    w = plog.claim("old")
    w.append(keyed([("a", "1"), ("a", "2")], T0), now_ms=T0)
    w.append(keyed([("z", "1")], T0), now_ms=T0)
    read_segment = plog.read_segment

    def racing_read(*args, **kwargs):
        if plog.snapshot().leader == "old":
            plog.claim("new").append(keyed([("n", "1")], T0), now_ms=T0)
        return read_segment(*args, **kwargs)

    plog.read_segment = racing_read
    try:
        assert compact_partition(plog, config, T0).changed
    finally:
        del plog.read_segment
    m = plog.snapshot()
    assert m.leader == "new" and m.leader_epoch == 2
    assert rows(plog) == [(1, b"a", b"2"), (2, b"z", b"1"), (3, b"n", b"1")]
