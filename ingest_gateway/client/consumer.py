"""The Python consumer: subscribe or assign, poll, iterate forever, seek, commit.

::

    from ingest_gateway.client import Consumer

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
  the read path. The store cannot notify anyone, so a waiting consumer probes the
  manifests: every ms while records keep coming, slower the longer none came, up
  to every ``fetch_backoff_max_ms`` (``log_layout.direct_reader``);
* or *through gateways* (``gateway=`` only): long-poll fetches that a
  gateway answers as soon as a flush commits data, each sent to the gateway
  leading the partitions it asks for.

``gateway=`` (or its Kafka name ``bootstrap_servers=``) is Kafka's bootstrap
list: one gateway URL, or several (comma-separated or a list; ``HOST:PORT``
means ``http://HOST:PORT``). The consumer asks them which gateway leads each
partition and coordinates its group (``client.cluster``) and follows both
when they move; a group call is retried at the new coordinator for up to
``request_timeout_ms`` before it raises.

``isolation_level`` (Kafka's name and default ``read_uncommitted``): with
``read_committed`` a fetch reads only to the last stable offset and never hands out
an aborted transaction's records, through gateways (the fetch's field) and directly
alike; ``watermarks`` then answers the last stable offset as the end.

**Security** (gateways only; kafka-python's names, ``client.connection_security``):
``ssl_cafile`` for ``https://`` gateways, ``ssl_certfile``/``ssl_keyfile`` for a
client certificate, ``sasl_plain_username``/``sasl_plain_password`` (HTTP Basic) or
``sasl_oauth_token`` (a bearer token or a callable returning one). A 401 or 403 is
raised from the call that met it (``subscribe``, ``poll``, ``commit``...) as
NotAuthenticated or NotAuthorized, never retried.

Group membership (``subscribe(..., group=)``) needs a coordinator: the
group's coordinator gateway (``gateway=``, also in direct mode: membership and
commits go to the gateway, records come from the store), or an in-process
:class:`~ingest_gateway.server.groups.coordinator.GroupCoordinator` (``coordinator=``; for
embedding and tests). A direct consumer with neither can only ``assign()``;
with a ``group_id`` it reads and commits that group's offsets in the store
itself (last writer wins: see ``client.direct``).

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

**Rebalances** (eager, see ``server.groups.coordinator``): when the coordinator signals one, the
consumer commits (auto-commit), calls ``on_revoke(partitions)``, rejoins, and
once the new generation is assigned calls ``on_assign(partitions)``. If the
membership was lost (session timeout) it calls ``on_lost`` (default:
``on_revoke``) without committing — a zombie's commits would be refused anyway.
Heartbeats run on a background thread every ``heartbeat_interval_ms``; rejoining
happens inside ``poll``, so a consumer that stops polling for longer than
``max_poll_interval_ms`` is removed from the group.

The class is written in three modules by job, sharing one state (as Kafka's
``KafkaConsumer`` keeps it in one object): this one (configuration, subscribe /
assign, positions, pause, close), ``consumer_polling`` (the buffer, poll and the
iterators) and ``consumer_group`` (rebalances, heartbeats, commits).
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from conf.errors import SparklogError
from ingest_gateway.client.cluster import METADATA_MAX_AGE_MS, ClusterRouter
from ingest_gateway.protocol.connection_security import ConnectionSecurity
from ingest_gateway.client.consumer_group import GroupMember
from ingest_gateway.client.consumer_polling import Polling
from ingest_gateway.client.gateway_transport import GatewaySource, HttpMembership
from ingest_gateway.protocol.groups import MemberState, TopicPartition, validate_group_id
from ingest_gateway.client.records import Fetched, as_tp
from ingest_gateway.errors import IllegalState, NoOffsetForPartition
from log_layout import Log, OffsetOutOfRange, UnknownPartition, open_log
from log_layout.direct_reader import DirectReader

if TYPE_CHECKING:
    from ingest_gateway.server.groups.coordinator import GroupCoordinator


class Consumer(Polling, GroupMember):
    """A Kafka-style consumer (see the module docstring). Not thread-safe, like Kafka's:
    use one per thread; only its heartbeats run on a thread of their own."""

    def __init__(self, *, store: str | None = None, storage_options: Mapping[str, Any] | None = None,
                 log: Log | None = None, gateway: str | Sequence[str] | None = None,
                 bootstrap_servers: str | Sequence[str] | None = None,
                 coordinator: GroupCoordinator | None = None, group_id: str | None = None,
                 client_id: str = "sparklog-consumer", auto_offset_reset: str = "latest",
                 enable_auto_commit: bool = True, auto_commit_interval_ms: int = 5000,
                 session_timeout_ms: int = 10_000, heartbeat_interval_ms: int = 3000,
                 max_poll_interval_ms: int = 300_000, max_poll_records: int = 500,
                 fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1,
                 fetch_max_bytes: int = 52_428_800, fetch_backoff_max_ms: int = 10,
                 partition_assignment_strategy: Sequence[str] | str = ("range",),
                 fetch_format: str = "arrow", request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100, metadata_max_age_ms: int = METADATA_MAX_AGE_MS,
                 ssl_cafile: str | None = None, ssl_certfile: str | None = None,
                 ssl_keyfile: str | None = None, sasl_plain_username: str | None = None,
                 sasl_plain_password: str | None = None,
                 sasl_oauth_token: str | Callable[[], str] | None = None,
                 isolation_level: str = "read_uncommitted"):
        _check_options(auto_offset_reset, isolation_level, positive={
            "auto_commit_interval_ms": auto_commit_interval_ms,
            "session_timeout_ms": session_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "max_poll_interval_ms": max_poll_interval_ms, "max_poll_records": max_poll_records,
            "fetch_max_bytes": fetch_max_bytes, "fetch_backoff_max_ms": fetch_backoff_max_ms,
            "request_timeout_ms": request_timeout_ms, "retry_backoff_ms": retry_backoff_ms,
            "metadata_max_age_ms": metadata_max_age_ms,
        }, non_negative={"fetch_max_wait_ms": fetch_max_wait_ms,
                         "fetch_min_bytes": fetch_min_bytes})
        if isinstance(partition_assignment_strategy, str):
            partition_assignment_strategy = (partition_assignment_strategy,)
        log, gateway = _where(store, storage_options, log, gateway, bootstrap_servers)
        self.group_id = None if group_id is None else validate_group_id(group_id)
        self.client_id, self.auto_offset_reset = client_id, auto_offset_reset
        self.isolation_level = isolation_level
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.session_timeout_ms, self.heartbeat_interval_ms = \
            session_timeout_ms, heartbeat_interval_ms
        self.max_poll_interval_ms, self.max_poll_records = max_poll_interval_ms, max_poll_records
        self.fetch_max_wait_ms, self.fetch_min_bytes, self.fetch_max_bytes = \
            fetch_max_wait_ms, fetch_min_bytes, fetch_max_bytes
        self.strategies = tuple(partition_assignment_strategy)
        self._log, self._coordinator = log, coordinator
        self.request_timeout_s = request_timeout_ms / 1000
        # one router (one session per gateway) for the fetches and the group calls alike
        security = ConnectionSecurity.of(
            ssl_cafile=ssl_cafile, ssl_certfile=ssl_certfile, ssl_keyfile=ssl_keyfile,
            sasl_plain_username=sasl_plain_username, sasl_plain_password=sasl_plain_password,
            sasl_oauth_token=sasl_oauth_token)
        self._router = None if gateway is None else ClusterRouter(
            gateway, retry_backoff_ms=retry_backoff_ms, metadata_max_age_ms=metadata_max_age_ms,
            request_timeout_s=self.request_timeout_s, security=security)
        self._source: Any = _source(log, self._router, fetch_backoff_max_ms, fetch_format,
                                    fetch_min_bytes, fetch_max_bytes, isolation_level)
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
        self._buffer: collections.deque[Fetched] = collections.deque()
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
        if self._router is not None and self._coordinator is None:
            return HttpMembership(self._router, group, request_timeout_s=self.request_timeout_s)
        # direct mode: the coordinator's code is loaded only by a consumer that needs it
        from ingest_gateway.client import direct

        return direct.membership(group, log=self._log, coordinator=self._coordinator)

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
        validate_group_id(group)
        if self._membership is None:
            membership = self._membership_for(group)
            if not membership.coordinated:
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
        tps = [as_tp(tp) for tp in partitions]
        for topic, partition in tps:
            if not 0 <= partition < self._source.partitions(topic):
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
        tp = as_tp(tp)
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
        tp = as_tp(tp)
        if self._membership is None:
            return None
        return self._membership.committed([tp]).get(tp)

    def watermarks(self, tp: Any) -> tuple[int, int]:
        """(log start offset, high watermark) of a partition."""
        return self._source.watermarks(as_tp(tp))

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
        if self._router is not None:
            self._router.close()

    def _abandon(self) -> None:
        """Stop heartbeating without leaving or committing: a crashed process, for tests."""
        self._closed = True
        self._hb_stop.set()
        if self._hb_thread is not None:
            self._hb_thread.join()


def _where(store: str | None, storage_options: Mapping[str, Any] | None, log: Log | None,
           gateway: Any, bootstrap_servers: Any) -> tuple[Log | None, Any]:
    """(log, gateways) from the Consumer's arguments; raises ValueError for none or both."""
    if store is not None and log is not None:
        raise ValueError("give store= or log=, not both")
    if store is not None:
        log = open_log(store, storage_options=storage_options)
    if gateway is not None and bootstrap_servers is not None:
        raise ValueError("give gateway= or bootstrap_servers= (the same thing), not both")
    gateway = gateway if gateway is not None else bootstrap_servers
    if log is None and gateway is None:
        raise ValueError("a Consumer needs store= (or log=) to read segments directly, "
                         "or gateway= to read through a gateway")
    return log, gateway


def _source(log: Log | None, router: ClusterRouter | None, backoff_max_ms: int,
            fetch_format: str, min_bytes: int, max_bytes: int, isolation_level: str) -> Any:
    """Where the records come from: the store itself, or the gateways."""
    if log is not None:
        return DirectReader(log, backoff_max_ms=backoff_max_ms, isolation_level=isolation_level)
    return GatewaySource(router, fetch_format=fetch_format, min_bytes=min_bytes,
                         max_bytes=max_bytes, isolation_level=isolation_level)


def _check_options(auto_offset_reset: str, isolation_level: str, *,
                   positive: Mapping[str, Any], non_negative: Mapping[str, Any]) -> None:
    """Raises ValueError naming the first option out of its range."""
    if auto_offset_reset not in ("earliest", "latest", "none"):
        raise ValueError(f"auto_offset_reset must be earliest, latest or none, "
                         f"not {auto_offset_reset!r}")
    if isolation_level not in ("read_uncommitted", "read_committed"):
        raise ValueError(f"isolation_level must be read_uncommitted or read_committed, "
                         f"not {isolation_level!r}")
    for name, v in positive.items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, not {v!r}")
    for name, v in non_negative.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name} must be a non-negative integer, not {v!r}")
