"""Orphans, vacuum and readers that race it, on every backend."""

from __future__ import annotations

import pyarrow as pa
import pytest

from log_layout import MissingSegment, open_log, wall_clock_ms
from log_layout import segment_commit
from log_layout.manifest import CHECKPOINT_INTERVAL
from tests.log_layout.helpers import table, values

DAY = 86_400_000


def _compact_first(p, now_ms):
    """Replace the first segment by a copy of itself (as a roll-up would); its file is superseded."""
    seg = p.snapshot().segments[0]
    p.replace_segments([seg], [p.read_segment(seg)], committer="rollup", now_ms=now_ms)
    return seg


def test_orphans_are_listed_invisible_and_vacuumed_after_the_delay(part):
    w = part.claim("w")
    w.append(table(0, 4))
    # what a crashed writer leaves: an unnamed segment, temp files beside segments and manifests
    part.store.put_exclusive(f"{part.folder}/{4:020d}-deadbeefdeadbeef.arrow", b"half a segm")
    part.store.put_exclusive(f"{part.folder}/.tmp-abc", b"partial")
    part.store.put_exclusive(f"{part.manifest_folder}/.tmp-def", b"{partial")
    now = wall_clock_ms()
    orphans = part.orphans(now)
    assert sorted((f.name, f.reason) for f in orphans) == [
        (".tmp-abc", "temp"), (f"{4:020d}-deadbeefdeadbeef.arrow", "orphan"),
        ("_log/.tmp-def", "temp")]
    assert all(f.size > 0 and f.age_ms > -DAY for f in orphans)
    assert part.read_table(0).column("value").to_pylist() == values(0, 4)

    report = part.vacuum(now_ms=now, delay_ms=DAY)  # not old enough: kept
    assert report.deleted == () and len(report.kept) == 3
    report = part.vacuum(now_ms=now + 2 * DAY, delay_ms=DAY, dry_run=True)
    assert len(report.deleted) == 3 and len(part.orphans(now)) == 3  # dry run deletes nothing
    report = part.vacuum(now_ms=now + 2 * DAY, delay_ms=DAY)
    assert len(report.deleted) == 3 and report.deleted_bytes == 11 + 7 + 8
    assert part.orphans(now) == []
    assert part.read_table(0).column("value").to_pylist() == values(0, 4)
    w.append(table(4, 1))
    assert part.read_table(0).num_rows == 5


def test_superseded_files_wait_for_the_delay(part):
    w = part.claim("w")
    w.append(table(0, 3))
    w.append(table(3, 3))
    seg = _compact_first(part, now_ms=1_000)
    assert [f.reason for f in part.unreferenced(1_500)] == ["superseded"]
    assert part.unreferenced(1_500)[0].age_ms == 500  # counted from the commit that removed it
    assert part.vacuum(now_ms=1_500, delay_ms=1_000).deleted == ()
    report = part.vacuum(now_ms=2_000, delay_ms=1_000)
    assert [f.name for f in report.deleted] == [seg.file]
    m = part.snapshot()
    assert m.removed == () and m.committer == "vacuum"
    assert part.read_table(0).column("value").to_pylist() == values(0, 6)
    assert w.append(table(6, 1)).base_offset == 6  # the writer rebases over vacuum's commit


def test_reader_holding_an_old_snapshot_replans(part):
    w = part.claim("w")
    for i in range(3):
        w.append(table(i * 3, 3))
    old = part.snapshot()
    _compact_first(part, now_ms=0)
    part.vacuum(now_ms=DAY, delay_ms=0)
    got = part.read_table(0, manifest=old)  # its first file is gone: re-plans, never raises
    assert got.column("value").to_pylist() == values(0, 9)
    assert part.read_table(2, 5, manifest=old).column("offset").to_pylist() == [2, 3, 4]


def test_reader_in_the_middle_of_a_read_replans(part):
    w = part.claim("w")
    for i in range(3):
        w.append(table(i * 3, 3))
    it = part.read(0)
    first = next(it)
    assert first.column("offset").to_pylist() == [0, 1, 2]
    # a roll-up merges segments 2 and 3 while the reader is between batches; vacuum runs
    segs = part.snapshot().segments
    merged = pa.concat_tables([part.read_segment(segs[1]), part.read_segment(segs[2])])
    part.replace_segments(segs[1:], [merged], committer="rollup", now_ms=0)
    part.vacuum(now_ms=DAY, delay_ms=0)
    rest = pa.Table.from_batches(list(it))
    assert rest.column("offset").to_pylist() == list(range(3, 9))


def test_missing_file_still_named_is_an_error_not_a_replan(part):
    w = part.claim("w")
    w.append(table(0, 3))
    part.store.delete([f"{part.folder}/{part.snapshot().segments[0].file}"])
    with pytest.raises(MissingSegment):
        part.read_table(0)


