"""``sparklog compact | retention | maintain | maintenance-history`` and spark-submit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from jobs.cli import main
from jobs.cli import duration
from log_layout import open_log
from tests.compaction.helpers import T0, keyed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def seed(path):
    log = open_log(path)
    log.create_topic("users", {"cleanup.policy": "compact", "partitions": 2})
    log.create_topic("clicks", {"retention.ms": 1000})
    for p in range(2):
        w = log.partition("users", p).claim("t")
        for i in range(3):
            w.append(keyed([("a", str(i)), ("b", str(i))], T0), now_ms=T0)
    w = log.partition("clicks", 0).claim("t")
    for i in range(3):
        w.append(keyed([("x", str(i))], T0), now_ms=T0)  # years old by the wall clock
    return log


def test_dry_run_reports_and_writes_nothing(tmp_path, capsys):
    log = seed(str(tmp_path / "s"))
    versions = {(t, p.partition): p.snapshot().version for t in log.topics()
                for p in log.partitions(t)}
    assert main(["--store", str(tmp_path / "s"), "maintain", "--no-spark", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "compact" in out and "retention" in out
    assert "8->4" in out  # compaction would keep 4 of the 8 records of 2x2 old segments
    assert {(t, p.partition): p.snapshot().version for t in log.topics()
            for p in log.partitions(t)} == versions
    assert log.history() == []  # dry runs are not history


def test_commands_topic_filter_and_history(tmp_path, capsys):
    store = str(tmp_path / "s")
    log = seed(store)
    assert main(["--store", store, "compact", "--no-spark", "--topic", "user*"]) == 0
    assert log.partition("users", 0).snapshot().cleaned_offset == 4
    assert log.partition("clicks", 0).log_start_offset() == 0
    assert main(["--store", store, "retention", "--no-spark", "--topic", "clicks"]) == 0
    assert log.partition("clicks", 0).log_start_offset() == 2
    assert main(["--store", store, "maintain", "--no-spark", "--every", "1h", "--runs", "1"]) == 0
    capsys.readouterr()
    assert main(["--store", store, "maintenance-history"]) == 0
    out = capsys.readouterr().out
    assert "compact" in out and "retention" in out and "maintain" in out
    assert main(["--store", store, "maintenance-history", "--json", "--limit", "1"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["command"] == "maintain"


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    seed(str(tmp_path / "s"))
    assert main(["--store", str(tmp_path / "s"), "compact", "--no-spark", "--topic", "nope"]) == 2
    assert "no such topic: nope" in capsys.readouterr().err
    every = duration(1)
    assert every("5m") == 300_000 and every("250ms") == 250 and every("5") == 5  # bare = ms
    with pytest.raises(SystemExit):
        main(["maintain", "--every", "soon"])


@pytest.mark.spark
@pytest.mark.slow
def test_spark_submit_runs_the_same_command(tmp_path):
    store = str(tmp_path / "s")
    log = seed(store)
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run([shutil.which("spark-submit", path=env["PATH"]), "--master", "local[1]",
                           os.path.join(ROOT, "jobs", "maintain.py"), "--store", store,
                           "maintain", "--topic", "users"],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "maintain" in proc.stdout and "compact" in proc.stdout
    assert log.partition("users", 1).snapshot().cleaned_offset == 4
    assert log.history()[-1]["partitions_cleaned"] == 2
