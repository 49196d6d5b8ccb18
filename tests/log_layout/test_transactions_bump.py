"""The coordinator's transactions v2 ends (``end_transaction(bump=True)``): the epoch
after, a retry answered alike, and at Kafka's last epoch a new producer id."""

from __future__ import annotations

from log_layout import open_log, paths
from log_layout import transactions as tx
from log_layout.versioned_doc import VersionedDoc
from tests.log_layout.txn_helpers import txn_append


def test_a_v2_end_bumps_and_at_the_last_epoch_hands_out_a_new_id(tmp_path):
    log = open_log(str(tmp_path / "store"))
    log.create_topic("t", {"partitions": 1})
    pid, epoch = tx.init_transactions(log, "app", 60_000)
    tx.add_partitions(log, "app", pid, epoch, [("t", 0)])
    txn_append(log, "t", 0, pid, epoch, [b"a"])
    assert tx.end_transaction(log, "app", pid, epoch, True, bump=True) == (pid, epoch + 1)
    assert tx.end_transaction(log, "app", pid, epoch, True, bump=True) == (pid, epoch + 1)
    assert tx.end_transaction(log, "app", pid, epoch + 1, True, bump=True) == (pid, epoch + 1)
    # the id's epoch at Kafka's last but one: the next end rotates the producer id
    VersionedDoc(log.store, paths.transaction_folder("app")).update(
        lambda cur: {**cur.doc, "epoch": tx.MAX_EPOCH - 1})
    tx.add_partitions(log, "app", pid, tx.MAX_EPOCH - 1, [("t", 0)])
    txn_append(log, "t", 0, pid, tx.MAX_EPOCH - 1, [b"b"])
    new_pid, new_epoch = tx.end_transaction(log, "app", pid, tx.MAX_EPOCH - 1, True, bump=True)
    assert new_pid != pid and new_epoch == 0
    snap = log.partition("t", 0).snapshot()
    assert snap.open_txns == {} and snap.producers[pid].epoch == tx.MAX_EPOCH
    # the retry of that end is answered with the new pair too
    assert tx.end_transaction(log, "app", pid, tx.MAX_EPOCH - 1, True, bump=True) == \
        (new_pid, 0)
    # a v1 end (no bump) keeps the pair
    tx.add_partitions(log, "app", new_pid, 0, [("t", 0)])
    txn_append(log, "t", 0, new_pid, 0, [b"c"])
    assert tx.end_transaction(log, "app", new_pid, 0, False) == (new_pid, 0)


def test_a_v1_late_marker_leaves_the_next_transaction_open(tmp_path):
    """Transactions v1 keep their epoch: the Prepare document's partition bounds stop a
    marker of transaction N, written late by a recovering caller, from ending N+1."""
    import json

    log = open_log(str(tmp_path / "store"))
    log.create_topic("t", {"partitions": 1})
    pid, epoch = tx.init_transactions(log, "v1", 60_000)
    tx.add_partitions(log, "v1", pid, epoch, [("t", 0)])
    txn_append(log, "t", 0, pid, epoch, [b"n"])
    assert tx.end_transaction(log, "v1", pid, epoch, True) == (pid, epoch)
    folder = paths.transaction_folder("v1")
    prepared = [json.loads(log.store.read(f"{folder}/{f.name}"))
                for f in log.store.list(folder)]
    prepared = [d for d in prepared if d["state"] == "PrepareCommit"][-1]
    assert prepared["bounds"] == [["t", 0, 1]]  # n at 0: the end was at 1
    # N+1 at the same epoch: n at 0, N's marker at 1, n+1 at 2
    tx.add_partitions(log, "v1", pid, epoch, [("t", 0)])
    txn_append(log, "t", 0, pid, epoch, [b"n+1"])
    # the recovering caller's late marker of N, with N's bound: N+1 stays open
    tx._marker(log, "t", 0, pid, epoch, True, None, False, 1)
    assert log.partition("t", 0).snapshot().open_txns == {pid: 2}
    # without the bound (what it was before), the same marker would have ended N+1
    log.partition("t", 0).writer().write_marker(pid, epoch, True)
    assert log.partition("t", 0).snapshot().open_txns == {}
