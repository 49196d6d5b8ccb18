"""Fetch sessions (KIP-227): the session cache's rules (Kafka's FetchSessionCache, driven
with a fake clock) and the listener's answers over real sockets (raw Fetch v12 and
v16 requests by name and by topic id), including a gateway with one slot."""

from __future__ import annotations

import datetime
import importlib
import uuid

import pytest

from ingest_gateway.kafka.fetch_sessions import (EVICTION_MS, FETCH_SESSION_ID_NOT_FOUND,
                                                 FETCH_SESSION_TOPIC_ID_ERROR,
                                                 INVALID_FETCH_SESSION_EPOCH, MAX_PARTITIONS,
                                                 FetchSessionCache, next_epoch)
from tests.ingest_gateway.kafka.kafka_gateway import (KafkaGatewayProcess, call, connect)

ck = pytest.importorskip("confluent_kafka")


class Clock:
    def __init__(self):
        self.ms = 0.0

    def __call__(self) -> float:
        return self.ms


def _full(cache: FetchSessionCache, n: int, topic: str = "t") -> int:
    asked = {(topic, p): (0, 1000) for p in range(n)}
    ctx = cache.context(12, 0, 0, asked, [])
    assert ctx.may_create and not ctx.incremental
    return cache.create(False, {k: (*v, 10, 0) for k, v in asked.items()})


def test_epochs_wrap_as_kafkas():
    assert next_epoch(0) == 1 and next_epoch(-1) == -1 and next_epoch(2**31 - 1) == 1


def test_incremental_requests_carry_only_changes_and_are_answered_only_changes():
    cache = FetchSessionCache(10, clock=Clock())
    sid = _full(cache, 3)
    assert sid > 0 and len(cache) == 1
    ctx = cache.context(12, sid, 1, {("t", 1): (5, 1000)}, [("t", 2)])
    assert ctx.incremental and ctx.epoch == 2
    assert ctx.fetch == {("t", 0): (0, 1000), ("t", 1): (5, 1000)}  # cached + updated - forgot
    keep = ctx.session.answered({("t", 0): (False, 0, 10, 0), ("t", 1): (True, 0, 12, 0)})
    assert keep == {("t", 1)}  # unchanged partition 0 left out
    assert list(ctx.session.partitions) == [("t", 0), ("t", 1)]
    # an error is always answered, and its partition told again once it is gone
    ctx = cache.context(12, sid, 2, {}, [])
    assert ctx.session.answered({("t", 0): (False, 3, -1, -1), ("t", 1): (False, 0, 12, 0)}) \
        == {("t", 0)}
    ctx = cache.context(12, sid, 3, {}, [])
    assert ctx.session.answered({("t", 0): (False, 0, 10, 0), ("t", 1): (False, 0, 12, 0)}) \
        == {("t", 0)}
    # partitions with records go to the end of the order (fairness under max_bytes)
    ctx = cache.context(12, sid, 4, {}, [])
    ctx.session.answered({("t", 0): (True, 0, 11, 0), ("t", 1): (False, 0, 12, 0)})
    assert list(ctx.session.partitions) == [("t", 1), ("t", 0)]


def test_session_errors_are_kafkas():
    cache = FetchSessionCache(10, clock=Clock())
    sid = _full(cache, 2)
    assert cache.context(12, sid + 1, 1, {}, []).error == FETCH_SESSION_ID_NOT_FOUND
    assert cache.context(12, sid, 7, {}, []).error == INVALID_FETCH_SESSION_EPOCH
    assert cache.context(13, sid, 1, {}, []).error == FETCH_SESSION_TOPIC_ID_ERROR
    ctx = cache.context(12, sid, 1, {}, [])
    assert ctx.incremental and cache.current(ctx)
    # a second request of the same epoch raced it: the first's answer is refused
    ctx2 = cache.context(12, sid, 1, {}, [])
    assert ctx2.error == INVALID_FETCH_SESSION_EPOCH
    # the final epoch closes it; forgetting every partition closes it too
    assert not cache.context(12, sid, -1, {("t", 0): (0, 1)}, []).may_create
    assert len(cache) == 0
    sid = _full(cache, 1)
    ctx = cache.context(12, sid, 1, {}, [("t", 0)])
    assert ctx.session is None and len(cache) == 0
    # old request versions have no sessions
    assert cache.context(6, 0, 0, {("t", 0): (0, 1)}, []).may_create is False


