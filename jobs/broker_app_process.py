"""The broker app in a child process, and the faults injected into it.

For tests and benchmarks (like ``jobs.gateway_process``)::

    with StandaloneCluster(work) as cluster, BrokerAppProcess(
            store, cluster.master_url, work, gateways=2) as app:
        result = measure_failover(app, store, "t", "task-crash")   # jobs.failover_measure

The driver runs as ``python -m jobs.cli ... broker-app`` so it can be signalled; it
keeps ``addresses.json`` (``--addresses-file``) and that file is how this module
finds the gateways. A gateway's process is found by its listening port (``ss
-ltnp``: psutil is not a dependency), its executor JVM by walking up ``/proc``
from there (task Python -> pyspark daemon -> ``CoarseGrainedExecutorBackend``),
its worker JVM one step further. ``FAULTS`` kill or freeze them.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from jobs.broker_app import healthy as gateway_answers
from jobs.spark_standalone import free_port

#: the project folder (the driver imports the same checkout as its parent)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"


class BrokerAppProcess:
    """``sparklog broker-app`` (``gateways`` slots) as a child process; ``urls`` once up.

    Slot ``s`` listens on ``port + s``. ``storage_options`` (JSON text) go to every
    gateway, e.g. an S3 endpoint and keys; ``env`` adds to the driver's environment
    (settings as ``SPARKLOG_*`` variables).
    """

    def __init__(self, store_url: str, master: str | None, work_dir: str, *,
                 gateways: int = 1, port: int | None = None,
                 settings: dict[str, str] | None = None, failover_ms: int | None = None,
                 storage_options: str | None = None, kafka_port: int | None = None,
                 env: dict[str, str] | None = None):
        self.store_url, self.master, self.work_dir = store_url, master, work_dir
        self.gateways = gateways
        self.port = port or free_ports(gateways)
        self.settings = {"store.fsync": "false", **(settings or {})}
        self.failover_ms, self.storage_options = failover_ms, storage_options
        #: slot s also listens for Kafka clients on kafka_port + s (None: no Kafka listener)
        self.kafka_port = kafka_port
        #: extra environment variables of the driver (e.g. ``SPARKLOG_STORE_*`` settings)
        self.env = dict(env or {})
        self.addresses = os.path.join(work_dir, "addresses.json")
        self.log_path = os.path.join(work_dir, "broker-app.log")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180.0) -> "BrokerAppProcess":
        os.makedirs(self.work_dir, exist_ok=True)
        cmd = [sys.executable, "-m", "jobs.cli", "--store", self.store_url]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        cmd += ["broker-app", "--gateways", str(self.gateways), "--port", str(self.port),
                "--addresses-file", self.addresses]
        if self.master:
            cmd += ["--master", self.master]
        if self.failover_ms:
            cmd += ["--failover-ms", str(self.failover_ms)]
        if self.storage_options:
            cmd += ["--storage-options", self.storage_options]
        if self.kafka_port:
            cmd += ["--kafka-port", str(self.kafka_port)]
        env = {**os.environ, **self.env, "PYTHONPATH": ROOT, "SPARK_LOCAL_IP": "127.0.0.1"}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log,
                                         stderr=subprocess.STDOUT)
        self.wait_up(timeout)
        return self

    def slot(self, index: int = 0) -> dict:
        """A slot as the driver last published it ({} before its first publication)."""
        try:
            with open(self.addresses) as f:
                return json.load(f)["slots"][index]
        except (OSError, ValueError, KeyError, IndexError):
            return {}

    def port_of(self, slot: int) -> int:
        return self.port + slot

    @property
    def url(self) -> str:
        return self.urls[0]

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{self.port + s}" for s in range(self.gateways)]

    @property
    def bootstrap(self) -> str:
        """Kafka's bootstrap list of every slot."""
        return ",".join(self.urls)

    @property
    def kafka_bootstrap(self) -> str:
        """``bootstrap.servers`` for Kafka clients: every slot's Kafka listener."""
        assert self.kafka_port, "started without a Kafka listener"
        return ",".join(f"127.0.0.1:{self.kafka_port + s}" for s in range(self.gateways))

    def healthy(self, slot: int = 0) -> bool:
        return gateway_answers(self.urls[slot])

    def wait_up(self, timeout: float) -> float:
        """Wait until the driver reports every slot up and each answers; returns the
        seconds."""
        start = time.monotonic()
        while not all(self.slot(s).get("up") and self.healthy(s) for s in range(self.gateways)):
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"broker-app exited with {self.proc.returncode}; "
                                   f"see {self.log_path}")
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"not every gateway up after {timeout:.0f} s; "
                                   f"see {self.log_path}")
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


def free_ports(count: int, tries: int = 50) -> int:
    """A base port with ``count`` consecutive ports free on 127.0.0.1 (the usual race)."""
    import socket

    for _ in range(tries):
        base = free_port()
        if base + count > 65535:
            continue
        try:
            socks = []
            for p in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports found")



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


def kill_worker(port: int) -> int:
    """SIGKILL the worker JVM whose executor's task serves ``port`` (a lost machine: its
    executor exits when it sees its worker gone, the gateway with it); returns the
    worker's pid. The cluster has one worker less until ``add_worker``."""
    pid = listener_pid(port)
    if pid is None:
        raise LookupError(f"nothing listens on port {port}")
    worker = _parent(executor_pid(pid))
    os.kill(worker, signal.SIGKILL)
    return worker


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
        FROZEN.append(frozen)
    return jvm


def freeze_host(port: int) -> int:
    """SIGSTOP a whole *host*: the worker JVM too, above the executor, the daemon and the
    gateway, so nothing there can kill the zombie; returns the worker's pid. ``resume()``
    sends SIGCONT to everything frozen."""
    pid = listener_pid(port)
    if pid is None:
        raise LookupError(f"nothing listens on port {port}")
    jvm = executor_pid(pid)
    worker = _parent(jvm)
    chain = [pid]
    while chain[-1] != worker:
        chain.append(_parent(chain[-1]))
    for frozen in reversed(chain):
        os.kill(frozen, signal.SIGSTOP)
        FROZEN.append(frozen)
    return worker


#: pids stopped by freeze_host (and freeze_executor), for resume()
FROZEN: list[int] = []


def resume() -> None:
    """SIGCONT every process a freeze stopped (the zombie wakes up)."""
    while FROZEN:
        try:
            os.kill(FROZEN.pop(), signal.SIGCONT)
        except ProcessLookupError:
            pass


FAULTS: dict[str, Callable[[int], int]] = {"task-crash": kill_gateway_python,
                                           "executor-crash": kill_executor,
                                           "worker-crash": kill_worker,
                                           "executor-freeze": freeze_executor,
                                           "host-freeze": freeze_host}
