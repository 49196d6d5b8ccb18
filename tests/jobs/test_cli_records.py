"""``sparklog records delete``, ``offsets --time``, ``consume --from-datetime/--format/
--property``, ``produce --header/--property parse.headers``, ``dump-log`` and
``metadata``: against a real gateway subprocess and its local store (issue 16)."""

from __future__ import annotations

import json
import uuid

import pytest

from ingest_gateway.client import Producer
from log_layout import open_log
from tests.jobs.cli_proc import assert_one_line_error, sparklog, text

#: slow (not in ``make test-fast``, issue 28): dozens of CLI processes (each ~1 s of
#: imports) beside a gateway; 340 s in all, measured beside three other workers
pytestmark = pytest.mark.slow

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@pytest.fixture
def topic(local_gateway):
    """2 partitions; partition p holds 10 records, record i at T0 + i s, in 2 batches."""
    gw, store = local_gateway
    name = f"r-{uuid.uuid4().hex[:8]}"
    open_log(store).create_topic(name, {"partitions": 2})
    with Producer(gw.url, linger_ms=0) as producer:
        for half in (range(5), range(5, 10)):
            for p in range(2):
                for i in half:
                    producer.send(name, f"p{p}-v{i}", key=f"k{i}", partition=p,
                                  timestamp=T0 + i * 1000)
            producer.flush()
    return name


def _consume(store, topic, *args):
    run = sparklog("consume", topic, "--store", store, "--timeout-ms", "1500", *args)
    assert run.returncode == 0, text(run)
    return text(run)[0].splitlines()


def test_records_delete_moves_the_log_start_for_every_reader(local_gateway, topic):
    gw, store = local_gateway
    run = sparklog("records", "delete", topic, "--partition", "0", "--before", "7", "--yes",
                   "--store", store)
    out, err = text(run)
    assert run.returncode == 0, err
    assert out.splitlines()[1].split() == [topic, "0", "7", "10"]
    plog = open_log(store).partition(topic, 0)
    assert plog.log_start_offset() == 7 and plog.high_watermark() == 10
    # from the store: the first record read is the new log start
    rows = _consume(store, topic, "--partition", "0", "--from-beginning", "--format", "%o %v")
    assert rows == ["7 p0-v7", "8 p0-v8", "9 p0-v9"]
    # through the gateway too, and partition 1 is untouched
    run = sparklog("consume", topic, "--store", store, "--bootstrap-server", gw.url,
                   "--group", f"g-{topic}", "--from-beginning", "--max-messages", "13",
                   "--format", "%p %o")
    assert run.returncode == 0, text(run)
    got = sorted(tuple(map(int, r.split())) for r in text(run)[0].splitlines())
    assert got == [(0, o) for o in range(7, 10)] + [(1, o) for o in range(10)]
    # and through the gateway's own fetch, which answers from its cached snapshots
    run = sparklog("consume", topic, "--via-gateway", "--bootstrap-server", gw.url,
                   "--group", f"v-{topic}", "--from-beginning", "--max-messages", "13",
                   "--format", "%p %o")
    assert run.returncode == 0, text(run)
    assert sorted(tuple(map(int, r.split())) for r in text(run)[0].splitlines()) == got
    run = sparklog("offsets", topic, "--time", "earliest", "--store", store, "--json")
    assert [json.loads(line)["offset"] for line in text(run)[0].splitlines()] == [7, 0]
    # hostile: past the high watermark, negative, unknown topic/partition, no --yes
    assert_one_line_error(sparklog("records", "delete", topic, "--partition", "1", "--before",
                                   "11", "--yes", "--store", store),
                          "offset 11 is out of range", "high watermark 10")
    assert_one_line_error(sparklog("records", "delete", "nope", "--partition", "0", "--before",
                                   "1", "--yes", "--store", store), "'nope' does not exist")
    assert_one_line_error(sparklog("records", "delete", topic, "--partition", "5", "--before",
                                   "1", "--yes", "--store", store), "5")
    assert_one_line_error(sparklog("records", "delete", topic, "--partition", "1", "--before",
                                   "3", "--store", store), "add --yes")
    run = sparklog("records", "delete", topic, "--partition", "1", "--before", "-3", "--yes",
                   "--store", store)
    assert run.returncode == 2 and "Traceback" not in text(run)[1]
    assert "expected an integer >= 0, got '-3'" in text(run)[1]
    assert open_log(store).partition(topic, 1).log_start_offset() == 0
    # 'latest': everything; a later produce continues at the high watermark
    assert sparklog("records", "delete", topic, "--partition", "1", "--before", "latest",
                    "--yes", "--store", store).returncode == 0
    assert open_log(store).partition(topic, 1).log_start_offset() == 10
    with Producer(gw.url, linger_ms=0) as producer:
        assert producer.send(topic, "after", partition=1).result().offset == 10
    assert _consume(store, topic, "--partition", "1", "--from-beginning", "--format",
                    "%o %v") == ["10 after"]


