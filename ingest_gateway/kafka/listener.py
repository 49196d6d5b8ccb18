"""The Kafka protocol listener: an asyncio TCP server beside the gateway's HTTP one.

Started beside the HTTP app (``runner.serve`` has ``server.lifecycle.running_gateway``
enter :func:`serving` once the gateway is built) when ``gateway.kafka.listeners`` names
an address (``PLAINTEXT://127.0.0.1:9092``, Kafka's syntax; conf/defaults.toml), on the same
event loop and the same ``server.gateway.Gateway`` as the HTTP routes: one batcher,
consumer hub, topic admin and cluster membership for both. Its scheme (PLAINTEXT,
SSL, SASL_PLAINTEXT, SASL_SSL), the SASL login and the ACL checks are
``kafka.security`` and ``kafka.sasl``'s: a Kafka client never bypasses the login or
the ACLs the HTTP routes enforce.

Per connection, a reader task reads frames (4-byte size; a size over
``gateway.socket.request.max.bytes`` (Kafka's default 100 MiB) or below a header's
closes the connection, as Kafka does) and starts one handler task per request at
once; a writer task sends the answers strictly in request order. So pipelined
requests (librdkafka sends up to 5 per connection) are handled concurrently, yet
answered in order, and a long-poll Fetch does not hold a Produce behind it. At most
``MAX_IN_FLIGHT`` requests of a connection are in hand; the reader waits beyond.
Memory: the bytes of requests read and not yet handled are bounded per connection
(``gateway.kafka.connection.queued.max.request.bytes``) and over the whole listener
(``gateway.kafka.queued.max.request.bytes``, Kafka's ``queued.max.request.bytes``):
a request's size is reserved from both before its bytes are read, and the reader waits
while either is spent. Every body is checked against its frame before kio reads it
(``kafka.bounds``): a declared length never allocates more than was received.
Slow and idle clients: a request must arrive whole within ``request.read.timeout.ms``
of its first byte, a connection with nothing in hand and nothing arriving for
``gateway.kafka.connections.max.idle.ms`` (Kafka's 10 minutes) is closed, and beyond
``gateway.max.connections`` open connections a new one is closed at once.
A Produce at acks=0 gets no answer (Kafka's rule). A request that does not parse, or
names an API or version not offered, closes the connection (Kafka's broker does the
same), except ApiVersions at an unknown version, which is answered with
``UNSUPPORTED_VERSION`` and the versions offered in a v0 body so the client can
retry at one it knows.

Quotas (``kafka.throttle``, KIP-219): a Produce's request bytes and a Fetch's answer
bytes count against the principal's byte rates; when over, the answer carries
``throttle_time_ms`` and the connection is muted (nothing more read or handled) for
that time, an answer to a client too old to throttle itself held back as long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from ingest_gateway.kafka import admin_topics
from ingest_gateway.kafka import (admin_acls, admin_brokers, admin_configs, admin_partitions,
                                  admin_reassign, admin_records, admin_transactions, codes,
                                  fetch, groups, produce, txn, txn_produce)
from ingest_gateway.kafka import acl_gate, quota_admin, scram_admin, throttle
from ingest_gateway.kafka import security as sec
from ingest_gateway.kafka.context import KafkaContext
from ingest_gateway.kafka.sasl import MAX_AUTH_BYTES, Session
from ingest_gateway.kafka.wire import (API_CREATE_TOPICS, API_DELETE_TOPICS, API_FETCH,
                                       API_INIT_PRODUCER_ID, API_LIST_OFFSETS,
                                       API_PRODUCE, API_VERSIONS, OFFERED, Header, ProtocolError,
                                       encode_response, error, make, parse_request, peek_header,
                                       response_module)
from ingest_gateway.server.gateway import Gateway

logger = logging.getLogger("sparklog.gateway.kafka")

#: requests of one connection handled at once (librdkafka pipelines up to 5)
MAX_IN_FLIGHT = 32
_SIZE = struct.Struct(">i")
_HEADER_BYTES = 10  # api key, version, correlation id, client id length


def _handlers() -> dict[int, Any]:
    table = {**groups.HANDLERS, **txn.HANDLERS,
            API_VERSIONS: admin_topics.api_versions,
            API_INIT_PRODUCER_ID: txn.init_producer_id,
            API_CREATE_TOPICS: admin_topics.create_topics,
            API_DELETE_TOPICS: admin_topics.delete_topics,
            API_PRODUCE: produce.by_topic_id(txn_produce.produce), API_FETCH: fetch.fetch,
            API_LIST_OFFSETS: fetch.list_offsets,
            **admin_partitions.HANDLERS, **admin_transactions.HANDLERS,
            **admin_reassign.HANDLERS, **admin_acls.HANDLERS,
            **admin_configs.HANDLERS, **admin_records.HANDLERS, **scram_admin.HANDLERS,
            **quota_admin.HANDLERS}
    return {**table, **admin_brokers.handlers(table)}


def offered(sasl: bool) -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version: what ApiVersions answers and requests may use, every
    module's table (the SASL APIs on a SASL listener only)."""
    return {**OFFERED, **groups.OFFERED, **txn.OFFERED,
            **admin_configs.OFFERED, **admin_records.OFFERED,
            **admin_brokers.OFFERED, **admin_partitions.OFFERED,
            **admin_transactions.OFFERED, **admin_reassign.OFFERED, **scram_admin.OFFERED,
            **quota_admin.OFFERED, **admin_acls.OFFERED,
            **(sec.SASL_OFFERED if sasl else {})}


