"""``sparklog consume`` and ``sparklog groups``: from the store alone, and through a gateway."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest

from jobs.cli import main
from log_layout import open_log

from tests.jobs.cli_proc import NO_GATEWAY, assert_one_line_error, sparklog, text


@pytest.fixture
def store(tmp_path):
    path = str(tmp_path / "store")
    lg = open_log(path)
    lg.create_topic("clicks", {"partitions": 2})
    for p in range(2):
        w = lg.partition("clicks", p).claim("test")
        w.append(pa.table({"key": [b"k%d" % i for i in range(4)],
                           "value": [b"p%d-v%d" % (p, i) for i in range(4)],
                           "timestamp": pa.array([1000 + i for i in range(4)], pa.int64())}))
    return path


def lines(capsys):
    out = capsys.readouterr().out
    return [line.split("\t") for line in out.splitlines()]


def test_consume_from_beginning_reads_the_store(store, capsys):
    assert main(["--store", store, "consume", "clicks", "--from-beginning",
                 "--max-messages", "8"]) == 0
    rows = lines(capsys)
    assert sorted((int(r[0]), int(r[1])) for r in rows) == [(p, o) for p in range(2)
                                                            for o in range(4)]
    assert ["0", "2", "1970-01-01T00:00:01.002Z", "k2", "p0-v2"] in rows  # ISO 8601, UTC
    assert main(["--store", store, "consume", "clicks", "--partition", "0", "--offset", "2",
                 "--max-messages", "1", "--time-format", "ms"]) == 0
    assert lines(capsys) == [["0", "2", "1002", "k2", "p0-v2"]]


def test_consume_partition_from_offset_as_json(store, capsys):
    assert main(["--store", store, "consume", "clicks", "--partition", "1", "--offset", "2",
                 "--max-messages", "2", "--format", "json"]) == 0
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["partition"], d["offset"], d["value"]) for d in docs] == [(1, 2, "p1-v2"),
                                                                          (1, 3, "p1-v3")]


def test_consume_refuses_bad_flags(store, capsys):
    assert main(["--store", store, "consume", "clicks", "--offset", "2"]) == 2
    assert "--offset needs --partition" in capsys.readouterr().err
    assert main(["--store", store, "consume", "nope", "--max-messages", "1"]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:  # argparse: usage and one line, status 2
        main(["--store", store, "consume", "clicks", "--partition", "0", "--offset", "-5"])
    assert exit_.value.code == 2
    assert "--offset: expected an integer >= 0, got '-5'" in capsys.readouterr().err


def test_groups_describe_from_the_store_without_gateway(store, capsys):
    lg = open_log(store)
    lg.write_group_offsets("billing", {"group": "billing", "generation": 3, "strategy": "range",
                                       "offsets": {"clicks": {"0": {"offset": 1}}}})
    assert main(["--store", store, "groups", "--bootstrap-server", NO_GATEWAY, "list"]) == 0
    assert capsys.readouterr().out.split() == ["billing"]
    assert main(["--store", store, "groups", "--bootstrap-server", NO_GATEWAY,
                 "describe", "billing", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["members_known"] is False and doc["generation"] == 3
    assert [(p["partition"], p["committed"], p["high_watermark"], p["lag"])
            for p in doc["partitions"]] == [(0, 1, 4, 3), (1, None, 4, None)]
    assert main(["--store", store, "groups", "--bootstrap-server", NO_GATEWAY,
                 "describe", "billing"]) == 0
    out = capsys.readouterr().out
    assert "LAG" in out and "unknown (no gateway answered)" in out
    assert main(["--store", store, "groups", "--bootstrap-server", NO_GATEWAY,
                 "describe", "nobody"]) == 2


def test_consume_with_group_through_gateway_commits_and_describe_shows_lag(
        gateway, gateway_store, gateway_log, capsys, monkeypatch):
    url, options = gateway_store
    options = options or {}
    if "client_kwargs" in options:  # S3: the endpoint from settings, keys from the environment
        monkeypatch.setenv("SPARKLOG_STORE_S3_ENDPOINT_URL",
                           options["client_kwargs"]["endpoint_url"])
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", options["key"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", options["secret"])
        monkeypatch.setenv("AWS_DEFAULT_REGION", options["client_kwargs"]["region_name"])
    elif "webhdfs_port" in options:  # HDFS: the WebHDFS port and user from settings
        monkeypatch.setenv("SPARKLOG_STORE_HDFS_HTTP_PORT", str(options["webhdfs_port"]))
        monkeypatch.setenv("SPARKLOG_STORE_HDFS_USER", options.get("user", ""))
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    gateway_log.create_topic(topic, {"partitions": 2})
    for p in range(2):
        status, body, _ = gateway.request("POST", f"/topics/{topic}/partitions/{p}",
                                          body={"records": [{"value": f"v{i}"} for i in range(3)]})
        assert status == 200, body
    group = f"cli-{uuid.uuid4().hex[:8]}"
    assert main(["--store", url, "consume", topic, "--group", group, "--from-beginning",
                 "--bootstrap-server", gateway.url, "--max-messages", "6"]) == 0
    assert len(lines(capsys)) == 6
    assert main(["--store", url, "groups", "--bootstrap-server", gateway.url,
                 "describe", group, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["members_known"] is True and doc["members"] == []
    assert {(p["partition"], p["committed"], p["lag"]) for p in doc["partitions"]} == \
        {(0, 3, 0), (1, 3, 0)}
    # more records: lag shows without any member
    gateway.request("POST", f"/topics/{topic}/partitions/0", body={"records": [{"value": 1}]})
    assert main(["--store", url, "groups", "--bootstrap-server", NO_GATEWAY,
                 "describe", group, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {p["partition"]: p["lag"] for p in doc["partitions"]} == {0: 1, 1: 0}
    assert main(["--store", url, "consume", topic, "--group", group, "--via-gateway",
                 "--bootstrap-server", gateway.url, "--max-messages", "1"]) == 0
    assert [r[1] for r in lines(capsys)] == ["3"]


def test_consume_group_with_the_gateway_down_is_a_one_line_error(store):
    assert_one_line_error(sparklog("consume", "clicks", "--group", "g", "--store", store,
                                   "--bootstrap-server", NO_GATEWAY, "--max-messages", "1"),
                          "gateway http://127.0.0.1:9 unreachable", "Connection refused")
    assert_one_line_error(sparklog("consume", "clicks", "--group", "g", "--store", store,
                                   "--bootstrap-server", "127.0.0.1:9", "--max-messages", "1"),
                          "gateway http://127.0.0.1:9 unreachable")
    assert_one_line_error(sparklog("consume", "clicks", "--group", "g", "--store", store,
                                   "--bootstrap-server", "ftp://host", "--max-messages", "1"),
                          "--bootstrap-server", "http(s) URL or HOST:PORT")


def test_consume_group_takes_a_gateway_without_scheme(local_gateway):
    """``HOST:PORT`` means http://HOST:PORT, as for produce (it was a traceback)."""
    gw, path = local_gateway
    topic = f"c-{uuid.uuid4().hex[:8]}"
    open_log(path).create_topic(topic, {"partitions": 1})
    status, body, _ = gw.request("POST", f"/topics/{topic}/partitions/0",
                                 body={"records": [{"value": "v0"}, {"value": "v1"}]})
    assert status == 200, body
    run = sparklog("consume", topic, "--store", path, "--group", f"g-{topic}",
                   "--from-beginning", "--bootstrap-server",
                   gw.url.replace("http://127.0.0.1", "localhost"),
                   "--max-messages", "2")
    out, err = text(run)
    assert run.returncode == 0, err
    assert [line.split("\t")[1] for line in out.splitlines()] == ["0", "1"]


