"""Transactions in log_layout: the transaction log's states, fencing, markers, the last
stable offset, read_committed against read_uncommitted, group offsets, timeouts;
a crash at every write of end_transaction; races between a zombie and its successor
and between the timeout aborter and a commit. Every backend (``log``)."""

from __future__ import annotations

import json
import threading

import pyarrow as pa
import pytest

from log_layout import (InvalidProducerEpoch, InvalidRecords, InvalidTopicName, InvalidTxnState,
                        InvalidMaintenance, Manifest, ProducerBatch, ProducerFenced,
                        transactions as tx)
from log_layout.direct_reader import DirectReader
from log_layout.manifest import TXN_DELTA_FORMAT, TXN_FORMAT
from tests.log_layout.txn_helpers import (Crash, crashing_log, offsets, plain_append,
                                          txn_append, values)

RC, RU = "read_committed", "read_uncommitted"
T0 = 1_000_000


@pytest.fixture
def topic(log):
    log.create_topic("t", {"partitions": 3})
    return "t"


def _begin(log, tid="app", parts=((("t", 0)),), now=T0, timeout=60_000):
    pid, epoch = tx.init_transactions(log, tid, timeout, now_ms=now)
    tx.add_partitions(log, tid, pid, epoch, list(parts), now_ms=now)
    return pid, epoch


def test_state_transitions(log, topic):
    pid, epoch = tx.init_transactions(log, "app", 60_000, now_ms=T0)
    assert tx.describe(log, "app")["state"] == "Empty" and epoch == 0
    assert tx.list_transactions(log) == ["app"]
    tx.add_partitions(log, "app", pid, epoch, [("t", 0), ("t", 1)], now_ms=T0 + 1)
    doc = tx.describe(log, "app")
    assert (doc["state"], doc["partitions"], doc["started_ms"]) == \
        ("Ongoing", [["t", 0], ["t", 1]], T0 + 1)
    tx.add_offsets(log, "app", pid, epoch, "g", {"src": {0: 5}}, now_ms=T0 + 2)
    assert tx.describe(log, "app")["offsets"] == {"g": {"src": {"0": 5}}}
    txn_append(log, "t", 0, pid, epoch, [b"a", b"b"])
    tx.end_transaction(log, "app", pid, epoch, True, now_ms=T0 + 3)
    doc = tx.describe(log, "app")
    assert (doc["state"], doc["partitions"], doc["offsets"]) == ("CompleteCommit", [], {})
    tx.end_transaction(log, "app", pid, epoch, True)  # a retry: nothing to do
    # the next transaction of the same epoch, aborted
    tx.add_partitions(log, "app", pid, epoch, [("t", 2)])
    assert tx.describe(log, "app")["state"] == "Ongoing"
    txn_append(log, "t", 2, pid, epoch, [b"c"])
    tx.end_transaction(log, "app", pid, epoch, False)
    assert tx.describe(log, "app")["state"] == "CompleteAbort"
    assert values(log, "t", 0, RC) == [b"a", b"b"] and values(log, "t", 2, RC) == []
    assert values(log, "t", 2, RU) == [b"c"]  # an aborted record stays for read_uncommitted
    with pytest.raises(InvalidTxnState):
        tx.add_partitions(log, "nobody", 1, 0, [("t", 0)])
    with pytest.raises(InvalidTopicName):
        log.create_topic("_transactions")
    with pytest.raises(ValueError):
        tx.init_transactions(log, "app", 0)


def test_prepared_transaction_refuses_the_other_outcome(log, topic):
    pid, epoch = _begin(log)
    txn_append(log, "t", 0, pid, epoch, [b"a"])
    doc = tx.describe(log, "app")
    # a commit decided (the commit point) and not yet completed: abort is refused
    tx._doc(log, "app").update(lambda cur: {**cur.doc, "state": "PrepareCommit"})
    with pytest.raises(InvalidTxnState):
        tx.end_transaction(log, "app", pid, epoch, False)
    with pytest.raises(InvalidTxnState):
        tx.add_partitions(log, "app", pid, epoch, [("t", 1)])
    assert tx.recover(log, "app") == "CompleteCommit"
    assert values(log, "t", 0, RC) == [b"a"] and doc["state"] == "Ongoing"


