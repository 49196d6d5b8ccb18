"""Two more cases of ``bench/kafka_protocol.py`` (issue 31).

**Kafka's perf tools with Kafka's defaults**, against the gateway and Apache Kafka in
the same run: ``ProducerPerformance`` (``--producer-props bootstrap.servers=...`` and
nothing else: the Java client's defaults, acks=all, idempotent, ``batch.size`` 16 KB,
``linger.ms`` 5) writes N 100-byte records to a fresh 4-partition topic, then
``ConsumerPerformance`` (``--bootstrap-server ... --topic ... --messages N``, a
classic group, the client's defaults) reads them back; each tool's own figure
(records/s; for the consumer ``fetch.nMsg.sec``, which leaves out the group join) and
the broker process's CPU per record.

**Fetch sessions on vs off** (KIP-227): two gateways on stores of their own, one with
the default ``gateway.kafka.max.incremental.fetch.session.cache.slots`` (1000) and one
with 0 (every Fetch full, as before sessions); the same records produced into a topic
of many partitions on each, then Kafka's Java consumer (ConsumerPerformance) reads
them all: librdkafka (confluent-kafka) never opens a fetch session, so only a client
that does shows a difference. The figures are the gateway's CPU per record read, and
its CPU per second while the consumer sits caught up (long-polls of every partition:
where sessions save the most, a full Fetch naming every partition each time).
"""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence

from bench.kafka_side.measure import VALUE_BYTES

#: ProducerPerformance's summary line: records sent, records/s, MB/s, latencies
_PERF = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")
#: the sessions case: partitions of its topic, seconds the caught-up consumer idles
SESSION_PARTITIONS = 64
IDLE_S = 10.0


def _java(tools_cp: str, main: str, *args: str, timeout: float = 900,
          jvm: Sequence[str] = ()) -> str:
    """Run one of Kafka's tools (``jvm``: more JVM options); returns its stdout; raises
    RuntimeError if it exits non-zero."""
    cmd = ["java", "-Xmx512M", *jvm, "-cp", tools_cp, f"org.apache.kafka.tools.{main}", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, "KAFKA_LOG4J_OPTS": ""})
    if proc.returncode != 0:
        raise RuntimeError(f"{main} failed ({proc.returncode}): "
                           f"{(proc.stdout + proc.stderr)[-1500:]}")
    return proc.stdout


def producer_performance(tools_cp: str, bootstrap: str, topic: str, records: int,
                         jvm: Sequence[str] = ()) -> float:
    """Records/s of Kafka's ProducerPerformance with the Java client's defaults."""
    out = _java(tools_cp, "ProducerPerformance", "--topic", topic, "--num-records",
                str(records), "--record-size", str(VALUE_BYTES), "--throughput", "-1",
                "--producer-props", f"bootstrap.servers={bootstrap}", jvm=jvm)
    found = [m for line in out.splitlines() if (m := _PERF.search(line))]
    if not found or int(found[-1].group(1)) != records:
        raise RuntimeError(f"ProducerPerformance sent fewer records: {out[-800:]}")
    return float(found[-1].group(2))


def consumer_performance(tools_cp: str, bootstrap: str, topic: str, records: int,
                         jvm: Sequence[str] = ()) -> dict:
    """Kafka's ConsumerPerformance with the client's defaults: its fetch.nMsg.sec (the
    records/s once the group is joined) and nMsg.sec (from start, the join included)."""
    out = _java(tools_cp, "ConsumerPerformance", "--bootstrap-server", bootstrap,
                "--topic", topic, "--messages", str(records), "--timeout", "60000",
                "--group", f"perf-{uuid.uuid4().hex[:8]}", jvm=jvm)
    row = _consumer_row(out, records)
    return {"fetch_msgs_per_s": row["fetch.nMsg.sec"], "msgs_per_s": row["nMsg.sec"]}


def java_perf_run(tools_cp: str, name: str, bootstrap: str, create: Callable[[str], None],
                  pid: int, records: int, runs: dict, cpu: Callable[[int], float],
                  load: Callable[[], float], log, jvm: Sequence[str] = ()) -> None:
    """ProducerPerformance then ConsumerPerformance on a fresh topic of one system
    (``jvm``: more options for the tools' JVMs)."""
    topic = f"perf-{uuid.uuid4().hex[:8]}"
    create(topic)
    cpu0 = cpu(pid)
    rate = producer_performance(tools_cp, bootstrap, topic, records, jvm)
    cpu_us = (cpu(pid) - cpu0) / records * 1e6
    runs.setdefault("producer_performance", []).append(
        {"system": name, "value": rate, "load": load(), "broker_cpu_us": round(cpu_us, 3)})
    log(f"  {name:8s} ProducerPerformance {rate:>12,.0f} msgs/s  broker CPU "
        f"{cpu_us:.2f} us/record  (load {load()})")
    cpu0 = cpu(pid)
    got = consumer_performance(tools_cp, bootstrap, topic, records, jvm)
    cpu_us = (cpu(pid) - cpu0) / records * 1e6
    runs.setdefault("consumer_performance", []).append(
        {"system": name, "value": got["fetch_msgs_per_s"], "from_start": got["msgs_per_s"],
         "load": load(), "broker_cpu_us": round(cpu_us, 3)})
    log(f"  {name:8s} ConsumerPerformance {got['fetch_msgs_per_s']:>12,.0f} msgs/s "
        f"(from start {got['msgs_per_s']:,.0f})  broker CPU {cpu_us:.2f} us/record")


