"""Kafka's command-line tools run in one JVM per test process (``ToolRunner.java``).

Each tool JVM started for a single command cost 1.5-3 CPU-seconds of start-up on the two
cores the suite shares (2026-11-29), and the Kafka-tool tests run a few dozen commands.
Here one JVM per class path runs them one after another, each an unchanged tool main
class with its own arguments, stdin, stdout, stderr and exit status (Kafka's own tool
tests call the mains in-process the same way). A command that outlives its timeout kills
the JVM (the next command starts a new one) and raises ``subprocess.TimeoutExpired``.
"""

from __future__ import annotations

import atexit
import os
import struct
import subprocess
import tempfile
import threading

from tests import jvm

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ToolRunner.java")
_INT = struct.Struct(">i")


class ToolRunner:
    """One JVM running tool main classes on ``classpath``, one command at a time."""

    def __init__(self, classpath: str):
        self.classpath = classpath
        self._proc: subprocess.Popen | None = None
        self._log = tempfile.TemporaryFile()  # the JVM's own stderr (the tools' is captured)
        self._lock = threading.Lock()

    def run(self, main: str, *args: str, stdin: str = "", timeout: float = 120) \
            -> subprocess.CompletedProcess:
        """``main`` (a class name) with ``args``: its exit status, stdout and stderr (text).

        Raises subprocess.TimeoutExpired when it has not finished in ``timeout`` seconds.
        """
        with self._lock:
            proc = self._started()
            request = [_INT.pack(1 + len(args))]
            for word in (main, *args):
                data = word.encode()  # Java's modified UTF-8 equals UTF-8 for these
                request.append(struct.pack(">H", len(data)) + data)
            data = stdin.encode()
            request.append(_INT.pack(len(data)) + data)
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
            try:
                proc.stdin.write(b"".join(request))
                proc.stdin.flush()
                status = _INT.unpack(self._read(proc, 4))[0]
                out = self._read(proc, _INT.unpack(self._read(proc, 4))[0])
                err = self._read(proc, _INT.unpack(self._read(proc, 4))[0])
            except (OSError, EOFError) as e:
                self._proc = None
                proc.kill()
                if not timer.is_alive():
                    raise subprocess.TimeoutExpired([main, *args], timeout) from e
                self._log.seek(0)
                raise RuntimeError(f"the tool runner JVM died running {main}: "
                                   f"{self._log.read().decode(errors='replace')[-3000:]}") from e
            finally:
                timer.cancel()
        return subprocess.CompletedProcess([main, *args], status, out.decode(errors="replace"),
                                           err.decode(errors="replace"))

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._proc.stdin.close()
                try:
                    self._proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait()
                self._proc = None

    def _started(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            # a tool's logging without a configuration of its own, as the per-command
            # JVMs ran it (KAFKA_LOG4J_OPTS="")
            self._proc = subprocess.Popen(jvm.java("-cp", self.classpath, SOURCE),
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._log)
        return self._proc

    @staticmethod
    def _read(proc: subprocess.Popen, n: int) -> bytes:
        data = proc.stdout.read(n)
        if len(data) != n:
            raise EOFError(f"{len(data)} of {n} bytes")
        return data


_runners: dict[str, ToolRunner] = {}


def run(classpath: str, main: str, *args: str, stdin: str = "", timeout: float = 120) \
        -> subprocess.CompletedProcess:
    """:meth:`ToolRunner.run` on this process's runner for ``classpath``."""
    runner = _runners.get(classpath)
    if runner is None:
        runner = _runners[classpath] = ToolRunner(classpath)
    return runner.run(main, *args, stdin=stdin, timeout=timeout)


@atexit.register
def _close_all() -> None:
    for runner in _runners.values():
        runner.close()
