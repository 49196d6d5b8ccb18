"""Kafka's own Java tools and clients, unchanged (kafka-tools and its kafka-clients at
the newest version Maven Central serves, ``bench.kafka_side.fetch``), against a
gateway's SASL_PLAINTEXT listener offering PLAIN and SCRAM with sessions of
``REAUTH_MS``:

- ``kafka-configs.sh`` (``org.apache.kafka.tools.ConfigCommand``), logged in with
  PLAIN, creates a user's SCRAM-SHA-256 and -512 credentials through
  AlterUserScramCredentials (and describes them);
- ``kafka-console-producer.sh`` logs in as that user with SCRAM-SHA-256 and writes;
- ``ProducerPerformance`` logs in with SCRAM-SHA-512 and produces transactionally for
  longer than two session lifetimes: the Java client re-authenticates (KIP-368) on its
  connections, and, reading ``transaction.version`` 2 from ApiVersions, runs
  transactions v2 (KIP-890): each commit moves its epoch on (the transaction log's
  epoch counts the transactions), without AddPartitionsToTxn.
"""

from __future__ import annotations

import os
import uuid

import pytest

from ingest_gateway.security import passwords
from log_layout import open_log, scram as scram_docs
from log_layout import transactions as tx
from tests.ingest_gateway.kafka import tool_runner
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess

pytestmark = [pytest.mark.slow, pytest.mark.kafka_broker]

REAUTH_MS = 3000
ADMIN_PW = "admin-pw"
ALICE_PW = "alice-pw-1"


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    root = tmp_path_factory.mktemp("tools-sec")
    store = f"file://{root / 'store'}"
    log = open_log(store)
    log.create_topic("secured", {"partitions": 2})
    pwfile = str(root / "passwords")
    passwords.add(pwfile, "admin", ADMIN_PW)
    g = KafkaGatewayProcess(store, log_path=str(root / "gateway.log"), settings={
        "authentication.method": "basic,scram", "authentication.password.file": pwfile,
        "authorizer.refresh.ms": "200",
        "gateway.kafka.connections.max.reauth.ms": str(REAUTH_MS)})
    g.settings["gateway.kafka.listeners"] = f"SASL_PLAINTEXT://127.0.0.1:{g.kafka_port}"
    with g:
        g.log, g.root = log, root
        yield g


def props(gw, mechanism: str, user: str, password: str, name: str) -> str:
    """A client properties file logging in as ``user``."""
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    path = os.path.join(gw.root, name)
    with open(path, "w") as f:
        f.write("security.protocol=SASL_PLAINTEXT\n"
                f"sasl.mechanism={mechanism}\n"
                f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
                f'username="{user}" password="{password}";\n')
    return path


def java(tools, main: str, *args: str, stdin: str | None = None, timeout: int = 180) -> str:
    proc = tool_runner.run(tools.classpath, f"org.apache.kafka.tools.{main}", *args,
                           stdin=stdin or "", timeout=timeout)
    assert proc.returncode == 0, (proc.args, proc.stdout[-2000:], proc.stderr[:2500])
    return proc.stdout


@pytest.fixture(scope="module")
def alice(tools, gw):
    """alice's SCRAM credentials, made with kafka-configs.sh."""
    admin = props(gw, "PLAIN", "admin", ADMIN_PW, "admin.properties")
    out = java(tools, "ConfigCommand", "--bootstrap-server", gw.bootstrap,
               "--command-config", admin, "--alter", "--entity-type", "users",
               "--entity-name", "alice", "--add-config",
               f"SCRAM-SHA-256=[iterations=8192,password={ALICE_PW}],"
               f"SCRAM-SHA-512=[password={ALICE_PW}]")
    assert "Completed updating config for user alice" in out, out
    return admin


def test_kafka_configs_writes_scram_credentials(alice, tools, gw):
    stored = scram_docs.describe(gw.log.store).users["alice"]
    assert {m: c.iterations for m, c in stored.items()} == {"SCRAM-SHA-256": 8192,
                                                             "SCRAM-SHA-512": 4096}


def test_console_producer_logs_in_with_scram(alice, tools, gw):
    import time

    time.sleep(0.5)  # the gateway reads new credentials within authorizer.refresh.ms
    client = props(gw, "SCRAM-SHA-256", "alice", ALICE_PW, "alice256.properties")
    java(tools, "ConsoleProducer", "--bootstrap-server", gw.bootstrap, "--topic", "secured",
         "--producer.config", client, stdin="one\ntwo\nthree\n")
    got = sorted(r["value"] for p in (0, 1)
                 for batch in gw.log.partition("secured", p).read(0)
                 for r in batch.to_pylist() if r["value"] in (b"one", b"two", b"three"))
    assert got == [b"one", b"three", b"two"]


def test_producer_performance_reauthenticates_and_runs_transactions_v2(alice, tools, gw):
    import time

    time.sleep(0.5)
    client = props(gw, "SCRAM-SHA-512", "alice", ALICE_PW, "alice512.properties")
    tid = f"perf-{uuid.uuid4().hex[:8]}"
    records = 2000
    started = time.monotonic()
    out = java(tools, "ProducerPerformance", "--topic", "secured", "--num-records", str(records),
               "--record-size", "100", "--throughput", "250", "--command-config", client,
               "--bootstrap-server", gw.bootstrap,
               "--transactional-id", tid, "--transaction-duration-ms", "500")
    took = time.monotonic() - started
    assert f"{records} records sent" in out, out
    assert took * 1000 > 2 * REAUTH_MS  # its connections outlived two session lifetimes
    doc = tx.describe(gw.log, tid)
    # v2: every end moved the epoch on; ~took / 0.5 s transactions, one init
    assert doc["state"] == "CompleteCommit" and doc["epoch"] >= 4, doc
    assert doc.get("bumped") and doc.get("ended") is not None


def test_kafka_configs_client_quotas_and_describing_users(alice, tools, gw):
    from log_layout import quotas

    admin = alice
    base = ["--bootstrap-server", gw.bootstrap, "--command-config", admin]
    java(tools, "ConfigCommand", *base, "--alter", "--entity-type", "clients",
         "--entity-name", "etl", "--add-config", "request_percentage=50,producer_byte_rate=1024")
    java(tools, "ConfigCommand", *base, "--alter", "--entity-type", "users",
         "--entity-name", "alice", "--entity-type", "clients", "--entity-default",
         "--add-config", "consumer_byte_rate=2048")
    found = quotas.describe(gw.log.store).entries
    assert found["Client:etl"] == {"request_percentage": 50, "producer_byte_rate": 1024}
    assert found["User:alice/Client:<default>"] == {"consumer_byte_rate": 2048}
    out = java(tools, "ConfigCommand", *base, "--describe", "--entity-type", "clients",
               "--entity-name", "etl")
    assert "request_percentage=50.0" in out and "producer_byte_rate=1024.0" in out, out
    # users: their quotas and their SCRAM credentials (DescribeUserScramCredentials)
    out = java(tools, "ConfigCommand", *base, "--describe", "--entity-type", "users",
               "--entity-name", "alice")
    assert "SCRAM-SHA-256=iterations=8192" in out and "SCRAM-SHA-512=iterations=4096" in out, out
    java(tools, "ConfigCommand", *base, "--alter", "--entity-type", "clients",
         "--entity-name", "etl", "--delete-config", "request_percentage")
    assert quotas.describe(gw.log.store).entries["Client:etl"] == {"producer_byte_rate": 1024}
