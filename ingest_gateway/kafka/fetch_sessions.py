"""Kafka's fetch sessions (KIP-227): a consumer names its partitions once, then sends only
what changed, and is answered only what changed.

As Kafka's ``FetchManager`` and ``FetchSessionCache`` (core/.../FetchSession.scala), per
request (Fetch v7+; ``session_id``, ``session_epoch``):

- **full** (epoch 0): any session named is closed; the request's partitions are fetched
  and, if a slot is free (or one can be evicted, below), a new session caching them is
  made and its id answered (epoch 1 next); else session id 0 (the client sends full
  fetches). Epoch -1 (final): the session named is closed and none is made.
- **incremental** (epoch > 0): the session's partitions with the request's added or
  updated and ``forgotten_topics_data`` removed are fetched, each from its cached fetch
  offset unless the request names it again. A session id not held answers
  ``FETCH_SESSION_ID_NOT_FOUND``, another epoch than the session's next
  ``INVALID_FETCH_SESSION_EPOCH``, a request by topic name to a session by topic id or
  back (v13 or not) ``FETCH_SESSION_TOPIC_ID_ERROR`` (each with session id 0 and no
  partitions: the client starts again with a full fetch). A session left with no
  partitions is closed. The answer holds only the partitions with records, an error,
  or a high watermark or log start offset other than last answered; those that had
  records move to the end of the session's order, so the next fetch reads the others
  first (Kafka's fairness under ``max_bytes``).

**Slots and eviction** (Kafka's ``tryEvict``): at most ``slots`` sessions
(``gateway.kafka.max.incremental.fetch.session.cache.slots``, Kafka's
``max.incremental.fetch.session.cache.slots``, default 1000; 0: none). A new session
takes a free slot, else evicts the least recently used one if it has been unused for
``EVICTION_MS`` (Kafka's 120 s), else the one with the fewest partitions among those
that were older than ``EVICTION_MS`` when last used, if the new one has more; otherwise it is not made. All
sessions here are consumers' (Kafka's "unprivileged": there are no follower fetches).

**Bounds against hostile clients**: a session holds at most ``MAX_PARTITIONS``
partitions; an incremental request that would grow it past that closes it and answers
``FETCH_SESSION_ID_NOT_FOUND`` (the client starts again with a full fetch, whose
partitions its request bytes bound). Memory is thus at most slots x MAX_PARTITIONS
small entries.

**Throttling**: a throttled answer carries no partitions (Kafka's
``getThrottledResponse``); what the session learnt from the answer withheld (the high
watermarks and log starts it would have told) is put back (:meth:`FetchSession.undo`),
so the next answer tells them.
"""

from __future__ import annotations

import dataclasses
import time
import secrets
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

#: Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
EVICTION_MS = 120_000
#: partitions one session may cache (module doc)
MAX_PARTITIONS = 100_000
INITIAL_EPOCH, FINAL_EPOCH, NO_SESSION = 0, -1, 0
FETCH_SESSION_ID_NOT_FOUND = ErrorCode.fetch_session_id_not_found
INVALID_FETCH_SESSION_EPOCH = ErrorCode.invalid_fetch_session_epoch
FETCH_SESSION_TOPIC_ID_ERROR = ErrorCode.fetch_session_topic_id_error
_MAX_INT32 = 2**31 - 1

#: a partition of a session: (topic name, or its id from Fetch v13, partition)
Key = tuple[Hashable, int]


