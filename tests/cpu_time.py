"""Per-test CPU: the seconds of CPU a test cost, its own process and every process under it.

On two cores the suite's wall time is its CPU (README "Tests"), and a wall-time
``--durations`` table blames a test for the other workers beside it. This counts what each
test itself burns: the pytest process's CPU plus that of every live descendant (a gateway
subprocess, a SparkSession's JVM, SeaweedFS, a Kafka broker), including the children they
reaped, read from ``/proc`` before and after the test (setup, call and teardown). A server a
session-scoped fixture starts is charged to the first test that asks for it, and its later
work to whichever test is running then.

Off unless ``SPARKLOG_TEST_CPU_LOG`` names a file; each worker appends a JSON line per test
(``nodeid``, ``cpu_s``, ``wall_s``, ``worker``, ``outcome``, and ``fds``: the worker's
open descriptors after the test, where a leak shows) to it. ``python -m tests.cpu_time FILE``
prints the costliest tests and the totals by module.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict

import pytest

ENV = "SPARKLOG_TEST_CPU_LOG"
_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system, with reaped children's) of ``root`` and its live
    descendants; processes that vanish while ``/proc`` is read are skipped."""
    parent_of: dict[int, int] = {}
    cpu_of: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command may hold spaces and parentheses: the fields start after the last ')'
        fields = stat[stat.rindex(b")") + 2:].split()
        pid = int(name)
        parent_of[pid] = int(fields[1])
        cpu_of[pid] = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    children: dict[int, list[int]] = defaultdict(list)
    for pid, ppid in parent_of.items():
        children[ppid].append(pid)
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += cpu_of.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total / _TICK


class CpuLog:
    """The pytest plugin: wraps each test's whole protocol in two ``/proc`` reads."""

    def __init__(self, path: str):
        self.path = path
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.outcome = "passed"

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.outcome = "failed" if report.when == "call" else "error"
        elif report.skipped and self.outcome == "passed":
            self.outcome = "skipped"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        pid = os.getpid()
        cpu0, wall0 = tree_cpu_seconds(pid), time.monotonic()
        self.outcome = "passed"
        yield
        line = {"nodeid": item.nodeid, "cpu_s": round(tree_cpu_seconds(pid) - cpu0, 3),
                "wall_s": round(time.monotonic() - wall0, 3), "worker": self.worker,
                "outcome": self.outcome, "fds": len(os.listdir("/proc/self/fd"))}
        with open(self.path, "a") as f:  # one short append per line: workers do not interleave
            f.write(json.dumps(line) + "\n")


def register(config) -> None:
    """Install :class:`CpuLog` when ``SPARKLOG_TEST_CPU_LOG`` is set."""
    path = os.environ.get(ENV)
    if path:
        config.pluginmanager.register(CpuLog(path), "sparklog-cpu-log")


def report(path: str, top: int = 40) -> str:
    """The costliest tests and modules of a log :class:`CpuLog` wrote."""
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by_module: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for row in rows:
        acc = by_module[row["nodeid"].split("::")[0]]
        acc[0] += row["cpu_s"]
        acc[1] += row["wall_s"]
        acc[2] += 1
    out = [f"{len(rows)} tests, {sum(r['cpu_s'] for r in rows) / 60:.1f} CPU-min, "
           f"{sum(r['wall_s'] for r in rows) / 60:.1f} test-min of wall", ""]
    out += [f"{row['outcome']}: {row['nodeid']}" for row in rows
            if row.get("outcome", "passed") not in ("passed", "skipped")]
    out += ["",
           f"{'cpu s':>8} {'wall s':>8}  test"]
    for row in sorted(rows, key=lambda r: -r["cpu_s"])[:top]:
        out.append(f"{row['cpu_s']:8.1f} {row['wall_s']:8.1f}  {row['nodeid']}")
    out += ["", f"{'cpu s':>8} {'wall s':>8} {'tests':>6}  module"]
    for module, (cpu, wall, n) in sorted(by_module.items(), key=lambda kv: -kv[1][0])[:top]:
        out.append(f"{cpu:8.1f} {wall:8.1f} {n:6d}  {module}")
    leaks: dict[str, int] = defaultdict(int)  # descriptors a test left open in its worker
    last: dict[str, int] = {}
    for row in rows:
        if "fds" in row:
            before = last.get(row["worker"], row["fds"])
            leaks[row["nodeid"].split("::")[0]] += row["fds"] - before
            last[row["worker"]] = row["fds"]
    if leaks:
        out += ["", f"{'fds':>8}  module (descriptors left open, net)"]
        out += [f"{n:8d}  {module}" for module, n in
                sorted(leaks.items(), key=lambda kv: -kv[1])[:top] if n > 0]
    return "\n".join(out)


if __name__ == "__main__":
    print(report(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40))
