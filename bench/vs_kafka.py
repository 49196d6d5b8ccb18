"""sparklog side by side with Apache Kafka on this machine, in one run.

Apache Kafka (the broker ``org.apache.kafka:kafka_2.13`` 4.x and ``kafka-tools``)
is fetched from Maven Central into ``.cache/kafka/`` on the first run (a small
pom and ``mvn dependency:copy-dependencies``; nothing of Kafka is committed) and
runs as a single-node KRaft broker on 127.0.0.1; sparklog runs as a gateway
subprocess on a local store. Both sides at the same durability: Kafka's default
leaves flushing to the OS (no ``flush.messages``), sparklog runs with
``store.fsync=false``. 100-byte values, acks=all, no compression on either side.

Workloads, each run against both systems in turn (A B A B ..., ``--repeat`` times,
default 3), each on a fresh topic; the table shows the median and the best run and
the 1-minute load average after every run:

1. one synchronous one-record request at a time (sparklog: a REST v2 POST on a
   keep-alive connection; Kafka: confluent-kafka ``produce`` + ``flush``, linger.ms=0);
2. one-record sends with 64 outstanding, client for client: a window of 64
   unacknowledged ``Producer.send`` calls against 64 ``produce`` calls (linger.ms=0,
   idempotence off; each client sends what gathers while a request is in flight
   together); and (2b) sparklog with every record its own REST POST (64 keep-alive
   connections), judged against the same Kafka figure;
3. batched produce of N records, 4 partitions, linger 5 ms, idempotent
   (``Producer.send`` vs confluent-kafka ``produce``), and the bulk paths
   (``Producer.send_batch`` of Arrow columns vs Kafka's Java ``ProducerPerformance``);
   (3c) Kafka's ``ProducerPerformance`` with nothing but ``bootstrap.servers`` (the Java
   client's defaults: 16 KB batches, linger 5 ms, acks=all, idempotent), 500,000
   records, against Kafka and against the gateway's Kafka listener (issue 30), and its
   p99 latency;
4. one consumer reading those N records, per record through the gateway vs
   confluent-kafka (and sparklog's Arrow batches against the same Kafka figure);
5. end-to-end p50/p99 at a steady 5,000 msgs/s, idempotent producer, linger 5 ms,
   one partition: send time stamped in the value, read by a consumer in this process;
   sparklog's gateway ``out_of_order_sequence`` answers over the run are counted;
6. bytes on disk per record after (3): every file of the topic (``du``; a file
   with two names counts once), and the bytes written (apparent size; for Kafka
   the ``.log`` files, whose indexes are preallocated sparse files);
7. Spark ``sum(length(value))`` over the topic of (3): ``format("sparklog")`` against
   Spark's own ``format("kafka")`` (``spark-sql-kafka-0-10_2.13`` of the installed
   pyspark, fetched like Kafka), one local[2] SparkSession; off with ``--quick``.

Every Kafka producer uses ``batch.size`` = 1 MiB, as sparklog's Producer does.
``--durable`` compares fsync with fsync instead: sparklog ``store.fsync=true``
against Kafka ``log.flush.interval.messages=1`` (writes ``vs_kafka_durable.*``).
``--hot`` runs a second gateway with ``gateway.hot.enable=true`` beside the
per-partition one (its own store), the three sides alternating (A B C); the tables and
``vs_kafka_hot.*`` (``vs_kafka_durable_hot.*``) give the hot gateway's figures with the
per-partition gateway's of the same run beside them (``per_partition``,
``per_partition_ratio``). ``--only sync,perf`` runs just those workloads.

``ratio`` follows DESIGN.md: sparklog / Kafka, or Kafka / sparklog for latency and
bytes, so higher is better for sparklog everywhere; targets are issue 18's.

    python bench/vs_kafka.py --repeat 3   # full (a few minutes after the first fetch)
    python bench/vs_kafka.py --quick      # under a minute once Kafka is cached (CI)

``--quick`` (what the test suite runs, so the script does not rot): every workload
once on each side with 5,000 records and 0.5 s / 1 s durations, the broker and Kafka's
tools on C1-only JVMs (``bench.common.QUICK_JVM``), the broker and the gateway started
at once; it proves the script works and measures nothing.

Writes bench/results/vs_kafka.json (DESIGN.md format), vs_kafka.md and vs_kafka.png
(``*.quick.*`` with --quick).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import QUICK_JVM, RESULTS, machine, started_together, write_results  # noqa: E402
from bench.kafka_side import kafka_clients as kc  # noqa: E402
from bench.kafka_side import sparklog_clients as sc  # noqa: E402
from bench.kafka_side.broker import KafkaBroker, quick_jvm_flags  # noqa: E402
from bench.kafka_side.fetch import fetch_kafka  # noqa: E402
from bench.kafka_side.measure import VALUE_BYTES, disk_usage  # noqa: E402
from bench.kafka_side.report import bar_chart, markdown, print_table  # noqa: E402
from bench.kafka_side.spark_side import SparkReads, connector_jars  # noqa: E402
from jobs.gateway_process import GatewayProcess, free_port  # noqa: E402

PARTITIONS = 4
LINGER_MS = 5
OUTSTANDING = 64
E2E_RATE = 5_000.0
#: records of workload 3c (issue 30: ProducerPerformance's defaults, 500,000 x 100 B)
PERF_RECORDS = 500_000
#: the workloads ``--only`` names
WORKLOADS = ("sync", "outstanding", "batched", "spark", "bulk", "perf", "e2e")
#: the sizes of the unmeasured warm-up round of a full run
WARMUP_SIZES = {"records": 100_000, "seconds": 1.0, "e2e_seconds": 1.0}

#: figure -> (label, unit, higher is better, issue 18's target for the DESIGN ratio)
FIGURES: dict[str, tuple[str, str, bool, float | None]] = {
    "sync_one_record": ("1. one synchronous one-record request at a time, acks=all",
                        "msgs/s", True, 0.5),
    "outstanding_64": (f"2. one-record sends, {OUTSTANDING} outstanding, acks=all",
                       "msgs/s", True, 1.0),
    "outstanding_64_rest": (f"2b. the same, each record its own REST POST "
                            f"({OUTSTANDING} connections)", "msgs/s", True, None),
    "produce_batched": ("3. produce, per-record clients, linger 5 ms, idempotent",
                        "msgs/s", True, 1.0),
    "produce_bulk": ("3b. produce, Arrow send_batch vs Kafka ProducerPerformance",
                     "msgs/s", True, 1.0),
    "perf_defaults": ("3c. Kafka's ProducerPerformance, its defaults (16 KB batches, linger "
                      "5 ms), through the Kafka listener",
                      "msgs/s", True, 0.7),
    "perf_defaults_p99": ("3c. the same, its p99 latency", "ms", False, None),
    "consume_records": ("4. consume, one consumer, per record", "msgs/s", True, 1.0),
    "consume_arrow": ("4b. consume, sparklog Arrow batches vs Kafka per record",
                      "msgs/s", True, 1.0),
    "e2e_p50": ("5. end-to-end p50 at 5,000 msgs/s, idempotent", "ms", False, 1 / 1.5),
    "e2e_p99": ("5. end-to-end p99 at 5,000 msgs/s, idempotent", "ms", False, 1 / 1.5),
    "bytes_per_record": ("6. bytes on disk per 100-byte record (du)", "B/record", False, 1.0),
    "bytes_written_per_record": ("6. bytes written per 100-byte record (apparent size)",
                                 "B/record", False, 1.0),
    "spark_sum_length": ('7. Spark sum(length(value)), format("sparklog") vs format("kafka")',
                         "msgs/s", True, 1.0),
}


class Side:
    """One system under test: its name, its workload module, its address, and how to
    make a topic and list its files."""

    def __init__(self, name: str, clients: Any, address: str,
                 create: Callable[[str, int], None], files: Callable[[str], list[str]],
                 bulk: Callable[[str, int], dict] | None,
                 spark_read: Callable[[str, int], dict] | None = None,
                 perf: Callable[[str, int], dict] | None = None):
        self.name, self.clients, self.address = name, clients, address
        self.create, self.files, self.bulk = create, files, bulk
        self.spark_read, self.perf = spark_read, perf


def run_repeat(r: int, sides: list[Side], sizes: dict, runs: dict[str, list[dict]],
               log: Callable[[str], None], only: set[str] = set(WORKLOADS)) -> None:
    """Every workload of ``only`` once on each side, the sides alternating (A B per
    workload; A B C with a hot gateway beside the per-partition one)."""
    def record(fig: str, side: Side, value: float | None, **detail: Any) -> None:
        if value is None:
            return
        runs.setdefault(fig, []).append({"system": side.name, "repeat": r, "value": value,
                                         "load": round(os.getloadavg()[0], 2), **detail})

    def each(what: str, fn: Callable[[Side], None]) -> None:
        for side in sides:
            log(f"  run {r + 1 if r >= 0 else 'warm-up'}: {what} — {side.name}")
            fn(side)

    def topic(side: Side, kind: str, partitions: int) -> str:
        name = f"{kind}-r{r}" if r >= 0 else f"{kind}-warmup"
        side.create(name, partitions)
        return name

    def sync_one(s: Side) -> None:
        res = s.clients.sync_one(s.address, topic(s, "sync", 1), sizes["seconds"])
        record("sync_one_record", s, res["msgs_per_s"], **_detail(res))

    def outstanding(s: Side) -> None:
        res = s.clients.window(s.address, topic(s, "window", PARTITIONS), sizes["seconds"],
                               OUTSTANDING)
        record("outstanding_64", s, res["msgs_per_s"], **_detail(res))
        if s.clients is sc:
            res = sc.window_rest(s.address, topic(s, "window-rest", PARTITIONS),
                                 sizes["seconds"], OUTSTANDING)
            record("outstanding_64_rest", s, res["msgs_per_s"], **_detail(res))
        else:  # judged against Kafka's one figure, as the Arrow consumer is
            record("outstanding_64_rest", s, res["msgs_per_s"])

    def batched(s: Side) -> None:
        name = topic(s, "batch", PARTITIONS)
        res = s.clients.batched(s.address, name, sizes["records"], LINGER_MS)
        record("produce_batched", s, res["msgs_per_s"], **_detail(res))
        os.sync()  # allocated blocks are final once written back
        du = disk_usage(s.files(name))
        records = sizes["records"] + 1  # and the warm-up record
        record("bytes_per_record", s, du["du_bytes"] / records, **du)
        data = [f for f in s.files(name) if s.clients is sc or f.endswith(".log")]
        record("bytes_written_per_record", s, disk_usage(data)["apparent_bytes"] / records)
        res = s.clients.consume(s.address, name, PARTITIONS, records)
        record("consume_records", s, res["msgs_per_s"], **_detail(res))
        if s.clients is sc:
            arrow = sc.consume(s.address, name, PARTITIONS, records, arrow=True)
            record("consume_arrow", s, arrow["msgs_per_s"], **_detail(arrow))
        else:  # the Arrow figure is judged against Kafka's only consumer
            record("consume_arrow", s, res["msgs_per_s"])

    def spark(s: Side) -> None:
        if s.spark_read is not None:
            res = s.spark_read(f"batch-r{r}" if r >= 0 else "batch-warmup",
                               (sizes["records"] + 1) * VALUE_BYTES)
            record("spark_sum_length", s, res["msgs_per_s"], **_detail(res))

    def bulk(s: Side) -> None:
        if s.bulk is not None:
            res = s.bulk(topic(s, "bulk", PARTITIONS), sizes["records"])
            record("produce_bulk", s, res["msgs_per_s"], **_detail(res))

    def perf(s: Side) -> None:
        if s.perf is not None:
            res = s.perf(topic(s, "perf", PARTITIONS), sizes["perf_records"])
            record("perf_defaults", s, res["msgs_per_s"], **_detail(res))
            record("perf_defaults_p99", s, res["p99_ms"])

    def e2e(s: Side) -> None:
        res = s.clients.end_to_end(s.address, topic(s, "e2e", 1), E2E_RATE, sizes["e2e_seconds"])
        record("e2e_p50", s, res.get("p50_ms"), **_detail(res))
        record("e2e_p99", s, res.get("p99_ms"), **_detail(res))

    if "sync" in only:
        each("one synchronous record at a time", sync_one)
    if "outstanding" in only:
        each(f"{OUTSTANDING} outstanding one-record sends", outstanding)
    if "batched" in only:
        each(f"produce {sizes['records']:,}, bytes on disk, consume", batched)
    if "spark" in only and "batched" in only and all(s.spark_read is not None for s in sides):
        each("Spark sum(length(value)) of that topic", spark)
    if "bulk" in only and all(s.bulk is not None for s in sides):
        each("bulk produce", bulk)
    if "perf" in only and all(s.perf is not None for s in sides):
        each(f"ProducerPerformance's defaults, {sizes['perf_records']:,} records", perf)
    if "e2e" in only:
        each(f"end-to-end at {E2E_RATE:,.0f} msgs/s", e2e)


def _sparklog_side(name: str, gw: GatewayProcess, store: str,
                   perf: Callable[[str, int], dict] | None) -> Side:
    """A gateway's side: its REST API, its store's files, its Kafka listener for 3c."""
    return Side(name, sc, gw.url, lambda t, p: sc.create_topic(gw.url, t, p),
                lambda t: sc.topic_files(store, t),
                lambda t, n: sc.batched_arrow(gw.url, t, n, LINGER_MS), perf=perf)


def _detail(res: dict) -> dict:
    keep = ("p50_ms", "p99_ms", "errors", "lost", "records", "elapsed_s",
            "out_of_order_sequence")
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in res.items() if k in keep}


def figures_of(runs: dict[str, list[dict]], ours_name: str = "sparklog") -> list[dict]:
    """DESIGN.md figures: ours (system ``ours_name``) and baseline (Kafka) are the
    medians of the runs, best beside them."""
    out = []
    for fig, (label, unit, higher, target) in FIGURES.items():
        rs = [x for x in runs.get(fig, []) if x["system"] in (ours_name, "kafka")]
        ours = [x["value"] for x in rs if x["system"] == ours_name]
        theirs = [x["value"] for x in rs if x["system"] == "kafka"]
        if not ours or not theirs:
            continue
        best = max if higher else min
        med_o, med_k = statistics.median(ours), statistics.median(theirs)
        ratio = (med_o / med_k if higher else med_k / med_o) if med_o and med_k else None
        out.append({
            "name": fig, "label": label, "unit": unit, "ours": round(med_o, 3),
            "baseline": round(med_k, 3), "ratio": None if ratio is None else round(ratio, 3),
            "target": None if target is None else round(target, 3),
            "higher_is_better": higher, "ours_best": round(best(ours), 3),
            "baseline_best": round(best(theirs), 3),
            "ours_runs": [round(v, 3) for v in ours], "baseline_runs": [round(v, 3) for v in theirs],
            "loads": [x["load"] for x in rs], "runs": rs})
    return out


def _interrupted(*_: Any) -> None:
    raise KeyboardInterrupt("SIGTERM")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one repeat (CI)")
    ap.add_argument("--repeat", type=int, help="runs of every workload on each side "
                    "(default 3, 1 with --quick)")
    ap.add_argument("--records", type=int, help="records of the produce/consume workloads "
                    "(default 1,000,000; 5,000 with --quick)")
    ap.add_argument("--seconds", type=float, help="duration of workloads 1 and 2 "
                    "(default 5; 0.5 with --quick)")
    ap.add_argument("--e2e-seconds", type=float, help="duration of workload 5 "
                    "(default 10; 1 with --quick)")
    ap.add_argument("--no-tools", action="store_true",
                    help="skip Kafka's ProducerPerformance (and its download)")
    ap.add_argument("--spark", action=argparse.BooleanOptionalAction,
                    help='Spark\'s format("kafka") vs format("sparklog") (default: on, '
                         "off with --quick: a SparkSession alone takes longer than the rest)")
    ap.add_argument("--durable", action="store_true",
                    help="both sides fsync before answering: sparklog store.fsync=true, Kafka "
                         "flush.messages=1 (writes vs_kafka_durable.*)")
    ap.add_argument("--hot", action="store_true",
                    help="a second gateway with gateway.hot.enable=true beside the "
                         "per-partition one, the three sides alternating; the figures are "
                         "the hot gateway's, the per-partition ones beside them "
                         "(writes vs_kafka_hot.* or vs_kafka_durable_hot.*)")
    ap.add_argument("--only", help="comma-separated workloads to run, of "
                    + ", ".join(WORKLOADS) + " (default: all; with --quick all but perf)")
    ap.add_argument("--perf-records", type=int, help="records of workload 3c "
                    f"(default {PERF_RECORDS:,}; 5,000 with --quick)")
    ap.add_argument("--gateway-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a gateway setting on top of store.fsync=false (repeatable)")
    args = ap.parse_args(argv)
    # --quick leaves 3c out unless asked: two more JVMs would add ~5 s to the suite's
    # run of it (tests/test_bench_quick.py), which has no margin left
    default = set(WORKLOADS) - ({"perf"} if args.quick else set())
    only = default if args.only is None else set(args.only.split(","))
    if only - set(WORKLOADS):
        ap.error(f"--only: unknown workloads {sorted(only - set(WORKLOADS))}; "
                 f"they are {', '.join(WORKLOADS)}")
    args.only = only
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    q = args.quick
    repeat = args.repeat or (1 if q else 3)
    sizes = {"records": args.records or (5_000 if q else 1_000_000),
             "seconds": args.seconds or (0.5 if q else 5.0),
             "e2e_seconds": args.e2e_seconds or (1.0 if q else 10.0),
             "perf_records": args.perf_records or (5_000 if q else PERF_RECORDS)}
    gateway_settings = {"store.fsync": "true" if args.durable else "false",
                        **dict(kv.split("=", 1) for kv in args.gateway_set)}
    # Kafka's default leaves flushing to the OS; flush.messages=1 fsyncs every append
    kafka_props = {"log.flush.interval.messages": 1} if args.durable else {}
    durability = ("sparklog store.fsync=true vs Kafka log.flush.interval.messages=1 "
                  "(both fsync before answering)" if args.durable else
                  "sparklog store.fsync=false vs Kafka's default (no flush.messages: "
                  "the OS flushes)")
    bench_name = ("vs_kafka_durable" if args.durable else "vs_kafka") + \
        ("_hot" if args.hot else "")

    def log(msg: str) -> None:
        print(msg, flush=True)

    # SIGTERM ends the run like Ctrl-C does: through the finally blocks that stop
    # the broker and the gateway
    signal.signal(signal.SIGTERM, _interrupted)
    broker_jars, tool_jars, notes = fetch_kafka(tools=not args.no_tools, log=log)
    for n in notes:
        log(f"note: {n}")
    with_spark = not q if args.spark is None else args.spark
    spark_jars = connector_jars(log=log) if with_spark else None
    work = tempfile.mkdtemp(prefix="sparklog-bench-vs-kafka-")
    stores = {"sparklog": os.path.join(work, "store")}
    if args.hot:
        stores["sparklog-hot"] = os.path.join(work, "store-hot")
    ports = {name: free_port() for name in stores}
    runs: dict[str, list[dict]] = {}
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    spark = None
    try:
        log(f"starting Kafka {broker_jars.version} (KRaft, one node) and "
            f"{len(stores)} sparklog gateway(s)")
        gateways = [GatewayProcess(
            folder, settings={**gateway_settings,
                              "gateway.kafka.listeners": f"PLAINTEXT://127.0.0.1:{ports[name]}",
                              **({"gateway.hot.enable": "true"} if name.endswith("-hot") else {})},
            log_path=os.path.join(work, f"{name}.log")) for name, folder in stores.items()]
        with started_together(
                KafkaBroker(broker_jars, kafka_props, jvm_flags=quick_jvm_flags() if q else None),
                *gateways) as (kafka, *gws):
            jvm = QUICK_JVM if q else ()
            perf = None if tool_jars is None else \
                lambda bootstrap: lambda t, n: kc.producer_performance_defaults(
                    tool_jars.classpath, bootstrap, t, n, jvm=jvm)
            sides = [_sparklog_side(name, gw, stores[name], perf and perf(f"127.0.0.1:{ports[name]}"))
                     for name, gw in zip(stores, gws)]
            bulk = None
            if tool_jars is not None:
                def bulk(t: str, n: int) -> dict:
                    return kc.producer_performance(tool_jars.classpath, kafka.bootstrap, t, n,
                                                   LINGER_MS, jvm=jvm)
            kafka_side = Side("kafka", kc, kafka.bootstrap, kafka.create_topic,
                              kafka.topic_files, bulk, perf=perf and perf(kafka.bootstrap))
            sides.append(kafka_side)
            if spark_jars is not None and "spark" in args.only:
                log("starting a local SparkSession")
                spark = SparkReads(spark_jars)
                for side in sides[:-1]:
                    side.spark_read = lambda t, expect, f=stores[side.name]: \
                        spark.sparklog(f, t, expect)
                kafka_side.spark_read = lambda t, expect: spark.kafka(kafka.bootstrap, t, expect)
            if not q:  # JIT, imports, first segments and connections: not measured
                log("warm-up round (not counted)")
                run_repeat(-1, sides, {**WARMUP_SIZES, "perf_records": 50_000}, {}, log,
                           args.only)
            for r in range(repeat):
                run_repeat(r, sides, sizes, runs, log, args.only)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - t_start

    figures = figures_of(runs, "sparklog-hot" if args.hot else "sparklog")
    per_partition = figures_of(runs) if args.hot else []
    if args.hot:  # the per-partition gateway's figures of the same run, beside the hot ones
        pp = {f["name"]: f for f in per_partition}
        for f in figures:
            if f["name"] in pp:
                f["per_partition"] = pp[f["name"]]["ours"]
                f["per_partition_ratio"] = pp[f["name"]]["ratio"]
                f["per_partition_runs"] = pp[f["name"]]["ours_runs"]
    import confluent_kafka

    title = (f"sparklog{' (hot tier)' if args.hot else ''} vs Apache Kafka "
             f"{broker_jars.version}, {VALUE_BYTES}-byte values, "
             + ("fsync on both sides, " if args.durable else "")
             + f"median (best) of {repeat} run(s) each, alternating")
    note = (f"Same durability: {durability}; acks=all; no compression. "
            f"Kafka clients: confluent-kafka "
            f"{confluent_kafka.version()} (librdkafka {confluent_kafka.libversion()[0]})"
            + (f", ProducerPerformance from kafka-tools {tool_jars.version}" if tool_jars else "")
            + f". ratio: sparklog/Kafka, or Kafka/sparklog for ms and bytes (higher is better). "
              f"Machine: {machine()}.")
    if notes:
        note += " Notes: " + "; ".join(notes) + "."
    print_table(title, figures, note)
    pp_title = title.replace(" (hot tier)", " (per-partition path, same run)")
    if per_partition:
        print_table(pp_title, per_partition, "")
    ooo = [x.get("out_of_order_sequence") for x in runs.get("e2e_p50", [])
           if x["system"] != "kafka"]
    log(f"sparklog gateway out_of_order_sequence answers during the end-to-end runs: {ooo}")
    for fig, rs in runs.items():
        for x in rs:
            if x.get("errors") or x.get("lost"):
                log(f"run with failures: {fig} {x['system']} run {x['repeat'] + 1}: "
                    f"errors={x.get('errors')} lost={x.get('lost')}")

    suffix = ".quick" if q else ""
    md_path = os.path.join(RESULTS, f"{bench_name}{suffix}.md")
    with open(md_path, "w") as f:
        f.write(markdown(title, figures, note))
        if per_partition:
            f.write("\n" + markdown(pp_title, per_partition, ""))
    png = bar_chart(os.path.join(RESULTS, f"{bench_name}{suffix}.png"), title, figures)
    out = write_results(
        bench_name, figures, quick=q, repeat=repeat, sizes=sizes, value_bytes=VALUE_BYTES,
        partitions=PARTITIONS, linger_ms=LINGER_MS, outstanding=OUTSTANDING,
        e2e_rate=E2E_RATE, kafka_version=broker_jars.version,
        kafka_tools_version=tool_jars.version if tool_jars else None, notes=notes,
        confluent_kafka=confluent_kafka.version(),
        librdkafka=confluent_kafka.libversion()[0], gateway_settings=gateway_settings,
        durability=durability, kafka_broker_props=kafka_props, elapsed_s=round(elapsed, 1),
        hot=args.hot, workloads=sorted(args.only), perf_records=sizes["perf_records"],
        load_start=load_start, load_end=os.getloadavg())
    log(f"wrote {out}, {md_path}" + (f", {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