def test_a_session_cannot_grow_past_its_bound():
    cache = FetchSessionCache(10, clock=Clock())
    sid = _full(cache, 1)
    flood = {("t", p): (0, 1) for p in range(1, MAX_PARTITIONS + 1)}
    assert cache.context(12, sid, 1, flood, []).error == FETCH_SESSION_ID_NOT_FOUND
    assert len(cache) == 0


def test_eviction_follows_kafkas_rules():
    clock = Clock()
    cache = FetchSessionCache(2, clock=clock)
    a, b = _full(cache, 5), _full(cache, 1)
    assert a and b
    assert _full(cache, 100) == 0  # full, none stale, none old enough: not made
    clock.ms = EVICTION_MS + 1
    cache.context(12, b, 1, {}, [])  # b used (and now evictable: older than the time)
    # a, unused for longer than the eviction time, is stale: the LRU goes first
    c = _full(cache, 1)
    assert c and a not in cache.sessions and b in cache.sessions and cache.evictions == 1
    clock.ms = EVICTION_MS + 2
    # no stale session; b (1 partition, evictable) gives way to a bigger one only
    assert _full(cache, 1) == 0
    d = _full(cache, 2)
    assert d and b not in cache.sessions and cache.evictions == 2
    assert FetchSessionCache(0, clock=clock).create(False, {("t", 0): (0, 1, 0, 0)}) == 0


def test_a_withheld_answer_is_told_again():
    cache = FetchSessionCache(10, clock=Clock())
    sid = _full(cache, 1)
    ctx = cache.context(12, sid, 1, {}, [])
    assert ctx.session.answered({("t", 0): (True, 0, 20, 0)}) == {("t", 0)}
    ctx.session.undo(ctx.epoch)  # throttled: not sent
    ctx = cache.context(12, sid, 2, {}, [])
    assert ctx.session.answered({("t", 0): (False, 0, 20, 0)}) == {("t", 0)}


# -- over the wire ------------------------------------------------------------------


def _kio(api: str, version: int):
    return importlib.import_module(f"kio.schema.{api}.v{version}.request")


def _fetch(sock, version: int, topic, partitions: dict[int, int], session_id: int,
           epoch: int, forgotten=()):
    """One raw Fetch (``topic``: a name below v13, an id from 13); the answer."""
    m = _kio("fetch", version)
    key = "topic_id" if version >= 13 else "topic"
    topics = (m.FetchTopic(**{key: topic}, partitions=tuple(
        m.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=off,
                         log_start_offset=-1, partition_max_bytes=1 << 20)
        for p, off in partitions.items())),) if partitions else ()
    gone = (m.ForgottenTopic(**{key: topic}, partitions=tuple(forgotten)),) if forgotten else ()
    extra = {"replica_id": -1} if version < 15 else {}
    req = m.FetchRequest(max_wait=datetime.timedelta(milliseconds=0), min_bytes=0,
                         max_bytes=1 << 20, isolation_level=0, session_id=session_id,
                         session_epoch=epoch, topics=topics, forgotten_topics_data=gone,
                         rack_id="", **extra)
    return call(sock, req, version)[1]


def _parts(resp) -> dict[int, tuple[int, int, int]]:
    """partition -> (error, high watermark, record bytes) of an answer."""
    return {p.partition_index: (p.error_code, p.high_watermark, len(p.records or b""))
            for t in resp.responses for p in t.partitions}


def _produce(gw, topic: str, partition: int, n: int) -> None:
    p = ck.Producer({"bootstrap.servers": gw.bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), partition=partition)
    assert p.flush(30) == 0


