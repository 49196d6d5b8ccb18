"""The tail cache (``ingest_gateway/kafka/tail_cache.py``): what confluent-kafka and
kafka-python read is the same with the cache on (the module gateway, default size) and
off (a second gateway with ``gateway.kafka.tail.cache.bytes = 0``), for plain topics,
a topic in another codec, LogAppendTime, transactions read committed, after
DeleteRecords and with an HTTP produce interleaved; a raw Fetch shows a hit (the
producer's codec sent as is on a ``producer`` topic, the hit counter moving); and the
cache's own rules (runs, eviction, retries, epochs) on a fake manifest."""

from __future__ import annotations

import base64
import re
import uuid
from types import SimpleNamespace

import confluent_kafka as ck
import pytest

from ingest_gateway.kafka import records, tail_cache
from log_layout import open_log
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess
from tests.ingest_gateway.kafka.test_fetch_codec import codecs_of, consume_kafka_python, fetched
from tests.ingest_gateway.kafka.test_produce_fetch import produce_confluent
from tests.ingest_gateway.kafka.test_produce_fetch import records as make_records

ON, OFF = "on", "off"


@pytest.fixture(scope="module")
def gateways(own_kafka_gateway, own_kafka_log, tmp_path_factory):
    """{on: (gateway, log), off: (gateway, log)}. The cache's side is a gateway of this
    module's own: the session's shared one caches every other test's records too, and
    what it evicts or holds is then not this module's to assert."""
    store = f"file://{tmp_path_factory.mktemp('kafka-nocache')}"
    with KafkaGatewayProcess(store, {"gateway.kafka.tail.cache.bytes": "0"}) as off:
        yield {ON: (own_kafka_gateway, own_kafka_log), OFF: (off, open_log(store))}


def _hits(gw) -> float:
    status, body, _ = gw.request("GET", "/metrics")
    assert status == 200
    text = body if isinstance(body, str) else body.decode()
    m = re.search(r"^sparklog_gateway_kafka_tail_cache_hits_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _topic(log, config: dict) -> str:
    name = f"tc-{uuid.uuid4().hex[:10]}"
    log.create_topic(name, {"partitions": 2, **config})
    return name


def _http_produce(gw, topic: str, n: int) -> None:
    body = {"records": [{"key": base64.b64encode(b"h%d" % i).decode(),
                         "value": base64.b64encode(b"http-%d" % i).decode()}
                        for i in range(n)]}
    status, answer, _ = gw.request("POST", f"/topics/{topic}/partitions/0", body=body,
                                   content_type="application/vnd.kafka.binary.v2+json")
    assert status == 200, answer


def _scenario(gw, log, case: str) -> tuple[str, int]:
    """Make a topic as ``case`` says on one gateway; (topic, records a reader sees)."""
    config = {"plain": {}, "codec": {"compression.type": "zstd"},
              "log_append_time": {"message.timestamp.type": "LogAppendTime"}}.get(case, {})
    topic = _topic(log, config)
    recs = make_records(200)
    # idempotent: a retried request (slow under load) may not reorder the records, which
    # the two gateways' logs must then hold at the same offsets
    producer = {"acks": "all", "compression.type": "lz4", "enable.idempotence": True}
    produce_confluent(gw, topic, recs[:100], **producer)
    count = 200
    if case == "http_interleaved":
        _http_produce(gw, topic, 5)
        count += 5
    if case == "delete_records":
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": gw.bootstrap})
        tp = ck.TopicPartition(topic, 0, 10)
        admin.delete_records([tp])[tp].result(timeout=30)
        count -= 10
    produce_confluent(gw, topic, recs[100:], **producer)
    return topic, count


def consume_confluent(gw, topic: str, partitions: int, count: int) -> list[tuple]:
    """Every record from each partition's log start (the helper of test_produce_fetch
    starts at offset 0, out of range after DeleteRecords)."""
    c = ck.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "unused",
                     "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    out: list[tuple] = []
    try:
        for _ in range(300):
            m = c.poll(0.1)
            if m is not None:
                assert m.error() is None, m.error()
                out.append((m.partition(), m.offset(), m.key(), m.value(),
                            [(k, v) for k, v in (m.headers() or [])], m.timestamp()[1]))
            if len(out) >= count:
                break
    finally:
        c.close()
    return sorted(out)


def _stamp_free(seen: list[tuple], case: str) -> list[tuple]:
    """LogAppendTime timestamps and those of the HTTP records (sent without one) are the
    gateways' own clocks: compared by presence."""
    own = case == "log_append_time"
    return [(*r[:5], r[5] > 0) if own or (r[3] or b"").startswith(b"http-") else r
            for r in seen]


@pytest.mark.parametrize("case", ["plain", "codec", "log_append_time", "delete_records",
                                  "http_interleaved"])
def test_both_clients_read_the_same_with_the_cache_on_and_off(gateways, case):
    seen = {}
    for side, (gw, log) in gateways.items():
        topic, count = _scenario(gw, log, case)
        seen[side] = (_stamp_free(consume_confluent(gw, topic, 2, count), case),
                      _stamp_free(consume_kafka_python(gw, topic, count), case))
        assert len(seen[side][0]) == count
        assert seen[side][0] == seen[side][1]
    assert seen[ON] == seen[OFF]


def test_read_committed_transactions_the_same_with_the_cache_on_and_off(gateways):
    seen = {}
    for side, (gw, log) in gateways.items():
        topic = _topic(log, {})
        produce_confluent(gw, topic, make_records(20), acks="all")
        for commit in (False, True):
            p = ck.Producer({"bootstrap.servers": gw.bootstrap, "linger.ms": 5,
                             "transactional.id": f"tc-{uuid.uuid4().hex[:8]}"})
            p.init_transactions(30)
            p.begin_transaction()
            for i in range(5):
                p.produce(topic, key=b"t%d" % i, value=b"txn-%s-%d" % (b"c" if commit else b"a", i),
                          partition=0, timestamp=1_700_000_000_000 + i)
            (p.commit_transaction if commit else p.abort_transaction)(30)
        produce_confluent(gw, topic, make_records(20), acks="all")
        c = ck.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 100})
        c.assign([ck.TopicPartition(topic, p, 0) for p in (0, 1)])
        out = []
        for _ in range(200):
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                out.append((m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1]))
            if len(out) >= 45:
                break
        c.close()
        seen[side] = sorted(out)
    assert len(seen[ON]) == 45
    assert [v for *_, v, _ts in seen[ON] if v and v.startswith(b"txn-")] == \
        [b"txn-c-%d" % i for i in range(5)]
    assert seen[ON] == seen[OFF]


