"""What every Kafka request handler reaches: :class:`KafkaContext`, one gateway's Kafka
side (its services, node id, advertised address and the state only the Kafka listener
keeps), and the topic-id helpers Fetch, Produce and Metadata share.

The listener makes one per gateway and hands it to each handler as its first argument.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import uuid
from typing import Any

from ingest_gateway.kafka.fetch_sessions import FetchSessionCache
from ingest_gateway.kafka.join_waiters import JoinWaiters
from ingest_gateway.kafka.tail_cache import TailCache
from ingest_gateway.kafka.wire import OFFERED
from ingest_gateway.server.gateway import Gateway
from ingest_gateway.server.topic_admin import TopicAdmin
from log_layout import UnknownTopic

ZERO = datetime.timedelta(0)
NO_TOPIC_ID = uuid.UUID(int=0)


class KafkaContext:
    """One gateway's Kafka side: the gateway's services (``server.gateway.Gateway``,
    shared with the HTTP routes), its node id, the address clients are told to use, and
    what only the Kafka listener keeps (the tail cache, fetch sessions, topic-id
    names, JoinGroup waiters, the slots' registrations)."""

    def __init__(self, gateway: Gateway, host: str, port: int):
        self.gateway = gateway
        self.batcher = gateway.batcher
        self.metadata = gateway.metadata
        self.settings = gateway.settings
        self.cluster = gateway.cluster
        #: topic and config admin, the one implementation the HTTP routes call too
        self.topics: TopicAdmin = gateway.topics
        self.node_id = gateway.node_id
        self.host, self.port = host, port
        #: api key -> (min, max) version served (the listener sets the whole table)
        self.offered: dict[int, tuple[int, int]] = dict(OFFERED)
        size = self.settings.gateway.kafka_tail_cache_bytes
        #: recent committed batches as produced, for Fetch (None: kafka.tail.cache.bytes 0)
        self.tail_cache: TailCache | None = \
            TailCache(size, gateway.metrics.registry) if size > 0 else None
        #: the Kafka clients' fetch sessions (KIP-227), at most
        #: gateway.kafka.max.incremental.fetch.session.cache.slots
        self.fetch_sessions = FetchSessionCache(
            self.settings.gateway.kafka_max_incremental_fetch_session_cache_slots,
            registry=gateway.metrics.registry)
        #: topic id -> name as last found by a Fetch by id (checked again on every use)
        self.topic_names: dict[uuid.UUID, str] = {}
        #: the slots' registrations as admin_brokers last read them (None: not yet)
        self.registrations: Any = None
        self._join_waiters: JoinWaiters | None = None

    def hub(self) -> Any:
        """The gateway's consumer hub (long-poll fetches, groups), shared with the HTTP
        routes."""
        return self.gateway.hub()

    def join_waiters(self) -> JoinWaiters:
        """The JoinGroups waiting on their groups' rebalances (made on first use, on the
        event loop, over the hub's coordinator)."""
        if self._join_waiters is None:
            self._join_waiters = JoinWaiters(self.hub().coordinator, asyncio.get_running_loop())
        return self._join_waiters

    def leader(self, topic: str, partition: int) -> tuple[int, int]:
        """(leader node id or -1, leader epoch or -1) of a partition."""
        # one partition's state, not leading()'s map of every partition: Metadata asks
        # for each partition, so that was O(partitions^2) a request (15% of a hot
        # gateway's time at 1,024 partitions, issue 30)
        state = self.batcher.writing(topic, partition)
        return self.gateway.leader(topic, partition), -1 if state is None else state.writer.epoch

    async def cluster_id(self) -> str:
        return await self.gateway.cluster_id()


def topic_uuid(topic_id: str) -> uuid.UUID:
    """A store topic id (Kafka's display form: 16 bytes in URL-safe base64, see
    ``log_layout.paths.new_topic_id``) as the protocol's UUID; NO_TOPIC_ID for a topic
    made before ids ("") or an id that is not 16 bytes."""
    try:
        raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
        return uuid.UUID(bytes=raw) if topic_id else NO_TOPIC_ID
    except (ValueError, binascii.Error):
        return NO_TOPIC_ID


async def resolve_ids(ctx: KafkaContext, ids: set[uuid.UUID]) -> dict[uuid.UUID, str]:
    """:func:`names_by_id` on the event loop when every id names a topic the batcher
    read under ``topic_cache_ms`` ago (the same staleness ``metadata.topic`` allows),
    else on the hub's thread. A Produce or Fetch v13 took a thread hand-off per request
    for this, with the store not read at all (issue 30)."""
    found = {}
    for i in ids:
        name = ctx.topic_names.get(i)
        info = ctx.batcher.topics.known(name) if name is not None else None
        if info is None or topic_uuid(info.topic_id) != i:
            return await ctx.hub().run(names_by_id, ctx, ids)
        found[i] = name
    return found


def names_by_id(ctx: KafkaContext, ids: set[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Blocking: the names of the topics with these ids (the ids no topic has are left
    out), for Fetch and Produce by topic id (v13+). ``broker.topic_names`` remembers
    them, checked again on every use; a miss lists the store's topics."""
    known = ctx.topic_names
    found = {i: known[i] for i in ids if i in known and _id_of(ctx, known[i]) == i}
    if len(found) < len(ids):
        known.clear()
        for name in ctx.metadata.names():
            tid = _id_of(ctx, name)
            if tid is not None:
                known[tid] = name
        found = {i: known[i] for i in ids if i in known}
    return found


def _id_of(ctx: KafkaContext, name: str) -> uuid.UUID | None:
    """A topic's id (None: gone, or made before topics had ids)."""
    try:
        tid = topic_uuid(ctx.metadata.topic(name).topic_id)
    except UnknownTopic:
        return None
    return None if tid == NO_TOPIC_ID else tid
