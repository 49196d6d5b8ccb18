"""The process-wide cache of parsed journal entries (``hot_journal.parsed_entry``): a
fresh Log of the same process takes an entry's parse when the bytes it reads are the
ones parsed before, and parses again (or refuses) any other bytes under the same name."""

from __future__ import annotations

import json
import os
import zlib

import pyarrow as pa
import pytest

from log_layout import open_log, paths
from log_layout.hot_journal import CorruptHotEntry, parsed_entry
from log_layout.hot_writer import JournalWriter


@pytest.fixture
def hot_log(tmp_path):
    """A partition appended to three times through a journal: (root, journal name)."""
    root = str(tmp_path / "store")
    log = open_log(root)
    log.create_topic("t", {"partitions": 1})
    journal = JournalWriter(log.journals, "gw")
    w = log.partition("t", 0).claim("gw", journal)
    for r in range(3):
        w.append(pa.table({"value": [f"r{r}".encode()]}))
    journal.close()
    return root, journal.name


def _entry_file(root: str, journal: str, seq: int) -> tuple[str, str, bytes]:
    """Entry ``seq``: its path in the store, its file, and its bytes."""
    path = paths.hot_entry_path(journal, seq)
    file = os.path.join(root, path)
    with open(file, "rb") as f:
        return path, file, f.read()


def _values(root: str) -> list[bytes]:
    return open_log(root).partition("t", 0).read_table(0).column("value").to_pylist()


def test_a_fresh_log_takes_the_writers_parse_of_equal_bytes(hot_log):
    root, journal = hot_log
    assert _values(root) == [b"r0", b"r1", b"r2"]
    path, file, data = _entry_file(root, journal, 1)
    # the writer's commit left its parse in the process's cache; equal bytes get it back
    first = parsed_entry(data, path)
    assert parsed_entry(bytearray(data), path) is first
    # the same bytes under another name are another entry (the path is in the key)
    other = parsed_entry(data, paths.hot_entry_path(journal, 7))
    assert other is not first and other.path.endswith("00000000000000000007.json")


def test_an_entry_changed_under_the_same_name_is_parsed_again(hot_log):
    root, journal = hot_log
    assert _values(root) == [b"r0", b"r1", b"r2"]
    path, file, data = _entry_file(root, journal, 1)
    cached = parsed_entry(data, path)
    # a valid entry with other bytes (another commit time, its checksum redone)
    body = data.rpartition(b"\n")[0]
    header, _, rest = body.partition(b"\n")
    fields = json.loads(header)
    fields["committed_ms"] += 1
    new_body = json.dumps(fields, separators=(",", ":")).encode() + b"\n" + rest
    with open(file, "wb") as f:
        f.write(new_body + b"\n%08x" % zlib.crc32(new_body))
    fresh = open_log(root)
    got = fresh.journals.entry(journal, 1)
    assert got is not cached and got.committed_ms == cached.committed_ms + 1
    assert _values(root) == [b"r0", b"r1", b"r2"]


def test_a_damaged_entry_is_refused_though_its_name_was_parsed(hot_log):
    root, journal = hot_log
    assert _values(root) == [b"r0", b"r1", b"r2"]
    path, file, data = _entry_file(root, journal, 2)
    data = bytearray(data)
    parsed_entry(bytes(data), path)
    data[len(data) // 2] ^= 0x01  # one bit in the middle of the entry
    with open(file, "wb") as f:
        f.write(data)
    with pytest.raises(CorruptHotEntry):
        _values(root)
