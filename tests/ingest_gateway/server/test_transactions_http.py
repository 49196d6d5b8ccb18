"""Transactions over a real gateway (``v3_transactions``, ``server.txn_produce``): the
endpoints, transactional produce, commit and abort seen by read_committed and
read_uncommitted readers, zombies fenced, the gateway's timeout abort, hostile bodies.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import uuid

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from ingest_gateway.client import (Consumer, IllegalState, ProduceError, Producer,
                                   ProducerFenced)
from jobs.gateway_process import GatewayProcess, wait_for
from log_layout import group_offsets, open_log, transactions
from tests.ingest_gateway.conftest import on_local_store

JSON_V2 = "application/vnd.kafka.json.v2+json"
RC, RU = "read_committed", "read_uncommitted"


def tid() -> str:
    return f"txn-{uuid.uuid4().hex[:10]}"


def values(log, topic, partition, level):
    table = log.partition(topic, partition).read_table(0, isolation_level=level)
    return [json.loads(v) for v in table.column("value").to_pylist()]


class Txn:
    """One transactional producer spoken to over HTTP."""

    def __init__(self, gw, tid_: str, timeout_ms: int = 60_000):
        self.gw, self.tid = gw, tid_
        status, body, _ = gw.request("POST", f"/v3/transactions/{tid_}:init",
                                     body={"transaction_timeout_ms": timeout_ms})
        assert status == 200, body
        assert body["transactional_id"] == tid_
        self.pid, self.epoch = body["producer_id"], body["producer_epoch"]
        self.seq: dict[tuple[str, int], int] = {}

    @property
    def ids(self):
        return {"producer_id": self.pid, "producer_epoch": self.epoch}

    def add(self, topic, *partitions):
        return self.gw.request("POST", f"/v3/transactions/{self.tid}/partitions", body={
            **self.ids, "partitions": [{"topic": topic, "partition": p} for p in partitions]})

    def send(self, topic, partition, vals):
        seq = self.seq.get((topic, partition), 0)
        status, body, _ = self.gw.request(
            "POST", f"/topics/{topic}/partitions/{partition}?producer_id={self.pid}"
                    f"&producer_epoch={self.epoch}&sequence={seq}&transactional_id={self.tid}",
            body={"records": [{"value": v} for v in vals]}, content_type=JSON_V2)
        if status == 200:
            self.seq[(topic, partition)] = seq + len(vals)
        return status, body

    def end(self, commit: bool):
        return self.gw.request("POST", f"/v3/transactions/{self.tid}:"
                               f"{'commit' if commit else 'abort'}", body=self.ids)


@on_local_store
def test_commit_is_seen_by_read_committed_and_abort_never(gateway, gateway_log, topic):
    t = Txn(gateway, tid())
    assert t.add(topic, 0, 1)[0] == 204
    assert t.send(topic, 0, [1, 2])[0] == 200
    assert t.send(topic, 1, [3])[0] == 200
    # a plain producer's records beside the transaction: never in its segments
    assert gateway.request("POST", f"/topics/{topic}/partitions/0",
                           body={"records": [{"value": 99}]}, content_type=JSON_V2)[0] == 200
    assert values(gateway_log, topic, 0, RU) == [1, 2, 99]
    assert values(gateway_log, topic, 0, RC) == []  # above the last stable offset
    assert t.end(commit=True)[0] == 204
    assert values(gateway_log, topic, 0, RC) == [1, 2, 99]
    assert values(gateway_log, topic, 1, RC) == [3]
    status, doc, _ = gateway.request("GET", f"/v3/transactions/{t.tid}")
    assert status == 200 and doc["state"] == "CompleteCommit" and doc["partitions"] == []

    # the next transaction of the same producer, aborted
    assert t.add(topic, 2)[0] == 204
    assert t.send(topic, 2, [7, 8])[0] == 200
    assert values(gateway_log, topic, 2, RU) == [7, 8]
    assert t.end(commit=False)[0] == 204
    assert values(gateway_log, topic, 2, RC) == []
    assert values(gateway_log, topic, 2, RU) == [7, 8]
    listed = gateway.request("GET", "/v3/transactions")[1]
    assert {d["transactional_id"]: d["state"] for d in listed["data"]}[t.tid] == \
        "CompleteAbort"


@on_local_store
def test_a_partition_not_in_the_transaction_is_refused_and_nothing_written(
        gateway, gateway_log, topic):
    t = Txn(gateway, tid())
    status, body = t.send(topic, 0, [1])
    assert status == 409 and body["error"] == "invalid_txn_state" and body["error_code"] == 40916
    assert t.add(topic, 0)[0] == 204
    status, body = t.send(topic, 1, [1])
    assert status == 409 and body["error"] == "invalid_txn_state", body
    assert "not in the ongoing transaction" in body["message"]
    assert gateway_log.partition(topic, 1).high_watermark() == 0
    # idempotence still applies: a retry of the same sequence is not written twice
    assert t.send(topic, 0, [5])[0] == 200
    t.seq[(topic, 0)] = 0
    status, body = t.send(topic, 0, [5])
    assert status == 200 and body["offsets"][0]["offset"] == 0
    assert t.end(commit=True)[0] == 204
    assert values(gateway_log, topic, 0, RC) == [5]
    # transactional producing without the producer's fields: 400
    status, body, _ = gateway.request(
        "POST", f"/topics/{topic}/partitions/0?transactional_id={t.tid}",
        body={"records": [{"value": 1}]}, content_type=JSON_V2)
    assert status == 400 and body["error"] == "malformed_request"


@on_local_store
def test_a_zombie_with_the_older_epoch_is_fenced(gateway, gateway_log, topic):
    name = tid()
    zombie = Txn(gateway, name)
    assert zombie.add(topic, 0)[0] == 204
    assert zombie.send(topic, 0, [1])[0] == 200
    successor = Txn(gateway, name)  # aborts the zombie's transaction, bumps the epoch
    assert successor.pid == zombie.pid and successor.epoch > zombie.epoch
    for status, body in [zombie.send(topic, 0, [2]), zombie.add(topic, 1)[:2],
                         zombie.end(commit=True)[:2]]:
        assert status == 409 and body["error"] == "producer_fenced" and \
            body["error_code"] == 40915, body
    assert successor.add(topic, 0)[0] == 204
    assert successor.send(topic, 0, [3])[0] == 200
    assert successor.end(commit=True)[0] == 204
    assert values(gateway_log, topic, 0, RC) == [3]
    assert values(gateway_log, topic, 0, RU) == [1, 3]


@on_local_store
def test_offsets_commit_with_the_transaction_and_never_with_an_abort(
        gateway, gateway_log, topic):
    group = f"g-{uuid.uuid4().hex[:8]}"
    t = Txn(gateway, tid())
    body = {**t.ids, "group_id": group, "offsets": [{"topic": topic, "partition": 0,
                                                     "offset": 5}]}
    assert gateway.request("POST", f"/v3/transactions/{t.tid}/offsets", body=body)[0] == 204
    assert t.end(commit=False)[0] == 204
    assert group_offsets.read_group_offsets(gateway_log.store, group) is None
    assert gateway.request("POST", f"/v3/transactions/{t.tid}/offsets", body=body)[0] == 204
    assert t.add(topic, 1)[0] == 204
    assert t.send(topic, 1, ["out"])[0] == 200
    assert group_offsets.read_group_offsets(gateway_log.store, group) is None
    assert t.end(commit=True)[0] == 204
    doc = group_offsets.read_group_offsets(gateway_log.store, group)
    assert doc["offsets"][topic]["0"]["offset"] == 5
    assert values(gateway_log, topic, 1, RC) == ["out"]


@on_local_store
def test_the_gateway_aborts_a_transaction_older_than_its_timeout(gateway, gateway_log, topic):
    t = Txn(gateway, tid(), timeout_ms=300)
    assert t.add(topic, 0)[0] == 204
    assert t.send(topic, 0, [1])[0] == 200
    wait_for(lambda: transactions.describe(gateway_log, t.tid)["state"] == "CompleteAbort",
             timeout=30, what="the timeout abort")
    assert values(gateway_log, topic, 0, RC) == []
    assert values(gateway_log, topic, 0, RU) == [1]
    assert gateway_log.partition(topic, 0).last_stable_offset() == \
        gateway_log.partition(topic, 0).high_watermark()
    status, body = t.send(topic, 0, [2])
    assert status == 409 and body["error"] == "producer_fenced"


@on_local_store
def test_refusals_name_what_is_wrong(gateway, topic):
    t = Txn(gateway, tid())
    cases = [
        (f"/v3/transactions/{t.tid}:init", {"transaction_timeout_ms": 0}, 400, "malformed_request"),
        (f"/v3/transactions/{t.tid}:init", {"transaction_timeout_ms": True}, 400,
         "malformed_request"),
        ("/v3/transactions/bad%20id:init", {}, 400, "invalid_topic_name"),
        (f"/v3/transactions/{t.tid}/partitions", {**t.ids, "partitions": []}, 400,
         "malformed_request"),
        (f"/v3/transactions/{t.tid}/partitions",
         {**t.ids, "partitions": [{"topic": topic, "partition": 3}]}, 404, "unknown_partition"),
        # a well-formed body (its shape is checked first: http/bodies.py) with a bad group
        (f"/v3/transactions/{t.tid}/offsets", {**t.ids, "group_id": "a b", "offsets": [
            {"topic": topic, "partition": 0, "offset": 0}]}, 400, "invalid_group_id"),
        (f"/v3/transactions/{t.tid}:commit", {"producer_id": t.pid}, 400, "malformed_request"),
        (f"/v3/transactions/{tid()}:commit", t.ids, 409, "invalid_txn_state"),
    ]
    for path, body, status, error in cases:
        got, answer, _ = gateway.request("POST", path, body=body)
        assert (got, answer["error"]) == (status, error), (path, body, answer)
    status, body, _ = gateway.request("GET", f"/v3/transactions/{tid()}")
    assert status == 404 and body["error"] == "unknown_transactional_id"


_json = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=8)
                     | st.floats(allow_nan=False), lambda c: st.lists(c, max_size=3)
                     | st.dictionaries(st.text(max_size=12), c, max_size=4), max_leaves=12)
_fields = st.sampled_from(["producer_id", "producer_epoch", "partitions", "offsets", "group_id",
                           "topic", "partition", "offset", "transaction_timeout_ms"])


@hsettings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(suffix=st.sampled_from([":init", ":commit", ":abort", "/partitions", "/offsets"]),
       body=st.dictionaries(_fields, _json, max_size=5) | _json,
       items=st.lists(st.dictionaries(_fields, _json, max_size=4), max_size=3))
@on_local_store
def test_hostile_bodies_are_refused_never_a_500(gateway, suffix, body, items):
    if isinstance(body, dict) and items:
        body = {**body, "partitions": items, "offsets": items}
    status, answer, _ = gateway.request("POST", f"/v3/transactions/fuzz{suffix}", body=body)
    assert status < 500, (body, answer)
    if status >= 400:
        assert isinstance(answer, dict) and answer["error"], answer


@pytest.mark.parametrize("level", [RC, RU])
@on_local_store
def test_transactional_produce_segments_are_one_producers(gateway, gateway_log, topic, level):
    a, b = Txn(gateway, tid()), Txn(gateway, tid())
    for t in (a, b):
        assert t.add(topic, 0)[0] == 204
    for i in range(3):
        assert a.send(topic, 0, [f"a{i}"])[0] == 200
        assert b.send(topic, 0, [f"b{i}"])[0] == 200
    assert a.end(commit=True)[0] == 204
    assert b.end(commit=False)[0] == 204
    got = values(gateway_log, topic, 0, level)
    want_a = ["a0", "a1", "a2"]
    assert [v for v in got if v.startswith("a")] == want_a
    assert [v for v in got if v.startswith("b")] == ([] if level == RC else ["b0", "b1", "b2"])


# -- the Producer and the Consumer -------------------------------------------------------
def consume_all(gateway_url, topic, level, *, store=None):
    """Every record of the topic a ``level`` consumer is handed, until one poll is empty
    after the end (the end: the high watermark or the last stable offset)."""
    where = {"log": store} if store is not None else {"gateway": gateway_url}
    with Consumer(**where, isolation_level=level, fetch_max_wait_ms=50) as c:
        tps = [(topic, p) for p in range(3)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        out = []
        while any(c.position(tp) < c.watermarks(tp)[1] for tp in tps):
            out += [r.value for r in c.poll(timeout=1.0)]
        return sorted(out)


@on_local_store
def test_producer_commit_and_abort_seen_by_consumers_of_each_level(gateway, gateway_log, topic):
    with Producer(gateway.url, transactional_id=tid(), linger_ms=1) as p:
        p.init_transactions()
        p.begin_transaction()
        for i in range(30):
            p.send(topic, f"c{i}".encode(), key=f"k{i}".encode())
        p.commit_transaction()
        p.begin_transaction()
        for i in range(10):
            p.send(topic, f"a{i}".encode(), partition=i % 3)
        p.flush()
        p.abort_transaction()
    committed = sorted(f"c{i}".encode() for i in range(30))
    every = sorted(committed + [f"a{i}".encode() for i in range(10)])
    for store in (None, gateway_log):  # through the gateway, and straight from the store
        assert consume_all(gateway.url, topic, "read_committed", store=store) == committed
        assert consume_all(gateway.url, topic, "read_uncommitted", store=store) == every
    with pytest.raises(ValueError, match="isolation_level"):
        Consumer(gateway=gateway.url, isolation_level="committed")


@on_local_store
def test_producer_misuse_is_an_illegal_state(gateway, topic):
    with Producer(gateway.url, transactional_id=tid()) as p:
        with pytest.raises(IllegalState):
            p.begin_transaction()  # before init_transactions
        p.init_transactions()
        with pytest.raises(IllegalState):
            p.send(topic, b"x")  # outside a transaction
        p.begin_transaction()
        with pytest.raises(IllegalState):
            p.begin_transaction()
        p.abort_transaction()
    with Producer(gateway.url) as plain, pytest.raises(IllegalState):
        plain.init_transactions()
    with pytest.raises(ValueError):
        Producer(gateway.url, transactional_id=tid(), enable_idempotence=False)


@on_local_store
def test_a_zombie_producer_is_fenced_with_a_clear_error(gateway, gateway_log, topic):
    name = tid()
    zombie = Producer(gateway.url, transactional_id=name, linger_ms=0)
    successor = Producer(gateway.url, transactional_id=name, linger_ms=0)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, b"zombie-1", partition=0).result()
        successor.init_transactions()  # aborts the zombie's transaction
        with pytest.raises(ProducerFenced) as e:  # a new partition: adding it, the gateway
            zombie.send(topic, b"zombie-2", partition=1).result()  # says (as Kafka's future)
        assert e.value.transactional_id == name
        assert e.value.current_epoch > e.value.epoch
        with pytest.raises(IllegalState, match="fenced"):
            zombie.commit_transaction()
        successor.begin_transaction()
        successor.send(topic, b"ok", partition=0)
        successor.commit_transaction()
    finally:
        zombie.close()
        successor.close()
    assert values_raw(gateway_log, topic, 0, RC) == [b"ok"]
    assert values_raw(gateway_log, topic, 0, RU) == [b"zombie-1", b"ok"]


@on_local_store
def test_a_fenced_record_makes_commit_raise_producer_fenced(gateway, topic):
    name = tid()
    with Producer(gateway.url, transactional_id=name, linger_ms=0) as zombie, \
            Producer(gateway.url, transactional_id=name) as successor:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, b"1", partition=0).result()
        successor.init_transactions()
        handle = zombie.send(topic, b"2", partition=0)  # partition known: refused at the gateway
        with pytest.raises(ProduceError):
            handle.result()
        with pytest.raises(ProducerFenced):
            zombie.commit_transaction()


def values_raw(log, topic, partition, level):
    table = log.partition(topic, partition).read_table(0, isolation_level=level)
    return table.column("value").to_pylist()


KILLED_PRODUCER = """
import sys
from ingest_gateway.client import Producer
p = Producer(sys.argv[1], transactional_id=sys.argv[2], transaction_timeout_ms=1500,
             linger_ms=0)
