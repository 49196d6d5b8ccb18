"""Maintenance on transactional logs (Kafka's transactional log cleaning): compaction
drops aborted records, dedups committed ones, keeps markers until the rules let them
go, stops at the last stable offset; roll-up keeps transaction boundaries; retention
and delete-records keep ``aborted`` consistent; replace_segments refuses output that
would lose a segment's flags. Real logs written through the transaction coordinator."""

from __future__ import annotations

import pyarrow as pa
import pytest

from compaction import cleaner
from compaction.cleaner import MEMORY_BUDGET_BYTES, compact_partition, plan_clean
from compaction.rollup import plan_rollup, rollup_partition
from log_layout import InvalidMaintenance
from log_layout.delete_records import delete_records
from log_layout.txn_discard import discard_segments
from retention.policy import retain_partition
from tests.compaction.helpers import T0
from tests.compaction.txn_history import RC, RU, Txn, kinds_exact, latest, plain, values, view

BACKENDS = pytest.mark.parametrize("backend", ["file", "memory", "s3", "hdfs"], indirect=True)


def _markers(plog) -> list[int]:
    """The offsets of the partition's markers (a marker segment's span may be wider:
    where it is the first or last segment of a rewrite, it takes the gap around it)."""
    return [plog.read_segment(s).column("offset")[0].as_py()
            for s in plog.snapshot().segments if s.control]


def _compacted(log, name: str, **more) -> tuple:
    log.create_topic(name, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0,
                            "delete.retention.ms": 1000, **more})
    return log.partition(name, 0), log.topic(name).config


@BACKENDS
@pytest.mark.parametrize("budget", [MEMORY_BUDGET_BYTES, 0])  # 0: the streaming path
def test_compaction_drops_aborted_dedups_committed_and_expires_markers(log, budget):
    plog, config = _compacted(log, "c")

    def compact_partition(plog, config, now, **more):
        return cleaner.compact_partition(plog, config, now, memory_budget_bytes=budget, **more)

    a, b = Txn(log, "a", "c", T0), Txn(log, "b", "c", T0)
    plain(log, "c", [("k1", "p0")], T0)                      # 0
    a.send([("k1", "a1"), ("k2", "a2")], T0)                 # 1-2, aborted below
    b.send([("k1", "b1"), ("k3", "b3")], T0)                 # 3-4, committed below
    a.end(False, T0)                                         # ABORT marker at 5
    b.end(True, T0)                                          # COMMIT marker at 6
    plain(log, "c", [("k2", "p2")], T0)                      # 7
    plain(log, "c", [("k9", "active")], T0)                  # 8: the active segment
    assert plog.snapshot().aborted == ((a.pid, 1, 5),)
    # before cleaning, read_uncommitted sees the aborted records (so does Kafka's)
    assert values(plog, RU) == ["p0", "a1", "a2", "b1", "b3", "p2", "active"]
    assert values(plog, RC) == ["p0", "b1", "b3", "p2", "active"]
    want = latest(plog)

    r = compact_partition(plog, config, T0)
    assert r.changed and not r.conflict
    after = [(3, "k1", "b1"), (4, "k3", "b3"), (7, "k2", "p2"), (8, "k9", "active")]
    assert view(plog, RC) == view(plog, RU) == after  # the aborted records are gone for both
    m = plog.snapshot()
    assert m.aborted == ()  # no record of a's transaction is left to hide
    assert _markers(plog) == [5, 6]  # a's: this pass removed its records; b's: records left
    assert [s.producer_id for s in m.segments if s.base_offset <= 4 <= s.last_offset] == [b.pid]
    assert kinds_exact(m) and latest(plog) == want

    compact_partition(plog, config, T0 + 5000, force=True)  # a's marker: empty, old, clean
    assert _markers(plog) == [6] and view(plog, RC) == after

    plain(log, "c", [("k1", "n1"), ("k3", None)], T0 + 6000)  # 9-10: supersede b's records
    plain(log, "c", [("k8", "x")], T0 + 6000)                 # 11
    want = latest(plog)
    compact_partition(plog, config, T0 + 6000)
    assert _markers(plog) == [6]  # the pass that removed b's last record keeps its marker
    assert values(plog, RC) == ["p2", "active", "n1", None, "x"]
    compact_partition(plog, config, T0 + 20_000, force=True)  # marker and tombstone expire
    assert _markers(plog) == []
    assert view(plog, RC) == view(plog, RU) == [(7, "k2", "p2"), (8, "k9", "active"),
                                                (9, "k1", "n1"), (11, "k8", "x")]
    assert latest(plog) == want


