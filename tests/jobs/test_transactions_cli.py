"""``sparklog transactions`` (and ``log_layout.txn_admin`` under it) on a real store: a
committed, an ongoing and a hanging transaction, found and ended by hand."""

from __future__ import annotations

import pytest

from jobs.cli import main
from log_layout import open_log
from log_layout import transactions as tx
from log_layout.txn_admin import NoOpenTransaction, abort_hanging, find_hanging
from tests.jobs.cli_proc import assert_one_line_error, sparklog
from tests.log_layout.txn_helpers import plain_append, txn_append, values

ZOMBIE = 4242  # a producer id no transactional id names


@pytest.fixture
def store(tmp_path) -> str:
    url = str(tmp_path / "store")
    log = open_log(url)
    log.create_topic("t", {"partitions": 2})
    # "done": a committed transaction; "busy": one ongoing over t-0 and t-1
    pid, epoch = tx.init_transactions(log, "done", 60_000)
    tx.add_partitions(log, "done", pid, epoch, [("t", 0)])
    txn_append(log, "t", 0, pid, epoch, [b"a"])
    tx.end_transaction(log, "done", pid, epoch, True)
    pid, epoch = tx.init_transactions(log, "busy", 60_000)
    tx.add_partitions(log, "busy", pid, epoch, [("t", 0), ("t", 1)])
    txn_append(log, "t", 1, pid, epoch, [b"b"])
    # a hanging one: open in t-0, nobody's to end
    txn_append(log, "t", 0, ZOMBIE, 0, [b"z"])
    plain_append(log, "t", 0, [b"after"])
    return url


def cli(store: str, *args: str) -> int:
    return main(["transactions", "--store", store, *args])


def committed_values(store: str, partition: int) -> list[bytes]:
    return values(open_log(store), "t", partition, "read_committed")


def test_list_and_describe(store, capsys):
    assert cli(store, "list") == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0][:5] == ["TRANSACTIONAL_ID", "PRODUCER_ID", "EPOCH", "STATE", "PARTITIONS"]
    assert [(r[0], r[3], r[4]) for r in rows[1:]] == [("busy", "Ongoing", "2"),
                                                      ("done", "CompleteCommit", "0")]
    assert cli(store, "describe", "--transactional-id", "busy") == 0
    out = capsys.readouterr().out
    assert "Ongoing" in out and "2 partitions: t-0, t-1" in out and "60000 ms" in out


def test_describe_producers(store, capsys):
    assert cli(store, "describe-producers", "--topic", "t", "--partition", "0") == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    by_pid = {int(r[0]): r for r in rows}
    assert by_pid[ZOMBIE][1:] == ["0", "0", "2", "2"]  # epoch, seq, last offset, txn start
    done = tx.describe(open_log(store), "done")["producer_id"]
    assert by_pid[done][4] == "-"  # its transaction ended here (marker at offset 1)


def test_find_and_abort_a_hanging_transaction(store, capsys):
    log = open_log(store)
    found = find_hanging(log)
    assert [(h.topic, h.partition, h.producer_id, h.start_offset, h.transactional_id)
            for h in found] == [("t", 0, ZOMBIE, 2, None)]
    assert "no transactional id" in found[0].reason
    # the hanging transaction holds read_committed readers below it
    assert committed_values(store, 0) == [b"a"]
    assert cli(store, "find-hanging") == 0
    assert str(ZOMBIE) in capsys.readouterr().out
    assert cli(store, "abort", "--topic", "t", "--partition", "0", "--producer-id",
               str(ZOMBIE), "--yes") == 0
    assert "ABORT marker at offset 4" in capsys.readouterr().out
    assert committed_values(store, 0) == [b"a", b"after"]  # aborted "z" never shows
    assert find_hanging(log) == []
    with pytest.raises(NoOpenTransaction, match="no open transaction"):
        abort_hanging(log, "t", 0, ZOMBIE)


def test_an_ongoing_transaction_hangs_only_after_the_longest_timeout(store):
    log = open_log(store)
    started = tx.describe(log, "busy")["started_ms"]
    late = started + 16 * 60_000
    assert {(h.partition, h.transactional_id) for h in find_hanging(log, now_ms=late)
            } == {(0, None), (1, "busy")}


def test_abort_by_transactional_id_fences_its_producer(store, capsys):
    log = open_log(store)
    before = tx.describe(log, "busy")
    assert cli(store, "abort", "--transactional-id", "busy", "--yes") == 0
    assert "CompleteAbort" in capsys.readouterr().out
    after = tx.describe(log, "busy")
    assert after["state"] == "CompleteAbort" and after["epoch"] == before["epoch"] + 1
    assert committed_values(store, 1) == []
    with pytest.raises(Exception, match="fenced|epoch"):
        tx.end_transaction(log, "busy", before["producer_id"], before["epoch"], True)


def test_bad_uses_get_one_line_errors(store):
    assert_one_line_error(sparklog("transactions", "--store", store, "describe",
                                   "--transactional-id", "nobody"), "never used")
    run = sparklog("transactions", "--store", store, "abort", "--topic", "t")
    assert run.returncode == 2 and b"--producer-id" in run.stderr
    assert_one_line_error(sparklog("transactions", "--store", store, "abort", "--topic", "t",
                                   "--partition", "1", "--producer-id", "7", "--yes"),
                          "no open transaction")
    # no terminal to ask and no --yes: refused, nothing written
    assert_one_line_error(sparklog("transactions", "--store", store, "abort",
                                   "--transactional-id", "busy"), "confirm")
    assert tx.describe(open_log(store), "busy")["state"] == "Ongoing"
