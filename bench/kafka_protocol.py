"""The same Kafka client against sparklog's Kafka listener and against Apache Kafka, in one run.

confluent-kafka (librdkafka) produces N 100-byte records (4 partitions, linger 5 ms,
idempotent, acks=all, batch.size 1 MiB, no compression) and one consumer reads them
back, first against the gateway's Kafka listener (``gateway.kafka.listeners``, a
gateway subprocess on a local store, ``store.fsync=false``), then against a
single-node KRaft Apache Kafka with its default flushing (the OS flushes): the
workloads are ``bench.kafka_side.kafka_clients``' ``batched`` (its producer
settings, with a retry on a full client queue) and ``consume``, what
``bench/vs_kafka.py`` runs against Kafka, so only the broker differs. Kafka's jars
come from Maven Central into ``.cache/kafka/`` on the first run
(``bench.kafka_side.fetch``). Runs alternate (sparklog, Kafka, sparklog, ...), each on
a fresh topic; the medians are compared. Targets (issue 19): produce >= 0.7 of Kafka,
consume >= 1.0.

The records are consumed twice, each time by a new consumer from the beginning:

* ``consume``: librdkafka's default settings. When a partition's fetch queue passes
  ``queued.min.messages`` (100,000) librdkafka stops fetching it for
  ``fetch.queue.backoff.ms`` (1 s): whichever broker answers faster than the Python
  loop drains the queue hits these pauses (Kafka does: ~20 pauses for 2M records,
  client and broker then idle), so this figure is a client-setting effect as much as
  a broker's.
* ``consume_no_pause``: the same with ``fetch.queue.backoff.ms=10``, so neither side
  sleeps and the figure is what the broker (and the one Python consumer loop) can
  deliver.

The gateway answers a Fetch from its tail cache (``gateway.kafka.tail.cache.bytes``,
``--tail-cache-bytes``) where the batches are still there: the default 64 MiB holds
the newest ~30% of the 2M-record backlog, ``--tail-cache-bytes 536870912`` all of it,
0 none (every batch rebuilt from the segments).

Each run also records the broker process's CPU time per record (user + system, with
its children; ``broker_cpu_us``), which a noisy shared machine moves less than rates.

Two more cases (``bench.kafka_side.protocol_extra``, issue 31; ``--skip-extra`` leaves
them out): Kafka's own ``ProducerPerformance`` then ``ConsumerPerformance`` with the Java
client's defaults against both brokers in the same run (``--perf-records``, default
1,000,000), and consume with fetch sessions on vs off: two more gateways, one with
``gateway.kafka.max.incremental.fetch.session.cache.slots`` 0, Kafka's Java consumer
(librdkafka opens no sessions), the gateway's CPU per record read from 64 partitions
and per second while the consumer idles caught up (``--session-records``, default
500,000).

A 10-member group's rebalance time, KIP-848 vs classic, on both brokers
(``bench.kafka_side.rebalance``; ``--skip-rebalance`` leaves it out, ``--only-rebalance``
runs it alone and puts its figures into the results file beside the others').

    python bench/kafka_protocol.py --repeat 3              # 2M records a run
    python bench/kafka_protocol.py --quick                 # 5k records, one run (CI)

``--quick`` (what the test suite runs, so the script does not rot) goes through every
case on both brokers with 5,000 records (perf tools and sessions alike), the caught-up
consumer idling 2 s, 1 s heartbeats for the rebalance groups, the Kafka broker and
Kafka's tools on C1-only JVMs (``bench.common.QUICK_JVM``), the broker and the gateway
started at once: a quick run proves the script works and measures nothing.

Writes bench/results/kafka_protocol.json (``.quick.json`` with --quick).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.common import QUICK_JVM, started_together, write_results  # noqa: E402
from bench.kafka_side import kafka_clients as kc  # noqa: E402
from bench.kafka_side import rebalance  # noqa: E402
from bench.kafka_side import protocol_extra as extra  # noqa: E402
from bench.kafka_side.broker import KafkaBroker, quick_jvm_flags  # noqa: E402
from bench.kafka_side.fetch import fetch_kafka  # noqa: E402
from bench.kafka_side.measure import VALUE_BYTES  # noqa: E402
from bench.kafka_side.report import print_table  # noqa: E402
from jobs.gateway_process import GatewayProcess, free_port  # noqa: E402

PARTITIONS = 4
LINGER_MS = 5
#: figure -> (label, target ratio sparklog/Kafka)
FIGURES = {
    "produce": ("confluent-kafka produce, idempotent, acks=all, linger 5 ms", 0.7),
    "consume": ("confluent-kafka consume, one consumer, per record, default settings", 1.0),
    "consume_no_pause": ("the same consume, fetch.queue.backoff.ms=10 (no client pauses)",
                         1.0),
    "producer_performance": ("Kafka's ProducerPerformance, the Java client's defaults", None),
    "consumer_performance": ("Kafka's ConsumerPerformance, the Java client's defaults "
                             "(fetch.nMsg.sec)", None),
}
#: consumer settings of each consume figure
CONSUME_SETTINGS = {"consume": {}, "consume_no_pause": {"fetch.queue.backoff.ms": 10}}
#: --quick: records of every case, and the seconds the sessions case's consumer idles
QUICK_RECORDS, QUICK_IDLE_S = 5_000, 2.0


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def produce(bootstrap: str, topic: str, records: int) -> dict:
    """``kafka_clients.batched``'s producer and loop, but a full client queue is served
    until it takes the record (``batched`` gives up after one 10 ms poll, which a broker
    pausing for a flush or a collection can exceed; measured here against both)."""
    p = kc.Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": "none",
                     "batch.size": kc.BATCH_BYTES, "socket.nagle.disable": True,
                     "linger.ms": LINGER_MS, "enable.idempotence": True})
    p.produce(topic, kc.VALUE)  # connection and producer id before the clock starts
    if p.flush(30) != 0:
        raise RuntimeError(f"{bootstrap} did not acknowledge a first record")
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, kc.VALUE)
                break
            except BufferError:
                p.poll(0.01)
        if i & 0x3FFF == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    if left:
        raise RuntimeError(f"{left} records unacknowledged after 120 s")
    return {"msgs_per_s": records / elapsed}


def consume(bootstrap: str, topic: str, records: int, settings: dict) -> dict:
    """``kafka_clients.consume`` (one consumer from the beginning of every partition,
    touching each value) with extra consumer ``settings``."""
    c = kc.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest", **settings})
    try:
        c.assign([kc.TopicPartition(topic, p, kc.OFFSET_BEGINNING) for p in range(PARTITIONS)])
        n = size = 0
        t0 = time.perf_counter()
        while n < records:
            for m in c.consume(num_messages=min(10_000, records - n), timeout=5):
                if m.error():
                    raise kc.KafkaException(m.error())
                size += len(m.value())
                n += 1
            if time.perf_counter() - t0 > 300:
                raise TimeoutError(f"read {n} of {records} records in 300 s")
        return {"msgs_per_s": n / (time.perf_counter() - t0), "bytes": size}
    finally:
        c.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its live children (Linux /proc; 0 elsewhere)."""
    total = 0
    for p in [pid] + _children(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def one_run(name: str, bootstrap: str, create, pid: int, records: int, runs: dict,
            log) -> None:
    """Produce then consume ``records`` on a fresh topic of one system (broker ``pid``)."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    create(topic)
    work = [("produce", lambda: produce(bootstrap, topic, records))] + [
        (fig, lambda s=settings: consume(bootstrap, topic, records, s))
        for fig, settings in CONSUME_SETTINGS.items()]
    for fig, fn in work:
        cpu0 = cpu_seconds(pid)
        res = fn()
        cpu_us = (cpu_seconds(pid) - cpu0) / records * 1e6
        runs.setdefault(fig, []).append({"system": name, "value": res["msgs_per_s"],
                                         "load": _load(), "broker_cpu_us": round(cpu_us, 3)})
        log(f"  {name:8s} {fig:16s} {res['msgs_per_s']:>12,.0f} msgs/s  broker CPU "
            f"{cpu_us:.2f} us/record  (load {_load()})")


def figures_of(runs: dict) -> list[dict]:
    out = []
    for fig, (label, target) in FIGURES.items():
        ours = [r["value"] for r in runs.get(fig, []) if r["system"] == "sparklog"]
        theirs = [r["value"] for r in runs.get(fig, []) if r["system"] == "kafka"]
        if not ours or not theirs:
            continue
        med_o, med_k = statistics.median(ours), statistics.median(theirs)
        out.append({"name": fig, "label": label, "unit": "msgs/s", "ours": round(med_o, 3),
                    "baseline": round(med_k, 3), "ratio": round(med_o / med_k, 3),
                    "target": target, "higher_is_better": True,
                    "ours_best": round(max(ours), 3), "baseline_best": round(max(theirs), 3),
                    "ours_runs": [round(v, 3) for v in ours],
                    "baseline_runs": [round(v, 3) for v in theirs],
                    "loads": [r["load"] for r in runs[fig]],
                    "broker_cpu_us_per_record": {
                        "sparklog": [r["broker_cpu_us"] for r in runs[fig]
                                     if r["system"] == "sparklog"],
                        "kafka": [r["broker_cpu_us"] for r in runs[fig]
                                  if r["system"] == "kafka"]}})
    return out


def _cache_setting(size: int | None) -> dict:
    """The tail cache's size for the gateway (ingest_gateway/kafka/tail_cache.py): the
    consume figures read a backlog of ~230 MB, of which the default 64 MiB holds the
    newest part only."""
    return {} if size is None else {"gateway.kafka.tail.cache.bytes": str(size)}


@contextlib.contextmanager
def _gateway(work: str, settings: dict):
    """(gateway, its Kafka bootstrap, a topic creator) of a gateway on a store of its own
    with ``settings`` (the fetch sessions case)."""
    from log_layout import open_log

    store = os.path.join(work, f"store-{uuid.uuid4().hex[:6]}")
    port = free_port()
    with GatewayProcess(store, settings={"store.fsync": "false",
                                         "gateway.kafka.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                                         **settings}) as gw:
        lg = open_log(f"file://{store}")
        yield gw, f"127.0.0.1:{port}", \
            lambda t: lg.create_topic(t, {"partitions": extra.SESSION_PARTITIONS})
    shutil.rmtree(store, ignore_errors=True)


def _servers(args: argparse.Namespace, jars, store: str, port: int, *,
             log_path: str | None = None, **settings: str):
    """A context of (Kafka broker, gateway on ``store`` with its Kafka listener on
    ``port`` and ``settings``), the two started at once; with ``--quick`` the broker on
    :func:`quick_jvm_flags` and both with :mod:`rebalance`'s quick heartbeats."""
    settings = {"store.fsync": "false", "gateway.kafka.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                **settings, **(rebalance.QUICK_GATEWAY_SETTINGS if args.quick else {})}
    kafka = KafkaBroker(jars, rebalance.QUICK_KAFKA_PROPS if args.quick else None,
                        jvm_flags=quick_jvm_flags() if args.quick else None)
    return started_together(kafka, GatewayProcess(store, settings=settings, log_path=log_path))


def _quick(args: argparse.Namespace) -> dict:
    """Keyword arguments of the Java tools' and the rebalance's runs: a ``--quick`` run's
    JVM options, idle seconds and consumer settings (none in a full run)."""
    if not args.quick:
        return {"jvm": (), "idle_s": extra.IDLE_S, "client": None}
    return {"jvm": QUICK_JVM, "idle_s": QUICK_IDLE_S, "client": rebalance.QUICK_CLIENT}


def _interrupted(*_: object) -> None:
    raise KeyboardInterrupt


def _only_rebalance(args: argparse.Namespace, repeat: int, log) -> int:
    """The rebalance case alone (a gateway and a Kafka broker of their own); its figures
    replace those of the same names in the results file (``--out`` or the default)."""
    from log_layout import open_log

    jars, _tools, _notes = fetch_kafka(tools=False, log=log)
    work = tempfile.mkdtemp(prefix="sparklog-bench-rebalance-")
    store, port = os.path.join(work, "store"), free_port()
    try:
        with _servers(args, jars, store, port) as (kafka, _gw):
            lg = open_log(f"file://{store}")
            results = rebalance.runs(
                [("sparklog", f"127.0.0.1:{port}",
                  lambda t, n: lg.create_topic(t, {"partitions": n})),
                 ("kafka", kafka.bootstrap, kafka.create_topic)], repeat, _load, log,
                client=_quick(args)["client"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    new = rebalance.figures(results)
    print_table(f"10-member rebalance, KIP-848 vs classic, sparklog vs Kafka {jars.version}, "
                f"median of {repeat}", new, "ms; ratio = Kafka / sparklog (higher is better)")
    return _merge_results(args, new, "rebalance", {
        "repeat": repeat, "members": rebalance.MEMBERS, "partitions": rebalance.PARTITIONS,
        "kafka": jars.version}, log)


def _merge_results(args: argparse.Namespace, new: list[dict], section: str, run: dict,
                   log) -> int:
    """Put ``new`` figures into the results file (``--out`` or the default) in place of
    those of the same names; the others keep their own run's time and machine, and
    ``run`` (this run's settings, with its time and machine) goes under ``section``."""
    import json

    from bench.common import machine, results_path

    path = args.out or results_path("kafka_protocol", args.quick)
    try:
        with open(path) as f:
            doc = json.load(f)
    except FileNotFoundError:
        doc = {"bench": "kafka_protocol", "figures": []}
    names = {f["name"] for f in new}
    figures = [f for f in doc["figures"] if f["name"] not in names] + new
    meta = {k: v for k, v in doc.items() if k not in ("bench", "when", "machine", "figures",
                                                    "quick", "out")}
    meta[section] = {**run, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                     "machine": machine()}
    path = write_results("kafka_protocol", figures, quick=args.quick, out=path, **meta)
    with open(path) as f:
        written = json.load(f)
    written.update({k: doc[k] for k in ("when", "machine") if k in doc})
    with open(path, "w") as f:
        json.dump(written, f, indent=1)
        f.write("\n")
    log(f"wrote {path}")
    return 0


def _only_extra(args: argparse.Namespace, repeat: int, log) -> int:
    """The Java perf tools and fetch sessions cases alone (``protocol_extra``; a gateway and
    a Kafka broker of their own, then the two sessions gateways); their figures replace
    those of the same names in the results file (``--out`` or the default), the others
    are kept with their own run's time and machine."""
    from log_layout import open_log

    jars, tools, _notes = fetch_kafka(tools=True, log=log)
    if tools is None:
        raise RuntimeError("kafka-tools could not be fetched")
    perf_records = args.perf_records or (QUICK_RECORDS if args.quick else 1_000_000)
    session_records = args.session_records or (QUICK_RECORDS if args.quick else 500_000)
    quick = _quick(args)
    work = tempfile.mkdtemp(prefix="sparklog-bench-extra-")
    store, port = os.path.join(work, "store"), free_port()
    runs: dict = {}
    sessions: dict = {}
    try:
        with _servers(args, jars, store, port) as (kafka, gw):
            lg = open_log(f"file://{store}")
            sides = [("sparklog", f"127.0.0.1:{port}",
                      lambda t: lg.create_topic(t, {"partitions": PARTITIONS}), gw.proc.pid),
                     ("kafka", kafka.bootstrap, lambda t: kafka.create_topic(t, PARTITIONS),
                      kafka.proc.pid)]
            for r in range(repeat):
                log(f"Kafka's perf tools {tools.version}, run {r + 1} of {repeat}, "
                    f"{perf_records:,} records")
                for name, bootstrap, create, pid in sides:
                    extra.java_perf_run(tools.classpath, name, bootstrap, create, pid,
                                        perf_records, runs, cpu_seconds, _load, log,
                                        jvm=quick["jvm"])
        for r in range(repeat):
            for slots in (1000, 0):
                sessions.setdefault(slots, []).append(extra.sessions_run(
                    tools.classpath, slots, lambda s: _gateway(work, s), session_records,
                    produce, cpu_seconds, _load, log, idle_s=quick["idle_s"],
                    jvm=quick["jvm"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    new = [f for f in figures_of(runs) if f["name"] in ("producer_performance",
                                                        "consumer_performance")]
    new += extra.sessions_figures(sessions)
    print_table(f"Kafka's perf tools {tools.version} vs Kafka {jars.version}; fetch sessions "
                f"on vs off; median of {repeat}", new, "see bench/kafka_side/protocol_extra.py")
    return _merge_results(args, new, "extra", {
        "repeat": repeat, "perf_records": perf_records, "session_records": session_records,
        "session_partitions": extra.SESSION_PARTITIONS, "kafka": jars.version,
        "kafka_tools": tools.version}, log)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="5k records, one run")
    ap.add_argument("--repeat", type=int, help="runs per system (default 3, 1 with --quick)")
    ap.add_argument("--records", type=int, help="records a run (default 2,000,000)")
    ap.add_argument("--tail-cache-bytes", type=int,
                    help="the gateway's gateway.kafka.tail.cache.bytes (default: conf's)")
    ap.add_argument("--out", help="write the results here instead of bench/results/")
    ap.add_argument("--skip-rebalance", action="store_true",
                    help="leave out the 10-member rebalance case (KIP-848 vs classic)")
    ap.add_argument("--only-rebalance", action="store_true",
                    help="run only the rebalance case; its figures replace theirs in the "
                         "results file, the others are kept")
    ap.add_argument("--perf-records", type=int,
                    help="ProducerPerformance/ConsumerPerformance records (default 1,000,000)")
    ap.add_argument("--session-records", type=int,
                    help="records of the fetch sessions on/off case (default 500,000)")
    ap.add_argument("--skip-extra", action="store_true",
                    help="leave out the Java perf tools and the fetch sessions case")
    ap.add_argument("--only-extra", action="store_true",
                    help="run only the Java perf tools and fetch sessions cases; their "
                         "figures replace theirs in the results file, the others are kept")
    args = ap.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 3)
    records = args.records or (QUICK_RECORDS if args.quick else 2_000_000)

    def log(msg: str) -> None:
        print(msg, flush=True)

    signal.signal(signal.SIGTERM, _interrupted)  # through the finally blocks
    if args.only_rebalance:
        return _only_rebalance(args, repeat, log)
    if args.only_extra:
        return _only_extra(args, repeat, log)
    jars, tools, notes = fetch_kafka(tools=not args.skip_extra, log=log)
    perf_records = args.perf_records or (QUICK_RECORDS if args.quick else 1_000_000)
    session_records = args.session_records or (QUICK_RECORDS if args.quick else 500_000)
    quick = _quick(args)
    sessions: dict = {}
    for n in notes:
        log(f"note: {n}")
    work = tempfile.mkdtemp(prefix="sparklog-bench-kafka-protocol-")
    store = os.path.join(work, "store")
    rebalances: dict = {}
    kafka_port = free_port()
    runs: dict = {}
    try:
        with _servers(args, jars, store, kafka_port, log_path=os.path.join(work, "gateway.log"),
                      **_cache_setting(args.tail_cache_bytes)) as (kafka, gw):
            from log_layout import open_log

            lg = open_log(f"file://{store}")
            sides = [("sparklog", f"127.0.0.1:{kafka_port}",
                      lambda t: lg.create_topic(t, {"partitions": PARTITIONS}), gw.proc.pid),
                     ("kafka", kafka.bootstrap, lambda t: kafka.create_topic(t, PARTITIONS),
                      kafka.proc.pid)]
            if not args.quick:
                log("warm-up round (not counted)")
                for name, bootstrap, create, pid in sides:
                    one_run(name, bootstrap, create, pid, 100_000, {}, log)
            for r in range(repeat):
                log(f"run {r + 1} of {repeat}, {records:,} records")
                for name, bootstrap, create, pid in sides:
                    one_run(name, bootstrap, create, pid, records, runs, log)
            if tools is not None:
                for r in range(repeat):
                    log(f"Kafka's perf tools {tools.version}, run {r + 1} of {repeat}, "
                        f"{perf_records:,} records")
                    for name, bootstrap, create, pid in sides:
                        extra.java_perf_run(tools.classpath, name, bootstrap, create, pid,
                                            perf_records, runs, cpu_seconds, _load, log,
                                            jvm=quick["jvm"])
            if not args.skip_rebalance:
                rebalances = rebalance.runs(
                    [("sparklog", f"127.0.0.1:{kafka_port}",
                      lambda t, n: lg.create_topic(t, {"partitions": n})),
                     ("kafka", kafka.bootstrap, kafka.create_topic)], repeat, _load, log,
                    client=quick["client"])
            log(f"gateway {gw.url} done")
        if tools is not None:
            log(f"fetch sessions on vs off, {session_records:,} records, "
                f"{extra.SESSION_PARTITIONS} partitions")
            for r in range(repeat):
                for slots in (1000, 0):
                    sessions.setdefault(slots, []).append(extra.sessions_run(
                        tools.classpath, slots, lambda s: _gateway(work, s),
                        session_records, produce, cpu_seconds, _load, log,
                        idle_s=quick["idle_s"], jvm=quick["jvm"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures = figures_of(runs) + extra.sessions_figures(sessions)
    import confluent_kafka

    title = (f"confluent-kafka against sparklog's Kafka listener vs Apache Kafka "
             f"{jars.version}, {records:,} x {VALUE_BYTES} B, median of {repeat}")
    note = (f"librdkafka {confluent_kafka.libversion()[0]}; sparklog store.fsync=false vs "
            "Kafka's default flushing; ratio = sparklog / Kafka (higher is better); "
            "consume with default settings meets librdkafka's 1 s fetch pauses when a "
            "broker outruns the Python loop (see the module docstring)")
    figures += rebalance.figures(rebalances)
    print_table(title, figures, note)
    path = write_results("kafka_protocol", figures, quick=args.quick, repeat=repeat,
                         records=records, value_bytes=VALUE_BYTES, kafka=jars.version,
                         out=args.out, tail_cache_bytes=args.tail_cache_bytes,
                         perf_records=perf_records, session_records=session_records,
                         kafka_tools=None if tools is None else tools.version)
    log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
