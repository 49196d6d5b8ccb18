"""What every benchmark shares: the machine line and the results file.

Figures go to ``bench/results/<name>.json`` in the DESIGN.md format; a
``--quick`` run (what CI executes so no benchmark rots) writes
``<name>.quick.json`` instead, so it never overwrites the committed full-run
figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")

#: the JVM options of a ``--quick`` run's JVMs (a Kafka broker, Kafka's tools, a
#: MiniDFSCluster): C1 only, the serial collector and no bytecode verification of the
#: class path's classes, what the test suite gives its own (tests/jvm.py). A quick run's
#: JVMs live seconds, too short for C2's compiles to pay back on two shared cores, and a
#: quick run measures nothing. Full runs keep theirs.
QUICK_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
             "-XX:+UnlockDiagnosticVMOptions", "-XX:-BytecodeVerificationRemote")

#: ``spark-defaults.conf`` giving Spark's driver and executors :data:`QUICK_JVM`
QUICK_SPARK_CONF_DIR = os.path.join(ROOT, "tests", "spark_conf")


def quick_jvms() -> None:
    """A ``--quick`` run's Spark (sessions, ``sparklog`` commands, a standalone cluster)
    starts its JVMs with :data:`QUICK_JVM`, as under the test suite, unless the
    environment already chose (``SPARK_CONF_DIR``, ``SPARK_DAEMON_JAVA_OPTS``)."""
    if os.path.isdir(QUICK_SPARK_CONF_DIR):
        os.environ.setdefault("SPARK_CONF_DIR", QUICK_SPARK_CONF_DIR)
    os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", " ".join(QUICK_JVM))


@contextlib.contextmanager
def started_together(*servers: Any) -> Iterator[tuple[Any, ...]]:
    """Enter the context managers ``servers`` at once, each on a thread of its own (each
    start mostly waits for its own process to answer), and exit them in reverse order.

    Yields what each ``__enter__`` returned. Raises the first start's error, after the
    servers that did start are stopped again.
    """
    with contextlib.ExitStack() as stack:
        with ThreadPoolExecutor(max_workers=max(1, len(servers))) as pool:
            futures = [pool.submit(server.__enter__) for server in servers]
        entered, error = [], None
        for server, future in zip(servers, futures):
            try:
                entered.append(future.result())
                stack.push(server)
            except BaseException as e:  # noqa: BLE001 - raised below, once all are settled
                error = error or e
        if error is not None:
            raise error
        yield tuple(entered)


def machine() -> str:
    """Cores, memory, OS, Python, pyarrow and the load average at the time of the run."""
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) // 1024 // 1024} GiB RAM, "
    except OSError:
        pass
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return (f"{os.cpu_count()} cores, {mem}{platform.system()} {platform.machine()}, "
            f"python {platform.python_version()}, pyarrow {pa.__version__}{load}")


def results_path(name: str, quick: bool) -> str:
    return os.path.join(RESULTS, f"{name}.quick.json" if quick else f"{name}.json")


def write_results(name: str, figures: Sequence[dict[str, Any]], *, quick: bool,
                  out: str | None = None, **meta: Any) -> str:
    """Write the DESIGN.md results document; returns its path."""
    doc = {"bench": name, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": machine(), "quick": quick, **meta, "figures": list(figures)}
    path = out or results_path(name, quick)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return path
