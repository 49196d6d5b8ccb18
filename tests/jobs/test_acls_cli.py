"""``sparklog acls`` and ``sparklog quotas`` end to end: through ``jobs.cli.main`` (the
store read back with ``log_layout``) and as a real subprocess for the exit status and
the one-line errors."""

from __future__ import annotations

import json

import pytest

from jobs.cli import main
from log_layout import acls, open_log, quotas
from log_layout.acls import AclBinding
from tests.jobs.cli_proc import assert_one_line_error, on_a_terminal, sparklog, text


@pytest.fixture
def store(tmp_path) -> str:
    return str(tmp_path / "store")


def stored(store: str) -> set[tuple[str, ...]]:
    return {(b.resource_type, b.name, b.pattern_type, b.principal, b.host, b.operation,
             b.permission) for b in acls.list_acls(open_log(store).store)}


def acl_cli(store: str, *args: str) -> int:
    return main(["acls", "--store", store, *args])


def test_add_list_remove(store, capsys):
    assert acl_cli(store, "--add", "--allow-principal", "User:alice", "--operation", "read",
                   "--operation", "Write", "--topic", "clicks", "--topic", "views") == 0
    assert acl_cli(store, "--add", "--deny-principal", "User:mallory", "--deny-host",
                   "10.0.0.9", "--topic", "*") == 0
    assert stored(store) == {
        ("Topic", t, "LITERAL", "User:alice", "*", op, "Allow")
        for t in ("clicks", "views") for op in ("Read", "Write")} | {
        ("Topic", "*", "LITERAL", "User:mallory", "10.0.0.9", "All", "Deny")}
    out = capsys.readouterr().out
    assert "added 4 ACLs" in out and "added 1 ACL" in out
    assert acl_cli(store, "--list", "--topic", "clicks") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["RESOURCE-TYPE", "NAME", "PATTERN-TYPE", "PRINCIPAL", "HOST",
                                "OPERATION", "PERMISSION"]
    assert [line.split() for line in lines[1:]] == [
        ["Topic", "clicks", "LITERAL", "User:alice", "*", "Read", "Allow"],
        ["Topic", "clicks", "LITERAL", "User:alice", "*", "Write", "Allow"]]
    assert acl_cli(store, "--list", "--topic", "clicks", "--resource-pattern-type",
                   "match") == 0
    assert "User:mallory" in capsys.readouterr().out  # the * ACL applies to clicks
    # removing asks first: no terminal, no --yes -> refused, nothing removed
    assert acl_cli(store, "--remove", "--topic", "clicks") == 2
    assert "add --yes" in capsys.readouterr().err and len(stored(store)) == 5
    assert acl_cli(store, "--remove", "--topic", "clicks", "--allow-principal", "User:alice",
                   "--operation", "Write", "--yes") == 0
    assert "removed 1 ACL" in capsys.readouterr().out
    # --force: kafka-acls.sh's name, kept as the same flag
    assert acl_cli(store, "--remove", "--topic", "views", "--force") == 0
    capsys.readouterr()
    assert stored(store) == {("Topic", "clicks", "LITERAL", "User:alice", "*", "Read", "Allow"),
                             ("Topic", "*", "LITERAL", "User:mallory", "10.0.0.9", "All",
                              "Deny")}
    assert acl_cli(store, "--list", "--json", "--principal", "User:mallory") == 0
    assert json.loads(capsys.readouterr().out) == [AclBinding.create(
        "Topic", "*", principal="User:mallory", host="10.0.0.9", operation="All",
        permission="Deny").to_json()]


@pytest.mark.parametrize("answer, removed", [(b"n\n", False), (b"\n", False), (b"y\n", True)])
def test_remove_asks_on_a_terminal(store, answer, removed):
    assert acl_cli(store, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                   "--operation", "Write", "--topic", "clicks") == 0
    status, out, err = on_a_terminal("acls", "--store", store, "--remove", "--topic", "clicks",
                                     answer=answer)
    assert "Remove 2 ACLs? [y/N]" in out and "User:alice" in out  # what goes, then the question
    assert (stored(store) == set()) is removed
    if removed:
        assert status == 0 and "removed 2 ACLs" in out
    else:
        assert status == 2 and "Remove 2 ACLs: not confirmed, nothing changed" in err
        assert "Traceback" not in err


