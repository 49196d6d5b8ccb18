"""The clients' one HTTP session to a gateway: a keep-alive pool and one retry policy.

The producer and the consumer both talk to the gateway through a :class:`Session`
(urllib3, ``retries=False``: urllib3 never retries behind our back). A request
that may be repeated is retried under the session's :class:`RetryPolicy`: the
backoff doubles from ``backoff_s`` up to ``max_backoff_s``, a ``Retry-After``
header lengthens one wait (to at most ``max_retry_after_s``), and the retries
stop at the request's deadline. *Whether* an answer may be retried is the
caller's decision (the producer's depends on its idempotent sequences):
:data:`RETRIABLE_STATUS` and unreachable gateways are the common case.

The consumer's calls are single attempts (its heartbeats and long-polls are
repeated by the consumer's own loop, and a refused commit must be seen at once);
:meth:`Session.call` raises the gateway's error as a typed error instead.

``https://`` gateways and credentials: a :class:`ConnectionSecurity`
(``protocol.connection_security``: CA file, client certificate, Basic or bearer credentials,
sent on every request). A 401 or 403 is raised as NotAuthenticated / NotAuthorized.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import urllib3

from ingest_gateway.protocol.connection_security import ConnectionSecurity, auth_error
from ingest_gateway.errors import GatewayError

#: answers worth trying again unchanged: back-pressure and the gateway's own failures
RETRIABLE_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """How a request is retried: doubling backoff, Retry-After honoured up to a bound."""

    backoff_s: float = 0.05
    max_backoff_s: float = 1.0
    max_retry_after_s: float = 5.0

    def start(self, deadline: float) -> "Backoff":
        """The retries of one request that must end by ``deadline`` (time.monotonic)."""
        return Backoff(self, deadline)


class Backoff:
    """The waits between the attempts of one request (see :class:`RetryPolicy`)."""

    __slots__ = ("policy", "deadline", "delay")

    def __init__(self, policy: RetryPolicy, deadline: float):
        self.policy, self.deadline, self.delay = policy, deadline, policy.backoff_s

    def wait(self, retry_after: str | None = None) -> bool:
        """Sleep before the next attempt; False, without sleeping, if the next attempt
        would start past the deadline (give up)."""
        if time.monotonic() + self.delay > self.deadline:
            return False
        delay = self.delay
        if retry_after and retry_after.isdigit():
            delay = max(delay, min(float(retry_after), self.policy.max_retry_after_s))
        time.sleep(delay)
        self.delay = min(self.delay * 2, self.policy.max_backoff_s)
        return True


class Answer(NamedTuple):
    """One HTTP answer: status, body bytes, and the Retry-After header if any."""

    status: int
    data: bytes
    retry_after: str | None


def base_url(url: str) -> str:
    """``url`` as ``scheme://host[:port][/prefix]`` (``http://`` when no scheme is
    given); raises ValueError if it is not an http(s) URL."""
    full = url if "://" in url else f"http://{url}"
    parts = urlsplit(full)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"a gateway address must be an http(s) URL, not {url!r}")
    return full.rstrip("/")


#: request bodies up to this size go out in one write with the request's head
COALESCE_MAX_BYTES = 64 << 10


class OneWriteConnection(urllib3.connection.HTTPConnection):
    """urllib3's HTTP connection, sending a small body in the same write as the head.

    urllib3 writes the head, then each body chunk: two ``sendall`` calls, and the
    gateway wakes up twice to read one request. A write costs ~100 us on a loopback
    socket here, so a produce of 25 records and a consumer's fetch each paid ~0.1 ms
    for it (raw ``http.client``, which sends a bytes body with the head, was ~0.2 ms
    faster a round trip). Larger bodies keep urllib3's own chunking.
    """

    _coalesce = False
    _head: bytes | None = None

    def request(self, method: str, url: str, body: Any = None, headers: Any = None,
                **kw: Any) -> None:
        self._coalesce = isinstance(body, (bytes, memoryview)) and \
            len(body) <= COALESCE_MAX_BYTES and not kw.get("chunked")
        try:
            super().request(method, url, body, headers, **kw)
            if self._head is not None:  # no body written (an empty one): the head alone
                head, self._head = self._head, None
                super().send(head)
        finally:
            self._coalesce, self._head = False, None

    def send(self, data: Any) -> None:
        if self._coalesce:
            if self._head is None:
                self._head = bytes(data)  # http.client writes the whole head first
                return
            data, self._head, self._coalesce = self._head + bytes(data), None, False
        super().send(data)


class OneWriteHTTPSConnection(OneWriteConnection, urllib3.connection.HTTPSConnection):
    """:class:`OneWriteConnection` over TLS: a small request is one TLS record and one
    write, not two of each."""


class Session:
    """One gateway's keep-alive pool (thread-safe) and its retry policy.

    ``max_connections`` bounds the pool; with ``block=True`` a caller waits for a
    free connection instead of opening more (the producer's ``max_in_flight``).
    ``security``: TLS files and credentials (``protocol.connection_security``), or the same
    as kafka-python's keyword arguments (``ssl_cafile=``, ``sasl_plain_username=``,
    ...); ValueError for a bad combination or a missing file.
    """

    def __init__(self, url: str, *, max_connections: int = 8, block: bool = False,
                 connect_timeout_s: float = 5.0, read_timeout_s: float = 30.0,
                 retry: RetryPolicy = RetryPolicy(),
                 security: ConnectionSecurity | None = None, **security_kwargs: Any):
        self.base = base_url(url)
        self.prefix = urlsplit(self.base).path
        self.retry = retry
        self.security = ConnectionSecurity.of(security, **security_kwargs)
        scheme = urlsplit(self.base).scheme
        self.pool = urllib3.connection_from_url(
            self.base, maxsize=max_connections, block=block, retries=False,
            timeout=urllib3.Timeout(connect=connect_timeout_s, read=read_timeout_s),
            **(self.security.pool_kwargs(scheme) if self.security else {}))
        self.pool.ConnectionCls = OneWriteConnection if self.pool.scheme == "http" \
            else OneWriteHTTPSConnection

    def send(self, method: str, path: str, body: Any = None,
             headers: Mapping[str, str] | None = None, *, timeout_s: float | None = None,
             ) -> Answer:
        """One attempt; raises OSError (or urllib3's HTTPError) if no answer came (an
        https gateway whose certificate does not verify is one: urllib3's SSLError)."""
        if self.security is not None:
            auth = self.security.authorization()
            if auth is not None:
                headers = {**(headers or {}), "Authorization": auth}
        timeout = urllib3.Timeout(connect=5.0, read=timeout_s) if timeout_s is not None \
            else urllib3.util.Timeout.DEFAULT_TIMEOUT
        r = self.pool.urlopen(method, self.prefix + path, body=body, headers=headers,
                              retries=False, timeout=timeout)
        return Answer(r.status, r.data, r.headers.get("Retry-After"))

    def call(self, method: str, path: str, body: Any = None, *, timeout: float = 30.0,
             raw: bool = False,
             errors: Mapping[str, Callable[[dict[str, Any]], BaseException]] | None = None,
             ) -> Any:
        """One JSON request: the answer's JSON (None for 204), or its bytes with ``raw``.

        An error answer raises ``errors[name](doc)`` for its ``error`` name, a 401 or
        403 NotAuthenticated or NotAuthorized, else GatewayError; no answer raises OSError.
        """
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            r = self.send(method, path, data, headers, timeout_s=timeout)
        except urllib3.exceptions.HTTPError as e:
            raise OSError(f"gateway {self.base} unreachable: {e}") from None
        if r.status >= 400:
            try:
                doc = json.loads(r.data)
            except ValueError:
                doc = {"error": "http_error", "message": r.data[:200].decode("utf-8", "replace")}
            code = doc.get("error", "http_error")
            denied = auth_error(r.status, doc)
            if denied is not None:
                raise denied
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
        self.pool.close()
