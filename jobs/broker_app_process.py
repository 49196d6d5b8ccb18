"""The broker app in a child process, and the failover measurements made against it.

For tests and benchmarks (like ``jobs.gateway_process``)::

    with StandaloneCluster(work) as cluster, BrokerAppProcess(store, cluster.master_url,
                                                              work) as app:
        result = measure_failover(app, store, "t", kill_gateway_python)

The driver runs as ``python -m jobs.cli ... broker-app`` so it can be signalled; it
keeps ``addresses.json`` (``--addresses-file``) and that file is how this module
finds the gateway. A gateway's process is found by its listening port (``ss
-ltnp``: psutil is not a dependency), its executor JVM by walking up ``/proc``
from there (task Python -> pyspark daemon -> ``CoarseGrainedExecutorBackend``).

:func:`measure_failover` runs an idempotent ``Producer`` at ``acks=all`` while a
fault is injected, then reads the log back through ``log_layout`` and checks
that every acknowledged record is there exactly once at the offset it was
acknowledged with, and that no offset is taken twice.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from jobs.spark_standalone import free_port

#: the project folder (the driver imports the same checkout as its parent)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"


class BrokerAppProcess:
    """``sparklog broker-app`` (one slot) as a child process; ``url`` once it is up."""

    def __init__(self, store_url: str, master: str | None, work_dir: str, *,
                 port: int | None = None, settings: dict[str, str] | None = None):
        self.store_url, self.master, self.work_dir = store_url, master, work_dir
        self.port = port or free_port()
        self.settings = {"store.fsync": "false", **(settings or {})}
        self.addresses = os.path.join(work_dir, "addresses.json")
        self.log_path = os.path.join(work_dir, "broker-app.log")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180.0) -> "BrokerAppProcess":
        os.makedirs(self.work_dir, exist_ok=True)
        cmd = [sys.executable, "-m", "jobs.cli", "--store", self.store_url]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        cmd += ["broker-app", "--gateways", "1", "--port", str(self.port),
                "--addresses-file", self.addresses]
        if self.master:
            cmd += ["--master", self.master]
        env = {**os.environ, "PYTHONPATH": ROOT, "SPARK_LOCAL_IP": "127.0.0.1"}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log,
                                         stderr=subprocess.STDOUT)
        self.wait_up(timeout)
        return self

    def slot(self) -> dict:
        """Slot 0 as the driver last published it ({} before its first publication)."""
        try:
            with open(self.addresses) as f:
                return json.load(f)["slots"][0]
        except (OSError, ValueError, KeyError, IndexError):
            return {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_up(self, timeout: float) -> float:
        """Wait until the driver reports slot 0 up and it answers; returns the seconds."""
        start = time.monotonic()
        while not (self.slot().get("up") and self.healthy()):
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"broker-app exited with {self.proc.returncode}; "
                                   f"see {self.log_path}")
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"no gateway up after {timeout:.0f} s; see {self.log_path}")
            time.sleep(0.05)
        return time.monotonic() - start

    def stop(self, timeout: float = 90.0, sig: int = signal.SIGTERM) -> int:
        """Signal the driver (SIGTERM or SIGINT) and wait for it; returns its exit status."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def log_text(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def __enter__(self) -> "BrokerAppProcess":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- finding the processes to kill ------------------------------------------------------
def listener_pid(port: int) -> int | None:
    """The pid of the process listening on TCP ``port`` (from ``ss -ltnp``), or None."""
    out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True,
                         text=True, check=True).stdout
    match = re.search(r"pid=(\d+)", out)
    return int(match.group(1)) if match else None


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        # the command name (2nd field) may hold spaces: the fields after its ')' are fixed
        return int(f.read().rpartition(")")[2].split()[1])


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


def executor_pid(gateway_pid: int) -> int:
    """The executor JVM hosting ``gateway_pid`` (an ancestor running the executor class)."""
    pid = gateway_pid
    while pid > 1:
        pid = _parent(pid)
        if EXECUTOR_CLASS in _cmdline(pid):
            return pid
    raise LookupError(f"no {EXECUTOR_CLASS} above process {gateway_pid}")