p.init_transactions()
p.begin_transaction()
for i in range(20):
    p.send(sys.argv[3], b"doomed-%d" % i, partition=i % 3)
p.flush()
print("sent", flush=True)
sys.stdin.read()  # until killed
"""


def test_a_producer_killed_mid_transaction(gateway, gateway_log, topic):
    name = tid()
    proc = subprocess.Popen([sys.executable, "-c", KILLED_PRODUCER, gateway.url, name, topic],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            cwd=str(pathlib.Path(__file__).resolve().parents[3]))
    try:
        assert proc.stdout.readline().strip() == b"sent"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    doomed = sorted(b"doomed-%d" % i for i in range(20))
    assert consume_all(gateway.url, topic, "read_uncommitted") == doomed
    assert consume_all(gateway.url, topic, "read_committed") == []
    # the gateway aborts it once transaction_timeout_ms passed
    wait_for(lambda: transactions.describe(gateway_log, name)["state"] == "CompleteAbort",
             timeout=30, what="the timeout abort")
    assert consume_all(gateway.url, topic, "read_committed") == []
    assert consume_all(gateway.url, topic, "read_uncommitted") == doomed
    for p in range(3):
        part = gateway_log.partition(topic, p)
        assert part.last_stable_offset() == part.high_watermark()


def test_consume_transform_produce_output_and_offsets_are_atomic(gateway, gateway_log, topic):
    out_topic = f"out-{uuid.uuid4().hex[:8]}"
    gateway_log.create_topic(out_topic, {"partitions": 3})
    group = f"ctp-{uuid.uuid4().hex[:8]}"
    with Producer(gateway.url, linger_ms=0) as plain:
        for i in range(60):
            plain.send(topic, b"%d" % i, partition=i % 3)
    tps = [(topic, p) for p in range(3)]

    def round_trip(commit: bool) -> int:
        with Consumer(gateway=gateway.url, group_id=group, enable_auto_commit=False,
                      isolation_level="read_committed", auto_offset_reset="earliest",
                      fetch_max_wait_ms=50) as c, \
                Producer(gateway.url, transactional_id=f"{group}-tx", linger_ms=1) as p:
            c.assign(tps)
            for tp in tps:
                committed = c.committed(tp)
                c.seek(tp, 0 if committed is None else committed)
            p.init_transactions()
            p.begin_transaction()
            records = c.poll(timeout=5.0, max_records=25)
            assert records
            for r in records:
                p.send(out_topic, b"out-" + r.value, partition=r.partition)
            p.send_offsets_to_transaction({tp: c.position(tp) for tp in tps}, group)
            if commit:
                p.commit_transaction()
            else:
                p.abort_transaction()
            return len(records)

    assert round_trip(commit=False)
    assert group_offsets.read_group_offsets(gateway_log.store, group) is None
    assert consume_all(gateway.url, out_topic, "read_committed") == []
    handed = 0
    while handed < 60:
        handed += round_trip(commit=True)
    assert handed == 60
    want = sorted(b"out-%d" % i for i in range(60))
    assert consume_all(gateway.url, out_topic, "read_committed") == want
    doc = group_offsets.read_group_offsets(gateway_log.store, group)
    assert {int(p): o["offset"] for p, o in doc["offsets"][topic].items()} == \
        {0: 20, 1: 20, 2: 20}


def test_transaction_offsets_survive_the_group_coordinators_next_write(gateway, gateway_log,
                                                                      topic):
    """A subscribed consumer is a member the gateway's coordinator holds in memory: the
    transaction's offsets must reach that copy, or the member's leaving (a write of the
    group's document) would put the old offsets back."""
    out_topic = f"out-{uuid.uuid4().hex[:8]}"
    gateway_log.create_topic(out_topic, {"partitions": 1})
    group = f"member-{uuid.uuid4().hex[:8]}"
    with Producer(gateway.url, linger_ms=0) as plain:
        for i in range(9):
            plain.send(topic, b"%d" % i, partition=i % 3)
    consumer = Consumer(gateway=gateway.url, group_id=group, enable_auto_commit=False,
                        isolation_level="read_committed", auto_offset_reset="earliest",
                        fetch_max_wait_ms=50)
    consumer.subscribe([topic])
    producer = Producer(gateway.url, transactional_id=f"{group}-tx", linger_ms=1)
    producer.init_transactions()
    seen = 0
    while seen < 9:
        records = consumer.poll(timeout=5.0, max_records=100)
        if not records:
            continue
        producer.begin_transaction()
        for r in records:
            producer.send(out_topic, r.value)
        producer.send_offsets_to_transaction(
            {tp: consumer.position(tp) for tp in consumer.assignment()}, group)
        producer.commit_transaction()
        seen += len(records)
    producer.close()
    consumer.close(commit=False)  # leaves the group: the coordinator writes its document
    doc = group_offsets.read_group_offsets(gateway_log.store, group)
    assert doc is not None
    assert {p: o["offset"] for p, o in doc["offsets"][topic].items()} == {"0": 3, "1": 3, "2": 3}


def test_a_commit_rides_out_a_gateway_restart(tmp_path):
    """The transaction calls are retried while no gateway answers (within
    delivery_timeout_ms): a commit sent while the gateway is down lands once it is back."""
    store = str(tmp_path / "store")
    log = open_log(store)
    log.create_topic("t", {"partitions": 2})
    gw = GatewayProcess(store).start()
    outcome: list[BaseException | None] = []
    try:
        p = Producer(gw.url, transactional_id=tid(), linger_ms=0, retry_backoff_ms=20)
        p.init_transactions()
        p.begin_transaction()
        for i in range(4):
            p.send("t", b"r%d" % i, partition=i % 2)
        p.flush()
        gw.kill()

        def commit() -> None:
            try:
                p.commit_transaction()
                outcome.append(None)
            except BaseException as e:  # noqa: BLE001 - the test reports it
                outcome.append(e)

        committer = threading.Thread(target=commit)
        committer.start()
        gw.start()  # the same port
        committer.join(60)
        assert outcome == [None], outcome
        p.close()
    finally:
        gw.kill()
    assert [values_raw(log, "t", n, RC) for n in (0, 1)] == [[b"r0", b"r2"], [b"r1", b"r3"]]