def test_init_fences_the_older_epoch_and_aborts_its_transaction(log, topic):
    pid, epoch = _begin(log, parts=[("t", 0), ("t", 1)])
    txn_append(log, "t", 0, pid, epoch, [b"zombie"])
    pid2, epoch2 = tx.init_transactions(log, "app", 60_000)
    assert pid2 == pid and epoch2 > epoch
    assert tx.describe(log, "app")["state"] == "Empty"
    assert values(log, "t", 0, RC) == [] and values(log, "t", 0, RU) == [b"zombie"]
    m = log.partition("t", 0).snapshot()
    assert m.open_txns == {} and m.aborted == ((pid, 0, 1),) and m.producers[pid].epoch > epoch
    # the zombie: refused by the transaction log and by the partitions
    with pytest.raises(ProducerFenced) as e:
        tx.add_partitions(log, "app", pid, epoch, [("t", 2)])
    assert (e.value.epoch, e.value.current_epoch) == (epoch, epoch2)
    with pytest.raises(ProducerFenced):
        tx.end_transaction(log, "app", pid, epoch, True)
    with pytest.raises(ProducerFenced):
        tx.add_partitions(log, "app", pid + 1, epoch2, [("t", 2)])  # a wrong producer id
    for p in (0, 1):  # t-1 had no record: its epoch is recorded all the same
        with pytest.raises(InvalidProducerEpoch):
            txn_append(log, "t", p, pid, epoch, [b"late"])
    assert isinstance(ProducerFenced("a", 1, 0, 1, 1), InvalidProducerEpoch)


def test_markers_are_idempotent_and_fence_older_epochs(log, topic):
    pid, epoch = _begin(log)
    txn_append(log, "t", 0, pid, epoch, [b"a", b"b"])
    w = log.partition("t", 0).writer()
    first = w.write_marker(pid, epoch, True, now_ms=T0)
    assert first is not None and first.next_offset == 3
    assert w.write_marker(pid, epoch, True, now_ms=T0) is None  # written twice: no-op
    assert w.write_marker(pid, epoch, False, now_ms=T0) is None
    assert log.partition("t", 0).snapshot().version == first.version
    with pytest.raises(InvalidProducerEpoch):
        w.write_marker(pid, epoch - 1, False)
    m = log.partition("t", 0).snapshot()
    assert [(s.control, s.producer_id) for s in m.segments] == [(False, pid), (True, pid)]
    assert offsets(log, "t", 0, RU) == [0, 1] == offsets(log, "t", 0, RC)  # marker: offset 2


def test_last_stable_offset_and_isolation(log, topic):
    a, ea = _begin(log, "a")
    b, eb = _begin(log, "b")
    txn_append(log, "t", 0, a, ea, [b"a0", b"a1"])       # 0-1, a's transaction opens
    plain_append(log, "t", 0, [b"p2"])                    # 2
    txn_append(log, "t", 0, b, eb, [b"b3"])              # 3, b's opens
    txn_append(log, "t", 0, a, ea, [b"a4"])              # 4
    part = log.partition("t", 0)
    assert part.last_stable_offset() == 0 and part.high_watermark() == 5
    assert values(log, "t", 0, RC) == [] and len(values(log, "t", 0, RU)) == 5
    tx.end_transaction(log, "b", b, eb, True)            # marker at 5
    assert part.last_stable_offset() == 0                # a is still open before it
    tx.end_transaction(log, "a", a, ea, False)           # marker at 6
    assert part.last_stable_offset() == part.high_watermark() == 7
    assert values(log, "t", 0, RC) == [b"p2", b"b3"]
    assert offsets(log, "t", 0, RU) == [0, 1, 2, 3, 4]   # markers never read; gaps stay
    assert part.snapshot().aborted == ((a, 0, 6),)
    assert part.read_table(2, 4, isolation_level=RC).column("value").to_pylist() == [b"p2", b"b3"]
    with pytest.raises(ValueError):
        part.read_table(0, isolation_level="read_dirty")
    # a read_committed direct reader stops at the LSO and moves over markers and aborts
    c, ec = _begin(log, "c")
    txn_append(log, "t", 0, c, ec, [b"c7"])              # 7, open: LSO 7
    plain_append(log, "t", 0, [b"p8"])
    reader = DirectReader(log, isolation_level=RC)
    assert reader.watermarks(("t", 0)) == (0, 7)
    assert reader.stable_watermarks(("t", 0)) == (0, 7, 9)
    assert DirectReader(log).watermarks(("t", 0)) == (0, 9)
    got, position = [], 0
    for _ in range(10):
        out, errors = reader.read_available({("t", 0): position}, 1)
        assert not errors
        for _tp, batch, nxt in out:
            got += batch.column("value").to_pylist()
            position = nxt
    assert got == [b"p2", b"b3"] and position == 7
    out, _ = reader.read_available({("t", 0): 0}, 100, isolation_level=RU)
    assert [v for _tp, bt, _n in out for v in bt.column("value").to_pylist()] == \
        [b"a0", b"a1", b"p2", b"b3", b"a4", b"c7", b"p8"]


