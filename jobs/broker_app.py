"""The brokers as a Spark application: a supervised gateway per slot, leaders by epochs.

``sparklog broker-app --gateways N --store URL [--master URL] [--port BASE]``, or
``spark-submit jobs/broker_app.py --gateways N --store URL``.

Shape, as the prototype found it (issue 13):

* **One single-task Spark job per gateway slot**, never one job of N tasks: with N
  tasks, ``spark.task.maxFailures`` kills of one slot abort the job and take every
  gateway down, and barrier mode loses the whole stage with one executor. Each slot
  has a driver thread that runs ``sc.parallelize([slot], 1).foreachPartition(...)``
  in its own job group and submits it again whenever it fails or ends, after a
  backoff (0.5 s doubling to 10 s, back to 0.5 s once a run lasted a minute).
* **The task's own Python process hosts the gateway**: ``jobs.cli.main([... "gateway"
  ...])``, the stable entry point, blocking until the gateway stops. Never a child
  process: one survived its executor's death in the prototype and kept serving.
  Kill the task's Python and Spark re-runs the task (about 1 s); kill the executor
  and the task re-runs on a spare core (4-9 s).
* Speculation and ``excludeOnFailure`` off (a second copy of a gateway task would
  fight for the port, an excluded executor would shrink the pool for good);
  ``spark.task.maxFailures`` high; ``spark.network.timeout`` 25 s with
  ``spark.network.timeoutInterval`` 5 s, so a silent executor is declared lost
  25-30 s after its last heartbeat.

**Where a gateway is.** Slot ``s`` listens on port ``BASE + s`` of the host its task
runs on (binding ``SPARK_LOCAL_IP`` there, else ``0.0.0.0``) and runs with
``gateway.broker.id = s``: it registers its address and slot epoch in the store and
follows the driver's assignment (``ingest_gateway.server.cluster_member``). The
driver learns the host from Spark's own record of the running task (the driver UI's
documented REST API,
``/api/v1/applications/<app>/stages/<stage>/<attempt>/taskList?status=RUNNING``),
probes ``/healthz`` and prints one line per change (``slot 0 up http://127.0.0.1:8082
...``). With ``--addresses-file`` it also keeps a JSON document of every slot there,
replaced atomically.

**Who leads what.** The driver's :class:`~jobs.leadership.LeadershipKeeper` claims the
driver epoch at start (a restarted driver takes the application over; the old one
stops when it sees the newer epoch), and on every monitor tick publishes a new
assignment when the live slots, the topics or an address changed: a slot silent for
``--failover-ms`` loses its partitions and group coordinators to the live slots, whose
gateways claim them with a higher leader epoch (fencing the silent one at its next
commit). The driver names each new assignment to the live gateways at once (a
``/healthz?assignment=<name>`` probe; every later probe names it too), so they read
it by name instead of polling the store for it. ``sparklog cluster status`` reads it
all back from the store.

**The store.** The driver opens it from the settings as the CLI does
(``log_layout.opening``: ``store.s3.endpoint.url``, ``store.hdfs.*``; an explicit
``--storage-options`` overrides them), reads it once before Spark starts (a setting
that does not reach it is a one-line ConfigError naming the key), and gives each
gateway task its ``SPARKLOG_*`` variables, ``--set`` pairs and resolved ``store.*``
settings, since an executor on another host has none of them.

SIGTERM or SIGINT stops the application: every slot's job group is cancelled (Spark
kills each task's Python process after ``spark.python.task.killTimeout``, so what a
gateway accepted at ``acks=1`` and had not flushed is lost, as in a crash; at
``acks=all`` every answered record is committed), the threads are joined and the
SparkContext stopped.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass

from conf.errors import ConfigError
from jobs.leadership import DriverFenced, LeadershipKeeper

#: slots one application runs at most (each holds one core of an executor)
MAX_GATEWAYS = 64
#: a task fails this many times before Spark fails its job. Spark retries a task at
#: once, the driver's thread after a backoff: 20 (the default is 4) lets Spark absorb
#: ordinary crashes quickly while a task that cannot start (a bad setting, a port in
#: use) falls back to the driver's backoff within seconds instead of spinning.
TASK_MAX_FAILURES = 20
BACKOFF_FIRST_S, BACKOFF_MAX_S, BACKOFF_RESET_AFTER_S = 0.5, 10.0, 60.0


def spark_conf(master: str | None, gateways: int) -> dict[str, str]:
    """The Spark settings of the application (see the module docstring for why)."""
    return {
        # local[N,F]: local mode ignores spark.task.maxFailures, F is its retry count;
        # one core per gateway, one spare for a restarted gateway, one for maintenance
        "spark.master": master or f"local[{gateways + 2},{TASK_MAX_FAILURES}]",
        "spark.app.name": "sparklog-broker-app",
        "spark.task.maxFailures": str(TASK_MAX_FAILURES),
        "spark.speculation": "false",
        "spark.excludeOnFailure.enabled": "false",
        "spark.network.timeout": "25s",
        # how often the driver looks for silent executors: a frozen executor is given up
        # 25-30 s after its last heartbeat (measured 26.8-27.8 s; at 10 s it may be 35).
        # On ONE host the new gateway then still waits for the port: the worker SIGTERMs
        # the frozen executor, which cannot act on it, and SIGKILLs 10 s later (measured:
        # a new gateway 31-38 s after the freeze, bench/scale.py)
        "spark.network.timeoutInterval": "5s",
        "spark.executor.heartbeatInterval": "5s",
        "spark.locality.wait": "0s",
        "spark.ui.enabled": "true",  # the driver reads where each task runs from its REST API
        "spark.ui.showConsoleProgress": "false",
    }


def check_gateways(count: int) -> None:
    """Refuse a gateway count outside 1..MAX_GATEWAYS (ConfigError)."""
    if not 1 <= count <= MAX_GATEWAYS:
        raise ConfigError("--gateways", count, f"expected 1 to {MAX_GATEWAYS} gateway slots")


@dataclass(frozen=True)
class GatewayTask:
    """What a slot's task needs to start its gateway: the CLI's own arguments."""

    store_url: str
    base_port: int
    settings: tuple[tuple[str, str], ...] = ()
    bind_host: str | None = None
    storage_options: str | None = None
    log_level: str = "warning"
    #: slot S also listens for Kafka clients on kafka_base_port + S (0: no Kafka listener)
    kafka_base_port: int = 0
    #: that listener's scheme (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
    kafka_scheme: str = "PLAINTEXT"

    def argv(self, slot: int, host: str, advertised_host: str | None = None) -> list[str]:
        argv = ["--store", self.store_url]
        for key, value in self.settings:
            argv += ["--set", f"{key}={value}"]
        advertised = advertised_host or host
        argv += ["--set", f"gateway.broker.id={slot}", "--set",
                 f"gateway.advertised.listeners=http://{advertised}:{self.base_port + slot}"]
        if self.kafka_base_port:  # each slot is a Kafka broker of its own (node id = slot)
            port = self.kafka_base_port + slot
            argv += ["--set", f"gateway.kafka.listeners={self.kafka_scheme}://{host}:{port}",
                     "--set", f"gateway.kafka.advertised.listeners="
                              f"{self.kafka_scheme}://{advertised}:{port}"]
        argv += ["gateway", "--host", host, "--port", str(self.base_port + slot),
                 "--log-level", self.log_level]
        if self.storage_options:
            argv += ["--storage-options", self.storage_options]
        return argv

    def __call__(self, partition) -> None:
        """Run in the Spark task: serve slot's gateway until it stops; raise if it failed."""
        from jobs.cli import main  # the stable entry point; gateway internals are moving

        for slot in partition:
            host = self.bind_host or os.environ.get("SPARK_LOCAL_IP") or "0.0.0.0"
            advertised = host if host != "0.0.0.0" else socket.getfqdn()
            status = main(self.argv(slot, host, advertised))
            if status != 0:  # e.g. the port still held by a dying predecessor: retry
                raise RuntimeError(f"gateway slot {slot} on {host}:{self.base_port + slot} "
                                   f"exited with status {status}")


