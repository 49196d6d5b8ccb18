"""The brokers' shared state in the store: the driver, the gateways, who leads what.

When gateways run as a Spark application (``sparklog broker-app``) they agree on
partition leaders and group coordinators through three kinds of documents under
``_brokers/`` at the store's root (no other channel: the store is the only thing
every process reaches)::

    _brokers/driver.json                       the application's driver (replaced whole)
        {"driver_epoch": 3, "application": "app-2026...", "master": "spark://...",
         "ui": "http://...", "host": "...", "pid": 4242, "started_ms": ..., "heartbeat_ms": ...,
         "slots": [{"slot": 0, "up": true, "executor": "1", ...}]}
    _brokers/gateways/<slot>.json              one per gateway slot, replaced by its gateway
        {"slot": 0, "gateway_id": "gw0-1a2b3c", "epoch": 5, "url": "http://10.0.0.7:8082",
         "host": "10.0.0.7", "pid": 777, "started_ms": ..., "heartbeat_ms": ...,
         "bytes_in_per_s": 1.2e6, "records_in_per_s": 9000.0,
         "partitions": {"clicks/0": 1.1e6}, "leader_epochs": {"clicks/0": 12},
         "kafka_host": "10.0.0.7", "kafka_port": 9092}     (Kafka listener; 0: none)
    _brokers/assignments/<driver_epoch:010d>-<generation:010d>.json   put-if-absent
        {"driver_epoch": 3, "generation": 41, "application": "...", "written_ms": ...,
         "slots": {"0": "http://10.0.0.7:8082", "1": null}, "live": [0],
         "partitions": {"clicks": [0, 0, 0, 0], "__consumer_offsets": [0, ...]}}

**Epochs.** A slot's ``epoch`` counts its gateway's incarnations: a gateway that
starts reads the slot's document and writes ``epoch + 1``; one that later reads
its slot's document back and finds another ``gateway_id`` with a higher epoch
has been replaced (it was frozen and Spark started another) and stops serving.
The *partition's* leader epoch is the manifest's ``leader_epoch``
(``PartitionLog.claim``); that one fences writes at commit time, the slot epoch
only makes a replaced gateway go away sooner.

**Assignments.** Only the driver writes them, each under a new name with
``Store.put_exclusive``, so two drivers can never both write one generation.
The current assignment is the one with the greatest name, i.e. the highest
``driver_epoch`` and then ``generation``. A restarted driver bumps
``driver_epoch`` in ``driver.json`` first; an old driver that is still alive
sees the higher epoch before each write (and fails on the name it wanted when it
raced) and stops: its assignments all sort below the new driver's anyway.
Old assignments are pruned, the newest ``ASSIGNMENTS_KEPT`` stay.

Finding the greatest name takes a listing, which object stores charge ten times a
read for. So after each assignment the driver also replaces
``_brokers/assignment.json`` with a copy (:meth:`BrokerRegistry.latest`), tells the
live gateways the new name over HTTP (they read that document by its name), and
gateways list only about once a minute, to catch a copy an old driver overwrote in
a race (they never go back to a smaller name, and the driver puts its own copy
back when it next checks it).

**Polling cheaply.** Whoever follows a document that is replaced in place
(``driver.json``, ``gateways/<slot>.json``, ``assignment.json``) reads it with
``Store.read_if_changed`` against the version it last saw (S3: a GET with
``If-None-Match``, answered 304 without a body; HDFS: the file's status, then the
file only if it changed), and a writer remembers the tag of what it wrote, so
"is my document still mine?" costs no download. Nobody lists ``gateways/``: the
slots are numbered, so each is read by its name.

A partition not in the assignment (a topic created since) is led by
:func:`fallback_slot` over the live slots, a function every process computes
alike, and the driver adopts that choice when it next writes, so it does not move.

**Group coordinators** are chosen as Kafka chooses them: the group's partition of
the offsets topic, ``abs(java_hash(group)) % 50`` (:func:`coordinator_partition`),
and its leader is the coordinator. ``__consumer_offsets`` is no real topic here,
only a name in the assignment, so coordinators move with the same machinery as
partition leaders.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from log_layout import paths
from log_layout.store import Store

FOLDER = paths.BROKERS_FOLDER
DRIVER = f"{FOLDER}/driver.json"
#: a copy of the newest assignment (a hint: the listing decides)
LATEST = f"{FOLDER}/assignment.json"
GATEWAYS_FOLDER = f"{FOLDER}/gateways"
ASSIGNMENTS_FOLDER = f"{FOLDER}/assignments"
#: assignment documents kept (older ones are pruned by the driver)
ASSIGNMENTS_KEPT = 20
#: Kafka's group metadata topic and its default partition count (offsets.topic.num.partitions)
OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 50


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(group: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """The group's partition of the offsets topic: Kafka's
    ``Utils.abs(groupId.hashCode()) % groupMetadataTopicPartitionCount``."""
    return (java_string_hash(group) & 0x7FFFFFFF) % partitions


def fallback_slot(topic: str, partition: int, live: Iterable[int]) -> int | None:
    """The slot leading a partition the assignment does not name: spread over the live
    slots by a stable hash of the topic (the same in every process); None if none is live."""
    slots = sorted(live)
    if not slots:
        return None
    return slots[(zlib.crc32(topic.encode()) + partition) % len(slots)]


def tp_key(topic: str, partition: int) -> str:
    """``topic/partition``: how the documents name a partition (``/`` is in no topic name)."""
    return f"{topic}/{partition}"


@dataclasses.dataclass(frozen=True)
class GatewayInfo:
    """One slot's gateway, as it registers itself (``_brokers/gateways/<slot>.json``)."""

    slot: int
    gateway_id: str
    epoch: int
    url: str
    host: str = ""
    pid: int = 0
    started_ms: int = 0
    heartbeat_ms: int = 0
    bytes_in_per_s: float = 0.0
    records_in_per_s: float = 0.0
    #: ``topic/partition`` -> bytes in per second, for each partition it leads
    partitions: Mapping[str, float] = dataclasses.field(default_factory=dict)
    #: ``topic/partition`` -> the leader epoch it writes at
    leader_epochs: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: the groups it coordinates and has in memory
    groups: tuple[str, ...] = ()
    #: its Kafka listener's address (``gateway.kafka.listeners``; port 0: none). Optional:
    #: documents written before it was added read as "no Kafka listener"
    kafka_host: str = ""
    kafka_port: int = 0

    def to_json(self) -> dict[str, Any]:
        doc = dataclasses.asdict(self)
        doc["partitions"], doc["leader_epochs"] = dict(self.partitions), dict(self.leader_epochs)
        doc["groups"] = list(self.groups)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "GatewayInfo":
        fields = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in doc.items() if k in fields}
        kw["groups"] = tuple(kw.get("groups", ()))
        return cls(**kw)


