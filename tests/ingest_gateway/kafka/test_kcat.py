"""Debian's ``kcat`` (librdkafka) against the Kafka listener of a real gateway process:
``-P`` produce with keys and headers, ``-C`` consume them back exactly, ``-L`` metadata,
``-Q`` offsets for timestamps; the records kcat wrote are the ones sparklog's own
``Consumer`` reads over HTTP.

kcat is not on PyPI: ``make kcat`` unpacks Debian's packages into ``.cache/kcat``
(no install, no root needed). Without it these tests skip and say so.
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

import conf
from ingest_gateway.client import Consumer
from jobs.gateway_process import wait_for

KCAT = conf.PROJECT_ROOT / ".cache" / "kcat" / "kcat"

pytestmark = pytest.mark.skipif(not KCAT.exists(),
                                reason=f"{KCAT} is missing: `make kcat` fetches Debian's kcat")


def kcat(gw, *args: str, stdin: str | None = None) -> str:
    """Run kcat against the gateway's listener; its stdout (a failure shows its stderr)."""
    done = subprocess.run([str(KCAT), "-b", gw.bootstrap, *args], input=stdin,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def new_topic(kafka_log, partitions: int = 2) -> str:
    name = f"kc-{uuid.uuid4().hex[:10]}"
    kafka_log.create_topic(name, {"partitions": partitions})
    return name


def consume(gw, topic: str, partition: int) -> list[dict]:
    """Every record of one partition, as kcat's JSON envelope, to the end (``-e``)."""
    out = kcat(gw, "-C", "-t", topic, "-p", str(partition), "-o", "beginning", "-e", "-J",
               "-q")
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_produce_then_consume_exact(kafka_gateway, kafka_log):
    topic = new_topic(kafka_log)
    lines = [f"key{i}:value-{i}" for i in range(20)]
    for p in (0, 1):
        kcat(kafka_gateway, "-P", "-t", topic, "-p", str(p), "-K:", "-H", "src=kcat",
             "-H", f"part={p}", "-X", "acks=all", stdin="\n".join(lines[p::2]) + "\n")
    for p in (0, 1):
        got = consume(kafka_gateway, topic, p)
        assert [(m["topic"], m["partition"], m["offset"], m["key"], m["payload"], m["headers"])
                for m in got] == [
            (topic, p, i, line.split(":")[0], line.split(":")[1],
             ["src", "kcat", "part", str(p)]) for i, line in enumerate(lines[p::2])]
    # sparklog's own Consumer (HTTP) reads what kcat wrote
    consumer = Consumer(gateway=kafka_gateway.url, auto_offset_reset="earliest",
                        enable_auto_commit=False)
    seen: list = []
    try:
        consumer.assign([(topic, 0)])
        wait_for(lambda: seen.extend(consumer.poll(0.5)) or len(seen) >= 10, timeout=30,
                 interval=0, what="the Consumer's records")
    finally:
        consumer.close()
    assert [(r.offset, r.key, r.value, r.headers) for r in seen] == [
        (i, line.split(":")[0].encode(), line.split(":")[1].encode(),
         [("src", b"kcat"), ("part", b"0")]) for i, line in enumerate(lines[0::2])]


def test_metadata_lists_the_broker_and_partitions(kafka_gateway, kafka_log):
    topic = new_topic(kafka_log, 3)
    meta = json.loads(kcat(kafka_gateway, "-L", "-J", "-t", topic))
    assert [(b["name"].rsplit(":", 1)[1]) for b in meta["brokers"]] == \
        [str(kafka_gateway.kafka_port)]
    (t,) = meta["topics"]
    assert t["topic"] == topic and "error" not in t
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2]
    broker_ids = {b["id"] for b in meta["brokers"]}
    assert {p["leader"] for p in t["partitions"]} <= broker_ids


def test_query_offsets_by_timestamp(kafka_gateway, kafka_log):
    topic = new_topic(kafka_log, 1)
    # kcat -P cannot set timestamps: produce one record at a time and read each one's
    # CreateTime back, then ask for the offset of each time
    for i in range(3):
        kcat(kafka_gateway, "-P", "-t", topic, "-p", "0", "-X", "acks=all", stdin=f"v{i}\n")
    stamps = [m["ts"] for m in consume(kafka_gateway, topic, 0)]
    assert len(stamps) == 3
    for i, stamp in enumerate(stamps):
        if i and stamps[i - 1] == stamp:
            continue  # two records in one millisecond: the first one's offset answers
        answer = json.loads(kcat(kafka_gateway, "-Q", "-J", "-t", f"{topic}:0:{stamp}"))
        assert answer[topic]["0"]["offset"] == i, answer
    late = json.loads(kcat(kafka_gateway, "-Q", "-J", "-t", f"{topic}:0:{stamps[-1] + 10**6}"))
    assert late[topic]["0"]["offset"] == -1  # nothing that new: the end (librdkafka's -1)
