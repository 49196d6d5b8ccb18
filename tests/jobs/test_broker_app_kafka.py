"""The broker application as Kafka brokers: ``sparklog broker-app --kafka-port`` gives
every slot a Kafka listener of its own (node id = slot, port BASE+slot), so one machine
runs a gateway process per core, each a broker, with the leaders the driver assigns.
Unmodified confluent-kafka bootstraps from one slot, produces to partitions led by
both and reads them back in a group."""

from __future__ import annotations

import pytest

from jobs.broker_app_process import BrokerAppProcess, free_ports
from jobs.gateway_process import wait_for
from log_layout import open_log
from log_layout.brokers import BrokerRegistry
from tests.ingest_gateway.kafka.kafka_gateway import read_in_group

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

TOPIC, PARTITIONS, PER_PARTITION, TIMEOUT = "events", 4, 25, 30


def _leaders(admin: AdminClient) -> tuple[list[tuple[int, int]], list[int]]:
    md = admin.list_topics(TOPIC, timeout=TIMEOUT)
    parts = md.topics[TOPIC].partitions
    return (sorted((b.id, b.port) for b in md.brokers.values()),
            [parts[p].leader for p in sorted(parts)])


def test_every_slot_is_a_kafka_broker_with_the_assigned_leaders(tmp_path):
    store = str(tmp_path / "store")
    log = open_log(store)
    log.create_topic(TOPIC, {"partitions": PARTITIONS})
    kafka = free_ports(2)
    app = BrokerAppProcess(store, None, str(tmp_path / "app"), gateways=2, kafka_port=kafka)
    try:
        app.start()
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{kafka}"})  # slot 0 only
        registry = BrokerRegistry(log.store)

        def assigned() -> list[int] | None:
            doc = registry.assignment()
            return None if doc is None else list(doc.partitions.get(TOPIC, ()))

        # Metadata names both slots, each on its own port, and the driver's leaders
        wait_for(lambda: _leaders(admin)[0] == [(0, kafka), (1, kafka + 1)] and
                 _leaders(admin)[1] == assigned(), timeout=TIMEOUT,
                 what="both slots as brokers with the assigned leaders")
        assert set(_leaders(admin)[1]) == {0, 1}  # the driver spread the partitions

        p = ck.Producer({"bootstrap.servers": f"127.0.0.1:{kafka}", "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
        sent = {(part, f"{part}-{i}".encode()) for part in range(PARTITIONS)
                for i in range(PER_PARTITION)}
        for part, value in sorted(sent):
            p.produce(TOPIC, value=value, partition=part)
        assert p.flush(TIMEOUT) == 0

        got, _ = read_in_group(app.kafka_bootstrap, TOPIC, "readers", len(sent),
                               timeout=TIMEOUT)
        assert got == sent
        # each partition was written by the gateway of the slot Metadata named
        leaders = _leaders(admin)[1]
        for part in range(PARTITIONS):
            m = log.partition(TOPIC, part).snapshot(refresh=True)
            assert m.next_offset == PER_PARTITION
            assert m.leader == registry.gateway(leaders[part]).gateway_id
    finally:
        status = app.stop()
    assert status == 0, app.log_text()[-3000:]