@dataclasses.dataclass(frozen=True)
class Assignment:
    """Who leads what, as the driver last decided (one ``assignments/`` document)."""

    driver_epoch: int
    generation: int
    #: slot -> its gateway's URL (None while the slot has no gateway up)
    slots: Mapping[int, str | None]
    #: slots considered alive: the only ones given partitions
    live: tuple[int, ...]
    #: topic -> the slot leading each partition, by partition number
    partitions: Mapping[str, tuple[int, ...]]
    application: str = ""
    written_ms: int = 0

    @property
    def name(self) -> str:
        return assignment_name(self.driver_epoch, self.generation)

    def leader_slot(self, topic: str, partition: int) -> int | None:
        """The slot leading ``topic``-``partition`` (the fallback if it is not named)."""
        slots = self.partitions.get(topic)
        if slots is not None and 0 <= partition < len(slots):
            return slots[partition]
        return fallback_slot(topic, partition, self.live)

    def coordinator_slot(self, group: str) -> int | None:
        """The slot coordinating ``group``: the leader of its offsets-topic partition."""
        return self.leader_slot(OFFSETS_TOPIC, coordinator_partition(group))

    def url(self, slot: int | None) -> str | None:
        return None if slot is None else self.slots.get(slot)

    def led_by(self, slot: int) -> list[tuple[str, int]]:
        """The partitions the assignment names for ``slot`` (offsets topic excluded)."""
        return [(t, p) for t, owners in sorted(self.partitions.items()) if t != OFFSETS_TOPIC
                for p, s in enumerate(owners) if s == slot]

    def to_json(self) -> dict[str, Any]:
        return {"driver_epoch": self.driver_epoch, "generation": self.generation,
                "application": self.application, "written_ms": self.written_ms,
                "slots": {str(s): u for s, u in sorted(self.slots.items())},
                "live": list(self.live),
                "partitions": {t: list(owners) for t, owners in sorted(self.partitions.items())}}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Assignment":
        return cls(driver_epoch=int(doc["driver_epoch"]), generation=int(doc["generation"]),
                   slots={int(s): u for s, u in doc.get("slots", {}).items()},
                   live=tuple(int(s) for s in doc.get("live", ())),
                   partitions={t: tuple(int(s) for s in owners)
                               for t, owners in doc.get("partitions", {}).items()},
                   application=doc.get("application", ""),
                   written_ms=int(doc.get("written_ms", 0)))


