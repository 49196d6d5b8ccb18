"""Driving several consumers of one group from one test thread."""

from __future__ import annotations

import time


def drive(consumers, until, what, sink=None, *, timeout: float = 60.0, poll_s: float = 0.05):
    """Poll every consumer in turn (rejoins happen inside poll) until ``until()``.

    ``sink(consumer, records)`` sees each poll's records. Raises AssertionError
    naming ``what`` and each consumer's assignment after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: "
                                 f"{[(c.client_id, c.assignment()) for c in consumers]}")
        for c in consumers:
            recs = c.poll(poll_s)
            if sink is not None:
                sink(c, recs)
