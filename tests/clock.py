"""A clock the test sets by hand: ``clock = Clock(); clock.t += 5_000``.

Time is a parameter (STYLE.md habit 7): the group coordinator, the gateway's
consumer hub and the consumers take ``now_ms``, so tests move time instead of
sleeping.
"""

from __future__ import annotations


class Clock:
    """Milliseconds since the epoch, as ``now_ms()`` returns them; ``t`` is settable."""

    def __init__(self, t: int = 1_000_000):
        self.t = t

    def __call__(self) -> int:
        return self.t
