"""Leader epochs, fencing, same-epoch rebase and maintenance commits, on every backend."""

from __future__ import annotations

import pyarrow as pa
import pytest

from log_layout import Fenced, InvalidRecords, MaintenanceConflict
from tests.log_layout.helpers import offsets_and_values, table, values


def test_claim_bumps_epoch_and_fences_the_old_writer(part):
    old = part.claim("gw-1")
    assert old.epoch == 1
    old.append(table(0, 2))
    new = part.claim("gw-2")
    assert new.epoch == 2 and part.snapshot().leader == "gw-2"
    with pytest.raises(Fenced) as e:
        old.append(table(2, 2))
    assert (e.value.epoch, e.value.current_epoch) == (1, 2)
    assert "epoch 1 is fenced" in str(e.value) and "now 2" in str(e.value)
    assert new.append(table(2, 2)).base_offset == 2
    with pytest.raises(Fenced):  # fenced for good: even a fresh snapshot does not revive it
        old.append(table(4, 1))
    assert old.fenced is not None
    assert offsets_and_values(part.read_table(0)) == list(zip(range(4), values(0, 4)))
    assert part.orphans() == []  # the fenced writer removed its unnamed segment


def test_a_claim_from_another_log_instance_fences(part, store):
    from log_layout import open_log

    url, options = store
    old = part.claim("gw-1")
    open_log(url, storage_options=options).partition("t", 0).claim("gw-2")
    with pytest.raises(Fenced):
        old.append(table(0, 1))  # its cached snapshot is stale; the commit finds out


def test_same_epoch_writers_rebase(part):
    part.claim("gw")
    a, b = part.writer(), part.writer()
    assert a.epoch == b.epoch == 1
    ra = a.append(table(0, 3))
    rb = b.append(table(3, 2))  # b's snapshot is stale: it loses version N+1 and rebases
    assert (ra.base_offset, rb.base_offset) == (0, 3) and rb.version == ra.version + 1
    assert part.read_table(0).column("value").to_pylist() == values(0, 5)
    assert part.orphans() == []


def test_writer_is_fenced_by_a_claim(part):
    w = part.writer()
    part.claim("gw")
    with pytest.raises(Fenced):
        w.append(table(0, 1))


def test_append_rebases_over_a_maintenance_commit(part):
    w = part.claim("gw")
    w.append(table(0, 5))
    w.append(table(5, 5))
    m = part.snapshot()
    first = m.segments[0]
    kept = part.read_segment(first).filter(pa.compute.is_in(
        pa.compute.field("offset"), pa.array([1, 3])))
    new = part.replace_segments([first], [kept], committer="compaction", now_ms=10)
    assert new.leader_epoch == m.leader_epoch and new.committer == "compaction"
    assert new.segments[0].base_offset == 0 and new.segments[0].last_offset == 4
    # The writer's cached snapshot predates the compaction: it rebases and keeps its epoch.
    r = w.append(table(10, 2))
    assert r.base_offset == 10 and r.version == new.version + 1
    got = part.read_table(0)
    assert got.column("offset").to_pylist() == [1, 3, *range(5, 12)]
    assert part.read_table(2, 4).column("offset").to_pylist() == [3]
    assert part.snapshot().removed == ((first.file, 10),)


def test_replace_segments_moves_log_start_and_rebases_over_appends(part):
    w = part.claim("gw")
    for i in range(3):
        w.append(table(i * 4, 4))
    segs = part.snapshot().segments
    other = part.writer()  # a same-epoch writer commits between snapshot and maintenance
    other.append(table(12, 1))
    m = part.replace_segments(segs[:2], [], committer="retention", now_ms=5,
                              log_start_offset=segs[1].end_offset)
    assert m.log_start_offset == 8 and [s.base_offset for s in m.segments] == [8, 12]
    assert part.read_table(8).column("offset").to_pylist() == list(range(8, 13))
    with pytest.raises(Exception) as e:
        part.read_table(0)
    assert type(e.value).__name__ == "OffsetOutOfRange" and e.value.log_start == 8
    with pytest.raises(MaintenanceConflict, match="another job replaced"):
        part.replace_segments(segs[:1], [], committer="retention", now_ms=6)
    # log start never moves back
    assert part.replace_segments([m.segments[0]], [part.read_segment(m.segments[0])],
                                 committer="compaction", now_ms=7,
                                 log_start_offset=0).log_start_offset == 8


def test_replace_segments_validates_its_input(part):
    w = part.claim("gw")
    w.append(table(0, 4))
    seg = part.snapshot().segments[0]
    with pytest.raises(ValueError):
        part.replace_segments([], [], committer="x", now_ms=0)
    outside = part.read_segment(seg).set_column(0, "offset", pa.array(range(10, 14), pa.int64()))
    with pytest.raises(InvalidRecords, match="inside the replaced range"):
        part.replace_segments([seg], [outside], committer="x", now_ms=0)
    assert part.orphans() == [] and part.snapshot().segments == (seg,)


def test_maintenance_does_not_fence_and_is_not_fenced(part):
    w = part.claim("gw")
    w.append(table(0, 2))
    part.claim("gw-2")
    seg = part.snapshot().segments[0]
    m = part.replace_segments([seg], [part.read_segment(seg)], committer="rollup", now_ms=1)
    assert m.leader_epoch == 2
    with pytest.raises(Fenced):
        w.append(table(2, 1))


def test_replace_segments_refuses_bad_requests(part):
    from log_layout import InvalidMaintenance

    w = part.claim("gw")
    for i in range(3):
        w.append(table(i * 2, 2))
    segs = part.snapshot().segments
    with pytest.raises(InvalidMaintenance, match="consecutive"):
        part.replace_segments([segs[0], segs[2]], [], committer="x", now_ms=0)
    with pytest.raises(InvalidMaintenance, match="consecutive"):
        part.replace_segments([segs[0], segs[0]], [], committer="x", now_ms=0)
    with pytest.raises(InvalidRecords, match="segment schema"):
        part.replace_segments([segs[0]], [pa.table({"value": [b"x"]})], committer="x", now_ms=0)
    t = part.read_segment(segs[0])
    backwards = t.set_column(0, "offset", pa.array([1, 0], pa.int64()))
    with pytest.raises(InvalidRecords, match="increase strictly"):
        part.replace_segments([segs[0]], [backwards], committer="x", now_ms=0)
    with pytest.raises(InvalidRecords, match="increase strictly"):  # two outputs overlapping
        part.replace_segments(segs[:2], [t, t], committer="x", now_ms=0)
    assert part.snapshot().segments == segs and part.orphans() == []
    # nullable variants of the schema are fine (Spark hands those out)
    loose = pa.Table.from_arrays(t.columns, names=t.column_names)
    m = part.replace_segments([segs[0]], [loose], committer="x", now_ms=0)
    assert part.read_table(0).num_rows == 6 and m.segments[0].file != segs[0].file
