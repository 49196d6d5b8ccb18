"""``sparklog topics`` (the gateway command runs in every gateway test:
GatewayProcess starts ``python -m jobs.cli gateway``)."""

from __future__ import annotations

from jobs.cli import main
from log_layout import open_log
from tests.jobs.cli_proc import assert_one_line_error, sparklog, text


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


def test_store_after_the_command_name(tmp_path):
    """``sparklog topics create x --store d`` (it was "unrecognized arguments")."""
    store = str(tmp_path / "store")
    run = sparklog("topics", "create", "after", "--store", store, "--partitions", "2")
    assert run.returncode == 0, text(run)[1]
    run = sparklog("topics", "list", "--store", store, "--set", "store.fsync=false")
    assert run.returncode == 0 and text(run)[0].split() == ["after"], text(run)
    assert open_log(store).topic("after").partitions == 2
    # the innermost --set wins, and every one is checked
    assert_one_line_error(sparklog("--set", "store.fsync=false", "topics", "list",
                                   "--store", store, "--set", "nope=1"), "nope")
    assert_one_line_error(sparklog("topics", "describe", "nope", "--store", store),
                          "topic 'nope' does not exist")