def test_manifest_format_and_deltas(log, topic):
    pid, epoch = _begin(log)
    for i in range(20):  # across a checkpoint: deltas and whole versions in format 3/4
        txn_append(log, "t", 0, pid, epoch, [b"x%d" % i])
    tx.end_transaction(log, "app", pid, epoch, False)
    part = log.partition("t", 0)
    m = part.snapshot()
    fresh = log.__class__(log.store).partition("t", 0).snapshot()  # read from the store
    assert fresh == m and fresh.last_stable_offset == 21 and fresh.aborted == ((pid, 0, 20),)
    whole = json.loads(m.to_json())
    assert whole["format"] == TXN_FORMAT and whole["segments"]["control"][-1] == 1
    assert json.loads(m.next(segments=m.segments).to_json(delta_of=m))["format"] == \
        TXN_DELTA_FORMAT
    # an old reader refuses it: the format number is unknown to it
    assert whole["format"] not in (1, 2)
    assert Manifest.from_json(m.to_json(), path="x") == m
    with pytest.raises(InvalidRecords):  # a transactional append holds one producer's records
        log.partition("t", 1).writer().append(
            pa.table({"value": [b"a", b"b"]}),
            producer_batches=[(ProducerBatch(pid, epoch, 0, 1), 0),
                              (ProducerBatch(pid + 1, 0, 0, 1), 1)], transactional=True)


def test_committed_offsets_are_merged_into_the_group(log, topic):
    log.write_group_offsets("g", {"group": "g", "generation": 4, "strategy": "range",
                                  "members": [{"member_id": "m1"}],
                                  "offsets": {"other": {"0": {"offset": 9, "metadata": "x",
                                                              "commit_ms": 1}},
                                              "src": {"1": {"offset": 3, "metadata": "",
                                                            "commit_ms": 1}}}})
    pid, epoch = _begin(log)
    tx.add_offsets(log, "app", pid, epoch, "g", {"src": {0: 10}})
    tx.add_offsets(log, "app", pid, epoch, "g", {"src": {0: 12}})  # the later one wins
    tx.add_offsets(log, "app", pid, epoch, "fresh", {"src": {2: 1}})
    txn_append(log, "t", 0, pid, epoch, [b"out"])
    tx.end_transaction(log, "app", pid, epoch, True, now_ms=T0 + 5)
    doc = log.read_group_offsets("g")
    assert doc["generation"] == 4 and doc["members"] == [{"member_id": "m1"}]
    assert doc["offsets"]["other"]["0"]["offset"] == 9 and doc["offsets"]["src"]["1"]["offset"] == 3
    assert doc["offsets"]["src"]["0"] == {"offset": 12, "metadata": "", "commit_ms": T0 + 5}
    assert doc["write_id"]
    assert log.read_group_offsets("fresh")["offsets"] == {
        "src": {"2": {"offset": 1, "metadata": "", "commit_ms": T0 + 5}}}
    # an aborted transaction's offsets never reach the group
    tx.add_offsets(log, "app", pid, epoch, "g", {"src": {0: 99}})
    tx.end_transaction(log, "app", pid, epoch, False)
    assert log.read_group_offsets("g")["offsets"]["src"]["0"]["offset"] == 12


