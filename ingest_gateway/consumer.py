"""The Python consumer: subscribe or assign, poll, iterate forever, seek, commit.

::

    from ingest_gateway.consumer import Consumer

    with Consumer(gateway="http://127.0.0.1:8082", group_id="billing",
                  auto_offset_reset="earliest") as c:
        c.subscribe(["clicks"])
        for record in c:                      # blocks for new records, never ends
            handle(record.key, record.value)   # auto-commit every 5 s, and on close

    # assign() mode, reading segments straight from the store (no gateway):
    c = Consumer(store="s3://bucket/log", storage_options={...})
    c.assign([("clicks", 0)]); c.seek(("clicks", 0), 1000)
    for batch in c.batches(): ...            # (topic, partition, pyarrow.RecordBatch)

**Transports.** Records are read either

* *directly* from the store (``store=`` URL or ``log=``) through ``log_layout``:
  the consumer opens the segments the partition manifests name, no gateway on
  the read path. The store cannot notify anyone, so an idle consumer watches the
  manifests (one ``exists`` per partition per probe) with a backoff of 1 ms
  doubling to ``fetch_backoff_max_ms``;
* or *through a gateway* (``gateway=`` URL only): long-poll fetches that the
  gateway answers as soon as a flush commits data.

Group membership (``subscribe(..., group=)``) needs a coordinator: the
gateway's (``gateway=`` URL, also in direct mode: membership and commits go to
the gateway, records come from the store), or an in-process
:class:`~ingest_gateway.groups.GroupCoordinator` (``coordinator=``; for
embedding and tests). A direct consumer with neither can only ``assign()``;
with a ``group_id`` it reads and commits that group's offsets in the store
itself (last writer wins: see ``groups.commit_to_store``).

**Records** come out as :class:`Record` tuples ``(topic, partition, offset,
timestamp, key, value, headers)`` (timestamp in ms, key/value bytes or None,
headers a list of ``(key, value)`` or None), built column-wise from Arrow
without a Python call per record. For throughput use :meth:`Consumer.batches`
/ :meth:`Consumer.poll_batches`, which hand out ``pyarrow.RecordBatch``es of
the segment schema and no per-record objects at all.

**Positions and commits** follow Kafka: ``position`` is the offset of the next
record handed out; a record counts as consumed once handed out (returned by
``poll`` or yielded by the iterator). Fetched records wait in one buffer until
then, so ``poll``, the iterator and ``batches`` may be mixed, each going on
where the other stopped; a seek, pause or revocation drops a partition's
buffered records and fetches them again. ``commit()`` stores the consumed
positions (or the ``offsets`` given) as the group's committed offsets, synchronously or, with
``asynchronous=True``, on a background thread returning a Future. Auto-commit
commits consumed positions every ``auto_commit_interval_ms`` at the next
poll, before a rebalance revokes partitions, and on ``close``. Together with
processing each record before asking for the next, that gives at-least-once:
after a crash, only records after the last commit are read again.

**Rebalances** (eager, see ``groups``): when the coordinator signals one, the
consumer commits (auto-commit), calls ``on_revoke(partitions)``, rejoins, and
once the new generation is assigned calls ``on_assign(partitions)``. If the
membership was lost (session timeout) it calls ``on_lost`` (default:
``on_revoke``) without committing — a zombie's commits would be refused anyway.
Heartbeats run on a background thread every ``heartbeat_interval_ms``; rejoining
happens inside ``poll``, so a consumer that stops polling for longer than
``max_poll_interval_ms`` is removed from the group.
"""

from __future__ import annotations

import collections
import concurrent.futures
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf.errors import SparklogError
from conf.topic import validate_topic_name
from ingest_gateway import groups as _groups
from ingest_gateway.groups import (GroupCoordinator, IllegalGeneration,
                                   InconsistentGroupProtocol, MemberState, RebalanceInProgress,
                                   UnknownMemberId, validate_group_id)
from log_layout import (Log, MissingSegment, OffsetOutOfRange, UnknownPartition, UnknownTopic,
                        open_log)

TopicPartition = tuple[str, int]


