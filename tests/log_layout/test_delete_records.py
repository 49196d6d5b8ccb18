"""``log_layout.delete_records``: Kafka's DeleteRecords, the log start moved forward by one
manifest version, on every backend."""

from __future__ import annotations

import pytest

from log_layout import OffsetOutOfRange
from log_layout.delete_records import COMMITTER, delete_records
from tests.log_layout.helpers import offsets_and_values, table


@pytest.fixture
def filled(part):
    """Partition ``t``-0 with three segments: offsets 0-3, 4-7, 8-11."""
    w = part.claim("gw")
    for start in (0, 4, 8):
        w.append(table(start, 4))
    return part, w


def test_delete_moves_the_log_start_and_drops_whole_segments(filled):
    part, _ = filled
    before = part.snapshot()
    m = delete_records(part, 6, now_ms=1234)
    assert (m.log_start_offset, m.next_offset, m.version) == (6, 12, before.version + 1)
    assert m.committer == COMMITTER and m.leader_epoch == before.leader_epoch
    # 0-3 is gone (listed as removed, for vacuum); 4-7 holds the new start and stays whole
    assert [s.base_offset for s in m.segments] == [4, 8]
    assert m.removed[-1] == (before.segments[0].file, 1234)
    assert part.snapshot() == m
    assert offsets_and_values(part.read_table(6))[0] == (6, b"v6")
    with pytest.raises(OffsetOutOfRange) as e:
        part.read_table(5)
    assert (e.value.log_start, e.value.log_end) == (6, 12)
    assert part.offset_for_timestamp(0) == 6  # never a deleted offset


def test_delete_never_moves_back_and_refuses_past_the_high_watermark(filled):
    part, _ = filled
    delete_records(part, 6)
    version = part.snapshot().version
    assert delete_records(part, 2).log_start_offset == 6  # nothing to do: no new version
    assert part.snapshot().version == version
    for bad in (13, -2):
        with pytest.raises(OffsetOutOfRange):
            delete_records(part, bad)
    assert part.snapshot().version == version


def test_delete_all_then_the_leader_appends_on(filled):
    """-1 is the high watermark (Kafka's convention); the leader's writer, whose cached
    snapshot is older, rebases its next append on the delete's version."""
    part, writer = filled
    m = delete_records(part, -1)
    assert (m.log_start_offset, m.next_offset, m.segments) == (12, 12, ())
    assert len(m.removed) >= 3
    result = writer.append(table(100, 2))
    assert (result.base_offset, result.last_offset) == (12, 13)
    after = part.snapshot()
    assert after.log_start_offset == 12
    assert offsets_and_values(part.read_table(12)) == [(12, b"v100"), (13, b"v101")]
