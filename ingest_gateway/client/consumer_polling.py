"""The consumer's polling: one buffer of fetched records for poll, the iterator and batches.

Fetched batches wait in ``_buffer`` (oldest first) until handed out: ``poll``,
``poll_batches``, ``__iter__`` and ``batches`` all take from its head, so they
may be mixed, each going on where the other stopped. ``_positions`` is where
the next fetch of a partition starts (past its buffered records); ``_consumed``
the offset after the last record handed out (what a commit stores). Before
each fetch the housekeeping of ``consumer_group`` runs (auto-commit, rebalance).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from ingest_gateway.client.records import Batch, Fetched, Record, records_of
from ingest_gateway.errors import IllegalState


class Polling:
    """poll / iterate / batches of :class:`~ingest_gateway.client.consumer.Consumer`
    (a base class: it works on the Consumer's state)."""

    _buffer: Any
    _source: Any

    def poll_batches(self, timeout: float = 1.0, max_records: int | None = None) -> list[Batch]:
        """Arrow batches of up to ``max_records`` records, waiting up to ``timeout`` s
        for the first; [] if none came. Records handed out count as consumed.

        Raises IllegalState (closed, or neither subscribed nor assigned), ValueError
        (``max_records`` not a positive integer) and the group's and source's errors.
        """
        max_records = max_records or self.max_poll_records
        if not self._fill(timeout, max_records):
            return []
        return self._take(max_records)

    def poll(self, timeout: float = 1.0, max_records: int | None = None) -> list[Record]:
        """Records (in offset order per partition) as :class:`Record` tuples; see poll_batches."""
        out: list[Record] = []
        for b in self.poll_batches(timeout, max_records):
            out.extend(records_of(b.topic, b.partition, b.records))
        return out

    def __iter__(self) -> Iterator[Record]:
        """Every record, blocking for new ones: a never-ending iterator (until close()).

        It hands out the same stream as poll() (they may be mixed); a record
        counts as consumed once yielded.
        """
        while not self._closed:
            head = self._buffer[0] if self._buffer else None
            if head is None or head.start == 0:
                # Between batches, run poll's housekeeping (auto-commit, rebalance): it
                # may drop buffered records, so the head is read again after it.
                if not self._fill_or_stop():
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

    def batches(self) -> Iterator[Batch]:
        """Every record as Arrow batches, blocking for new ones (never ends until close())."""
        while not self._closed:
            if self._fill_or_stop():
                yield from self._take(self.max_poll_records, max_batches=1)

    def _fill_or_stop(self) -> bool:
        """_fill for the iterators; False once close() was called meanwhile."""
        try:
            return self._fill(self.fetch_max_wait_ms / 1000 or 0.5, self.max_poll_records)
        except IllegalState:
            if self._closed:
                return False
            raise

    def _take(self, max_records: int, *, max_batches: int | None = None) -> list[Batch]:
        """Hand out up to ``max_records`` buffered records, in fetch order; they count
        as consumed. A fetched batch the iterator began is handed out from where it stopped."""
        out: list[Batch] = []
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
            b = Batch(f.tp[0], f.tp[1], part)
            # the whole rest handed out: consumed up to where the fetch went on
            self._consumed[f.tp] = (f.next_offset or b.next_offset) if whole \
                else b.next_offset
            out.append(b)
            max_records -= n
        return out

    def _fill(self, timeout: float, max_records: int) -> bool:
        """Housekeeping (auto-commit, group), then, unless records are buffered, fetch
        up to ``max_records`` into the buffer, waiting up to ``timeout`` s.

        True if the buffer has records to hand out. Raises IllegalState or ValueError
        (see poll_batches).
        """
        self._check_open()
        if isinstance(max_records, bool) or not isinstance(max_records, int) or max_records <= 0:
            raise ValueError(f"max_records must be a positive integer, not {max_records!r}")
        if not self._subscription and not self._manual:
            raise IllegalState("nothing to poll: subscribe() or assign() first")
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            self._maybe_auto_commit()
            if self._subscription:
                self._handle_group()  # a rebalance drops what it revokes from the buffer
            if self._buffer:
                return True
            self._fetch_into_buffer(deadline, max_records)
            if self._buffer:
                return True
            if time.monotonic() >= deadline:
                return False

    def _fetch_into_buffer(self, deadline: float, max_records: int) -> None:
        """One fetch at the positions of the fetchable partitions (buffer empty)."""
        fetchable = [tp for tp in self._assignment if tp not in self._paused]
        self._init_positions(fetchable)
        remaining = deadline - time.monotonic()
        wait = int(max(0.0, min(remaining, self.fetch_max_wait_ms / 1000)) * 1000)
        if self._subscription and (self._state is None or not self._state.assigned
                                   or self._state.rebalance):
            wait = min(wait, 50)  # rejoining: check the group again soon
        if not fetchable:
            if wait:
                self._hb_stop.wait(wait / 1000)
            return
        got, errors = self._source.fetch({tp: self._positions[tp] for tp in fetchable},
                                         max_records, wait)
        for tp, e in errors.items():
            self._positions[tp] = self._consumed[tp] = self._reset_position(tp, e)
        # A rebalance on the heartbeat thread cannot change the assignment (that
        # happens in _handle_group, on this thread), so every batch is still ours.
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
