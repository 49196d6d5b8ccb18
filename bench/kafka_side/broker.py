"""A single-node Apache Kafka broker (KRaft, broker and controller in one JVM) on 127.0.0.1.

``with KafkaBroker(jars) as kafka: kafka.bootstrap`` formats a fresh storage
folder with a random cluster id (what ``kafka-storage.sh format`` does, through
its main class), starts ``kafka.Kafka`` with the JVM flags of
``kafka-server-start.sh`` and waits until it answers a metadata request. On
exit (also after an error or Ctrl-C) it stops the broker, SIGKILLs it if it
does not stop within 20 s, and deletes the folder.

Durability is Kafka's default: no ``flush.messages``, the OS writes the page
cache back when it likes (what sparklog's ``store.fsync=false`` compares with).
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from bench.kafka_side.fetch import Jars
from jobs.gateway_process import free_port, wait_for

#: what kafka-server-start.sh passes (KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS)
JVM_FLAGS = ["-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-Djava.awt.headless=true"]


def quick_jvm_flags() -> list[str]:
    """A ``--quick`` run's broker: a smaller heap, C1 only and the serial collector
    (``bench.common.QUICK_JVM``); it serves a few thousand records and measures nothing."""
    from bench.common import QUICK_JVM

    return ["-Xmx512M", *QUICK_JVM, "-Djava.awt.headless=true"]


def random_cluster_id() -> str:
    """A cluster id as ``kafka-storage.sh random-uuid`` prints it (URL-safe base64 of 16 bytes)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class KafkaBroker:
    """``with KafkaBroker(jars, props) as k: k.bootstrap, k.create_topic(...), k.topic_bytes(...)``."""

    def __init__(self, jars: Jars, props: Mapping[str, Any] | None = None, *,
                 java: str = "java", start_timeout_s: float = 90,
                 jvm_flags: Sequence[str] | None = None):
        """``jvm_flags``: the broker JVM's options (default :data:`JVM_FLAGS`, what
        ``kafka-server-start.sh`` passes; the storage format's short JVM gets the
        options from it that are not about the heap)."""
        self.jars, self.java, self.start_timeout_s = jars, java, start_timeout_s
        self.jvm_flags = list(JVM_FLAGS if jvm_flags is None else jvm_flags)
        self.extra_props = dict(props or {})
        self.folder = ""
        self.port = self.controller_port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> str:
        return os.path.join(self.folder, "data")

    def _properties(self) -> dict[str, Any]:
        return {
            "process.roles": "broker,controller", "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": self.log_dir, "num.partitions": 1,
            "offsets.topic.replication.factor": 1, "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0, **self.extra_props}

    def start(self) -> KafkaBroker:
        self.folder = tempfile.mkdtemp(prefix="sparklog-bench-kafka-")
        self.port, self.controller_port = free_port(), free_port()
        config = os.path.join(self.folder, "server.properties")
        with open(config, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in self._properties().items())
        tool_flags = [] if self.jvm_flags == JVM_FLAGS else [
            f for f in self.jvm_flags if not f.startswith(("-Xm", "-Xs"))]
        fmt = subprocess.run([self.java, *tool_flags, "-cp", self.jars.classpath,
                              "kafka.tools.StorageTool",
                              "format", "-t", random_cluster_id(), "-c", config],
                             capture_output=True, text=True, timeout=120, check=False)
        if fmt.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed: {(fmt.stdout + fmt.stderr)[-1500:]}")
        # the broker's output, kept open for its lifetime (closed by stop())
        self._out = open(os.path.join(self.folder, "broker.out"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen([self.java, *self.jvm_flags, "-cp", self.jars.classpath,
                                      "kafka.Kafka", config],
                                     stdout=self._out, stderr=subprocess.STDOUT)
        try:
            wait_for(self._answers, timeout=self.start_timeout_s,
                     interval=0.25, what=f"Kafka broker on {self.bootstrap}")
        except BaseException:
            self.stop()
            raise
        return self

    def _answers(self) -> bool:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"the Kafka broker exited with {self.proc.returncode}: "
                               f"{self.output_tail()}")
        try:  # a closed port first: librdkafka would log every refused connection
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
        except OSError:
            return False
        try:
            md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=1)
            return bool(md.brokers)
        except KafkaException:
            return False

    def output_tail(self, chars: int = 2000) -> str:
        try:
            with open(os.path.join(self.folder, "broker.out"), "rb") as f:
                return f.read()[-chars:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM (a controlled shutdown), SIGKILL after 20 s; then delete the folder."""
        try:
            if self.proc is not None and self.proc.poll() is not None:
                # it died under the benchmark: keep its last words before the folder goes
                print(f"the Kafka broker had exited with {self.proc.returncode}:\n"
                      f"{self.output_tail(6000)}", file=sys.stderr, flush=True)
            elif self.proc is not None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        finally:
            if getattr(self, "_out", None) is not None:
                self._out.close()
            if self.folder:
                shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers for the benchmark ------------------------------------------------------
    def create_topic(self, name: str, partitions: int, config: Mapping[str, str] | None = None,
                     timeout_s: float = 30) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for fut in admin.create_topics([NewTopic(name, partitions, 1, config=dict(config or {}))],
                                       request_timeout=timeout_s).values():
            fut.result(timeout_s)
        # the leader is known to clients shortly after the create answers
        wait_for(lambda: all(p.leader >= 0 for p in
                             admin.list_topics(name, timeout=5).topics[name].partitions.values()),
                 timeout=timeout_s, what=f"a leader for every partition of {name}")

    def topic_files(self, name: str) -> list[str]:
        """Every file of the topic's partition folders (``<log.dirs>/<topic>-<p>/``)."""
        out = []
        for entry in os.scandir(self.log_dir):
            if entry.is_dir() and entry.name.rpartition("-")[0] == name:
                out += [os.path.join(entry.path, f) for f in os.listdir(entry.path)]
        return out