def sessions_run(tools_cp: str, slots: int, gateway_factory: Callable[[dict], object],
                 records: int, produce: Callable[[str, str, int], dict],
                 cpu: Callable[[int], float], load: Callable[[], float], log, *,
                 idle_s: float = IDLE_S, jvm: Sequence[str] = ()) -> dict:
    """One gateway with ``slots`` session slots: produce ``records`` into a fresh topic
    of SESSION_PARTITIONS partitions (confluent-kafka), read them with Kafka's Java
    consumer (ConsumerPerformance: it opens a fetch session when the broker offers one;
    librdkafka never does, it sends every Fetch whole), the gateway's CPU per record;
    then the same group again, caught up, polling for ``idle_s`` with nothing to read, the
    gateway's CPU per second (the group join included, alike on both sides). ``jvm``:
    more options for the consumer's JVMs."""
    with gateway_factory({"gateway.kafka.max.incremental.fetch.session.cache.slots":
                          str(slots)}) as (gw, bootstrap, create):
        topic, group = f"sess-{uuid.uuid4().hex[:8]}", f"sess-{uuid.uuid4().hex[:8]}"
        create(topic)
        produce(bootstrap, topic, records)
        pid = gw.proc.pid
        cpu0 = cpu(pid)
        got = _java(tools_cp, "ConsumerPerformance", "--bootstrap-server", bootstrap,
                    "--topic", topic, "--messages", str(records), "--timeout", "60000",
                    "--group", group, jvm=jvm)
        per_record = (cpu(pid) - cpu0) / records * 1e6
        rate = _consumer_row(got, records)["fetch.nMsg.sec"]
        cpu0, t0 = cpu(pid), time.monotonic()
        _java(tools_cp, "ConsumerPerformance", "--bootstrap-server", bootstrap,
              "--topic", topic, "--messages", "1", "--timeout", str(int(idle_s * 1000)),
              "--group", group, jvm=jvm)
        idle = (cpu(pid) - cpu0) * 1000 / (time.monotonic() - t0)
    log(f"  slots={slots:<5d} ConsumerPerformance {rate:>12,.0f} msgs/s  gateway CPU "
        f"{per_record:.2f} us/record, caught up {idle:.1f} ms/s  (load {load()})")
    return {"msgs_per_s": rate, "cpu_us_per_record": round(per_record, 3),
            "idle_cpu_ms_per_s": round(idle, 2), "load": load()}


def _consumer_row(out: str, records: int) -> dict[str, float]:
    lines = [line for line in out.splitlines() if "," in line]
    row = next(csv.DictReader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    if int(row["data.consumed.in.nMsg"]) < records:
        raise RuntimeError(f"ConsumerPerformance read fewer records: {out[-800:]}")
    return {k: float(v) for k, v in row.items() if k.endswith(("sec", "nMsg"))}


def sessions_figures(runs: dict[int, list[dict]]) -> list[dict]:
    """The sessions case as figures: ours = sessions on (1000 slots), baseline = off (0);
    lower is better (gateway CPU)."""
    import statistics

    on, off = runs.get(1000, []), runs.get(0, [])
    if not on or not off:
        return []
    out = []
    for key, unit, label in (
            ("cpu_us_per_record", "us/record",
             f"gateway CPU per record read, Java consumer, {SESSION_PARTITIONS} partitions: "
             "fetch sessions on vs off"),
            ("idle_cpu_ms_per_s", "ms/s",
             "gateway CPU per second, consumer caught up (long-polls): sessions on vs off")):
        a, b = statistics.median(r[key] for r in on), statistics.median(r[key] for r in off)
        out.append({"name": f"fetch_sessions_{key}", "label": label, "unit": unit,
                    "ours": a, "baseline": b, "ratio": round(a / b, 3) if b else None,
                    "target": None, "higher_is_better": False,
                    "ours_runs": [r[key] for r in on], "baseline_runs": [r[key] for r in off],
                    "consumer_performance_msgs_per_s": {
                        "on": [round(r["msgs_per_s"]) for r in on],
                                           "off": [round(r["msgs_per_s"]) for r in off]},
                    "loads": [r["load"] for pair in zip(on, off) for r in pair]})
    return out
