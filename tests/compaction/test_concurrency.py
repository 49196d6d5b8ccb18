"""Maintenance beside a live producer and consumer of the same partition.

A producer thread appends keyed batches with tombstones, a consumer thread
reads forward from offset 0 (resetting to the log start if retention passes
it, like ``auto.offset.reset=earliest``), and the test thread runs retention,
compaction, roll-up and vacuum over and over -- on the file backend some of
the passes are the Spark job. Vacuum deletes superseded files while the
consumer may still hold older manifests. Time here is the wall clock because
the writer and vacuum judge real file ages; the test waits on conditions with
a bound, never for a duration.
"""

from __future__ import annotations

import itertools
import random
import threading
import time

import pyarrow as pa
import pytest

from jobs.maintain import maintain_partition, run
from log_layout import OffsetOutOfRange, wall_clock_ms

BATCHES = {"file": 120, "memory": 120, "s3": 50, "hdfs": 30}
DEADLINE_S = 90
#: appends the producer may make per maintenance pass (at most two passes' worth saved
#: up): unpaced, a producer appending back to back on S3 (one conditional PUT each)
#: outran maintenance, whose whole-manifest commits kept losing to it: one roll-up
#: run of 128 commits took 99 s
APPENDS_PER_PASS = 40


# on the file backend some passes are the Spark job (its session started before the clock)
@pytest.mark.parametrize("backend", [pytest.param("file", marks=pytest.mark.spark),
                                     "memory", "s3", "hdfs"], indirect=True)
def test_maintenance_beside_producer_and_consumer(log, backend, request):
    spark = request.getfixturevalue("spark") if backend == "file" else None
    log.create_topic("live", {"cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": 0,
                              "delete.retention.ms": 10**9, "segment.bytes": 6000,
                              "retention.bytes": 9000, "retention.ms": -1,
                              # > 2 s: S3 LastModified has 1 s granularity (see report)
                              "file.delete.delay.ms": 2500})
    plog = log.partition("live", 0)
    config = log.topic("live").config
    produced: dict[int, tuple[bytes, bytes | None]] = {}
    seen: list[tuple[int, bytes, bytes | None]] = []
    errors: list[BaseException] = []
    producer_done = threading.Event()
    stop = threading.Event()
    every_step_ran = threading.Event()
    deadline = time.monotonic() + DEADLINE_S
    budget, paced, unpaced = [0], threading.Condition(), threading.Event()

    def wait_for_budget() -> None:
        with paced:
            paced.wait_for(lambda: budget[0] > 0 or unpaced.is_set(), timeout=DEADLINE_S)
            budget[0] -= 1

    def producer() -> None:
        try:
            rng = random.Random(1)
            w = plog.claim("producer")
            # at least BATCHES, and on until every maintenance step has run beside it: a
            # producer done before roll-up's turn (a slow, loaded machine) would leave it
            # nothing to roll up
            for b in itertools.count():
                if b >= BATCHES[backend] and (every_step_ran.is_set()
                                              or time.monotonic() > deadline):
                    break
                wait_for_budget()
                rows = [(f"k{rng.randrange(40)}".encode(),
                         None if rng.random() < 0.1 else f"{b}-{j}".encode()) for j in range(20)]
                res = w.append(pa.table({"key": pa.array([r[0] for r in rows], pa.binary()),
                                         "value": pa.array([r[1] for r in rows], pa.binary())}))
                for i, r in enumerate(rows):
                    produced[res.base_offset + i] = r
        except BaseException as e:  # noqa: BLE001 -- reported by the test thread
            errors.append(e)
        finally:
            producer_done.set()

    def consumer() -> None:
        position, resets = 0, 0
        try:
            while not stop.is_set():
                m = plog.snapshot()
                try:
                    for batch in plog.read(position, manifest=m):
                        seen.extend(zip(batch.column("offset").to_pylist(),
                                        batch.column("key").to_pylist(),
                                        batch.column("value").to_pylist()))
                except OffsetOutOfRange:
                    position, resets = plog.log_start_offset(), resets + 1
                    continue
                position = m.next_offset
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for t in threads:
        t.start()
    did: dict[str, int] = {"retention": 0, "compact": 0, "rollup": 0, "vacuum": 0}
    passes = 0
    try:
        while time.monotonic() < deadline and not errors:
            passes += 1
            with paced:
                budget[0] = min(max(budget[0], 0) + APPENDS_PER_PASS, 2 * APPENDS_PER_PASS)
                paced.notify_all()
            if spark is not None and passes % 6 == 0:
                results = run(log, now_ms=wall_clock_ms(), spark=spark).results
            elif passes % 2:
                # without compaction in between, the producer's flushes pile up for roll-up
                results = maintain_partition(plog, config, wall_clock_ms(),
                                             steps=("retention", "rollup", "vacuum"))
            else:
                results = maintain_partition(plog, config, wall_clock_ms())
            for r in results:
                did[r.action] += int(r.changed and (r.action != "vacuum" or r.files_deleted > 0))
            if all(did.values()):
                every_step_ran.set()
            if producer_done.is_set() and all(did.values()):
                break
    finally:
        unpaced.set()
        with paced:
            paced.notify_all()
        producer_done.wait(DEADLINE_S)
        stop.set()
        for t in threads:
            t.join(DEADLINE_S)
    assert not errors, errors
    assert all(did.values()), did  # every step really ran while the others were live

    # the consumer: strictly increasing offsets, each record exactly as produced
    offsets = [o for o, _, _ in seen]
    assert offsets == sorted(set(offsets))
    assert all(produced[o] == (k, v) for o, k, v in seen)

    # the log: no duplicate, survivors keep their offsets, the latest of each key is kept
    m = plog.snapshot()
    final = plog.read_table(m.log_start_offset)
    rows = list(zip(final.column("offset").to_pylist(), final.column("key").to_pylist(),
                    final.column("value").to_pylist()))
    assert [o for o, _, _ in rows] == sorted({o for o, _, _ in rows})
    assert all(produced[o] == (k, v) for o, k, v in rows)
    assert m.next_offset == len(produced)
    latest: dict[bytes, int] = {}
    for o in sorted(produced):
        latest[produced[o][0]] = o
    present = {o for o, _, _ in rows}
    assert all(o in present for o in latest.values() if o >= m.log_start_offset)
    # nothing above the cleaner's checkpoint was removed except by retention
    dirty_from = max(m.cleaned_offset, m.log_start_offset)
    assert all(o in present for o in produced if o >= dirty_from)
    for a, b in zip(m.segments, m.segments[1:]):
        assert a.last_offset < b.base_offset
