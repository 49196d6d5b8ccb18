"""``sparklog sql "SELECT ..."``: SQL over every topic (temp views) and materialised table."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json

from jobs.cli import integer


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sql", help="run a SQL query over topics and tables",
        description="Every topic is a temporary view of its raw records (the Kafka source's "
                    "columns: key, value, topic, partition, offset, timestamp, timestampType), "
                    "named as the topic (quote names like `page-views` with backticks); "
                    "every table materialised into the warehouse is in the catalog, and keeps "
                    "its name where a topic has the same one. A query Spark refuses ends with "
                    "its message and exit status 2.")
    p.add_argument("query", metavar="SQL")
    p.add_argument("--warehouse", metavar="DIR|URL",
                   help="where the tables live: a folder, s3://bucket/path or hdfs://namenode/path "
                        "(default: <store>/_tables, beside the log)")
    p.add_argument("--limit", type=integer(0), default=100, help="rows to print at most (default 100)")
    p.add_argument("--headers", action="store_true", help="give topic views a headers column")
    p.add_argument("--schemas", action="store_true",
                   help="decode topic views by the Schema Registry: a topic whose TOPIC-value "
                        "(TOPIC-key) subject holds Avro or JSON Schema shows value (key) as typed "
                        "fields, e.g. SELECT value.url FROM clicks")
    p.add_argument("--output", choices=("table", "json"), default="table",
                   help="a readable table, or one JSON object per row (for scripts)")
    p.add_argument("--master", help="Spark master (default: setting spark.master)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from jobs.cli import settings_from
    from jobs.cli_output import progress_console
    from log_layout import open_log_from_settings
    from pipeline import tables
    from pipeline.spark import needs_s3, session

    settings = settings_from(args)
    log = open_log_from_settings(settings)
    warehouse = args.warehouse or tables.default_warehouse(log)
    named_topics = tables.mentioned(log.topics(), args.query)
    status = progress_console().status("starting Spark")  # on a terminal only
    status.start()
    try:
        spark = session(master=args.master, settings=settings, s3=needs_s3(warehouse),
                        source=bool(named_topics),  # registering the source costs ~1.8 s
                        locations=(warehouse,))
        status.update("running the query")
        rows, df = _run_query(spark, args, log, warehouse, named_topics)
    finally:
        status.stop()
    if args.output == "json":
        for row in rows[:args.limit]:
            print(json.dumps({k: _json_value(v) for k, v in row.asDict().items()}))
        return 0
    out = Table(show_lines=False)
    for name in df.columns:
        out.add_column(name)
    for row in rows[:args.limit]:
        out.add_row(*(_show(v) for v in row))
    console = Console()
    console.print(out)
    if len(rows) > args.limit:
        console.print(f"(first {args.limit} rows shown)")
    return 0


def _show(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return bytes(value).hex()
    return str(value)


def _json_value(value):
    """A row's value as JSON: bytes as UTF-8 text when they are (else base64, as
    Kafka's REST Proxy gives binary), times as ISO 8601, nested rows as objects."""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return base64.b64encode(bytes(value)).decode()
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if hasattr(value, "asDict"):
        return {k: _json_value(v) for k, v in value.asDict().items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, float) and value != value:
        return None
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


def _run_query(spark, args: argparse.Namespace, log, warehouse: str, named_topics: set[str]):
    """Register what the query names, run it; returns (rows, DataFrame). Raises
    QueryError for a query Spark refuses."""
    from pyspark.errors import AnalysisException
    from pyspark.logger import PySparkLogger
    from rich.console import Console

    from jobs.errors import QueryError
    from pipeline import tables

    # tables first: a table materialised under a topic's name keeps that name; only
    # names the query mentions (each topic's view costs a round trip to a Python worker)
    tables.register_tables(spark, warehouse, query=args.query)
    views = set(tables.register_topics(spark, log, include_headers=args.headers,
                                       query=args.query, decode=args.schemas))
    err = Console(stderr=True)
    for topic in sorted(named_topics - views):
        err.print(f"note: table {topic} has the name of topic {topic}: the topic is not a "
                  "view in this query", highlight=False)
    # PySpark logs every refused query as an ERROR JSON line on stderr before raising;
    # the one-line error below says it once
    context_log = PySparkLogger.getLogger("SQLQueryContextLogger")
    context_log.disabled, was_disabled = True, context_log.disabled
    try:
        df = spark.sql(args.query)
        rows = df.limit(args.limit + 1).collect()
    except AnalysisException as e:  # ParseException too: the query's own fault
        # the first line states the error; the rest repeats the query with a caret
        raise QueryError(args.query, (str(e).strip().splitlines() or [""])[0]) from None
    finally:
        context_log.disabled = was_disabled
    return rows, df