@BACKENDS
def test_markers_stay_until_delete_retention_ms(log):
    plog, config = _compacted(log, "c", **{"delete.retention.ms": 60_000})
    a = Txn(log, "a", "c", T0)
    a.send([("k", "a0")], T0)
    a.end(False, T0)                                         # marker at 1
    plain(log, "c", [("z", "p")], T0)
    for now in (T0, T0 + 1000, T0 + 59_999):  # records gone, marker young: kept
        compact_partition(plog, config, now, force=True)
        assert _markers(plog) == [1] and values(plog, RU) == ["p"]
    compact_partition(plog, config, T0 + 60_000, force=True)
    assert _markers(plog) == [] and values(plog, RU) == ["p"]


@BACKENDS
def test_compaction_never_cleans_an_open_transaction(log):
    plog, config = _compacted(log, "c")
    c = Txn(log, "c-app", "c", T0)
    plain(log, "c", [("k1", "p0")], T0)                      # 0
    c.send([("k1", "c1")], T0)                               # 1: open, the LSO
    plain(log, "c", [("k1", "p2")], T0)                      # 2
    plain(log, "c", [("k1", "p3"), ("k9", "active")], T0)    # 3-4
    plan = plan_clean(plog.snapshot(), config, T0)
    assert plan.first_uncleanable_offset == 1  # stops at the open transaction
    compact_partition(plog, config, T0)
    assert values(plog, RU) == ["p0", "c1", "p2", "p3", "active"]  # nothing above the LSO
    assert values(plog, RC) == ["p0"]
    c.end(True, T0)                                          # COMMIT marker at 5
    assert values(plog, RC) == ["p0", "c1", "p2", "p3", "active"]
    compact_partition(plog, config, T0)  # now committed records dedup like any
    assert view(plog, RC) == view(plog, RU) == [(3, "k1", "p3"), (4, "k9", "active")]
    assert _markers(plog) == [5]  # the active segment: never cleaned


@BACKENDS
def test_rollup_keeps_transaction_boundaries(log):
    log.create_topic("r")
    plog, config = log.partition("r", 0), log.topic("r").config
    a, b, c = (Txn(log, t, "r", T0) for t in ("a", "b", "c"))
    plain(log, "r", [("k", "p0")], T0)
    plain(log, "r", [("k", "p1")], T0)
    a.send([("k", "a2")], T0)
    a.send([("k", "a3")], T0)
    b.send([("k", "b4")], T0)
    plain(log, "r", [("k", "p5")], T0)
    a.send([("k", "a6")], T0)
    a.end(False, T0)                                         # 7
    b.end(True, T0)                                          # 8
    a.send([("k", "a9")], T0)
    a.send([("k", "a10")], T0)
    a.end(True, T0)                                          # 11
    c.send([("k", "c12")], T0)                               # open while rolled up
    c.send([("k", "c13")], T0)
    plain(log, "r", [("k", "p14")], T0)
    plain(log, "r", [("k", "p15")], T0)
    before_rc, before_ru = view(plog, RC), view(plog, RU)
    groups = plan_rollup(plog.snapshot(), config)
    assert [[s.base_offset for s in g] for g in groups] == \
        [[0, 1], [2, 3], [9, 10], [14, 15]]  # c's is open: txn_discard names its segments
    r = rollup_partition(plog, config, T0)
    assert r.changed and not r.conflict
    assert view(plog, RC) == before_rc and view(plog, RU) == before_ru
    m = plog.snapshot()
    assert [(s.base_offset, s.last_offset, s.producer_id, s.control) for s in m.segments] == [
        (0, 1, -1, False), (2, 3, a.pid, False), (4, 4, b.pid, False), (5, 5, -1, False),
        (6, 6, a.pid, False), (7, 7, a.pid, True), (8, 8, b.pid, True), (9, 10, a.pid, False),
        (11, 11, a.pid, True), (12, 12, c.pid, False), (13, 13, c.pid, False),
        (14, 15, -1, False)]
    assert m.aborted == ((a.pid, 2, 7),) and m.open_txns == {c.pid: 12}
    c.end(False, T0)
    assert "c12" not in values(plog, RC) and "c13" not in values(plog, RC)
    assert values(plog, RU)[-4:] == ["c12", "c13", "p14", "p15"]


