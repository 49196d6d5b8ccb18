"""Failover measurements against a running broker app (``jobs.broker_app_process``).

:func:`measure_failover` runs an idempotent ``Producer`` at ``acks=all`` over the
app's bootstrap list (records numbered, round-robin over the partitions) and,
with ``group``, a consumer group member that commits after every poll, while a
fault (``FAULTS``) hits one slot's gateway; then it reads the log back through
``log_layout`` (:func:`check_log`): every acknowledged record exactly once at the
offset it was acknowledged with, no offset taken twice, and every one read once
by the group.
"""

from __future__ import annotations

import bisect
import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from jobs.broker_app_process import FAULTS, BrokerAppProcess, listener_pid, resume


# -- the measurement ------------------------------------------------------------------------
@dataclass
class FailoverResult:
    fault: str
    #: the process the fault hit (the gateway's, its executor JVM's or its worker's)
    pid: int
    #: the slot hit, and the partitions it led then
    slot: int
    partitions: list[int]
    #: kill -> the old gateway stops answering /healthz (an executor's Python outlives
    #: its JVM until the pyspark daemon sees the pipe close and hangs up its group)
    old_stops_s: float
    #: kill -> the old gateway's process is gone (None: still there at the end; a frozen
    #: host's zombie lives on until resumed and told to go)
    old_gone_s: float | None
    #: kill -> a gateway answers as the leader of those partitions (the old slot back, or
    #: another slot the driver moved them to)
    answers_s: float
    #: kill -> the first record of those partitions sent after the old gateway stopped is
    #: acknowledged (acks=all): the first acknowledged write on the new leader
    first_ack_s: float
    acknowledged: int
    failed: int
    #: acknowledged records missing from the log, read twice, or at another offset
    lost: int = 0
    duplicated: int = 0
    misplaced: int = 0
    offsets_taken_twice: int = 0
    #: the consumer group's reading: acknowledged records it never read or read twice
    group_missed: int | None = None
    group_read_twice: int | None = None
    #: after SIGCONT, the zombie refused a write to its old partitions (or was gone)
    zombie_fenced: bool | None = None
    errors: list[str] = field(default_factory=list)

    def line(self) -> str:
        gone = "never" if self.old_gone_s is None else f"{self.old_gone_s:.2f} s"
        group = "" if self.group_missed is None else (
            f"; group read: {self.group_missed} missed, {self.group_read_twice} twice")
        zombie = "" if self.zombie_fenced is None else f"; zombie fenced: {self.zombie_fenced}"
        return (f"{self.fault} of slot {self.slot} (pid {self.pid}, partitions "
                f"{self.partitions}): old gateway stops answering "
                f"after {self.old_stops_s:.2f} s, its process gone after {gone}; a leader "
                f"answers after {self.answers_s:.2f} s, first acknowledged write on it after "
                f"{self.first_ack_s:.2f} s; "
                f"{self.acknowledged} acknowledged, {self.failed} failed, {self.lost} lost, "
                f"{self.duplicated} duplicated, {self.offsets_taken_twice} offsets taken twice"
                f"{group}{zombie}")


