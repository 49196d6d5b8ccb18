"""``sparklog topics`` and ``sparklog produce`` (the gateway command runs in every
gateway test: GatewayProcess starts ``python -m jobs.cli gateway``)."""

from __future__ import annotations

import os
import subprocess
import sys

from jobs.cli import main
from log_layout import open_log
from tests.ingest_gateway.gateway_proc import ROOT, GatewayProcess


def test_topics_create_list_describe_alter_delete(tmp_path, capsys):
    store = str(tmp_path / "store")
    assert main(["--store", store, "topics", "create", "orders", "--partitions", "2",
                 "--config", "retention.ms=1000"]) == 0
    assert main(["topics", "--store", store, "create", "orders"]) == 2  # exists: error, no trace
    assert main(["topics", "--store", store, "create", "orders", "--if-not-exists"]) == 0
    assert main(["topics", "--store", store, "create", "x", "--config", "nope=1"]) == 2
    assert main(["topics", "--store", store, "list"]) == 0
    assert main(["topics", "--store", store, "alter", "orders", "--partitions", "3",
                 "--config", "cleanup.policy=compact"]) == 0
    assert main(["topics", "--store", store, "describe", "orders"]) == 0
    out = capsys.readouterr()
    assert "orders" in out.out and "high watermark" in out.out.replace("\n", " ") \
        or "high" in out.out
    assert "already exists" in out.err
    info = open_log(store).topic("orders")
    assert info.partitions == 3 and info.config.compacted and info.config.retention_ms == 1000
    assert main(["topics", "--store", store, "delete", "orders"]) == 0
    assert open_log(store).topics() == []
    assert main(["topics", "--store", store, "describe", "orders"]) == 2


def test_produce_reads_stdin_lines_with_keys(tmp_path):
    store = str(tmp_path / "store")
    lg = open_log(store)
    lg.create_topic("lines", {"partitions": 2})
    lines = "".join(f"user-{i % 5}:event {i}\n" for i in range(25_000)) + "no separator\n"
    with GatewayProcess(store) as gw:
        run = subprocess.run([sys.executable, "-m", "jobs.cli", "produce", "lines",
                              "--bootstrap-server", gw.url, "--key-separator", ":",
                              "--progress-every", "10000"],
                             input=lines.encode(), capture_output=True, timeout=120, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": ROOT})
    assert run.returncode == 0, run.stderr.decode()
    assert b"produced 25,001 records" in run.stderr
    assert b"10,000 records" in run.stderr  # the progress line
    rows = [r for p in lg.partitions("lines") for r in p.read_table(0).to_pylist()]
    assert len(rows) == 25_001
    by_value = {r["value"]: r["key"] for r in rows}
    assert by_value[b"event 7"] == b"user-2" and by_value[b"no separator"] is None