def test_a_raw_fetch_is_served_from_the_cache(gateways):
    """On a ``producer`` topic the segments answer uncompressed batches; the cache sends
    the producer's lz4 batches as received, where the segment path answers uncompressed
    ones."""
    for side, (gw, log) in gateways.items():
        topic = _topic(log, {})
        recs = make_records(50)
        before = _hits(gw)
        produce_confluent(gw, topic, recs, acks="all", **{"compression.type": "lz4"})
        data = fetched(gw, topic)
        # (librdkafka sends a batch that lz4 does not shrink uncompressed)
        assert ("lz4" in codecs_of(data)) if side == ON else codecs_of(data) == {"none"}
        assert (_hits(gw) > before) == (side == ON)


# -- the cache's rules, on a fake manifest ---------------------------------------------

def _batch(n: int, codec: str = "none", **kw) -> tuple[records.DecodedBatch, bytes]:
    import pyarrow as pa

    from ingest_gateway.server.codec import PART_SCHEMA

    table = pa.table({"key": [b"k"] * n, "value": [b"v%d" % i for i in range(n)],
                      "timestamp": pa.array([1_700_000_000_000 + i for i in range(n)],
                                            pa.int64()),
                      "headers": [[] for _ in range(n)]})
    table = table.cast(PART_SCHEMA) if table.schema != PART_SCHEMA else table
    raw = records.encode_batch(table, base_offset=0, codec=codec, **kw)
    (decoded,) = records.decode_batches(raw, max_bytes=1 << 20)
    assert bytes(decoded.raw) == raw  # decoded once: the batch keeps its bytes as received
    return decoded, raw


def _manifest(start=0, end=100, lso=None, cleaned=0):
    return SimpleNamespace(log_start_offset=start, next_offset=end, cleaned_offset=cleaned,
                           last_stable_offset=end if lso is None else lso, epochs=((3, 0),))


def _take(cache, offset, m=None, committed=False, codec="producer", max_bytes=1 << 20,
          epoch=1, topic_id="id"):
    return cache.take(("t", 0), offset, topic_id=topic_id, leader_epoch=epoch,
                      manifest=m or _manifest(), committed=committed, topic_codec=codec,
                      max_bytes=max_bytes)


def _add(cache, base, batch, raw, epoch=1, topic_id="id"):
    assert bytes(batch.raw) == raw  # what the cache keeps is the batch's own bytes
    cache.add(("t", 0), topic_id=topic_id, leader_epoch=epoch, base=base, batch=batch)


def test_a_contiguous_run_is_served_stamped_and_a_gap_ends_it():
    cache = tail_cache.TailCache(1 << 20)
    b, raw = _batch(10)
    for base in (0, 10, 25):  # 20-24: records of an HTTP produce
        _add(cache, base, b, raw)
    got = _take(cache, 0)
    assert got[0] == raw[:12] + (3).to_bytes(4, "big") + raw[16:]  # the epoch stamped
    assert [int.from_bytes(g[:8], "big") for g in got] == [0, 10]
    assert _take(cache, 20) is None and _take(cache, 5) is None
    assert _take(cache, 25, _manifest(end=30)) is None  # past the high watermark
    assert _take(cache, 0, _manifest(start=10)) is None  # below the log start
    assert _take(cache, 10, _manifest(lso=15), committed=True) is None
    assert _take(cache, 0, max_bytes=len(raw) - 1) is None  # the segments cut it
    assert len(_take(cache, 0, max_bytes=len(raw) * 2 - 1)) == 1
    assert _take(cache, 0, codec="zstd") is None and _take(cache, 0, codec="none")
    assert _take(cache, 0, _manifest(cleaned=5)) is None  # compacted below 5


def test_retries_epochs_topic_ids_and_eviction():
    b, raw = _batch(10)
    cache = tail_cache.TailCache(len(raw) * 2)
    _add(cache, 0, b, raw)
    _add(cache, 0, b, raw)  # an idempotent retry answered with the same offsets
    assert cache.size == len(raw)
    _add(cache, 10, b, raw)
    _add(cache, 20, b, raw)  # evicts the batch at 0
    assert _take(cache, 0) is None and len(_take(cache, 10)) == 2
    _add(cache, 0, b, raw)  # a late retry of the evicted batch: not kept again
    assert _take(cache, 0) is None
    assert _take(cache, 10, epoch=2) is None and _take(cache, 10) is None  # dropped
    _add(cache, 30, b, raw)
    assert _take(cache, 30, topic_id="other") is None and cache.size == 0
    txn, txn_raw = _batch(5, producer_id=1, producer_epoch=0, base_sequence=0,
                          is_transactional=True)
    _add(cache, 40, txn, txn_raw)
    assert cache.size == 0 and tail_cache.TailCache(0).size == 0