def test_consume_isolation_level_hides_open_and_aborted_transactions(store, capsys):
    from log_layout import transactions
    from tests.log_layout.txn_helpers import txn_append

    lg = open_log(store)
    pid, epoch = transactions.init_transactions(lg, "cli-app", 60_000)
    transactions.add_partitions(lg, "cli-app", pid, epoch, [("clicks", 0)])
    txn_append(lg, "clicks", 0, pid, epoch, [b"aborted"])
    transactions.end_transaction(lg, "cli-app", pid, epoch, commit=False)
    pid, epoch = transactions.init_transactions(lg, "cli-app", 60_000)
    transactions.add_partitions(lg, "cli-app", pid, epoch, [("clicks", 0)])
    txn_append(lg, "clicks", 0, pid, epoch, [b"open"])

    def values(*flags: str) -> list[str]:
        assert main(["--store", store, "consume", "clicks", "--partition", "0", "--offset", "0",
                     "--timeout-ms", "500", "--format", "%v\\n", *flags]) == 0
        return capsys.readouterr().out.split()

    assert values() == ["p0-v0", "p0-v1", "p0-v2", "p0-v3", "aborted", "open"]
    assert values("--isolation-level", "read_committed") == ["p0-v0", "p0-v1", "p0-v2",
                                                             "p0-v3"]
    with pytest.raises(SystemExit) as refused:
        main(["--store", store, "consume", "clicks", "--isolation-level", "dirty"])
    assert refused.value.code == 2 and "invalid choice: 'dirty'" in capsys.readouterr().err