@dataclass
class SlotState:
    """What the driver knows of one slot (also the ``--addresses-file`` entry)."""

    slot: int
    port: int
    host: str | None = None
    url: str | None = None
    executor: str | None = None
    task_attempt: int | None = None
    up: bool = False
    since_ms: int | None = None
    runs: int = 0


class BrokerApp:
    """The driver: one supervising thread per slot, a monitor, a clean stop."""

    def __init__(self, sc, task: GatewayTask, gateways: int, *,
                 addresses_file: str | None = None, out: Callable[[str], None] = print,
                 keeper: LeadershipKeeper | None = None):
        self.sc, self.task, self.gateways = sc, task, gateways
        self.addresses_file, self.out = addresses_file, out
        self.keeper = keeper
        #: extra facts for driver.json (the maintenance scheduler's status)
        self.driver_facts: Callable[[], dict] = dict
        self.stopping = threading.Event()
        self.slots = [SlotState(s, task.base_port + s) for s in range(gateways)]
        self._threads: list[threading.Thread] = []
        if keeper is not None:
            keeper.on_publish = self.tell_gateways

    @property
    def assignment_name(self) -> str | None:
        """The newest assignment this driver knows (what each probe tells the gateway)."""
        current = self.keeper.current if self.keeper is not None else None
        return current.name if current is not None else None

    def tell_gateways(self, assignment) -> None:
        """Name a new assignment to every slot that is up, at once and side by side (a
        probe of its /healthz that carries the name): each reads it by that name, so a
        failover waits on no gateway's polling. A slot missed now is told at its next
        probe."""
        for state in self.slots:
            if state.up and state.url:
                threading.Thread(target=healthy, args=(state.url, assignment.name),
                                 name=f"sparklog-tell-{state.slot}", daemon=True).start()

    @staticmethod
    def group(slot: int) -> str:
        return f"sparklog-gateway-{slot}"

    def _supervise(self, slot: int) -> None:
        """Run the slot's job, again and again, until the application stops."""
        backoff = BACKOFF_FIRST_S
        self.sc.setJobGroup(self.group(slot), f"sparklog gateway slot {slot}",
                            interruptOnCancel=True)
        while not self.stopping.is_set():
            started = time.monotonic()
            self.slots[slot].runs += 1
            try:
                self.sc.parallelize([slot], 1).foreachPartition(self.task)
                why = "ended"
            except Exception as e:  # noqa: BLE001 - any job failure means: run it again
                why = f"failed: {' '.join(str(e).split())[:200]}"
            if self.stopping.is_set():
                break
            self.out(f"slot {slot} job {why}; resubmitting in {backoff:.1f} s")
            if time.monotonic() - started > BACKOFF_RESET_AFTER_S:
                backoff = BACKOFF_FIRST_S
            self.stopping.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _running_task(self, slot: int) -> dict | None:
        """The slot's running task from Spark's REST API (host, executorId, attempt)."""
        tracker = self.sc.statusTracker()
        jobs = tracker.getJobIdsForGroup(self.group(slot))
        for job_id in sorted(jobs, reverse=True):
            info = tracker.getJobInfo(job_id)
            if info is None or info.status != "RUNNING":
                continue
            for stage_id in info.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is None:
                    continue
                url = (f"{self.sc.uiWebUrl}/api/v1/applications/{self.sc.applicationId}/stages/"
                       f"{stage_id}/{stage.currentAttemptId}/taskList?status=RUNNING")
                try:
                    with urllib.request.urlopen(url, timeout=2) as r:
                        tasks = json.load(r)
                except (urllib.error.URLError, OSError, ValueError):
                    return None
                if tasks:
                    return max(tasks, key=lambda t: (t.get("attempt", 0), t.get("taskId", 0)))
        return None

    def _refresh(self, state: SlotState) -> bool:
        """Update one slot from Spark and a /healthz probe; True if it changed."""
        task = self._running_task(state.slot)
        host = executor = attempt = None
        up = False
        if task is not None:
            host = task.get("host")
            executor, attempt = task.get("executorId"), task.get("attempt")
            up = host is not None and healthy(f"http://{host}:{state.port}",
                                              self.assignment_name)
        if (host, executor, attempt, up) == (state.host, state.executor, state.task_attempt,
                                             state.up):
            return False
        state.host, state.executor, state.task_attempt, state.up = host, executor, attempt, up
        state.url = f"http://{host}:{state.port}" if host else None
        state.since_ms = int(time.time() * 1000)
        return True

    def _publish(self, state: SlotState) -> None:
        where = (f"{state.url} (executor {state.executor}, task attempt {state.task_attempt})"
                 if state.url else "(no running task)")
        self.out(f"slot {state.slot} {'up' if state.up else 'down'} {where}")
        if self.addresses_file:
            doc = {"application": self.sc.applicationId, "slots": [asdict(s) for s in self.slots]}
            tmp = f"{self.addresses_file}.tmp-{os.getpid()}"
            with open(tmp, "w") as f:
                json.dump(doc, f, indent=1)
            os.replace(tmp, self.addresses_file)  # readers see the old or the new document

    def run(self, poll_s: float = 0.5) -> None:
        """Start every slot and watch them until :meth:`stop` (blocking)."""
        for slot in range(self.gateways):
            t = threading.Thread(target=self._supervise, args=(slot,),
                                 name=f"sparklog-slot-{slot}", daemon=True)
            t.start()
            self._threads.append(t)
        while not self.stopping.wait(poll_s):
            for state in self.slots:
                try:
                    changed = self._refresh(state)
                except Exception as e:  # noqa: BLE001 - the monitor must outlive a hiccup
                    self.out(f"slot {state.slot} monitor error: {e}")
                    continue
                if changed:
                    self._publish(state)
            if self.keeper is not None:
                try:
                    self.keeper.tick(self.slots, self.driver_facts())
                except DriverFenced as e:
                    self.out(f"{e}: stopping this application")
                    self.stopping.set()
                except Exception as e:  # noqa: BLE001 - a store hiccup: next tick tries again
                    self.out(f"leadership tick failed: {type(e).__name__}: {e}")

    def stop(self, join_s: float = 30.0) -> None:
        """Cancel every slot's job group and wait for the supervising threads."""
        self.stopping.set()
        for slot in range(self.gateways):
            self.sc.cancelJobGroup(self.group(slot))
        for t in self._threads:
            t.join(join_s)