class ProduceLoad:
    """An idempotent acks=all producer sending numbered records round-robin over the
    partitions, and a FIFO ack watcher.

    ``max_pending`` bounds the records sent and not yet answered (acknowledged or
    failed): sending waits below it. Unbounded (None), a machine slower than the offered
    rate queues records without end in the producer, and the first record sent after a
    fault is answered only after everything queued before it (answers are watched in
    order). On a loaded machine (6 pytest workers, 2026-11-29) the S3 failover test gave
    up 120 s after an executor kill though the driver's log shows the partitions led
    again within 4 s, and both gateways, flooded, had missed their health probes once."""

    def __init__(self, bootstrap: str, topic: str, tag: str, per_tick: int, tick_s: float,
                 partitions: int, max_pending: int | None = None):
        from ingest_gateway.client import Producer

        self.producer = Producer(bootstrap, acks="all", linger_ms=5, delivery_timeout_ms=120_000,
                                 retry_backoff_ms=20, request_timeout_ms=5_000)
        self.topic, self.tag, self.per_tick, self.tick_s = topic, tag, per_tick, tick_s
        self.partitions, self.max_pending = partitions, max_pending
        #: value, partition, send time, handle
        self.sent: list[tuple[bytes, int, float, object]] = []
        self.acked_at: dict[int, float] = {}  # index in sent -> when its ack was seen
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._send, daemon=True),
                         threading.Thread(target=self._watch, daemon=True)]

    def start(self) -> "ProduceLoad":
        for t in self._threads:
            t.start()
        return self

    def _send(self) -> None:
        n = 0
        while not self.stopping.is_set():
            if self.max_pending is not None and \
                    len(self.sent) - len(self.acked_at) >= self.max_pending:
                time.sleep(0.005)  # the watcher counts answers in order: wait for some
                continue
            for _ in range(self.per_tick):
                value = f"{self.tag}-{n}".encode()
                partition = n % self.partitions
                handle = self.producer.send(self.topic, value, partition=partition)
                with self._lock:
                    self.sent.append((value, partition, time.monotonic(), handle))
                n += 1
            time.sleep(self.tick_s)

    def _watch(self) -> None:
        i = 0
        while True:
            with self._lock:
                item = self.sent[i] if i < len(self.sent) else None
            if item is None:
                if self.stopping.is_set() and i >= len(self.sent):
                    return
                time.sleep(0.005)
                continue
            try:
                item[3].result()
            except Exception:  # noqa: BLE001 - a failed record is counted, not acknowledged
                pass
            self.acked_at[i] = time.monotonic()
            i += 1

    def first_ack_after(self, t: float, timeout: float, partitions: set[int]) -> float:
        """Seconds from ``t`` until a record of ``partitions`` sent after ``t`` was seen
        acknowledged."""
        deadline = time.monotonic() + timeout
        first = None
        while time.monotonic() < deadline:
            if first is None:
                with self._lock:  # send times only grow: the first one after t, if any yet
                    at = bisect.bisect_right(self.sent, t, key=lambda item: item[2])
                    first = next((i for i in range(at, len(self.sent))
                                  if self.sent[i][1] in partitions), None)
            if first is not None and first in self.acked_at:
                return self.acked_at[first] - t
            time.sleep(0.01)
        raise TimeoutError(f"no record sent after the kill was acknowledged within {timeout} s")

    def finish(self) -> tuple[dict[bytes, tuple[int, int]], int, list[str]]:
        """Stop, flush; (value -> (partition, offset) of each acknowledged record, failures,
        the first distinct errors)."""
        self.stopping.set()
        self._threads[0].join(60)
        self.producer.flush(150)
        self._threads[1].join(150)
        acked, failed, errors = {}, 0, []
        for value, _p, _t, handle in self.sent:
            try:
                meta = handle.result(0)
            except Exception as e:  # noqa: BLE001
                failed += 1
                if len(errors) < 3 and str(e) not in errors:
                    errors.append(str(e))
                continue
            acked[value] = (meta.partition, meta.offset)
        self.producer.close()
        return acked, failed, errors


