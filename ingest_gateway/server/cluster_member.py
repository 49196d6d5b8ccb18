"""A gateway's part in the broker application: its slot, its heartbeat, what it leads.

A gateway started with ``gateway.broker.id`` = N is slot N of the application
(``sparklog broker-app``). It follows the driver's current assignment in the store
(``log_layout.brokers``) instead of leading every partition:

* **Registration.** At start it writes ``_brokers/gateways/<N>.json`` with the next
  slot epoch, its URL (``gateway.advertised.listeners``), host and pid; then every
  ``HEARTBEAT_S`` again, with its bytes in per second (per partition too: the
  driver balances on it), the leader epoch of each partition it writes, and its
  Kafka listener's address once that listens (``kafka_address``), so every slot's
  Kafka Metadata can name it.
* **Leadership.** The driver tells it each new assignment's name as soon as it is
  written (``/healthz?assignment=<name>``, :meth:`ClusterMember.hint`): it reads that
  document by its name, one read. Besides, every ``REFRESH_S`` it checks the copy of
  the newest assignment by a conditional read (a 304 while unchanged), and lists the
  assignments every ``LIST_EVERY_S`` (``log_layout.brokers``). Partitions
  newly given to it are claimed at once (``Batcher.lead``: a manifest commit with
  a higher leader epoch), not at their first record: a claim is what fences the
  previous leader, and a zombie (a frozen gateway that wakes up) must meet the
  fence at its next commit even if no record came here yet. Partitions taken away
  are released (``Batcher.release``: refused from then on with ``NotLeader`` naming
  the new leader; what is already accepted is still flushed, and fails on the new
  leader's fence if that claim came first). A produce for a partition it does not
  lead is refused at once with ``NotLeader`` and the leader's address.
* **Replaced.** If its slot's document names another gateway with a higher epoch,
  Spark has started a successor (this one was frozen, or lost to the driver): it
  stops leading everything and asks the server to stop serving (``on_replaced``).
* **Before the first assignment** nothing is led: every produce is refused with a
  retriable ``NotLeader`` without a leader (clients ask again).

Store reads and writes run on the batcher's pool, never on the event loop. A failed
read keeps the last assignment (a store hiccup must not drop leadership); the
manifest's leader epoch still fences at commit time whatever this module believes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import time
from collections.abc import Callable
from typing import Any

from ingest_gateway.errors import NotCoordinator, NotLeader
from log_layout import Log, UnknownTopic, wall_clock_ms
from log_layout.brokers import Assignment, BrokerRegistry, GatewayInfo, tp_key

logger = logging.getLogger("sparklog.gateway")

#: how often the copy of the newest assignment is checked, should the driver's word
#: (hint) not arrive: a conditional read, a 304 while nothing changed
REFRESH_S = 1.0
#: how often the gateway's own document is written and its slot checked (the driver
#: reads it as often; it trusts one for FRESH_REGISTRATION_S, 10 s)
HEARTBEAT_S = 2.0
#: how often the assignments are listed (a LIST: object stores bill it as ten reads)
LIST_EVERY_S = 60.0
#: hinted reads in flight at most (anyone may probe /healthz with a name)
MAX_HINTED_READS = 4
#: an assignment document's name (log_layout.brokers.assignment_name)
_ASSIGNMENT_NAME = re.compile(r"[0-9]{10}-[0-9]{10}\.json")


class ClusterMember:
    """Slot ``slot`` of the broker application, for one gateway (create on the loop)."""

    def __init__(self, log_: Log, batcher: Any, slot: int, url: str, *,
                 on_replaced: Callable[[], None] | None = None,
                 refresh_s: float = REFRESH_S, heartbeat_s: float = HEARTBEAT_S):
        self.log, self.batcher, self.slot, self.url = log_, batcher, slot, url
        self.registry = BrokerRegistry(log_.store)
        #: the batcher's id: it is also the ``leader`` it writes in the manifests it claims
        self.gateway_id = batcher.id
        self.epoch = 0
        self.on_replaced = on_replaced
        self.refresh_s, self.heartbeat_s = refresh_s, heartbeat_s
        self.assignment: Assignment | None = None
        self.replaced = False
        self.started_ms = wall_clock_ms()
        self._listeners: list[Callable[[], None]] = []
        #: (host, port) of this gateway's Kafka listener, set when it listens
        self.kafka_address: tuple[str, int] | None = None
        self._task: asyncio.Task | None = None
        self._last_heartbeat = 0.0
        self._last_listing = time.monotonic()  # start() has just read the newest
        #: the names hinted reads are fetching (a few at a time: /healthz is open to all)
        self._hinted: set[str] = set()
        #: the counters at the last registration (the rates are their growth since)
        self._bytes_seen: dict[tuple[str, int], int] = {}
        self._records_seen: dict[tuple[str, int], int] = {}
        self._rate_at = time.monotonic()

    # -- what routes ask ----------------------------------------------------------------
    def leader(self, topic: str, partition: int) -> dict[str, Any] | None:
        """``{"slot", "url"}`` of the partition's leader, None before any assignment."""
        a = self.assignment
        if a is None:
            return None
        slot = a.leader_slot(topic, partition)
        return {"slot": slot, "url": a.url(slot)}

    def check_leader(self, topic: str, partition: int) -> None:
        """Raise NotLeader (with the leader's address) unless this gateway leads it."""
        a = self.assignment
        if self.replaced:
            raise NotLeader(topic, partition, "this gateway was replaced by a newer one",
                            self.leader(topic, partition))
        if a is None:
            raise NotLeader(topic, partition, "no partition assignment yet")
        if a.leader_slot(topic, partition) != self.slot:
            raise NotLeader(topic, partition, f"the application assigns it to another gateway "
                            f"(assignment {a.driver_epoch}.{a.generation})",
                            self.leader(topic, partition))

    def coordinator(self, group: str) -> dict[str, Any] | None:
        """``{"slot", "url"}`` of the group's coordinator, None before any assignment."""
        a = self.assignment
        if a is None:
            return None
        slot = a.coordinator_slot(group)
        return {"slot": slot, "url": a.url(slot)}

    def is_coordinator(self, group: str) -> bool:
        a = self.assignment
        return a is not None and not self.replaced and a.coordinator_slot(group) == self.slot

    #: the slot coordinating this name (as a group) aborts timed-out transactions
    TIMEOUTS_OWNER = "__sparklog_transaction_timeouts"

    def owns_transaction_timeouts(self) -> bool:
        """Whether this slot aborts the store's timed-out transactions now: one slot at a
        time (each round lists the store), moving with the assignment as a group
        coordinator does."""
        return self.is_coordinator(self.TIMEOUTS_OWNER)

    def check_coordinator(self, group: str) -> None:
        """Raise NotCoordinator (with the coordinator's address) unless it is this one."""
        if not self.is_coordinator(group):
            raise NotCoordinator(group, self.coordinator(group))

    def add_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the loop after each new assignment is applied."""
        self._listeners.append(callback)

    # -- life ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Register (next slot epoch) and start following the assignment."""
        self.epoch = await self.batcher.run_blocking(self.registry.next_gateway_epoch, self.slot)
        await self.batcher.run_blocking(self.registry.write_gateway, self._info())
        self._last_heartbeat = time.monotonic()
        logger.info("gateway %s is slot %d epoch %d at %s", self.gateway_id, self.slot, self.epoch,
                    self.url)
        # the authoritative newest (a listing) once at start; the copy from then on
        a = await self.batcher.run_blocking(self.registry.assignment)
        self._last_listing = time.monotonic()
        if a is not None:
            self._adopt(a)
        self._task = asyncio.create_task(self._follow(), name="sparklog-cluster-member")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _follow(self) -> None:
        while not self.replaced:
            await asyncio.sleep(self.refresh_s)
            try:
                await self.refresh()
            except Exception:  # a store hiccup: keep the last assignment, try again
                logger.warning("cluster refresh failed; keeping assignment %s",
                               self.assignment and self.assignment.name, exc_info=True)

    async def refresh(self) -> None:
        """Read the assignment (and, each heartbeat, check the slot and write our own
        document); apply what changed."""
        run = self.batcher.run_blocking
        if time.monotonic() - self._last_heartbeat >= self.heartbeat_s:
            current = await run(self.registry.gateway, self.slot)
            if current is not None and current.gateway_id != self.gateway_id and \
                    current.epoch > self.epoch:
                self._replaced(current)
                return
            await run(self.registry.write_gateway, self._info())
            self._last_heartbeat = time.monotonic()
        if time.monotonic() - self._last_listing >= LIST_EVERY_S:
            a = await run(self.registry.assignment)  # the listing: authoritative
            self._last_listing = time.monotonic()
        else:
            a = await run(self.registry.latest)  # the copy: a conditional read
        if a is not None:
            self._adopt(a)

    def hint(self, name: str) -> None:
        """The driver says assignment ``name`` is written: read it now, by its name, if
        it is newer than ours (on the loop; the read runs on the batcher's pool). Names
        that are not assignment names, or not newer, are ignored."""
        if not isinstance(name, str) or not _ASSIGNMENT_NAME.fullmatch(name) or self.replaced:
            return
        current = self.assignment
        if (current is not None and name <= current.name) or name in self._hinted or \
                len(self._hinted) >= MAX_HINTED_READS:
            return
        self._hinted.add(name)
        asyncio.create_task(self._read_hinted(name))

    async def _read_hinted(self, name: str) -> None:
        try:
            a = await self.batcher.run_blocking(self.registry.assignment_named, name)
        except Exception:  # the periodic refresh reads it anyway
            logger.warning("reading assignment %s failed", name, exc_info=True)
            a = None
        finally:
            self._hinted.discard(name)
        if a is not None and not self.replaced:
            self._adopt(a)

    def _adopt(self, a: Assignment) -> None:
        """Apply ``a`` if it is newer than ours (no await in between: two reads racing
        can never apply an older one after a newer one)."""
        if self.assignment is not None and a.name <= self.assignment.name:
            return  # never go back to an older decision (a lagging listing or copy)
        before = self.assignment
        self.assignment = a
        self._apply(before, a)

    def _apply(self, before: Assignment | None, a: Assignment) -> None:
        mine_now = set(a.led_by(self.slot))
        for topic, partition in list(self.batcher.leading()):
            if a.leader_slot(topic, partition) != self.slot:
                self.batcher.release(topic, partition, NotLeader(
                    topic, partition, f"moved to another gateway by assignment "
                    f"{a.driver_epoch}.{a.generation}", self.leader(topic, partition)))
        mine_before = set(before.led_by(self.slot)) if before is not None else set()
        for topic, partition in sorted(mine_now - mine_before):
            asyncio.create_task(self._lead(topic, partition))
        logger.info("assignment %s: slot %d leads %d partitions", a.name, self.slot, len(mine_now))
        for callback in self._listeners:
            try:
                callback()
            except Exception:
                logger.exception("assignment listener failed")

    async def _lead(self, topic: str, partition: int) -> None:
        try:
            await self.batcher.lead(topic, partition)
        except UnknownTopic:
            return  # deleted since the assignment was written
        except Exception:  # the first produce claims it again
            logger.warning("claiming %s-%d failed", topic, partition, exc_info=True)
            return
        a = self.assignment
        if self.replaced or a is None or a.leader_slot(topic, partition) != self.slot:
            # moved away again while the claim ran: _apply did not see it as ours yet
            self.batcher.release(topic, partition, NotLeader(
                topic, partition, "moved to another gateway", self.leader(topic, partition)))

    def _replaced(self, successor: GatewayInfo) -> None:
        self.replaced = True
        logger.error("gateway %s (slot %d epoch %d) was replaced by %s epoch %d at %s: it stops "
                     "leading and serving", self.gateway_id, self.slot, self.epoch,
                     successor.gateway_id, successor.epoch, successor.url)
        for topic, partition in list(self.batcher.leading()):
            self.batcher.release(topic, partition, NotLeader(
                topic, partition, "this gateway was replaced by a newer one",
                self.leader(topic, partition)))
        if self.on_replaced is not None:
            self.on_replaced()

    def _info(self) -> GatewayInfo:
        """This gateway's registration, with its rates since the last one."""
        now = time.monotonic()
        elapsed = max(now - self._rate_at, 1e-3)
        byte_rates = _rates(self.batcher.bytes_in, self._bytes_seen, elapsed)
        record_rates = _rates(self.batcher.records_in, self._records_seen, elapsed)
        self._bytes_seen, self._records_seen = dict(self.batcher.bytes_in), \
            dict(self.batcher.records_in)
        self._rate_at = now
        leading = self.batcher.leading()
        return GatewayInfo(
            slot=self.slot, gateway_id=self.gateway_id, epoch=self.epoch, url=self.url,
            host=socket.gethostname(), pid=os.getpid(), started_ms=self.started_ms,
            heartbeat_ms=wall_clock_ms(),
            bytes_in_per_s=round(sum(byte_rates.values()), 1),
            records_in_per_s=round(sum(record_rates.values()), 1),
            partitions={tp_key(*tp): round(byte_rates.get(tp, 0.0), 1) for tp in leading},
            leader_epochs={tp_key(*tp): epoch for tp, epoch in leading.items()},
            kafka_host=self.kafka_address[0] if self.kafka_address else "",
            kafka_port=self.kafka_address[1] if self.kafka_address else 0)


def _rates(counts: dict, before: dict, elapsed_s: float) -> dict:
    """Per key, how much ``counts`` grew since ``before``, per second."""
    return {k: (n - before.get(k, 0)) / elapsed_s for k, n in counts.items()}
