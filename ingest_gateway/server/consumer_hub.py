"""The gateway's consumer hub: long-poll waiters, one shared reader, the group coordinator,
the REST consumer instances.

**Long-poll.** A fetch registers a waiter for its partitions *before* it reads
the store, then reads; if fewer than ``min_bytes`` are available it sleeps on
the waiter, which the batcher's commit listener completes right after the flush
that commits new data (no polling of the store; under the broker application a
partition another gateway leads is re-read every ``REMOTE_POLL_S`` instead), and
reads again; after ``wait_ms`` it answers with what it has. Store reads (and group
commits) run on the hub's own threads, so a burst of fetches never delays the
batcher's flushes -- except a tail read on a store whose commits are cheap (local,
no fsync): the records just committed, in at most ``INLINE_READ_SEGMENTS`` segments
and ``INLINE_READ_BYTES`` of partitions this gateway writes, are read on the event
loop, where the thread hand-off cost more than the read (~0.8 ms of a woken fetch's
answer, measured under load).
The HTTP routes over it are ``ingest_gateway.http.fetch_routes``,
``group_routes`` and ``rest_consumers``.

**In the broker application** (``cluster``: the gateway's ``ClusterMember``) the
hub's coordinator holds only the groups this gateway coordinates; after each new
assignment the groups that moved away are dropped (their new coordinator loads
them from the store), and REST instances reach their group's coordinator through
a ``CoordinatorLink`` wherever it is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from conf.errors import SparklogError
from conf.settings import GatewaySettings
from ingest_gateway.errors import GroupError, NotCoordinator, UnknownConsumerInstance
from ingest_gateway.server.batcher import Batcher
from ingest_gateway.server.groups.consumer import ConsumerMembers
from ingest_gateway.server.groups.coordinator import GroupCoordinator
from ingest_gateway.server.groups.link import CoordinatorLink
from ingest_gateway.server.groups.table import Cluster
from ingest_gateway.server.rest_instances import Instance
from log_layout import Log, wall_clock_ms
from log_layout.direct_reader import DirectReader, Fetched

logger = logging.getLogger("sparklog.gateway")
#: how often the hub drops idle REST instances and expired group members when no
#: request arrives (the REST Proxy's expiration thread also looks every second)
EXPIRY_INTERVAL_S = 1.0
#: how often a long-poll re-reads a partition led by another gateway (no local commit
#: wakes it); clients send fetches to the leader, so this is the REST instances' case
REMOTE_POLL_S = 0.05
#: a read of at most this many segments (each a file read and decode of tens of
#: microseconds when small), all after what a tail reader has, may run on the loop
INLINE_READ_SEGMENTS = 2
INLINE_READ_BYTES = 256 << 10


class ConsumerHub:
    """Per-app consumer state. Created on the event loop (the app creates it lazily, at
    the first consumer request).

    Its clock (``now_ms``: group sessions, instance idleness) is the one given (tests
    give one), else the wall clock. Every EXPIRY_INTERVAL_S a task drops idle REST
    instances and expired group members, so neither waits for a request to arrive.
    ``cluster`` is the gateway's cluster membership (None: a standalone gateway,
    which coordinates every group).
    """

    def __init__(self, log_: Log, batcher: Batcher, settings: GatewaySettings, *,
                 now_ms: Callable[[], int] | None = None, cluster: Cluster | None = None):
        self.log = log_
        self.batcher = batcher
        # Reads share one DirectReader: its per-partition segment cache is a dict whose
        # entries are replaced whole, so concurrent fetches need no lock.
        self.source = DirectReader(self.log)
        # Store I/O of consumers runs on threads of its own, so a burst of fetches
        # never delays the batcher's flushes (which have the batcher's pool).
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix="sparklog-consume")
        gw = settings
        self.now_ms: Callable[[], int] = now_ms or wall_clock_ms
        self.cluster = cluster
        # a slot of the broker application takes groups over from the store, members and
        # all; a standalone gateway's restart forgets members as it always did
        self.coordinator = GroupCoordinator(
            self.log, now_ms=self.now_ms, default_session_timeout_ms=gw.session_timeout_ms,
            min_session_timeout_ms=gw.group_min_session_timeout_ms,
            max_session_timeout_ms=gw.group_max_session_timeout_ms,
            cluster=cluster, load_members=cluster is not None,
            consumer_assignors=[a.strip() for a in gw.group_consumer_assignors.split(",")])
        self.coordinator.on_rebalance = batcher.metrics.rebalanced
        #: KIP-848 members of the coordinator's groups (ConsumerGroupHeartbeat)
        self.consumer_members = ConsumerMembers(
            self.coordinator, heartbeat_interval_ms=gw.group_consumer_heartbeat_interval_ms,
            session_timeout_ms=gw.group_consumer_session_timeout_ms,
            assignors=self.coordinator.consumer_assignors,
            upgrade=gw.group_consumer_migration_policy in ("bidirectional", "upgrade"))
        #: consumer.instance.timeout.ms: the default and the longest an instance may ask for
        self.instance_timeout_ms = gw.consumer_instance_timeout_ms
        self.waiters: dict[tuple[str, int], set[asyncio.Future]] = {}
        self.instances: dict[tuple[str, str], Instance] = {}
        self.batcher.add_commit_listener(self.committed)
        if cluster is not None:
            cluster.add_listener(self._assignment_changed)
        self._expiry = asyncio.get_running_loop().create_task(self._expire_periodically())

    # -- coordination ------------------------------------------------------------------
    def check_coordinator(self, group: str) -> None:
        """Raises NotCoordinator (naming the coordinator) unless this gateway coordinates
        ``group``; a standalone gateway coordinates every group."""
        if self.cluster is not None:
            self.cluster.check_coordinator(group)

    def link(self, group: str) -> CoordinatorLink:
        """A new way to ``group``'s coordinator, wherever it is (for a REST instance)."""
        return CoordinatorLink(self.coordinator, group, self.cluster)

    def _assignment_changed(self) -> None:
        """The cluster's listener (on the loop): drop the groups that moved away. Off the
        loop: the coordinator's lock may be held by a store write."""
        fut = asyncio.get_running_loop().run_in_executor(self.executor, self.coordinator.retain)
        fut.add_done_callback(_log_dropped)

    # -- long-poll ------------------------------------------------------------------
    def committed(self, topic: str, partition: int, high_watermark: int) -> None:
        """The batcher's commit listener (on the loop): wake fetches of this partition."""
        for fut in self.waiters.pop((topic, partition), ()):
            if not fut.done():
                fut.set_result(high_watermark)

    def _register(self, tps: Iterable[tuple[str, int]]) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        for tp in tps:
            self.waiters.setdefault(tp, set()).add(fut)
        return fut

    def _unregister(self, fut: asyncio.Future, tps: Iterable[tuple[str, int]]) -> None:
        for tp in tps:
            s = self.waiters.get(tp)
            if s is not None:
                s.discard(fut)
                if not s:
                    self.waiters.pop(tp, None)

    async def run(self, fn: Any, *args: Any) -> Any:
        """Run blocking store work (reads, group commits) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def _read(self, positions: Mapping[tuple[str, int], int], max_records: int,
              isolation_level: str | None = None, partition_max_records: int | None = None):
        return self.source.read_available(positions, max_records,
                                          isolation_level=isolation_level,
                                          partition_max_records=partition_max_records)

    async def _read_now(self, positions: Mapping[tuple[str, int], int], max_records: int,
                        isolation_level: str | None = None,
                        partition_max_records: int | None = None):
        """``_read``, on the loop when it is a cheap tail read (module docstring), else
        on the hub's threads."""
        writing = self.batcher.writing
        args = (positions, max_records, isolation_level, partition_max_records)
        if self.log.store.cheap_commits and all(
                (state := writing(t, p)) is not None and state.small_tail(
                    pos, segments=INLINE_READ_SEGMENTS, nbytes=INLINE_READ_BYTES)
                for (t, p), pos in positions.items()):
            return self._read(*args)
        return await self.run(self._read, *args)

    async def fetch(self, positions: Mapping[tuple[str, int], int], *, max_records: int,
                    max_bytes: int, wait_ms: int, min_bytes: int,
                    isolation_level: str | None = None,
                    partition_max_bytes: int | None = None):
        """Long-poll read: ((tp, batch, next), ...), {tp: OffsetOutOfRange}.
        ``isolation_level``: read_uncommitted (None, the default) or read_committed
        (to the last stable offset, aborted records skipped: ``DirectReader``).
        ``partition_max_bytes`` (Kafka's Fetch field) bounds each partition's share,
        and each then reads at most an equal share of ``max_records``, so one
        partition's backlog does not crowd out the others."""
        deadline = time.monotonic() + wait_ms / 1000
        tps = list(positions)
        per = max(1, max_records // max(1, len(tps))) if partition_max_bytes else None

        def read():
            return self._read_now(positions, max_records, isolation_level, per)

        def cut(got: Fetched) -> Fetched:
            if partition_max_bytes:
                got = cut_partitions(got, partition_max_bytes)
            return cut_to_bytes(got, max_bytes)

        while True:
            fut = self._register(tps)
            try:
                got, errors = await read()
                got = cut(got)
                size = sum(b.nbytes for _, b, _ in got)
                remaining = deadline - time.monotonic()
                if errors or remaining <= 0 or (size >= min_bytes and (got or min_bytes <= 0)):
                    self._count(got)
                    return got, errors
                # A partition another gateway leads commits nothing here to wake on: poll
                # the store for it every REMOTE_POLL_S instead (broker application only).
                remote = self.batcher.cluster is not None and \
                    not set(tps) <= self.batcher.leading().keys()
                try:
                    await asyncio.wait_for(asyncio.shield(fut),
                                           min(remaining, REMOTE_POLL_S) if remote else remaining)
                except asyncio.TimeoutError:
                    if remote and time.monotonic() < deadline:
                        continue
                    got, errors = await read()
                    got = cut(got)
                    self._count(got)
                    return got, errors
            finally:
                self._unregister(fut, tps)

    def _count(self, got: Fetched) -> None:
        """Records and bytes out, per topic, in the gateway's metrics."""
        fetched = self.batcher.metrics.fetched
        for (topic, _p), batch, _next in got:
            fetched(topic, batch.num_rows, batch.nbytes)

    # -- REST instances ------------------------------------------------------------------
    def instance(self, group: str, name: str, *, touch: bool = True) -> Instance:
        """A live instance (``touch``: counting as a use); raises UnknownConsumerInstance
        (also for one idle past its timeout that the periodic expiry has not dropped yet)."""
        inst = self.instances.get((group, name))
        now = self.now_ms()
        if inst is not None and self._idle(inst, now):
            self._drop(inst)
            inst = None
        if inst is None:
            raise UnknownConsumerInstance(group, name)
        if touch:
            inst.last_used_ms = now
        return inst

    def _idle(self, inst: Instance, now: int) -> bool:
        # an instance in a request (its lock held, e.g. a long-poll) is in use
        return now - inst.last_used_ms >= inst.timeout_ms and not inst.lock.locked()

    def _drop(self, inst: Instance) -> None:
        """Forget ``inst`` and leave its group in the background. No auto-commit: its
        client never came back to show it processed what it was last handed, so those
        records are read again by the group (at least once)."""
        if self.instances.get((inst.group, inst.name)) is inst:
            del self.instances[(inst.group, inst.name)]
        asyncio.get_running_loop().run_in_executor(self.executor, _leave_quietly, inst)

    def expire_instances(self) -> list[tuple[str, str]]:
        """Drop instances idle for their ``consumer.instance.timeout.ms`` (the REST
        Proxy does the same), leaving their groups; returns their (group, name)."""
        now = self.now_ms()
        gone = [inst for inst in self.instances.values() if self._idle(inst, now)]
        for inst in gone:
            self._drop(inst)
        return [(inst.group, inst.name) for inst in gone]

    async def keep_alive(self) -> None:
        """Heartbeat every subscribed instance whose heartbeat is due and that no request
        is using (Kafka's consumer heartbeat thread), so a group keeps an idle instance's
        membership, positions and partitions for as long as the instance lives
        (``consumer.instance.timeout.ms``), not its session. Not a use of the instance.
        A coordinator that refuses or cannot be reached is tried again next time."""
        now = self.now_ms()
        for inst in list(self.instances.values()):
            if inst.member_id is None or inst.lock.locked() \
                    or now - inst.last_sync_ms < inst.heartbeat_interval_ms:
                continue
            async with inst.lock:
                try:
                    await self.run(inst.sync, self.source.watermarks, now)
                except (SparklogError, OSError) as e:  # a deleted topic too
                    logger.info("background heartbeat of consumer instance %s/%s: %s",
                                inst.group, inst.name, e)

    async def _expire_periodically(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_INTERVAL_S)
            try:
                self.expire_instances()
                await self.keep_alive()
                await self.run(self.coordinator.expire)
            except Exception:  # noqa: BLE001 - a store hiccup must not end expiry for good
                logger.exception("expiring consumer instances and group members failed")


def _leave_quietly(inst: Instance) -> None:
    try:
        if inst.member_id is not None:
            inst.link.leave(inst.member_id)
    except (GroupError, NotCoordinator, OSError):
        pass  # already expired, or its session runs out at the coordinator
    finally:
        inst.link.close()


def _log_dropped(fut: asyncio.Future) -> None:
    if fut.cancelled():
        return
    if fut.exception() is not None:
        logger.error("dropping the groups moved to another gateway failed",
                     exc_info=fut.exception())
    elif fut.result():
        logger.info("groups now coordinated elsewhere, dropped: %s", ", ".join(fut.result()))


def cut_partitions(got: Fetched, partition_max_bytes: int) -> Fetched:
    """Keep each partition's batches while under ``partition_max_bytes`` (at least one
    record of each partition, so every partition moves on)."""
    out, size = [], {}
    for tp, batch, nxt in got:
        used = size.get(tp, 0)
        if used >= partition_max_bytes:
            continue
        if used + batch.nbytes > partition_max_bytes:
            per = max(1, batch.nbytes // max(1, batch.num_rows))
            rows = max(0 if used else 1, (partition_max_bytes - used) // per)
            if rows < batch.num_rows:
                if rows:
                    part = batch.slice(0, rows)
                    out.append((tp, part, int(part.column(0)[-1].as_py()) + 1))
                size[tp] = partition_max_bytes
                continue
        out.append((tp, batch, nxt))
        size[tp] = used + batch.nbytes
    return out


def cut_to_bytes(got: Fetched, max_bytes: int) -> Fetched:
    """Keep whole batches while under ``max_bytes`` (at least one record, as Kafka)."""
    out, size = [], 0
    for tp, batch, nxt in got:
        if out and size + batch.nbytes > max_bytes:
            per = max(1, batch.nbytes // max(1, batch.num_rows))
            rows = (max_bytes - size) // per
            if rows > 0:
                part = batch.slice(0, rows)
                out.append((tp, part, int(part.column(0)[-1].as_py()) + 1))
            break
        if not out and batch.nbytes > max_bytes and batch.num_rows > 1:
            per = max(1, batch.nbytes // batch.num_rows)
            rows = max(1, max_bytes // per)
            if rows < batch.num_rows:
                part = batch.slice(0, rows)
                out.append((tp, part, int(part.column(0)[-1].as_py()) + 1))
                break
        out.append((tp, batch, nxt))
        size += batch.nbytes
    return out
