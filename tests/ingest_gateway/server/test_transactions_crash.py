"""Crashes in the middle of transactions (issue 14): a transaction ends whole after any
crash, committed or aborted on every partition and group, never half; and
consume-transform-produce killed at every step of its loop outputs each input record
exactly once.

The gateway dies for real (SIGKILL) at an exact step of ending a transaction, by the
test-only hook of ``txn_crash_gateway``; the consume-transform-produce worker is a
real client process (``ctp_worker``) that SIGKILLs itself at a step named by the test.
Recovery is the product's own: a restarted gateway's timeout aborter (which also
finishes a decided transaction) or a restarted producer's ``init_transactions``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future

import pytest

from ingest_gateway.client import Consumer, Producer, ProducerFenced
from jobs.gateway_process import ROOT, wait_for
from log_layout import open_log, transactions
from tests.conftest import make_log_url
from tests.ingest_gateway.server.ctp_worker import CRASH_ENV, STEPS, output_partition, transform
from tests.ingest_gateway.server.txn_crash_gateway import CrashingGateway

RC, RU = "read_committed", "read_uncommitted"
IN, OUT, GROUP, TID = "in", "out", "etl", "etl-tx"
#: the transaction's partitions of OUT (1 is left out: it must see no marker)
TXN_PARTITIONS = (0, 2)
PER_PARTITION = 10
SENT_OFFSETS = {(IN, 0): 7, (IN, 1): 4}
INPUT = {0: 17, 1: 13}  # records per input partition: five worker rounds of at most BATCH
OUT_PARTITIONS = 3


def start_gateway(url, options, tmp_path, crash_at=None) -> CrashingGateway:
    gw = CrashingGateway(url, options, log_path=str(tmp_path / "gateway.log"))
    gw.crash_at = crash_at
    return gw.start()


def read_all(gateway_url, topic, partitions, level) -> dict[int, list[bytes]]:
    """Every record a ``level`` consumer of the gateway is handed, per partition, up to
    the end (the high watermark, or the last stable offset for read_committed)."""
    with Consumer(gateway=gateway_url, isolation_level=level, fetch_max_wait_ms=50) as c:
        tps = [(topic, p) for p in partitions]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out: dict[int, list[bytes]] = {p: [] for p in partitions}
        deadline = time.monotonic() + 60  # a reader stuck below the end fails, never hangs
        while any(c.position(tp) < c.watermarks(tp)[1] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{level} reader of {topic} stuck at "
                                   f"{[c.position(tp) for tp in tps]}")
            for r in c.poll(timeout=1.0):
                out[r.partition].append(r.value)
        return out


def committed(gateway_url, group, tps) -> dict[tuple[str, int], int | None]:
    """The group's committed offsets of ``tps`` (None: none), asked of the gateway."""
    with Consumer(gateway=gateway_url, group_id=group, enable_auto_commit=False) as c:
        c.assign(tps)
        return {tp: c.committed(tp) for tp in tps}


def in_background(fn) -> Future:
    """``fn()`` on a daemon thread (one stuck retrying cannot hold the test run up)."""
    future: Future = Future()

    def run():
        try:
            future.set_result(fn())
        except BaseException as e:  # handed to the test by result()
            future.set_exception(e)

    threading.Thread(target=run, daemon=True).start()
    return future


def state(lg) -> str:
    return transactions.describe(lg, TID)["state"]


def on_backends(cases, ids, hdfs: set[str], fast: set[str]) -> list:
    """Parameters (store backend, *case) of ``cases``: each on the local store and the S3
    server (slow: its commits are HTTP round trips), the cases whose id is in ``hdfs`` on
    HDFS too (a MiniDFSCluster; each case 5-12 s there, the whole set ~100 s, so a subset
    with each kind of crash: before the decision, between two markers, worker and gateway).
    On the local store only the cases in ``fast`` run in ``make test-fast`` (each case
    SIGKILLs and restarts processes: 6-13 s, up to 60 s beside three other workers)."""
    out = []
    for case, name in zip(cases, ids):
        out.append(pytest.param("file", *case, id=f"file-{name}",
                                marks=() if name in fast else pytest.mark.slow))
        out.append(pytest.param("s3", *case, id=f"s3-{name}", marks=pytest.mark.slow))
        if name in hdfs:
            out.append(pytest.param("hdfs", *case, id=f"hdfs-{name}"))
    return out


