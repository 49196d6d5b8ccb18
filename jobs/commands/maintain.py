"""``sparklog compact | retention | maintain | maintenance-history``.

``compact`` cleans compacted topics, ``retention`` drops expired segments and
deletes unreferenced files, ``maintain`` does both plus roll-up of small
segments; each runs as a Spark job (``--master``, default ``spark.master``) or
in this process (``--no-spark``, for small stores), prints a progress bar and
a summary table, and appends the run to the maintenance history.
``maintain --every 5m`` repeats until interrupted (for a loop instead of cron).
"""

from __future__ import annotations

import argparse
import time

from jobs.cli import duration, integer


def register(sub: argparse._SubParsersAction) -> None:
    helps = {
        "compact": "compact topics whose cleanup.policy includes compact",
        "retention": "drop expired segments (retention.ms/bytes), delete unreferenced files",
        "maintain": "retention, compaction, roll-up of small segments and file deletion",
    }
    for name, text in helps.items():
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        p.add_argument("--topic", action="append", metavar="NAME",
                       help="only this topic (repeatable; glob patterns like 'orders*' work)")
        p.add_argument("--dry-run", action="store_true",
                       help="report the segments, records and bytes that would change; "
                            "write nothing")
        p.add_argument("--master", help="Spark master (default: spark.master)")
        p.add_argument("--no-spark", action="store_true",
                       help="run in this process instead of as a Spark job")
        if name == "compact" or name == "maintain":
            p.add_argument("--force", action="store_true",
                           help="clean even below min.cleanable.dirty.ratio")
        if name == "maintain":
            p.add_argument("--every", type=duration(1), metavar="DURATION", nargs="?",
                           const=-1, help="repeat every DURATION (e.g. 30s, 5m, 1h; a bare "
                                          "number is milliseconds; default "
                                          "maintenance.interval.ms) until interrupted")
            p.add_argument("--runs", type=integer(1), metavar="N",
                           help="with --every: stop after N runs")
        p.set_defaults(handler=run_command, command_name=name)

    h = sub.add_parser("maintenance-history", help="show past maintenance runs",
                       description="Show the maintenance runs recorded in the store.")
    h.add_argument("--limit", type=integer(1), default=20, help="newest N runs (default 20)")
    h.add_argument("--json", action="store_true", help="print the raw JSON lines")
    h.set_defaults(handler=show_history)


def _spark(args, settings):
    if args.no_spark:
        return None
    import os

    from pipeline import quiet
    from pipeline.spark import session

    # quiet as every Spark command (pipeline.quiet: the shipped errors-only log4j, no
    # stage bars), or Spark as it is with --verbose: nothing of that is decided here
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    spark = session(master=args.master, settings=settings,
                    extra={"spark.executorEnv.PYTHONPATH": str(_project_root())})
    if submitted and not quiet.verbose():
        # under spark-submit (jobs/maintain.py) the driver's log4j started before the
        # shipped conf could be named: at Spark's INFO it drowns the table
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def _project_root():
    import conf

    return conf.PROJECT_ROOT


def _console():
    from jobs.cli_output import console

    # piped output (cron, logs) gets the whole table instead of 80 squeezed columns
    return console()


def run_command(args: argparse.Namespace) -> int:
    from conf.errors import SparklogError
    from jobs.cli import settings_from
    from log_layout import open_log_from_settings, wall_clock_ms

    console = _console()
    settings = settings_from(args)
    log = open_log_from_settings(settings)
    every = getattr(args, "every", None)
    if every == -1:
        every = settings.maintenance.interval_ms
    runs = getattr(args, "runs", None)
    spark = _spark(args, settings)
    done = 0
    while True:
        try:
            summary = _one_run(console, log, args, spark, wall_clock_ms())
            failed = bool(summary.errors)
        except (SparklogError, OSError) as e:
            if every is None:
                raise
            console.print(f"[red]maintenance run failed:[/red] {e}")  # a loop keeps going
            failed = True
        done += 1
        if every is None or (runs is not None and done >= runs):
            return 1 if failed else 0
        console.print(f"next run in {every / 1000:g} s (Ctrl-C stops)")
        time.sleep(every / 1000)  # the CLI's schedule, not logic: logic takes now_ms


def _one_run(console, log, args, spark, now_ms: int):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from jobs.maintain import run

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(f"{args.command_name}{' (dry run)' if args.dry_run else ''}",
                            total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        summary = run(log, command=args.command_name, topics=args.topic, now_ms=now_ms,
                      dry_run=args.dry_run, force=getattr(args, "force", False), spark=spark,
                      progress=progress)
    print_summary(console, summary)
    return summary


def _size(n: float) -> str:
    """Bytes as every command shows them: 812 B, 31.2 KiB, 4.0 MiB (``cli_output``)."""
    from jobs.cli_output import human_size

    return human_size(int(n))


def print_summary(console, summary) -> None:
    """The run's table, one row per step, on ``console``'s stream."""
    from jobs.cli_output import Table, plural

    title = (f"{summary.command}{' (dry run: nothing written)' if summary.dry_run else ''}: "
             f"{plural(len(summary.topics), 'topic')}, {summary.duration_ms / 1000:.1f} s")
    table = Table("STEP", "PARTITIONS", "CHANGED", "SEGMENTS", "RECORDS", "BYTES",
                  "FILES-DELETED", "CONFLICTS", title=title, left=("STEP",))
    for action, a in summary.by_action().items():
        table.add_row(action, str(a["partitions"]), str(a["changed"]),
                      f"{a['segments_before']}->{a['segments_after']}",
                      f"{a['records_before']}->{a['records_after']}",
                      f"{_size(a['bytes_before'])}->{_size(a['bytes_after'])}",
                      str(a["files_deleted"]), str(a["conflicts"]))
    if not summary.results:
        table.add_row("(no partition had work)", "0", "0", "", "", "", "", "")
    table.print(console.file)
    for error in summary.errors:
        console.print(f"[red]error[/red] {error}")


def show_history(args: argparse.Namespace) -> int:
    import json

    from jobs.cli import settings_from
    from jobs.cli_output import Table, iso_ms
    from log_layout import open_log_from_settings

    log = open_log_from_settings(settings_from(args))
    runs = log.history(limit=args.limit)
    console = _console()
    if args.json:
        for r in runs:
            print(json.dumps(r))
        return 0
    table = Table("WHEN", "COMMAND", "PARTITIONS", "CLEANED", "RECORDS-REMOVED", "BYTES",
                  "FILES-DELETED", "SECONDS", "ERRORS", left=("WHEN", "COMMAND"),
                  title=f"maintenance history of {log.url} (newest {args.limit})")
    for r in runs:
        table.add_row(iso_ms(r.get("now_ms")), r.get("command", "?"),
                      str(r.get("partitions", 0)), str(r.get("partitions_cleaned", 0)),
                      str(r.get("records_removed", 0)),
                      f"{_size(r.get('bytes_before', 0))}->{_size(r.get('bytes_after', 0))}",
                      str(r.get("files_deleted", 0)), f"{r.get('duration_ms', 0) / 1000:.1f}",
                      str(len(r.get("errors", []))))
    if not runs:
        table.add_row("(no runs recorded)", "", "", "", "", "", "", "", "")
    table.print(console.file)
    return 0
