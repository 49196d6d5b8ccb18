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
commits go to the gateway, records come from the store), or a coordinator in this
process (``coordinator=``, a ``protocol.groups.Coordinator`` such as the server's
``GroupCoordinator``; for embedding and tests). A direct consumer with neither can
only ``assign()``; with a ``group_id`` it reads and commits that group's offsets in
the store itself (last writer wins: see ``client.direct``).

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

The class is a facade over parts that each own their state, as Kafka's
``KafkaConsumer`` is: :class:`~ingest_gateway.client.subscription.SubscriptionState`
(subscription, assignment, pauses), :class:`~ingest_gateway.client.fetcher.Fetcher`
(positions, the buffer, poll's and the iterators' hand-outs) and
:class:`~ingest_gateway.client.consumer_coordinator.ConsumerCoordinator` (rebalances,
heartbeats, commits).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ingest_gateway.client.cluster import METADATA_MAX_AGE_MS, ClusterRouter
from ingest_gateway.client.consumer_coordinator import (ConsumerCoordinator, GroupMetadata,
                                                        GroupOptions)
from ingest_gateway.client.fetcher import Fetcher
from ingest_gateway.client.gateway_transport import GatewaySource, HttpMembership
from ingest_gateway.client.records import ArrowBatch, Record, as_tp, records_of
from ingest_gateway.client.subscription import SubscriptionState
from ingest_gateway.errors import IllegalState
from ingest_gateway.protocol.connection_security import ConnectionSecurity
from ingest_gateway.protocol.groups import Coordinator, TopicPartition, validate_group_id
from log_layout import Log, UnknownPartition, open_log
from log_layout.direct_reader import DirectReader

Listener = Callable[[list[TopicPartition]], Any]


