"""Byte-rate quotas on the Kafka listener, as Kafka's broker enforces them (KIP-219).

The quotas and their sensors are the HTTP side's (``security.quotas.QuotaManager``,
present when authentication or the authorizer is on): ``producer_byte_rate``,
``consumer_byte_rate`` and ``request_percentage`` sensors per quota entity matched
(user, client id, or both, with Kafka's precedence: ``log_layout.quotas``; the client
id is the request header's), shared by both protocols and every connection, so a
principal's rate counts all its traffic through this gateway.

``request_percentage`` counts a request's handling time as percent of one thread
(Kafka's request quota counts its request-handler and network thread time): the time
to parse it and encode its answer, and, for APIs other than Produce and Fetch, the
handler's time between (a Produce waiting for its flush and a Fetch long-polling are
waiting, not working, and their bytes have quotas of their own). Every API counts but
ApiVersions and SASL's (answered before a login); a request over both a byte rate and
its request share is throttled for the longer of the two (Kafka's ``max``).

What is counted: a Produce request's size (Kafka's ``request.sizeInBytes``: the frame
after its size prefix, acks=0 included), a Fetch answer's size (the encoded frame).
The sensor gives the throttle time (Kafka's ``O * W / (W + X) = T``), and then:

- the answer carries ``throttle_time_ms`` (re-encoded: answers are encoded before the
  bytes of a Fetch are known, and a throttled one is rare);
- the connection is muted (:class:`Mute`): no further request of it is read or
  handled until the throttle time has passed since the answer was ready. Requests
  already in hand (pipelined before) still complete;
- clients of Produce v6+ and Fetch v8+ throttle themselves (KIP-219), so their answer
  goes at once; older versions' answers are held back for the throttle time (Kafka's
  behaviour before KIP-219).

A throttled Fetch is answered as Kafka's broker answers it: without its records (and
within a fetch session, without partitions: ``fetch.throttled``), and the bytes it would
have sent are taken back off the sensor (:func:`withheld`, Kafka's
``unrecordQuotaSensor``): the client asks again once its throttle time is over and is
then served. An answer larger than the quota allows over the whole window would be
withheld every time, so, as Kafka, a Fetch's ``max_bytes`` is cut to what the quota
allows over the window (:func:`fetch_max_bytes`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ingest_gateway.kafka.wire import API_FETCH, API_PRODUCE, Header

#: the quota each API's bytes count against (``QuotaManager`` kinds)
KINDS = {API_PRODUCE: "produce", API_FETCH: "fetch"}
#: the first version whose clients throttle themselves (Kafka's ``shouldClientThrottle``)
CLIENT_THROTTLES_FROM = {API_PRODUCE: 6, API_FETCH: 8}


class Mute:
    """A connection's mute deadline. ``extend(ms)`` mutes it for ``ms`` from now (a
    later deadline wins); ``await wait()`` returns once it is not muted. ``clock``
    (seconds) and ``sleep`` are parameters so a test can drive them."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep):
        self.clock, self.sleep = clock, sleep
        self.until = -math.inf

    def extend(self, ms: int) -> None:
        self.until = max(self.until, self.clock() + ms / 1000)

    async def wait(self) -> None:
        while (left := self.until - self.clock()) > 0:
            await self.sleep(left)


#: APIs outside the request quota (answered before a login: ApiVersions, SASL's)
REQUEST_EXEMPT = frozenset({17, 18, 36})


def record(quotas: Any, principal: str, head: Header, request_bytes: int,
           answer_bytes: int, handling_s: float = 0.0) -> int:
    """Count a request against ``principal``'s quotas with the header's client id: its
    bytes (Produce: the request, Fetch: the answer; other APIs: none) and
    ``handling_s`` seconds of handling (module doc); the throttle time in ms, the longer
    of the two (0: within its quotas, none applies, or ``quotas`` is None: off)."""
    if quotas is None:
        return 0
    client_id, now = head.client_id or "", time.monotonic()
    byte_ms = request_ms = 0
    kind = KINDS.get(head.api_key)
    if kind is not None:
        size = request_bytes if kind == "produce" else answer_bytes
        byte_ms = quotas.record(principal, kind, size, now, client_id)
    if head.api_key not in REQUEST_EXEMPT:
        request_ms = quotas.record(principal, "request", handling_s * 100, now, client_id)
    return max(byte_ms, request_ms)


def handling_s(head: Header, started: float, parsed: float, handled: float,
               encoded: float) -> float:
    """The seconds a request's handling counts against ``request_percentage``, from
    the times it was read, parsed, handled and its answer encoded (module doc)."""
    work = (parsed - started) + (encoded - handled)
    return work if head.api_key in KINDS else work + (handled - parsed)


def stamped(body: Any, throttle_ms: int) -> Any:
    """``body`` with its ``throttle_time`` set to ``throttle_ms`` (unchanged for an
    answer without one: ApiVersions v0)."""
    if not any(f.name == "throttle_time" for f in dataclasses.fields(body)):
        return body
    return dataclasses.replace(body, throttle_time=datetime.timedelta(milliseconds=throttle_ms))


def holds_answer(head: Header) -> bool:
    """Whether a throttled answer is held back (a client too old to throttle itself)."""
    return head.api_version < CLIENT_THROTTLES_FROM.get(head.api_key, 0)


def withheld(quotas: Any, principal: str, head: Header, answer_bytes: int) -> None:
    """Take a Fetch answer's bytes back off ``principal``'s sensor: the answer was
    withheld for its throttle (Kafka's ``unrecordQuotaSensor``). Nothing for other APIs
    or with ``quotas`` None."""
    if quotas is not None and KINDS.get(head.api_key) == "fetch":
        quotas.record(principal, "fetch", -answer_bytes, time.monotonic(),
                      head.client_id or "")


def fetch_max_bytes(quotas: Any, principal: str, client_id: str = "") -> int | None:
    """The most one Fetch answer of ``principal`` may carry under its
    ``consumer_byte_rate`` (Kafka's ``getMaxValueInQuotaWindow``: the quota times
    ``quota.window.num - 1`` windows), so that an answer alone never exceeds the quota
    and is withheld every time; None when no quota applies."""
    if quotas is None:
        return None
    bound = quotas.quotas.quota(principal, "consumer_byte_rate", client_id)
    if bound is None:
        return None
    return max(1, int(bound * (quotas.window_num - 1) * quotas.window_size_ms / 1000))
