"""Spark commands are quiet by default and say what failed in one line.

Each test runs the real CLI in a subprocess, so each starts its own JVM: the
noise being tested is printed at JVM start (incubator warning, log4j banner,
NativeCodeLoader, Ivy's resolution report on a first start) and while jobs run
(``[Stage N:>`` bars, task-failure stack traces). One test runs ``maintain`` in
process, on the run's shared session (``spark`` fixture), to read the log level it
leaves behind.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import conf
from log_layout import open_log
from tests.jobs.cli_proc import assert_one_line_error, sparklog, text

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: what Spark, log4j, the JDK and Ivy print that a quiet command must not
SPARK_NOISE = re.compile(
    r"WARN |INFO |log4j|incubator|NativeCodeLoader|\[Stage \d+|:: resolving|"
    r"confs: \[|artifacts copied|downloading https|Ivy Default Cache|proxy server")


#: the module a first start fetches from Maven Central (its POM and jar, ~120 KB): the
#: rest of Delta's and the Kafka connector's ~100 MB comes from the project's Ivy cache
FETCHED = ("io.delta", "delta-storage")


def ivy_cache_but_one(ivy: Path) -> None:
    """An Ivy folder for ``spark.jars.ivy`` whose cache holds the project's (``.ivy2``,
    filled by the run's first Spark start) without :data:`FETCHED` and without S3A's AWS
    SDK: a first start resolves every package, reads the POMs, retrieves the jars and
    downloads one module, printing all that Ivy prints, without moving 100 MB over the
    network each run. Jars are hard links (Ivy never writes one it has); the metadata,
    which Ivy rewrites, is copied."""
    import os
    import shutil

    from pipeline.spark import _ivy_dir

    source = Path(_ivy_dir(conf.load().spark)) / "cache"
    if not (source / FETCHED[0] / FETCHED[1]).is_dir():
        return  # no project cache yet: the start fetches everything, as a user's first

    def link_or_copy(src: str, dst: str) -> None:
        if src.endswith(".jar"):
            try:
                os.link(src, dst)
                return
            except OSError:  # another file system
                pass
        shutil.copy2(src, dst)

    shutil.copytree(source, ivy / "cache", copy_function=link_or_copy, ignore=lambda _, names: [
        n for n in names if n.startswith("software.amazon")])
    shutil.rmtree(ivy / "cache" / FETCHED[0] / FETCHED[1])


def test_a_first_start_and_a_query_print_only_the_result(tmp_path):
    """A first start (no jar list recorded, Ivy resolving the packages and fetching from
    Maven Central: :func:`ivy_cache_but_one`) shows one line of its own about the fetch,
    and no Ivy, log4j or stage-bar line."""
    store = str(tmp_path / "store")
    open_log(store).create_topic("quiet_t", {"partitions": 1})
    ivy_cache_but_one(tmp_path / "ivy")
    run = sparklog("--store", store, "--set", f"spark.jars.ivy={tmp_path / 'ivy'}", "sql",
                   "SELECT count(*) AS n FROM quiet_t", timeout=600)
    out, err = text(run)
    assert run.returncode == 0, err
    assert re.search(r"\bn\b", out) and "0" in out
    noisy = [line for line in err.splitlines() if SPARK_NOISE.search(line)]
    assert noisy == [], err
    assert ":: loading settings" not in out and "Ivy" not in out, out  # Ivy writes to stdout
    assert [line for line in err.splitlines() if line.strip()] == [
        line for line in err.splitlines() if line.startswith("sparklog: fetching")]
    assert "sparklog: fetching io.delta:delta-spark" in err
    # what the cache lacked came from Maven Central
    assert list((tmp_path / "ivy" / "cache" / FETCHED[0] / FETCHED[1]).glob("jars/*.jar"))


def test_verbose_shows_sparks_own_output(tmp_path):
    """The same start with --verbose prints what the default hides (so the check above
    could fail)."""
    store = str(tmp_path / "store")
    open_log(store)
    run = sparklog("--store", store, "--verbose", "sql", "SELECT 1 AS one", timeout=600)
    out, err = text(run)
    assert run.returncode == 0, err
    assert SPARK_NOISE.search(err), err


def quiet(err: str) -> list[str]:
    """The lines of ``err`` a quiet command must not print."""
    return [line for line in err.splitlines() if SPARK_NOISE.search(line)]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """test_maintain's store: ``users`` (compacted, 2 partitions of 3 segments, each
    segment keys a and b) and ``clicks``, for materialize and maintain to work on."""
    from tests.jobs.test_maintain import seed

    store = str(tmp_path_factory.mktemp("quiet") / "store")
    seed(store)
    return store


def test_a_materialization_prints_only_its_result(seeded):
    run = sparklog("--store", seeded, "materialize", "users", "--table", "quiet_users",
                   "--once", timeout=600)
    out, err = text(run)
    assert run.returncode == 0, err
    assert "quiet_users: 2 rows" in err, err  # compacted: the latest value of a and of b
    assert quiet(err) == [] and quiet(out) == [], err


def test_a_spark_maintenance_run_prints_only_its_table(seeded):
    """``maintain`` as a Spark job (one task per partition): its summary table, and no
    WARN, log4j or stage-bar line (it used to set Spark's level to WARN)."""
    run = sparklog("--store", seeded, "maintain", "--topic", "users", "--master", "local[2]",
                   timeout=600)
    out, err = text(run)
    assert run.returncode == 0, err
    assert "compact" in out and "8->4" in out, out  # 2 partitions of 4 records keep 2 each
    assert quiet(err) == [] and quiet(out) == [], err
    assert open_log(seeded).partition("users", 1).snapshot().cleaned_offset == 4


def test_maintain_keeps_the_sessions_errors_only_log_level(spark, seeded, capsys):
    """``maintain`` used to set Spark's level to WARN (over the shipped errors-only
    conf/log4j2.properties), so any later WARN reached the user."""
    from jobs.cli import main

    log4j = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager
    assert str(log4j.getRootLogger().getLevel()) == "ERROR"
    assert main(["--store", seeded, "maintain", "--topic", "clicks"]) == 0
    assert "retention" in capsys.readouterr().out
    assert str(log4j.getRootLogger().getLevel()) == "ERROR"


def test_an_error_in_the_spark_source_is_one_line(tmp_path):
    store = str(tmp_path / "store")
    open_log(store).create_topic("quiet_bad", {"partitions": 1})
    run = sparklog("--store", store, "materialize", "quiet_bad", "--table", "quiet_bad",
                   "--once", "--option", "startingOffsets=bogus", timeout=600)
    line = assert_one_line_error(run, "sparklog source option 'startingOffsets' 'bogus'")
    assert "PYTHON_DATA_SOURCE_ERROR" not in line and "Traceback" not in text(run)[1]


def test_on_a_terminal_sparklog_shows_its_own_progress(tmp_path):
    """stderr a terminal (a pty): the command's own spinner says what it waits for,
    while Spark's stage bars stay off."""
    import os
    import subprocess
    import sys
    import threading

    from jobs.gateway_process import ROOT

    store = str(tmp_path / "store")
    open_log(store)
    controller, terminal = os.openpty()
    seen = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal side is closed
                return
            if not chunk:
                return
            seen.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = subprocess.run([sys.executable, "-m", "jobs.cli", "--store", store, "sql",
                               "SELECT 1 AS one"], stdout=subprocess.PIPE, stderr=terminal,
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=600)
    finally:
        os.close(terminal)
        reader.join(10)
        os.close(controller)
    shown = seen.decode(errors="replace")
    assert proc.returncode == 0, shown
    # the spinner turns all through the JVM's start (seconds at 12.5 frames a second),
    # not only until fd 2 is pointed at the filtering pipe (one frame, or none)
    assert shown.count("starting Spark") >= 2, shown
    assert "[Stage" not in shown and not SPARK_NOISE.search(shown), shown
