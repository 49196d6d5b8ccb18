"""Bad bytes in the store give typed errors on every backend, never a library traceback."""

from __future__ import annotations

import pytest

from log_layout import (CorruptManifest, CorruptSegment, MissingSegment, SparklogError,
                        open_log)
from log_layout import segment as segment_format
from log_layout.direct_reader import DirectReader
from tests.log_layout.helpers import table


@pytest.fixture
def two_segments(part):
    """``part`` with two segments: offsets 0..9 at ts 100, 10..19 at ts 200."""
    w = part.claim("w")
    w.append(table(0, 10, ts=100))
    w.append(table(10, 10, ts=200))


def _reopen(part, store):
    url, options = store
    return open_log(url, storage_options=options).partition("t", 0)


def _all_reads(p):
    """Every read entry point, each a thunk."""
    return [lambda: p.read_table(0), lambda: list(p.read(5, 15)),
            lambda: p.read_segment(p.snapshot().segments[0]),
            lambda: p.read_segments(p.snapshot().segments),
            lambda: p.offset_for_timestamp(50)]


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty"])
@pytest.mark.usefixtures("two_segments")
def test_corrupt_segment(part, damage):
    seg = part.snapshot().segments[0]
    path = f"{part.folder}/{seg.file}"
    data = bytearray(part.store.read(path))
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = bytearray(b"not an arrow file" * 10)
    else:
        data = bytearray()
    part.store.put_replace(path, bytes(data))
    for read in _all_reads(part):
        with pytest.raises(CorruptSegment) as e:
            read()
        # a truncated file is named as such before its checksum is taken
        assert e.value.path == path and ("CRC-32" in str(e.value)
                                          or "the manifest recorded" in str(e.value))
        assert not isinstance(e.value, MissingSegment)
    # the other segment still reads
    assert part.read_table(10).num_rows == 10


@pytest.mark.usefixtures("two_segments")
def test_a_corrupt_segment_after_the_first_of_a_read_in_passes(log, part):
    """A read of several segments takes every checksum before it parses any: a flipped
    byte in the second segment fails the whole read, and a consumer gets no record of it
    nor of the good segment before it (the read raises; the position stays)."""
    first, second = part.snapshot().segments
    path = f"{part.folder}/{second.file}"
    data = bytearray(part.store.read(path))
    data[len(data) // 2] ^= 0x01
    part.store.put_replace(path, bytes(data))
    with pytest.raises(CorruptSegment, match="CRC-32") as e:
        part.read_segments([first, second])
    assert e.value.path == path
    reader = DirectReader(log)
    with pytest.raises(CorruptSegment, match="CRC-32"):
        reader.read_available({("t", 0): 0}, 100)
    # the first alone still reads, through both entry points
    assert [t.num_rows for t in part.read_segments([first])] == [10]
    got, errors = reader.read_available({("t", 0): 0}, 10)
    assert [(b.num_rows, nxt) for _, b, nxt in got] == [(10, 10)] and not errors


@pytest.mark.usefixtures("two_segments")
def test_a_segment_missing_after_the_first_of_a_read_in_passes_ends_it(log, part):
    """A segment vacuumed under a read in passes: what was read before it is answered,
    and a read starting at it raises MissingSegment (the newest manifest still names it)."""
    first, second = part.snapshot().segments
    part.store.delete([f"{part.folder}/{second.file}"])
    assert [t.num_rows for t in part.read_segments([first, second])] == [10]
    with pytest.raises(MissingSegment):
        part.read_segments([second, first])
    reader = DirectReader(log)
    got, _ = reader.read_available({("t", 0): 0}, 100)
    assert [(b.num_rows, nxt) for _, b, nxt in got] == [(10, 10)]
    with pytest.raises(MissingSegment):
        reader.read_available({("t", 0): 10}, 100)


@pytest.mark.parametrize("data", [b"", b"ARROW1", b"garbage" * 100, b"ARROW1\x00\x00" + b"\x01" * 64])
def test_decode_without_checksum_rejects_non_arrow_bytes(data):
    with pytest.raises(CorruptSegment, match="not a readable Arrow IPC file"):
        segment_format.decode(data, path="p", crc32=None)


def test_decode_rejects_a_foreign_schema():
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, pa.schema([("x", pa.int8())])) as w:
        w.write_table(pa.table({"x": pa.array([1], pa.int8())}))
    with pytest.raises(CorruptSegment, match="schema"):
        segment_format.decode(sink.getvalue(), path="p", crc32=None)


