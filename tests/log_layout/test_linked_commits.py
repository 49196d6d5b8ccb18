"""Local appends: segment and manifest version are one file with two names.

See ``store.linked_file`` and the trailer layout in ``segment``. Checked here: the
file is both a complete Arrow IPC file and the version, a lost race leaves nothing,
vacuum cuts the carried manifest off a segment that outlives its version, a damaged
trailer is a typed error, and a JSON manifest too big for the first tail read parses.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from log_layout import CorruptManifest, open_log, segment, segment_stored, wall_clock_ms
from log_layout import versions as versions_module
from log_layout.manifest import CHECKPOINT_INTERVAL, Manifest
from tests.log_layout.helpers import table


@pytest.fixture(params=[False, True], ids=["page-cache", "fsync"])
def local_part(request, tmp_path):
    """Partition 0 of topic ``t`` on a local store (with and without fsync)."""
    log = open_log(str(tmp_path / "store"), fsync=request.param, manifest_versions_retained=2)
    log.create_topic("t")
    return log.partition("t", 0)


def _paths(p, info, version):
    root = p.store.root
    return (os.path.join(root, p.folder, info.file),
            os.path.join(root, p.manifest_folder, os.path.basename(p.versions.path(version))))


def test_an_append_is_one_file_with_two_names(local_part):
    w = local_part.claim("w")
    r = w.append(table(0, 50))
    m = local_part.snapshot()
    info = m.segments[-1]
    seg_path, version_path = _paths(local_part, info, r.version)
    assert os.path.samefile(seg_path, version_path) and os.stat(seg_path).st_nlink == 2
    assert os.path.getsize(seg_path) > info.bytes  # the segment, then the manifest
    whole = pa.ipc.open_file(pa.OSFile(seg_path)).read_all()  # still plain Arrow IPC
    # in the stored form (offsets and the one timestamp left out, the null headers of
    # null type): the records the log reads once brought back to the segment schema
    assert whole.schema.metadata[segment_stored.FORMAT_KEY] == b"2" and "offset" not in whole.schema.names
    assert segment.canonical(whole).equals(local_part.read_segment(info))
    assert whole.column("value").to_pylist() == [f"v{i}".encode() for i in range(50)]
    with open(version_path, "rb") as f:
        data = f.read()
    assert segment.checksum(data[:info.bytes]) == info.crc32
    carried, delta_of = Manifest.from_file(data, path=version_path)
    # an append between checkpoints carries a delta: its own segment only
    assert delta_of == r.version - 1 and carried.segments == (info,)
    assert carried.on_top_of(local_part.version(delta_of), path=version_path) == m
    fresh = open_log(local_part.store.root).partition("t", 0)  # a reader with no cache
    assert fresh.snapshot() == m and fresh.read_table(0).num_rows == 50
    assert local_part.orphans() == []


def test_a_lost_race_leaves_nothing_and_rebases(local_part):
    local_part.claim("w")
    a, b = local_part.writer(), open_log(local_part.store.root).partition("t", 0).writer()
    a.append(table(0, 3))
    # b still holds the snapshot before a's append: its first commit loses the version
    r = b.append(table(3, 4))
    assert (r.base_offset, r.last_offset) == (3, 6)
    assert local_part.read_table(0).column("value").to_pylist() == [f"v{i}".encode() for i in range(7)]
    assert local_part.orphans() == []


def test_vacuum_cuts_the_manifest_off_a_segment_that_outlives_its_version(local_part):
    w = local_part.claim("w")
    versions = {}  # segment file -> the version that appended it
    for i in range(20):
        r = w.append(table(i * 10, 10))
        versions[local_part.snapshot().segments[-1].file] = r.version
    m = local_part.snapshot()
    sizes = {s.file: os.path.getsize(os.path.join(local_part.store.root, local_part.folder, s.file))
             for s in m.segments}
    assert all(sizes[s.file] > s.bytes for s in m.segments)
    report = local_part.vacuum(now_ms=wall_clock_ms(), delay_ms=60_000)
    assert {f.reason for f in report.deleted} == {"manifest"}
    # versions from newest-2 (manifest_versions_retained=2) rounded down to a whole one
    # (a multiple of CHECKPOINT_INTERVAL, so kept deltas stay readable) stay
    keep_from = (m.version - 2) - (m.version - 2) % CHECKPOINT_INTERVAL
    kept_versions = {f for f, v in versions.items() if v >= keep_from}
    assert 0 < len(kept_versions) < len(m.segments)
    for s in m.segments:
        path = os.path.join(local_part.store.root, local_part.folder, s.file)
        if s.file in kept_versions:
            assert os.path.getsize(path) == sizes[s.file] and os.stat(path).st_nlink == 2
        else:  # its version is gone: back to the bare segment, still plain Arrow IPC
            assert os.path.getsize(path) == s.bytes and os.stat(path).st_nlink == 1
            whole = pa.ipc.open_file(pa.OSFile(path)).read_all()
            assert segment.canonical(whole).equals(local_part.read_segment(s))
    assert local_part.read_table(0).num_rows == 200
    fresh = open_log(local_part.store.root).partition("t", 0)
    assert fresh.snapshot() == m
    assert all(fresh.version(v).version == v for v in range(keep_from, m.version + 1))


@pytest.mark.parametrize("damage", ["length", "magic", "payload", "footer_length"])
def test_a_damaged_trailer_is_a_corrupt_manifest(local_part, damage):
    w = local_part.claim("w")
    r = w.append(table(0, 5))
    info = local_part.snapshot().segments[-1]
    _, version_path = _paths(local_part, info, r.version)
    with open(version_path, "r+b") as f:
        data = bytearray(f.read())
        footer = int.from_bytes(data[-10:-6], "little")
        end = len(data) - 10 - footer  # just after the trailer's magic
        if damage == "length":
            data[end - 16:end - 8] = (10**9).to_bytes(8, "little")
        elif damage == "magic":
            data[end - 8:end] = b"NOTMAGIC"
        elif damage == "payload":
            data[info.bytes:info.bytes + 5] = b"#####"
        else:
            data[-10:-6] = (len(data) * 2).to_bytes(4, "little")
        f.seek(0)
        f.write(data)
    with pytest.raises(CorruptManifest) as e:
        open_log(local_part.store.root).partition("t", 0).version(r.version)
    assert version_path.endswith(e.value.path)
    assert local_part.read_segment(info).num_rows == 5  # the segment's own bytes are intact


def test_a_json_manifest_longer_than_the_first_read_parses(local_part, monkeypatch):
    monkeypatch.setattr(versions_module, "MANIFEST_TAIL_BYTES", 256)
    w = local_part.claim("w")
    for i in range(8):
        w.append(table(i, 1))
    claimed = local_part.claim("w2")  # a claim commits a JSON manifest, ~1.5 KB here
    m = local_part.snapshot()
    assert m.leader == "w2"
    fresh = open_log(local_part.store.root).partition("t", 0)
    assert fresh.snapshot() == m
    assert claimed.append(table(8, 1)).base_offset == 8
    # and a carried manifest longer than the first read: read again, from the end
    assert open_log(local_part.store.root).partition("t", 0).snapshot() == local_part.snapshot()


def test_a_version_vacuumed_while_it_is_read_is_gone_not_corrupt(local_part, monkeypatch):
    w = local_part.claim("w")
    r = w.append(table(0, 5))
    info = local_part.snapshot().segments[-1]
    _, version_path = _paths(local_part, info, r.version)
    read_tail = local_part.store.read_tail

    def vacuumed_meanwhile(p, n):
        with open(os.path.join(local_part.store.root, p), "rb") as f:  # the reader opened it before the vacuum
            local_part.store.delete_linked(p, info.bytes)
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read(), size

    monkeypatch.setattr(local_part.store, "read_tail", vacuumed_meanwhile)
    with pytest.raises(FileNotFoundError):  # as if it had gone before the read: callers retry
        local_part.version(r.version)
    monkeypatch.setattr(local_part.store, "read_tail", read_tail)
    assert not os.path.exists(version_path) and os.path.getsize(os.path.join(
        local_part.store.root, local_part.folder, info.file)) == info.bytes
    assert local_part.read_segment(info).num_rows == 5


def test_vacuum_cuts_exactly_when_the_first_read_misses_the_trailer(local_part, monkeypatch):
    """The first read from a version's end may not reach its trailer (a large footer):
    vacuum reads on, as a reader does, and cuts the segment to its own bytes."""
    monkeypatch.setattr(versions_module, "MANIFEST_TAIL_BYTES", 64)  # less than a footer
    w = local_part.claim("w")
    for i in range(CHECKPOINT_INTERVAL + 4):
        w.append(table(i, 3))
    m = local_part.snapshot()
    local_part.vacuum(now_ms=wall_clock_ms(), delay_ms=60_000)
    first = m.segments[0]  # its version is long gone
    assert os.path.getsize(os.path.join(local_part.store.root, local_part.folder, first.file)) == first.bytes
    assert local_part.read_segment(first).num_rows == 3
