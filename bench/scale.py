"""Failover times of the broker app on a real Spark standalone cluster (issue 13, phase 1).

Starts a master and 2 one-core workers on 127.0.0.1 (``jobs.spark_standalone``) and
``sparklog broker-app`` with one gateway slot (``jobs.broker_app_process``), then for
each fault, ``--repeat`` times: an idempotent ``Producer`` at ``acks=all`` sends
numbered records, the fault is injected, and the figure is the time **from the kill
to the first acknowledged write on the new gateway** (a record sent after the old
gateway stopped answering). Beside it: when a gateway answers ``/healthz`` again,
and the records lost or duplicated (read back through ``log_layout``; the target is
zero of each).

Faults: ``task-crash`` (SIGKILL of the Spark task's Python process, which hosts the
gateway), ``executor-crash`` (SIGKILL of that task's executor JVM; the task moves
to the other worker's executor, the spare core) and ``executor-freeze`` (SIGSTOP of
the executor JVM, its pyspark daemon and the gateway, its worker left running: the
driver gives the executor up after ``spark.network.timeout``, the worker kills it,
and the task moves). Targets from issue 13: a task's crash <= 5 s, an executor's
<= 15 s, a frozen one <= ``spark.network.timeout`` + 10 s = 35 s. The frozen
gateway's clients wait for their ``request_timeout_ms`` (30 s, the default) before
they retry, which is in the figure: it is what a default client sees.

Not measured yet (issue 13, later phases): produce throughput with 1, 2 and 4
gateways (``--gateways`` above 1 waits for partition leadership across gateways),
a worker's death, a frozen *host* (worker frozen too, so nothing kills the zombie:
on one machine it keeps the port, so that test needs distinct addresses per worker),
and the same on the S3 store.

Usage: ``python bench/scale.py [--quick] [--repeat N]``. Writes
``bench/results/scale.json`` (``scale.quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import machine, write_results  # noqa: E402
from jobs.broker_app_process import FAULTS, BrokerAppProcess, measure_failover  # noqa: E402
from jobs.spark_standalone import StandaloneCluster  # noqa: E402
from log_layout import open_log  # noqa: E402

#: issue 13's targets; a frozen executor's is spark.network.timeout (25 s) + 10 s
TARGETS_S = {"task-crash": 5.0, "executor-crash": 15.0, "executor-freeze": 35.0}
WORKERS = 2


def wait_spare(cluster: StandaloneCluster, timeout: float = 120.0) -> None:
    """Wait until every worker runs an executor again (a killed one is relaunched), so
    the next executor crash has a spare core to move to."""
    deadline = time.monotonic() + timeout
    while len(cluster.executor_pids()) < WORKERS:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {WORKERS} executors after {timeout:.0f} s")
        time.sleep(0.2)
    time.sleep(5)  # a relaunched executor registers with the driver a few seconds later


@contextlib.contextmanager
def _work_dir(keep: str | None):
    if keep:
        os.makedirs(keep)  # a new folder: never mix two runs' logs
        yield keep
    else:
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as work:
            yield work


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="each fault once, short load")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each fault (default 3)")
    ap.add_argument("--dir", default=None,
                    help="keep the cluster's and the app's logs and the store in this new "
                         "folder (default: a temporary folder, removed after)")
    args = ap.parse_args(argv)
    repeat = 1 if args.quick else args.repeat
    load_s = 1.0 if args.quick else 3.0
    where = machine()
    runs: dict[str, list] = {fault: [] for fault in FAULTS}
    with _work_dir(args.dir) as work:
        store = os.path.join(work, "store")
        log = open_log(store)
        with StandaloneCluster(os.path.join(work, "cluster"), workers=WORKERS) as cluster, \
                BrokerAppProcess(store, cluster.master_url, os.path.join(work, "app")) as app:
            for fault in FAULTS:
                for i in range(repeat):
                    topic = f"{fault.replace('-', '_')}_{i}"
                    log.create_topic(topic, {"partitions": 2})
                    wait_spare(cluster)
                    app.wait_up(120)
                    result = measure_failover(app, store, topic, fault, before_s=load_s,
                                              after_s=load_s)
                    print(result.line(), flush=True)
                    runs[fault].append(result)
            status = app.stop()
            if status != 0:
                raise RuntimeError(f"broker-app exited with {status}; see {app.log_path}")
    figures = []
    print(f"\nfailover, kill -> first acknowledged write on the new gateway, median of "
          f"{repeat} (acks=all, idempotent producer)")
    print(f"{'fault':>15} {'first ack s':>12} {'answers s':>10} {'target s':>9} "
          f"{'lost':>5} {'dup':>4}")
    for fault, results in runs.items():
        first = statistics.median(r.first_ack_s for r in results)
        answers = statistics.median(r.answers_s for r in results)
        lost = sum(r.lost + r.misplaced for r in results)
        dup = sum(r.duplicated + r.offsets_taken_twice for r in results)
        print(f"{fault:>15} {first:>12.2f} {answers:>10.2f} {TARGETS_S[fault]:>9.1f} "
              f"{lost:>5} {dup:>4}")
        name = fault.replace("-", "_")
        figures.append({"name": f"failover_{name}_first_ack", "unit": "s", "ours": round(first, 3),
                        "baseline": None, "ratio": None, "target": TARGETS_S[fault],
                        "runs": [round(r.first_ack_s, 3) for r in results]})
        figures.append({"name": f"failover_{name}_gateway_answers", "unit": "s",
                        "ours": round(answers, 3), "baseline": None, "ratio": None,
                        "target": None, "runs": [round(r.answers_s, 3) for r in results]})
        figures.append({"name": f"failover_{name}_acknowledged_lost_or_duplicated",
                        "unit": "records", "ours": lost + dup, "baseline": None, "ratio": None,
                        "target": 0, "acknowledged": sum(r.acknowledged for r in results)})
    write_results("scale", figures, quick=args.quick, machine_before_run=where, repeat=repeat,
                  cluster=f"standalone, master + {WORKERS} workers x 1 core, 127.0.0.1",
                  store="local folder, fsync off", gateways=1,
                  not_measured="throughput with 2 and 4 gateways; worker death; frozen host "
                               "(worker frozen too); S3")
    return 0


if __name__ == "__main__":
    sys.exit(main())