def kill_gateway_python(port: int) -> int:
    """SIGKILL the Spark task's Python process that serves ``port``; returns its pid."""
    pid = listener_pid(port)
    if pid is None:
        raise LookupError(f"nothing listens on port {port}")
    os.kill(pid, signal.SIGKILL)
    return pid


def kill_executor(port: int) -> int:
    """SIGKILL the executor JVM whose task serves ``port``; returns its pid."""
    pid = listener_pid(port)
    if pid is None:
        raise LookupError(f"nothing listens on port {port}")
    jvm = executor_pid(pid)
    os.kill(jvm, signal.SIGKILL)
    return jvm


def freeze_executor(port: int) -> int:
    """SIGSTOP the executor JVM whose task serves ``port``, its pyspark daemon and the
    gateway (a frozen executor on a live host: its worker can still kill it once the
    driver gives it up); returns the JVM's pid. Nothing here sends SIGCONT."""
    pid = listener_pid(port)
    if pid is None:
        raise LookupError(f"nothing listens on port {port}")
    jvm = executor_pid(pid)
    chain = [pid]
    while chain[-1] != jvm:
        chain.append(_parent(chain[-1]))
    for frozen in reversed(chain):  # the JVM first: it must not see its children stop
        os.kill(frozen, signal.SIGSTOP)
    return jvm


FAULTS: dict[str, Callable[[int], int]] = {"task-crash": kill_gateway_python,
                                           "executor-crash": kill_executor,
                                           "executor-freeze": freeze_executor}


# -- the measurement ------------------------------------------------------------------------
@dataclass
class FailoverResult:
    fault: str
    #: the process the fault hit (the gateway's, or its executor JVM's)
    pid: int
    #: kill -> the old gateway stops answering /healthz (an executor's Python outlives
    #: its JVM until the pyspark daemon sees the pipe close and hangs up its group)
    old_stops_s: float
    #: kill -> the old gateway's process is gone (None: it was still there at the end)
    old_gone_s: float | None
    #: kill -> a gateway's /healthz answers again
    answers_s: float
    #: kill -> the first record sent after the old gateway stopped is acknowledged
    #: (acks=all): the first acknowledged write on the new gateway
    first_ack_s: float
    acknowledged: int
    failed: int
    #: acknowledged records missing from the log, read twice, or at another offset
    lost: int = 0
    duplicated: int = 0
    misplaced: int = 0
    offsets_taken_twice: int = 0
    errors: list[str] = field(default_factory=list)

    def line(self) -> str:
        gone = "never" if self.old_gone_s is None else f"{self.old_gone_s:.2f} s"
        return (f"{self.fault} on pid {self.pid}: old gateway stops answering "
                f"after {self.old_stops_s:.2f} s, its process gone after {gone}; a gateway "
                f"answers after {self.answers_s:.2f} s, first acknowledged write on it after "
                f"{self.first_ack_s:.2f} s; "
                f"{self.acknowledged} acknowledged, {self.failed} failed, {self.lost} lost, "
                f"{self.duplicated} duplicated, {self.offsets_taken_twice} offsets taken twice")