def test_offsets_for_a_time(local_gateway, topic):
    _, store = local_gateway

    def offsets(time):
        run = sparklog("offsets", topic, "--time", time, "--store", store)
        assert run.returncode == 0, text(run)
        return [line.split() for line in text(run)[0].splitlines()[1:]]

    assert offsets("2023-11-14T22:13:23Z") == [[topic, "0", "3", "2023-11-14T22:13:23.000Z"],
                                               [topic, "1", "3", "2023-11-14T22:13:23.000Z"]]
    assert [r[2] for r in offsets(str(T0 + 6500))] == ["7", "7"]  # ms since the epoch
    assert [r[2] for r in offsets("2023-11-14T22:13:00")] == ["0", "0"]  # naive: UTC
    assert [r[2:] for r in offsets("2030-01-01T00:00:00Z")] == [["10", "-"], ["10", "-"]]
    assert [r[2] for r in offsets("latest")] == ["10", "10"]
    for bad in ("yesterday", "2023-13-01", "-5", "1969-12-31T00:00:00Z"):
        assert_one_line_error(sparklog("offsets", topic, "--time", bad, "--store", store),
                              "--time")
    assert_one_line_error(sparklog("offsets", "nope", "--store", store), "'nope' does not exist")


def test_consume_from_a_time_with_formats(local_gateway, topic):
    _, store = local_gateway
    rows = _consume(store, topic, "--partition", "0", "--from-datetime", "2023-11-14T22:13:28Z",
                    "--format", r"%t|%p|%o|%k|%v|%T|%K|%S\n")
    assert rows == [f"{topic}|0|8|k8|p0-v8|2023-11-14T22:13:28.000Z|2|5",
                    f"{topic}|0|9|k9|p0-v9|2023-11-14T22:13:29.000Z|2|5"]
    rows = _consume(store, topic, "--from-timestamp", str(T0 + 9000), "--time-format", "ms",
                    "--property", "print.key=true", "--property", "print.timestamp=true",
                    "--property", "print.partition=true", "--property", "key.separator=;")
    assert sorted(rows) == [f"CreateTime:{T0 + 9000};Partition:{p};k9;p{p}-v9" for p in (0, 1)]
    rows = _consume(store, topic, "--partition", "1", "--offset", "9")
    assert rows == ["1\t9\t2023-11-14T22:13:29.000Z\tk9\tp1-v9"]
    for args, needle in ((["--format", "%z"], "'%z' is not a format token"),
                         (["--format", "50%"], "'%' is not a format token"),
                         (["--format", "plain"], "expected text, json or a format string"),
                         (["--property", "print.key=maybe"], "expected true or false"),
                         (["--property", "nokey"], "expected KEY=VALUE"),
                         (["--property", "print.nope=true"], "unknown property"),
                         (["--from-datetime", "tomorrow"], "--from-datetime"),
                         (["--from-timestamp", "-1"], "--from-timestamp"),
                         (["--from-timestamp", "1", "--from-beginning"], "excludes")):
        assert_one_line_error(sparklog("consume", topic, "--store", store, "--max-messages",
                                       "1", *args), needle)


