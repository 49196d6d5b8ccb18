"""Plain produce calls add their records in the order they arrived (``arrival_order``).

Found under load: librdkafka's default producer (no idempotence, pipelined requests)
sent a topic's first record in one Produce and the next 19 in a second; the second
arrived after the partition's claim completed but before the first call was resumed
from waiting on it, added its records first, and the first record landed last.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from ingest_gateway.server.arrival_order import ArrivalOrder


def _run(coro):
    return asyncio.run(coro)


def test_a_later_call_waits_for_the_earlier_ones_on_its_partitions():
    async def main():
        order, added = ArrivalOrder(), []
        a = order.enter("t", [0])
        b = order.enter("t", [0, 1])
        c = order.enter("t", [1])
        d = order.enter("u", [0])  # another topic: no wait

        async def add(name, gate):
            await gate.turn()
            added.append(name)
            gate.leave()

        tasks = [asyncio.ensure_future(add(n, g)) for n, g in (("c", c), ("b", b), ("d", d))]
        await asyncio.sleep(0.01)
        assert added == ["d"]  # b waits for a, c for b
        await add("a", a)
        await asyncio.gather(*tasks)
        assert added == ["d", "a", "b", "c"]
        assert order._last == {}  # every place freed

    _run(main())


def test_a_call_that_fails_before_its_turn_keeps_the_order_around_it():
    async def main():
        order, added = ArrivalOrder(), []
        a, b, c = (order.enter("t", [0]) for _ in range(3))
        b.leave()  # failed early (a check): c must still wait for a
        b.leave()  # leaving twice changes nothing

        async def add(name, gate):
            await gate.turn()
            added.append(name)
            gate.leave()

        later = asyncio.ensure_future(add("c", c))
        await asyncio.sleep(0.01)
        assert added == []
        await add("a", a)
        await later
        assert added == ["a", "c"]

    _run(main())


def test_a_cancelled_waiter_frees_its_place_in_order():
    async def main():
        order, added = ArrivalOrder(), []
        a, b, c = (order.enter("t", [0]) for _ in range(3))

        async def add(name, gate):
            try:
                await gate.turn()
                added.append(name)
            finally:
                gate.leave()

        waiting_b = asyncio.ensure_future(add("b", b))
        waiting_c = asyncio.ensure_future(add("c", c))
        await asyncio.sleep(0.01)
        waiting_b.cancel()
        await asyncio.sleep(0.01)
        assert added == []  # c still waits for a (b left before its turn)
        await add("a", a)
        await waiting_c
        assert added == ["a", "c"]

    _run(main())


@pytest.mark.slow
def test_pipelined_plain_produce_requests_keep_their_order(shared_gateway):
    """Many topics at once, each: one record, a pause (so it goes in a Produce of its
    own), 19 more pipelined behind it on the same connection, librdkafka's defaults
    (no idempotence); every partition reads back in the order sent."""
    wrong: list = []

    def one() -> None:
        topic = f"order-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": shared_gateway.bootstrap})
        admin.create_topics([NewTopic(topic, 1)])[topic].result(timeout=30)
        producer = ck.Producer({"bootstrap.servers": shared_gateway.bootstrap})
        sent = [b"%d" % i for i in range(20)]
        for value in sent:
            producer.produce(topic, value)
            if value == b"0":
                producer.poll(0)
                time.sleep(0.02)
        assert producer.flush(30) == 0
        consumer = ck.Consumer({"bootstrap.servers": shared_gateway.bootstrap,
                                "group.id": "g-" + topic, "auto.offset.reset": "earliest"})
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        got = []
        try:
            while len(got) < len(sent):
                msg = consumer.poll(20)
                assert msg is not None and not msg.error()
                got.append(msg.value())
        finally:
            consumer.close()
        if got != sent:
            wrong.append((topic, got))

    for _ in range(4):
        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert wrong == []
