"""Kafka's client byte-rate quotas, enforced by throttling (``log_layout.quotas`` keeps
them in the store).

Each quota entity matched has a rate sensor per kind of traffic (``produce`` against
``producer_byte_rate``, ``fetch`` against ``consumer_byte_rate``, ``request`` -- the
seconds spent handling requests, as percent of one thread -- against
``request_percentage``), keyed as Kafka keys its quota sensors: by the principal, the
client id or both, as the entity that matched says (``log_layout.quotas``: a
``Client:app`` quota is one sensor for every user of ``app``). Measured as Kafka's
``Rate`` over a ``WindowedSum``: :data:`WINDOW_NUM` samples (Kafka's
``quota.window.num``, 11) of :data:`WINDOW_SIZE_S` seconds each
(``quota.window.size.seconds``, 1). The rate is the sum of the samples over the time
they span, counted as at least ``WINDOW_NUM - 1`` whole windows (so a first burst is
not measured over a few milliseconds); a sample whose last record is older than
``WINDOW_NUM`` windows is dropped.

:meth:`QuotaManager.record` adds a request's bytes to its sensor first, then measures,
as Kafka's ``Sensor.record`` with ``checkQuotas``: the request is served, and when
the rate is above the quota the answer says how long the client is throttled
(``QuotaUtils.throttleTime``): the delay X that brings the rate O measured over the
window W back to the quota T, ``O * W / (W + X) = T``, so ``X = (O - T) / T * W``,
rounded to ms. It is capped at the whole window (``WINDOW_NUM * WINDOW_SIZE_S``):
after that long without traffic every sample has expired, so no longer wait is
ever needed.

Quotas are read from the store when the manager is made and every
``authorizer.refresh.ms`` after (one LIST; the document is read only when its
version changed). With no quota that applies to a principal, ``record`` returns 0
without recording anything (a dictionary lookup).
"""

from __future__ import annotations

import math
import threading
from typing import Any

from ingest_gateway.security.authorizer import Refresher
from log_layout import quotas as quota_format
from log_layout.quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, Quotas

#: Kafka's quota.window.num and quota.window.size.seconds defaults
WINDOW_NUM = 11
WINDOW_SIZE_S = 1.0
#: the kind of traffic -> the quota config that bounds it
KINDS = {"produce": PRODUCER_BYTE_RATE, "fetch": CONSUMER_BYTE_RATE,
         "request": REQUEST_PERCENTAGE}


class _Sample:
    __slots__ = ("value", "events", "start_ms", "last_ms")

    def __init__(self, now_ms: float):
        self.reset(now_ms)

    def reset(self, now_ms: float) -> None:
        self.value, self.events, self.start_ms, self.last_ms = 0.0, 0, now_ms, now_ms


