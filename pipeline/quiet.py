"""Spark without its noise: what a sparklog command shows of the JVM by default.

A first Spark start printed ~290 lines of Ivy resolution, and every start the
JDK's incubator warning, log4j's banner, NativeCodeLoader's WARN and raw
``[Stage N:>`` bars, even when piped. By default (``SPARKLOG_VERBOSE`` unset):

* log4j 2 reads ``conf/log4j2.properties`` (errors only; task-failure logs off:
  a failure reaches the caller as the exception, which the CLI states in one line);
* the console progress bar is off (``spark.ui.showConsoleProgress``);
* the JVM's standard output and error, which it inherits from this process, are pipes
  read by threads here that drop the start-up noise (:data:`NOISE`) and forward the rest.
  If the start fails, everything the JVM said is forwarded: the reason is in it.

``SPARKLOG_VERBOSE=1`` (``sparklog --verbose``) leaves Spark as it is.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import conf

LOG4J_CONFIG = Path(conf.__file__).resolve().parent / "log4j2.properties"

#: lines of a JVM start that say nothing to a user: the JDK's incubator warning,
#: log4j's banner, Hadoop's native-library WARN, and Ivy's resolution report
NOISE = re.compile(
    r"^(WARNING: Using incubator modules"
    r"|.* WARN NativeCodeLoader:"
    r"|Using Spark's default log4j profile"
    r"|Setting default log level to"
    r"|To adjust logging level use"
    r"|:: (loading settings|resolving dependencies|resolution report|retrieving|problems summary"
    r"|evicted modules|USE VERBOSE OR DEBUG)"
    r"|\s+\S+#\S+;\S+ (by \[.*\]|transitively) in \["
    r"|Ivy Default Cache set to|The jars for the packages stored in"
    r"|\S+#\S+ added as a dependency"
    r"|\s+(confs:|found |\[SUCCESSFUL|\d+ artifacts copied|downloading |:: |\|)"
    r"|\s*-{10,}|\s*\|"
    r"|downloading https?://"
    r"|You probably access the destination server through a proxy server)")


def verbose() -> bool:
    """Whether the user asked to see all of Spark's output (``SPARKLOG_VERBOSE``)."""
    return os.environ.get("SPARKLOG_VERBOSE", "").lower() in ("1", "true", "yes")


def spark_configs() -> dict[str, str]:
    """Spark configs of a quiet session ({} when verbose)."""
    if verbose():
        return {}
    option = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
    return {"spark.ui.showConsoleProgress": "false",
            "spark.driver.extraJavaOptions": option,
            "spark.executor.extraJavaOptions": option}


@contextlib.contextmanager
def jvm_output() -> Iterator[None]:
    """Around the JVM's launch: the JVM gets pipes as its standard output and error, each
    filtered by a daemon thread for its whole life (see the module docstring; Ivy writes
    its ``:: loading settings`` line to standard output). Does nothing when verbose; a
    stream that is not a file descriptor is left as it is."""
    if verbose():
        yield
        return
    relays = [relay for relay in (_redirect(sys.stdout, 1), _redirect(sys.stderr, 2)) if relay]
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        for relay in relays:
            relay.started(failed)


def _redirect(stream, fd: int) -> "_Relay | None":
    """Point ``fd`` at a pipe read by a new :class:`_Relay` to the real one, until
    :meth:`_Relay.started`; None when ``fd`` is not there to redirect."""
    try:
        stream.flush()
        real = os.dup(fd)
    except (OSError, ValueError):
        return None
    read_end, write_end = os.pipe()
    os.dup2(write_end, fd)
    os.close(write_end)
    relay = _Relay(fd, real)
    threading.Thread(target=relay.run, args=(read_end,), daemon=True,
                     name=f"sparklog-jvm-fd{fd}").start()
    return relay


class _Relay:
    """Copies the JVM's lines to the real stream without :data:`NOISE`. Until the start
    ends it holds them: all are shown if the start failed."""

    def __init__(self, fd: int, real: int):
        self.fd = fd
        self.real = real
        self.out = os.fdopen(os.dup(real), "wb")
        self.lock = threading.Lock()
        self.held: list[bytes] | None = []
        self.failed = False

    def run(self, read_end: int) -> None:
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            for line in _lines(pipe):
                with self.lock:
                    if self.held is not None:
                        self.held.append(line)
                    elif self.failed or not _noise(line):
                        self._write([line])

    def started(self, failed: bool) -> None:
        """The launch is over: this process's ``fd`` is its own again (the JVM keeps the
        pipe), and what the JVM said so far is shown (all of it if the start failed)."""
        os.dup2(self.real, self.fd)
        os.close(self.real)
        with self.lock:
            held, self.held, self.failed = self.held or [], None, failed
            self._write(held if failed else [line for line in held if not _noise(line)])

    def _write(self, lines: list[bytes]) -> None:
        if not lines:
            return
        try:
            self.out.write(b"".join(lines))
            self.out.flush()
        except OSError:  # our standard error is gone (a closed pipe): nothing left to tell
            pass


def _lines(pipe) -> Iterator[bytes]:
    """Lines of ``pipe`` as they come (a Spark progress bar ends in ``\\r``, not ``\\n``)."""
    pending = b""
    while True:
        chunk = pipe.read(65536)
        if not chunk:
            break
        pending += chunk
        *lines, pending = re.split(rb"(?<=[\r\n])", pending)
        yield from (line for line in lines if line)
    if pending:
        yield pending


def _noise(line: bytes) -> bool:
    return bool(NOISE.match(line.decode("utf-8", "replace")))
