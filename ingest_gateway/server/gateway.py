"""One gateway's services, built once at start and handed to both protocol adapters.

``server.lifecycle.running_gateway`` builds a :class:`Gateway` with its batcher (the
composition root, ``runner``, has the HTTP app run it for its lifespan), and both
adapters are handed it (``app.state.gateway``; the Kafka listener's ``KafkaContext`` holds
it). Each service exists once per gateway: the batcher (produce, acks, flushes),
the topic metadata both adapters read (``metadata``), topic and config admin, the
consumer hub (long-poll fetches, the group coordinator, REST consumer instances), the
cluster membership under the broker application, the authorizer and quotas, the
metrics. Nothing protocol-shaped lives here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import conf
from ingest_gateway.server.batcher import Batcher
from ingest_gateway.server.consumer_hub import ConsumerHub
from ingest_gateway.server.metrics import GatewayMetrics
from ingest_gateway.server.schema_codec import SchemaCodec
from ingest_gateway.server.schema_registry import SchemaRegistry
from ingest_gateway.server.topic_admin import TopicAdmin
from ingest_gateway.server.topic_metadata import TopicMetadata
from log_layout import Log, UnknownPartition, wall_clock_ms
from log_layout.schema_registry import SchemaStore


@dataclasses.dataclass(eq=False)
class Gateway:
    """The services of one gateway process (see the module docstring).

    ``cluster`` is the broker application's membership (None: a gateway on its own,
    leading every partition); ``authenticator`` (HTTP's: ``security.authentication``),
    ``verifiers`` (the credential checks HTTP's authenticator and the Kafka listener's
    SASL login share: ``security.authentication.Verifiers``), ``authorizer`` and
    ``quotas`` are None when off;
    ``now_ms`` is the clock of group sessions and transaction timeouts (None: the wall
    clock).
    """

    settings: conf.Settings
    log: Log
    batcher: Batcher
    metrics: GatewayMetrics
    topics: TopicAdmin
    cluster: Any = None
    authenticator: Any = None
    verifiers: Any = None
    authorizer: Any = None
    quotas: Any = None
    now_ms: Callable[[], int] | None = None
    #: what both adapters read about topics (names, configs, partitions, offsets)
    metadata: TopicMetadata = dataclasses.field(init=False)
    _hub: ConsumerHub | None = dataclasses.field(default=None, init=False)
    _schema_codec: SchemaCodec | None = dataclasses.field(default=None, init=False)
    _cluster_id: str | None = dataclasses.field(default=None, init=False)

    def __post_init__(self) -> None:
        self.metadata = TopicMetadata(self.log)

    def hub(self) -> ConsumerHub:
        """The consumer hub, made at its first use (on the event loop: it starts the
        group coordinator's timers)."""
        if self._hub is None:
            self._hub = ConsumerHub(self.log, self.batcher, self.settings.gateway,
                                    now_ms=self.now_ms, cluster=self.cluster)
        return self._hub

    def schema_codec(self) -> SchemaCodec:
        """The Schema Registry's codec, and through it (``.registry``) the registry over
        the store's ``_schemas`` topic: one per gateway, made at its first use (on the
        event loop), as both cache parsed schemas by id. Making it reads nothing."""
        if self._schema_codec is None:
            self._schema_codec = SchemaCodec(SchemaRegistry(SchemaStore(self.log)))
        return self._schema_codec

    @property
    def started_hub(self) -> ConsumerHub | None:
        """The consumer hub if a consumer has made it, else None (for readers such as the
        console that must not start one)."""
        return self._hub

    @property
    def node_id(self) -> int:
        """This gateway's broker id: its slot under the broker application, else 0."""
        slot = self.settings.gateway.broker_id
        return int(slot) if slot.isdigit() else 0

    def leader(self, topic: str, partition: int) -> int:
        """The broker id leading ``topic``-``partition``: this gateway on its own, else
        the slot the assignment names; -1 while none is known (Kafka's "no leader")."""
        if self.cluster is None:
            return self.node_id
        where = self.cluster.leader(topic, partition)
        slot = where.get("slot") if where else None
        return slot if isinstance(slot, int) else -1

    def check_partition(self, topic: str, partition: int) -> None:
        """Blocking (reads the store: off the loop): raise unless ``topic``-``partition``
        exists and this gateway leads it. Raises UnknownTopic, UnknownPartition,
        NotLeader, StoreError."""
        info = self.metadata.topic(topic)
        if not 0 <= partition < info.partitions:
            raise UnknownPartition(topic, partition, info.partitions)
        if self.cluster is not None:
            self.cluster.check_leader(topic, partition)

    def clock_ms(self) -> int:
        """``now_ms()``, or the wall clock."""
        return self.now_ms() if self.now_ms is not None else wall_clock_ms()

    async def cluster_id(self) -> str:
        """The store's cluster id (read once, off the event loop)."""
        if self._cluster_id is None:
            self._cluster_id = await self.batcher.run_blocking(self.log.cluster_id)
        return self._cluster_id