class Record(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None


class Batch(NamedTuple):
    """Consecutive records of one partition as Arrow (the segment schema)."""

    topic: str
    partition: int
    records: pa.RecordBatch

    @property
    def next_offset(self) -> int:
        return int(self.records.column(0)[-1].as_py()) + 1


class NoOffsetForPartition(SparklogError, LookupError):
    """``auto_offset_reset='none'`` and the partition has no committed offset."""

    code = "no_offset_for_partition"

    def __init__(self, topic: str, partition: int, group: str | None):
        self.topic, self.partition, self.group = topic, partition, group
        super().__init__(f"{topic}-{partition} has no committed offset in group {group!r} and "
                         f"auto_offset_reset is 'none': seek() before polling")


class IllegalState(SparklogError, RuntimeError):
    code = "illegal_state"

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


def records_of(topic: str, partition: int, batch: pa.RecordBatch) -> list[Record]:
    """Records of a segment-schema batch, built column-wise (no Python call per record)."""
    n = batch.num_rows
    offsets = batch.column(0).to_numpy().tolist()
    ts = batch.column(1)
    ts = pc.divide(ts.cast(pa.int64()), 1000).to_numpy().tolist() if n else []
    keys = batch.column(2).to_pylist()
    values = batch.column(3).to_pylist()
    hcol = batch.column(4)
    if hcol.null_count == n:
        headers: Iterable[Any] = itertools.repeat(None, n)
    else:
        headers = [None if h is None else [(kv["key"], kv["value"]) for kv in h]
                   for h in hcol.to_pylist()]
    rows = zip(itertools.repeat(topic, n), itertools.repeat(partition, n), offsets, ts, keys,
               values, headers)
    return list(map(Record._make, rows))


class _Fetched:
    """A fetched batch of one partition, handed out from row ``start`` on.

    The consumer's buffer holds these between the fetch and the hand-out, so
    ``poll`` and the iterators share one stream: whatever one of them leaves
    in the buffer the other hands out next, and nothing fetched is dropped
    without rewinding the fetch position to it.
    """

    __slots__ = ("tp", "batch", "start", "_records")

    def __init__(self, tp: TopicPartition, batch: pa.RecordBatch):
        self.tp, self.batch, self.start = tp, batch, 0
        self._records: list[Record] | None = None

    def records(self) -> list[Record]:
        """Every row as a Record, built once (the iterator hands them out one by one)."""
        if self._records is None:
            self._records = records_of(self.tp[0], self.tp[1], self.batch)
        return self._records


def _tp(tp: Any) -> TopicPartition:
    """Normalise a (topic, partition) pair given loosely; raises ValueError."""
    try:
        topic, partition = tp
    except (TypeError, ValueError):
        raise ValueError(f"expected a (topic, partition) pair, got {tp!r}") from None
    if not isinstance(topic, str) or isinstance(partition, bool) or not isinstance(partition, int):
        raise ValueError(f"expected a (topic: str, partition: int) pair, got {tp!r}")
    return topic, partition


# -- record sources ------------------------------------------------------------------
class DirectSource:
    """Reads segments straight from the store; waits by watching manifests."""

    def __init__(self, log: Log, *, backoff_max_ms: int = 10):
        self.log = log
        self.backoff_max_s = backoff_max_ms / 1000
        # tp -> (segment file, table, offsets as numpy): a poll usually continues
        # inside the segment the last one read, so it is decoded once, not per poll
        self._segments: dict[TopicPartition, tuple[str, pa.Table, np.ndarray]] = {}
        self._rotate = 0

    def partitions(self, topic: str) -> int:
        return self.log.topic(topic).partitions

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        m = self.log.partition(*tp).snapshot()
        return m.log_start_offset, m.next_offset

    def fetch(self, positions: Mapping[TopicPartition, int], max_records: int, wait_ms: int,
              ) -> tuple[list[tuple[TopicPartition, pa.RecordBatch, int]],
                         dict[TopicPartition, OffsetOutOfRange]]:
        """Up to ``max_records`` from the partitions at ``positions``; waits up to
        ``wait_ms`` for any. Returns (tp, batch, next position) triples and
        per-partition OffsetOutOfRange errors."""
        deadline = time.monotonic() + wait_ms / 1000
        backoff = 0.001
        while True:
            out, errors = self.read_available(positions, max_records)
            remaining = deadline - time.monotonic()
            if out or errors or remaining <= 0:
                return out, errors
            time.sleep(min(backoff, remaining))
            backoff = min(backoff * 2, self.backoff_max_s)

    def read_available(self, positions: Mapping[TopicPartition, int], max_records: int):
        """What is committed at ``positions`` now (up to ``max_records``), no waiting.
        Safe to call from several threads (the gateway's fetches share one source)."""
        out: list[tuple[TopicPartition, pa.RecordBatch, int]] = []
        errors: dict[TopicPartition, OffsetOutOfRange] = {}
        tps = list(positions)
        if not tps:
            return out, errors
        self._rotate = (self._rotate + 1) % len(tps)  # fairness when max_records cuts a poll
        budget = max_records
        for tp in tps[self._rotate:] + tps[:self._rotate]:
            if budget <= 0:
                break
            try:
                got = self._read(tp, positions[tp], budget)
            except OffsetOutOfRange as e:
                errors[tp] = e
                continue
            for batch, nxt in got:
                out.append((tp, batch, nxt))
                budget -= batch.num_rows
        return out, errors

    def _read(self, tp: TopicPartition, pos: int, budget: int, *, retry: bool = True,
              ) -> list[tuple[pa.RecordBatch, int]]:
        plog = self.log.partition(*tp)
        m = plog.snapshot()
        if pos == m.next_offset:
            return []
        if pos < m.log_start_offset or pos > m.next_offset:
            raise OffsetOutOfRange(tp[0], tp[1], pos, m.log_start_offset, m.next_offset)
        got: list[tuple[pa.RecordBatch, int]] = []
        for info in m.segments_between(pos, m.next_offset):
            if budget <= 0:
                break
            cached = self._segments.get(tp)
            if cached is None or cached[0] != info.file:
                try:
                    table = plog.read_segment(info, version=m.version)
                except MissingSegment:
                    # Vacuumed after a compaction or retention replaced it: re-plan
                    # once on the newest snapshot (it may also be out of range now).
                    self._segments.pop(tp, None)
                    if got:
                        break
                    if retry:
                        return self._read(tp, pos, budget, retry=False)
                    raise
                cached = (info.file, table, table.column(0).to_numpy())
                self._segments[tp] = cached
            _, table, offs = cached
            i = int(np.searchsorted(offs, pos, "left"))
            j = min(len(offs), i + budget)
            # past the segment's last record, a compaction gap may remain up to its end
            nxt = int(offs[j - 1]) + 1 if j < len(offs) else info.end_offset
            for b in table.slice(i, j - i).to_batches():
                if b.num_rows:
                    got.append((b, int(b.column(0)[-1].as_py()) + 1))
            budget -= j - i
            pos = nxt
        if got and got[-1][1] < pos:  # the position skips a trailing compaction gap
            got[-1] = (got[-1][0], pos)
        return got

    def close(self) -> None:
        self._segments.clear()


# -- group membership -----------------------------------------------------------------
class LocalMembership:
    """Membership and commits through an in-process GroupCoordinator."""

    def __init__(self, coordinator: GroupCoordinator, group: str):
        self.coordinator, self.group = coordinator, group

    def join(self, topics: Sequence[str], member_id: str | None, **cfg: Any) -> MemberState:
        return self.coordinator.join(self.group, topics, member_id=member_id, **cfg)

    def heartbeat(self, member_id: str, generation: int) -> MemberState:
        return self.coordinator.heartbeat(self.group, member_id, generation)

    def leave(self, member_id: str) -> None:
        self.coordinator.leave(self.group, member_id)

    def commit(self, offsets: Mapping[TopicPartition, int], member_id: str | None,
               generation: int) -> None:
        self.coordinator.commit(self.group, offsets, member_id=member_id, generation=generation)

    def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.coordinator.committed(self.group, tps)

    def close(self) -> None:
        pass


class StoreOffsets:
    """No coordinator: committed offsets read and written in the store (assign() only)."""

    def __init__(self, log: Log, group: str):
        _groups.validate_group_id(group)
        self.log, self.group = log, group

    def join(self, *_: Any, **__: Any) -> MemberState:
        raise IllegalState("subscribe() needs a coordinator: give the Consumer a gateway= URL "
                           "(or coordinator=); a direct consumer without one can only assign()")

    def commit(self, offsets: Mapping[TopicPartition, int], member_id: str | None,
               generation: int) -> None:
        _groups.commit_to_store(self.log, self.group, offsets)

    def committed(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        allc = _groups.committed_from_store(self.log, self.group)
        return {tp: allc[tp] for tp in tps if tp in allc}

    def close(self) -> None:
        pass


# -- through a gateway: the group protocol and POST /fetch (group_routes.py, fetch.py) --------------------------
class GatewayError(SparklogError):
    """An error answer of the gateway without a more specific local type."""

    def __init__(self, status: int, code: str, message: str):
        self.status, self.code, self.message = status, code, message
        super().__init__(f"gateway answered {status} {code}: {message}")


class _Http:
    def __init__(self, base: str):
        import urllib3

        self.base = base.rstrip("/")
        self.pool = urllib3.PoolManager(num_pools=4, maxsize=8, retries=False)

    def call(self, method: str, path: str, body: Any = None, *, timeout: float = 30.0,
             raw: bool = False, errors: Mapping[str, Any] | None = None) -> Any:
        import urllib3

        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            r = self.pool.request(method, self.base + path, body=data, headers=headers,
                                  timeout=urllib3.Timeout(connect=5.0, read=timeout))
        except urllib3.exceptions.HTTPError as e:
            raise OSError(f"gateway {self.base} unreachable: {e}") from None
        if r.status >= 400:
            try:
                doc = json.loads(r.data)
            except ValueError:
                doc = {"error": "http_error", "message": r.data[:200].decode("utf-8", "replace")}
            code = doc.get("error", "http_error")
            make = (errors or {}).get(code)
            if make is not None:
                raise make(doc)
            raise GatewayError(r.status, code, doc.get("message", ""))
        if raw:
            return r.data
        if r.status == 204 or not r.data:
            return None
        return json.loads(r.data)

    def close(self) -> None:
        self.pool.clear()


def _member_state(doc: Mapping[str, Any]) -> MemberState:
    return MemberState(doc["group"], doc["member_id"], doc["generation"], doc["rebalance"],
                       tuple((a["topic"], a["partition"]) for a in doc["assignment"]),
                       doc["assigned"], doc.get("strategy"), doc["heartbeat_interval_ms"])


class HttpMembership:
    """Group membership and commits through a gateway's group protocol routes."""

    def __init__(self, gateway: str, group: str):
        self.http = _Http(gateway)
        self.group = validate_group_id(group)

    def _errors(self, member_id: Any = None, generation: int = -1) -> dict[str, Any]:
        g = self.group
        return {
            "unknown_member_id": lambda d: UnknownMemberId(g, member_id),
            "illegal_generation": lambda d: IllegalGeneration(g, member_id, generation, -1),
            "rebalance_in_progress": lambda d: RebalanceInProgress(g, generation),
            "partition_not_assigned": lambda d: GatewayError(409, "partition_not_assigned",
                                                             d.get("message", "")),
            "inconsistent_group_protocol": lambda d: InconsistentGroupProtocol(g, (), ()),
        }

    def join(self, topics: Sequence[str], member_id: str | None, *, client_id: str = "",
             strategies: Sequence[str] = ("range",), session_timeout_ms: int | None = None,
             rebalance_timeout_ms: int = 60_000) -> MemberState:
        doc = self.http.call("POST", f"/groups/{self.group}/members",
                             {"topics": list(topics), "member_id": member_id,
                              "client_id": client_id, "strategies": list(strategies),
                              "session_timeout_ms": session_timeout_ms,
                              "rebalance_timeout_ms": rebalance_timeout_ms},
                             errors=self._errors(member_id))
        return _member_state(doc)

    def heartbeat(self, member_id: str, generation: int) -> MemberState:
        doc = self.http.call("POST", f"/groups/{self.group}/members/{member_id}/heartbeat",
                             {"generation": generation}, timeout=10,
                             errors=self._errors(member_id, generation))
        return _member_state(doc)

    def leave(self, member_id: str) -> None:
        self.http.call("DELETE", f"/groups/{self.group}/members/{member_id}",
                       errors=self._errors(member_id))

    def commit(self, offsets: Mapping[tuple[str, int], int], member_id: str | None,
               generation: int) -> None:
        self.http.call("POST", f"/groups/{self.group}/offsets",
                       {"member_id": member_id, "generation": generation,
                        "offsets": [{"topic": t, "partition": p, "offset": o}
                                    for (t, p), o in offsets.items()]},
                       errors=self._errors(member_id, generation))

    def committed(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        tps = list(tps)
        if not tps:
            return {}
        q = ",".join(f"{t}:{p}" for t, p in tps)
        doc = self.http.call("GET", f"/groups/{self.group}/offsets?partitions={q}")
        return {(o["topic"], o["partition"]): o["offset"] for o in doc["offsets"]}

    def close(self) -> None:
        self.http.close()


class GatewaySource:
    """The Consumer's record source through a gateway: ``POST /fetch`` long-polls."""

    def __init__(self, gateway: str, *, fetch_format: str = "arrow", min_bytes: int = 1,
                 max_bytes: int = 52_428_800):
        if fetch_format != "arrow":
            raise ValueError("the Consumer fetches Arrow from the gateway (fetch_format='arrow')")
        self.http = _Http(gateway)
        self.min_bytes, self.max_bytes = min_bytes, max_bytes
        self._partitions: dict[str, tuple[float, int]] = {}

    def partitions(self, topic: str) -> int:
        hit = self._partitions.get(topic)
        if hit is not None and time.monotonic() - hit[0] < 5:
            return hit[1]
        validate_topic_name(topic)
        doc = self.http.call("GET", f"/topics/{topic}/partitions",
                             errors={"unknown_topic": lambda d: UnknownTopic(topic)})
        n = len(doc)
        self._partitions[topic] = (time.monotonic(), n)
        return n

    def watermarks(self, tp: tuple[str, int]) -> tuple[int, int]:
        doc = self.http.call("GET", f"/topics/{tp[0]}/partitions/{tp[1]}/offsets",
                             errors={"unknown_topic": lambda d: UnknownTopic(tp[0]),
                                     "unknown_partition": lambda d: UnknownPartition(
                                         tp[0], tp[1], self.partitions(tp[0]))})
        return doc["beginning_offset"], doc["end_offset"]

    def fetch(self, positions: Mapping[tuple[str, int], int], max_records: int, wait_ms: int):
        body = {"partitions": [{"topic": t, "partition": p, "offset": o}
                               for (t, p), o in positions.items()],
                "max_records": max_records, "max_bytes": self.max_bytes, "wait_ms": wait_ms,
                "min_bytes": self.min_bytes}
        data = self.http.call("POST", "/fetch", body, raw=True, timeout=wait_ms / 1000 + 30)
        out, errors = [], {}
        reader = pa.ipc.open_stream(data)
        while True:
            try:
                batch, meta = reader.read_next_batch_with_custom_metadata()
            except StopIteration:
                break
            m = {k.decode(): v.decode() for k, v in (meta or {}).items()}
            tp = (m["topic"], int(m["partition"]))
            if "error" in m:
                errors[tp] = OffsetOutOfRange(tp[0], tp[1], int(m["offset"]),
                                              int(m["log_start_offset"]), int(m["high_watermark"]))
            elif batch.num_rows:
                out.append((tp, batch, int(m["next_offset"])))
        return out, errors

    def close(self) -> None:
        self.http.close()


# -- the consumer -------------------------------------------------------------------------
class Consumer:
    """A Kafka-style consumer (see the module docstring). Not thread-safe, like Kafka's:
    use one per thread; only its heartbeats run on a thread of their own."""

    def __init__(self, *, store: str | None = None, storage_options: Mapping[str, Any] | None = None,
                 log: Log | None = None, gateway: str | None = None,
                 coordinator: GroupCoordinator | None = None, group_id: str | None = None,
                 client_id: str = "sparklog-consumer", auto_offset_reset: str = "latest",
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 session_timeout_ms: int = 10_000, heartbeat_interval_ms: int = 3000,
                 max_poll_interval_ms: int = 300_000, max_poll_records: int = 500,
                 fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1,
                 fetch_max_bytes: int = 52_428_800, fetch_backoff_max_ms: int = 10,
                 partition_assignment_strategy: Sequence[str] | str = ("range",),
                 fetch_format: str = "arrow"):
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, "
                             f"not {auto_offset_reset!r}")
        for name, v in (("auto_commit_interval_ms", auto_commit_interval_ms),
                        ("session_timeout_ms", session_timeout_ms),
                        ("heartbeat_interval_ms", heartbeat_interval_ms),
                        ("max_poll_interval_ms", max_poll_interval_ms),
                        ("max_poll_records", max_poll_records),
                        ("fetch_max_bytes", fetch_max_bytes),
                        ("fetch_backoff_max_ms", fetch_backoff_max_ms)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} must be a positive integer, not {v!r}")
        for name, v in (("fetch_max_wait_ms", fetch_max_wait_ms),
                        ("fetch_min_bytes", fetch_min_bytes)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be a non-negative integer, not {v!r}")
        if isinstance(partition_assignment_strategy, str):
            partition_assignment_strategy = (partition_assignment_strategy,)
        if store is not None and log is not None:
            raise ValueError("give store= or log=, not both")
        if store is not None:
            log = open_log(store, storage_options=storage_options)
        if log is None and gateway is None:
            raise ValueError("a Consumer needs store= (or log=) to read segments directly, "
                             "or gateway= to read through a gateway")
        self.group_id = None if group_id is None else _groups.validate_group_id(group_id)
        self.client_id = client_id
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.max_poll_records = max_poll_records
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.strategies = tuple(partition_assignment_strategy)
        self._log, self._gateway, self._coordinator = log, gateway, coordinator
        if log is not None:
            self._source: Any = DirectSource(log, backoff_max_ms=fetch_backoff_max_ms)
        else:
            self._source = GatewaySource(gateway, fetch_format=fetch_format,
                                         min_bytes=fetch_min_bytes, max_bytes=fetch_max_bytes)
        self._membership: Any = None
        self._subscription: tuple[str, ...] = ()
        self._assignment: list[TopicPartition] = []
        self._manual = False
        self._positions: dict[TopicPartition, int] = {}
        self._consumed: dict[TopicPartition, int] = {}
        self._paused: set[TopicPartition] = set()
        # Fetched, not yet handed out, in fetch order. _positions is where the next
        # fetch of a partition starts (past its buffered records); _consumed is the
        # offset after the last record handed out, what commit() stores.
        self._buffer: collections.deque[_Fetched] = collections.deque()
        self._on_assign: Callable[[list[TopicPartition]], Any] | None = None
        self._on_revoke: Callable[[list[TopicPartition]], Any] | None = None
        self._on_lost: Callable[[list[TopicPartition]], Any] | None = None
        # group state, shared with the heartbeat thread under _lock
        self._lock = threading.Lock()
        self._member_id: str | None = None
        self._generation = -1
        self._state: MemberState | None = None
        self._lost = False
        self._hb_thread: threading.Thread | None = None
        self._hb_stop = threading.Event()
        self._last_commit = time.monotonic()
        self._committer: concurrent.futures.ThreadPoolExecutor | None = None
        self._closed = False

    # -- context manager ---------------------------------------------------------
    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalState("the consumer is closed")

    def _membership_for(self, group: str) -> Any:
        if self._coordinator is not None:
            return LocalMembership(self._coordinator, group)
        if self._gateway is not None:
            return HttpMembership(self._gateway, group)
        return StoreOffsets(self._log, group)

    # -- subscribe / assign -----------------------------------------------------------
    def subscribe(self, topics: Iterable[str] | str, *, group: str | None = None,
                  on_assign: Callable[[list[TopicPartition]], Any] | None = None,
                  on_revoke: Callable[[list[TopicPartition]], Any] | None = None,
                  on_lost: Callable[[list[TopicPartition]], Any] | None = None) -> None:
        """Join ``group`` (or ``group_id``) for ``topics``; partitions come at the next poll.

        Raises IllegalState after assign() or without a coordinator, ValueError
        without a group.
        """
        self._check_open()
        if self._manual:
            raise IllegalState("subscribe() after assign(): use one or the other")
        topics = (topics,) if isinstance(topics, str) else tuple(topics)
        if not topics or not all(isinstance(t, str) for t in topics):
            raise ValueError(f"subscribe() needs topic names, got {topics!r}")
        group = group or self.group_id
        if group is None:
            raise ValueError("subscribe() needs a consumer group: pass group= or group_id=")
        if self._membership is not None and group != self.group_id:
            raise IllegalState(f"already in group {self.group_id!r}")
        _groups.validate_group_id(group)
        if self._membership is None:
            membership = self._membership_for(group)
            if isinstance(membership, StoreOffsets):
                raise IllegalState("subscribe() needs a coordinator: give the Consumer a "
                                   "gateway= URL (or coordinator=); a direct consumer without "
                                   "one can only assign()")
            self._membership = membership
        self.group_id = group
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        self._subscription = topics
        for t in topics:  # fail fast on a bad topic, as at the first poll
            self._source.partitions(t)
        st = self._join()
        self._adopt(st)
        self._start_heartbeats()

    def assign(self, partitions: Iterable[Any]) -> None:
        """Read exactly these (topic, partition) pairs, no group membership.

        Raises IllegalState after subscribe(), ValueError for malformed pairs,
        UnknownTopic/UnknownPartition for ones that do not exist.
        """
        self._check_open()
        if self._subscription:
            raise IllegalState("assign() after subscribe(): use one or the other")
        tps = [_tp(tp) for tp in partitions]
        for topic, partition in tps:
            if not 0 <= partition < self._source.partitions(topic):
                from log_layout import UnknownPartition

                raise UnknownPartition(topic, partition, self._source.partitions(topic))
        self._manual = True
        if self.group_id is not None and self._membership is None:
            self._membership = self._membership_for(self.group_id)
        self._set_assignment(tps)

    def partitions_for(self, topic: str) -> list[TopicPartition]:
        """Every (topic, partition) of ``topic``; raises UnknownTopic."""
        return [(topic, p) for p in range(self._source.partitions(topic))]

    def assignment(self) -> list[TopicPartition]:
        return list(self._assignment)

    def subscription(self) -> tuple[str, ...]:
        return self._subscription

    def _set_assignment(self, tps: list[TopicPartition]) -> None:
        keep = set(tps)
        self._drop_buffered({tp for tp in self._assignment if tp not in keep})
        self._assignment = list(tps)
        for d in (self._positions, self._consumed):
            for tp in list(d):
                if tp not in keep:
                    del d[tp]
        self._paused &= keep

    # -- positions -----------------------------------------------------------------
    def _check_assigned(self, tp: Any) -> TopicPartition:
        tp = _tp(tp)
        if tp not in self._assignment:
            raise IllegalState(f"{tp[0]}-{tp[1]} is not assigned to this consumer "
                               f"(assigned: {self._assignment})")
        return tp

    def seek(self, tp: Any, offset: int) -> None:
        """Fetch ``tp`` from ``offset`` at the next poll (out of range: auto_offset_reset)."""
        tp = self._check_assigned(tp)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"seek offset must be a non-negative integer, not {offset!r}")
        self._drop_buffered({tp})
        self._positions[tp] = self._consumed[tp] = offset

    def _drop_buffered(self, tps: set[TopicPartition]) -> None:
        """Forget fetched records of ``tps`` not handed out yet, and fetch them again
        from the offset after the last one handed out (so none is skipped)."""
        if not tps or not self._buffer:
            return
        self._buffer = collections.deque(f for f in self._buffer if f.tp not in tps)
        for tp in tps:
            if tp in self._positions:
                self._positions[tp] = self._consumed[tp]

    def seek_to_beginning(self, *tps: Any) -> None:
        for tp in (tps or self._assignment):
            tp = self._check_assigned(tp)
            self.seek(tp, self._source.watermarks(tp)[0])

    def seek_to_end(self, *tps: Any) -> None:
        for tp in (tps or self._assignment):
            tp = self._check_assigned(tp)
            self.seek(tp, self._source.watermarks(tp)[1])

    def position(self, tp: Any) -> int:
        """The offset of the next record handed out for ``tp``."""
        tp = self._check_assigned(tp)
        self._init_positions([tp])
        return self._consumed[tp]

    def committed(self, tp: Any) -> int | None:
        tp = _tp(tp)
        if self._membership is None:
            return None
        return self._membership.committed([tp]).get(tp)

    def watermarks(self, tp: Any) -> tuple[int, int]:
        """(log start offset, high watermark) of a partition."""
        return self._source.watermarks(_tp(tp))

    def _init_positions(self, tps: Iterable[TopicPartition]) -> None:
        missing = [tp for tp in tps if tp not in self._positions]
        if not missing:
            return
        committed = self._membership.committed(missing) if self._membership is not None else {}
        for tp in missing:
            if tp in committed:
                pos = committed[tp]
            else:
                pos = self._reset_position(tp)
            self._positions[tp] = self._consumed[tp] = pos

    def _reset_position(self, tp: TopicPartition, error: OffsetOutOfRange | None = None) -> int:
        if self.auto_offset_reset == "none":
            if error is not None:
                raise error
            raise NoOffsetForPartition(tp[0], tp[1], self.group_id)
        start, end = self._source.watermarks(tp)
        return start if self.auto_offset_reset == "earliest" else end

    # -- pause -----------------------------------------------------------------------
    def pause(self, *tps: Any) -> None:
        """Stop fetching from these partitions until resume() (positions kept)."""
        for tp in tps:
            tp = self._check_assigned(tp)
            self._paused.add(tp)
            self._drop_buffered({tp})  # a paused partition hands out nothing, buffered or not

    def resume(self, *tps: Any) -> None:
        for tp in tps:
            self._paused.discard(self._check_assigned(tp))

    def paused(self) -> list[TopicPartition]:
        return sorted(self._paused)

    # -- polling -----------------------------------------------------------------------
    def poll_batches(self, timeout: float = 1.0, max_records: int | None = None) -> list[Batch]:
        """Arrow batches of up to ``max_records`` records, waiting up to ``timeout`` s
        for the first; [] if none came. Records handed out count as consumed.

        Raises IllegalState (closed, or neither subscribed nor assigned), ValueError
        (``max_records`` not a positive integer) and the group's and source's errors.
        """
        max_records = max_records or self.max_poll_records
        if not self._fill(timeout, max_records):
            return []
        return self._take(max_records)

    def poll(self, timeout: float = 1.0, max_records: int | None = None) -> list[Record]:
        """Records (in offset order per partition) as :class:`Record` tuples; see poll_batches."""
        out: list[Record] = []
        for b in self.poll_batches(timeout, max_records):
            out.extend(records_of(b.topic, b.partition, b.records))
        return out

    def __iter__(self) -> Iterator[Record]:
        """Every record, blocking for new ones: a never-ending iterator (until close()).

        It hands out the same stream as poll() (they may be mixed); a record
        counts as consumed once yielded.
        """
        while not self._closed:
            head = self._buffer[0] if self._buffer else None
            if head is None or head.start == 0:
                # Between batches, run poll's housekeeping (auto-commit, rebalance): it
                # may drop buffered records, so the head is read again after it.
                if not self._fill_or_stop():
                    continue
                head = self._buffer[0]
            records, tp = head.records(), head.tp
            last = len(records) - 1
            while True:
                i = head.start
                r = records[i]
                head.start = i + 1
                if i == last:  # gone before the yield: poll() must not see it empty
                    self._buffer.popleft()
                self._consumed[tp] = r.offset + 1
                yield r
                # poll(), seek(), pause() may have taken or dropped the head meanwhile
                if i == last or not self._buffer or self._buffer[0] is not head:
                    break

    def batches(self) -> Iterator[Batch]:
        """Every record as Arrow batches, blocking for new ones (never ends until close())."""
        while not self._closed:
            if self._fill_or_stop():
                yield from self._take(self.max_poll_records, max_batches=1)

    def _fill_or_stop(self) -> bool:
        """_fill for the iterators; False once close() was called meanwhile."""
        try:
            return self._fill(self.fetch_max_wait_ms / 1000 or 0.5, self.max_poll_records)
        except IllegalState:
            if self._closed:
                return False
            raise

    def _take(self, max_records: int, *, max_batches: int | None = None) -> list[Batch]:
        """Hand out up to ``max_records`` buffered records, in fetch order; they count
        as consumed. A fetched batch the iterator began is handed out from where it stopped."""
        out: list[Batch] = []
        while self._buffer and max_records > 0 and (max_batches is None or len(out) < max_batches):
            f = self._buffer[0]
            n = f.batch.num_rows - f.start
            if n <= max_records:
                self._buffer.popleft()
                part = f.batch.slice(f.start) if f.start else f.batch
            else:
                n = max_records
                part = f.batch.slice(f.start, n)
                f.start += n
            b = Batch(f.tp[0], f.tp[1], part)
            self._consumed[f.tp] = b.next_offset
            out.append(b)
            max_records -= n
        return out

    def _fill(self, timeout: float, max_records: int) -> bool:
        """Housekeeping (auto-commit, group), then, unless records are buffered, fetch
        up to ``max_records`` into the buffer, waiting up to ``timeout`` s.

        True if the buffer has records to hand out. Raises IllegalState or ValueError
        (see poll_batches).
        """
        self._check_open()
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records <= 0:
            raise ValueError(f"max_records must be a positive integer, not {max_records!r}")
        if not self._subscription and not self._manual:
            raise IllegalState("nothing to poll: subscribe() or assign() first")
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            self._maybe_auto_commit()
            if self._subscription:
                self._handle_group()  # a rebalance drops what it revokes from the buffer
            if self._buffer:
                return True
            self._fetch_into_buffer(deadline, max_records)
            if self._buffer:
                return True
            if time.monotonic() >= deadline:
                return False

    def _fetch_into_buffer(self, deadline: float, max_records: int) -> None:
        """One fetch at the positions of the fetchable partitions (buffer empty)."""
        fetchable = [tp for tp in self._assignment if tp not in self._paused]
        self._init_positions(fetchable)
        remaining = deadline - time.monotonic()
        wait = int(max(0.0, min(remaining, self.fetch_max_wait_ms / 1000)) * 1000)
        if self._subscription and (self._state is None or not self._state.assigned
                                   or self._state.rebalance):
            wait = min(wait, 50)  # rejoining: check the group again soon
        if not fetchable:
            if wait:
                self._hb_stop.wait(wait / 1000)
            return
        got, errors = self._source.fetch({tp: self._positions[tp] for tp in fetchable},
                                         max_records, wait)
        for tp, e in errors.items():
            self._positions[tp] = self._consumed[tp] = self._reset_position(tp, e)
        # A rebalance on the heartbeat thread cannot change the assignment (that
        # happens in _handle_group, on this thread), so every batch is still ours.
        for tp, batch, nxt in got:
            self._positions[tp] = nxt
            self._buffer.append(_Fetched(tp, batch))

    # -- group handling (on the polling thread) -----------------------------------------
    def _join(self) -> MemberState:
        return self._membership.join(self._subscription, self._member_id, client_id=self.client_id,
                                     strategies=self.strategies,
                                     session_timeout_ms=self.session_timeout_ms,
                                     rebalance_timeout_ms=self.max_poll_interval_ms)

    def _adopt(self, st: MemberState) -> None:
        with self._lock:
            self._member_id = st.member_id
            self._state = st
            self._lost = False

    def _handle_group(self) -> None:
        with self._lock:
            st, lost = self._state, self._lost
        if lost:
            # Our session expired (or the coordinator restarted): the partitions are
            # someone else's now, so do not commit; join as a new member.
            owned = list(self._assignment)
            self._set_assignment([])
            self._generation = -1
            if owned:
                (self._on_lost or self._on_revoke or (lambda _: None))(owned)
            try:  # IllegalGeneration keeps the member id; a removed member joins anew
                st = self._join()
            except UnknownMemberId:
                with self._lock:
                    self._member_id = None
                st = self._join()
            self._adopt(st)
            return
        if st is None:
            return
        cooperative = st.strategy == _groups.COOPERATIVE
        if st.rebalance and not cooperative:
            # Eager: give up everything (commit first), then rejoin.
            owned = list(self._assignment)
            if owned and self.enable_auto_commit:
                self._commit_quietly()
            if owned and self._on_revoke is not None:
                self._on_revoke(owned)
            self._set_assignment([])
            self._rejoin()
            return
        if st.assigned and st.generation != self._generation:
            new = list(st.assignment)
            gone = [tp for tp in self._assignment if tp not in new]
            added = [tp for tp in new if tp not in self._assignment]
            self._generation = st.generation
            if gone:  # cooperative: only what moved; commit it under the new generation
                if self.enable_auto_commit:
                    self._commit_quietly({tp: off for tp, off in self._commit_offsets().items()
                                          if tp in gone})
                if self._on_revoke is not None:
                    self._on_revoke(gone)
            self._set_assignment(new)
            self._init_positions(added)
            if self._on_assign is not None and (added or not gone):
                self._on_assign(added)
        if st.rebalance and cooperative:
            self._rejoin()  # keeping the partitions: they stay ours until told otherwise

    def _rejoin(self) -> None:
        try:
            self._adopt(self._join())
        except UnknownMemberId:
            with self._lock:
                self._lost = True

    def _start_heartbeats(self) -> None:
        if self._hb_thread is not None:
            return
        self._hb_thread = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                           name=f"sparklog-heartbeat-{self.client_id}")
        self._hb_thread.start()

    def _heartbeat_loop(self) -> None:
        while not self._hb_stop.is_set():
            with self._lock:
                member, st = self._member_id, self._state
            interval = self.heartbeat_interval_ms / 1000
            if st is not None and (st.rebalance or not st.assigned):
                interval = min(interval, 0.02)  # waiting for others: learn the outcome soon
            if member is not None and st is not None:
                try:
                    new = self._membership.heartbeat(member, st.generation)
                    with self._lock:
                        if self._member_id == member:
                            self._state = new
                except (UnknownMemberId, IllegalGeneration):
                    with self._lock:
                        if self._member_id == member:
                            self._lost = True
                except Exception:  # noqa: BLE001 - a failed heartbeat is retried at the next beat
                    pass
            self._hb_stop.wait(interval)

    # -- commits ---------------------------------------------------------------------------
    def _commit_offsets(self) -> dict[TopicPartition, int]:
        return {tp: off for tp, off in self._consumed.items() if tp in self._assignment}

    def commit(self, offsets: Mapping[Any, int] | None = None, *, asynchronous: bool = False,
               ) -> concurrent.futures.Future | None:
        """Commit consumed positions (or ``offsets``: next offsets to read).

        Sync by default (raises the coordinator's typed error, e.g.
        IllegalGeneration for a zombie); ``asynchronous=True`` returns a Future
        resolved on a background thread (commits are sent in order).
        """
        self._check_open()
        if self._membership is None:
            raise IllegalState("commit() needs a group: set group_id= (or subscribe with group=)")
        todo = ({_tp(tp): off for tp, off in offsets.items()} if offsets is not None
                else self._commit_offsets())
        member, generation = (self._member_id, self._generation) if self._subscription \
            else (None, -1)
        if not asynchronous:
            self._send_commit(todo, member, generation)
            return None
        if self._committer is None:
            self._committer = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="sparklog-commit")
        return self._committer.submit(self._send_commit, todo, member, generation)

    def _send_commit(self, offsets: Mapping[TopicPartition, int], member: str | None,
                     generation: int) -> None:
        if offsets:
            try:
                try:
                    self._membership.commit(dict(offsets), member, generation)
                except IllegalGeneration:
                    newer = self._newer_generation(member, generation)
                    if newer is None:
                        raise
                    self._membership.commit(dict(offsets), member, newer)
            except (UnknownMemberId, IllegalGeneration):
                # Our membership is gone (Kafka's CommitFailedException): the next
                # poll gives up the partitions (on_lost) and joins again.
                if member is not None:
                    with self._lock:
                        if self._member_id == member:
                            self._lost = True
                raise
        self._last_commit = time.monotonic()

    def _newer_generation(self, member: str | None, generation: int) -> int | None:
        """After a commit refused with IllegalGeneration: the group's generation if we
        are still a member and it moved on, else None (we are a zombie).

        A cooperative member keeps its partitions while it rejoins, so the coordinator
        can complete the next generation before this thread adopts it (at the next
        poll; the heartbeat thread may not even have heard of it). Committing under
        that generation is then right: the coordinator still checks that we own, or
        are revoking, each partition committed. An eager member owns nothing by then.
        Raises UnknownMemberId if the coordinator no longer knows us.
        """
        if member is None:
            return None
        st = self._membership.heartbeat(member, generation)
        return st.generation if st.generation != generation else None

    def _commit_quietly(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        try:
            if offsets is None or offsets:
                self.commit(offsets)
        except (SparklogError, OSError):
            pass  # a refused auto-commit only means more records are read again

    def _maybe_auto_commit(self) -> None:
        if (self.enable_auto_commit and self._membership is not None and self._assignment
                and (time.monotonic() - self._last_commit) * 1000 >= self.auto_commit_interval_ms):
            self._commit_quietly()

    # -- close ---------------------------------------------------------------------------
    def close(self, *, commit: bool | None = None) -> None:
        """Commit (auto-commit on), leave the group, stop background threads. Idempotent."""
        if self._closed:
            return
        if (self.enable_auto_commit if commit is None else commit) and self._membership is not None \
                and self._assignment and not self._lost:
            self._commit_quietly()
        self._closed = True
        self._hb_stop.set()
        if self._hb_thread is not None:
            self._hb_thread.join()
        if self._committer is not None:
            self._committer.shutdown(wait=True)
        if self._subscription and self._member_id is not None:
            owned = list(self._assignment)
            if owned and self._on_revoke is not None:
                self._on_revoke(owned)
            try:
                self._membership.leave(self._member_id)
            except (SparklogError, OSError):
                pass  # already gone: the group rebalances without us either way
        if self._membership is not None:
            self._membership.close()
        self._buffer.clear()
        self._source.close()

    def _abandon(self) -> None:
        """Stop heartbeating without leaving or committing: a crashed process, for tests."""
        self._closed = True
        self._hb_stop.set()
        if self._hb_thread is not None:
            self._hb_thread.join()