def test_old_manifests_are_vacuumed_and_stale_caches_recover(store):
    url, options = store
    log = open_log(url, storage_options=options, manifest_versions_retained=2)
    log.create_topic("t")
    reader = open_log(url, storage_options=options).partition("t", 0)
    p = log.partition("t", 0)
    w = p.claim("w")
    w.append(table(0, 1))
    assert reader.high_watermark() == 1  # caches a version that vacuum will delete
    for i in range(1, 20):
        w.append(table(i, 1))
    report = p.vacuum(now_ms=0, delay_ms=DAY)  # old manifests go whatever the delay
    gone = sorted(f.name for f in report.deleted)
    top = p.snapshot().version
    # all before the newest 2, from a whole version on (kept deltas stay readable)
    keep_from = (top - 2) - (top - 2) % CHECKPOINT_INTERVAL
    assert keep_from > 2
    # a version file that carries a live segment (stores without links) stays
    live = {s.file for s in p.snapshot().segments}
    assert gone == [name for v in range(0, keep_from)
                    if (name := f"_log/{v:020d}-{p.topic_id}.json") not in live]
    assert len(gone) == (keep_from if p.store.supports_links else 2)  # else: create, claim
    assert reader.high_watermark() == 20
    assert reader.read_table(0).column("value").to_pylist() == values(0, 20)
    w.append(table(20, 1))
    assert reader.snapshot().version == top + 1


def test_commit_never_names_a_file_older_than_half_the_delay(log, part, monkeypatch):
    """A writer that kept losing for longer than half of file.delete.delay.ms rewrites its
    segment, so a vacuum judging by the real clock cannot delete it between write and commit."""
    log.alter_topic("t", {"file.delete.delay.ms": 1_000})
    w = part.claim("w")
    w.append(table(0, 2))
    n = 2
    # Stores without links write an append's segment and version apart at checkpoint
    # versions only (segment_commit.CarriedAppend): the append under test goes at one.
    while not part.store.supports_links and (part.snapshot().version + 1) % CHECKPOINT_INTERVAL:
        w.append(table(n, 1))
        n += 1
    clock = [wall_clock_ms()]
    monkeypatch.setattr(segment_commit, "wall_clock_ms", lambda: clock[0])  # its age rule
    put = part.store.put_exclusive
    calls = []

    def put_exclusive(path, data):
        if "/_log/" in path and not calls:
            calls.append(path)
            # The writer stalls between segment and commit; meanwhile a roll-up commits
            # (offsets unchanged, so no renumbering) and vacuum deletes the unnamed segment.
            clock[0] += 5_000
            _compact_first(part, now_ms=clock[0])
            assert any(f.reason == "orphan" for f in part.vacuum(now_ms=clock[0],
                                                                 delay_ms=1_000).deleted)
        return put(path, data)

    monkeypatch.setattr(part.store, "put_exclusive", put_exclusive)
    r = w.append(table(n, 2))
    assert r.base_offset == n
    assert part.read_table(0).column("value").to_pylist() == values(0, n + 2)


def test_a_cache_at_a_kept_carried_version_is_not_taken_for_the_newest(store):
    """A version file that carries a live segment outlives the versions after it (stores
    without links): a reader whose cache is that version, and whose next version vacuum
    deleted, must list the folder rather than trust that nothing came after."""
    url, options = store
    log = open_log(url, storage_options=options, manifest_versions_retained=2)
    log.create_topic("t")
    p = log.partition("t", 0)
    w = p.claim("w")
    w.append(table(0, 1))  # version 2
    reader = open_log(url, storage_options=options).partition("t", 0)
    assert reader.high_watermark() == 1  # caches version 2
    w = p.claim("w2")  # version 3: whole, carries nothing
    for i in range(1, 40):
        w.append(table(i, 1))
    p.vacuum(now_ms=0, delay_ms=DAY)
    assert not p.store.exists(p.versions.path(3))
    assert p.store.exists(p.versions.path(2)) != p.store.supports_links
    assert reader.high_watermark() == 40
    assert reader.read_table(0).column("value").to_pylist() == values(0, 40)


def test_a_superseded_carried_segment_is_cut_then_deleted(store):
    """A superseded segment carried by a version still in the retained window loses its
    bytes after the delay but its version stays readable (no gap); once the version is
    old, the file goes. A reader of an old snapshot re-plans either way."""
    url, options = store
    log = open_log(url, storage_options=options, manifest_versions_retained=100)
    log.create_topic("t")
    p = log.partition("t", 0)
    w = p.claim("w")
    w.append(table(0, 3))
    w.append(table(3, 3))
    old = p.snapshot()
    seg = _compact_first(p, now_ms=0)
    path = f"{p.folder}/{seg.file}"
    report = p.vacuum(now_ms=DAY, delay_ms=1_000)
    assert [(f.name, f.reason) for f in report.deleted] == [(seg.file, "superseded")]
    if p.store.supports_links:
        assert not p.store.exists(path)
    else:
        assert seg.file.startswith("_log/") and report.deleted[0].cut
        assert p.store.read(path).startswith(b"{")  # the version's JSON alone
        assert p.versions.read(2)[0].version == 2  # still readable as a version
    assert p.read_table(0, manifest=old).column("value").to_pylist() == values(0, 6)
    fresh = open_log(url, storage_options=options).partition("t", 0)
    assert fresh.read_table(0).column("value").to_pylist() == values(0, 6)
    assert p.vacuum(now_ms=DAY, delay_ms=1_000).deleted == ()  # forgotten from removed


def test_offset_for_timestamp_with_an_old_snapshot_replans(part):
    w = part.claim("w")
    w.append(table(0, 3, ts=100))
    w.append(table(3, 3, ts=200))
    old = part.snapshot()
    _compact_first(part, now_ms=0)
    part.vacuum(now_ms=DAY, delay_ms=0)
    assert part.offset_for_timestamp(150, manifest=old) == 3
    assert part.offset_for_timestamp(50, manifest=old) == 0
