"""A throttled Fetch, as Kafka's broker answers it (KIP-219 with fetch sessions): over a
SASL_PLAINTEXT listener with a ``consumer_byte_rate``, raw Fetch v12 requests in one
session. A Fetch's ``max_bytes`` is cut to the quota's window (so an answer alone never
exceeds it); the answer that takes the principal over its rate carries its throttle
time and no records (withheld, its bytes taken back off the sensor), in the same
session; a Fetch once the mute is over gets those records when the rate with them is
within the quota (withheld again otherwise, as by Kafka)."""

from __future__ import annotations

import datetime

import pytest
from confluent_kafka import Producer

from tests.ingest_gateway.kafka.sasl_gateway import allow, client_conf, sasl_gateway
from tests.ingest_gateway.kafka.sasl_gateway import logged_in
from tests.ingest_gateway.kafka.test_fetch_sessions import _fetch

pytest.importorskip("kio")

TOPIC, USER, RATE = "fq-t", "fq", 10_000


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    acls = [allow("Topic", TOPIC, USER, "Read")]
    with sasl_gateway(tmp_path_factory.mktemp("fetch-quota"), users=(USER,), acls=acls,
                      topics={TOPIC: 1},
                      quotas={f"User:{USER}": {"consumer_byte_rate": RATE}}) as g:
        yield g


@pytest.mark.slow  # waits out two or three throttle times (~12 s)
def test_a_throttled_fetch_is_withheld_then_served(gw):
    p = Producer(client_conf(gw, "admin", acks="all", **{"batch.size": 2000,
                                                          "linger.ms": 0}))
    for i in range(150):
        p.produce(TOPIC, f"{i:04d}".encode().ljust(1000, b"x"), partition=0)
        p.poll(0)
    assert p.flush(60) == 0
    with logged_in(gw, USER) as s:
        s.settimeout(60)  # a guard against a hang: the mute is a few seconds
        first = _fetch(s, 12, TOPIC, {0: 0}, 0, 0)
        (part,) = first.responses[0].partitions
        got = len(part.records)
        # max_bytes 1 MiB asked, cut to RATE x 10 s: not all 150 KB at once
        assert first.session_id > 0 and 50_000 < got <= RATE * 10 + 2_000, got
        assert first.throttle_time == datetime.timedelta(0)
        sid, hwm = first.session_id, part.high_watermark
        nxt = _next_offset(part.records)
        second = _fetch(s, 12, TOPIC, {0: nxt}, sid, 1)
        assert second.throttle_time > datetime.timedelta(0), second.throttle_time
        assert (second.error_code, second.session_id, second.responses) == (0, sid, ())
        # asked again once each mute is over (as a client does): withheld while the rate
        # with these bytes is over the quota, then served, in the same session
        for epoch in range(2, 8):
            later = _fetch(s, 12, TOPIC, {}, sid, epoch)
            assert later.error_code == 0 and later.session_id == sid
            if later.responses:
                break
            assert later.throttle_time > datetime.timedelta(0)
        (part,) = later.responses[0].partitions
        assert part.high_watermark == hwm and _first_offset(part.records) == nxt


def _first_offset(records: bytes) -> int:
    return int.from_bytes(records[:8], "big")


def _next_offset(records: bytes) -> int:
    """The offset after the last batch of a record set (base offset + last delta + 1)."""
    pos, last = 0, -1
    while pos + 12 <= len(records):
        base = int.from_bytes(records[pos:pos + 8], "big")
        size = int.from_bytes(records[pos + 8:pos + 12], "big")
        if pos + 12 + size > len(records):
            break
        delta = int.from_bytes(records[pos + 23:pos + 27], "big")  # lastOffsetDelta
        last = base + delta
        pos += 12 + size
    return last + 1
