"""The broker application's slots as other gateways see them: each slot's registration
(``log_layout.brokers``: ``_brokers/gateways/<slot>.json``, with its Kafka listener's
address and the leader epochs of the partitions it writes), read at most every
``ttl_s`` and shared by every request of the gateway (one listing and one conditional
read per slot a round).
"""

from __future__ import annotations

import time

from ingest_gateway.server.gateway import Gateway
from log_layout.brokers import BrokerRegistry, GatewayInfo, tp_key

__all__ = ["BrokerDirectory", "GatewayInfo", "tp_key"]

#: how long the slots' registrations read are reused (a heartbeat is 1 s)
DIRECTORY_TTL_S = 1.0


class BrokerDirectory:
    """Every slot's :class:`GatewayInfo` (slot -> registration), cached ``ttl_s``."""

    def __init__(self, gateway: Gateway, ttl_s: float = DIRECTORY_TTL_S):
        self.gateway, self.ttl_s = gateway, ttl_s
        self._registry = BrokerRegistry(gateway.log.store)
        self._read_at = -1e9
        self._gateways: dict[int, GatewayInfo] = {}

    async def registrations(self) -> dict[int, GatewayInfo]:
        """Every slot's registration, read again when older than ``ttl_s``. Raises
        StoreError, OSError."""
        if time.monotonic() - self._read_at >= self.ttl_s:
            self._gateways = await self.gateway.batcher.run_blocking(self._registry.gateways)
            self._read_at = time.monotonic()
        return self._gateways
