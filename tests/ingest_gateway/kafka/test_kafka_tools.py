"""Kafka's own command-line tools, unchanged, against a gateway's Kafka listener: the
classes ``bin/kafka-topics.sh``, ``kafka-transactions.sh``, ``kafka-leader-election.sh``
and ``kafka-log-dirs.sh`` run (``org.apache.kafka.tools.*``), from kafka-tools and its
kafka-clients at the newest version Maven Central serves (``bench.kafka_side.fetch``,
cached in ``.cache/kafka``). Each command's output is checked for what it must show.

The store is prepared before the gateway starts (``tests.log_layout.txn_helpers``): a
committed transaction, an ongoing one, and a hanging one (a producer no transactional
id names, open in t-0), so ``find-hanging`` has one to find."""

from __future__ import annotations

import json
import subprocess

import pytest

from log_layout import open_log
from log_layout import transactions as tx
from tests import jvm
from tests.ingest_gateway.kafka import tool_runner
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess
from tests.log_layout.txn_helpers import plain_append, txn_append

pytestmark = [pytest.mark.slow, pytest.mark.kafka_broker]

ZOMBIE = 4242  # a producer id no transactional id names


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    store = f"file://{tmp_path_factory.mktemp('tools') / 'store'}"
    log = open_log(store)
    log.create_topic("t", {"partitions": 2})
    pid, epoch = tx.init_transactions(log, "done", 60_000)
    tx.add_partitions(log, "done", pid, epoch, [("t", 0)])
    txn_append(log, "t", 0, pid, epoch, [b"a"])
    tx.end_transaction(log, "done", pid, epoch, True)
    pid, epoch = tx.init_transactions(log, "busy", 60_000)
    tx.add_partitions(log, "busy", pid, epoch, [("t", 1)])
    txn_append(log, "t", 1, pid, epoch, [b"b"])
    txn_append(log, "t", 0, ZOMBIE, 0, [b"z"])  # hanging: nobody's to end
    plain_append(log, "t", 0, [b"after"])
    with KafkaGatewayProcess(store) as g:
        g.log = log
        g.busy_pid = pid
        yield g


def run(tools, gw, main: str, *args: str, ok: bool = True) -> str:
    """Run one tool's main class; its stdout (stderr too when ``ok`` is False)."""
    proc = tool_runner.run(tools.classpath, f"org.apache.kafka.tools.{main}",
                           "--bootstrap-server", gw.bootstrap, *args)
    if ok:
        assert proc.returncode == 0, (proc.args, proc.stdout[-2000:], proc.stderr[-3000:])
        return proc.stdout
    return proc.stdout + proc.stderr


def test_kafka_topics_alter_partitions(tools, gw):
    run(tools, gw, "TopicCommand", "--create", "--topic", "grow", "--partitions", "2")
    run(tools, gw, "TopicCommand", "--alter", "--topic", "grow", "--partitions", "6")
    assert gw.log.topic("grow", refresh=True).partitions == 6
    out = run(tools, gw, "TopicCommand", "--describe", "--topic", "grow")
    assert "PartitionCount: 6" in out and out.count("Partition: ") == 6, out
    refused = run(tools, gw, "TopicCommand", "--alter", "--topic", "grow", "--partitions",
                  "3", ok=False)
    assert "has 6 partitions; they only grow" in refused, refused[-2000:]


def test_kafka_transactions_list_and_describe(tools, gw):
    out = run(tools, gw, "TransactionsCommand", "list")
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:] if line.strip()}
    assert out.split()[:4] == ["TransactionalId", "Coordinator", "ProducerId",
                               "TransactionState"], out
    assert rows["busy"][3] == "Ongoing" and rows["done"][3] == "CompleteCommit"
    out = run(tools, gw, "TransactionsCommand", "describe", "--transactional-id", "busy")
    assert "Ongoing" in out and "t-1" in out and "60000" in out, out
    err = run(tools, gw, "TransactionsCommand", "describe", "--transactional-id", "nobody",
              ok=False)
    assert "failed because the ID could not be found" in err, err[-2000:]


def test_kafka_transactions_describe_producers(tools, gw):
    out = run(tools, gw, "TransactionsCommand", "describe-producers", "--topic", "t",
              "--partition", "1")
    lines = out.splitlines()
    assert lines[0].split()[0] == "ProducerId", out
    (row,) = [line.split() for line in lines[1:] if line.strip()]
    assert int(row[0]) == gw.busy_pid and row[-1] == "0", out  # its transaction starts at 0


def test_kafka_transactions_find_hanging(tools, gw):
    out = run(tools, gw, "TransactionsCommand", "find-hanging", "--broker-id", "0",
              "--max-transaction-timeout", "1")
    # the zombie's transaction has not been open a minute: not a candidate yet
    assert str(ZOMBIE) not in out, out
    out = run(tools, gw, "TransactionsCommand", "find-hanging", "--topic", "t",
              "--max-transaction-timeout", "0")
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    # the zombie hangs; "busy"'s open transaction is described with its partition: not
    assert [(r[0], r[1], r[2]) for r in rows] == [("t", "0", str(ZOMBIE))], out


