"""Run the ``sparklog`` CLI as a real subprocess (``python -m jobs.cli``)."""

from __future__ import annotations

import os
import subprocess
import sys

from jobs.gateway_process import ROOT

NO_GATEWAY = "http://127.0.0.1:9"  # the discard port: nothing listens, connect is refused


def sparklog(*args: str, stdin: bytes = b"", timeout: float = 120) -> subprocess.CompletedProcess:
    """The finished command (``stdout``/``stderr`` as text); ``timeout`` only guards a hang."""
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], input=stdin,
                          capture_output=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT, "COLUMNS": "200"})


def text(run: subprocess.CompletedProcess) -> tuple[str, str]:
    return run.stdout.decode(errors="replace"), run.stderr.decode(errors="replace")


def assert_one_line_error(run: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit status 2, no traceback, and stderr ending in the one ``sparklog: error: ...``
    line, which holds ``needles``; returns that line."""
    out, err = text(run)
    assert run.returncode == 2, (run.returncode, out, err)
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("sparklog: error: "), err
    assert sum("error" in line for line in lines) == 1, err
    for needle in needles:
        assert needle in lines[-1], (needle, lines[-1])
    return lines[-1]


def on_a_terminal(*args: str, answer: bytes, timeout: float = 120) -> tuple[int, str, str]:
    """The command with a terminal (a pty) as stdin, so that it may ask, and ``answer``
    typed there: (exit status, stdout, stderr)."""
    controller, terminal = os.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", *args], stdin=terminal,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": ROOT, "COLUMNS": "200"})
        os.write(controller, answer)  # read once the prompt is up: a pty buffers it
        out, err = proc.communicate(timeout=timeout)
    finally:
        os.close(controller)
        os.close(terminal)
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
