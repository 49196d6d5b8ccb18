"""A Spark task that fails after the sink appended some of its rows, and is retried,
writes its rows once: the failed attempt's segments are discarded from the
transaction before the commit (``sink_txn.discard_unreported``).

Real Spark with task retries (``local[2,2]``) in a process of its own
(``sink_retry_job``); the failed attempt appended ``FLUSH_ROWS`` rows (at least
one segment) before failing, which read_uncommitted still shows and read_committed never does.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys

import pytest

from jobs.gateway_process import ROOT
from log_layout import open_log
from pipeline.sink import FLUSH_ROWS

ROWS = FLUSH_ROWS + 20_000  # partition 0 of the job holds half, fails after FLUSH_ROWS


def run_job(store: str, topic: str, fail_after: int):
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-m", "tests.pipeline.sink_retry_job", store, topic,
                           str(2 * ROWS), str(fail_after)],
                          cwd=ROOT, env=env, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]


@pytest.mark.slow
def test_a_retried_task_writes_its_rows_once(tmp_path):
    store = str(tmp_path / "store")
    log = open_log(store)
    log.create_topic("t", {"partitions": 1})
    run_job(store, "t", FLUSH_ROWS)
    part = log.partition("t", 0)
    committed = part.read_table(0, isolation_level="read_committed").column("value")
    counts = collections.Counter(committed.to_pylist())
    assert len(counts) == 2 * ROWS and set(counts.values()) == {1}
    # the failed attempt's appends are there, each discarded: one aborted range
    m = part.snapshot()
    assert not m.open_txns and len(m.aborted) >= 1
    discarded = sum(last - first + 1 for _, first, last in m.aborted)
    uncommitted = part.read_table(0, isolation_level="read_uncommitted").num_rows
    assert uncommitted == 2 * ROWS + discarded > 2 * ROWS