@pytest.mark.usefixtures("two_segments")
def test_missing_segment(part):
    seg = part.snapshot().segments[1]
    part.store.delete([f"{part.folder}/{seg.file}"])
    version = part.snapshot().version
    for read in [lambda: part.read_table(0), lambda: part.read_table(12),
                 lambda: part.offset_for_timestamp(150),
                 lambda: part.read_segment(seg, version=version)]:
        with pytest.raises(MissingSegment) as e:
            read()
        assert e.value.path.endswith(seg.file) and e.value.version == version
        assert f"manifest version {version} names it" in str(e.value)
    assert part.read_table(0, 10).num_rows == 10  # what is there still reads


GARBAGE_MANIFESTS = {
    "not json": b"{not json",
    "empty": b"",
    "a list": b"[1, 2]",
    "null": b"null",
    "wrong format": b'{"format": 99}',
    "missing keys": b'{"format": 1, "topic": "t"}',
    "binary": b"\xff\xfe\x00\x01",
}


@pytest.mark.parametrize("name", list(GARBAGE_MANIFESTS))
@pytest.mark.usefixtures("two_segments")
def test_garbage_manifest(part, store, name):
    m = part.snapshot()
    path = part.versions.path(m.version + 1)
    assert part.store.put_exclusive(path, GARBAGE_MANIFESTS[name])
    fresh = _reopen(part, store)
    for call in [fresh.snapshot, fresh.high_watermark, lambda: fresh.read_table(0),
                 lambda: fresh.claim("w2"), part.snapshot]:
        with pytest.raises(CorruptManifest) as e:
            call()
        assert e.value.path == path


def _edit_manifest(part, edit):
    """Commit the newest manifest's JSON, changed by ``edit``, as the next version."""
    import json

    m = part.snapshot()
    doc = json.loads(m.to_json())
    doc["version"] = m.version + 1
    edit(doc)
    path = part.versions.path(m.version + 1)
    assert part.store.put_exclusive(path, json.dumps(doc).encode())
    return path


@pytest.mark.parametrize("edit", [
    lambda d: d["segments"]["count"].__setitem__(0, "many"),
    lambda d: d["segments"]["crc32"].pop(),
    lambda d: d["segments"].__setitem__("file", [None, 3]),
    lambda d: d["segments"]["file"].__setitem__(0, "../../etc/passwd"),
    lambda d: d.__setitem__("next_offset", "x"),
    lambda d: d.__setitem__("version", 0),
    lambda d: d.__setitem__("partition", 5),
    lambda d: d.__setitem__("producers", {"p": {"epoch": 0, "batches": []}}),
], ids=["count-type", "ragged", "file-type", "path-trick", "next-type", "wrong-version",
        "wrong-partition", "producer-id"])
@pytest.mark.usefixtures("two_segments")
def test_well_formed_json_with_wrong_contents(part, store, edit):
    path = _edit_manifest(part, edit)
    with pytest.raises(CorruptManifest) as e:
        _reopen(part, store).read_table(0)
    assert e.value.path == path


def test_corrupt_topic_metadata(log):
    log.create_topic("t")
    log.store.put_replace("t/_topic.json", b"{broken")
    with pytest.raises(CorruptManifest, match="t/_topic.json"):
        log.topic("t", refresh=True)
    log.store.put_replace("t/_topic.json", b'{"name": "t", "created_ms": 1, '
                                           b'"configs": {"retention.ms": "soon"}}')
    with pytest.raises(SparklogError):
        log.topic("t", refresh=True)


def test_partition_without_manifest(log):
    log.create_topic("t")
    log.store.delete_tree("t/0/_log")
    with pytest.raises(CorruptManifest, match="no manifest"):
        open_log(log.url, storage_options=getattr(log.store, "storage_options", None)) \
            .partition("t", 0).snapshot()
