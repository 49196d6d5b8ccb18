"""A KIP-848 group survives its coordinator's death (broker application, issue 31).

Two gateway processes with Kafka listeners are slots 0 and 1 of one application on one
store; the test plays the driver (``SlotApplication``). Two consumer-protocol members
heartbeat (raw ConsumerGroupHeartbeat over real sockets) at slot 0, reconcile and commit;
slot 0 is SIGKILLed and slot 1 made the coordinator. The members carry on at slot 1
with the member ids, epochs and partitions slot 0 wrote into the group's document, and
their commits are there.
"""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from kio.schema.consumer_group_heartbeat.v1 import request as cgh

from jobs.gateway_process import GatewayProcess, free_port, wait_for
from log_layout.brokers import OFFSETS_PARTITIONS, coordinator_partition
from tests.ingest_gateway.kafka.kafka_gateway import call
from tests.ingest_gateway.slots import SlotApplication

pytestmark = pytest.mark.slow  # two gateways, one killed

TOPIC, PARTITIONS, GROUP = "failover", 4, "kip848-failover"
NOT_COORDINATOR = 16


class Application(SlotApplication):
    """Two slots, each with a Kafka listener."""

    def __init__(self, url: str):
        super().__init__(url)
        self.kafka_ports = {}
        for slot in self.gateways:
            port, kport = free_port(), free_port()
            self.kafka_ports[slot] = kport
            self.gateways[slot] = GatewayProcess(url, port=port, settings={
                "gateway.broker.id": str(slot),
                "gateway.advertised.listeners": f"http://127.0.0.1:{port}",
                "gateway.kafka.listeners": f"PLAINTEXT://127.0.0.1:{kport}"})

    def coordinate(self, slot: int, live: tuple[int, ...]) -> None:
        owners = [live[0]] * OFFSETS_PARTITIONS
        owners[coordinator_partition(GROUP)] = slot
        self.publish_assignment({TOPIC: [live[p % len(live)] for p in range(PARTITIONS)]},
                                offsets=owners, live=live)


def beat(port: int, member_id: str, epoch: int, owned=None, join=False):
    import socket

    req = cgh.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id=member_id, member_epoch=epoch,
        rebalance_timeout=datetime.timedelta(seconds=30 if join else -0.001),
        subscribed_topic_names=(TOPIC,) if join else None, topic_partitions=owned)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        return call(s, req, 1)[1]


def _owned(answer) -> tuple:
    """A heartbeat answer's assignment as the owned partitions of the next request."""
    return tuple(cgh.TopicPartitions(topic_id=t.topic_id, partitions=tuple(t.partitions))
                 for t in answer.assignment.topic_partitions)


def test_members_carry_on_at_the_new_coordinator_after_a_kill(tmp_path):
    app = Application(str(tmp_path / "store"))
    app.log.create_topic(TOPIC, {"partitions": PARTITIONS})
    for p in range(PARTITIONS):
        app.log.partition(TOPIC, p).claim("seed").append(pa.table({
            "key": [b"k"] * 3, "value": [b"v"] * 3}))
    with app.running():
        a, b = app.kafka_ports[0], app.kafka_ports[1]
        app.coordinate(0, (0, 1))
        wait_for(lambda: beat(b, "probe", 1).error_code == NOT_COORDINATOR, timeout=20,
                 what="slot 1 refusing the group")
        joined = {}
        wait_for(lambda: joined.setdefault("one", beat(a, "one", 0, (), join=True)
                                           ).error_code == 0 or joined.pop("one") is None,
                 timeout=20, what="slot 0 coordinating the group")
        joined["two"] = beat(a, "two", 0, (), join=True)
        epochs = {m: r.member_epoch for m, r in joined.items()}
        owned = {m: _owned(r) for m, r in joined.items()}
        for _ in range(4):  # reconcile: one revokes half, two gets it
            for m in ("one", "two"):
                r = beat(a, m, epochs[m], owned[m])
                assert r.error_code == 0, r
                epochs[m] = r.member_epoch
                if r.assignment is not None:
                    owned[m] = _owned(r)
        parts = {m: sorted(p for t in owned[m] for p in t.partitions) for m in owned}
        assert sorted(parts["one"] + parts["two"]) == list(range(PARTITIONS)), parts
        assert len(parts["one"]) == len(parts["two"]) == 2
        app.gateways[0].kill()  # SIGKILL: nothing written on the way out
        app.coordinate(1, (1,))
        wait_for(lambda: beat(b, "one", epochs["one"], owned["one"]).error_code == 0,
                 timeout=30, what="slot 1 taking the group over")
        for m in ("one", "two"):
            r = beat(b, m, epochs[m], owned[m])
            assert r.error_code == 0 and r.member_epoch >= epochs[m], r
        d = app.gateways[1].request("GET", f"/groups/{GROUP}")[1]
        after = {x["member_id"]: sorted(a["partition"] for a in x["assignment"])
                 for x in d["members"]}
        assert after == parts, (after, parts)
        assert d["type"] == "consumer"
