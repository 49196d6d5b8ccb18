"""Several brokers: two gateway slots of a broker application over one store, each
with its Kafka listener, the test playing the driver (``tests/ingest_gateway/slots``).
confluent-kafka bootstraps from slot 0 only, produces to partitions led by both
slots and reads everything back in a group that slot 1 coordinates."""

from __future__ import annotations

import pytest

from jobs.gateway_process import free_port, wait_for
from log_layout.brokers import OFFSETS_PARTITIONS, coordinator_partition
from tests.ingest_gateway.kafka.kafka_gateway import (KafkaGatewayProcess, call, connect,
                                                      read_in_group)
from tests.ingest_gateway.slots import SlotApplication, leader

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402
from kio.schema.find_coordinator.v4 import request as fc4  # noqa: E402
from kio.schema.metadata.v12 import request as md12  # noqa: E402

TOPIC, GROUP, PARTITIONS, PER_PARTITION = "kt", "kg", 4, 10
LEADERS = (0, 1, 0, 1)
TIMEOUT = 20


class KafkaSlots(SlotApplication):
    """SlotApplication whose gateways also listen for Kafka clients."""

    def __init__(self, store_url: str):
        super().__init__(store_url, slots=())
        for slot in (0, 1):
            port = free_port()
            self.gateways[slot] = KafkaGatewayProcess(store_url, port=port, settings={
                "gateway.broker.id": str(slot),
                "gateway.advertised.listeners": f"http://127.0.0.1:{port}"})


@pytest.fixture(scope="module")
def slots(tmp_path_factory):
    app = KafkaSlots(str(tmp_path_factory.mktemp("kafka-slots") / "store"))
    app.log.create_topic(TOPIC, {"partitions": PARTITIONS})
    offsets = [0] * OFFSETS_PARTITIONS
    offsets[coordinator_partition(GROUP)] = 1
    with app.running():
        app.publish_assignment({TOPIC: LEADERS}, offsets=offsets)
        yield app


def _metadata(gw):
    with connect(gw) as s:
        req = md12.MetadataRequest(topics=(md12.MetadataRequestTopic(topic_id=None, name=TOPIC),),
                                   allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False)
        return call(s, req, 12)[1]


def _brokers_and_leaders(gw):
    m = _metadata(gw)
    return (sorted((b.node_id, b.port) for b in m.brokers),
            [p.leader_id for p in sorted(m.topics[0].partitions, key=lambda p: p.partition_index)])


def test_every_slot_is_a_broker_and_a_client_uses_both(slots):
    gw0, gw1 = slots.gateways[0], slots.gateways[1]
    expected = ([(0, gw0.kafka_port), (1, gw1.kafka_port)], list(LEADERS))
    # each slot registers its Kafka address at its next heartbeat (1 s)
    wait_for(lambda: _brokers_and_leaders(gw0) == expected, timeout=TIMEOUT,
             what="slot 0's Metadata naming both slots")
    assert _brokers_and_leaders(gw1) == expected
    epochs = {p.partition_index: p.leader_epoch for p in _metadata(gw0).topics[0].partitions}

    p = ck.Producer({"bootstrap.servers": gw0.bootstrap, "enable.idempotence": True,
                     "acks": "all", "linger.ms": 2})
    sent = {(part, f"v{part}-{i}".encode()) for part in range(PARTITIONS)
            for i in range(PER_PARTITION)}
    for part, value in sorted(sent):
        p.produce(TOPIC, value=value, partition=part)
    assert p.flush(TIMEOUT) == 0
    # each partition was written by the slot the assignment names, at the epoch announced
    ids = {s: slots.registry.gateway(s).gateway_id for s in (0, 1)}
    for part, slot in enumerate(LEADERS):
        m = slots.log.partition(TOPIC, part).snapshot(refresh=True)
        assert (leader(slots.log, part, TOPIC), m.next_offset) == (ids[slot], PER_PARTITION)
        assert epochs[part] in (-1, m.leader_epoch)

    got, committed = read_in_group(gw0.bootstrap, TOPIC, GROUP, len(sent), timeout=TIMEOUT,
                                   committed_partitions=PARTITIONS)
    assert got == sent
    assert committed == [PER_PARTITION] * PARTITIONS


