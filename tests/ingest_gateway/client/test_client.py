"""The Producer client against a live gateway (local and S3 store)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ingest_gateway.client import ProduceError, Producer
from log_layout import paths
from log_layout.partitioner import partition_for_key


def test_send_batches_by_key_and_resolves_every_handle(gateway, gateway_log, topic):
    with Producer(gateway.url, linger_ms=2, batch_size=2000) as producer:
        handles = [producer.send(topic, b"value-%d" % i, key=b"key-%d" % (i % 10))
                   for i in range(500)]
        producer.flush()
        metas = [h.result(timeout=30) for h in handles]
    for i, m in enumerate(metas):
        assert m.topic == topic and m.partition == partition_for_key(b"key-%d" % (i % 10), 3)
    for p in range(3):
        offsets = sorted(m.offset for m in metas if m.partition == p)
        assert offsets == list(range(len(offsets)))  # each record once, consecutive
        rows = gateway_log.partition(topic, p).read_table(0).to_pylist()
        by_offset = {m.offset: i for i, m in enumerate(metas) if m.partition == p}
        assert all(rows[o]["value"] == b"value-%d" % i for o, i in by_offset.items())
    # the hot tier is on by default on S3 and HDFS (gateway.hot.enable=auto), off locally:
    # a partition's segments are in the shared journal objects, or its own files
    kind = gateway_log.store.url.split("://", 1)[0] if "://" in gateway_log.store.url else ""
    segments = [s.file for p in range(3) for s in gateway_log.partition(topic, p)
                .snapshot().segments]
    assert segments and all(paths.is_hot_file(f) is (kind in ("s3", "hdfs", "webhdfs"))
                            for f in segments), (kind, segments)


def test_send_headers_timestamps_and_sticky_partition(gateway, gateway_log, topic):
    with Producer(gateway.url, linger_ms=1) as producer:
        a = producer.send(topic, "text", headers={"h": b"1"}, timestamp=1_600_000_000_000)
        b = producer.send(topic, b"plain")
    ma, mb = a.result(), b.result()
    assert ma.partition == mb.partition  # keyless: one sticky partition per batch
    rows = gateway_log.partition(topic, ma.partition).read_table(0).to_pylist()
    assert rows[ma.offset]["headers"] == [{"key": "h", "value": b"1"}]
    assert rows[ma.offset]["timestamp"].year == 2020
    assert rows[mb.offset]["headers"] is None and rows[mb.offset]["value"] == b"plain"


def test_plain_and_rich_records_mixed_in_one_sticky_batch_keep_order_and_content(
        gateway, gateway_log, topic):
    # plain keyless records take send()'s fast path; a record with headers, a timestamp
    # or an explicit partition between them must join the same batch correctly
    with Producer(gateway.url, linger_ms=50, batch_size=1 << 20) as producer:
        handles = []
        for i in range(3000):
            if i % 700 == 350:
                handles.append(producer.send(topic, b"rich-%d" % i, headers=[("i", b"%d" % i)],
                                             timestamp=1_600_000_000_000 + i))
            elif i % 1000 == 999:
                handles.append(producer.send(topic, None))  # keyless tombstone
            else:
                handles.append(producer.send(topic, b"plain-%d" % i))
        last = handles[-1].result(timeout=30).partition
        handles.append(producer.send(topic, b"explicit", partition=last))
        metas = [h.result(timeout=30) for h in handles]
    rows = {p: gateway_log.partition(topic, p).read_table(0).to_pylist() for p in range(3)}
    for i, m in enumerate(metas[:3000]):
        row = rows[m.partition][m.offset]
        if i % 700 == 350:
            assert row["value"] == b"rich-%d" % i and row["headers"] == [{"key": "i", "value": b"%d" % i}]
            assert row["timestamp"].timestamp() * 1000 == 1_600_000_000_000 + i
        elif i % 1000 == 999:
            assert row["value"] is None
        else:
            assert row["value"] == b"plain-%d" % i and row["headers"] is None
    for p in range(3):  # in send order within each partition (batches close on linger.ms)
        offsets = [m.offset for m in metas[:3000] if m.partition == p]
        assert offsets == sorted(offsets)
    assert rows[last][metas[-1].offset]["value"] == b"explicit"


def test_send_batch_takes_arrow_columns(gateway, gateway_log, topic):
    values = pa.array([b"%06d" % i for i in range(10_000)])
    with Producer(gateway.url) as producer:
        h1 = producer.send_batch(topic, values, partition=2)
        h2 = producer.send_batch(topic, values.slice(0, 10), partition=2)
        assert h1.result().base_offset == 0 and h1.result().count == 10_000
        assert h2.result().base_offset == 10_000
    assert gateway_log.partition(topic, 2).high_watermark() == 10_010


def test_acks_zero_gives_no_offsets(gateway, topic):
    with Producer(gateway.url, acks=0) as producer:
        h = producer.send(topic, b"x", partition=0)
    assert h.result().offset is None


def test_refusals_surface_as_produce_errors(gateway, topic):
    with Producer(gateway.url, linger_ms=0) as producer:
        with pytest.raises(ProduceError) as e:
            producer.send("no-such-topic", b"x")  # needs the partition count
        assert e.value.status == 404
        h = producer.send(topic, b"x", partition=9)
        with pytest.raises(ProduceError) as e:
            h.result(timeout=30)
        assert e.value.status == 404 and e.value.error == "unknown_partition"


def test_options_are_validated():
    with pytest.raises(ValueError):
        Producer("ftp://x")
    with pytest.raises(ValueError):
        Producer("http://127.0.0.1:1", acks=2)


def test_send_blocks_at_buffer_memory_then_raises():
    """Nothing answers (the port refuses connections), so queued bytes never drain."""
    producer = Producer("http://127.0.0.1:9", buffer_memory=100, max_block_ms=200,
                        delivery_timeout_ms=1_000, linger_ms=1)
    first = producer.send("t", b"x" * 150, partition=0)
    with pytest.raises(TimeoutError):
        producer.send("t", b"y", partition=0)
    producer.close()  # like Kafka's, close/flush report failures through the handles
    assert isinstance(first.exception(), ProduceError)
    assert first.exception().error == "delivery_timeout"
