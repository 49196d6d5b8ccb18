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
    lines = out.out.splitlines()
    assert "created topic orders with 2 partitions" in lines
    header = lines.index("topic orders: partitions") + 1
    assert lines[header].split() == ["PARTITION", "LEADER", "EPOCH", "LOG-START",
                                     "HIGH-WATERMARK", "RECORDS", "SIZE", "SEGMENTS",
                                     "LAST-COMMIT"]
    assert [line.split()[:6] for line in lines[header + 1:]] == [
        [str(p), "-", "0", "0", "0", "0"] for p in range(3)]
    assert "retention.ms               1000        topic" in out.out
    assert "already exists" in out.err
    info = open_log(store).topic("orders")
    assert info.partitions == 3 and info.config.compacted and info.config.retention_ms == 1000
    assert main(["topics", "--store", store, "delete", "orders"]) == 2  # no terminal, no --yes
    assert "add --yes" in capsys.readouterr().err and open_log(store).topics() == ["orders"]
    assert main(["topics", "--store", store, "delete", "orders", "--yes"]) == 0
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


def test_remove_config_overrides_and_list_them(tmp_path):
    """kafka-configs --delete-config: ``--delete-config KEY`` or ``--config KEY=`` puts the
    default back (``--config retention.ms=`` was an error)."""
    store = str(tmp_path / "store")
    lg = open_log(store)
    lg.create_topic("plain", {"partitions": 1})
    lg.create_topic("custom", {"partitions": 2, "retention.ms": 1000,
                               "cleanup.policy": "compact", "max.message.bytes": 500})
    run = sparklog("topics", "list", "--topics-with-overrides", "--store", store)
    assert text(run)[0].splitlines() == [
        "TOPIC   PARTITIONS  RECORDS  SIZE  OVERRIDES",
        "custom           2        0   0 B  cleanup.policy=compact,retention.ms=1000,"
        "max.message.bytes=500"]
    run = sparklog("topics", "alter-config", "custom", "--config", "retention.ms=",
                   "--delete-config", "cleanup.policy", "--store", store)
    assert run.returncode == 0, text(run)
    assert "retention.ms (back to the default 604800000)" in text(run)[0]
    config = open_log(store).topic("custom", refresh=True).config
    assert (config.retention_ms, config.cleanup_policy, config.max_message_bytes) == \
        (604_800_000, "delete", 500)
    run = sparklog("topics", "list", "--long", "--bytes", "--store", store)
    assert [line.split() for line in text(run)[0].splitlines()[1:]] == [
        ["custom", "2", "0", "0", "max.message.bytes=500"], ["plain", "1", "0", "0", "-"]]
    for args, needle in ((["--delete-config", "nope"], "not a topic config"),
                         (["--delete-config", "partitions"], "not a topic config"),
                         (["--config", "retention.ms=5", "--delete-config", "retention.ms"],
                          "also set with --config"),
                         ([], "nothing to alter")):
        assert_one_line_error(sparklog("topics", "alter", "custom", *args, "--store", store),
                              needle)
    assert_one_line_error(sparklog("topics", "alter", "nope", "--delete-config",
                                   "retention.ms", "--store", store), "'nope' does not exist")
