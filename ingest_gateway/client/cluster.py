"""Which gateway to ask: the clients' view of the cluster (Kafka's client ``Metadata``).

Gateways of a broker application split the work: each partition has one
*leader* gateway that accepts its produce requests, each consumer group one
*coordinator* gateway. A :class:`ClusterRouter` starts from Kafka's bootstrap
list (``"host:port,host2:port"`` or a list of URLs, ``http://`` optional), asks
any gateway it can reach for ``GET /metadata?topics=..&groups=..`` and keeps
the answer:

* ``leader(topic, partition)`` / ``coordinator(group)``: the :class:`Session`
  of the gateway to send to (one dict lookup while the metadata is fresh), or
  None while no gateway is known to lead it (ask again after a backoff);
* ``invalidate(...)``: after a NOT_LEADER / NOT_COORDINATOR answer or a
  connection failure. A 503 body that names the new leader is used at once
  (no metadata round trip); otherwise the entry is dropped and the next lookup
  asks for metadata again, at most once per ``retry_backoff_ms``. Metadata older
  than ``metadata_max_age_ms`` (Kafka's default 300000) is asked again too.

Resolution of an address in the metadata or a 503 body: ``{"url": U}`` is the
gateway at U; ``{"slot": null, "url": null}`` is *the gateway that answered* (a
standalone gateway leads everything); ``{"slot": N, "url": null}`` or ``null``
is unknown for now. A standalone gateway given as the only bootstrap server is
therefore asked for metadata once and then used for everything, as before.

Metadata is asked from the last gateway that answered first, then the others
known (the bootstrap list and every live gateway the metadata named), so a
client whose bootstrap gateway died still finds the rest. One
:class:`Session` per gateway URL is kept and closed by :meth:`close`.

A 401 or 403 answer (NotAuthenticated, NotAuthorized) is raised at once: no other
gateway is tried (they share the credentials), and no backoff hides it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Self, TypeVar
from urllib.parse import quote

import urllib3

from ingest_gateway.protocol.connection_security import AUTH_ERRORS, ConnectionSecurity
from ingest_gateway.protocol.session import Session, base_url
from ingest_gateway.errors import GatewayError
from log_layout.errors import UnknownTopic

#: Kafka's metadata.max.age.ms default: metadata is asked again at least this often
METADATA_MAX_AGE_MS = 300_000
#: a metadata answer comes from the gateway's memory (and its topic cache): one that
#: takes longer is frozen or overloaded, and another gateway is asked instead, so a
#: frozen gateway holds the lookups (which wait for a refresh) seconds, not a request timeout
METADATA_TIMEOUT_S = 5.0
#: the metadata query names at most this many characters of topics and groups (a
#: request line the gateway's HTTP parser takes; the gateway itself takes 1000 names)
MAX_QUERY_CHARS = 6000

#: refusals (a produce answer's or a fetched partition's ``error``) meaning "another
#: gateway leads this partition now": ask where, then retry there
NOT_LEADER_ERRORS = frozenset({"not_leader", "fenced_leader_epoch"})

T = TypeVar("T")
Endpoint = dict[str, Any] | None


def parse_bootstrap(servers: str | Iterable[str]) -> list[str]:
    """Kafka's ``bootstrap.servers``: a comma-separated string or a list of addresses,
    each ``host:port`` or an http(s) URL, as base URLs without duplicates.

    Raises ValueError naming the entry that is no http(s) address, or for a list
    that names no gateway at all; TypeError for an entry that is not a string.
    """
    if isinstance(servers, str):
        items = servers.split(",")
    else:
        try:
            items = list(servers)
        except TypeError:
            raise ValueError(f"bootstrap_servers must be a comma-separated string or a "
                             f"list of gateway URLs, not {servers!r}") from None
    urls: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"bootstrap_servers entries must be strings, not {item!r}")
        item = item.strip()
        if not item:
            continue  # "a:1,,b:2" and a trailing comma: Kafka skips empty entries too
        try:
            url = base_url(item)
        except ValueError:
            raise ValueError(f"bootstrap_servers entry {item!r} is not an http(s) gateway "
                             f"address (HOST:PORT or http://HOST:PORT)") from None
        if url not in urls:
            urls.append(url)
    if not urls:
        raise ValueError(f"bootstrap_servers names no gateway: {servers!r}")
    return urls


class ClusterRouter:
    """Leaders and coordinators as the gateways last said (see the module docstring).

    Thread-safe: the lookups read plain dicts; a refresh runs under one lock, so
    threads that all find the same entry stale cause one metadata request.
    ``security`` (TLS files, credentials) is given to the default ``session_factory``.
    """

    def __init__(self, bootstrap_servers: str | Iterable[str], *,
                 session_factory: Callable[[str], Session] | None = None,
                 retry_backoff_ms: float = 100, metadata_max_age_ms: float = METADATA_MAX_AGE_MS,
                 request_timeout_s: float = 30.0, security: ConnectionSecurity | None = None):
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self._new_session = session_factory or (lambda url: Session(url, security=security))
        self.backoff_s = retry_backoff_ms / 1000
        self.max_age_s = metadata_max_age_ms / 1000
        self.request_timeout_s = request_timeout_s
        self._lock = threading.RLock()
        self._sessions: dict[str, Session] = {}
        #: gateways to ask for metadata, the last one that answered first
        self._known: list[str] = list(self.bootstrap)
        self._leaders: dict[tuple[str, int], Session] = {}
        self._coordinators: dict[str, Session] = {}
        #: topics and groups asked about so far: every refresh asks about all of them
        self._topics: dict[str, int | None] = {}  # topic -> partition count (None: unknown)
        self._groups: set[str] = set()
        self._expires = 0.0  # monotonic time after which the cached entries are stale
        self._refreshed = float("-inf")  # monotonic time of the last metadata request
        #: the gateway that answered the last metadata request
        self._answered: Session | None = None
        #: why the last metadata request failed (None after one succeeded)
        self.last_error: OSError | None = None
        #: some gateway answered once: a failure since is an outage, not a wrong address
        self.reached = False
        #: the last metadata answer's generation (None: standalone or no assignment yet)
        self.generation: int | None = None
        self.cluster_id: str | None = None

    # -- sessions ----------------------------------------------------------------------
    def session(self, url: str) -> Session:
        """The one Session to the gateway at ``url`` (made on first use)."""
        key = base_url(url)
        s = self._sessions.get(key)
        if s is None:
            with self._lock:
                s = self._sessions.get(key)
                if s is None:
                    s = self._sessions[key] = self._new_session(key)
        return s

    def gateways(self) -> list[str]:
        """Every gateway URL known (bootstrap and discovered), the last that answered first."""
        return list(self._known)

    def any_gateway(self, fn: Callable[[Session], T]) -> T:
        """``fn(session)`` against each known gateway in turn until one is reached.

        ``fn`` raising OSError or urllib3's HTTPError means "not reached": the next
        gateway is tried. Raises the last such error if none was reached, and a 401/403
        (NotAuthenticated, NotAuthorized) at once.
        """
        error: BaseException | None = None
        for url in self.gateways():
            try:
                result = fn(self.session(url))
            except AUTH_ERRORS:
                raise  # NotAuthorized is a PermissionError, an OSError: not "unreachable"
            except (OSError, urllib3.exceptions.HTTPError) as e:
                error = e
                self._demote(url)
                continue
            self._promote(url)
            self.reached = True
            return result
        raise OSError(f"no gateway of {self.gateways()} could be reached: {error}") from error

    def _promote(self, url: str) -> None:
        if self._known and self._known[0] != url:
            with self._lock:
                if url in self._known:
                    self._known.remove(url)
                    self._known.insert(0, url)

    def _demote(self, url: str) -> None:
        with self._lock:
            if url in self._known and self._known[-1] != url:
                self._known.remove(url)
                self._known.append(url)

    # -- lookups -----------------------------------------------------------------------
    def leader(self, topic: str, partition: int) -> Session | None:
        """The gateway leading ``topic``-``partition``; None if none is known yet (a
        metadata request that failed counts as none known: retry after a backoff).
        A partition the metadata does not name goes to the gateway that answered it."""
        s = self._leaders.get((topic, partition))
        if s is not None and time.monotonic() < self._expires:
            return s  # the hot path: one dict lookup and a clock read
        with self._lock:
            self._maybe_refresh(new=topic not in self._topics, topic=topic)
            s = self._leaders.get((topic, partition))
            n = self._topics.get(topic)
            if s is None and (n is None or partition >= n):
                # Not in the metadata (no such topic or partition, or not yet): let the
                # gateway that answered say so (404), create it (auto-create), or name
                # its leader, as a gateway did before there was metadata.
                return self._answered
            return s

    def coordinator(self, group: str) -> Session | None:
        """The gateway coordinating ``group``; None if none is known yet."""
        s = self._coordinators.get(group)
        if s is not None and time.monotonic() < self._expires:
            return s
        with self._lock:
            self._maybe_refresh(new=group not in self._groups, group=group)
            return self._coordinators.get(group)

    def partition_count(self, topic: str) -> int:
        """The topic's partition count from the metadata (asked if not known or stale).

        Raises UnknownTopic, OSError if no gateway answered, GatewayError for an error
        answer.
        """
        with self._lock:
            if self._topics.get(topic) is None or time.monotonic() >= self._expires:
                self.refresh(topics=[topic])
            n = self._topics.get(topic)
        if n is None:
            raise UnknownTopic(topic)
        return n

    def _maybe_refresh(self, *, new: bool, topic: str | None = None,
                       group: str | None = None) -> None:
        """Under the lock: ask for metadata unless another thread did within the backoff
        (a name never asked about is always asked). A failure leaves the cache as it was."""
        if not new and time.monotonic() - self._refreshed < self.backoff_s:
            return
        try:
            self.refresh(topics=[topic] if topic else (), groups=[group] if group else ())
        except AUTH_ERRORS:
            raise  # refused credentials: no backoff makes them good
        except OSError as e:
            self.last_error = e  # no gateway answered: the caller finds no entry, backs off
        except GatewayError:
            pass  # a gateway answered, badly (its store is down?): the same, for now

    # -- invalidation --------------------------------------------------------------------
    def invalidate(self, *, topic: str | None = None, partition: int | None = None,
                   group: str | None = None, hint: Endpoint = None,
                   asked: Session | None = None, failed: Session | None = None) -> bool:
        """Forget what a refusal or a failure proved wrong; True if ``hint`` named
        another gateway, which is used from now on (retry there at once).

        ``topic``/``partition`` after a NOT_LEADER answer, ``group`` after
        NOT_COORDINATOR, with ``hint`` the body's ``leader``/``coordinator`` and
        ``asked`` the gateway that refused. ``failed``: a gateway that could not be
        reached; everything it led is forgotten and it is asked for metadata last.
        Without a usable hint, the next lookup asks for metadata again.
        """
        with self._lock:
            if failed is not None:
                self._forget(failed)
                self._demote(failed.base)
            target = self._resolve(hint, None)
            moved = target is not None and target is not asked
            if topic is not None and partition is not None:
                if moved:
                    self._leaders[(topic, partition)] = target  # type: ignore[assignment]
                else:
                    self._leaders.pop((topic, partition), None)
            if group is not None:
                if moved:
                    self._coordinators[group] = target  # type: ignore[assignment]
                else:
                    self._coordinators.pop(group, None)
            return moved

    def _forget(self, gone: Session) -> None:
        if self._answered is gone:
            self._answered = None
        for key in [k for k, s in self._leaders.items() if s is gone]:
            del self._leaders[key]
        for key in [k for k, s in self._coordinators.items() if s is gone]:
            del self._coordinators[key]

    # -- metadata ------------------------------------------------------------------------
    def refresh(self, topics: Iterable[str] = (), groups: Iterable[str] = ()) -> dict[str, Any]:
        """Ask any reachable gateway for the metadata of ``topics`` and ``groups`` and of
        every one asked about before; returns the answer.

        Raises OSError if no gateway answered, GatewayError for an error answer.
        """
        with self._lock:
            for t in topics:
                self._topics.setdefault(t, None)
            self._groups.update(groups)
            path = "/metadata" + self._query(list(topics), list(groups))
            self._refreshed = time.monotonic()
            timeout = min(self.request_timeout_s, METADATA_TIMEOUT_S)
            answered, doc = self.any_gateway(lambda s: (s, s.call("GET", path, timeout=timeout)))
            self._apply(answered, doc)
            self.last_error = None
            return doc

    def _query(self, topics: list[str], groups: list[str]) -> str:
        """``?topics=..&groups=..``: the names asked for now first, then every other one
        known, as many as fit MAX_QUERY_CHARS."""
        budget = MAX_QUERY_CHARS

        def fit(first: list[str], rest: Iterable[str]) -> list[str]:
            nonlocal budget
            out: list[str] = []
            for name in dict.fromkeys([*first, *rest]):
                if budget - len(name) - 1 < 0 and out:
                    break
                budget -= len(name) + 1
                out.append(name)
            return out

        ts, gs = fit(topics, self._topics), fit(groups, sorted(self._groups))
        parts = [f"topics={quote(','.join(ts), safe=',')}"] if ts else []
        parts += [f"groups={quote(','.join(gs), safe=',')}"] if gs else []
        return "?" + "&".join(parts) if parts else ""

    def _apply(self, answered: Session, doc: dict[str, Any]) -> None:
        """Under the lock: take a metadata answer from ``answered`` into the cache."""
        self._answered = answered
        self.generation, self.cluster_id = doc.get("generation"), doc.get("cluster_id")
        live = [g["url"] for g in doc.get("gateways") or () if g.get("url") and g.get("live")]
        for url in live:
            url = base_url(url)
            if url not in self._known:
                self._known.append(url)
        for t in doc.get("topics") or ():
            name = t["topic"]
            for key in [k for k in self._leaders if k[0] == name]:
                del self._leaders[key]
            if t.get("error"):
                self._topics[name] = None
                continue
            parts = t.get("partitions") or ()
            self._topics[name] = len(parts)
            for p in parts:
                s = self._resolve(p.get("leader"), answered)
                if s is not None:
                    self._leaders[(name, p["partition"])] = s
        for g in doc.get("groups") or ():
            s = self._resolve(g.get("coordinator"), answered)
            if s is None:
                self._coordinators.pop(g["group"], None)
            else:
                self._coordinators[g["group"]] = s
        self._expires = time.monotonic() + self.max_age_s

    def _resolve(self, endpoint: Endpoint, answered: Session | None) -> Session | None:
        """The Session an address names (see the module docstring); None if unknown."""
        if not isinstance(endpoint, dict):
            return None
        url = endpoint.get("url")
        if url:
            try:
                return self.session(url)
            except ValueError:
                return None  # a gateway advertising a malformed URL: as if unknown
        if endpoint.get("slot") is None:
            return answered  # standalone: the gateway that answered (None for a 503 hint)
        return None  # a slot with no gateway up

    def close(self) -> None:
        """Close every session (idempotent)."""
        with self._lock:
            for s in self._sessions.values():
                s.close()
            self._sessions.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
