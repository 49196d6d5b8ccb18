"""Maintenance scheduled from the broker application's driver.

The driver of ``sparklog broker-app`` runs the same pass as ``sparklog maintain``
(retention, compaction, roll-up and vacuum over every topic: :func:`jobs.maintain.run`)
every ``maintenance.interval.ms``, as a Spark job of its own SparkContext, so a store
served by the application needs no cron job beside it::

    scheduler = start_maintenance(sc, settings, storage_options=options, out=print)
    ...
    driver_doc["maintenance"] = scheduler.status()   # each heartbeat of driver.json
    ...
    scheduler.stop()                                 # before sc.stop()

:class:`MaintenanceScheduler` runs the passes on one daemon thread: the first one
interval after :meth:`~MaintenanceScheduler.start`, each next one an interval after
the previous one *ended* (a fixed delay, so a pass longer than the interval never
overlaps the next). A pass that raises is logged with its error through ``out``,
counted in ``failures`` and tried again at the next interval: nothing a pass raises
(``Exception``) stops the thread or reaches the application.

``status()`` (what the driver document's ``maintenance`` holds)::

    {"interval_ms": 300000, "last_run_ms": 1763800000000, "runs": 12, "failures": 1,
     "last_result": {"ok": true, "run_id": "1763800000000-1a2b3c", "duration_ms": 2345,
                     "topics": 4, "partitions": 9, "records_removed": 1200,
                     "files_deleted": 7, "errors": []}}

``last_run_ms`` is when the last pass started (None before the first);
``last_result`` is None before the first pass ends, ``{"ok": false, "error":
"OSError: ..."}`` after one that raised; ``errors`` lists the partitions a pass
could not maintain (``topic-partition: reason``; the pass itself still counts as run).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import conf
from log_layout import Log, open_log_from_settings, wall_clock_ms

#: how long stop() waits for a pass under way by default
STOP_WAIT_S = 30.0
#: the longest error text kept in the status (the driver document stays small)
ERROR_CHARS = 500


def maintenance_pass(spark_or_sc, log: Log, *, now_ms: int | None = None,
                     storage_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One ``maintain`` pass over every topic of ``log``, appended to the maintenance
    history; its summary as ``status()["last_result"]`` shows it.

    ``spark_or_sc`` is a SparkSession, a SparkContext (the broker application's) or
    None (in this process). ``now_ms`` defaults to the wall clock; ``storage_options``
    to those ``log``'s store was opened with (the executors reopen it so). Raises what
    :func:`jobs.maintain.run` raises (SparklogError, OSError, Spark's errors).
    """
    from jobs.maintain import run  # imports compaction and retention: only when used

    summary = run(log, command="maintain", now_ms=wall_clock_ms() if now_ms is None else now_ms,
                  spark=_session(spark_or_sc), storage_options=storage_options)
    record = summary.history_record()
    return {"ok": True, "run_id": summary.run_id, "duration_ms": summary.duration_ms,
            "topics": len(summary.topics), "partitions": record["partitions"],
            "records_removed": record["records_removed"],
            "files_deleted": record["files_deleted"], "errors": list(summary.errors)}


def _session(spark_or_sc):
    """A SparkSession for ``jobs.maintain.run``, which takes one; a SparkContext gets
    the session over itself (SparkSession's public constructor: no new application)."""
    if spark_or_sc is None or hasattr(spark_or_sc, "sparkContext"):
        return spark_or_sc
    from pyspark.sql import SparkSession

    return SparkSession(spark_or_sc)