def test_timeout_aborts_and_fences(log, topic):
    pid, epoch = _begin(log, "slow", now=T0, timeout=1000)
    txn_append(log, "t", 0, pid, epoch, [b"s"])
    q, eq = _begin(log, "quick", parts=[("t", 1)], now=T0 + 900, timeout=1000)
    txn_append(log, "t", 1, q, eq, [b"q"])
    assert tx.abort_expired(log, T0 + 1000) == []         # not older than the timeout yet
    assert tx.abort_expired(log, T0 + 1001) == ["slow"]
    assert tx.describe(log, "slow")["state"] == "CompleteAbort"
    assert tx.describe(log, "slow")["epoch"] == epoch + 1
    assert tx.describe(log, "quick")["state"] == "Ongoing"
    with pytest.raises(ProducerFenced):
        tx.end_transaction(log, "slow", pid, epoch, True)
    with pytest.raises(InvalidProducerEpoch):
        txn_append(log, "t", 0, pid, epoch, [b"late"])
    assert values(log, "t", 0, RC) == [] and log.partition("t", 0).last_stable_offset() == 2
    tx.end_transaction(log, "quick", q, eq, True)
    assert values(log, "t", 1, RC) == [b"q"]


@pytest.mark.parametrize("commit", [True, False])
def test_a_crash_at_every_write_of_end_transaction(log, commit):
    """The store fails at the n-th write of end_transaction, for every n: recover()
    (or, before the commit point, the next init_transactions) ends the transaction
    whole, committed or aborted, never half."""
    outcomes = set()
    for n in range(50):
        topic = f"c{n}"
        log.create_topic(topic, {"partitions": 3})
        pid, epoch = tx.init_transactions(log, topic, 60_000)
        tx.add_partitions(log, topic, pid, epoch, [(topic, 0), (topic, 1), (topic, 2)])
        tx.add_offsets(log, topic, pid, epoch, topic, {"src": {0: 7}})
        for p in (0, 1):  # partition 2 added, never written
            txn_append(log, topic, p, pid, epoch, [b"r%d" % p])
        broken = crashing_log(log, n)
        try:
            tx.end_transaction(broken, topic, pid, epoch, commit)
        except Crash:
            state = tx.recover(log, topic)
            if state == "Ongoing":  # crashed before the commit point
                tx.init_transactions(log, topic, 60_000)
        else:
            assert not broken.store.crashed
            outcomes.add("finished")
            break
        doc = tx.describe(log, topic)
        assert doc["state"] in ("CompleteCommit", "CompleteAbort", "Empty")
        committed = doc["state"] == "CompleteCommit"
        outcomes.add(doc["state"])
        for p in (0, 1):
            assert values(log, topic, p, RC) == ([b"r%d" % p] if committed else [])
            part = log.partition(topic, p)
            assert part.last_stable_offset() == part.high_watermark() == 2
        group = log.read_group_offsets(topic)
        assert (group is not None) == committed
    assert "finished" in outcomes and len(outcomes) >= 3, outcomes


def _race(*calls):
    """Run ``calls`` at once on threads; each one's result or exception."""
    barrier = threading.Barrier(len(calls))
    results = [None] * len(calls)

    def run(i, call):
        barrier.wait()
        try:
            results[i] = ("ok", call())
        except Exception as e:  # noqa: BLE001 - the race's outcome is what we check
            results[i] = ("error", e)

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_race_zombie_commit_against_its_successor(log):
    seen = set()
    for r in range(6):
        topic = f"z{r}"
        log.create_topic(topic, {"partitions": 2})
        pid, epoch = tx.init_transactions(log, topic, 60_000)
        tx.add_partitions(log, topic, pid, epoch, [(topic, 0), (topic, 1)])
        for p in (0, 1):
            txn_append(log, topic, p, pid, epoch, [b"z%d" % p])
        commit, init = _race(lambda: tx.end_transaction(log, topic, pid, epoch, True),
                             lambda: tx.init_transactions(log, topic, 60_000))
        assert init[0] == "ok" and init[1][1] > epoch
        if commit[0] == "ok":  # the zombie's commit point came first: it stands
            expect = [[b"z0"], [b"z1"]]
        else:
            assert isinstance(commit[1], ProducerFenced)
            expect = [[], []]
        seen.add(commit[0])
        assert [values(log, topic, p, RC) for p in (0, 1)] == expect
        for p in (0, 1):
            part = log.partition(topic, p)
            assert part.last_stable_offset() == part.high_watermark()
    print("zombie race outcomes:", seen)


