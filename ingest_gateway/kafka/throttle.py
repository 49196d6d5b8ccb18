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

One difference from Kafka's broker: a throttled Fetch still carries its records
(Kafka answers it empty and takes its bytes back off the sensor). A Fetch answer is
bounded by the client's ``max_bytes`` and ``partition_max_bytes``, which can exceed the
quota times the window, and an empty answer would then be given to every retry: the
consumer would never advance. Served, it is still paced: its bytes throttle the
next.
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
