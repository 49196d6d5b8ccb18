"""Hostile bytes in the hot tier's entries and shared objects give a typed error, never a
wrong record, and never kill the reader (the reads run in a child process:
tests/log_layout/hot_fuzz_child.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from log_layout import open_log
from log_layout.hot_writer import JournalWriter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _written(tmp_path) -> str:
    root = str(tmp_path / "store")
    log = open_log(root)
    log.create_topic("t", {"partitions": 3})
    journal = JournalWriter(log.journals, "fuzz")
    try:
        writers = [log.partition("t", p).claim("fuzz", journal) for p in range(3)]
        for r in range(4):
            futures = [w.append_async(pa.table({"key": [b"k"], "value": [f"r{r}-p{p}".encode()]}))
                       for p, w in enumerate(writers)]
            for f in futures:
                f.result(timeout=60)
    finally:
        journal.close()
    return root


def _fuzz(root: str, cases: int, seed: int) -> dict:
    child = subprocess.run([sys.executable, "-m", "tests.log_layout.hot_fuzz_child", root,
                            str(cases), str(seed)], cwd=ROOT, capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, f"{child.stdout}\n{child.stderr[-3000:]}"
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_hostile_hot_files_give_typed_errors(tmp_path):
    counts = _fuzz(_written(tmp_path), 300, 1)
    assert counts.get("same", 0) < 300  # the mutations did reach the readers
    assert set(counts) <= {"same", "CorruptHotEntry", "CorruptManifest", "CorruptSegment",
                           "MissingSegment"}


@pytest.mark.slow
def test_hostile_hot_files_give_typed_errors_long(tmp_path):
    _fuzz(_written(tmp_path), 3000, 2)
