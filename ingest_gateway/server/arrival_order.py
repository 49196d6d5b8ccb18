"""Records of plain (non-idempotent) produce calls are added to a partition in the order
the calls arrived.

Kafka appends a connection's pipelined Produce requests in the order they were sent
(its broker reads the next request only after answering the one before). The gateway
handles pipelined requests at once, and a call may pause before it adds its records
(the topic's metadata, the partition's claim: futures shared by every call that needs
them). A call that arrives after such a future completes, but before the earlier call
waiting on it is resumed, would otherwise add its records first: librdkafka's default
producer (no idempotence, five requests in flight) then saw a batch's records land
after the next batch's (found by ``test_avro_serializer_through_the_kafka_listener``
under load; ``tests/ingest_gateway/server/test_arrival_order.py``).

An idempotent producer's batches are ordered by their sequence numbers instead
(``sequencing``: a batch ahead of its predecessor waits for it), so they take no
place here: a gate between them could wait on a batch that itself waits for a
sequence behind the gate.

Usage, in the call (synchronously at its start, so the order is the arrival order)::

    gate = order.enter(topic, partitions)
    try:
        ...                      # awaits: metadata, claims, checks
        await gate.turn()        # every earlier call on these partitions has added
        ...                      # add the records
    finally:
        gate.leave()             # before waiting for the flush: the next call goes on
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

Key = tuple[str, int]


class Gate:
    """One call's place in the order of the partitions it writes."""

    __slots__ = ("_order", "_keys", "_before", "_done", "_left")

    def __init__(self, order: "ArrivalOrder", keys: list[Key],
                 before: list[asyncio.Future], done: asyncio.Future):
        self._order, self._keys, self._before, self._done = order, keys, before, done
        self._left = False

    async def turn(self) -> None:
        """Wait until every earlier call on these partitions has left (added its records
        or failed). Cancellation propagates; :meth:`leave` still frees the place."""
        for earlier in self._before:
            if not earlier.done():
                await asyncio.shield(earlier)
        self._before = []

    def leave(self) -> None:
        """Free this call's place (idempotent). A call that leaves before its turn (it
        failed early) frees it once the calls before it have left, so the order of
        those around it still holds."""
        if self._left:
            return
        self._left = True
        pending = [f for f in self._before if not f.done()]
        self._before = []
        if pending:
            asyncio.gather(*pending).add_done_callback(lambda _: self._finish())
        else:
            self._finish()

    def _finish(self) -> None:
        if not self._done.done():
            self._done.set_result(None)
            self._order.forget(self._keys, self._done)


class ArrivalOrder:
    """Per partition, the place of the last plain produce call (see the module's doc)."""

    def __init__(self) -> None:
        self._last: dict[Key, asyncio.Future] = {}

    def enter(self, topic: str, partitions: Iterable[int]) -> Gate:
        """Take the next place on ``topic``'s ``partitions``; never waits. Call it before
        the call's first await."""
        done = asyncio.get_running_loop().create_future()
        keys = [(topic, p) for p in partitions]
        before = [f for f in (self._last.get(k) for k in keys) if f is not None and not f.done()]
        for k in keys:
            self._last[k] = done
        return Gate(self, keys, before, done)

    def forget(self, keys: list[Key], done: asyncio.Future) -> None:
        """Drop the places a finished call still holds as the last (bounded memory)."""
        for k in keys:
            if self._last.get(k) is done:
                del self._last[k]
