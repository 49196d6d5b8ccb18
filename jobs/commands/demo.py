"""``sparklog demo``: a tour of sparklog on the embedded local store.

The tour starts a gateway (a subprocess, as in production), produces through
it with the Python ``Producer`` and with a REST Proxy v2 request, consumes in a
consumer group, compacts a keyed topic with the maintenance job, reads the
event topic with ``spark.read.format("sparklog")``, materialises the keyed
topic as a Delta table and queries it with SQL.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

from jobs.cli import integer

EVENTS, PROFILES = "demo-page-views", "demo-user-profiles"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run a tour: gateway, producer, consumer group, Spark, Delta",
                       description="Start a gateway on a local store, produce, consume, compact "
                                   "and query with Spark SQL and Delta (about a minute; the first "
                                   "run also downloads Delta's jars).")
    p.add_argument("--records", type=integer(1), default=200_000,
                   help="page views to produce (default 200000)")
    p.add_argument("--no-spark", action="store_true", help="skip the Spark and Delta part")
    p.set_defaults(handler=run)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_gateway(store: str, port: int) -> subprocess.Popen:
    import urllib3

    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", "--store", store, "gateway",
                             "--port", str(port)], start_new_session=True)
    http = urllib3.PoolManager()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the gateway exited with status {proc.returncode}")
        try:
            if http.request("GET", f"http://127.0.0.1:{port}/healthz", timeout=1).status == 200:
                return proc
        except urllib3.exceptions.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the gateway did not become healthy within 30 s")


def run(args: argparse.Namespace) -> int:
    import urllib3
    from rich.console import Console

    from ingest_gateway.client import Consumer, Producer
    from jobs.cli import settings_from
    from log_layout import open_log_from_settings

    console = Console()
    settings = settings_from(args)
    log = open_log_from_settings(settings)
    console.rule(f"[bold]sparklog demo[/bold] on {log.url}")
    for topic in (EVENTS, PROFILES):
        if topic in log.topics():
            log.delete_topic(topic)
    log.create_topic(EVENTS, {"partitions": 4, "retention.ms": 7 * 86_400_000})
    log.create_topic(PROFILES, {"partitions": 2, "cleanup.policy": "compact",
                                "min.cleanable.dirty.ratio": 0.01, "segment.bytes": 1 << 20})
    console.print(f"created topics [cyan]{EVENTS}[/cyan] (4 partitions) and "
                  f"[cyan]{PROFILES}[/cyan] (2 partitions, cleanup.policy=compact)")

    port = _free_port()
    gateway = _start_gateway(log.url, port)
    url = f"http://127.0.0.1:{port}"
    console.print(f"gateway up at {url} (pid {gateway.pid})")
    try:
        # 1. the Producer client: send() per record, batched and lingered like Kafka's
        n = args.records
        started = time.perf_counter()
        with Producer(url, linger_ms=5) as producer:
            for i in range(n):
                producer.send(EVENTS, f'{{"page":"/p/{i % 37}","ms":{i % 1000}}}'.encode(),
                              key=f"user-{i % 1000}".encode())
            producer.flush()
        took = time.perf_counter() - started
        console.print(f"produced {n:,} page views with the Producer in {took:.2f} s "
                      f"({n / took:,.0f} msgs/s, acks=all)")

        # 2. Kafka REST Proxy v2 requests: three rounds of profile updates, then a tombstone
        http = urllib3.PoolManager()
        rounds = [[{"key": f"user-{u}", "value": {"name": f"User {u}", "version": v}}
                   for u in range(50)] for v in range(3)] + [[{"key": "user-7", "value": None}]]
        for records in rounds:  # acks=all: each answer comes after its flush's commit
            r = http.request("POST", f"{url}/topics/{PROFILES}",
                             body=json.dumps({"records": records}),
                             headers={"Content-Type": "application/vnd.kafka.json.v2+json"})
            if r.status != 200:
                raise SystemExit(f"REST produce failed: HTTP {r.status} {r.data[:200]!r}")
        offsets = json.loads(r.data)["offsets"]
        console.print(f"REST Proxy v2: {sum(map(len, rounds))} profile updates in "
                      f"{len(rounds)} requests; the tombstone landed at {offsets[0]}")

        # 3. a consumer group reading through the gateway
        with Consumer(gateway=url, group_id="demo-readers", auto_offset_reset="earliest",
                      enable_auto_commit=False) as consumer:
            consumer.subscribe([EVENTS])
            seen = 0
            deadline = time.monotonic() + 30
            while seen < n and time.monotonic() < deadline:
                seen += sum(b.records.num_rows for b in consumer.poll_batches(1.0, 50_000))
            consumer.commit()
            console.print(f"consumer group demo-readers read {seen:,} records and committed")
        _describe(console, log)

        if not args.no_spark:
            _spark_part(console, log)
    finally:
        gateway.send_signal(signal.SIGTERM)  # graceful: flushes what it accepted
        try:
            gateway.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(gateway.pid, signal.SIGKILL)
    console.rule("[green]demo done[/green]")
    return 0


def _describe(console, log) -> None:
    from jobs.cli_output import Table, human_size

    table = Table("TOPIC", "PARTITION", "LOG-START", "HIGH-WATERMARK", "SEGMENTS", "SIZE",
                  title="partitions:", left=("TOPIC",))
    for topic in (EVENTS, PROFILES):
        for p in log.partitions(topic):
            m = p.snapshot()
            table.add_row(topic, p.partition, m.log_start_offset, m.next_offset,
                          len(m.segments), human_size(m.size_bytes))
    table.print(console.file)


def _spark_part(console, log) -> None:
    from jobs import maintain
    from log_layout import wall_clock_ms
    from pipeline import tables
    from pipeline.spark import session

    console.print("starting Spark (local) with Delta Lake ...")
    spark = session()
    summary = maintain.run(log, command="compact", topics=[PROFILES], now_ms=wall_clock_ms(),
                           force=True, spark=spark)
    compacted = summary.by_action().get("compact", {})
    console.print(f"compaction job: {compacted.get('changed', 0)} partitions cleaned, records "
                  f"{compacted.get('records_before', 0)} -> {compacted.get('records_after', 0)}")
    df = spark.read.format("sparklog").option("store", log.url).option("subscribe", EVENTS).load()
    df.createOrReplaceTempView("page_views")
    console.print("top pages, from spark.read.format('sparklog'):")
    spark.sql("""SELECT get_json_object(CAST(value AS STRING), '$.page') AS page, count(*) AS views
                 FROM page_views GROUP BY page ORDER BY views DESC LIMIT 5""").show()
    tables.materialize(spark, PROFILES, "demo_profiles", log=log, once=True, value_format="json")
    console.print("the compacted topic as a Delta table (user-7 was deleted by a tombstone):")
    spark.sql("SELECT count(*) AS users, max(version) AS latest_version FROM demo_profiles").show()
