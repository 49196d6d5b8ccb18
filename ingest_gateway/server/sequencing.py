"""The idempotent producer's sequence checks of one produce request, before anything
of it is added (``Batcher.produce``): every partition's :class:`Ticket`, a duplicate's
filled in with its original batch or offsets.

A batch whose sequence is *ahead* of the next expected one is held (up to
SEQUENCE_HOLD_S) instead of refused: the Producer sends up to 5 batches of a
partition at once over several connections, so a later one can arrive first.
It is checked again whenever the partition's idempotent state changes; once
its predecessor is accepted it fits. Refusing it (Kafka's broker does, but
Kafka's producer keeps a partition's requests in order on one connection)
made the client back off 50 ms doubling to 1 s while every later batch waited.
The wait ends at the bound, or at shutdown, with the refusal it would have had.
The rules themselves are ``log_layout.idempotence``'s (``batches.check_sequence``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ingest_gateway.errors import ShuttingDown
from ingest_gateway.server.batches import FlushBatch, PartitionState, Ticket, check_sequence
from ingest_gateway.server.codec import Parsed
from log_layout import OutOfOrderSequence, ProducerBatch

#: how long a batch whose sequence is ahead of the expected one waits for its
#: predecessors before it is refused as out of order
SEQUENCE_HOLD_S = 1.0


async def tickets(parsed: Parsed, states: dict[int, PartitionState],
                  batches: dict[int, ProducerBatch], *, closing: Callable[[], bool],
                  out_of_order: Callable[[], None]) -> dict[int, Ticket]:
    """Validate every partition first (nothing is added unless all pass): each one's
    ticket. ``closing()`` says the gateway is shutting down (a held batch is then
    refused); ``out_of_order()`` counts a refusal. Raises OutOfOrderSequence,
    InvalidProducerEpoch, ShuttingDown, NotLeader."""
    deadline = None
    while True:
        found: dict[int, Ticket] = {}
        try:
            for p, table in parsed.parts.items():
                ticket = Ticket(p, table.num_rows)
                if p in batches:
                    dup = check_sequence(states[p], batches[p])
                    if isinstance(dup, tuple) and isinstance(dup[0], FlushBatch):
                        ticket.batch, ticket.part = dup
                    elif dup is not None:
                        ticket.committed = dup
                found[p] = ticket
            return found
        except OutOfOrderSequence as e:
            now = time.monotonic()
            deadline = deadline or now + SEQUENCE_HOLD_S
            if e.got < e.expected or now >= deadline or closing():
                out_of_order()
                raise
            state = states[e.partition]
            if state.sequence_changed is None:
                state.sequence_changed = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(asyncio.shield(state.sequence_changed), deadline - now)
            except TimeoutError:
                pass
            if closing():
                raise ShuttingDown() from None
            if state.stopped is not None:
                raise state.stopped from None