class MaintenanceScheduler:
    """Calls ``run_once`` every ``interval_s`` seconds on a daemon thread (see the
    module doc). ``out`` receives one line per pass; ``clock_ms`` stamps ``last_run_ms``."""

    def __init__(self, run_once: Callable[[], Mapping[str, Any]], interval_s: float, *,
                 out: Callable[[str], None] = print,
                 clock_ms: Callable[[], int] = wall_clock_ms):
        if not interval_s > 0:
            raise ValueError(f"the maintenance interval must be positive, got {interval_s!r} s")
        self.run_once, self.interval_s, self.out, self.clock_ms = run_once, interval_s, out, clock_ms
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # held for a whole pass: two passes never run at once, whoever asks
        self._pass_lock = threading.Lock()
        self._state_lock = threading.Lock()  # status() reads while the thread writes
        self._last_run_ms: int | None = None
        self._last_result: dict[str, Any] | None = None
        self._runs = 0
        self._failures = 0

    def start(self) -> MaintenanceScheduler:
        """Start the thread (the first pass comes one interval later); returns self.
        Raises RuntimeError if it was started already."""
        if self._thread is not None:
            raise RuntimeError("the maintenance scheduler was started already")
        self._thread = threading.Thread(target=self._loop, name="sparklog-app-maintenance",
                                        daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self.run_pass()

    def run_pass(self) -> None:
        """Run one pass now, after any pass under way; never raises an Exception."""
        with self._pass_lock:
            started_ms, started = self.clock_ms(), time.monotonic()
            with self._state_lock:
                self._last_run_ms = started_ms
            try:
                result = {"ok": True, **dict(self.run_once())}
            except Exception as e:  # noqa: BLE001 - a failed pass must not end the application
                text = " ".join(f"{type(e).__name__}: {e}".split())[:ERROR_CHARS]
                result = {"ok": False, "error": text}
            with self._state_lock:
                self._runs += 1
                self._failures += 0 if result["ok"] else 1
                self._last_result = result
            secs = time.monotonic() - started
            if result["ok"]:
                self.out(f"maintenance pass done in {secs:.1f} s: {_summary(result)}")
            else:
                self.out(f"maintenance pass failed after {secs:.1f} s (next try in "
                         f"{self.interval_s:g} s): {result['error']}")

    def status(self) -> dict[str, Any]:
        """``interval_ms``, ``last_run_ms``, ``last_result``, ``runs``, ``failures``
        (a copy, JSON-ready: see the module doc)."""
        with self._state_lock:
            return {"interval_ms": int(self.interval_s * 1000), "last_run_ms": self._last_run_ms,
                    "last_result": None if self._last_result is None else dict(self._last_result),
                    "runs": self._runs, "failures": self._failures}

    def stop(self, wait_s: float = STOP_WAIT_S) -> bool:
        """Start no further pass and wait up to ``wait_s`` for the one under way; True if
        the thread ended, False if a pass is still running (it is a daemon thread: it
        ends with the process, or fails when the SparkContext stops)."""
        self._stopping.set()
        if self._thread is None:
            return True
        self._thread.join(wait_s)
        return not self._thread.is_alive()


def _summary(result: Mapping[str, Any]) -> str:
    text = ", ".join(f"{result.get(k, 0)} {k.replace('_', ' ')}"
                     for k in ("partitions", "records_removed", "files_deleted"))
    errors = result.get("errors") or []
    return text + (f"; {len(errors)} partition error(s), first: {errors[0]}" if errors else "")


def start_maintenance(spark_or_sc, settings: conf.Settings, *,
                      storage_options: Mapping[str, Any] | None = None,
                      out: Callable[[str], None] = print) -> MaintenanceScheduler:
    """Open ``store.url`` once and start a :class:`MaintenanceScheduler` running
    :func:`maintenance_pass` on ``spark_or_sc`` every ``maintenance.interval.ms``.

    ``storage_options`` overrides those the settings imply (as ``--storage-options``).
    Raises what opening the store raises (StoreError, OSError).
    """
    log = open_log_from_settings(settings, storage_options=storage_options)
    spark = _session(spark_or_sc)  # once, not at every pass
    return MaintenanceScheduler(lambda: maintenance_pass(spark, log),
                                settings.maintenance.interval_ms / 1000, out=out).start()
