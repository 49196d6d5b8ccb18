"""The run's shared servers (tests/shared_servers.py) outlive a pytest a test starts."""

from __future__ import annotations

import os
import subprocess
import sys

from jobs.gateway_process import ROOT
from tests import shared_servers


def test_a_child_pytest_ending_leaves_the_runs_servers_alone(tmp_path):
    """A test that runs pytest in a child (the record fuzzers do) passes the folder's
    name on; the child's session end once removed the folder, and every worker that had
    not yet attached waited 300 s and failed its S3 tests."""
    folder = tmp_path / "servers"
    folder.mkdir()
    (folder / "s3.json").write_text("{}")
    # a test of this suite, so the child loads tests/conftest.py and its session end
    case = f"{__file__}::test_stop_in_a_process_that_started_nothing_does_nothing"
    env = {**os.environ, shared_servers.ENV: str(folder), "PYTHONPATH": ROOT}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-n", "0", case], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (folder / "s3.json").exists()


def test_stop_in_a_process_that_started_nothing_does_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(shared_servers.ENV, str(tmp_path))
    shared_servers.stop()
    assert tmp_path.exists() and os.environ[shared_servers.ENV] == str(tmp_path)