def test_produce_headers_from_the_command_line(local_gateway):
    gw, store = local_gateway
    name = f"h-{uuid.uuid4().hex[:8]}"
    open_log(store).create_topic(name, {"partitions": 1})
    # Kafka's LineMessageReader: headers, tab, key, tab, value; an empty headers part is
    # none, a header without ':' has a null value
    lines = b"trace:t1,user:ann\tk1\tv1\n\tk2\tv2\nempty:,bare\tk3\tv3\n"
    run = sparklog("produce", name, "--bootstrap-server", gw.url, "--property",
                   "parse.headers=true", "--property", "parse.key=true", "--header", "src=cli",
                   stdin=lines)
    assert run.returncode == 0, text(run)
    assert "produced 3 records" in text(run)[1]
    rows = open_log(store).partition(name, 0).read_table(0).to_pylist()
    assert [(r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]])
            for r in rows] == [
        (b"k1", b"v1", [("src", b"cli"), ("trace", b"t1"), ("user", b"ann")]),
        (b"k2", b"v2", [("src", b"cli")]),
        (b"k3", b"v3", [("src", b"cli"), ("empty", b""), ("bare", None)])]
    out = _consume(store, name, "--from-beginning", "--property", "print.headers=true",
                   "--property", "print.key=true")
    assert out[0] == "src:cli,trace:t1,user:ann\tk1\tv1"
    assert _consume(store, name, "--from-beginning", "--format", "%h")[1] == "src=cli"
    for args, needle in ((["--header", "novalue"], "expected NAME=VALUE"),
                         (["--property", "parse.headers=yes"], "expected true or false"),
                         (["--property", "headers.delimiter="], "cannot be empty"),
                         (["--property", "ignore.error=true"], "KEY one of")):
        assert_one_line_error(sparklog("produce", name, "--bootstrap-server", gw.url, *args,
                                       stdin=b"x\n"), needle)


def test_dump_log_and_metadata(local_gateway, topic):
    gw, store = local_gateway
    run = sparklog("dump-log", f"{topic}/1", "--store", store)
    out = text(run)[0].splitlines()
    assert run.returncode == 0 and out[0].startswith(f"Dumping {topic}-1: manifest version")
    assert "2 segments" in out[0] and len(out) == 3, out
    first = out[1].split()
    assert first[2:8] == ["baseOffset:", "0", "lastOffset:", "4", "count:", "5"]
    assert "minTimestamp: 2023-11-14T22:13:20.000Z" in out[1]
    segment = first[1]
    run = sparklog("dump-log", f"{store}/{topic}/1/{segment}", "--print-data-log",
                   "--store", store)
    out = text(run)[0].splitlines()
    assert len(out) == 2 + 5 and out[2] == (
        "| offset: 0 CreateTime: 2023-11-14T22:13:20.000Z keySize: 2 valueSize: 5 "
        "headerKeys: [] key: k0 payload: p1-v0"), out
    for bad, needle in ((f"{topic}", "expected TOPIC/PARTITION"),
                        (f"{topic}/x", "partition 'x'"), (f"{topic}/9", "9"),
                        (f"{topic}/0/000-nope.arrow", "is not a segment"),
                        ("nope/0", "'nope' does not exist")):
        assert_one_line_error(sparklog("dump-log", bad, "--store", store), needle)
    run = sparklog("metadata", "--topic", topic, "--store", store, "--bootstrap-server", gw.url)
    out = text(run)[0]
    assert run.returncode == 0, text(run)
    assert f" 1 gateway:\n  gateway {gw.url} (standalone)" in out
    assert f'  topic "{topic}" with 2 partitions:' in out
    assert f"partition 1, gateway {gw.url}, " in out and "high watermark 10" in out
    doc = json.loads(sparklog("metadata", "--json", "--store", store, "--bootstrap-server",
                              "127.0.0.1:9").stdout)
    assert doc["gateways"] == [] and topic in [t["topic"] for t in doc["topics"]]
