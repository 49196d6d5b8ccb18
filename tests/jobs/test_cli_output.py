"""What every command prints: whole tables at any width, one size format, ISO times,
plurals, help without docstring markup, confirmation (issue 16)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conf.errors import ConfigError
from jobs.cli import _command_parsers, build_parser
from jobs.cli_output import human_size, iso_ms, parse_time_ms, plural
from jobs.gateway_process import ROOT
from log_layout import open_log


def test_sizes_times_and_plurals():
    assert [human_size(n) for n in (0, 812, 1024, 4_718_592, 3 * 2**40, None)] == [
        "0 B", "812 B", "1.0 KiB", "4.5 MiB", "3.0 TiB", "-"]
    assert iso_ms(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert [iso_ms(None), iso_ms(-1)] == ["-", "-"]
    assert [plural(1, "partition"), plural(2, "partition"), plural(0, "entry", "entries"),
            plural(12_000, "record")] == ["1 partition", "2 partitions", "0 entries",
                                          "12,000 records"]
    assert parse_time_ms("2023-11-14T22:13:20.123Z", "--x") == 1_700_000_000_123
    assert parse_time_ms("2023-11-14T23:13:20+01:00", "--x") == 1_700_000_000_000
    assert parse_time_ms("2023-11-14 22:13:20", "--x") == 1_700_000_000_000  # naive = UTC
    assert parse_time_ms("1700000000000", "--x") == 1_700_000_000_000
    for bad in ("soon", "", "2023-02-30", "-5", "1969-01-01T00:00:00Z"):
        with pytest.raises(ConfigError) as e:
            parse_time_ms(bad, "--to-datetime")
        assert e.value.key == "--to-datetime"


def _piped(*args: str, columns: str | None) -> str:
    """The command's stdout through a pipe, with $COLUMNS set or not at all."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    run = subprocess.run([sys.executable, "-m", "jobs.cli", *args], capture_output=True,
                         cwd=ROOT, env={**env, "PYTHONPATH": ROOT}, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr.decode()
    return run.stdout.decode()


@pytest.mark.parametrize("columns", [None, "40"])
def test_tables_are_whole_when_piped_at_any_width(tmp_path, columns):
    """Rich squeezed piped tables to 80 columns (``partit…``); a pipe has no width."""
    store = str(tmp_path / "store")
    lg = open_log(store)
    name = "a-rather-long-topic-name-for-a-narrow-terminal"
    lg.create_topic(name, {"partitions": 1, "retention.ms": 1000})
    out = _piped("topics", "describe", name, "--store", store, columns=columns)
    assert "…" not in out
    header = [line for line in out.splitlines() if line.startswith("PARTITION")][0]
    assert header.split() == ["PARTITION", "LEADER", "EPOCH", "LOG-START", "HIGH-WATERMARK",
                              "RECORDS", "SIZE", "SEGMENTS", "LAST-COMMIT"]
    assert f"topic {name} (topic id" in out and "1 partition," in out
    out = _piped("topics", "list", "--long", "--store", store, columns=columns)
    assert out.splitlines()[1].split() == [name, "1", "0", "0", "B", "retention.ms=1000"]


def test_help_texts_have_no_docstring_markup():
    parser = build_parser()
    for _depth, child in [(0, parser), *_command_parsers(parser)]:
        text = child.format_help()
        assert "``" not in text and ":func:" not in text, child.prog


@pytest.mark.parametrize("answer, deleted", [(b"n\n", False), (b"\n", False), (b"yes\n", True)])
def test_a_destructive_command_asks_on_a_terminal(tmp_path, answer, deleted):
    """stdin a terminal (a pty): ``topics delete`` asks, and only yes deletes."""
    store = str(tmp_path / "store")
    open_log(store).create_topic("doomed", {"partitions": 1})
    controller, terminal = os.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", "topics", "delete", "doomed",
                                 "--store", store], stdin=terminal, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=ROOT, env={**os.environ,
                                                                       "PYTHONPATH": ROOT})
        os.write(controller, answer)  # read once the prompt is up: a pty buffers it
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(controller)
        os.close(terminal)
    assert "Delete topic 'doomed' and all its data? [y/N]" in out.decode()
    assert (open_log(store).topics() == []) is deleted
    if deleted:
        assert proc.returncode == 0 and "deleted topic doomed" in out.decode()
    else:
        assert proc.returncode == 2 and "not confirmed, nothing changed" in err.decode()
        assert "Traceback" not in err.decode()