def next_epoch(epoch: int) -> int:
    """Kafka's ``FetchMetadata.nextEpoch``: -1 stays -1, the largest int wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_INT32 else epoch + 1


@dataclasses.dataclass
class Cached:
    """One partition of a session: what the client asked last, what it was told last."""

    fetch_offset: int
    max_bytes: int
    high_watermark: int = -1
    log_start_offset: int = -1


class FetchSession:
    """The partitions one client fetches (in fetch order), the epoch its next request
    must carry, and when it was made and last used (ms)."""

    def __init__(self, session_id: int, uses_ids: bool, partitions: dict[Key, Cached],
                 now_ms: float):
        self.id, self.uses_ids, self.partitions = session_id, uses_ids, partitions
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.created_ms = self.last_used_ms = now_ms
        #: the size last counted by the cache (Kafka's cachedSize, its eviction key)
        self.counted = len(partitions)
        #: older than the eviction time when last used (Kafka's evictableByAll)
        self.evictable = False
        #: (epoch, {key: (high watermark, log start)} before the last answer changed them)
        self._undo: tuple[int, dict[Key, tuple[int, int]]] | None = None

    def update(self, asked: dict[Key, tuple[int, int]], forgotten: Iterable[Key]) -> None:
        """Add or update ``asked`` (key -> (fetch offset, max bytes)), then drop
        ``forgotten`` (Kafka's ``FetchSession.update``)."""
        for key, (offset, max_bytes) in asked.items():
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = Cached(offset, max_bytes)
            else:
                cached.fetch_offset, cached.max_bytes = offset, max_bytes
        for key in forgotten:
            self.partitions.pop(key, None)

    def answered(self, results: dict[Key, tuple[bool, int, int, int]]) -> set[Key]:
        """The keys to answer of an incremental fetch, from ``results``: key -> (has
        records, error code, high watermark, log start); records what the client is now
        told, and moves the partitions with records to the end of the fetch order."""
        keep, before = set(), {}
        for key, (has_records, code, hwm, start) in results.items():
            cached = self.partitions.get(key)
            if cached is None:
                continue
            old = (cached.high_watermark, cached.log_start_offset)
            must = has_records or code != 0 or hwm != old[0] or start != old[1]
            if code != 0:
                hwm = -1  # told again once the error is gone (Kafka's rule)
            if (hwm, start) != old:
                before[key] = old
                cached.high_watermark, cached.log_start_offset = hwm, start
            if must:
                keep.add(key)
            if has_records:  # to the end: the others are read first next time
                self.partitions[key] = self.partitions.pop(key)
        self._undo = (self.epoch, before)
        return keep

    def undo(self, epoch: int) -> None:
        """Forget what the answer made at ``epoch`` told (it was withheld: throttled)."""
        if self._undo is not None and self._undo[0] == epoch:
            for key, (hwm, start) in self._undo[1].items():
                cached = self.partitions.get(key)
                if cached is not None:
                    cached.high_watermark, cached.log_start_offset = hwm, start
        self._undo = None


@dataclasses.dataclass
class Context:
    """How one Fetch is served: ``error`` (a session error: answer it, nothing else), or
    the partitions to fetch (key -> (fetch offset, max bytes), in order), the session
    (None: sessionless) and whether it is ``incremental`` (else a full fetch, after
    which :meth:`FetchSessionCache.create` may make a session)."""

    error: int = 0
    fetch: dict[Key, tuple[int, int]] = dataclasses.field(default_factory=dict)
    session: FetchSession | None = None
    incremental: bool = False
    #: the session's epoch this request moved it to (checked again at the answer)
    epoch: int = 0
    #: a full fetch that may make a session (epoch 0, Fetch v7+)
    may_create: bool = False


class FetchSessionCache:
    """At most ``slots`` sessions of one gateway (module doc). ``clock`` gives
    milliseconds (a parameter so a test can drive it). With a Prometheus ``registry``,
    Kafka's metrics: ``sparklog_gateway_kafka_fetch_sessions`` (NumIncrementalFetchSessions),
    ``..._fetch_session_partitions`` (NumIncrementalFetchPartitionsCached) and
    ``..._fetch_session_evictions_total`` (IncrementalFetchSessionEvictionsPerSec's count)."""

    def __init__(self, slots: int, eviction_ms: int = EVICTION_MS,
                 clock: Callable[[], float] = lambda: time.monotonic() * 1000,
                 registry: Any = None):
        self.slots, self.eviction_ms, self.clock = slots, eviction_ms, clock
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self._evicted = None
        if registry is not None:
            from prometheus_client import Counter, Gauge

            Gauge("sparklog_gateway_kafka_fetch_sessions", "Kafka fetch sessions held (KIP-227)",
                  registry=registry).set_function(lambda: len(self.sessions))
            Gauge("sparklog_gateway_kafka_fetch_session_partitions",
                  "partitions cached in Kafka fetch sessions",
                  registry=registry).set_function(self.partitions_cached)
            self._evicted = Counter("sparklog_gateway_kafka_fetch_session_evictions",
                                    "Kafka fetch sessions evicted for a new one",
                                    registry=registry)

    def __len__(self) -> int:
        return len(self.sessions)

    def partitions_cached(self) -> int:
        return sum(s.counted for s in self.sessions.values())

    def context(self, version: int, session_id: int, epoch: int,
                asked: dict[Key, tuple[int, int]], forgotten: list[Key]) -> Context:
        """The context of one Fetch (Kafka's ``FetchManager.newContext``): ``asked``
        (key -> (fetch offset, max bytes), request order), ``forgotten`` its
        ``forgotten_topics_data``."""
        if version < 7:
            return Context(fetch=asked)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # full: the session named is closed
            if session_id != NO_SESSION:
                self.sessions.pop(session_id, None)
            return Context(fetch=asked, may_create=epoch == INITIAL_EPOCH)
        session = self.sessions.get(session_id)
        if session is None:
            return Context(error=FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return Context(error=INVALID_FETCH_SESSION_EPOCH)
        if session.uses_ids != (version >= 13):
            return Context(error=FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(asked, forgotten)
        if len(session.partitions) > MAX_PARTITIONS:
            self.sessions.pop(session.id, None)
            return Context(error=FETCH_SESSION_ID_NOT_FOUND)
        if not session.partitions:
            self.sessions.pop(session.id, None)
            return Context(fetch=asked)
        self._touch(session)
        session.epoch = next_epoch(session.epoch)
        return Context(fetch={k: (c.fetch_offset, c.max_bytes)
                              for k, c in session.partitions.items()},
                       session=session, incremental=True, epoch=session.epoch)

    def current(self, ctx: Context) -> bool:
        """Whether an incremental context's session is still at the epoch its request
        moved it to (a request of the same session and epoch raced it: Kafka answers
        the later one ``INVALID_FETCH_SESSION_EPOCH``)."""
        s = ctx.session
        return s is not None and self.sessions.get(s.id) is s and s.epoch == ctx.epoch

    def create(self, uses_ids: bool, told: dict[Key, tuple[int, int, int, int]]) -> int:
        """A new session after a full fetch: ``told`` is key -> (fetch offset, max bytes,
        high watermark, log start) as answered. Its id, or 0 when no slot could be had."""
        now = self.clock()
        if not told or self.slots <= 0:
            return NO_SESSION
        if len(self.sessions) >= self.slots and not self._evict(len(told), now):
            return NO_SESSION
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self.sessions:
            session_id = secrets.randbelow(_MAX_INT32) + 1
        partitions = {k: Cached(off, mb, hwm, start)
                      for k, (off, mb, hwm, start) in told.items()}
        self.sessions[session_id] = FetchSession(session_id, uses_ids, partitions, now)
        return session_id

    def _touch(self, session: FetchSession) -> None:
        session.last_used_ms = now = self.clock()
        session.counted = len(session.partitions)
        session.evictable = now - session.created_ms > self.eviction_ms

    def _evict(self, size: int, now: float) -> bool:
        """Kafka's ``tryEvict`` for an unprivileged session of ``size`` partitions."""
        if not self.sessions:
            return False
        stale = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stale.last_used_ms > self.eviction_ms:
            victim = stale
        else:
            old = [s for s in self.sessions.values() if s.evictable]
            if not old:
                return False
            victim = min(old, key=lambda s: (s.counted, s.id))
            if size <= victim.counted:  # Kafka: (false, size, 0) < (false, counted, id)
                return False
        del self.sessions[victim.id]
        self.evictions += 1
        if self._evicted is not None:
            self._evicted.inc()
        return True
