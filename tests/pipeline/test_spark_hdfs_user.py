"""Spark acts on HDFS as the store's user: ``store.hdfs.user`` and
``store.hdfs.delegation.token`` reach the Hadoop client of the JVM ``sparklog
materialize`` starts (``pipeline.spark.hadoop_env``).

On a MiniDFSCluster with permission checks on (``MiniHdfs(permissions=True)``; its
NameNode also issues and accepts delegation tokens without Kerberos): alice's store
is a folder only alice may write. The CLI runs with ``HADOOP_USER_NAME=mallory`` in its
environment, a user the cluster refuses there, so a table Spark writes is there, owned
by alice, only if alice's credentials reached Spark's JVM. The same command without
them is refused. Each run starts a JVM (~30-40 s here).
"""

from __future__ import annotations

import json
import uuid

import pytest
import urllib3

from bench.hdfs_side import MiniHdfs
from log_layout import open_log
from tests import jvm
from tests.jobs.cli_proc import sparklog, text
from tests.pipeline.conftest import append

pytestmark = [pytest.mark.hdfs, pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def hdfs():
    with MiniHdfs(permissions=True, java_options=jvm.QUICK_START) as server:
        yield server


def webhdfs(hdfs, method: str, path: str, op: str, user: str, **params) -> tuple[int, dict]:
    """One WebHDFS call as ``user``: (HTTP status, JSON answer)."""
    query = "&".join([f"op={op}", f"user.name={user}", *(f"{k}={v}" for k, v in params.items())])
    r = urllib3.request(method, f"http://127.0.0.1:{hdfs.http_port}/webhdfs/v1{path}?{query}",
                        timeout=30)
    return r.status, json.loads(r.data or b"{}")


def owner(hdfs, path: str) -> str:
    status, doc = webhdfs(hdfs, "GET", path, "GETFILESTATUS", "alice")
    assert status == 200, doc
    return doc["FileStatus"]["owner"]


@pytest.fixture
def alice_store(hdfs, monkeypatch):
    """(store URL, its path, topic): alice's store, a compacted topic with 2 live keys;
    the CLI's environment: the NameNode's HTTP port, and mallory as Hadoop's user."""
    path = f"/alice-{uuid.uuid4().hex[:8]}"
    log = open_log(hdfs.url(path), storage_options={"webhdfs_port": hdfs.http_port,
                                                    "user": "alice"})
    log.create_topic("kv", {"partitions": 1, "cleanup.policy": "compact"})
    append(log, "kv", 0, ["a1", "b1", None], keys=["a", "b", "a"])
    append(log, "kv", 0, ["c1"], keys=["c"])
    assert owner(hdfs, path) == "alice"
    # mallory may not write in alice's store: what Spark would be without her credentials
    status, doc = webhdfs(hdfs, "PUT", f"{path}/_tables", "MKDIRS", "mallory")
    assert status == 403 and "user=mallory" in doc["RemoteException"]["message"]
    monkeypatch.setenv("SPARKLOG_STORE_HDFS_HTTP_PORT", str(hdfs.http_port))
    monkeypatch.setenv("HADOOP_USER_NAME", "mallory")
    for key in ("SPARKLOG_STORE_HDFS_USER", "SPARKLOG_STORE_HDFS_DELEGATION_TOKEN",
                "HADOOP_TOKEN", "HADOOP_TOKEN_FILE_LOCATION"):
        monkeypatch.delenv(key, raising=False)
    return hdfs.url(path), path, "kv"


def materialize(url: str, topic: str, table: str):
    run = sparklog("--store", url, "materialize", topic, "--table", table, "--once",
                   "--value-format", "string", timeout=900)
    return run, *text(run)


def test_a_table_materialised_as_the_store_user_is_hers(hdfs, alice_store, monkeypatch):
    url, path, topic = alice_store
    monkeypatch.setenv("SPARKLOG_STORE_HDFS_USER", "alice")
    run, _, err = materialize(url, topic, "as_alice")
    assert run.returncode == 0, err[-3000:]
    assert "as_alice: 2 rows" in err  # b and c: a was deleted by its tombstone
    assert owner(hdfs, f"{path}/_tables/as_alice/_delta_log/00000000000000000000.json") == "alice"
    assert owner(hdfs, f"{path}/_tables/_checkpoints/as_alice") == "alice"


def test_a_delegation_token_reaches_spark_and_acts_as_its_owner(hdfs, alice_store,
                                                                 monkeypatch):
    url, path, topic = alice_store
    status, doc = webhdfs(hdfs, "GET", "/", "GETDELEGATIONTOKEN", "alice", renewer="alice")
    assert status == 200, doc
    token = doc["Token"]["urlString"]
    # the store sends the token instead of a user (this cluster, without Kerberos, reads
    # the log as its default web user); Spark's RPC client authenticates with the token
    monkeypatch.setenv("SPARKLOG_STORE_HDFS_DELEGATION_TOKEN", token)
    run, out, err = materialize(url, topic, "by_token")
    assert run.returncode == 0, err[-3000:]
    assert "by_token: 2 rows" in err
    assert owner(hdfs, f"{path}/_tables/by_token/_delta_log/00000000000000000000.json") == "alice"
    assert token not in out + err


def test_without_the_store_user_spark_is_refused(hdfs, alice_store):
    url, _, topic = alice_store
    run, _, err = materialize(url, topic, "as_nobody")
    assert run.returncode == 2 and "Traceback" not in err, err[-3000:]
    # one line, with HDFS's reason (py4j's own first line said only which call failed)
    line = err.strip().splitlines()[-1]
    assert line.startswith("sparklog: error: ") and "Permission denied: user=mallory" in line, err
