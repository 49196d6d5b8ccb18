"""``sparklog materialize TOPIC --table NAME``: a topic as a Delta table (see pipeline.tables)."""

from __future__ import annotations

import argparse

from jobs.cli import duration


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "materialize", help="stream a topic into a Delta table",
        description="Run a Structured Streaming query from TOPIC into the Delta table NAME, "
                    "exactly once across restarts. Event topics append; compacted topics keep "
                    "the latest value per key (a tombstone deletes the row). Runs until "
                    "interrupted, or once over what is there now with --once.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--table", required=True, metavar="NAME", help="table name (letters, digits, _)")
    p.add_argument("--once", action="store_true",
                   help="read what the topic holds now, then stop (Trigger.AvailableNow)")
    p.add_argument("--value-format",
                   choices=("raw", "string", "json", "avro", "jsonschema", "protobuf"),
                   default="raw",
                   help="decode values: raw bytes, UTF-8 text, JSON fields as columns, or "
                        "Avro / JSON Schema / Protobuf by the Schema Registry (Confluent's wire format; "
                        "the subject's latest version's fields as typed columns, the table "
                        "evolving with the subject)")
    p.add_argument("--key-format", choices=("avro", "jsonschema", "protobuf"), default=None,
                   help="decode keys by the Schema Registry too (the TOPIC-key subject)")
    p.add_argument("--value-protobuf-message", metavar="NAME", default=None,
                   help="with --value-format protobuf: the message's full name, e.g. "
                        "shop.Order or shop.Order.Line (default: the schema file's first)")
    p.add_argument("--key-protobuf-message", metavar="NAME", default=None,
                   help="with --key-format protobuf: the key's message, likewise")
    p.add_argument("--schema", metavar="DDL",
                   help="schema of JSON values, e.g. 'user STRING, n INT' (default: inferred)")
    p.add_argument("--warehouse", metavar="DIR|URL",
                   help="where the tables live: a folder, s3://bucket/path or hdfs://namenode/path "
                        "(default: <store>/_tables, beside the log)")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="checkpoint folder (default: <warehouse>/_checkpoints/<table>)")
    p.add_argument("--trigger", metavar="DURATION", type=duration(1), default=None,
                   help="micro-batch interval of a continuous run, e.g. 10s or 1m "
                        "(a bare number is milliseconds)")
    p.add_argument("--option", metavar="KEY=VALUE", type=_pair, action="append", default=[],
                   help="a sparklog source option, e.g. maxOffsetsPerTrigger=100000")
    p.add_argument("--master", help="Spark master (default: setting spark.master)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from jobs.cli import settings_from
    from jobs.cli_output import progress_console
    from log_layout import open_log_from_settings
    from pipeline import tables
    from pipeline.spark import needs_s3, session

    settings = settings_from(args)
    log = open_log_from_settings(settings)
    log.topic(args.topic)  # fail fast, before Spark starts, on an unknown topic
    tables.check_table_name(args.table)  # and on a bad table name
    console = progress_console()
    warehouse = args.warehouse or tables.default_warehouse(log)
    # sparklog's own progress on a terminal (Spark's bars are off: pipeline.quiet)
    with console.status("starting Spark") as status:
        spark = session(master=args.master, settings=settings,
                        s3=needs_s3(warehouse, args.checkpoint),
                        locations=(warehouse, args.checkpoint))
        status.update(f"materializing {args.topic} into {args.table}")
        query = tables.materialize(
            spark, args.topic, args.table, log=log, once=args.once,
            value_format=args.value_format, schema=args.schema, warehouse=warehouse,
            checkpoint=args.checkpoint, options=dict(args.option), trigger_ms=args.trigger,
            wait=False, key_format=args.key_format,
            value_message=args.value_protobuf_message, key_message=args.key_protobuf_message)
        if not args.once:
            console.print(f"materializing {args.topic} into {args.table}; Ctrl-C stops")
        try:
            follow(query, status, f"{args.topic} -> {args.table}")
        except KeyboardInterrupt:
            query.stop()
            raise
    rows = spark.table(args.table).count()
    console.print(f"[green]{args.table}[/green]: {rows:,} rows "
                  f"(batches run: {len(query.recentProgress)})")
    return 0


def follow(query, status, what: str) -> None:
    """Wait for ``query`` to end, showing its latest micro-batch on ``status``; raises
    the query's error if it failed."""
    batches = 0
    while query.isActive:
        progress = query.lastProgress
        if progress and progress.get("batchId", -1) >= batches:
            batches = progress["batchId"] + 1
            status.update(f"{what}: batch {progress['batchId']}, "
                          f"{progress.get('numInputRows', 0):,} records")
        query.awaitTermination(1)
    query.awaitTermination()  # raises what stopped it, if anything did
