"""Consumers in tests: several of one group driven from one test thread; a topic's first
records read with confluent-kafka."""

from __future__ import annotations

import time


def drive(consumers, until, what, sink=None, *, timeout: float = 60.0, poll_s: float = 0.05):
    """Poll every consumer in turn (rejoins happen inside poll) until ``until()``.

    ``sink(consumer, records)`` sees each poll's records. Raises AssertionError
    naming ``what`` and each consumer's assignment after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: "
                                 f"{[(c.client_id, c.assignment()) for c in consumers]}")
        for c in consumers:
            recs = c.poll(poll_s)
            if sink is not None:
                sink(c, recs)


def consume(gw, topic: str, n: int) -> list:
    """The first ``n`` messages of ``topic`` through the gateway's Kafka listener, read by
    confluent-kafka from the earliest offset in a group of the topic's own; a poll that
    times out or errs fails the test."""
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "g-" + topic,
                            "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    try:
        while len(got) < n:
            msg = consumer.poll(20)
            assert msg is not None and not msg.error(), msg and msg.error()
            got.append(msg)
    finally:
        consumer.close()
    return got
