"""JoinGroup requests waiting for their group's rebalance to complete.

A JoinGroup handler registers a future per group and awaits it; the group coordinator
calls its change listeners (on store threads) after a group's membership or assignment
changed, and the waiters of that group are woken on the event loop. One
:class:`JoinWaiters` per Kafka listener (``KafkaContext.join_waiters``).
"""

from __future__ import annotations

import asyncio
from typing import Any


class JoinWaiters:
    """Futures of JoinGroups waiting on a group, woken by ``coordinator``'s changes."""

    def __init__(self, coordinator: Any, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.waiting: dict[str, set[asyncio.Future]] = {}
        coordinator.change_listeners.append(
            lambda group: loop.call_soon_threadsafe(self._wake, group))

    def _wake(self, group: str) -> None:
        for fut in self.waiting.pop(group, ()):
            if not fut.done():
                fut.set_result(None)

    def register(self, group: str) -> asyncio.Future:
        fut = self.loop.create_future()
        self.waiting.setdefault(group, set()).add(fut)
        return fut

    def forget(self, group: str, fut: asyncio.Future) -> None:
        s = self.waiting.get(group)
        if s is not None:
            s.discard(fut)
            if not s:
                del self.waiting[group]