@pytest.fixture
def store(tmp_path, request):
    """(url, storage_options, log) of a fresh store with the topics IN and OUT, on the
    backend the test's parameters name (``on_backends``)."""
    url, options = make_log_url(request.param, request, tmp_path)
    lg = open_log(url, storage_options=options)
    lg.create_topic(IN, {"partitions": len(INPUT)})
    lg.create_topic(OUT, {"partitions": OUT_PARTITIONS})
    return url, options, lg


# (what ends the transaction, where the gateway dies, the outcome recovery must reach)
CASES = [
    ("commit", "decide", "CompleteAbort"),   # no decision yet: aborted after the timeout
    ("commit", "marker:0", "CompleteCommit"),  # decided, no marker yet
    ("commit", "marker:1", "CompleteCommit"),  # between the two partitions' markers
    ("commit", "offsets", "CompleteCommit"),  # every marker, no group offsets yet
    ("commit", "complete", "CompleteCommit"),  # offsets written, not marked complete
    ("abort", "marker:1", "CompleteAbort"),   # an abort between the two markers
]


@pytest.mark.parametrize(
    "store,end,crash_at,outcome",
    on_backends(CASES, [f"{e}-{c}" for e, c, _ in CASES],
                hdfs={"commit-decide", "commit-marker:1", "abort-marker:1"},
                fast={"commit-marker:1"}),
    indirect=["store"])