def test_find_coordinator_and_describe_cluster_name_the_other_slot(slots):
    gw0, gw1 = slots.gateways[0], slots.gateways[1]

    def coordinators():
        with connect(gw0) as s:
            req = fc4.FindCoordinatorRequest(key_type=0, coordinator_keys=(GROUP, "other"))
            return [(c.key, int(c.error_code), c.node_id, c.port)
                    for c in call(s, req, 4)[1].coordinators]

    wait_for(lambda: coordinators()[0] == (GROUP, 0, 1, gw1.kafka_port), timeout=TIMEOUT,
             what="slot 0 naming slot 1 as the group's coordinator")
    assert coordinators()[1] == ("other", 0, 0, gw0.kafka_port)
    admin = AdminClient({"bootstrap.servers": gw0.bootstrap})  # kept: its futures need it
    cluster = admin.describe_cluster().result(timeout=TIMEOUT)
    assert sorted((n.id, n.port) for n in cluster.nodes) == \
        [(0, gw0.kafka_port), (1, gw1.kafka_port)]


def test_a_partition_moving_to_the_other_slot_keeps_its_clients_going(slots):
    """Partition 3 moves from slot 1 to slot 0: Metadata names the new leader at a
    higher leader epoch, the producer and the assigned consumer follow it, nothing is
    lost or read twice. When Metadata names the new epoch, librdkafka checks its position
    with OffsetForLeaderEpoch for its last record's epoch: records stamped with the wrong
    epoch made it see a truncation and read the partition again from offset 0 (1 run in
    6 under load), which test_admin_records checks at its source."""
    gw0 = slots.gateways[0]
    wait_for(lambda: _brokers_and_leaders(gw0)[1] == list(LEADERS), timeout=TIMEOUT,
             what="the first assignment applied")
    before = slots.log.partition(TOPIC, 3).snapshot(refresh=True)
    c = ck.Consumer({"bootstrap.servers": gw0.bootstrap, "group.id": "unused",
                     "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 500})
    c.assign([ck.TopicPartition(TOPIC, 3, ck.OFFSET_BEGINNING)])
    p = ck.Producer({"bootstrap.servers": gw0.bootstrap, "enable.idempotence": True,
                     "acks": "all", "topic.metadata.refresh.interval.ms": 500})

    def read(n):
        out = []
        while len(out) < n:
            msg = c.poll(TIMEOUT)
            assert msg is not None, f"only {len(out)} of {n} records within the timeout"
            assert not msg.error(), msg.error()
            out.append((msg.offset(), msg.value()))
        return out

    try:
        first = read(before.next_offset)
        offsets = [0] * OFFSETS_PARTITIONS
        offsets[coordinator_partition(GROUP)] = 1
        slots.publish_assignment({TOPIC: (0, 1, 0, 0)}, offsets=offsets)
        wait_for(lambda: _metadata(gw0).topics[0].partitions[3].leader_id == 0 and
                 slots.log.partition(TOPIC, 3).snapshot(refresh=True).leader_epoch >
                 before.leader_epoch, timeout=TIMEOUT, what="slot 0 leading partition 3")
        for i in range(5):
            p.produce(TOPIC, value=f"moved-{i}".encode(), partition=3)
        assert p.flush(TIMEOUT) == 0
        after = read(5)
    finally:
        c.close()
    assert [o for o, _ in first + after] == list(range(before.next_offset + 5))
    assert [v for _, v in after] == [f"moved-{i}".encode() for i in range(5)]
    m = slots.log.partition(TOPIC, 3).snapshot(refresh=True)
    assert m.leader == slots.registry.gateway(0).gateway_id and m.next_offset == \
        before.next_offset + 5
