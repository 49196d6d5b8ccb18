"""The driver's half of partition leadership: which slots are alive, who leads what.

The broker application's driver (``jobs.broker_app``) owns one
:class:`LeadershipKeeper`. Its :meth:`~LeadershipKeeper.tick` runs on the driver's
monitor loop (every half second) with what the driver knows of each slot (Spark's
running task and a ``/healthz`` probe, ``SlotState``) and writes the store's
``_brokers/`` documents (format: ``log_layout.brokers``):

* **Driver epoch.** :meth:`start` claims ``driver.json`` with the next driver
  epoch. Before each assignment it writes, it reads ``driver.json`` back: a higher
  epoch means a newer driver took the application over, and this one raises
  :class:`DriverFenced` (the application stops). Its assignments are named
  ``<driver_epoch>-<generation>`` and put-if-absent, so even a write racing the
  takeover sorts below every assignment of the newer driver.
* **Live slots.** A slot is live while its gateway answers, and for
  ``failover_s`` after it last did (a gateway being restarted by Spark keeps its
  partitions if it is back quickly: a task's Python killed is back in about a
  second). A slot that has not answered for longer, frozen or lost with its
  executor, is dropped from ``live`` and its partitions (and group coordinators)
  go to the live slots: their gateways claim them with a higher leader epoch,
  which fences the old one at its next commit. A slot never seen up yet has
  ``startup_grace_s`` from the driver's start.
* **Assignment.** Recomputed each tick from the topics in the store, the live
  slots and the gateways' bytes in per partition, with
  ``log_layout.brokers.balance`` (sticky, then even). A new generation is written
  only when something changed: the leaders, the live set, or a slot's address;
  ``on_publish`` is then called with it (the driver tells the gateways at once).

**What it costs the store** (issue 33: an idle application made 37-42 requests a
second, most of them LISTs). Liveness comes from Spark and ``/healthz``, never from
the store, so the store is read only for what changes rarely, each on its own
interval and by conditional reads (``BrokerRegistry``):

* the gateways' registrations (addresses, bytes in): every ``registrations_every_s``
  (2 s), one conditional read per slot by name, no listing;
* the topics: the store's root listed every ``topics_every_s`` (30 s) for new or
  deleted topics, and each known topic's metadata re-read every
  ``topic_configs_every_s`` (5 min: only its partition count matters here, and it
  only grows). Until then a new partition is led by ``fallback_slot``, where every
  gateway already sends it, and the next assignment keeps it there;
* the copy ``assignment.json`` checked every ``hint_every_s`` (10 s);
* ``driver.json``: read back (a 304 while it is still ours) and replaced every
  ``HEARTBEAT_S`` (5 s), and before each new assignment.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from log_layout import Log, UnknownTopic, wall_clock_ms
from log_layout.brokers import (OFFSETS_PARTITIONS, OFFSETS_TOPIC, Assignment, BrokerRegistry,
                                balance)

#: a slot silent for this long loses its partitions to the live slots
FAILOVER_S = 3.0
#: a slot not seen up yet keeps its partitions this long after the driver starts
STARTUP_GRACE_S = 60.0
#: how often the store's root is listed for new and deleted topics (a new topic's
#: partitions are led by fallback_slot meanwhile, as every gateway computes it)
TOPICS_EVERY_S = 30.0
#: how often a known topic's metadata is read again (its partition count may grow)
TOPIC_CONFIGS_EVERY_S = 300.0
#: how often the gateways' registrations are read (addresses and load; liveness is
#: /healthz's, never the store's)
REGISTRATIONS_EVERY_S = 2.0
#: how often the copy of the newest assignment is checked (an old driver's race)
HINT_EVERY_S = 10.0
#: how often driver.json is rewritten (its heartbeat; `cluster status` shows its age)
HEARTBEAT_S = 5.0
#: a gateway registration older than this is not trusted for the slot's address
#: (gateways write theirs every 2 s, read here every 2 s)
FRESH_REGISTRATION_S = 10.0


class DriverFenced(RuntimeError):
    """A newer driver took the application over: this one must stop."""

    def __init__(self, epoch: int, current: int):
        self.epoch, self.current = epoch, current
        super().__init__(f"driver epoch {epoch} is fenced: driver epoch {current} took over")


class LeadershipKeeper:
    """Decides and publishes the assignment for ``slots`` gateway slots (see module doc)."""

    def __init__(self, log: Log, slots: int, *, failover_s: float = FAILOVER_S,
                 startup_grace_s: float = STARTUP_GRACE_S,
                 topics_every_s: float = TOPICS_EVERY_S,
                 topic_configs_every_s: float = TOPIC_CONFIGS_EVERY_S,
                 registrations_every_s: float = REGISTRATIONS_EVERY_S,
                 hint_every_s: float = HINT_EVERY_S, heartbeat_s: float = HEARTBEAT_S,
                 clock: Callable[[], float] = time.monotonic,
                 out: Callable[[str], None] = print,
                 on_publish: Callable[[Assignment], None] | None = None):
        self.log, self.slots = log, slots
        self.registry = BrokerRegistry(log.store)
        self.failover_s, self.startup_grace_s = failover_s, startup_grace_s
        self.topics_every_s, self.topic_configs_every_s = topics_every_s, topic_configs_every_s
        self.registrations_every_s, self.hint_every_s = registrations_every_s, hint_every_s
        self.heartbeat_s = heartbeat_s
        self.clock, self.out = clock, out
        #: called with each assignment this driver publishes (after it is in the store)
        self.on_publish = on_publish
        self.epoch = 0
        self.current: Assignment | None = None
        self.started = clock()
        self.started_ms = wall_clock_ms()
        self.last_up: dict[int, float] = {}
        self._counts: dict[str, int] = {}
        self._counts_at = -1e9
        #: topic -> when its metadata was last read
        self._topic_read_at: dict[str, float] = {}
        self._registrations: dict[int, Any] = {}
        self._registrations_at = -1e9
        self._hint_at = -1e9
        self._driver_doc: dict[str, Any] = {}
        self._driver_written = -1e9

    def start(self, driver_doc: Mapping[str, Any]) -> int:
        """Claim the driver epoch (fencing an older driver); returns it."""
        self._driver_doc = {**driver_doc, "started_ms": self.started_ms}
        self.epoch = self.registry.claim_driver({**self._driver_doc,
                                                 "heartbeat_ms": wall_clock_ms()})
        self._driver_doc["driver_epoch"] = self.epoch
        self._driver_written = self.clock()
        previous = self.registry.assignment()
        self.current = previous
        self.out(f"driver epoch {self.epoch}" + (
            f"; taking over from assignment {previous.driver_epoch}.{previous.generation}"
            if previous else "; first assignment"))
        return self.epoch

    # -- each tick ------------------------------------------------------------------
    def live(self, slot_states: Sequence[Any]) -> tuple[int, ...]:
        """The slots whose gateway answers, or answered within ``failover_s``."""
        now = self.clock()
        out = []
        for s in slot_states:
            if s.up:
                self.last_up[s.slot] = now
            seen = self.last_up.get(s.slot)
            if s.up or (seen is not None and now - seen < self.failover_s) or \
                    (seen is None and now - self.started < self.startup_grace_s):
                out.append(s.slot)
        return tuple(out)

    def tick(self, slot_states: Sequence[Any], extra: Mapping[str, Any] | None = None
             ) -> Assignment | None:
        """Publish a new assignment if anything changed; the new one, else None.
        Raises DriverFenced, StoreError."""
        live = self.live(slot_states)
        registrations = self._read_registrations()
        urls = self._urls(slot_states, registrations)
        counts = self._partition_counts()
        load = {tp: rate for g in registrations.values() for tp, rate in g.partitions.items()}
        partitions = balance({**counts, OFFSETS_TOPIC: OFFSETS_PARTITIONS}, live,
                             previous=self.current, load=load)
        new = None
        c = self.current
        if c is None or c.driver_epoch != self.epoch or dict(c.partitions) != partitions \
                or tuple(c.live) != live or dict(c.slots) != urls:
            new = self._publish(live, urls, partitions)
        elif self.clock() - self._hint_at >= self.hint_every_s:
            self._hint_at = self.clock()
            hint = self.registry.latest()
            if hint is None or hint.name != c.name:  # an old driver's copy won a race
                self._check_epoch()
                self.registry.write_latest(c)
        self._heartbeat(slot_states, extra)
        if new is not None and self.on_publish is not None:
            self.on_publish(new)
        return new

    def _read_registrations(self) -> dict[int, Any]:
        """The gateways' registrations, read again every ``registrations_every_s``."""
        if self.clock() - self._registrations_at >= self.registrations_every_s:
            self._registrations = self.registry.gateways_of(range(self.slots))
            self._registrations_at = self.clock()
        return self._registrations

    def _urls(self, slot_states: Sequence[Any], registrations: Mapping[int, Any]
              ) -> dict[int, str | None]:
        """Each slot's address: what its gateway registered (fresh), else what Spark says."""
        now_ms = wall_clock_ms()
        fresh = {g.slot: g.url for g in registrations.values()
                 if now_ms - g.heartbeat_ms < FRESH_REGISTRATION_S * 1000
                 and g.started_ms >= self.started_ms - 60_000}
        return {s.slot: fresh.get(s.slot) or s.url for s in slot_states}

    def _partition_counts(self) -> dict[str, int]:
        """Each topic's partition count: the root listed every ``topics_every_s``, a new
        name's metadata read at once, a known one's every ``topic_configs_every_s``."""
        now = self.clock()
        if now - self._counts_at < self.topics_every_s:
            return self._counts
        counts = {}
        for t in self.log.topic_names():
            known = self._counts.get(t)
            if known is not None and now - self._topic_read_at.get(t, -1e9) < \
                    self.topic_configs_every_s:
                counts[t] = known
                continue
            try:
                counts[t] = self.log.topic(t, refresh=True).partitions
            except UnknownTopic:  # a folder without a topic (deleted, or not one)
                continue
            self._topic_read_at[t] = now
        for gone in set(self._topic_read_at) - set(counts):
            del self._topic_read_at[gone]
        self._counts, self._counts_at = counts, now
        return self._counts

    def _publish(self, live: tuple[int, ...], urls: dict[int, str | None],
                 partitions: dict[str, tuple[int, ...]]) -> Assignment:
        while True:
            self._check_epoch()
            newest = self.registry.assignment()
            generation = max(self.current.generation if self.current else 0,
                             newest.generation if newest else 0) + 1
            a = Assignment(self.epoch, generation, urls, live, partitions,
                           application=str(self._driver_doc.get("application", "")),
                           written_ms=wall_clock_ms())
            if self.registry.publish(a):
                before = self.current
                self.current = a
                self.out(_describe_change(before, a))
                return a
            # that name was taken: only a racing driver can have done it; look again

    def _check_epoch(self) -> None:
        doc = self.registry.driver() or {}
        current = int(doc.get("driver_epoch", 0))
        if current != self.epoch:
            raise DriverFenced(self.epoch, current)

    def _heartbeat(self, slot_states: Sequence[Any], extra: Mapping[str, Any] | None) -> None:
        if self.clock() - self._driver_written < self.heartbeat_s:
            return
        self._check_epoch()
        self._driver_doc.update(extra or {})
        self._driver_doc.update(
            heartbeat_ms=wall_clock_ms(), state="running",
            slots=[dict(vars(s)) for s in slot_states],
            assignment=self.current.name if self.current else None)
        self.registry.write_driver(self._driver_doc)
        self._driver_written = self.clock()

    def stopped(self) -> None:
        """Mark the application stopped in driver.json (unless a newer driver owns it)."""
        doc = self.registry.driver() or {}
        if int(doc.get("driver_epoch", 0)) == self.epoch:
            self.registry.write_driver({**self._driver_doc, "state": "stopped",
                                        "heartbeat_ms": wall_clock_ms()})


def _describe_change(before: Assignment | None, a: Assignment) -> str:
    moved = 0
    if before is not None:
        for t, owners in a.partitions.items():
            old = before.partitions.get(t, ())
            moved += sum(1 for p, s in enumerate(owners) if p < len(old) and old[p] != s)
    led = {s: len(a.led_by(s)) for s in sorted(a.slots)}
    return (f"assignment {a.driver_epoch}.{a.generation}: live slots {list(a.live)}, "
            f"partitions per slot {led}, {moved} leaders moved")