def parse_listener(text: str) -> tuple[str, int]:
    """(host, port) of one ``SCHEME://host:port`` (``security.parse_listener``);
    raises ConfigError naming ``gateway.kafka.listeners`` for anything else."""
    return sec.parse_listener(text)[1:]


class KafkaListener:
    """``await KafkaListener.start(state)`` (None when no listener is configured);
    ``await listener.close()`` stops accepting and ends every connection."""

    def __init__(self, ctx: KafkaContext, gateway: Any, security: sec.ListenerSecurity):
        self.context, self.security = ctx, security
        self.max_request_bytes = gateway.socket_request_max_bytes
        self.idle_s = gateway.kafka_connections_max_idle_ms / 1000
        self.read_timeout_s = gateway.request_read_timeout_ms / 1000
        self.max_connections = gateway.max_connections
        #: bytes of requests in hand over every connection (Kafka's queued.max.request.bytes)
        self.queued = ByteBudget(gateway.kafka_queued_max_request_bytes)
        self.connection_queued_bytes = gateway.kafka_connection_queued_max_request_bytes
        self.handlers = _handlers()
        #: what ApiVersions offers and requests may use: ours and the group APIs'
        self.offered = offered(sasl=security.login is not None)
        ctx.offered = self.offered
        #: the HTTP side's byte-rate quotas (None: off), shared by both protocols
        self.quotas = ctx.gateway.quotas
        self.server: asyncio.base_events.Server | None = None
        self.connections: set[asyncio.Task] = set()

    @classmethod
    async def start(cls, gateway: Gateway) -> "KafkaListener | None":
        """Listen on ``gateway.kafka.listeners``, serving ``gateway``'s services.
        Raises ConfigError (a bad listener or advertised listener, or one that would
        bypass the login: ``kafka.security``), OSError (address in use)."""
        settings = gateway.settings
        text = settings.gateway.kafka_listeners.strip()
        if not text:
            return None
        scheme, host, port = sec.parse_listener(text)
        told = admin_brokers.advertised(settings.gateway, scheme, host, port)
        security = sec.ListenerSecurity(scheme, settings, gateway.authorizer,
                                        gateway.verifiers)
        self = cls(KafkaContext(gateway, *told), settings.gateway, security)
        self.server = await asyncio.start_server(self._connection, host, port, backlog=1024,
                                                 ssl=security.ssl_context)
        bound = self.server.sockets[0].getsockname()[1]
        if self.context.port == 0:  # an ephemeral listener advertises the port it got
            self.context.port = bound
        admin_brokers.register(self.context)
        logger.info("Kafka protocol listener on %s://%s:%d (clients told %s:%d)", scheme, host,
                    bound, self.context.host, self.context.port)
        return self

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self.connections):
            task.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)
        self.security.close()

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self.connections) >= self.max_connections:
            logger.warning("refusing a Kafka connection from %s: max.connections (%d) open",
                           writer.get_extra_info("peername"), self.max_connections)
            writer.transport.abort()
            return
        self.connections.add(task)
        peer = writer.get_extra_info("peername")
        session = Session(self.security.login, self.security.principal_of(writer.transport),
                          str(peer[0]) if peer else "")
        answers: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
        in_hand: set[asyncio.Task] = set()  # requests not answered yet (idle: none)
        mute = throttle.Mute()
        queued = ByteBudget(self.connection_queued_bytes)
        sender = asyncio.ensure_future(self._send(answers, writer, mute))
        try:
            while not sender.done():
                await mute.wait()  # a throttled connection is not read (KIP-219)
                frame = await self._frame(reader, queued, busy=lambda: bool(in_hand),
                                          bare=lambda: session.raw)
                if frame is None:
                    break
                handling = None
                try:
                    await mute.wait()  # nor handled, if the mute came while reading
                    handling = self._answer(frame, session)
                finally:
                    size = len(frame)
                    if handling is None:
                        self._release(queued, size)
                    else:  # the frame is held until its handler is done with it
                        handling.add_done_callback(lambda _, n=size: self._release(queued, n))
                in_hand.add(handling)
                handling.add_done_callback(in_hand.discard)
                await answers.put(handling)
        except (ProtocolError, ConnectionError, asyncio.IncompleteReadError) as e:
            logger.info("closing Kafka connection from %s: %s",
                        writer.get_extra_info("peername"), e)
        except asyncio.CancelledError:
            # close() ends the connection: end normally, for Python 3.11's start_server
            # logs a cancelled connection handler as an ERROR (3.12 checks cancelled())
            pass
        finally:
            await answers.put(None)
            try:
                await sender
            except Exception:  # noqa: BLE001 - already logged by _send
                pass
            writer.close()
            self.connections.discard(task)

    def _release(self, queued: "ByteBudget", size: int) -> None:
        queued.give(size)
        self.queued.give(size)

    async def _frame(self, reader: asyncio.StreamReader, queued: "ByteBudget",
                     busy: Callable[[], bool],
                     bare: Callable[[], bool] = lambda: False) -> bytes | None:
        """The next request's bytes, its size reserved from ``queued`` (the
        connection's) and ``self.queued`` (the listener's) for the caller to release;
        None at a clean end, or once the connection has been idle (nothing arriving
        while ``busy()`` is false) ``idle_s``. Raises ProtocolError for a size out of
        bounds or a request not whole within ``read_timeout_s`` of its first byte (the
        wait for memory to be free is not counted). While ``bare()`` (a SASL token
        after SaslHandshake v0), a frame has no header: 0 to ``MAX_AUTH_BYTES``."""
        while True:
            try:
                async with asyncio.timeout(self.idle_s):
                    first = await reader.readexactly(1)
                break
            except asyncio.IncompleteReadError:
                return None  # a clean end between requests
            except TimeoutError:
                if not busy():  # nothing in hand either: idle (Kafka closes it too)
                    return None
        try:
            async with asyncio.timeout(self.read_timeout_s):
                head = first + await reader.readexactly(3)
            size = _SIZE.unpack(head)[0]
            low, high = (0, MAX_AUTH_BYTES) if bare() else (_HEADER_BYTES,
                                                            self.max_request_bytes)
            if size < low or size > high:
                raise ProtocolError(f"a SASL token of {size} bytes (at most {high})"
                                    if bare() else
                                    f"a request of {size} bytes (socket.request.max.bytes"
                                    f" = {self.max_request_bytes})")
            await queued.take(size)
            try:
                await self.queued.take(size)
            except BaseException:
                queued.give(size)
                raise
            try:
                async with asyncio.timeout(self.read_timeout_s):
                    return await reader.readexactly(size)
            except BaseException:
                self._release(queued, size)
                raise
        except asyncio.IncompleteReadError:
            raise ProtocolError("the connection ended inside a request") from None
        except TimeoutError:
            raise ProtocolError(f"a request not whole within request.read.timeout.ms "
                                f"({self.read_timeout_s * 1000:.0f})") from None

    def _answer(self, frame: bytes, session: Session) -> asyncio.Task:
        """Start handling one request now; the task's result is ``_handle``'s. A
        ProtocolError from it closes the connection."""
        return asyncio.ensure_future(self._handle(frame, session))

    async def _handle(self, frame: bytes, session: Session) -> tuple[bytes | None, int, bool]:
        """(the framed answer or None: nothing to send, the ms the connection is to be
        muted, whether the answer waits that long first)."""
        if session.raw:  # a bare SASL token after SaslHandshake v0: a bare answer
            token = await session.raw_token(frame)
            return _SIZE.pack(len(token)) + token, 0, False
        peek = peek_header(frame)
        # before a SASL login only ApiVersions and SASL's APIs (else: closed); the
        # principal is this task's own (a context variable) for the handlers' ACL checks
        who = session.gate(peek.api_key)
        sec.CURRENT.set(who)
        low, high = self.offered[API_VERSIONS]
        if peek.api_key == API_VERSIONS and not low <= peek.api_version <= high:
            return _unsupported_api_versions(peek, self.offered), 0, False
        started = time.monotonic()
        head, req = parse_request(frame, self.offered)
        parsed = time.monotonic()
        if head.api_key in sec.SASL_OFFERED:
            body = await session.answer(head, req)
            if session.closing:  # a failed login: this answer, then the connection ends
                raise _CloseAfter(encode_response(head, body))
        else:
            # the APIs without checks of their own: a refusal answers instead of the handler
            body = acl_gate.check(self.context, who, head, req) \
                or await self.handlers[head.api_key](self.context, head, req)
        handled = time.monotonic()
        data = None if body is None else encode_response(head, body)
        mute_ms = throttle.record(self.quotas, who.principal, head, len(frame),
                                  len(data) if data is not None else 0,
                                  throttle.handling_s(head, started, parsed, handled,
                                                      time.monotonic()))
        if mute_ms and body is not None:
            if head.api_key == API_FETCH:  # withheld, as Kafka: its bytes taken back off
                body = fetch.throttled(self.context, req, body)
                throttle.withheld(self.quotas, who.principal, head, len(data))
            data = encode_response(head, throttle.stamped(body, mute_ms))
        return data, mute_ms, mute_ms > 0 and throttle.holds_answer(head)

    async def _send(self, answers: asyncio.Queue, writer: asyncio.StreamWriter,
                    mute: throttle.Mute) -> None:
        while True:
            task = await answers.get()
            if task is None:
                return
            try:
                data, mute_ms, hold = await task
            except _CloseAfter as e:
                logger.info("closing Kafka connection from %s: SASL login failed",
                            writer.get_extra_info("peername"))
                writer.write(e.data)
                await writer.drain()
                writer.close()
                _drain_cancel(answers)
                return
            except ProtocolError as e:
                logger.info("closing Kafka connection from %s: %s",
                            writer.get_extra_info("peername"), e)
                writer.transport.abort()
                _drain_cancel(answers)
                return
            except Exception:
                logger.exception("a Kafka request failed; closing its connection")
                writer.transport.abort()
                _drain_cancel(answers)
                return
            if mute_ms:
                mute.extend(mute_ms)
                if hold:
                    await mute.wait()
            if data is not None:
                writer.write(data)
                await writer.drain()


