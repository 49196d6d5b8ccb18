"""The ASGI layer in front of every route: browser safety, who the client is, what it
may do, and how fast (README "Security").

In order, for each HTTP request:

1. **Browser-safe bodies** (always on). A page on another site can make a browser
   send a "simple" request without asking first (no CORS preflight): a body typed
   ``text/plain``, ``application/x-www-form-urlencoded`` or ``multipart/form-data``, or
   a body with no type at all. No API route takes those, so they are refused with 415
   before any route reads them. The console's own form (``/ui/.../produce``) is the one
   exception; it checks the browser's ``Sec-Fetch-Site``/``Origin`` itself.
2. **Authentication** (``authentication.method``): the principal, ``User:<name>``, or
   401 with ``WWW-Authenticate``. Without a method every client is ``User:ANONYMOUS``.
   ``/healthz`` and ``/readyz`` need none (probes carry no credentials).
3. **Authorization** (``authorizer.enabled``): the operation Kafka would check for the
   route (``ingest_gateway.security.route_acls``), or 403. What a body names is checked
   by the route itself (``ingest_gateway.http.access``).
4. **Quotas** (with authentication or the authorizer on): produce bytes and fetch bytes
   are recorded per principal; over its ``producer_byte_rate``/``consumer_byte_rate`` a
   principal's answer is held back for the throttle time, as Kafka holds the response
   of a throttled client, and says so in ``X-Sparklog-Throttle-Time-Ms``.

The principal is left in the scope as ``sparklog.principal`` for the routes. CORS
(``gateway.access.control.allow.*``, off by default) is Starlette's middleware outside
this layer, so a browser's preflight needs no credentials.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import parse_qs

from conf.errors import SparklogError
from ingest_gateway.errors import NotAuthorized, UnsupportedContentType
from ingest_gateway.http.produce import send_refusal
from ingest_gateway.security.authentication import host_of, principal_of  # host_of: re-exported
from ingest_gateway.security.route_acls import (AUTHENTICATED, CLUSTER, IN_HANDLER, OPEN, Need,
                                                rule_for)

#: the body types a cross-site page can send without a preflight (the Fetch standard's
#: CORS-safelisted Content-Type values)
SIMPLE_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded",
                          "multipart/form-data"})
#: what a route that takes JSON may be sent instead, named in the 415
API_TYPES = ("application/json", "application/vnd.kafka.json.v2+json",
             "application/vnd.kafka.binary.v2+json", "application/vnd.apache.arrow.stream")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
THROTTLE_HEADER = b"x-sparklog-throttle-time-ms"


class Guard:
    """Wraps the gateway app (``state`` is the app's): see the module docstring.
    ``authenticator``, ``authorizer`` and ``quotas`` may each be None (off)."""

    def __init__(self, app: Any, *, authenticator: Any = None, authorizer: Any = None,
                 quotas: Any = None):
        self.app = app
        self.state = app.state
        self.authenticator, self.authorizer, self.quotas = authenticator, authorizer, quotas
        # the Schema Registry's routes check their subjects themselves (route_acls)
        self.registry = app.state.settings.gateway.schema_registry_path.rstrip("/")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            self._check_body_type(scope)
            if self.authenticator is not None or self.authorizer is not None:
                rule, params = rule_for(scope["method"], scope["path"], registry=self.registry)
                if rule is not OPEN and self.authenticator is not None:
                    # argon2 (first login of a password) off the event loop
                    await self.authenticator.authenticate_async(scope)
                if self.authorizer is not None and rule not in (OPEN, AUTHENTICATED):
                    self._authorize(scope, rule, params)
                    self._authorize_transactional(scope)
                    await self._check_auto_create(scope, params)
        except SparklogError as exc:
            await send_refusal(send, self.state, exc)
            return
        kind = _quota_kind(scope["method"], scope["path"]) if self.quotas is not None else None
        if kind is None:
            await self.app(scope, receive, send)
        else:
            await self._throttled(kind, scope, receive, send)

    def _check_body_type(self, scope: Any) -> None:
        """Raise UnsupportedContentType for a body a cross-site page could have sent."""
        if scope["method"] not in _BODY_METHODS or scope["path"].startswith("/ui/"):
            return
        media, has_body = None, False
        for name, value in scope["headers"]:
            if name == b"content-type":
                media = value.split(b";", 1)[0].strip().lower().decode("latin-1")
            elif name == b"content-length":
                has_body = value.strip() not in (b"0", b"")
            elif name == b"transfer-encoding":
                has_body = True
        if media in SIMPLE_TYPES or (media is None and has_body):
            raise UnsupportedContentType(media or "(none)", API_TYPES)

    def _authorize(self, scope: Any, rule: Any, params: dict[str, str]) -> None:
        principal, host = principal_of(scope), host_of(scope)
        for need in rule:
            if need is IN_HANDLER:
                continue
            assert isinstance(need, Need)
            name = need.name(params)
            if not self.authorizer.authorize(principal, host, need.operation,
                                             need.resource_type, name):
                raise NotAuthorized(principal, need.operation, need.resource_type, name)

    def _authorize_transactional(self, scope: Any) -> None:
        """A transactional produce (``?transactional_id=``) needs Write on that
        TransactionalId too, as Kafka's Produce does."""
        raw = scope.get("query_string") or b""
        if b"transactional_id=" not in raw or \
                _quota_kind(scope["method"], scope["path"]) != "produce":
            return
        for tid in parse_qs(raw.decode("latin-1")).get("transactional_id", ()):
            principal, host = principal_of(scope), host_of(scope)
            if not self.authorizer.authorize(principal, host, "Write", "TransactionalId", tid):
                raise NotAuthorized(principal, "Write", "TransactionalId", tid)

    async def _check_auto_create(self, scope: Any, params: dict[str, str]) -> None:
        """A produce to a topic that does not exist creates it (auto.create.topics.enable)
        only for a principal with Create on the cluster or the topic, as Kafka's
        auto-creation; for another it answers 404 unknown_topic."""
        topic = params.get("topic")
        settings = self.state.settings.gateway
        if topic is None or not settings.auto_create_topics_enable or \
                _quota_kind(scope["method"], scope["path"]) != "produce":
            return
        principal, host = principal_of(scope), host_of(scope)
        if self.authorizer.authorize(principal, host, "Create", "Cluster", CLUSTER) or \
                self.authorizer.authorize(principal, host, "Create", "Topic", topic):
            return
        await self.state.batcher.topics.get(topic, create=False)  # UnknownTopic if missing

    async def _throttled(self, kind: str, scope: Any, receive: Any, send: Any) -> None:
        """Run the route counting the bytes of ``kind`` (the request's body for produce,
        the answer's for fetch); hold the answer back for the throttle time."""
        principal = principal_of(scope)
        received = 0

        async def counting_receive() -> Any:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            return message

        async def throttling_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                size = received if kind == "produce" else _content_length(message)
                throttle_ms = self.quotas.record(principal, kind, size, time.monotonic())
                if throttle_ms > 0:
                    await asyncio.sleep(throttle_ms / 1000)
                    message = {**message, "headers": [
                        *message.get("headers", ()),
                        (THROTTLE_HEADER, str(int(throttle_ms)).encode())]}
            await send(message)

        await self.app(scope, counting_receive, throttling_send)


def _content_length(message: Any) -> int:
    for name, value in message.get("headers", ()):
        if name.lower() == b"content-length" and value.isdigit():
            return int(value)
    return 0


def _quota_kind(method: str, path: str) -> str | None:
    """"produce", "fetch" or None: which byte rate a request counts against."""
    if method == "POST" and (path.startswith("/topics/") or path.endswith(
            ("/records", "/records:batch"))):
        return "produce"
    if (method == "POST" and path == "/fetch") or (method == "GET" and path.endswith(
            ("/messages", "/records"))):
        return "fetch"
    return None