def assignment_name(driver_epoch: int, generation: int) -> str:
    return f"{driver_epoch:010d}-{generation:010d}.json"


def balance(partition_counts: Mapping[str, int], live: Iterable[int], *,
            previous: Assignment | None = None,
            load: Mapping[str, float] | None = None) -> dict[str, tuple[int, ...]]:
    """Leaders for every partition of ``partition_counts`` over the ``live`` slots.

    Sticky: a partition stays with its previous leader while that slot is live, and
    a new partition goes where :func:`fallback_slot` puts it (where gateways already
    send it), so only what must move moves. Then balanced: while a slot leads more
    than its share (``ceil(total / live)`` partitions) its lightest partitions by
    ``load`` (bytes in per second, ``topic/partition`` keys) go to the slot with the
    fewest partitions and least load. The offsets topic's partitions (group
    coordinators) are balanced on their own, the same way.
    """
    slots = sorted(set(live))
    if not slots:
        return {t: () for t in partition_counts}
    load = load or {}
    owners: dict[str, list[int]] = {}
    for topic, count in partition_counts.items():
        before = previous.partitions.get(topic, ()) if previous is not None else ()
        owners[topic] = [before[p] if p < len(before) and before[p] in slots
                         else fallback_slot(topic, p, slots)  # type: ignore[misc]
                         for p in range(count)]
    for group in ([t for t in owners if t != OFFSETS_TOPIC], [t for t in owners
                                                              if t == OFFSETS_TOPIC]):
        _even_out(owners, group, slots, load)
    return {t: tuple(o) for t, o in owners.items()}


def _even_out(owners: dict[str, list[int]], topics: list[str], slots: list[int],
              load: Mapping[str, float]) -> None:
    """Move partitions from the slot leading the most to the one leading the fewest
    (least loaded among equals) until the counts differ by at most one."""
    led: dict[int, list[tuple[str, int]]] = {s: [] for s in slots}
    for t in topics:
        for p, s in enumerate(owners[t]):
            led[s].append((t, p))

    def weight(s: int) -> tuple[int, float, int]:
        return len(led[s]), sum(load.get(tp_key(*tp), 0.0) for tp in led[s]), s

    while True:
        heavy = max(slots, key=lambda s: (len(led[s]), -s))
        light = min(slots, key=weight)
        if len(led[heavy]) - len(led[light]) <= 1:
            return
        # the lightest partition moves: it shifts the least traffic
        tp = min(led[heavy], key=lambda tp: (load.get(tp_key(*tp), 0.0), tp))
        led[heavy].remove(tp)
        led[light].append(tp)
        owners[tp[0]][tp[1]] = light


