"""murmur2 and key partitioning, bit-exact with Kafka's Java client."""

from __future__ import annotations

import pytest

from ingest_gateway.partitioner import StickyPartitioner
from log_layout.partitioner import murmur2, partition_for_key, to_positive

# From Kafka's own test, clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
# (testMurmur2), and the Kafka-compatibility vectors Akka checks its port against.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    bytes([ord("a"), ord("b"), ord("c")]): 479470107,
    b"1": -1993445489,
    b"12": 126087238,
    b"123": -267702483,
    b"1234": -1614185708,
    b"12345": -1188365604,
}


@pytest.mark.parametrize("data,expected", list(KAFKA_VECTORS.items()))
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected


def test_partition_is_to_positive_not_abs():
    # Kafka clears the sign bit (toPositive), it does not negate: -973932308 & 0x7fffffff
    assert to_positive(-973932308) == 1173551340
    assert partition_for_key(b"21", 7) == 1173551340 % 7
    assert all(0 <= partition_for_key(k, 12) < 12 for k in KAFKA_VECTORS)


def test_empty_key_and_high_bytes():
    assert murmur2(b"") == murmur2(bytes())
    assert -2**31 <= murmur2(bytes(range(256))) < 2**31


def test_sticky_stays_until_the_batch_closes_then_moves_round_robin_per_topic():
    s = StickyPartitioner()
    assert [s.next("a", 3) for _ in range(3)] == [0, 0, 0]
    s.batch_closed("a", 1)  # not the sticky partition: no move
    assert s.next("a", 3) == 0
    seen = []
    for _ in range(4):
        s.batch_closed("a", s.next("a", 3))
        seen.append(s.next("a", 3))
    assert seen == [1, 2, 0, 1]
    assert s.next("b", 3) == 0  # topics are independent


def test_sticky_skips_partitions_with_a_flush_under_way():
    busy = {("t", 1), ("t", 2)}
    s = StickyPartitioner(busy=lambda topic, p: (topic, p) in busy)
    assert s.next("t", 4) == 0
    s.batch_closed("t", 0)
    assert s.next("t", 4) == 3  # 1 and 2 are flushing
    busy.update({("t", 0), ("t", 3)})
    s.batch_closed("t", 3)
    assert s.next("t", 4) == 0  # all busy: plain round-robin


def test_sticky_follows_a_topic_that_grew():
    s = StickyPartitioner()
    s.next("t", 2)
    s.batch_closed("t", 0)
    s.batch_closed("t", s.next("t", 2))
    assert s.next("t", 3) == 0
    s.batch_closed("t", 0)
    s.batch_closed("t", s.next("t", 3))
    assert s.next("t", 3) == 2  # the new partition gets its turn
