"""A real Spark standalone cluster on 127.0.0.1, for tests and benchmarks.

::

    with StandaloneCluster(workers=2, work_dir="/tmp/c") as cluster:
        cluster.master_url      # spark://127.0.0.1:PORT, every worker ALIVE
        cluster.workers[0].pid  # a worker JVM (its executors are its children)

The pyspark wheel ships ``bin/spark-class`` but not the ``sbin`` scripts, so the
master and each worker are started here as ``spark-class`` processes
(``org.apache.spark.deploy.master.Master``, ``...deploy.worker.Worker --host
127.0.0.1 --cores 1 --memory 1g``) with ``SPARK_HOME`` = the pyspark folder and
``SPARK_LOCAL_IP=127.0.0.1``. ``spark-class`` ends in ``exec``, so each pid is the
JVM itself. Start-up waits until the master's JSON page (``/json/``) lists every
worker ALIVE (8-21 s on a 2-core machine, about 215 MiB per JVM).

Each JVM runs in a session of its own: on exit its whole process group gets
SIGTERM, then SIGKILL. A worker's executors and their Python workers are in the
worker's group, so none of them outlives the cluster.

Master options (``SPARK_MASTER_OPTS``): ``spark.worker.timeout`` (how soon a
silent worker is declared dead) and ``spark.deploy.maxExecutorRetries=-1`` (the
master never gives up an application whose executors keep dying: a broker app's
executors are killed on purpose in the failover tests).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pyspark

from jobs.gateway_process import free_port

#: the pyspark wheel's folder: SPARK_HOME for spark-class
SPARK_HOME = os.path.dirname(os.path.abspath(pyspark.__file__))
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass
class Daemon:
    """One JVM of the cluster: its process, its ports and its log file."""

    name: str
    proc: subprocess.Popen
    port: int
    ui_port: int
    log_path: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None


class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each on 127.0.0.1.

    ``worker_timeout_s`` is the master's ``spark.worker.timeout`` (60 s, Spark's default:
    at 10 s both workers of a busy 2-core machine were declared lost, their executors
    with them); ``start_timeout_s``
    bounds the wait for every worker to be ALIVE (TimeoutError names the log folder).
    """

    def __init__(self, work_dir: str, *, workers: int = 2, cores: int = 1, memory: str = "1g",
                 worker_timeout_s: int = 60, start_timeout_s: float = 90.0,
                 host: str = "127.0.0.1"):
        self.work_dir, self._count = work_dir, workers
        self.cores, self.memory, self.host = cores, memory, host
        self.worker_timeout_s, self.start_timeout_s = worker_timeout_s, start_timeout_s
        self.master: Daemon | None = None
        self.workers: list[Daemon] = []
        #: workers that died and were replaced (add_worker)
        self.retired: list[Daemon] = []

    @property
    def master_url(self) -> str:
        assert self.master is not None, "the cluster is not started"
        return f"spark://{self.host}:{self.master.port}"

    @property
    def master_ui(self) -> str:
        assert self.master is not None, "the cluster is not started"
        return f"http://{self.host}:{self.master.ui_port}"

    def _env(self, **more: str) -> dict[str, str]:
        env = {**os.environ, "SPARK_HOME": SPARK_HOME, "SPARK_LOCAL_IP": self.host,
               "SPARK_NO_DAEMONIZE": "1", **more}
        env.pop("PYSPARK_GATEWAY_PORT", None)  # never attach to a parent's py4j gateway
        return env

    def _spawn(self, name: str, args: list[str], port: int, ui_port: int,
               env: dict[str, str]) -> Daemon:
        log_path = os.path.join(self.work_dir, f"{name}.log")
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([os.path.join(SPARK_HOME, "bin", "spark-class"), *args],
                                    stdout=log, stderr=subprocess.STDOUT, env=env,
                                    cwd=self.work_dir, start_new_session=True)
        return Daemon(name, proc, port, ui_port, log_path)

    def start(self) -> "StandaloneCluster":
        os.makedirs(self.work_dir, exist_ok=True)
        try:
            port, ui = free_port(self.host), free_port(self.host)
            opts = (f"-Dspark.worker.timeout={self.worker_timeout_s} "
                    "-Dspark.deploy.maxExecutorRetries=-1")
            self.master = self._spawn(
                "master", [MASTER_CLASS, "--host", self.host, "--port", str(port),
                           "--webui-port", str(ui)], port, ui, self._env(SPARK_MASTER_OPTS=opts))
            for i in range(self._count):
                self.add_worker(wait=False, index=i)
            self.wait_alive(self._count)
        except BaseException:
            self.stop()
            raise
        return self

    def add_worker(self, *, wait: bool = True, index: int | None = None) -> Daemon:
        """Start one more worker (e.g. a replacement after a kill); waits until it is ALIVE.
        Workers that died (killed by a test) are dropped from ``workers`` first."""
        self.retired += [w for w in self.workers if not w.alive()]
        self.workers = [w for w in self.workers if w.alive()]
        index = len(self.workers) + len(self.retired) if index is None else index
        port, ui = free_port(self.host), free_port(self.host)
        work = os.path.join(self.work_dir, f"worker-{index}")
        os.makedirs(work, exist_ok=True)
        daemon = self._spawn(
            f"worker-{index}",
            [WORKER_CLASS, self.master_url, "--host", self.host, "--port", str(port),
             "--webui-port", str(ui), "--cores", str(self.cores), "--memory", self.memory,
             "--work-dir", work], port, ui, self._env())
        self.workers.append(daemon)
        if wait:
            self.wait_alive(sum(w.alive() for w in self.workers))
        return daemon

    def state(self) -> dict:
        """The master's JSON page (workers, applications), or {} while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=2) as r:
                return json.load(r)
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def alive_workers(self) -> int:
        return sum(w.get("state") == "ALIVE" for w in self.state().get("workers", []))

    def wait_alive(self, count: int) -> None:
        """Wait until the master lists ``count`` workers ALIVE (TimeoutError otherwise)."""
        deadline = time.monotonic() + self.start_timeout_s
        while self.alive_workers() < count:
            dead = [d.name for d in [self.master, *self.workers] if d and not d.alive()]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited during start-up; "
                                   f"see the logs in {self.work_dir}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {count} workers ALIVE after "
                                   f"{self.start_timeout_s:.0f} s; see the logs in {self.work_dir}")
            time.sleep(0.25)

    def executor_pids(self) -> list[int]:
        """The executor JVMs the workers run now (children of a worker, from ``/proc``)."""
        workers = {w.pid for w in self.workers if w.alive()}
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rpartition(")")[2].split()[1])
                if parent in workers:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        if b"CoarseGrainedExecutorBackend" in f.read():
                            found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
        return found

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every JVM's process group (workers first), then SIGKILL what is left."""
        daemons = [*self.workers, *([self.master] if self.master else [])]
        for d in daemons:
            _signal_group(d.proc, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for d in daemons:
            try:
                d.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for d in daemons:
            # the group may hold executors even once its leader has exited
            _signal_group(d.proc, signal.SIGKILL)
            try:
                d.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Signal the process group this module created for ``proc`` (its pid is the pgid)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
