"""The gateway's cache of topic metadata: one store read per topic per expiry.

A produce request needs its topic's partition count and config. They are read
from the store at most once per ``cache_s`` per topic, however many requests
wait for them, and a topic that does not exist is created with the gateway's
topic defaults when ``auto.create.topics.enable`` is on. Once a topic is known,
no request waits for a read again: past ``cache_s`` a request is answered from what
is known while one read refreshes it behind (so what a request sees is at most
``cache_s`` plus one store read old; a change made through this gateway is seen
at once, :meth:`TopicCache.forget`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from conf.settings import GatewaySettings
from conf.topic import TopicConfig
from log_layout import Log, TopicExists, TopicInfo, UnknownTopic


class TopicCache:
    """Topic metadata by name, loaded off the event loop through ``run_blocking``."""

    def __init__(self, log: Log, settings: GatewaySettings, topic_defaults: TopicConfig,
                 run_blocking: Callable[..., Awaitable[Any]], *, cache_s: float = 1.0):
        self.log, self.settings, self.topic_defaults = log, settings, topic_defaults
        self.run_blocking = run_blocking
        self.cache_s = cache_s
        self._topics: dict[str, tuple[float, TopicInfo]] = {}
        self._loads: dict[str, asyncio.Future] = {}

    async def get(self, topic: str, *, create: bool = True) -> TopicInfo:
        """The topic's metadata (at most ``cache_s`` and one read old); auto-creates if
        enabled and ``create`` (False: the requester may not create topics, ACLs said).

        Raises InvalidTopicName or UnknownTopic.
        """
        hit = self._topics.get(topic)
        if hit is not None:
            if time.monotonic() - hit[0] >= self.cache_s:
                # At 1,024 partitions every request of the second the entry expired
                # waited for the read; the one known a moment ago serves them instead.
                self._shared_load(topic)
            return hit[1]
        if not create and self.settings.auto_create_topics_enable:
            # not through the shared load, which may create the topic
            return await self.run_blocking(lambda: self.log.topic(topic, refresh=True))
        # shielded: a cancelled request leaves the read to the others waiting for it
        return await asyncio.shield(self._shared_load(topic))

    def known(self, topic: str) -> TopicInfo | None:
        """The topic's metadata if read under ``cache_s`` ago, else None; never reads
        the store (for a lookup on the event loop that would otherwise take a thread)."""
        hit = self._topics.get(topic)
        if hit is None or time.monotonic() - hit[0] >= self.cache_s:
            return None
        return hit[1]

    def _shared_load(self, topic: str) -> asyncio.Future:
        """The read of ``topic`` under way, or a new one. One read per expiry, however many
        requests are waiting: without this, every request arriving while the read runs
        would start its own (hundreds at a time at full load, a burst of store reads
        each second)."""
        loading = self._loads.get(topic)
        if loading is None:
            loading = self._loads[topic] = asyncio.ensure_future(self._load(topic))
            loading.add_done_callback(lambda f: self._loaded(topic, f))
        return loading

    def _loaded(self, topic: str, loading: asyncio.Future) -> None:
        if self._loads.get(topic) is loading:
            self._loads.pop(topic)
        # A read nobody awaits (a refresh behind a known answer) that failed: the topic
        # is gone, or the store did not answer. Forget it, so the next request reads
        # again and meets the error itself.
        if not loading.cancelled() and loading.exception() is not None:
            self._topics.pop(topic, None)

    def forget(self, topic: str) -> None:
        """Drop what is cached of a deleted or altered topic."""
        self._topics.pop(topic, None)
        self._loads.pop(topic, None)  # a read under way may predate the change

    async def _load(self, topic: str) -> TopicInfo:
        now = time.monotonic()
        me = asyncio.current_task()
        try:
            info = await self.run_blocking(lambda: self.log.topic(topic, refresh=True))
        except UnknownTopic:
            if not self.settings.auto_create_topics_enable:
                raise
            info = await self.run_blocking(self._auto_create, topic)
        if self._loads.get(topic) is me:  # not forgotten (altered, deleted) meanwhile
            self._topics[topic] = (now, info)
        return info

    def _auto_create(self, topic: str) -> TopicInfo:
        try:
            return self.log.create_topic(topic, self.topic_defaults)
        except TopicExists:
            return self.log.topic(topic, refresh=True)
