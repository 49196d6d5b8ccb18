"""Quotas on the Kafka listener (KIP-219), over a SASL_PLAINTEXT listener: a
principal over its ``producer_byte_rate`` or ``consumer_byte_rate`` gets answers with
``throttle_time_ms`` > 0 (confluent-kafka reports them to ``throttle_cb``) and every
record is still delivered and read; a raw connection throttled answers its next request
once the mute is over (Produce v9 answered at once, v5 held back). No wall time is
asserted: the throttle time is what the gateway says, not what a clock measured. Each
test uses its own user, since a user's rate is measured across all its connections. A
client id's quota throttles whichever user uses that client.id (and only it); a
principal over its request_percentage gets a throttle time on its Metadata answers."""

from __future__ import annotations

import datetime

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from jobs.gateway_process import wait_for
from tests.ingest_gateway.kafka.kafka_gateway import call
from tests.ingest_gateway.kafka.sasl_gateway import (allow, client_conf, logged_in,
                                                     sasl_gateway, still_serves)

pytest.importorskip("kio")

TOPIC = "quota-t"
#: bytes per second; the first 10 s window makes a burst of 1.4x RATE * 10 s throttled
#: for about (1.4 - 1) * 10 s = 4 s
RATE = 10_000
USERS = ("producer", "consumer", "raw", "raw5", "clientq", "busy")


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    acls = [allow("Topic", TOPIC, u, op) for u in USERS for op in ("Read", "Write")]
    acls += [allow("Group", f"q-{u}", u, "Read") for u in USERS]
    quotas = {"User:producer": {"producer_byte_rate": RATE},
              "User:raw": {"producer_byte_rate": RATE},
              "User:raw5": {"producer_byte_rate": RATE},
              "User:consumer": {"consumer_byte_rate": RATE},
              # a client id's quota, whoever uses it; a share of request handling time
              "Client:slow-client": {"producer_byte_rate": RATE},
              "User:busy": {"request_percentage": 0.5}}
    with sasl_gateway(tmp_path_factory.mktemp("kafka-quotas"), users=USERS, acls=acls,
                      topics={TOPIC: 1}, quotas=quotas) as g:
        yield g