def test_kafka_transactions_abort_ends_the_hanging_one(tools, gw):
    from tests.log_layout.txn_helpers import values

    before = values(gw.log, "t", 0, "read_committed")
    assert b"after" not in before  # held back by the hanging transaction
    # Kafka's tool: DescribeProducers finds the producer at that start offset, then
    # WriteTxnMarkers aborts it at its epoch
    run(tools, gw, "TransactionsCommand", "abort", "--topic", "t", "--partition", "0",
        "--start-offset", "2")
    assert values(gw.log, "t", 0, "read_committed") == before + [b"after"]
    out = run(tools, gw, "TransactionsCommand", "find-hanging", "--topic", "t",
              "--max-transaction-timeout", "0")
    assert str(ZOMBIE) not in out, out


def test_kafka_leader_election_is_not_needed(tools, gw):
    out = run(tools, gw, "LeaderElectionCommand", "--election-type", "preferred", "--topic",
              "t", "--partition", "0")
    assert "Valid replica already elected for partitions t-0" in out, out
    out = run(tools, gw, "LeaderElectionCommand", "--election-type", "preferred",
              "--all-topic-partitions")
    assert "Exception" not in out, out


def test_kafka_log_dirs_describes_the_store(tools, gw):
    out = run(tools, gw, "LogDirsCommand", "--describe", "--topic-list", "t")
    doc = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    (broker,) = doc["brokers"]
    (d,) = broker["logDirs"]
    assert d["logDir"].startswith("file://") and d["error"] is None
    sizes = {p["partition"]: p["size"] for p in d["partitions"]}
    assert set(sizes) == {"t-0", "t-1"} and sizes["t-0"] > 0, d


def test_kafka_reassign_partitions_lists_none_and_moves_nothing(tools, gw, tmp_path):
    out = run(tools, gw, "reassign.ReassignPartitionsCommand", "--list")
    assert "No partition reassignments found." in out, out
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [0], "log_dirs": ["any"]}]}))
    out = run(tools, gw, "reassign.ReassignPartitionsCommand", "--execute",
              "--reassignment-json-file", str(plan))
    assert "Successfully started partition reassignment for t-0" in out, out
    # --verify also clears the replication throttles (broker and topic configs): there
    # are none to clear, which Kafka's tool is told without an error
    out = run(tools, gw, "reassign.ReassignPartitionsCommand", "--verify",
              "--reassignment-json-file", str(plan))
    assert "Reassignment of partition t-0 is completed." in out, out


def _metric(gw, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(f"{gw.url}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


def test_the_java_consumer_reads_in_a_fetch_session(tools, gw):
    import time

    from confluent_kafka import Producer

    run(tools, gw, "TopicCommand", "--create", "--topic", "sess", "--partitions", "8")
    p = Producer({"bootstrap.servers": gw.bootstrap})
    for i in range(2000):
        p.produce("sess", f"v{i}".encode(), partition=i % 8)
    assert p.flush(30) == 0
    before = _metric(gw, "sparklog_gateway_kafka_fetch_sessions")
    # more records asked than there are: it reads all, then polls caught up until its
    # timeout, in its session; on close it ends the session (a final-epoch Fetch)
    cmd = jvm.java("-cp", tools.classpath,
           "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", gw.bootstrap,
           "--topic", "sess", "--messages", "3000", "--timeout", "8000", "--group", "sess-g")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen, partitions = 0.0, 0.0
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            seen = max(seen, _metric(gw, "sparklog_gateway_kafka_fetch_sessions") - before)
            partitions = max(partitions,
                             _metric(gw, "sparklog_gateway_kafka_fetch_session_partitions"))
            time.sleep(0.2)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert seen == 1 and partitions >= 8, (seen, partitions)
    assert _metric(gw, "sparklog_gateway_kafka_fetch_sessions") == before


def test_kafka_acls_adds_lists_and_removes(tools, gw):
    run(tools, gw, "AclCommand", "--add", "--allow-principal", "User:alice", "--operation",
        "Read", "--topic", "t", "--group", "g-", "--resource-pattern-type", "prefixed")
    out = run(tools, gw, "AclCommand", "--list", "--topic", "t", "--resource-pattern-type",
              "prefixed")
    assert "name=t, patternType=PREFIXED" in out and \
        "principal=User:alice, host=*, operation=READ, permissionType=ALLOW" in out, out
    # the producer shortcut: Write, Describe, Create on the topic (literal)
    run(tools, gw, "AclCommand", "--add", "--allow-principal", "User:bob", "--producer",
        "--topic", "t")
    from log_layout.acls import list_acls

    stored = {(b.principal, b.resource_type, b.name, b.operation)
              for b in list_acls(gw.log.store)}
    assert {("User:bob", "Topic", "t", op) for op in ("Write", "Describe", "Create")} <= stored
    run(tools, gw, "AclCommand", "--remove", "--force", "--allow-principal", "User:bob",
        "--producer", "--topic", "t")
    run(tools, gw, "AclCommand", "--remove", "--force", "--topic", "t", "--group", "g-",
        "--resource-pattern-type", "prefixed")
    assert list_acls(gw.log.store) == []
