"""uvicorn's httptools protocol with the gateway's connection limits.

uvicorn bounds how long a keep-alive connection may sit idle *between*
requests, but nothing bounds how long a client may take to *send* one: a
connection that sends half a request line, or headers without their end, or
part of a declared body, and then nothing, was held forever (a "slowloris"), and
enough of them exhaust the process. :class:`GatewayHttpProtocol` adds:

``request.read.timeout.ms``
    A request must arrive whole, headers and body, within this long of its
    first byte (or of the connection's start, for the first request). It is a
    total, not an idle timeout, as Node's ``requestTimeout``: a client trickling
    a byte a second would reset an idle timer forever. When it fires the client
    is answered 408 (RequestTimeout, error_code 40801) if nothing else is being
    answered on the connection, and the connection is closed. The timer stops
    with the request's last byte: time the app spends answering is not counted.
    A request whose answer starts while its body is still arriving is a duplex
    stream (REST Proxy v3's streamed produce, ``v3_stream``): when the timer
    fires on one, the bound becomes the stream's silence instead, re-armed by each
    piece of body, and the connection is closed (no 408: an answer is under way)
    after this long without a byte.
``connections.max.idle.ms``
    uvicorn's keep-alive timeout (``timeout_keep_alive``, set by ``server``),
    armed once a response is sent. Also armed when a request ends after its
    answer (a 413 sent before the body was read): uvicorn's own timer was
    cancelled by the rest of that body arriving, leaving the connection untimed.
``max.connections``
    A connection that finds this many already open is answered 503
    (TooManyConnections, error_code 50304) and closed. The answer goes out once
    its request's headers are in, as uvicorn's ``limit_concurrency`` does, so the
    client reads a 503 rather than a reset; the read timeout bounds how long a
    refused client may take to send them.

On a TLS connection the verified client certificate's subject is read once, when the
connection is made, and every request's ASGI scope carries it as
``scope["sparklog.peer_subject"]``: (attribute, value) pairs, most specific first
(``(("CN", "alice"), ("O", "acme"))``, ``ingest_gateway.security.tls.peer_subject``),
or None on a plain connection or without a verified certificate.

Pipelined requests are served as uvicorn serves them; a pipelined request that
stalls while an earlier one is answered is closed without a 408 (no answer can be
slipped in before the earlier one's).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from conf.errors import SparklogError
from ingest_gateway.errors import BadRequest, RequestTimeout, TooManyConnections
from ingest_gateway.http.errors import error_body, status_of
from ingest_gateway.security.tls import PEER_SUBJECT, peer_subject


class GatewayHttpProtocol(HttpToolsProtocol):
    """One connection, with the limits of the module doc. Configure a subclass with
    :func:`protocol_class`; uvicorn makes one instance per connection."""

    read_timeout_ms: int = 30_000
    max_connections: int = 1024
    #: the gateway's GatewayMetrics, counting the answers given here (None: not counted)
    metrics: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_timer: asyncio.TimerHandle | None = None
        self._in_body = False  # headers in, body not yet: an app may be waiting for it
        self._duplex = False  # answering while the body arrives: the timer bounds silence
        self._peer_subject: tuple[tuple[str, str], ...] | None = None

    # -- connection -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # once per connection (the handshake is over by now): a request pays a dict store
        self._peer_subject = peer_subject(transport)
        super().connection_made(HeadHoldingTransport(transport, self.loop))  # type: ignore[arg-type]
        open_now = len(self.connections)  # this one included
        if open_now > self.max_connections:
            refusal = TooManyConnections(open_now, self.max_connections)
            self.app = lambda scope, receive, send: self._answer(send, refusal)
        self._arm_read_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read_timer()
        if isinstance(self.transport, HeadHoldingTransport):
            self.transport.closed()
        super().connection_lost(exc)

    # -- a request's life -------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[PEER_SUBJECT] = self._peer_subject  # type: ignore[literal-required]
        # A new request ends the idle time; uvicorn cancels its keep-alive timer only
        # per read, which may hold the end of one request and the start of the next.
        self._unset_keepalive_if_required()
        self._duplex = False
        self._arm_read_timer()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._in_body = True

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        if self._duplex:  # a duplex stream: silence is what is bounded
            self._arm_read_timer()

    def on_message_complete(self) -> None:
        self._cancel_read_timer()
        self._in_body = self._duplex = False
        super().on_message_complete()
        cycle = self.cycle
        if cycle is not None and cycle.response_complete and not self.pipeline \
                and not self.transport.is_closing():
            self._unset_keepalive_if_required()  # answered early: idle from now on
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler)

    # -- the read timer ------------------------------------------------------------------
    def _arm_read_timer(self) -> None:
        self._cancel_read_timer()
        self._read_timer = self.loop.call_later(self.read_timeout_ms / 1000, self._read_timed_out)

    def _cancel_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if self._in_body and not self._duplex and cycle is not None \
                and cycle.response_started and not cycle.response_complete:
            self._duplex = True  # the app answers as the body arrives (module doc)
            self._arm_read_timer()
            return
        if not self._in_body:  # before or mid-headers: answer unless an earlier one is under way
            answer = cycle is None or cycle.response_complete
        else:  # self.cycle is this request's; answer unless answered already or queued
            answer = not cycle.response_started and not self.pipeline
            if answer:  # the app waits for this body: it reads a disconnect, its answer is dropped
                cycle.disconnected = True
                cycle.message_event.set()
        if answer:
            self.transport.write(self._raw_answer(RequestTimeout(self.read_timeout_ms)))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes its parser refuses (a request line or headers past
        the parser's size bound, a malformed request), as JSON like every other error."""
        self._cancel_read_timer()
        self.transport.write(self._raw_answer(BadRequest(
            f"the request is not valid HTTP/1.1 or its request line or headers are too "
            f"large ({msg.rstrip('.')})")))
        self.transport.close()

    # -- answers outside the app ----------------------------------------------------------
    def _error(self, exc: SparklogError) -> tuple[int, bytes]:
        """(status, JSON body) from the gateway's one error table, counted in its metrics."""
        status, body = status_of(exc)[0], error_body(exc)
        if self.metrics is not None:
            self.metrics.rejected(body["error"])
        return status, json.dumps(body, separators=(",", ":")).encode()

    def _raw_answer(self, exc: SparklogError) -> bytes:
        """A whole HTTP/1.1 response to ``exc`` that closes the connection."""
        status, body = self._error(exc)
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
                "connection: close\r\n\r\n")
        return head.encode("ascii") + body

    async def _answer(self, send: Any, exc: SparklogError) -> None:
        """The ASGI app of a refused connection: ``exc`` as JSON, then close."""
        status, body = self._error(exc)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