class Consumer:
    """A Kafka-style consumer (see the module docstring). Not thread-safe, like Kafka's:
    use one per thread; only its heartbeats run on a thread of their own."""

    def __init__(self, *, store: str | None = None, storage_options: Mapping[str, Any] | None = None,
                 log: Log | None = None, gateway: str | Sequence[str] | None = None,
                 bootstrap_servers: str | Sequence[str] | None = None,
                 coordinator: Coordinator | None = None, group_id: str | None = None,
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
        group_id = None if group_id is None else validate_group_id(group_id)
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
        self._fetcher = Fetcher(_source(log, self._router, fetch_backoff_max_ms, fetch_format,
                                        fetch_min_bytes, fetch_max_bytes, isolation_level),
                                auto_offset_reset=auto_offset_reset)
        self._subscriptions = SubscriptionState(on_change=self._fetcher.keep_only)
        #: set on close: ends the heartbeats and a wait for nothing to fetch
        self._stop = threading.Event()
        self._group = ConsumerCoordinator(
            group_id, GroupOptions(client_id, self.strategies, session_timeout_ms,
                                   heartbeat_interval_ms, max_poll_interval_ms,
                                   enable_auto_commit, auto_commit_interval_ms),
            membership_for=self._membership_for, subscriptions=self._subscriptions,
            fetcher=self._fetcher, stop=self._stop)
        self._closed = False

    @property
    def group_id(self) -> str | None:
        """The consumer group (``group_id=``, or ``subscribe``'s ``group=``)."""
        return self._group.group_id

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
                  on_assign: Listener | None = None, on_revoke: Listener | None = None,
                  on_lost: Listener | None = None) -> None:
        """Join ``group`` (or ``group_id``) for ``topics``; partitions come at the next poll.

        Raises IllegalState after assign() or without a coordinator, ValueError
        without a group.
        """
        self._check_open()
        if self._subscriptions.manual:
            raise IllegalState("subscribe() after assign(): use one or the other")
        topics = (topics,) if isinstance(topics, str) else tuple(topics)
        if not topics or not all(isinstance(t, str) for t in topics):
            raise ValueError(f"subscribe() needs topic names, got {topics!r}")
        group = group or self.group_id
        if group is None:
            raise ValueError("subscribe() needs a consumer group: pass group= or group_id=")
        if self._group.has_group and group != self.group_id:
            raise IllegalState(f"already in group {self.group_id!r}")
        validate_group_id(group)
        self._group.use_group(group, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        self._subscriptions.subscribe(topics)
        for t in topics:  # fail fast on a bad topic, as at the first poll
            self._fetcher.partitions(t)
        self._group.join_group()

    def assign(self, partitions: Iterable[Any]) -> None:
        """Read exactly these (topic, partition) pairs, no group membership.

        Raises IllegalState after subscribe(), ValueError for malformed pairs,
        UnknownTopic/UnknownPartition for ones that do not exist.
        """
        self._check_open()
        if self._subscriptions.topics:
            raise IllegalState("assign() after subscribe(): use one or the other")
        tps = [as_tp(tp) for tp in partitions]
        for topic, partition in tps:
            if not 0 <= partition < self._fetcher.partitions(topic):
                raise UnknownPartition(topic, partition, self._fetcher.partitions(topic))
        self._group.use_offsets()
        self._subscriptions.assign(tps)

    def partitions_for(self, topic: str) -> list[TopicPartition]:
        """Every (topic, partition) of ``topic``; raises UnknownTopic."""
        return [(topic, p) for p in range(self._fetcher.partitions(topic))]

    def assignment(self) -> list[TopicPartition]:
        return list(self._subscriptions.assigned)

    def subscription(self) -> tuple[str, ...]:
        return self._subscriptions.topics

    def group_metadata(self) -> GroupMetadata:
        """The group, generation and member id this consumer commits under now."""
        return self._group.group_metadata()

    # -- positions -----------------------------------------------------------------
    def seek(self, tp: Any, offset: int) -> None:
        """Fetch ``tp`` from ``offset`` at the next poll (out of range: auto_offset_reset)."""
        tp = self._subscriptions.check_assigned(tp)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"seek offset must be a non-negative integer, not {offset!r}")
        self._fetcher.seek(tp, offset)

    def seek_to_beginning(self, *tps: Any) -> None:
        for tp in (tps or self._subscriptions.assigned):
            tp = self._subscriptions.check_assigned(tp)
            self.seek(tp, self._fetcher.watermarks(tp)[0])

    def seek_to_end(self, *tps: Any) -> None:
        for tp in (tps or self._subscriptions.assigned):
            tp = self._subscriptions.check_assigned(tp)
            self.seek(tp, self._fetcher.watermarks(tp)[1])

    def position(self, tp: Any) -> int:
        """The offset of the next record handed out for ``tp``."""
        tp = self._subscriptions.check_assigned(tp)
        self._init_positions([tp])
        return self._fetcher.position(tp)

    def committed(self, tp: Any) -> int | None:
        tp = as_tp(tp)
        return self._group.committed([tp]).get(tp)

    def watermarks(self, tp: Any) -> tuple[int, int]:
        """(log start offset, high watermark) of a partition."""
        return self._fetcher.watermarks(as_tp(tp))

    def _init_positions(self, tps: Iterable[TopicPartition]) -> None:
        self._fetcher.init_positions(tps, self._group.committed, self.group_id)

    # -- pause -----------------------------------------------------------------------
    def pause(self, *tps: Any) -> None:
        """Stop fetching from these partitions until resume() (positions kept)."""
        for tp in tps:
            tp = self._subscriptions.check_assigned(tp)
            self._subscriptions.pause(tp)
            self._fetcher.drop({tp})  # a paused partition hands out nothing, buffered or not

    def resume(self, *tps: Any) -> None:
        for tp in tps:
            self._subscriptions.resume(self._subscriptions.check_assigned(tp))

    def paused(self) -> list[TopicPartition]:
        return self._subscriptions.paused()

    # -- polling ---------------------------------------------------------------------
    def poll_batches(self, timeout: float = 1.0,
                     max_records: int | None = None) -> list[ArrowBatch]:
        """Arrow batches of up to ``max_records`` records, waiting up to ``timeout`` s
        for the first; [] if none came. Records handed out count as consumed.

        Raises IllegalState (closed, or neither subscribed nor assigned), ValueError
        (``max_records`` not a positive integer) and the group's and source's errors.
        """
        max_records = max_records or self.max_poll_records
        if not self._fill(timeout, max_records):
            return []
        return self._fetcher.take(max_records)

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
        return self._fetcher.iterate(self._fill_or_stop, self._is_closed)

    def batches(self) -> Iterator[ArrowBatch]:
        """Every record as Arrow batches, blocking for new ones (never ends until close())."""
        while not self._closed:
            if self._fill_or_stop():
                yield from self._fetcher.take(self.max_poll_records, max_batches=1)

    def _is_closed(self) -> bool:
        return self._closed

    def _fill_or_stop(self) -> bool:
        """_fill for the iterators; False once close() was called meanwhile."""
        try:
            return self._fill(self.fetch_max_wait_ms / 1000 or 0.5, self.max_poll_records)
        except IllegalState:
            if self._closed:
                return False
            raise

    def _fill(self, timeout: float, max_records: int) -> bool:
        """Housekeeping (auto-commit, group), then, unless records are buffered, fetch
        up to ``max_records`` into the buffer, waiting up to ``timeout`` s.

        True if the buffer has records to hand out. Raises IllegalState or ValueError
        (see poll_batches).
        """
        self._check_open()
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records <= 0:
            raise ValueError(f"max_records must be a positive integer, not {max_records!r}")
        subscribed = self._subscriptions.topics
        if not subscribed and not self._subscriptions.manual:
            raise IllegalState("nothing to poll: subscribe() or assign() first")
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            self._group.maybe_auto_commit()
            if subscribed:
                self._group.handle_group()  # a rebalance drops what it revokes from the buffer
            if self._fetcher.has_buffered():
                return True
            self._fetch(deadline, max_records)
            if self._fetcher.has_buffered():
                return True
            if time.monotonic() >= deadline:
                return False

    def _fetch(self, deadline: float, max_records: int) -> None:
        """One fetch at the positions of the fetchable partitions (buffer empty)."""
        fetchable = self._subscriptions.fetchable()
        self._init_positions(fetchable)
        remaining = deadline - time.monotonic()
        wait = int(max(0.0, min(remaining, self.fetch_max_wait_ms / 1000)) * 1000)
        if self._subscriptions.topics and self._group.rejoining():
            wait = min(wait, 50)  # rejoining: check the group again soon
        if not fetchable:
            if wait:
                self._stop.wait(wait / 1000)
            return
        self._fetcher.fetch(fetchable, max_records, wait)

    # -- commits -----------------------------------------------------------------------
    def commit(self, offsets: Mapping[Any, int] | None = None, *, asynchronous: bool = False,
               ) -> concurrent.futures.Future | None:
        """Commit consumed positions (or ``offsets``: next offsets to read).

        Sync by default (raises the coordinator's typed error, e.g.
        IllegalGeneration for a zombie); ``asynchronous=True`` returns a Future
        resolved on a background thread (commits are sent in order).
        """
        self._check_open()
        return self._group.commit(offsets, asynchronous=asynchronous)

    # -- close ---------------------------------------------------------------------------
    def close(self, *, commit: bool | None = None) -> None:
        """Commit (auto-commit on), leave the group, stop background threads. Idempotent."""
        if self._closed:
            return
        self._group.commit_on_close(commit)
        self._closed = True
        self._stop.set()
        self._group.close()
        self._fetcher.close()
        if self._router is not None:
            self._router.close()

    def _abandon(self) -> None:
        """Stop heartbeating without leaving or committing: a crashed process, for tests."""
        self._closed = True
        self._stop.set()
        self._group.abandon()


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
