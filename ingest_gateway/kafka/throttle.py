"""Byte-rate quotas on the Kafka listener, as Kafka's broker enforces them (KIP-219).

The quotas and their sensors are the HTTP side's (``security.quotas.QuotaManager``,
present when authentication or the authorizer is on): one ``producer_byte_rate`` and
one ``consumer_byte_rate`` sensor per principal, shared by both protocols and every
connection, so a principal's rate counts all its traffic through this gateway. Kafka's
quotas may also be keyed by client id; sparklog's are per user (``log_layout.quotas``).

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


def record(quotas: Any, principal: str, head: Header, request_bytes: int,
           answer_bytes: int) -> int:
    """Count a request's bytes against ``principal``'s quota (Produce: the request,
    Fetch: the answer; other APIs: none); the throttle time in ms (0: within its quota,
    none applies, or ``quotas`` is None: off)."""
    kind = KINDS.get(head.api_key)
    if quotas is None or kind is None:
        return 0
    size = request_bytes if kind == "produce" else answer_bytes
    return quotas.record(principal, kind, size, time.monotonic())


def stamped(body: Any, throttle_ms: int) -> Any:
    """``body`` with its ``throttle_time`` set to ``throttle_ms``."""
    return dataclasses.replace(body, throttle_time=datetime.timedelta(milliseconds=throttle_ms))


def holds_answer(head: Header) -> bool:
    """Whether a throttled answer is held back (a client too old to throttle itself)."""
    return head.api_version < CLIENT_THROTTLES_FROM.get(head.api_key, 0)


def withheld(quotas: Any, principal: str, head: Header, answer_bytes: int) -> None:
    """Take a Fetch answer's bytes back off ``principal``'s sensor: the answer was
    withheld for its throttle (Kafka's ``unrecordQuotaSensor``). Nothing for other APIs
    or with ``quotas`` None."""
    if quotas is not None and KINDS.get(head.api_key) == "fetch":
        quotas.record(principal, "fetch", -answer_bytes, time.monotonic())


def fetch_max_bytes(quotas: Any, principal: str) -> int | None:
    """The most one Fetch answer of ``principal`` may carry under its
    ``consumer_byte_rate`` (Kafka's ``getMaxValueInQuotaWindow``: the quota times
    ``quota.window.num - 1`` windows), so that an answer alone never exceeds the quota
    and is withheld every time; None when no quota applies."""
    if quotas is None:
        return None
    bound = quotas.quotas.quota(principal, "consumer_byte_rate")
    if bound is None:
        return None
    return max(1, int(bound * (quotas.window_num - 1) * quotas.window_size_ms / 1000))