def test_producer_and_consumer_conveniences(store):
    assert acl_cli(store, "--add", "--allow-principal", "User:app", "--producer",
                   "--idempotent", "--topic", "logs-", "--resource-pattern-type",
                   "prefixed", "--transactional-id", "tx") == 0
    assert stored(store) == {
        ("Topic", "logs-", "PREFIXED", "User:app", "*", "Write", "Allow"),
        ("Topic", "logs-", "PREFIXED", "User:app", "*", "Describe", "Allow"),
        ("Topic", "logs-", "PREFIXED", "User:app", "*", "Create", "Allow"),
        ("TransactionalId", "tx", "PREFIXED", "User:app", "*", "Write", "Allow"),
        ("TransactionalId", "tx", "PREFIXED", "User:app", "*", "Describe", "Allow"),
        ("Cluster", "kafka-cluster", "LITERAL", "User:app", "*", "IdempotentWrite", "Allow")}
    assert acl_cli(store, "--remove", "--force", "--topic", "logs-", "--transactional-id",
                   "tx", "--cluster", "--resource-pattern-type", "any") == 0
    assert stored(store) == set()
    assert acl_cli(store, "--add", "--allow-principal", "User:c", "--allow-host", "10.1.1.1",
                   "--consumer", "--topic", "clicks", "--group", "g") == 0
    assert stored(store) == {
        ("Topic", "clicks", "LITERAL", "User:c", "10.1.1.1", "Read", "Allow"),
        ("Topic", "clicks", "LITERAL", "User:c", "10.1.1.1", "Describe", "Allow"),
        ("Group", "g", "LITERAL", "User:c", "10.1.1.1", "Read", "Allow")}


@pytest.mark.parametrize("args, says", [
    (["--list", "--allow-principal", "User:a"], "--allow-principal is not used with --list"),
    (["--add", "--topic", "t"], "--add needs an --allow-principal"),
    (["--add", "--allow-principal", "User:a"], "--add needs a resource: at least one of --topic"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type",
      "match"], "adding ACLs takes literal or prefixed"),
    (["--add", "--allow-principal", "User:a", "--producer"], "--producer needs a --topic"),
    (["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"],
     "--consumer needs a --topic and a --group"),
    (["--add", "--allow-principal", "User:a", "--producer", "--topic", "t", "--operation",
      "Read"], "--operation is not used with --producer"),
    (["--add", "--allow-host", "1.2.3.4", "--deny-principal", "User:a", "--topic", "t"],
     "--allow-host needs a --allow-principal"),
    (["--remove", "--principal", "User:a", "--topic", "t"], "--principal is only used"),
    (["--remove", "--operation", "Read", "--topic", "t"], "--remove --operation needs the"),
    (["--add", "--remove", "--topic", "t"], "not allowed with argument"),
    (["--list", "--resource-pattern-type", "regex"], "expected one of literal, prefixed"),
])
def test_wrong_flags_are_usage_errors(store, capsys, args, says):
    with pytest.raises(SystemExit) as e:
        acl_cli(store, *args)
    assert e.value.code == 2
    assert says in capsys.readouterr().err
    assert stored(store) == set()


