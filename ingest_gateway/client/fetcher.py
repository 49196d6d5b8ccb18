"""The consumer's fetching (Kafka's ``Fetcher``): positions, one buffer, hand-outs.

Fetched batches wait in one buffer (oldest first) until handed out: ``take`` (for
``poll`` and ``batches``) and ``iterate`` (the record iterator) both take from its
head, so they may be mixed, each going on where the other stopped. Per partition
the fetcher keeps two offsets: the *position*, where the next fetch starts (past
the buffered records), and the *consumed* offset, after the last record handed
out (what a commit stores, and what ``Consumer.position`` answers). Dropping a
partition's buffered records (a seek, a pause, a revocation) moves its position
back to its consumed offset, so none is skipped.

Records come from a *source*: ``log_layout.direct_reader.DirectReader`` (the store)
or ``client.gateway_transport.GatewaySource`` (the gateways); the fetcher also
answers partition counts and watermarks from it. A position with no committed
offset starts at ``auto_offset_reset``.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ingest_gateway.client.records import ArrowBatch, Fetched, Record
from ingest_gateway.errors import NoOffsetForPartition
from ingest_gateway.protocol.groups import TopicPartition
from log_layout import OffsetOutOfRange


class Fetcher:
    """Positions and the buffer of fetched records of one consumer (its polling thread)."""

    def __init__(self, source: Any, *, auto_offset_reset: str):
        self._source = source
        self._auto_offset_reset = auto_offset_reset
        self._positions: dict[TopicPartition, int] = {}
        self._consumed: dict[TopicPartition, int] = {}
        self._buffer: collections.deque[Fetched] = collections.deque()

    # -- what the source knows ------------------------------------------------------------
    def partitions(self, topic: str) -> int:
        """The topic's partition count; raises UnknownTopic."""
        return self._source.partitions(topic)

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        """(log start offset, high watermark or last stable offset) of a partition."""
        return self._source.watermarks(tp)

    # -- positions ---------------------------------------------------------------------------
    def init_positions(self, tps: Iterable[TopicPartition],
                       committed: Callable[[list[TopicPartition]], dict[TopicPartition, int]],
                       group_id: str | None) -> None:
        """Give each of ``tps`` without a position its committed offset (``committed`` of
        those missing), else start at ``auto_offset_reset``; raises NoOffsetForPartition
        (``none``)."""
        missing = [tp for tp in tps if tp not in self._positions]
        if not missing:
            return
        offsets = committed(missing)
        for tp in missing:
            pos = offsets[tp] if tp in offsets else self._reset_position(tp, None, group_id)
            self._positions[tp] = self._consumed[tp] = pos

    def _reset_position(self, tp: TopicPartition, error: OffsetOutOfRange | None,
                        group_id: str | None) -> int:
        if self._auto_offset_reset == "none":
            if error is not None:
                raise error
            raise NoOffsetForPartition(tp[0], tp[1], group_id)
        start, end = self._source.watermarks(tp)
        return start if self._auto_offset_reset == "earliest" else end

    def position(self, tp: TopicPartition) -> int:
        """The offset after the last record of ``tp`` handed out (after init_positions)."""
        return self._consumed[tp]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Fetch ``tp`` from ``offset`` next, dropping what is buffered of it."""
        self.drop({tp})
        self._positions[tp] = self._consumed[tp] = offset

    def drop(self, tps: set[TopicPartition]) -> None:
        """Forget fetched records of ``tps`` not handed out yet, and fetch them again
        from the offset after the last one handed out (so none is skipped)."""
        if not tps or not self._buffer:
            return
        self._buffer = collections.deque(f for f in self._buffer if f.tp not in tps)
        for tp in tps:
            if tp in self._positions:
                self._positions[tp] = self._consumed[tp]

    def keep_only(self, removed: set[TopicPartition], keep: set[TopicPartition]) -> None:
        """The assignment became ``keep``: drop what is buffered of ``removed`` and forget
        the positions of every partition not kept."""
        self.drop(removed)
        for d in (self._positions, self._consumed):
            for tp in list(d):
                if tp not in keep:
                    del d[tp]

    def consumed_offsets(self, assigned: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The consumed offset of each partition of ``assigned`` that has one."""
        return {tp: off for tp, off in self._consumed.items() if tp in assigned}

    # -- fetching -------------------------------------------------------------------------------
    def has_buffered(self) -> bool:
        return bool(self._buffer)

    def fetch(self, fetchable: list[TopicPartition], max_records: int, wait_ms: int) -> None:
        """One fetch of ``fetchable`` (each with a position) into the buffer, waiting up to
        ``wait_ms`` for records. A partition out of range starts again at
        ``auto_offset_reset`` (raises OffsetOutOfRange for ``none``)."""
        got, errors = self._source.fetch({tp: self._positions[tp] for tp in fetchable},
                                         max_records, wait_ms)
        for tp, e in errors.items():
            self._positions[tp] = self._consumed[tp] = self._reset_position(tp, e, None)
        # A rebalance on the heartbeat thread cannot change the assignment (that
        # happens on the polling thread), so every batch is still ours.
        for tp, batch, nxt in got:
            if batch.num_rows:
                self._positions[tp] = nxt
                self._buffer.append(Fetched(tp, batch, nxt))
            elif not any(f.tp == tp for f in self._buffer):
                # Only control markers or an aborted transaction's records (read_committed)
                # were passed over: nothing to hand out, but the position moves past them.
                # After records of this fetch it waits for the next one (fetched when the
                # buffer is empty), so the committed position never skips a record.
                self._positions[tp] = self._consumed[tp] = nxt

    # -- handing out ----------------------------------------------------------------------------
    def take(self, max_records: int, *, max_batches: int | None = None) -> list[ArrowBatch]:
        """Hand out up to ``max_records`` buffered records, in fetch order; they count
        as consumed. A fetched batch the iterator began is handed out from where it stopped."""
        out: list[ArrowBatch] = []
        while self._buffer and max_records > 0 and (max_batches is None or len(out) < max_batches):
            f = self._buffer[0]
            n = f.batch.num_rows - f.start
            whole = n <= max_records
            if whole:
                self._buffer.popleft()
                part = f.batch.slice(f.start) if f.start else f.batch
            else:
                n = max_records
                part = f.batch.slice(f.start, n)
                f.start += n
            b = ArrowBatch(f.tp[0], f.tp[1], part)
            # the whole rest handed out: consumed up to where the fetch went on
            self._consumed[f.tp] = (f.next_offset or b.next_offset) if whole \
                else b.next_offset
            out.append(b)
            max_records -= n
        return out

    def iterate(self, fill: Callable[[], bool], closed: Callable[[], bool]) -> Iterator[Record]:
        """Every record, one at a time, until ``closed()``; ``fill()`` (the consumer's poll
        housekeeping and fetch) runs between batches and says whether records are buffered.
        A record counts as consumed once yielded."""
        while not closed():
            head = self._buffer[0] if self._buffer else None
            if head is None or head.start == 0:
                # Between batches, run poll's housekeeping (auto-commit, rebalance): it
                # may drop buffered records, so the head is read again after it.
                if not fill():
                    continue
                head = self._buffer[0]
            records, tp = head.records(), head.tp
            last = len(records) - 1
            while True:
                i = head.start
                r = records[i]
                head.start = i + 1
                if i == last:  # gone before the yield: poll() must not see it empty
                    self._buffer.popleft()
                self._consumed[tp] = (head.next_offset or r.offset + 1) if i == last \
                    else r.offset + 1
                yield r
                # poll(), seek(), pause() may have taken or dropped the head meanwhile
                if i == last or not self._buffer or self._buffer[0] is not head:
                    break

    def close(self) -> None:
        self._buffer.clear()
        self._source.close()