@BACKENDS
def test_discarded_segments_of_a_committed_transaction(log):
    plog, config = _compacted(log, "c")
    a = Txn(log, "a", "c", T0)
    a.send([("k1", "a0")], T0)                               # 0: discarded (a failed task's)
    a.send([("k2", "a1")], T0)                               # 1
    a.send([("k3", "a2")], T0)                               # 2
    discard_segments(plog, a.pid, a.epoch, [(0, 0)], now_ms=T0)
    a.end(True, T0)                                          # 3: COMMIT
    plain(log, "c", [("k9", "active")], T0)                  # 4
    assert values(plog, RC) == ["a1", "a2", "active"] and values(plog, RU)[0] == "a0"
    # roll-up merges the committed segments, not the discarded one with them
    assert [[s.base_offset for s in g] for g in plan_rollup(plog.snapshot(), config)] == [[1, 2]]
    compact_partition(plog, config, T0)
    # the first new segment starts at offset 0, before its first record: the discarded
    # range it starts in goes with its records, or a1 and a2 would read as aborted
    assert view(plog, RC) == view(plog, RU) == [(1, "k2", "a1"), (2, "k3", "a2"),
                                                (4, "k9", "active")]
    assert plog.snapshot().aborted == () and _markers(plog) == [3]


@BACKENDS
def test_retention_and_delete_records_keep_aborted_ranges(log):
    log.create_topic("d", {"retention.ms": 1000})
    plog, config = log.partition("d", 0), log.topic("d").config
    a = Txn(log, "a", "d", T0)
    a.send([("k", "a0")], T0)                                # 0
    plain(log, "d", [("k", "p1")], T0)                       # 1
    a.send([("k", "a2"), ("k", "a3")], T0 + 5000)            # 2-3
    plain(log, "d", [("k", "p4")], T0 + 5000)                # 4
    a.end(False, T0 + 5000)                                  # 5
    plain(log, "d", [("k", "p6")], T0 + 5000)                # 6: active
    r = retain_partition(plog, config, T0 + 2000)  # drops 0 and 1: log start into the range
    assert r.changed and plog.log_start_offset() == 2
    assert plog.snapshot().aborted == ((a.pid, 0, 5),)  # records of it are left
    assert values(plog, RC) == ["p4", "p6"] and values(plog, RU) == ["a2", "a3", "p4", "p6"]
    delete_records(plog, 3, now_ms=T0 + 2000)  # the middle of an aborted segment
    assert values(plog, RC) == ["p4", "p6"] and values(plog, RU) == ["a3", "p4", "p6"]
    retain_partition(plog, config, T0 + 10_000)  # all but the active segment
    m = plog.snapshot()
    assert m.log_start_offset == 6 and m.aborted == () and values(plog, RC) == ["p6"]


