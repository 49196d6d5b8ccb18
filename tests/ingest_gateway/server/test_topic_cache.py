"""The gateway's topic cache: once a topic is known no request waits for a store read;
one read at a time refreshes it; a topic gone from the store is forgotten."""

from __future__ import annotations

import asyncio

import pytest

import conf
from ingest_gateway.server.topic_cache import TopicCache
from log_layout import UnknownTopic, open_log


class HeldReads:
    """``run_blocking`` whose reads wait until :meth:`release`; counts the reads started."""

    def __init__(self):
        self.started = self.ended = 0
        self.open = asyncio.Event()

    async def __call__(self, fn, *args):
        self.started += 1
        try:
            await self.open.wait()
            return fn(*args)
        finally:
            self.ended += 1

    def release(self):
        self.open.set()

    def hold(self):
        self.open.clear()


async def until(condition) -> None:
    """Let the loop run until ``condition()`` holds (a hang means it never did)."""
    async def wait():
        while not condition():
            await asyncio.sleep(0.001)
    await asyncio.wait_for(wait(), timeout=60)


def cache_over(tmp_path, reads, **settings):
    settings = conf.load({"store.url": str(tmp_path / "store"), **settings})
    log = open_log(str(tmp_path / "store"))
    return log, TopicCache(log, settings.gateway, settings.topic, reads, cache_s=0.0)


def test_an_expired_topic_is_answered_at_once_and_refreshed_by_one_read(tmp_path):
    async def scenario():
        reads = HeldReads()
        log, cache = cache_over(tmp_path, reads)
        log.create_topic("t", {"partitions": 2})
        first = asyncio.ensure_future(cache.get("t"))
        await until(lambda: reads.started == 1)
        assert not first.done()  # nothing known yet: it waits for the read
        reads.release()
        known = await first
        assert known.partitions == 2

        reads.hold()
        log.alter_topic("t", {"partitions": 3})
        # expired (cache_s=0), the read held: answered from what is known, without waiting
        # (a hang here means the request waited for the held read)
        again = await asyncio.wait_for(cache.get("t"), timeout=60)
        assert again is known and reads.started == 2
        await asyncio.wait_for(cache.get("t"), timeout=60)
        assert reads.started == 2  # the refresh under way serves, no second read
        reads.release()

        async def refreshed():
            while (await cache.get("t")).partitions != 3:
                await asyncio.sleep(0.001)
        await asyncio.wait_for(refreshed(), timeout=60)

    asyncio.run(scenario())


def test_a_topic_deleted_elsewhere_is_forgotten_after_one_known_answer(tmp_path):
    async def scenario():
        reads = HeldReads()
        reads.release()
        log, cache = cache_over(tmp_path, reads)
        log.create_topic("gone", {"partitions": 1})
        await cache.get("gone")
        log.delete_topic("gone")
        await cache.get("gone")  # what was known, while the refresh finds it gone

        async def forgotten():
            while True:
                await cache.get("gone")
                await asyncio.sleep(0.001)
        with pytest.raises(UnknownTopic):
            await asyncio.wait_for(forgotten(), timeout=60)

    asyncio.run(scenario())


def test_known_answers_only_a_fresh_entry_and_never_reads(tmp_path):
    """``known`` (the Kafka listener's topic-id lookup on the event loop, issue 30): the
    cached metadata while fresh, None before the first read, once expired and once
    forgotten; it never starts a read itself."""
    async def scenario():
        reads = HeldReads()
        reads.release()
        settings = conf.load({"store.url": str(tmp_path / "store")})
        log = open_log(str(tmp_path / "store"))
        log.create_topic("t", {"partitions": 2})
        fresh = TopicCache(log, settings.gateway, settings.topic, reads, cache_s=3600.0)
        assert fresh.known("t") is None and reads.started == 0  # not read yet: no read
        info = await fresh.get("t")
        assert fresh.known("t") == info and reads.started == 1
        fresh.forget("t")  # deleted or altered: no longer vouched for
        assert fresh.known("t") is None and reads.started == 1
        _, expired = cache_over(tmp_path, reads)  # cache_s=0: every entry already stale
        await expired.get("t")
        assert expired.known("t") is None
    asyncio.run(scenario())