@pytest.mark.parametrize("version", [12, 16])
def test_a_session_over_the_wire_answers_only_what_changed(kafka_gateway, kafka_log, version):
    topic = f"fs-{uuid.uuid4().hex[:8]}"
    kafka_log.create_topic(topic, {"partitions": 3})
    _produce(kafka_gateway, topic, 0, 3)
    key = topic
    if version >= 13:
        from ingest_gateway.kafka.context import topic_uuid

        key = topic_uuid(kafka_log.topic(topic, refresh=True).topic_id)
    with connect(kafka_gateway) as s:
        full = _fetch(s, version, key, {0: 0, 1: 0, 2: 0}, 0, 0)
        sid = full.session_id
        assert sid > 0 and full.error_code == 0
        assert {p: (e, hw) for p, (e, hw, _) in _parts(full).items()} == \
            {0: (0, 3), 1: (0, 0), 2: (0, 0)}
        assert _parts(full)[0][2] > 0
        # nothing new, positions moved to the end: an empty answer in the session
        inc = _fetch(s, version, key, {0: 3}, sid, 1)
        assert (inc.error_code, inc.session_id, _parts(inc)) == (0, sid, {})
        _produce(kafka_gateway, topic, 2, 2)
        inc = _fetch(s, version, key, {}, sid, 2)  # only partition 2 changed
        assert list(_parts(inc)) == [2] and _parts(inc)[2][:2] == (0, 2)
        # wrong epoch, unknown session: Kafka's codes, session id 0, no partitions
        bad = _fetch(s, version, key, {}, sid, 9)
        assert (bad.error_code, bad.session_id, bad.responses) == \
            (INVALID_FETCH_SESSION_EPOCH, 0, ())
        assert _fetch(s, version, key, {}, sid + 1, 1).error_code == FETCH_SESSION_ID_NOT_FOUND
        # the session goes on at its epoch; forgetting partition 2 drops it from answers
        inc = _fetch(s, version, key, {2: 2}, sid, 3, forgotten=(2,))
        assert inc.error_code == 0 and _parts(inc) == {}
        _produce(kafka_gateway, topic, 2, 1)
        assert _parts(_fetch(s, version, key, {}, sid, 4)) == {}
        # a full fetch at the final epoch closes the session and opens none
        final = _fetch(s, version, key, {0: 0}, sid, -1)
        assert final.session_id == 0 and _parts(final)[0][2] > 0
        assert _fetch(s, version, key, {}, sid, 5).error_code == FETCH_SESSION_ID_NOT_FOUND


def test_a_session_by_name_refuses_a_request_by_id(kafka_gateway, kafka_log):
    topic = f"fs-{uuid.uuid4().hex[:8]}"
    kafka_log.create_topic(topic, {"partitions": 1})
    with connect(kafka_gateway) as s:
        sid = _fetch(s, 12, topic, {0: 0}, 0, 0).session_id
        assert sid > 0
        resp = _fetch(s, 16, uuid.uuid4(), {}, sid, 1)
        assert resp.error_code == FETCH_SESSION_TOPIC_ID_ERROR


def test_one_slot_serves_one_session_and_confluent_still_reads(tmp_path):
    store = f"file://{tmp_path / 'store'}"
    from log_layout import open_log

    lg = open_log(store)
    lg.create_topic("one", {"partitions": 1})
    settings = {"gateway.kafka.max.incremental.fetch.session.cache.slots": "1"}
    with KafkaGatewayProcess(store, settings=settings) as gw:
        with connect(gw) as a, connect(gw) as b:
            first = _fetch(a, 12, "one", {0: 0}, 0, 0).session_id
            second = _fetch(b, 12, "one", {0: 0}, 0, 0).session_id
            assert first > 0 and second == 0  # no slot: full fetches for b
            assert _fetch(a, 12, "one", {}, first, 1).error_code == 0
        _produce(gw, "one", 0, 50)
        c = ck.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "g",
                         "auto.offset.reset": "earliest"})
        c.subscribe(["one"])
        got = []
        import time

        deadline = time.monotonic() + 30
        while len(got) < 50 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        assert got == [f"v{i}".encode() for i in range(50)]
