"""A throw-away HDFS (MiniDFSCluster: one NameNode, one DataNode) on loopback, for the
tests (``hdfs_server`` fixture) and the HDFS case of ``bench/log_append.py``.

Usage::

    with MiniHdfs() as hdfs:
        log = open_log(hdfs.url("some/prefix"))          # hdfs://127.0.0.1:<rpc>/some/prefix
        spark.read.parquet(f"{hdfs.rpc_url}/table")       # Spark speaks hdfs:// natively

The jars are ``org.apache.hadoop:hadoop-client-minicluster`` at the Hadoop version
pyspark bundles (:data:`HADOOP_VERSION`), fetched once by Maven into
``.cache/hadoop/<version>/`` inside the project (``bench.kafka_side.fetch``: a temp
folder renamed into place, so a broken download is never taken for a cache).
``MiniHdfs.java`` beside this module runs as a single-source Java program: every listener
on 127.0.0.1, WebHDFS on, permissions off, ``dfs.datanode.synconclose=true``, and
a 2 ms first retry of a file's close (with one replica a close waits for the DataNode's
block report: Hadoop's 400 ms retry made a small file ~200 ms, 20 ms made closes 20-60 ms
in steps of the sleep; 2 ms, with 10 retries, ~20 ms).
``MiniHdfs(permissions=True)`` turns permission checks on (the process's own user is
the superuser, ``/`` is 1777) and has the NameNode issue delegation tokens without
Kerberos, for tests of which user a client acts as. ``java_options`` are added to its
JVM's command line (the test suite starts it with C1 only: ``tests/jvm.py``).

Facts measured with this cluster (tests/log_layout/test_webhdfs.py relies on them):
start-up 7-10 s, ~300 MB; ``CREATE overwrite=false`` has one winner among racing
writers but shows the name at length 0 while writing; ``RENAME renameoptions=NONE``
has one winner and refuses an existing target. The JVM ends when its standard
input closes, so a test process killed outright does not leave it behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time

from bench.kafka_side.fetch import maven_fetch
from jobs.gateway_process import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOST = "127.0.0.1"
CACHE = os.path.join(ROOT, ".cache", "hadoop")
LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "MiniHdfs.java")


class MiniHdfs:
    """A MiniDFSCluster in a child JVM; ``start()`` waits until WebHDFS answers."""

    def __init__(self, *, startup_timeout_s: float = 120.0, permissions: bool = False,
                 java_options: tuple[str, ...] = ()):
        self.timeout = startup_timeout_s
        self.permissions = permissions
        self.java_options = tuple(java_options)
        self.proc: subprocess.Popen | None = None
        self.base = ""
        self.rpc_port = self.http_port = 0
        self._output: list[str] = []

    @property
    def rpc_url(self) -> str:
        """``hdfs://127.0.0.1:<rpc port>``: what Spark and Hadoop tools are given."""
        return f"hdfs://{HOST}:{self.rpc_port}"

    def url(self, path: str = "") -> str:
        return f"{self.rpc_url}/{path.strip('/')}"

    def storage_options(self) -> dict:
        """What sparklog's store needs besides the URL: the NameNode's HTTP port."""
        return {"webhdfs_port": self.http_port, "user": "sparklog"}

    def start(self) -> "MiniHdfs":
        from pipeline.spark import hadoop_version

        jars = maven_fetch("org.apache.hadoop", "hadoop-client-minicluster", hadoop_version(),
                           cache=CACHE, log=lambda *_: None)
        self.base = tempfile.mkdtemp(prefix="sparklog-hdfs-")
        self.rpc_port = free_port()
        self.http_port = free_port()
        while self.http_port == self.rpc_port:
            self.http_port = free_port()
        self.proc = subprocess.Popen(
            ["java", "-Xmx512m", *self.java_options, "-cp", jars.classpath, LAUNCHER, self.base,
             str(self.rpc_port), str(self.http_port)]
            + (["permissions"] if self.permissions else []),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        ready = threading.Event()

        def drain() -> None:  # keep the pipe flowing; the last lines explain a failure
            for line in self.proc.stdout:
                self._output = (self._output + [line])[-200:]
                if line.startswith("READY "):
                    ready.set()

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.monotonic() + self.timeout
        while not ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("MiniDFSCluster did not start:\n"
                                   + "".join(self._output[-40:]))
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                proc.stdin.close()  # MiniHdfs shuts the cluster down when its input ends
                proc.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        if self.base:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> "MiniHdfs":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
