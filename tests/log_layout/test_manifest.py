"""Manifest encoding: round trips, incremental encoding equals a full one, pickling."""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log_layout import CorruptManifest, Manifest, ProducerBatch, SegmentInfo
from log_layout.idempotence import after_appends


def seg(i: int) -> SegmentInfo:
    return SegmentInfo(f"{i * 10:020d}-{i:016x}.arrow", i * 10, i * 10 + 9, 10, 1000 + i,
                       1_700_000_000_000 + i, 1_700_000_000_500 + i, (i * 2654435761) % 2**32)


def full_encoding(m: Manifest) -> dict:
    """What to_json must produce, computed without any cache."""
    return json.loads(Manifest.from_json(m.to_json(), path="x").to_json())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "drop_first", "replace_middle", "claim"]),
                          st.integers(1, 3)), max_size=25))
def test_incremental_encoding_equals_full(ops):
    m = Manifest("t", 0, 0)
    m.to_json()
    n = 0
    for op, k in ops:
        if op == "add":
            new = tuple(seg(n + i) for i in range(k))
            n += k
            m = m.next(segments=m.segments + new, next_offset=n * 10)
        elif op == "drop_first":
            m = m.next(segments=m.segments[k:], removed=m.removed + ((f"{0:020d}-x.arrow", 5),))
        elif op == "replace_middle" and m.segments:
            i = len(m.segments) // 2
            m = m.next(segments=m.segments[:i] + (seg(1000 + n),) + m.segments[i + 1:])
        else:
            m = m.next(leader_epoch=m.leader_epoch + 1, leader=f"w{k}")
        data = m.to_json()
        parsed = Manifest.from_json(data, path="x")
        assert parsed == m
        assert json.loads(data) == full_encoding(m)


def test_round_trip_all_fields():
    producers = after_appends({}, [(ProducerBatch(9, 1, 0, 4), 100)])
    m = Manifest("t", 3, 7, leader_epoch=2, leader="gw", log_start_offset=10, next_offset=40,
                 segments=(seg(1), seg(2), seg(3)), removed=((seg(0).file, 123),),
                 producers=producers, committer="append", committed_ms=99, cleaned_offset=20)
    assert Manifest.from_json(m.to_json(), path="p") == m
    doc = json.loads(m.to_json())
    assert doc["segments"]["file"] == [seg(i).file for i in (1, 2, 3)]
    assert doc["producers"] == {"9": {"epoch": 1, "batches": [[0, 3, 100, 103]]}}


def test_pickle_carries_fields_not_caches():
    m = Manifest("t", 0, 1, segments=(seg(1),))
    m.to_json()
    m = m.next(segments=m.segments + (seg(2),))
    m.to_json()
    back = pickle.loads(pickle.dumps(m))
    assert back == m and not any(k.startswith("_") for k in vars(back))
    assert back.to_json() == m.to_json()


@pytest.mark.parametrize("name, ok", [
    (f"{0:020d}-00ff.arrow", True),
    (f"_log/{7:020d}-tioX4TFVRlW5h0G_ZuO-0g.json", True),  # a carried segment
    (f"_log/{7:020d}.json", True),  # of a topic made before topic ids
    (f"_log/../{7:020d}.json", False), (f"../_log/{7:020d}.json", False),
    (f"_log/{7:020d}-a/b.json", False), (f"_log/{7:020d}-x.arrow", False),
    (f"_config/{7:020d}.json", False), (f"_log/_log/{7:020d}.json", False),
    (f"/_log/{7:020d}.json", False), ("_log/", False), ("_log", False),
    (f"_log/{7:019d}.json", False), (f"_log/{7:020d}-x.json\n", False),
])
def test_a_manifest_names_only_segments_and_carried_segments(name, ok):
    """A manifest naming anything but a segment file or a carried segment's version file
    (``_log/<version>[-<topic id>].json``) is refused: no path reaches outside the
    partition's folder."""
    m = Manifest("t", 0, 1, segments=(dataclasses.replace(seg(1), file=name),))
    if ok:
        assert Manifest.from_json(m.to_json(), path="p").segments[0].file == name
    else:
        with pytest.raises(CorruptManifest):  # "not a segment", or not even JSON text
            Manifest.from_json(m.to_json(), path="p")