@contextlib.asynccontextmanager
async def serving(gateway: Gateway) -> AsyncIterator["KafkaListener | None"]:
    """The Kafka listener on ``gateway``'s services while in the block (nothing when
    ``gateway.kafka.listeners`` is empty); raises what :meth:`KafkaListener.start` raises."""
    listener = await KafkaListener.start(gateway)
    try:
        yield listener
    finally:
        if listener is not None:
            await listener.close()


class ByteBudget:
    """Bytes that may be held at once: ``await take(n)`` waits until ``n`` more fit
    under ``limit``, ``give(n)`` returns them. ``n`` must not exceed ``limit``
    (the settings check ``socket.request.max.bytes`` against it)."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0
        self._waiters: list[asyncio.Future] = []

    async def take(self, n: int) -> None:
        while self.used + n > self.limit:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self.used += n

    def give(self, n: int) -> None:
        self.used -= n
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:  # each checks again; those that do not fit wait again
            if not waiter.done():
                waiter.set_result(None)


class _CloseAfter(Exception):
    """A request whose answer is the connection's last (a failed SASL login)."""

    def __init__(self, data: bytes):
        super().__init__("close after this answer")
        self.data = data


def _drain_cancel(answers: asyncio.Queue) -> None:
    while not answers.empty():
        task = answers.get_nowait()
        if task is not None:
            task.cancel()


def _unsupported_api_versions(head: Header, offered: dict[int, tuple[int, int]]) -> bytes:
    """Kafka's answer to ApiVersions at a version it does not know: error 35 and the
    versions offered, in a v0 body (the one every client can read)."""
    mod = response_module(API_VERSIONS, 0)
    keys = tuple(mod.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                 for k, (lo, hi) in sorted(offered.items()))
    body = make(mod.ApiVersionsResponse, error_code=error(codes.UNSUPPORTED_VERSION),
                api_keys=keys)
    return encode_response(head, body)
