"""Transactions over a real gateway (``v3_transactions``, ``server.txn_produce``): the
endpoints, transactional produce, commit and abort seen by read_committed and
read_uncommitted readers, zombies fenced, the gateway's timeout abort, hostile bodies.
"""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from jobs.gateway_process import wait_for
from log_layout import group_offsets, transactions

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
        (f"/v3/transactions/{t.tid}/offsets", {**t.ids, "group_id": "a b", "offsets": []},
         400, "invalid_group_id"),
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
def test_hostile_bodies_are_refused_never_a_500(gateway, suffix, body, items):
    if isinstance(body, dict) and items:
        body = {**body, "partitions": items, "offsets": items}
    status, answer, _ = gateway.request("POST", f"/v3/transactions/fuzz{suffix}", body=body)
    assert status < 500, (body, answer)
    if status >= 400:
        assert isinstance(answer, dict) and answer["error"], answer


@pytest.mark.parametrize("level", [RC, RU])
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
