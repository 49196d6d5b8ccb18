"""The record-batch fuzzers (``records_fuzz_cases.py``) run in a child process.

The decoder under them is native code (the compiled codec ``_records_c``, aiokafka's
reader, cramjam's decompressors): an abort there has no Python exception, so the
child's exit status is the verdict. ``SPARKLOG_RECORDS_FUZZ_EXAMPLES`` sets the
examples per fuzzer (300; 5,000 under ``slow``).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jobs.gateway_process import ROOT

CASES = os.path.join(os.path.dirname(__file__), "records_fuzz_cases.py")


def _run_child(examples: int) -> None:
    env = {**os.environ, "SPARKLOG_RECORDS_FUZZ_EXAMPLES": str(examples)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           CASES], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, \
        f"the record fuzzers' child ended {proc.returncode}:\n{proc.stdout[-4000:]}" \
        f"\n{proc.stderr[-2000:]}"
    assert " passed" in proc.stdout and "failed" not in proc.stdout


def test_hostile_record_batches_in_a_child():
    _run_child(int(os.environ.get("SPARKLOG_RECORDS_FUZZ_EXAMPLES", "300")))


@pytest.mark.slow
def test_many_hostile_record_batches_in_a_child():
    _run_child(5000)