class _Load:
    """An idempotent acks=all producer sending numbered records, and a FIFO ack watcher."""

    def __init__(self, url: str, topic: str, tag: str, per_tick: int, tick_s: float):
        from ingest_gateway.client import Producer

        self.producer = Producer(url, acks="all", linger_ms=5, delivery_timeout_ms=120_000,
                                 retry_backoff_ms=20)
        self.topic, self.tag, self.per_tick, self.tick_s = topic, tag, per_tick, tick_s
        self.sent: list[tuple[bytes, float, object]] = []  # value, send time, handle
        self.acked_at: dict[int, float] = {}  # index in sent -> when its ack was seen
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._send, daemon=True),
                         threading.Thread(target=self._watch, daemon=True)]

    def start(self) -> "_Load":
        for t in self._threads:
            t.start()
        return self

    def _send(self) -> None:
        n = 0
        while not self.stopping.is_set():
            for _ in range(self.per_tick):
                value = f"{self.tag}-{n}".encode()
                handle = self.producer.send(self.topic, value)
                with self._lock:
                    self.sent.append((value, time.monotonic(), handle))
                n += 1
            time.sleep(self.tick_s)

    def _watch(self) -> None:
        i = 0
        while True:
            with self._lock:
                item = self.sent[i] if i < len(self.sent) else None
            if item is None:
                if self.stopping.is_set() and i >= len(self.sent):
                    return
                time.sleep(0.005)
                continue
            try:
                item[2].result()
            except Exception:  # noqa: BLE001 - a failed record is counted, not acknowledged
                pass
            self.acked_at[i] = time.monotonic()
            i += 1

    def first_ack_after(self, t: float, timeout: float) -> float:
        """Seconds from ``t`` until a record sent after ``t`` was seen acknowledged."""
        deadline = time.monotonic() + timeout
        first = None
        while time.monotonic() < deadline:
            if first is None:
                with self._lock:  # send times only grow: the first one after t, if any yet
                    at = bisect.bisect_right(self.sent, t, key=lambda item: item[1])
                    first = at if at < len(self.sent) else None
            if first is not None and first in self.acked_at:
                return self.acked_at[first] - t
            time.sleep(0.01)
        raise TimeoutError(f"no record sent after the kill was acknowledged within {timeout} s")

    def finish(self) -> tuple[dict[bytes, tuple[int, int]], int, list[str]]:
        """Stop, flush; (value -> (partition, offset) of each acknowledged record, failures,
        the first distinct errors)."""
        self.stopping.set()
        self._threads[0].join(60)
        self.producer.flush(120)
        self._threads[1].join(120)
        acked, failed, errors = {}, 0, []
        for value, _t, handle in self.sent:
            try:
                meta = handle.result(0)
            except Exception as e:  # noqa: BLE001
                failed += 1
                if len(errors) < 3 and str(e) not in errors:
                    errors.append(str(e))
                continue
            acked[value] = (meta.partition, meta.offset)
        self.producer.close()
        return acked, failed, errors


def measure_failover(app: BrokerAppProcess, store_url: str, topic: str, fault: str, *,
                     before_s: float = 2.0, after_s: float = 2.0, per_tick: int = 20,
                     tick_s: float = 0.005, timeout_s: float = 120.0) -> FailoverResult:
    """Produce, inject ``fault`` (a key of FAULTS), keep producing, then check the log."""
    from log_layout import open_log

    load = _Load(app.url, topic, fault, per_tick, tick_s).start()
    try:
        time.sleep(before_s)  # load before the fault: real time is the point here
        gateway = listener_pid(app.port)
        killed = FAULTS[fault](app.port)
        t_kill = time.monotonic()
        old_gone: list[float | None] = [0.0 if gateway is None else None]

        def watch_old() -> None:  # in parallel: the waits below would blur the figure
            old_gone[0] = _gone_after(gateway, t_kill, timeout_s)

        watcher = threading.Thread(target=watch_old, daemon=True)
        if gateway is not None:
            watcher.start()
        while app.healthy():  # an executor's Python serves on for a moment after its JVM
            time.sleep(0.01)
        t_down = time.monotonic()
        while not app.healthy():
            if time.monotonic() - t_kill > timeout_s:
                raise TimeoutError(f"no gateway answers {timeout_s} s after the {fault}")
            time.sleep(0.02)
        answers = time.monotonic() - t_kill
        first_ack = load.first_ack_after(t_down, timeout_s) + (t_down - t_kill)
        time.sleep(after_s)
        if gateway is not None:
            watcher.join(timeout_s)
    finally:
        acked, failed, errors = load.finish()
    result = FailoverResult(fault, killed, t_down - t_kill, old_gone[0], answers, first_ack,
                            len(acked), failed, errors=errors)
    log = open_log(store_url)
    seen: Counter[bytes] = Counter()
    where: dict[bytes, tuple[int, int]] = {}
    for part in log.partitions(topic):
        table = part.read_table(0)
        offsets = table.column("offset").to_pylist()
        result.offsets_taken_twice += len(offsets) - len(set(offsets))
        for offset, value in zip(offsets, table.column("value").to_pylist()):
            seen[value] += 1
            where[value] = (part.partition, offset)
    for value, at in acked.items():
        count = seen.get(value, 0)
        result.lost += count == 0
        result.duplicated += count > 1
        result.misplaced += count == 1 and where[value] != at
    return result


def _gone_after(pid: int, since: float, timeout: float) -> float | None:
    """Seconds from ``since`` until ``pid`` is gone or a zombie (None: still running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        return None
    return time.monotonic() - since