def _values(prefix: str, total_bytes: int, size: int = 1000) -> list[bytes]:
    return [f"{prefix}-{i:06d}-".encode().ljust(size, b"x") for i in range(total_bytes // size)]


def _read_all(gw, user: str, start: int, n: int, throttled: list) -> list[bytes]:
    c = Consumer(client_conf(gw, user, **{"group.id": f"q-{user}", "enable.auto.commit": False,
                                          "throttle_cb": throttled.append}))
    try:
        c.assign([TopicPartition(TOPIC, 0, start)])
        got: list[bytes] = []

        def progress() -> bool:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
            return len(got) >= n

        wait_for(progress, timeout=120, what=f"{n} records")
        return got
    finally:
        c.close()


def _end_offset(gw) -> int:
    c = Consumer(client_conf(gw, "admin", **{"group.id": "q-admin"}))
    try:
        return c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[1]
    finally:
        c.close()


def test_a_producer_over_its_byte_rate_is_throttled_and_delivers_everything(gw):
    start = _end_offset(gw)
    throttled: list = []
    p = Producer(client_conf(gw, "producer", **{"acks": "all", "throttle_cb": throttled.append,
                                                "message.timeout.ms": 120_000}))
    values = _values("p", int(1.4 * RATE * 10))
    delivered: list = []
    for v in values:
        p.produce(TOPIC, v, partition=0, on_delivery=lambda err, _m: delivered.append(err))
    assert p.flush(120) == 0
    assert delivered == [None] * len(values)
    assert any(e.throttle_time > 0 for e in throttled), throttled
    more: list = []  # the muted connection serves again
    p.produce(TOPIC, b"after", partition=0, on_delivery=lambda err, _m: more.append(err))
    assert p.flush(120) == 0 and more == [None]
    assert _read_all(gw, "admin", start, len(values) + 1, []) == values + [b"after"]


def test_a_consumer_over_its_byte_rate_is_throttled_and_reads_everything(gw):
    start = _end_offset(gw)
    values = _values("c", int(1.4 * RATE * 10))
    p = Producer(client_conf(gw, "admin", acks="all"))
    for v in values:
        p.produce(TOPIC, v, partition=0)
    assert p.flush(60) == 0
    throttled: list = []
    assert _read_all(gw, "consumer", start, len(values), throttled) == values
    assert any(e.throttle_time > 0 for e in throttled), throttled


def _produce_request(values: list[bytes], version: int):
    import sys

    import pyarrow as pa
    from kio.index import load_request_schema

    from ingest_gateway.kafka.records import encode_batch

    cls = load_request_schema(0, version)
    mod = sys.modules[cls.__module__]
    n = len(values)
    table = pa.table({"key": pa.array([None] * n, pa.binary()), "value": values,
                      "timestamp": [1_700_000_000_000] * n,
                      "headers": pa.array([[]] * n, pa.list_(pa.struct([
                          ("key", pa.string()), ("value", pa.binary())])))})
    data = encode_batch(table, base_offset=0)
    return cls(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
               topic_data=(mod.TopicProduceData(name=TOPIC, partition_data=(
                   mod.PartitionProduceData(index=0, records=data),)),))


@pytest.mark.parametrize("user, version", [("raw", 9), ("raw5", 5)])
def test_a_raw_produce_over_the_rate_carries_its_throttle_time(gw, user, version):
    req = _produce_request(_values(user, int(1.4 * RATE * 10)), version)
    with logged_in(gw, user) as s:
        s.settimeout(60)  # a guard against a hang, not a measurement: the mute is ~4 s
        answer = call(s, req, version)[1]
        (part,) = answer.responses[0].partition_responses
        assert int(part.error_code) == 0 and part.base_offset >= 0
        assert answer.throttle_time > datetime.timedelta(0)
        assert still_serves(s)  # answered once the mute is over


def test_a_client_id_quota_throttles_whoever_uses_the_client_id(gw):
    """``clientq`` has no quota of its own; its producer's client.id has one."""
    throttled: list = []
    p = Producer(client_conf(gw, "clientq", **{"acks": "all", "client.id": "slow-client",
                                               "throttle_cb": throttled.append,
                                               "message.timeout.ms": 120_000}))
    values = _values("cq", int(1.4 * RATE * 10))
    delivered: list = []
    for v in values:
        p.produce(TOPIC, v, partition=0, on_delivery=lambda err, _m: delivered.append(err))
    assert p.flush(120) == 0 and delivered == [None] * len(values)
    assert any(e.throttle_time > 0 for e in throttled), throttled
    # the same user with another client id is not throttled by it
    other: list = []
    p = Producer(client_conf(gw, "clientq", **{"acks": "all", "client.id": "fast-client",
                                               "throttle_cb": other.append}))
    for v in values[:20]:
        p.produce(TOPIC, v, partition=0)
    assert p.flush(60) == 0
    assert not any(e.throttle_time > 0 for e in other), other


def test_a_principal_over_its_request_percentage_gets_a_throttle_time(gw):
    from kio.schema.metadata.v12.request import MetadataRequest

    s = logged_in(gw, "busy")
    req = MetadataRequest(topics=None, allow_auto_topic_creation=False,
                          include_topic_authorized_operations=False)
    for i in range(2000):  # each Metadata's handling time counts; the first throttled ends it
        throttle = call(s, req, 12, correlation_id=10 + i)[1].throttle_time
        if throttle > datetime.timedelta(0):
            break
    assert throttle > datetime.timedelta(0), f"no throttle after {i + 1} requests"
    # the muted connection answers again once the throttle time has passed
    s.settimeout(throttle.total_seconds() + 15)
    assert call(s, req, 12, correlation_id=99)[0] == 99
