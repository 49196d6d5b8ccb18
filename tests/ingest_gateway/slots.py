"""Gateway slots of a broker application over one store, with the test as the driver.

The tests of issue 13 run real gateway processes with ``gateway.broker.id`` and
publish the assignments themselves (``BrokerRegistry.publish``)::

    app = SlotApplication(store_url, slots=(0, 1))
    with app.running():
        app.publish_assignment({"t": (0, 1)}, offsets=(0,) * OFFSETS_PARTITIONS)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

from jobs.gateway_process import GatewayProcess, free_port
from log_layout import open_log
from log_layout.brokers import OFFSETS_PARTITIONS, OFFSETS_TOPIC, Assignment, BrokerRegistry


def slot_gateway(store: str, slot: int, port: int | None = None) -> GatewayProcess:
    """A gateway process (not started) that is ``slot`` of the application."""
    port = port or free_port()
    return GatewayProcess(store, port=port, settings={
        "gateway.broker.id": str(slot),
        "gateway.advertised.listeners": f"http://127.0.0.1:{port}"})


def leader(log, partition: int, topic: str = "t") -> str:
    """The gateway id in the partition's newest manifest ("" before any claim)."""
    return log.partition(topic, partition).snapshot(refresh=True).leader or ""


class SlotApplication:
    """Gateway slots over one store, and the test as their driver."""

    def __init__(self, store_url: str, slots: Sequence[int] = (0, 1)):
        self.store_url = store_url
        self.log = open_log(store_url, fsync=False)
        self.registry = BrokerRegistry(self.log.store)
        self.generation = 0
        self.gateways = {slot: slot_gateway(store_url, slot) for slot in slots}

    def url(self, slot: int) -> str:
        return self.gateways[slot].url

    @contextlib.contextmanager
    def running(self) -> Iterator["SlotApplication"]:
        """Every gateway started; each stopped (then killed if need be) after."""
        try:
            for gw in self.gateways.values():
                gw.start()
            yield self
        finally:
            for gw in self.gateways.values():
                gw.__exit__(None, None, None)

    def publish_assignment(self, partitions: Mapping[str, Sequence[int]], *,
                           offsets: Sequence[int] | None = None,
                           live: Sequence[int] | None = None) -> Assignment:
        """The next generation: ``partitions`` topic -> leader slot per partition,
        ``offsets`` the leader of each offsets-topic partition (default: the first
        live slot coordinates every group)."""
        self.generation += 1
        live = tuple(live if live is not None else self.gateways)
        a = Assignment(1, self.generation, {s: gw.url for s, gw in self.gateways.items()},
                       live, {**{t: tuple(o) for t, o in partitions.items()},
                              OFFSETS_TOPIC: tuple(offsets or (live[0],) * OFFSETS_PARTITIONS)})
        assert self.registry.publish(a)
        return a
