"""An idempotent producer keeps each partition's sequence whole after a failed batch.

A batch the gateway surely did not write gives its sequence numbers back and the
later batches are renumbered (as Kafka's producer does); one that may yet be
written leaves the partition unusable for this producer, with an error naming
the cause instead of a delivery timeout on an "out of order" sequence.
"""

from __future__ import annotations

import pytest

from ingest_gateway.client import ProduceError, Producer
from log_layout import open_log
from tests.conftest import make_log_url
from jobs.gateway_process import GatewayProcess


def test_a_rejected_batch_does_not_block_the_partition(gateway, gateway_log, topic):
    gateway_log.alter_topic(topic, {"max.message.bytes": 1000})
    with Producer(gateway.url, linger_ms=0, max_in_flight=5, delivery_timeout_ms=10_000) as producer:
        # a batch the gateway refuses (413), then batches already on their way behind it
        bad = producer.send_batch(topic, [b"x" * 5000], partition=1)
        good = [producer.send_batch(topic, [b"ok-%d-%d" % (i, j) for j in range(10)], partition=1)
                for i in range(20)]
        with pytest.raises(ProduceError) as e:
            bad.result(timeout=30)
        assert e.value.status == 413
        metas = [h.result(timeout=30) for h in good]  # no delivery timeout, no gap
        after = producer.send(topic, b"after", partition=1).result(timeout=30)
    assert [m.base_offset for m in metas] == list(range(0, 200, 10))  # once each, in order
    assert after.offset == 200
    rows = gateway_log.partition(topic, 1).read_table(0).to_pylist()
    assert [r["value"] for r in rows] == \
        [b"ok-%d-%d" % (i, j) for i in range(20) for j in range(10)] + [b"after"]


def test_rejections_in_the_middle_of_a_stream_keep_order(gateway, gateway_log, topic):
    gateway_log.alter_topic(topic, {"max.message.bytes": 1000})
    with Producer(gateway.url, linger_ms=0, max_in_flight=5, delivery_timeout_ms=10_000) as producer:
        handles = [(i, producer.send_batch(topic, [b"x" * 5000] if i % 7 == 3 else
                                           [b"v-%d" % i, b"w-%d" % i], partition=2))
                   for i in range(60)]
        results = {}
        for i, h in handles:
            try:
                results[i] = h.result(timeout=30).base_offset
            except ProduceError as e:
                assert e.status == 413 and i % 7 == 3, e
                results[i] = None
    kept = [i for i in range(60) if i % 7 != 3]
    assert [results[i] for i in kept] == list(range(0, 2 * len(kept), 2))
    rows = gateway_log.partition(topic, 2).read_table(0).to_pylist()
    assert [r["value"] for r in rows] == [v for i in kept for v in (b"v-%d" % i, b"w-%d" % i)]


@pytest.mark.slow
def test_a_batch_with_an_unknown_outcome_stops_its_partition_with_a_clear_error(tmp_path, request):
    url, options = make_log_url("file", request, tmp_path)
    open_log(url, storage_options=options).create_topic("t", {"partitions": 2})
    with GatewayProcess(url, options, settings={"gateway.linger.ms": 1}) as gw:
        with Producer(gw.url, linger_ms=0, delivery_timeout_ms=1500, retry_backoff_ms=20) as producer:
            producer.send("t", b"first", partition=0).result(timeout=30)
            gw.kill()  # no answer at all: the outcome of what follows is unknown
            with pytest.raises(ProduceError):
                producer.send("t", b"lost?", partition=0).result(timeout=30)
            gw.start()
            with pytest.raises(ProduceError) as e:
                producer.send("t", b"next", partition=0).result(timeout=30)
            assert e.value.error == "earlier_batch_failed"
            assert "create a new Producer" in str(e.value)
            # other partitions are unaffected
            assert producer.send("t", b"other", partition=1).result(timeout=30).offset == 0
        with Producer(gw.url, linger_ms=0) as fresh:
            assert fresh.send("t", b"again", partition=0).result(timeout=30).offset == 1


def test_an_oversized_record_fails_alone_at_send_not_its_batch(gateway, gateway_log, topic):
    gateway_log.alter_topic(topic, {"max.message.bytes": 1000})
    with Producer(gateway.url, linger_ms=20) as producer:
        handles = [producer.send(topic, b"x" * (5000 if i == 50 else 10)) for i in range(100)]
        keyed = producer.send(topic, b"v" * 600, key=b"k" * 500)  # key + value count
        headed = producer.send(topic, b"v" * 10, headers={"h": b"y" * 995})
        metas = {i: h.result(timeout=30) for i, h in enumerate(handles) if i != 50}
        for h in (handles[50], keyed, headed):
            with pytest.raises(ProduceError) as e:
                h.result(timeout=30)
            assert e.value.status == 413 and e.value.error == "record_too_large"
    assert len(metas) == 99  # the rest went through, each once
    for p in {m.partition for m in metas.values()}:
        offsets = sorted(m.offset for m in metas.values() if m.partition == p)
        assert offsets == list(range(len(offsets)))


def test_the_record_limit_is_read_again_before_refusing(gateway, gateway_log, topic):
    gateway_log.alter_topic(topic, {"max.message.bytes": 1000})
    with Producer(gateway.url, linger_ms=0) as producer:
        producer.send(topic, b"small").result(timeout=30)  # the producer reads the limit
        cluster = gateway.request("GET", "/v3/clusters")[1]["data"][0]["cluster_id"]
        status, _, _ = gateway.request(  # through the gateway: it forgets its cached configs
            "POST", f"/v3/clusters/{cluster}/topics/{topic}/configs:alter",
            body={"data": [{"name": "max.message.bytes", "value": "10000"}]})
        assert status == 204
        assert producer.send(topic, b"x" * 5000).result(timeout=30).offset is not None


def test_no_more_than_four_later_batches_pass_one_whose_answer_is_late(gateway, gateway_log,
                                                                          topic):
    """The gateway remembers a producer's last 5 batches per partition, so a batch whose
    answer was lost is still known as a duplicate on its retry only if at most 4 later
    batches of its partition were written meanwhile (Kafka's max.in.flight <= 5 rule).
    Seen once in the SIGKILL test on S3: "sent sequence 4992, expected 7742"."""
    import threading

    release, started = threading.Event(), []
    with Producer(gateway.url, linger_ms=0, max_in_flight=5, delivery_timeout_ms=20_000) as producer:
        post = producer._post  # the one seam to delay an answer: no public hook for that

        def late_answer(batch):  # the first batch is written, its answer comes late
            started.append((batch.partition, batch.sequence))
            meta = post(batch)
            if (batch.partition, batch.sequence) == (2, 0):
                release.wait(20)
            return meta

        producer._post = late_answer
        handles = [producer.send_batch(topic, [b"b-%d" % i], partition=2) for i in range(20)]
        handles[4].result(timeout=20)  # the 4 batches after the first are answered...
        # ...and a batch of another partition, queued behind the 15 still waiting, gets
        # through: so the sender looked at those 15 since then and held them back
        producer.send_batch(topic, [b"other"], partition=0).result(timeout=20)
        while_late = sorted(seq for p, seq in started if p == 2)
        release.set()
        metas = [h.result(timeout=20) for h in handles]
    assert while_late == [0, 1, 2, 3, 4]
    assert [m.base_offset for m in metas] == list(range(20))