class HeadHoldingTransport:
    """A connection's transport that holds a response head until the body's first write.

    uvicorn writes an answer's head and its body separately: two ``send()`` calls,
    two packets, and a client that wakes for the head and again for the body. A
    produce answer's body follows its head in the same turn of the event loop, so
    holding the head costs nothing and halves the writes of a small answer (a
    one-record request's round trip). A head whose body does not follow in the
    same turn (a streamed answer still computing) goes at the end of the turn;
    ``close`` sends what is held first. Everything else is the transport's own.

    Closing a TLS connection sends close_notify and then waits for the client's,
    which a client idling in its keep-alive pool never sends: the connection stayed
    open (and counted against ``max.connections``) for the event loop's 30 s
    ssl_shutdown_timeout, and a graceful shutdown waited those 30 s for it. HTTP/1.1
    needs no answering close_notify (answers are framed), so a TLS connection not
    gone :data:`TLS_CLOSE_GRACE_S` after ``close`` is aborted.
    """

    __slots__ = ("_transport", "_loop", "_held", "_abort", "_tls", "_gone")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport, self._loop = transport, loop
        self._held: bytes | None = None
        self._abort: asyncio.TimerHandle | None = None
        # asked now: asyncio's TLS transport cannot answer once the connection is lost
        self._tls = transport.get_extra_info("ssl_object") is not None
        self._gone = False

    def write(self, data: bytes) -> None:
        if self._held is not None:
            # one vectored write, without copying a large body behind the head
            held, self._held = self._held, None
            self._transport.writelines((held, data))
            return
        if data.startswith(b"HTTP/1.1 ") and data.endswith(b"\r\n\r\n"):
            self._held = data
            self._loop.call_soon(self._release)
            return
        self._transport.write(data)

    def _release(self) -> None:
        if self._held is not None:
            data, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._release()
        self._transport.close()
        if self._tls and self._abort is None and not self._gone:
            self._abort = self._loop.call_later(TLS_CLOSE_GRACE_S, self._transport.abort)

    def closed(self) -> None:
        """The connection is gone: no abort is due."""
        self._gone = True
        if self._abort is not None:
            self._abort.cancel()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


#: how long a closed TLS connection may wait for the client's close_notify
TLS_CLOSE_GRACE_S = 1.0
_REASONS = {400: "Bad Request", 408: "Request Timeout", 503: "Service Unavailable"}


def protocol_class(*, read_timeout_ms: int, max_connections: int,
                   metrics: Any = None) -> type[GatewayHttpProtocol]:
    """A :class:`GatewayHttpProtocol` subclass with these limits, for
    ``uvicorn.Config(http=...)`` (uvicorn instantiates the class it is given); the
    answers it gives outside the app are counted in ``metrics`` (the gateway's
    ``GatewayMetrics``; None: not counted)."""
    return type("GatewayHttpProtocol", (GatewayHttpProtocol,),
                {"read_timeout_ms": read_timeout_ms, "max_connections": max_connections,
                 "metrics": metrics})
