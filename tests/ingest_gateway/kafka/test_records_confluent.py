"""Record batches written by a real client: unmodified confluent-kafka (librdkafka)
produces, idempotent, in every codec, to a minimal broker in this test that answers
ApiVersions, Metadata, InitProducerId and Produce (kio's typed bodies) and keeps the
``records`` bytes; ``decode_batches`` must give back exactly what was produced."""

from __future__ import annotations

import asyncio
import datetime
import threading

import pyarrow as pa
import pytest

from ingest_gateway.kafka.records import CODECS, decode_batches
from ingest_gateway.kafka.wire import encode_response, error, make, parse_request, response_module
from jobs.gateway_process import wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")

ZERO = datetime.timedelta(0)
PRODUCER_ID = 1234
#: what the capture broker offers: enough for librdkafka's idempotent producer. Fetch and
#: FindCoordinator are never called, but librdkafka writes record batches v2 only to a
#: broker offering Fetch 4+, lz4 only to one offering FindCoordinator, zstd Fetch 10+.
OFFERED = {18: (0, 3), 3: (4, 4), 0: (3, 7), 1: (4, 11), 10: (0, 2), 22: (0, 1)}


class CaptureBroker:
    """A one-broker cluster on 127.0.0.1 that keeps every Produce's record bytes."""

    def __init__(self):
        self.batches: list[bytes] = []
        self.loop = asyncio.new_event_loop()
        self.next_offset = 0
        self.tasks: set[asyncio.Task] = set()
        started = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(
                asyncio.start_server(self._connection, "127.0.0.1", 0))
            self.port = self.server.sockets[0].getsockname()[1]
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait(10)

    def close(self):
        async def stop():
            self.server.close()
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _connection(self, reader, writer):
        self.tasks.add(asyncio.current_task())
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                head, req = parse_request(await reader.readexactly(size))
                body = self._answer(head, req)
                if body is not None:
                    writer.write(encode_response(head, body))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _answer(self, head, req):
        mod = response_module(head.api_key, head.api_version)
        if head.api_key == 18:
            return make(mod.ApiVersionsResponse, error_code=error(0), throttle_time=ZERO,
                        api_keys=tuple(mod.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                                       for k, (lo, hi) in sorted(OFFERED.items())))
        if head.api_key == 3:
            names = [t.name for t in req.topics] if req.topics else ["t"]
            me = make(mod.MetadataResponseBroker, node_id=0, host="127.0.0.1", port=self.port,
                      rack=None)
            topics = tuple(make(mod.MetadataResponseTopic, error_code=error(0), name=n,
                                is_internal=False, partitions=(make(
                                    mod.MetadataResponsePartition, error_code=error(0),
                                    partition_index=0, leader_id=0, leader_epoch=0,
                                    replica_nodes=(0,), isr_nodes=(0,), offline_replicas=()),))
                           for n in names)
            return make(mod.MetadataResponse, throttle_time=ZERO, brokers=(me,),
                        cluster_id="capture", controller_id=0, topics=topics)
        if head.api_key == 22:
            return make(mod.InitProducerIdResponse, throttle_time=ZERO, error_code=error(0),
                        producer_id=PRODUCER_ID, producer_epoch=0)
        # Produce: keep the bytes, answer each partition with its base offset
        parts = []
        for t in req.topic_data:
            answers = []
            for p in t.partition_data:
                self.batches.append(bytes(p.records))
                base = self.next_offset
                self.next_offset += sum(b.record_count
                                        for b in decode_batches(p.records, max_bytes=1 << 26))
                answers.append(make(mod.PartitionProduceResponse, index=p.index,
                                    error_code=error(0), base_offset=base,
                                    log_append_time=None, log_start_offset=0))
            parts.append(make(mod.TopicProduceResponse, name=t.name,
                              partition_responses=tuple(answers)))
        return None if req.acks == 0 else make(mod.ProduceResponse, responses=tuple(parts),
                                                throttle_time=ZERO)


@pytest.fixture
def broker():
    b = CaptureBroker()
    yield b
    b.close()


def records(n: int) -> list[tuple]:
    return [(None if i % 5 == 0 else b"key-%d" % i,
             None if i % 11 == 7 else b"value %d " % i * (i % 40),
             1_700_000_000_000 + i,
             [("trace", b"t%d" % i), ("n", None)] if i % 2 else [])
            for i in range(n)]


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_batches_decode_exactly(broker, codec):
    sent = records(300)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": f"127.0.0.1:{broker.port}", "enable.idempotence": True,
        "compression.type": codec, "linger.ms": 20, "batch.num.messages": 100})
    for key, value, ts, headers in sent:
        producer.produce("t", key=key, value=value, timestamp=ts, partition=0,
                         headers=headers or None)
    assert producer.flush(30) == 0
    wait_for(lambda: broker.batches, what="the captured batches")
    decoded = [b for data in broker.batches for b in decode_batches(data, max_bytes=1 << 26)]
    assert len(decoded) >= 3  # librdkafka split them (batch.num.messages)
    assert {b.codec for b in decoded} == {codec}
    assert {(b.producer_id, b.producer_epoch) for b in decoded} == {(PRODUCER_ID, 0)}
    sequences = [b.base_sequence for b in decoded]
    counts = [b.record_count for b in decoded]
    assert sequences == [sum(counts[:i]) for i in range(len(counts))]
    table = pa.concat_tables([b.table for b in decoded])
    got = list(zip(table.column("key").to_pylist(), table.column("value").to_pylist(),
                   table.column("timestamp").to_pylist(),
                   [[(h["key"], h["value"]) for h in (x or [])]
                    for x in table.column("headers").to_pylist()]))
    assert got == sent