class GroupReader:
    """A consumer group member reading the topic through the gateways, committing after
    every poll (synchronously), so a failover must neither skip nor repeat a record."""

    def __init__(self, bootstrap: str, topic: str, group: str):
        from ingest_gateway.client import Consumer

        self.consumer = Consumer(gateway=bootstrap, group_id=group, auto_offset_reset="earliest",
                                 enable_auto_commit=False, session_timeout_ms=30_000,
                                 heartbeat_interval_ms=1000)
        self.consumer.subscribe([topic])
        self.read: Counter[bytes] = Counter()
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "GroupReader":
        self._thread.start()
        return self

    def _run(self) -> None:
        # Records a poll delivered are kept until a commit covers them: a commit refused
        # during the failover is retried with the next poll's, so the count neither drops
        # what was delivered (the consumer's position is past it) nor counts it early. A
        # record delivered again before any commit covered it (its partition reassigned
        # after the refused commit: at-least-once, as Kafka's consumers) is one delivery,
        # by its partition and offset; only a record read again after a commit covered it
        # counts twice.
        delivered: dict[tuple[int, int], bytes] = {}
        while not self.stopping.is_set():
            try:
                for r in self.consumer.poll(0.5) or []:
                    delivered[(r.partition, r.offset)] = r.value
                if delivered:
                    self.consumer.commit()
                    for value in delivered.values():
                        self.read[value] += 1
                    delivered.clear()
            except Exception as e:  # noqa: BLE001 - a failover error: poll again
                if len(self.errors) < 5:
                    self.errors.append(f"{type(e).__name__}: {e}")
                time.sleep(0.2)

    def finish(self, expected: set[bytes], timeout: float) -> tuple[int, int]:
        """Wait (bounded) until every expected value was read; (missed, read twice)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not expected <= set(self.read):
            time.sleep(0.1)
        self.stopping.set()
        self._thread.join(30)
        try:
            self.consumer.close()
        except Exception:  # noqa: BLE001 - a close during failover may fail its last commit
            pass
        missed = sum(1 for v in expected if v not in self.read)
        twice = sum(1 for v in expected if self.read[v] > 1)
        return missed, twice


def _leader_answers(app: BrokerAppProcess, registry, topic: str, partitions: set[int],
                    slot: int, restarted: Callable[[], bool]) -> bool:
    a = registry.assignment()
    if a is None:
        return False
    for p in partitions:
        leader = a.leader_slot(topic, p)
        if leader is None or not app.healthy(leader):
            return False
        if leader == slot and not restarted():
            return False
    return True


def _zombie_refuses(url: str, topic: str, partition: int) -> bool:
    """After SIGCONT: a write to the zombie for a partition it led is refused (503
    not_leader) or finds nobody there; True if so."""
    body = json.dumps({"records": [{"value": "zombie"}]}).encode()
    req = urllib.request.Request(f"{url}/topics/{topic}/partitions/{partition}", data=body,
                                 method="POST",
                                 headers={"Content-Type": "application/vnd.kafka.json.v2+json"})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(req, timeout=5):
                return False  # accepted: not fenced
        except urllib.error.HTTPError as e:
            doc = json.loads(e.read() or b"{}")
            if doc.get("error") in ("not_leader", "shutting_down"):
                return True
        except (urllib.error.URLError, OSError):
            return True  # it stopped serving
        time.sleep(0.5)
    return False


def check_log(store_url: str, topic: str, acked: dict[bytes, tuple[int, int]], *,
              storage_options: dict | None = None) -> dict[str, int]:
    """Read the topic back: acknowledged records lost, read twice, at another offset than
    acknowledged, and offsets taken twice."""
    from log_layout import open_log

    out = {"lost": 0, "duplicated": 0, "misplaced": 0, "offsets_taken_twice": 0}
    seen: Counter[bytes] = Counter()
    where: dict[bytes, tuple[int, int]] = {}
    for part in open_log(store_url, storage_options=storage_options).partitions(topic):
        table = part.read_table(0)
        offsets = table.column("offset").to_pylist()
        out["offsets_taken_twice"] += len(offsets) - len(set(offsets))
        for offset, value in zip(offsets, table.column("value").to_pylist()):
            seen[value] += 1
            where[value] = (part.partition, offset)
    for value, at in acked.items():
        count = seen.get(value, 0)
        out["lost"] += count == 0
        out["duplicated"] += count > 1
        out["misplaced"] += count == 1 and where[value] != at
    return out


def measure_failover(app: BrokerAppProcess, store_url: str, topic: str, fault: str, *,
                     slot: int | None = None, group: str | None = None,
                     storage_options: dict | None = None, before_s: float = 2.0,
                     after_s: float = 2.0, per_tick: int = 20, tick_s: float = 0.005,
                     freeze_s: float = 10.0, timeout_s: float = 120.0,
                     max_pending: int | None = None) -> FailoverResult:
    """Produce (and read with ``group``), inject ``fault`` (a key of FAULTS) into ``slot``'s
    gateway (default: the leader of partition 0), keep producing, then check the log and
    what the group read. A freeze is lifted (SIGCONT) ``freeze_s`` after the partitions
    have a new leader, and the zombie must then refuse a write. ``per_tick`` records every
    ``tick_s``, at most ``max_pending`` unanswered (:class:`ProduceLoad`)."""
    from log_layout import open_log
    from log_layout.brokers import BrokerRegistry

    log = open_log(store_url, storage_options=storage_options)
    partitions = log.topic(topic).partitions
    registry = BrokerRegistry(log.store)
    a = registry.assignment()
    target = slot if slot is not None else (a.leader_slot(topic, 0) if a else 0) or 0
    victims = {p for p in range(partitions) if a is None or a.leader_slot(topic, p) == target}
    load = ProduceLoad(app.bootstrap, topic, fault, per_tick, tick_s, partitions,
                       max_pending).start()
    reader = GroupReader(app.bootstrap, topic, group).start() if group else None
    zombie_fenced = None
    try:
        time.sleep(before_s)  # load before the fault: real time is the point here
        port = app.port_of(target)
        gateway = listener_pid(port)
        killed = FAULTS[fault](port)
        t_kill = time.monotonic()
        old_gone: list[float | None] = [0.0 if gateway is None else None]

        def watch_old() -> None:  # in parallel: the waits below would blur the figure
            old_gone[0] = _gone_after(gateway, t_kill, timeout_s)

        watcher = threading.Thread(target=watch_old, daemon=True)
        if gateway is not None:
            watcher.start()
        while app.healthy(target):  # an executor's Python serves on for a moment after its JVM
            time.sleep(0.01)
        t_down = time.monotonic()

        def restarted() -> bool:
            now = listener_pid(port)
            return now is not None and now != gateway and app.healthy(target)

        while not _leader_answers(app, registry, topic, victims, target, restarted):
            if time.monotonic() - t_kill > timeout_s:
                raise TimeoutError(f"no leader answers {timeout_s} s after the {fault}")
            time.sleep(0.02)
        answers = time.monotonic() - t_kill
        first_ack = load.first_ack_after(t_down, timeout_s, victims) + (t_down - t_kill)
        if fault.endswith("freeze"):
            time.sleep(freeze_s)
            resume()
            zombie_fenced = _zombie_refuses(app.urls[target], topic, min(victims)) \
                if old_gone[0] is None else True
        time.sleep(after_s)
        if gateway is not None:
            watcher.join(5 if fault.endswith("freeze") else timeout_s)
    finally:
        resume()
        acked, failed, errors = load.finish()
    result = FailoverResult(fault, killed, target, sorted(victims), t_down - t_kill,
                            old_gone[0], answers, first_ack, len(acked), failed, errors=errors,
                            zombie_fenced=zombie_fenced)
    if reader is not None:
        result.group_missed, result.group_read_twice = reader.finish(set(acked), timeout_s)
        result.errors += reader.errors[:3]
    for name, count in check_log(store_url, topic, acked,
                                 storage_options=storage_options).items():
        setattr(result, name, count)
    return result


def _gone_after(pid: int, since: float, timeout: float) -> float | None:
    """Seconds from ``since`` until ``pid`` is gone or a zombie (None: still running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "Z":
                    break
        except (FileNotFoundError, ProcessLookupError):  # gone (read races the exit too)
            break
        time.sleep(0.05)
    else:
        return None
    return time.monotonic() - since