def test_race_timeout_aborter_against_commit(log):
    seen = set()
    for r in range(6):
        topic = f"a{r}"
        log.create_topic(topic)
        pid, epoch = tx.init_transactions(log, topic, 1000, now_ms=T0)
        tx.add_partitions(log, topic, pid, epoch, [(topic, 0)], now_ms=T0)
        txn_append(log, topic, 0, pid, epoch, [b"x"])
        commit, aborter = _race(lambda: tx.end_transaction(log, topic, pid, epoch, True),
                                lambda: tx.abort_expired(log, T0 + 5000))
        assert aborter[0] == "ok"
        if commit[0] == "ok":
            assert topic not in aborter[1]
            assert values(log, topic, 0, RC) == [b"x"]
        else:
            assert isinstance(commit[1], ProducerFenced) and topic in aborter[1]
            assert values(log, topic, 0, RC) == []
        seen.add(commit[0])
        assert tx.describe(log, topic)["state"] in ("CompleteCommit", "CompleteAbort")
    print("aborter race outcomes:", seen)


def test_maintenance_never_mixes_transactional_records_with_others(log, topic):
    pid, epoch = _begin(log)
    plain_append(log, "t", 0, [b"p0"])
    txn_append(log, "t", 0, pid, epoch, [b"a1"])
    tx.end_transaction(log, "app", pid, epoch, False)
    part = log.partition("t", 0)
    segs = part.snapshot().segments
    assert part.snapshot().aborted == ((pid, 1, 2),)
    with pytest.raises(InvalidMaintenance, match="one kind only"):  # flags would be lost
        part.replace_segments(segs[:2], [part.read_table(0, 2)], committer="compaction",
                              now_ms=T0)
    part.replace_segments(segs[:1], [part.read_table(0, 1)], committer="compaction", now_ms=T0)
    part.replace_segments(part.snapshot().segments[:3], [], committer="retention", now_ms=T0,
                          log_start_offset=3)  # dropped whole: fine
    assert part.snapshot().log_start_offset == 3
    assert part.snapshot().aborted == ()  # its range left the log with its segments
    assert part.read_table(3, isolation_level=RC).num_rows == 0


@pytest.mark.parametrize("recovery", ["init_transactions", "abort_expired"])
def test_a_crash_at_every_write_of_an_abort(log, recovery):
    """The fencing abort of init_transactions and the timeout aborter crash at every
    write; a second run of the same call ends the transaction aborted, whole."""
    for n in range(30):
        topic = f"i{n}"
        log.create_topic(topic, {"partitions": 2})
        pid, epoch = tx.init_transactions(log, topic, 1000, now_ms=T0)
        tx.add_partitions(log, topic, pid, epoch, [(topic, 0), (topic, 1)], now_ms=T0)
        for p in (0, 1):
            txn_append(log, topic, p, pid, epoch, [b"r%d" % p])
        call = (lambda lg: tx.init_transactions(lg, topic, 1000)) \
            if recovery == "init_transactions" else (lambda lg: tx.abort_expired(lg, T0 + 5000))
        broken = crashing_log(log, n)
        try:
            call(broken)
        except Crash:
            call(log)  # run again, on a store that works
        else:
            break
        assert tx.describe(log, topic)["state"] in ("Empty", "CompleteAbort")
        for p in (0, 1):
            part = log.partition(topic, p)
            assert values(log, topic, p, RC) == [] and values(log, topic, p, RU) == [b"r%d" % p]
            assert part.last_stable_offset() == part.high_watermark() == 2
            with pytest.raises(InvalidProducerEpoch):
                txn_append(log, topic, p, pid, epoch, [b"zombie"])
    else:
        pytest.fail("the call never finished without a crash")
