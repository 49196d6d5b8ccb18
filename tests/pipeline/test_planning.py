"""Task planning from manifests, without Spark: packing segments into tasks, splitting."""

from __future__ import annotations

from log_layout import SegmentInfo
from pipeline.planning import Slice, pack, split


def _slices(partition: int, segments: int, *, records: int = 100, size: int = 1000,
            topic: str = "t") -> list[Slice]:
    out = []
    for i in range(segments):
        info = SegmentInfo(f"{i}.arrow", i * records, (i + 1) * records - 1, records, size, 0, 0, 0)
        out.append(Slice(topic, partition, info, info.base_offset, info.end_offset, 0))
    return out


def _covered(tasks) -> list[tuple[str, int, int, int]]:
    return [(s.topic, s.partition, s.start, s.end) for t in tasks for s in t]


def test_pack_groups_consecutive_segments_of_one_partition_evenly():
    slices = _slices(0, 10) + _slices(1, 10)
    tasks = pack(slices, max_bytes=3000, min_tasks=1)
    assert len(tasks) == 8  # ceil(10,000 / 3,000) = 4 tasks per partition
    assert sorted(len(t) for t in tasks) == [2, 2, 2, 2, 3, 3, 3, 3]
    assert all(len({(s.topic, s.partition) for s in t}) == 1 for t in tasks)
    assert _covered(tasks) == _covered([(s,) for s in slices])  # nothing lost, in order


def test_pack_keeps_enough_tasks_for_small_data():
    slices = _slices(0, 16)
    assert len(pack(slices, max_bytes=1 << 30, min_tasks=8)) == 8
    assert len(pack(_slices(0, 3), max_bytes=1 << 30, min_tasks=8)) == 3  # never split a slice


def test_split_by_min_partitions_and_max_records():
    slices = _slices(0, 2)
    parts = split(slices, min_partitions=5, max_records=None)
    assert len(parts) >= 5
    assert sum(s.size for s in parts) == 200
    capped = split(slices, min_partitions=None, max_records=30)
    assert max(s.size for s in capped) <= 30 and sum(s.size for s in capped) == 200


def test_a_task_whose_segment_was_compacted_and_vacuumed_reads_the_new_one(local_log):
    from pipeline.options import parse
    from pipeline.planning import plan
    from pipeline.source import read_task
    from tests.pipeline.conftest import append, source_options

    local_log.create_topic("c", {"partitions": 1, "cleanup.policy": "compact"})
    append(local_log, "c", 0, ["1", "2", "3"], keys=["x", "y", "x"])
    opts = parse(source_options(local_log, subscribe="c"))
    (task,) = plan(local_log, {("c", 0): (0, 3)}, opts)
    part = local_log.partition("c", 0)
    old = part.snapshot().segments[0]
    part.replace_segments([old], [part.read_segment(old).slice(1)], committer="cleaner",
                          now_ms=10_000)
    part.vacuum(now_ms=10_000, delay_ms=0)  # the planned file is gone
    rows = [r for b in read_task(opts, task) for r in b.to_pylist()]
    assert [(r["offset"], r["value"]) for r in rows] == [(1, b"2"), (2, b"3")]


def test_a_task_whose_segment_retention_deleted_is_data_loss_or_skipped(local_log):
    import pytest

    from pipeline.errors import DataLoss
    from pipeline.options import parse
    from pipeline.planning import plan
    from pipeline.source import read_task
    from tests.pipeline.conftest import append, source_options

    local_log.create_topic("r", {"partitions": 1})
    append(local_log, "r", 0, ["a", "b"])
    append(local_log, "r", 0, ["c"])
    strict = parse(source_options(local_log, subscribe="r"))
    lenient = parse(source_options(local_log, subscribe="r", failOnDataLoss="false"))
    tasks = plan(local_log, {("r", 0): (0, 3)}, strict)
    part = local_log.partition("r", 0)
    first = part.snapshot().segments[0]
    part.replace_segments([first], [], committer="retention", now_ms=10_000,
                          log_start_offset=first.end_offset)
    part.vacuum(now_ms=10_000, delay_ms=0)
    with pytest.raises(DataLoss, match="offsets 0 to 1 were deleted by retention"):
        [b for t in tasks for b in read_task(strict, t)]
    rows = [r for t in tasks for b in read_task(lenient, t) for r in b.to_pylist()]
    assert [r["value"] for r in rows] == [b"c"]
