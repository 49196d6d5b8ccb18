"""Maintenance as a Spark job: retention, compaction, roll-up and vacuum over many partitions.

The driver lists the partitions of the selected topics, reads their manifests
and ships one task per partition with work to do (store URL and options,
topic, partition, the topic's config, ``now_ms``, the steps, ``dry_run``).
Each Spark task opens the log through ``log_layout`` and runs
:func:`maintain_partition` -- the same plain-Python function the CLI's
``--no-spark`` mode and the tests call -- which plans every step on the
partition's newest manifest (a step changes what the next one sees, so the
plan is made where the work is done) and commits each step with a manifest
swap that rebases over concurrent appends. The driver collects one result per
step and partition and appends a summary to the maintenance history.

Spark-submit entry (same arguments as ``sparklog maintain``)::

    spark-submit jobs/maintain.py --store /data/log maintain --topic 'orders*' --dry-run
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

if __name__ == "__main__":  # spark-submit runs this file as a script: make the project importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compaction.cleaner import compact_partition, plan_clean
from compaction.rollup import plan_rollup, rollup_partition
from conf.errors import SparklogError
from conf.topic import TopicConfig
from log_layout import Log, PartitionLog, hot_sweep, shared_log
from log_layout.maintenance import StepResult
from retention.policy import plan_retention, retain_partition
from retention.vacuum import vacuum_partition

log_msg = logging.getLogger("sparklog.maintain")

#: steps in the order they run on a partition: retention first (nothing is
#: compacted that is about to be dropped), vacuum last (it deletes what the
#: others superseded once the grace period has passed).
STEPS = ("retention", "compact", "rollup", "vacuum")
COMMAND_STEPS = {
    "compact": ("compact",),
    "retention": ("retention", "vacuum"),
    "maintain": STEPS,
}


class InvalidMaintenanceRequest(SparklogError, ValueError):
    """A maintenance run was asked for something that does not exist."""

    code = "invalid_maintenance_request"

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


@dataclasses.dataclass(frozen=True)
class PartitionTask:
    """Everything an executor needs to maintain one partition (picklable)."""

    url: str
    storage_options: Mapping[str, Any] | None
    manifest_versions_retained: int
    topic: str
    partition: int
    config: Mapping[str, str]  # Kafka-named topic configs
    now_ms: int
    steps: tuple[str, ...]
    dry_run: bool
    force: bool = False


@dataclasses.dataclass
class RunSummary:
    """The outcome of one maintenance run (what the history keeps)."""

    run_id: str
    command: str
    now_ms: int
    dry_run: bool
    topics: list[str]
    results: list[StepResult]
    duration_ms: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)

    def by_action(self) -> dict[str, dict[str, int]]:
        """Per step: partitions changed, segments, records and bytes before/after, files."""
        out: dict[str, dict[str, int]] = {}
        for r in self.results:
            row = out.setdefault(r.action, dict.fromkeys(
                ("partitions", "changed", "conflicts", "segments_before", "segments_after",
                 "records_before", "records_after", "bytes_before", "bytes_after",
                 "files_deleted"), 0))
            row["partitions"] += 1
            row["changed"] += int(r.changed)
            row["conflicts"] += int(r.conflict)
            if r.changed:
                for key in ("segments_before", "segments_after", "records_before",
                            "records_after", "bytes_before", "bytes_after", "files_deleted"):
                    row[key] += getattr(r, key)
        return out

    def history_record(self) -> dict[str, Any]:
        actions = self.by_action()
        return {
            "run_id": self.run_id, "command": self.command, "now_ms": self.now_ms,
            "duration_ms": self.duration_ms, "dry_run": self.dry_run, "topics": self.topics,
            "partitions": len({(r.topic, r.partition) for r in self.results}),
            "partitions_cleaned": actions.get("compact", {}).get("changed", 0),
            "records_removed": sum(a["records_before"] - a["records_after"]
                                   for k, a in actions.items() if k in ("compact", "retention")),
            "bytes_before": sum(a["bytes_before"] for k, a in actions.items() if k != "vacuum"),
            "bytes_after": sum(a["bytes_after"] for k, a in actions.items() if k != "vacuum"),
            "files_deleted": actions.get("vacuum", {}).get("files_deleted", 0),
            "actions": actions, "errors": self.errors,
        }


# -- one partition (plain Python; Spark tasks call this) -----------------------
def maintain_partition(plog: PartitionLog, config: TopicConfig, now_ms: int, *,
                       steps: Sequence[str] = STEPS, dry_run: bool = False,
                       force: bool = False) -> list[StepResult]:
    """Run ``steps`` (in :data:`STEPS` order) on one partition; one result per step.

    ``force`` cleans regardless of ``min.cleanable.dirty.ratio``. Raises
    InvalidMaintenanceRequest for an unknown step.
    """
    unknown = set(steps) - set(STEPS)
    if unknown:
        raise InvalidMaintenanceRequest(f"unknown maintenance steps {sorted(unknown)}; "
                                        f"known: {', '.join(STEPS)}")
    out = []
    for step in STEPS:
        if step not in steps:
            continue
        if step == "retention":
            out.append(retain_partition(plog, config, now_ms, dry_run=dry_run))
        elif step == "compact":
            out.append(compact_partition(plog, config, now_ms, dry_run=dry_run, force=force))
        elif step == "rollup":
            out.append(rollup_partition(plog, config, now_ms, dry_run=dry_run))
        else:
            out.append(vacuum_partition(plog, config, now_ms, dry_run=dry_run))
    return out


def has_work(plog: PartitionLog, config: TopicConfig, now_ms: int, steps: Sequence[str]) -> bool:
    """A cheap driver-side check from the manifest: could any step change this partition?"""
    if "vacuum" in steps:
        return True  # unreferenced files are only seen by listing: let the task look
    m = plog.snapshot()
    if "retention" in steps and plan_retention(m, config, now_ms) is not None:
        return True
    if "compact" in steps and (plan := plan_clean(m, config, now_ms)) is not None and plan.due:
        return True
    return "rollup" in steps and bool(plan_rollup(m, config))


def run_task(task: PartitionTask) -> list[dict[str, Any]]:
    """Executor side: maintain one partition; results as dicts (errors as a result too)."""
    try:
        # one Log per store per Python worker (Spark reuses workers across tasks)
        log = shared_log(task.url, storage_options=task.storage_options,
                         manifest_versions_retained=task.manifest_versions_retained)
        plog = log.partition(task.topic, task.partition)
        config = TopicConfig.from_kafka(task.config)
        results = maintain_partition(plog, config, task.now_ms, steps=task.steps,
                                     dry_run=task.dry_run, force=task.force)
        return [r.to_dict() for r in results]
    except (SparklogError, OSError) as e:  # one broken partition must not fail the whole run
        return [StepResult.unchanged("error", task.topic, task.partition,
                                     f"error: {type(e).__name__}: {e}").to_dict()]


# -- the driver ---------------------------------------------------------------
def select_topics(log: Log, patterns: Sequence[str] | None) -> list[str]:
    """Topics matching any of the glob ``patterns`` (all topics if none given).

    Raises InvalidMaintenanceRequest if a pattern without wildcards names no topic.
    """
    topics = log.topics()
    if not patterns:
        return topics
    chosen = [t for t in topics if any(fnmatch.fnmatchcase(t, p) for p in patterns)]
    missing = [p for p in patterns if not any(c in p for c in "*?[") and p not in topics]
    if missing:
        raise InvalidMaintenanceRequest(f"no such topic: {', '.join(missing)}")
    return chosen


def plan_tasks(log: Log, topics: Iterable[str], *, now_ms: int, steps: Sequence[str],
               dry_run: bool, force: bool = False,
               storage_options: Mapping[str, Any] | None = None) -> list[PartitionTask]:
    """One task per partition of ``topics`` that may have work (see :func:`has_work`)."""
    tasks = []
    for topic in topics:
        info = log.topic(topic, refresh=True)
        config = info.config
        for plog in log.partitions(topic):
            if force or has_work(plog, config, now_ms, steps):
                tasks.append(PartitionTask(log.url, storage_options, log.manifest_versions_retained,
                                           topic, plog.partition, config.to_kafka(), now_ms,
                                           tuple(steps), dry_run, force))
    return tasks


ProgressFn = Callable[[int, int], None]  # (tasks done, tasks total)


def execute(tasks: Sequence[PartitionTask], *, spark=None,
            progress: ProgressFn | None = None) -> list[StepResult]:
    """Run the tasks as one Spark job (one Spark task each), or in-process if ``spark`` is None."""
    results: list[dict[str, Any]] = []
    if not tasks:
        return []
    if spark is None or tasks[0].url.startswith("memory://"):
        # memory:// lives in this process only: Spark's Python workers could not see it
        for i, task in enumerate(tasks):
            results.extend(run_task(task))
            if progress:
                progress(i + 1, len(tasks))
    else:
        results = _collect_with_progress(spark, tasks, progress)
    return [StepResult(**r) for r in results]


def _collect_with_progress(spark, tasks: Sequence[PartitionTask],
                           progress: ProgressFn | None) -> list[dict[str, Any]]:
    sc = spark.sparkContext
    group = f"sparklog-maintain-{uuid.uuid4().hex[:8]}"
    box: dict[str, Any] = {}

    def collect() -> None:
        try:
            sc.setJobGroup(group, f"sparklog maintenance of {len(tasks)} partitions")
            rdd = sc.parallelize(list(tasks), len(tasks))
            box["rows"] = rdd.flatMap(run_task).collect()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    worker = threading.Thread(target=collect, name="sparklog-maintain", daemon=True)
    worker.start()
    tracker = sc.statusTracker()
    while worker.is_alive():
        worker.join(0.25)
        if progress:
            done = 0
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage in (info.stageIds if info else []):
                    s = tracker.getStageInfo(stage)
                    done += s.numCompletedTasks if s else 0
            progress(min(done, len(tasks)), len(tasks))
    if "error" in box:
        raise box["error"]
    if progress:
        progress(len(tasks), len(tasks))
    return box["rows"]


def run(log: Log, *, command: str = "maintain", steps: Sequence[str] | None = None,
        topics: Sequence[str] | None = None, now_ms: int, dry_run: bool = False,
        force: bool = False, spark=None, storage_options: Mapping[str, Any] | None = None,
        progress: ProgressFn | None = None, record_history: bool = True) -> RunSummary:
    """Plan and run one maintenance pass; append it to the history unless a dry run.

    ``steps`` defaults to the command's (``compact``, ``retention`` or
    ``maintain``); ``storage_options`` to those ``log``'s store was opened with. Raises InvalidMaintenanceRequest for an unknown command,
    step or topic.
    """
    if steps is None:
        if command not in COMMAND_STEPS:
            raise InvalidMaintenanceRequest(f"unknown maintenance command {command!r}; "
                                            f"known: {', '.join(COMMAND_STEPS)}")
        steps = COMMAND_STEPS[command]
    unknown = set(steps) - set(STEPS)
    if unknown:
        raise InvalidMaintenanceRequest(f"unknown maintenance steps {sorted(unknown)}; "
                                        f"known: {', '.join(STEPS)}")
    started = time.monotonic()
    if storage_options is None:  # executors reopen the store exactly as it was opened here
        storage_options = log.store.describe().get("storage_options")
    chosen = select_topics(log, topics)
    tasks = plan_tasks(log, chosen, now_ms=now_ms, steps=steps, dry_run=dry_run, force=force,
                       storage_options=storage_options)
    results = execute(tasks, spark=spark, progress=progress)
    if "vacuum" in steps and topics is None:
        # shared hot objects span topics: swept over the whole log, with the longest delay
        delay = max((log.file_delete_delay_ms(t) for t in chosen), default=0)
        swept = hot_sweep.sweep(log, now_ms=now_ms, delay_ms=delay, dry_run=dry_run)
        if swept.deleted_objects or swept.deleted_entries:
            log_msg.info("hot tier: %d objects and %d journal entries deleted (%d bytes)",
                         swept.deleted_objects, swept.deleted_entries, swept.deleted_bytes)
    summary = RunSummary(f"{now_ms}-{uuid.uuid4().hex[:6]}", command, now_ms, dry_run, chosen,
                         results, errors=[f"{r.topic}-{r.partition}: {r.note}" for r in results
                                          if r.action == "error"])
    summary.duration_ms = int((time.monotonic() - started) * 1000)
    if record_history and not dry_run:
        log.append_history(summary.history_record())
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """spark-submit entry: the ``sparklog`` CLI with a maintenance command."""
    from jobs.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    # Run the CLI from the importable module, not from ``__main__``, so Spark tasks
    # pickle references to ``jobs.maintain.run_task`` that executors can import.
    import jobs.maintain

    sys.exit(jobs.maintain.main(sys.argv[1:]))