class BrokerRegistry:
    """Reads and writes the ``_brokers/`` documents of one store (see the module doc).

    Thread-safe. Remembers the version (tag) of each document it last read or wrote,
    so reading it again is a conditional read (``Store.read_if_changed``)."""

    def __init__(self, store: Store):
        self.store = store
        #: path -> (tag, parsed document) of the version last read or written here
        self._seen: dict[str, tuple[str, dict[str, Any] | None]] = {}
        self._seen_lock = threading.Lock()

    # -- driver -------------------------------------------------------------------
    def driver(self) -> dict[str, Any] | None:
        return self._follow_json(DRIVER)

    def claim_driver(self, doc: Mapping[str, Any]) -> int:
        """Become the application's driver: write ``doc`` with the next driver epoch,
        which is returned (an older driver stops when it sees it)."""
        current = self.driver() or {}
        epoch = int(current.get("driver_epoch", 0)) + 1
        self._write_json(DRIVER, {**doc, "driver_epoch": epoch})
        return epoch

    def write_driver(self, doc: Mapping[str, Any]) -> None:
        """Replace the driver document (its heartbeat); the caller keeps its epoch in it."""
        self._write_json(DRIVER, dict(doc))

    # -- gateways -----------------------------------------------------------------
    def gateways(self) -> dict[int, GatewayInfo]:
        """Every slot's registration, found by listing (unreadable documents are
        skipped). The driver knows its slots and uses :meth:`gateways_of` instead."""
        slots = []
        for f in self.store.list(GATEWAYS_FOLDER):
            stem = f.name[:-len(".json")] if f.name.endswith(".json") else ""
            if stem.isdigit():
                slots.append(int(stem))
        return self.gateways_of(slots)

    def gateways_of(self, slots: Iterable[int]) -> dict[int, GatewayInfo]:
        """The registrations of ``slots``, each by its name and a conditional read: no
        listing, no download of a document unchanged since the last call."""
        out: dict[int, GatewayInfo] = {}
        for slot in slots:
            info = self.gateway(slot)
            if info is not None:
                out[info.slot] = info
        return out

    def gateway(self, slot: int) -> GatewayInfo | None:
        doc = self._follow_json(f"{GATEWAYS_FOLDER}/{slot}.json")
        try:
            return GatewayInfo.from_json(doc) if doc else None
        except (TypeError, ValueError, KeyError):
            return None

    def next_gateway_epoch(self, slot: int) -> int:
        current = self.gateway(slot)
        return current.epoch + 1 if current is not None else 1

    def write_gateway(self, info: GatewayInfo) -> None:
        self._write_json(f"{GATEWAYS_FOLDER}/{info.slot}.json", info.to_json())

    # -- assignments --------------------------------------------------------------
    def _assignment_names(self) -> list[str]:
        return sorted(f.name for f in self.store.list(ASSIGNMENTS_FOLDER)
                      if f.name.endswith(".json") and not f.name.startswith("."))

    def assignment(self) -> Assignment | None:
        """The current assignment: the greatest name (None before the first). One
        listing: object stores charge it as ten reads, so followers call it rarely."""
        for name in reversed(self._assignment_names()):
            doc = self._read_json(f"{ASSIGNMENTS_FOLDER}/{name}")
            if doc is not None:  # pruned between the listing and the read: take the next
                return Assignment.from_json(doc)
        return None

    def assignment_named(self, name: str) -> Assignment | None:
        """The assignment document ``name`` (``assignment_name``), None if absent, pruned
        or unreadable. Assignments never change once written: one plain read."""
        doc = self._read_json(f"{ASSIGNMENTS_FOLDER}/{name}")
        try:
            return Assignment.from_json(doc) if doc else None
        except (TypeError, ValueError, KeyError):
            return None

    def latest(self) -> Assignment | None:
        """The copy of the newest assignment (a conditional read, no listing): a hint,
        which an old driver racing a new one may have overwritten with a smaller name."""
        doc = self._follow_json(LATEST)
        try:
            return Assignment.from_json(doc) if doc else None
        except (TypeError, ValueError, KeyError):
            return None

    def write_latest(self, assignment: Assignment) -> None:
        self._write_json(LATEST, assignment.to_json())

    def publish(self, assignment: Assignment) -> bool:
        """Write a new assignment (and its copy, :meth:`latest`); False if that name
        exists (another driver won it)."""
        doc = assignment.to_json()
        ok = self.store.put_exclusive(f"{ASSIGNMENTS_FOLDER}/{assignment.name}",
                                      json.dumps(doc).encode())
        if ok:
            self._write_json(LATEST, doc)
            names = self._assignment_names()
            stale = names[:-ASSIGNMENTS_KEPT]
            if stale:
                self.store.delete([f"{ASSIGNMENTS_FOLDER}/{n}" for n in stale])
        return ok

    # -- documents ----------------------------------------------------------------
    def _write_json(self, path: str, doc: Mapping[str, Any]) -> None:
        tag = self.store.put_replace(path, json.dumps(doc).encode())
        with self._seen_lock:
            if tag:  # reading it back is a 304 until someone else replaces it
                self._seen[path] = (tag, json.loads(json.dumps(doc)))
            else:
                self._seen.pop(path, None)

    def _follow_json(self, path: str) -> dict[str, Any] | None:
        """``path``'s document by a conditional read against the version last seen here
        (a copy: callers may keep it); None if absent or not JSON."""
        with self._seen_lock:
            tag, doc = self._seen.get(path, (None, None))
        try:
            data, new_tag = self.store.read_if_changed(path, tag)
        except FileNotFoundError:
            with self._seen_lock:
                self._seen.pop(path, None)
            return None
        if data is not None:
            try:
                doc = json.loads(data)
            except ValueError:  # a torn or foreign file: treated as absent
                doc = None
            if not isinstance(doc, dict):
                doc = None
            with self._seen_lock:
                if new_tag:
                    self._seen[path] = (new_tag, doc)
        return json.loads(json.dumps(doc)) if doc is not None else None

    def _read_json(self, path: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.store.read(path))
        except FileNotFoundError:
            return None
        except ValueError:  # a torn or foreign file: treated as absent
            return None
