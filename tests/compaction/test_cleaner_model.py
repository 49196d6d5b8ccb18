"""The cleaner against the reference model: random keyed workloads with tombstones.

Each example appends random batches (one segment each) and runs cleaner passes
with time moving forward; after every pass the log must equal the model's
records (offsets, keys, values, timestamps), and both must agree on whether the
pass cleaned and where the checkpoint is.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.cleaner import MEMORY_BUDGET_BYTES, compact_partition
from tests.compaction.model import ModelLog, Seg, records_of

T0 = 1_700_000_000_000

# (key number, tombstone?, value number, age in ms: producers' timestamps differ)
batch = st.lists(st.tuples(st.integers(0, 7), st.booleans(), st.integers(0, 9),
                           st.integers(0, 600)),
                 min_size=1, max_size=12)
step = st.one_of(
    st.tuples(st.just("append"), batch, st.integers(0, 400)),
    st.tuples(st.just("clean"), st.just([]), st.integers(0, 2000)),
)
workload = st.lists(step, min_size=2, max_size=14)
configs = st.fixed_dictionaries({
    "min.compaction.lag.ms": st.sampled_from([0, 0, 300, 1500]),
    "min.cleanable.dirty.ratio": st.sampled_from([0.0, 0.3, 0.6, 0.95]),
    "delete.retention.ms": st.sampled_from([0, 500, 5000]),
    "segment.bytes": st.sampled_from([120, 600, 1 << 20]),
})


def rows_of(spec, now: int) -> list[tuple[bytes, bytes | None, int]]:
    # about a sixth of the records are tombstones
    return [(f"k{k}".encode(), None if dead and v < 3 else f"v{k}-{v}".encode(), now - age)
            for k, dead, v, age in spec]


def run_workload(log, steps, configs, budget: int = MEMORY_BUDGET_BYTES) -> None:
    topic = f"c-{uuid.uuid4().hex[:10]}"
    log.create_topic(topic, {"cleanup.policy": "compact", **configs})
    config = log.topic(topic).config
    plog = log.partition(topic, 0)
    writer = plog.claim("test")
    model = ModelLog()
    now = T0
    for kind, spec, advance in steps + [("clean", [], 0)]:
        now += advance
        if kind == "append":
            rows = rows_of(spec, now)
            writer.append(pa.table({"key": pa.array([k for k, _, _ in rows], pa.binary()),
                                    "value": pa.array([v for _, v, _ in rows], pa.binary()),
                                    "timestamp": pa.array([t for _, _, t in rows], pa.int64())}),
                          now_ms=now)
            model.append(rows)
            continue
        before = plog.snapshot()
        segs = [Seg(s.base_offset, s.last_offset, s.bytes) for s in before.segments]
        model_cleaned = model.clean(segs, now=now, lag_ms=config.min_compaction_lag_ms,
                                    min_ratio=config.min_cleanable_dirty_ratio,
                                    delete_retention_ms=config.delete_retention_ms)
        result = compact_partition(plog, config, now, memory_budget_bytes=budget)
        assert result.changed == model_cleaned, result
        after = plog.snapshot()
        assert after.cleaned_offset == model.checkpoint
        actual = records_of(plog.read_table(after.log_start_offset))
        assert actual == model.records
        assert result.records_after <= result.records_before
        # output segments respect segment.bytes (a lone oversized record may exceed it)
        if model_cleaned:
            for s in after.segments:
                if s.last_offset < after.cleaned_offset and s.count > 1:
                    assert s.bytes <= config.segment_bytes + 2048  # IPC framing overhead


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=workload, configs=configs, budget=st.sampled_from([0, MEMORY_BUDGET_BYTES]))
def test_cleaner_matches_model_memory(steps, configs, budget):
    # budget 0: every pass takes the two-pass, one-segment-at-a-time path
    from log_layout import open_log

    run_workload(open_log(f"memory://model-{uuid.uuid4().hex}"), steps, configs, budget)


@pytest.mark.parametrize("backend", ["file", "s3", "hdfs"], indirect=True)
def test_cleaner_matches_model_on_backend(log, backend):
    # The same property on real stores, fewer examples (each costs real I/O).
    @settings(max_examples=12 if backend == "file" else 6, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(steps=workload, configs=configs)
    def check(steps, configs):
        run_workload(log, steps, configs)

    check()