@pytest.mark.parametrize("args, says", [
    (["--allow-principal", "alice", "--topic", "t"], "invalid ACL principal 'alice'"),
    (["--allow-principal", "User:a", "--allow-host", "gw.example", "--topic", "t"],
     "invalid ACL host 'gw.example'"),
    (["--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
     "resource type Group only supports"),
    (["--allow-principal", "User:a", "--operation", "Frob", "--topic", "t"],
     "invalid ACL operation 'Frob'"),
    (["--allow-principal", "User:a", "--cluster", "--operation", "Read"],
     "resource type Cluster only supports"),
])
def test_bad_values_are_one_line_errors(store, args, says):
    run = sparklog("acls", "--store", store, "--add", *args)
    assert_one_line_error(run, says)
    assert stored(store) == set()


def test_quotas_alter_and_describe(store, capsys):
    def q(*args: str) -> int:
        return main(["quotas", "--store", store, *args])

    assert q("--describe") == 0 and "no quotas" in capsys.readouterr().out
    assert q("--alter", "--user", "alice", "--add-config", "producer_byte_rate=1024") == 0
    assert q("--alter", "--user-default", "--add-config",
             "producer_byte_rate=100,consumer_byte_rate=200") == 0
    found = quotas.describe(open_log(store).store)
    assert found.entries == {"User:alice": {"producer_byte_rate": 1024},
                             "<default>": {"producer_byte_rate": 100, "consumer_byte_rate": 200}}
    capsys.readouterr()
    assert q("--describe", "--user", "User:alice") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["ENTITY", "PRODUCER_BYTE_RATE", "CONSUMER_BYTE_RATE",
                              "REQUEST_PERCENTAGE"]
    assert out[1].split() == ["User:alice", "1024", "-", "-"]
    assert out[2] == ("in force for User:alice: producer_byte_rate=1024 (own), "
                      "consumer_byte_rate=200 (<default>)")
    # removing a quota asks first: no terminal, no --yes -> refused, nothing removed
    assert q("--alter", "--user", "alice", "--delete-config", "producer_byte_rate") == 2
    assert "add --yes" in capsys.readouterr().err
    assert quotas.describe(open_log(store).store).quota("User:alice",
                                                        "producer_byte_rate") == 1024
    assert q("--alter", "--user", "alice", "--delete-config", "producer_byte_rate",
             "--yes") == 0
    assert quotas.describe(open_log(store).store).quota("User:alice",
                                                        "producer_byte_rate") == 100
    # a quota not set: nothing to remove, nothing asked
    assert q("--alter", "--user", "alice", "--delete-config", "consumer_byte_rate") == 0


@pytest.mark.parametrize("answer, removed", [(b"n\n", False), (b"y\n", True)])
def test_quotas_delete_config_asks_on_a_terminal(store, answer, removed):
    assert main(["quotas", "--store", store, "--alter", "--user-default", "--add-config",
                 "producer_byte_rate=100,consumer_byte_rate=200"]) == 0
    status, out, err = on_a_terminal("quotas", "--store", store, "--alter", "--user-default",
                                     "--delete-config", "producer_byte_rate", answer=answer)
    question = "Remove the quota producer_byte_rate=100 of <default>?"
    assert f"{question} [y/N]" in out
    left = quotas.describe(open_log(store).store).entries["<default>"]
    if removed:
        assert status == 0 and left == {"consumer_byte_rate": 200}
    else:
        assert status == 2 and f"{question[:-1]}: not confirmed, nothing changed" in err
        assert left == {"producer_byte_rate": 100, "consumer_byte_rate": 200}


@pytest.mark.parametrize("args, says", [
    (["--alter", "--user", "a", "--add-config", "producer_byte_rate=0"], "at least 1"),
    (["--alter", "--user", "a", "--add-config", "producer_byte_rate=fast"], "whole number"),
    (["--alter", "--user", "a", "--add-config", "controller_mutation_rate=5"],
     "not a quota config"),
    (["--alter", "--user", "a", "--add-config", "request_percentage=none"], "above 0"),
    (["--alter", "--user", "a", "--add-config", "producer_byte_rate"], "expected KEY=VALUE"),
    (["--alter", "--user", "a", "--delete-config", "nope"], "not a quota config"),
])
def test_bad_quotas_are_one_line_errors(store, args, says):
    assert_one_line_error(sparklog("quotas", "--store", store, *args), says)
    assert quotas.describe(open_log(store).store).entries == {}


def test_quotas_wrong_flags_exit_2(store):
    run = sparklog("quotas", "--store", store, "--alter", "--add-config",
                   "producer_byte_rate=5")
    out, err = text(run)
    assert run.returncode == 2 and "--alter needs --user NAME, --user-default, --client" in err
    assert "Traceback" not in err


def test_quotas_for_client_ids(store, capsys):
    def q(*args: str) -> int:
        return main(["quotas", "--store", store, *args])

    assert q("--alter", "--client", "etl", "--add-config", "request_percentage=50") == 0
    assert q("--alter", "--user", "alice", "--client-default", "--add-config",
             "consumer_byte_rate=2048") == 0
    assert q("--alter", "--client-default", "--add-config", "consumer_byte_rate=10") == 0
    found = quotas.describe(open_log(store).store)
    assert found.entries == {"Client:etl": {"request_percentage": 50},
                             "User:alice/Client:<default>": {"consumer_byte_rate": 2048},
                             "Client:<default>": {"consumer_byte_rate": 10}}
    capsys.readouterr()
    assert q("--describe", "--user", "alice", "--client", "etl") == 0
    out = capsys.readouterr().out
    assert ("in force for User:alice/Client:etl: consumer_byte_rate=2048 "
            "(User:alice/Client:<default>), request_percentage=50 (Client:etl)") in out, out
    assert q("--alter", "--client", "", "--add-config", "request_percentage=5") == 2


def test_subject_acls(store, capsys):
    """--subject: the Schema Registry's Subject resources (literal or prefixed), with the
    registry's operations only; listed with the rest, removed by their own filter."""
    assert acl_cli(store, "--add", "--allow-principal", "User:carol", "--operation", "Write",
                   "--operation", "Read", "--subject", "clicks-", "--resource-pattern-type",
                   "prefixed") == 0
    assert acl_cli(store, "--add", "--allow-principal", "User:carol", "--operation", "read",
                   "--topic", "clicks") == 0
    assert stored(store) == {("Subject", "clicks-", "PREFIXED", "User:carol", "*", op, "Allow")
                             for op in ("Read", "Write")} | {
        ("Topic", "clicks", "LITERAL", "User:carol", "*", "Read", "Allow")}
    capsys.readouterr()
    assert acl_cli(store, "--list", "--subject", "clicks-value", "--resource-pattern-type",
                   "match") == 0
    assert [line.split()[:3] for line in capsys.readouterr().out.splitlines()[1:]] == [
        ["Subject", "clicks-", "PREFIXED"]] * 2
    # not a registry operation: refused, naming the ones it takes
    assert acl_cli(store, "--add", "--allow-principal", "User:carol", "--operation", "Create",
                   "--subject", "x") != 0
    assert "Subject only supports All, AlterConfigs, Delete" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a usage error: the conveniences are Kafka's
        acl_cli(store, "--add", "--allow-principal", "User:carol", "--producer",
                "--topic", "t", "--subject", "t-value")
    assert acl_cli(store, "--remove", "--subject", "clicks-", "--resource-pattern-type",
                   "prefixed", "--yes") == 0
    assert stored(store) == {("Topic", "clicks", "LITERAL", "User:carol", "*", "Read", "Allow")}
