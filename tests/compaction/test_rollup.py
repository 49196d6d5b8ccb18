"""Roll-up of small consecutive segments, on every backend."""

from __future__ import annotations

from compaction.cleaner import compact_partition
from compaction.rollup import plan_rollup, rollup_partition
from tests.compaction.helpers import T0, keyed, rows


def test_small_segments_merge_up_to_segment_bytes(log):
    log.create_topic("r", {"segment.bytes": 5000})
    plog, config = log.partition("r", 0), log.topic("r").config
    w = plog.claim("t")
    for i in range(12):
        w.append(keyed([(f"k{i}", f"v{i}")] * 5, T0 + i), now_ms=T0)
    before = rows(plog)
    m = plog.snapshot()
    size = m.segments[0].bytes
    groups = plan_rollup(m, config)
    assert groups and all(sum(s.bytes for s in g) <= 5000 for g in groups)
    dry = rollup_partition(plog, config, T0, dry_run=True)
    assert dry.changed and plog.snapshot().version == m.version
    r = rollup_partition(plog, config, T0)
    assert r.changed and r.segments_before == sum(len(g) for g in groups)
    assert r.segments_after == len(groups) and r.records_before == r.records_after
    after = plog.snapshot()
    assert len(after.segments) < len(m.segments)
    assert rows(plog) == before  # same records, same offsets
    assert after.next_offset == m.next_offset
    assert len(after.segments) >= (12 * size) // 5000  # bounded by segment.bytes
    # nothing more to merge once groups are full
    again = plan_rollup(after, config)
    assert all(sum(s.bytes for s in g) <= 5000 for g in again)


def test_a_run_merges_at_most_max_groups_oldest_first_and_the_next_goes_on(log, monkeypatch):
    from compaction import rollup

    monkeypatch.setattr(rollup, "MAX_GROUPS_PER_RUN", 2)
    log.create_topic("r", {"segment.ms": 100})
    plog, config = log.partition("r", 0), log.topic("r").config
    w = plog.claim("t")
    for ts in (0, 10, 1000, 1010, 2000, 2010, 3000, 3010):  # four groups of two
        w.append(keyed([("k", str(ts))], T0 + ts), now_ms=T0)
    before = rows(plog)
    assert len(plan_rollup(plog.snapshot(), config)) == 4
    first = rollup_partition(plog, config, T0)
    assert (first.segments_before, first.segments_after) == (4, 2)
    assert [s.count for s in plog.snapshot().segments] == [2, 2, 1, 1, 1, 1]  # oldest first
    second = rollup_partition(plog, config, T0)
    assert (second.segments_before, second.segments_after) == (4, 2)
    assert [s.count for s in plog.snapshot().segments] == [2, 2, 2, 2]
    assert not rollup_partition(plog, config, T0).changed
    assert rows(plog) == before


def test_segment_ms_bounds_the_time_span_of_a_merged_segment(log):
    log.create_topic("r", {"segment.ms": 100})
    plog, config = log.partition("r", 0), log.topic("r").config
    w = plog.claim("t")
    for ts in (0, 50, 100, 150, 1000, 1010):
        w.append(keyed([("k", "v")], T0 + ts), now_ms=T0)
    groups = plan_rollup(plog.snapshot(), config)
    assert [[s.min_ts - T0 for s in g] for g in groups] == [[0, 50, 100], [1000, 1010]]
    rollup_partition(plog, config, T0)
    assert [s.count for s in plog.snapshot().segments] == [3, 1, 2]


def test_rollup_never_straddles_the_cleaner_checkpoint(log):
    log.create_topic("c", {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0})
    plog, config = log.partition("c", 0), log.topic("c").config
    w = plog.claim("t")
    for i in range(3):
        w.append(keyed([("a", str(i))], T0), now_ms=T0)
    compact_partition(plog, config, T0)  # cleaned head [0, 2), active segment at 2
    for i in range(3):
        w.append(keyed([("b", str(i))], T0), now_ms=T0)
    m = plog.snapshot()
    for group in plan_rollup(m, config):
        below = [s.end_offset <= m.cleaned_offset for s in group]
        assert all(below) or not any(below)
    rollup_partition(plog, config, T0)
    m = plog.snapshot()
    assert any(s.end_offset == m.cleaned_offset for s in m.segments)
    assert rows(plog) == [(1, b"a", b"1"), (2, b"a", b"2"), (3, b"b", b"0"), (4, b"b", b"1"),
                          (5, b"b", b"2")]