@BACKENDS
def test_retention_under_an_open_transaction(log):
    """Retention drops whole segments by time, open transaction or not (so does Kafka's);
    read_committed stays below the transaction's first offset until it ends, and its
    abort still hides the records it left in the log."""
    log.create_topic("d", {"retention.ms": 1000})
    plog, config = log.partition("d", 0), log.topic("d").config
    b = Txn(log, "b", "d", T0)
    b.send([("k", "b0")], T0)                                # 0: b opens, ages out
    plain(log, "d", [("k", "p1")], T0 + 5000)                # 1
    b.send([("k", "b2")], T0 + 5000)                         # 2
    plain(log, "d", [("k", "p3")], T0 + 5000)                # 3
    retain_partition(plog, config, T0 + 2000)
    assert plog.log_start_offset() == 1 and plog.snapshot().open_txns == {b.pid: 0}
    assert values(plog, RC) == [] and values(plog, RU) == ["p1", "b2", "p3"]
    b.end(False, T0 + 5000)                                  # 4
    assert plog.snapshot().aborted == ((b.pid, 0, 4),)
    assert values(plog, RC) == ["p1", "p3"]


@BACKENDS
def test_replace_segments_refuses_output_that_loses_flags(log):
    log.create_topic("v")
    plog = log.partition("v", 0)
    a = Txn(log, "a", "v", T0)
    a.send([("k", "x0")], T0)                                # 0
    a.end(False, T0)                                         # 1: ABORT
    a.send([("k", "y2")], T0)                                # 2
    a.end(True, T0)                                          # 3: COMMIT
    plain(log, "v", [("k", "p4")], T0)
    segs = plog.snapshot().segments
    rec = [plog.read_segment(s) for s in segs]

    def replace(lo, hi, tables):
        plog.replace_segments(segs[lo:hi], tables, committer="compaction", now_ms=T0)

    with pytest.raises(InvalidMaintenance, match="one transaction only"):
        replace(0, 3, [pa.concat_tables([rec[0], rec[2]])])
    with pytest.raises(InvalidMaintenance, match="control marker with other records"):
        replace(1, 4, [pa.concat_tables([rec[1], rec[3]])])
    with pytest.raises(InvalidMaintenance, match="one kind only"):
        replace(2, 5, [pa.concat_tables([rec[2], rec[4]])])
    # without its marker, y2 would start at offset 1, inside the aborted range 0..1
    # that x0 (left in the log) keeps: the committed y2 would read as aborted
    with pytest.raises(InvalidMaintenance, match="would change whether"):
        replace(1, 3, [rec[2]])
    assert plog.snapshot().segments == segs and values(plog, RC) == ["y2", "p4"]
    replace(0, 4, [rec[1], rec[2], rec[3]])  # aborted records out, markers kept: fine
    m = plog.snapshot()
    assert [(s.base_offset, s.producer_id, s.control) for s in m.segments] == \
        [(0, a.pid, True), (2, a.pid, False), (3, a.pid, True), (4, -1, False)]
    assert m.aborted == () and values(plog, RU) == values(plog, RC) == ["y2", "p4"]


@pytest.mark.spark
def test_compaction_job_on_a_transactional_topic(local_log, spark):
    from jobs.maintain import run

    log = local_log
    plog, _ = _compacted(log, "c", partitions=1)
    a, b = Txn(log, "a", "c", T0), Txn(log, "b", "c", T0)
    plain(log, "c", [("k1", "p0")], T0)
    a.send([("k1", "a1"), ("k2", "a2")], T0)
    b.send([("k1", "b1")], T0)
    a.end(False, T0)
    b.end(True, T0)
    plain(log, "c", [("k2", "p2")], T0)
    plain(log, "c", [("k9", "active")], T0)
    summary = run(log, command="compact", now_ms=T0, spark=spark)
    assert not summary.errors and [r.changed for r in summary.results] == [True]
    assert view(plog, RC) == view(plog, RU) == [(3, "k1", "b1"), (6, "k2", "p2"),
                                                (7, "k9", "active")]
    assert plog.snapshot().aborted == () and _markers(plog) == [4, 5]