def healthy(url: str, assignment: str | None = None) -> bool:
    """Whether the gateway at ``url`` answers ``/healthz`` within a second; the probe
    names ``assignment``, the newest one, to a broker application's gateway."""
    query = f"?assignment={urllib.parse.quote(assignment)}" if assignment else ""
    try:
        with urllib.request.urlopen(f"{url}/healthz{query}", timeout=1) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def run(task: GatewayTask, gateways: int, *, master: str | None = None,
        addresses_file: str | None = None, failover_ms: int = 3000,
        maintenance: bool = True, settings=None) -> int:
    """Start the SparkContext and the application; return when SIGTERM/SIGINT stopped it.

    ``settings`` (``conf.Settings``, default: loaded from ``task.settings``) are the
    driver's: it opens the store from them as every sparklog process does
    (``log_layout.opening``), ``task.storage_options`` overriding what they imply.
    Raises ConfigError naming the setting when the store cannot be reached with them,
    before Spark starts.
    """
    check_gateways(gateways)
    import conf as conf_

    from log_layout.brokers import DRIVER
    from log_layout.opening import check_reachable, open_log_from_settings

    if settings is None:
        settings = conf_.load({**dict(task.settings), "store.url": task.store_url})
    options = json.loads(task.storage_options) if task.storage_options else None
    log_ = open_log_from_settings(settings, storage_options=options)
    # one read before Spark starts: a store the settings do not reach (an endpoint left
    # unset, a wrong port or user) is a one-line error naming the key, not a gateway
    # that never comes up while the driver retries against the wrong server
    check_reachable(log_, settings, options, probe=DRIVER)
    from pyspark import SparkConf, SparkContext

    # the executors' Python: a plain-Python driver's SparkContext reads only this variable
    # (not spark.pyspark.python); default: the driver's own interpreter and packages
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = SparkConf()  # under spark-submit, this holds its --master and --conf values
    for key, value in spark_conf(master, gateways).items():
        if key == "spark.master" and master is None and conf.contains(key):
            continue  # spark-submit --master wins over the local[N] default
        conf.set(key, value)
    keeper = LeadershipKeeper(log_, gateways, failover_s=failover_ms / 1000, out=_say)
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    keeper.start({"application": sc.applicationId, "master": sc.master, "ui": sc.uiWebUrl,
                  "host": socket.getfqdn(), "pid": os.getpid(), "gateways": gateways})
    app = BrokerApp(sc, task, gateways, addresses_file=addresses_file, out=_say, keeper=keeper)
    maint = None
    if maintenance:  # compaction, retention, roll-up every maintenance.interval.ms, here
        from jobs.app_maintenance import start_maintenance

        maint = start_maintenance(sc, settings, storage_options=options, out=_say)
        app.driver_facts = lambda: {"maintenance": maint.status()}
    _say(f"broker-app {sc.applicationId} on {sc.master}: {gateways} gateway slot(s) from port "
         f"{task.base_port}; Spark UI {sc.uiWebUrl}")

    received: list[int] = []

    def on_signal(signum, _frame):  # no printing here: a handler may interrupt a print
        received.append(signum)
        app.stopping.set()

    # after SparkContext(): pyspark installs its own SIGINT handler there
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        app.run()
    finally:
        if received:
            _say(f"{signal.Signals(received[0]).name}: stopping")
        app.stop()
        if maint is not None:
            maint.stop(30.0)
        try:
            keeper.stopped()
        except Exception as e:  # noqa: BLE001 - the store may be what failed
            _say(f"could not mark the application stopped: {e}")
        sc.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    _say("broker-app stopped")
    return 0


def _say(line: str) -> None:
    """One line of the driver's log, stamped in UTC to the millisecond (failover timing)."""
    now = time.time()
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(now))}.{int(now % 1 * 1000):03d}Z "
          f"{line}", flush=True)


if __name__ == "__main__":  # spark-submit jobs/broker_app.py --gateways 1 --store URL
    from jobs.cli import main

    sys.exit(main(["broker-app", *sys.argv[1:]]))
