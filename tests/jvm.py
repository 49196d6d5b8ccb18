"""How the suite starts its JVMs: for a quick start, not for a long run.

A test's JVM (a SparkSession, a ``sparklog sql`` or ``materialize`` process, a standalone
cluster's master, worker and executors, a MiniDFSCluster, one of Kafka's tools) lives
seconds to a few minutes. HotSpot's C2 compiler spends much of that on code the test
never runs long enough to need it for, on the same two cores the tests share: with C1
only and the serial collector a local SparkSession's start and first Delta write and read
took 20 CPU-seconds instead of 40 (2026-11-29). The product's own defaults are not
changed: this is the test environment's choice, as it would be a developer's
``SPARK_CONF_DIR``.
"""

from __future__ import annotations

import contextlib
import os

#: C1 only, the serial collector (no parallel GC threads on two cores), and no bytecode
#: verification of the classes on the class path (the boot classes stay verified): a
#: local SparkSession's start, two queries and a Parquet write took 7.4-7.9 CPU-seconds
#: instead of 9.2-10.3 with the first two alone (2026-11-29). The jars are the project's
#: own downloads; a test JVM is not where a malformed class file is to be caught.
QUICK_START = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
               "-XX:+UnlockDiagnosticVMOptions", "-XX:-BytecodeVerificationRemote")

#: ``spark-defaults.conf`` with ``spark.{driver,executor}.defaultJavaOptions`` set to
#: :data:`QUICK_START` (they come before any ``extraJavaOptions`` a job sets)
SPARK_CONF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spark_conf")


def java(*args: str, heap: str = "256m") -> list[str]:
    """The command line of a short-lived JVM: ``java`` with :data:`QUICK_START`."""
    return ["java", f"-Xmx{heap}", *QUICK_START, *args]


def install() -> None:
    """Point every Spark this process and its children start at :data:`SPARK_CONF_DIR`,
    and a standalone cluster's master and worker, and the launcher JVM ``spark-class``
    runs before each Spark JVM to build its command line, at :data:`QUICK_START`, unless
    the environment already chose."""
    os.environ.setdefault("SPARK_CONF_DIR", SPARK_CONF_DIR)
    os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", " ".join(QUICK_START))
    os.environ.setdefault("SPARK_LAUNCHER_OPTS", " ".join(QUICK_START))


#: how much the session's Spark is favoured over the tests beside it (nice -5: about three
#: times the CPU share of a default process while both want it)
FAVOUR = 5


@contextlib.contextmanager
def favoured():
    """Processes started inside (and theirs) run at a higher priority, where the OS lets
    this process raise it (root, as CI runs); elsewhere nothing changes.

    Spark gives a Python worker it starts without its daemon (a streaming source's runner,
    one per query start) a fixed 10 seconds to connect back (``PythonWorkerFactory``:
    ``Selector.select(10000)``, no setting). With four workers on two cores and a slow
    core (2026-11-29: 0.92 CPU-seconds for 10^7 Python additions, quiet), that worker's
    start (0.6 CPU-seconds of imports) lost the race in four streaming tests of one full
    run. The JVM's children inherit its priority.
    """
    try:
        os.nice(-FAVOUR)
    except OSError:  # not permitted: an ordinary user
        yield
        return
    try:
        yield
    finally:
        os.nice(FAVOUR)