class Rate:
    """Kafka's ``Rate`` over a ``WindowedSum`` (``SampledStat``): ``num`` samples of
    ``size_ms`` each, plus one overlapping the window's start, recycled in turn."""

    def __init__(self, num: int = WINDOW_NUM, size_ms: float = WINDOW_SIZE_S * 1000):
        self.num, self.size_ms = num, size_ms
        self.samples: list[_Sample] = []
        self.current = 0

    def record(self, value: float, now_ms: float) -> None:
        if not self.samples:
            self.samples.append(_Sample(now_ms))
        sample = self.samples[self.current]
        if now_ms - sample.start_ms >= self.size_ms:  # complete: advance
            self.current = (self.current + 1) % (self.num + 1)
            if self.current >= len(self.samples):
                sample = _Sample(now_ms)
                self.samples.append(sample)
            else:
                sample = self.samples[self.current]
                sample.reset(now_ms)
        sample.value += value
        sample.events += 1
        sample.last_ms = now_ms

    def _purge(self, now_ms: float) -> None:
        expire = self.num * self.size_ms
        for sample in self.samples:
            if now_ms - sample.last_ms >= expire:
                sample.reset(now_ms)

    def window_ms(self, now_ms: float) -> float:
        """The time the rate is measured over (Kafka's ``Rate.windowSize``)."""
        self._purge(now_ms)
        if not self.samples:
            self.samples.append(_Sample(now_ms))
        elapsed = now_ms - min(s.start_ms for s in self.samples)
        full = int(elapsed // self.size_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.size_ms
        return max(elapsed, 1.0)

    def measure(self, now_ms: float) -> float:
        """Units per second (Kafka's ``Rate.measure``)."""
        self._purge(now_ms)
        total = sum(s.value for s in self.samples)
        return total / (self.window_ms(now_ms) / 1000)

    def idle(self, now_ms: float) -> bool:
        """Every sample expired: measuring it again is measuring a new one."""
        return all(now_ms - s.last_ms >= self.num * self.size_ms for s in self.samples)


class QuotaManager:
    """Byte-rate quotas per principal, read from ``log``'s store (see the module doc).

    ``settings.authorizer.refresh_ms`` sets how often the quotas are read again;
    ``background=False`` starts no thread (call :meth:`refresh`). Stop the thread with
    :meth:`close` (or ``with QuotaManager(...)``). ``window_num`` and ``window_size_s``
    are Kafka's ``quota.window.num`` and ``quota.window.size.seconds``.

    Raises the first load's CorruptDocument or OSError.
    """

    def __init__(self, log: Any, settings: Any, *, background: bool = True,
                 window_num: int = WINDOW_NUM, window_size_s: float = WINDOW_SIZE_S):
        self._store = log.store
        self.window_num, self.window_size_ms = window_num, window_size_s * 1000
        self.max_throttle_ms = int(window_num * self.window_size_ms)
        self._quotas = Quotas(0, {})
        self._version: int | None = None
        self._sensors: dict[tuple[tuple[str, str], str], Rate] = {}
        self._lock = threading.Lock()
        self._swept_ms = -math.inf
        self.refresh()
        self._refresher = Refresher("sparklog-quota-refresh", self.refresh,
                                    int(settings.authorizer.refresh_ms)) if background else None

    @property
    def quotas(self) -> Quotas:
        return self._quotas

    def refresh(self) -> bool:
        """Read the quotas again if their version changed; True if it did. Raises
        CorruptDocument, OSError (the quotas in force stay)."""
        found = quota_format.load(self._store, known=self._version)
        if found is None:
            return False
        self._quotas, self._version = found, found.version
        return True

    def record(self, principal: str, kind: str, nbytes: float, now_s: float,
               client_id: str = "") -> int:
        """Count ``nbytes`` of ``kind`` (``produce`` or ``fetch``; ``request``: percent
        of a thread-second, 100 for a second of handling) traffic of ``principal`` with
        ``client_id`` at ``now_s`` (seconds, any monotonic clock); the milliseconds the
        client is to be throttled (0: within its quota, or none applies). Raises
        ValueError for another ``kind``."""
        config = KINDS.get(kind)
        if config is None:
            raise ValueError(f"quota kind {kind!r}: expected one of {sorted(KINDS)}")
        quotas = self._quotas
        if not quotas.entries:
            return 0
        found = quotas.find(principal, client_id or "", config)
        if found is None:
            return 0
        bound, key = found
        now_ms = now_s * 1000
        with self._lock:
            sensor = self._sensors.get((key, kind))
            if sensor is None:
                sensor = self._sensors[(key, kind)] = Rate(self.window_num,
                                                           self.window_size_ms)
            sensor.record(nbytes, now_ms)
            observed = sensor.measure(now_ms)
            if observed <= bound:  # Kafka's Quota.acceptable: value <= bound
                throttle = 0
            else:
                x = (observed - bound) / bound * sensor.window_ms(now_ms)
                throttle = min(math.floor(x + 0.5), self.max_throttle_ms)  # Math.round
            self._sweep(now_ms)
        return throttle

    def _sweep(self, now_ms: float) -> None:
        """Forget idle sensors once per window span (a principal seen once must not stay
        in memory forever; an idle sensor measures as a new one)."""
        if now_ms - self._swept_ms < self.max_throttle_ms:
            return
        self._swept_ms = now_ms
        for key in [k for k, s in self._sensors.items() if s.idle(now_ms)]:
            del self._sensors[key]

    def close(self) -> None:
        """Stop the refresh thread (if any); idempotent."""
        if self._refresher is not None:
            self._refresher.close()
            self._refresher = None

    def __enter__(self) -> "QuotaManager":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