def test_gateway_killed_while_ending_a_transaction_ends_it_whole(store, tmp_path, end,
                                                                crash_at, outcome):
    url, options, lg = store
    gw = start_gateway(url, options, tmp_path, crash_at)
    # The Producer retries the end while no gateway answers (its delivery timeout).
    # Where the crash leaves the transaction undecided, it gives up soon and the
    # transaction times out soon: only the restarted gateway can end it, by aborting.
    # Elsewhere the retry runs on, and meets the restarted gateway's own recovery.
    short = crash_at == "decide"
    producer = Producer(gw.url, transactional_id=TID, linger_ms=0,
                        transaction_timeout_ms=3000 if short else 120_000,
                        delivery_timeout_ms=3000 if short else 120_000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        values = {p: [b"%d-%d" % (p, i) for i in range(PER_PARTITION)] for p in TXN_PARTITIONS}
        for i in range(PER_PARTITION):
            for p in TXN_PARTITIONS:
                producer.send(OUT, values[p][i], partition=p)
        producer.send_offsets_to_transaction(SENT_OFFSETS, GROUP)
        finish = producer.commit_transaction if end == "commit" else producer.abort_transaction
        ending = in_background(finish)
        assert gw.died() == -9

        # what the crash left in the store, read with the gateway down
        doc = transactions.describe(lg, TID)
        if crash_at == "decide":
            assert doc["state"] == "Ongoing"
        else:
            assert doc["state"] == ("PrepareCommit" if end == "commit" else "PrepareAbort")
        if crash_at == "marker:1":  # half on disk: one partition has its marker, one not
            ends = sorted((lg.partition(OUT, p).last_stable_offset(),
                           lg.partition(OUT, p).high_watermark()) for p in TXN_PARTITIONS)
            assert ends == [(0, PER_PARTITION), (PER_PARTITION + 1, PER_PARTITION + 1)]
        for p in TXN_PARTITIONS:  # read_uncommitted: every record, whatever the outcome
            table = lg.partition(OUT, p).read_table(0, isolation_level=RU)
            assert table.column("value").to_pylist() == values[p]

        if short:
            with pytest.raises(OSError):  # no gateway within the delivery timeout
                ending.result(timeout=60)
        gw.crash_at = None
        gw.start()  # an ordinary gateway on the same port: recovery is its own
        if not short:  # the retried end is answered, and not done twice (markers below)
            ending.result(timeout=60)
        wait_for(lambda: state(lg) in ("CompleteCommit", "CompleteAbort"), timeout=30,
                 what="the restarted gateway ending the transaction")
        assert state(lg) == outcome
        hws = [lg.partition(OUT, p).high_watermark() for p in range(3)]
        # one marker per partition of the transaction, none written twice, none elsewhere
        assert hws == [PER_PARTITION + 1, 0, PER_PARTITION + 1]
        visible = values if outcome == "CompleteCommit" else {p: [] for p in TXN_PARTITIONS}
        assert read_all(gw.url, OUT, TXN_PARTITIONS, RC) == visible
        assert read_all(gw.url, OUT, TXN_PARTITIONS, RU) == values
        want = SENT_OFFSETS if outcome == "CompleteCommit" else dict.fromkeys(SENT_OFFSETS)
        assert committed(gw.url, GROUP, list(SENT_OFFSETS)) == want

        if short:  # aborted at a bumped epoch: the old producer is fenced
            with pytest.raises(ProducerFenced):
                finish()

        # the transactional id goes on: its next producer commits a transaction of its own
        with Producer(gw.url, transactional_id=TID, linger_ms=0) as successor:
            successor.init_transactions()
            successor.begin_transaction()
            successor.send(OUT, b"next", partition=0)
            successor.commit_transaction()
        assert read_all(gw.url, OUT, [0], RC)[0] == visible[0] + [b"next"]
    finally:
        producer.close(timeout=5)
        gw.stop()
        gw.kill()


# -- consume-transform-produce, the worker or the gateway killed at every step ---------------
CRASH_ROUND = 1  # the second transaction: one committed before it, more after
CTP_CASES = [("worker", step) for step in STEPS] + \
    [("gateway", "decide"), ("gateway", "marker:1")]


def start_worker(gw, crash_at=None) -> subprocess.Popen:
    """A ``ctp_worker`` process of TID and GROUP from IN to OUT through ``gw``."""
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash_at:
        env[CRASH_ENV] = crash_at
    return subprocess.Popen(
        [sys.executable, "-m", "tests.ingest_gateway.server.ctp_worker", gw.url, IN,
         str(len(INPUT)), OUT, str(OUT_PARTITIONS), GROUP, TID],
        cwd=ROOT, env={**env, "PYTHONPATH": ROOT}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)


def ended(worker: subprocess.Popen) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the worker; it is killed after 120 s."""
    try:
        out, err = worker.communicate(timeout=120)
    finally:
        worker.kill()
    return worker.wait(), out.decode(), err.decode()


@pytest.mark.parametrize(
    "store,victim,step",
    on_backends(CTP_CASES, [f"{v}-{s}" for v, s in CTP_CASES],
                hdfs={"worker-send", "gateway-marker:1"}, fast={"worker-send", "gateway-decide"}),
    indirect=["store"])
def test_consume_transform_produce_killed_at_every_step_outputs_exactly_once(
        store, tmp_path, victim, step):
    url, options, lg = store
    gw = start_gateway(url, options, tmp_path, step if victim == "gateway" else None)
    try:
        with Producer(gw.url, linger_ms=0) as plain:
            for p, n in INPUT.items():
                for i in range(n):
                    plain.send(IN, b"%d-%02d" % (p, i), partition=p)
        if victim == "worker":
            status, out, err = ended(start_worker(gw, f"{step}@{CRASH_ROUND}"))
            assert status == -9, err[-2000:]
            assert out.splitlines()[-1] == f"dying at {step} {CRASH_ROUND}"
        else:  # the gateway dies in the worker's first commit, which the worker retries
            worker = start_worker(gw)
            assert gw.died() == -9
            gw.crash_at = None
            gw.start()
            status, out, err = ended(worker)
            assert status == 0, err[-2000:]  # its commit landed on the restarted gateway
        # the same transactional id again, from the group's committed offsets
        status, out, err = ended(start_worker(gw))
        assert status == 0, err[-2000:]

        want = {(p, o): transform(b"%d-%02d" % (p, o)) for p, n in INPUT.items()
                for o in range(n)}
        out = read_all(gw.url, OUT, range(OUT_PARTITIONS), RC)
        got = sorted(v for vs in out.values() for v in vs)
        assert got == sorted(want.values())  # each input's output once: none lost or doubled
        for q in range(OUT_PARTITIONS):  # in its partition, in its input partition's order
            for p, n in INPUT.items():
                mine = [want[p, o] for o in range(n)
                        if output_partition(p, o, OUT_PARTITIONS) == q]
                assert [v for v in out[q] if v in set(mine)] == mine
        assert committed(gw.url, GROUP, [(IN, p) for p in INPUT]) == \
            {(IN, p): n for p, n in INPUT.items()}
        # nothing left open: no transaction under way, every partition stable to its end
        assert state(lg) in ("Empty", "CompleteCommit")  # Empty: the last run had no work
        for q in range(OUT_PARTITIONS):
            part = lg.partition(OUT, q)
            assert part.last_stable_offset() == part.high_watermark()
        # the crashed transaction's records, written but aborted, stay out of read_committed
        uncommitted = sum(len(v) for v in read_all(gw.url, OUT, range(OUT_PARTITIONS),
                                                   RU).values())
        if step in ("send", "offsets"):
            assert uncommitted > len(want)
        elif step != "commit-sent":  # that one either committed or was aborted
            assert uncommitted == len(want)
    finally:
        gw.stop()
        gw.kill()
