"""Kafka's idempotent-producer rules, in one place: is a batch the next one, a retry, or refused?

A producer numbers each partition's records with consecutive sequences per
epoch (``ProducerBatch``: producer id, epoch, first sequence, count). The
manifest keeps, per producer, its epoch and last ``PRODUCER_BATCHES_KEPT``
batches with their offsets (``ProducerEntry``, format in ``manifest``). Against
that state a batch is:

* **the next one** if its first sequence is the last kept sequence + 1 (a new
  producer, or a higher epoch, starts at 0);
* **a duplicate** if it is exactly (first and last sequence) a kept batch of the
  same epoch: it is answered with the original offsets and not written again;
* **refused** otherwise: ``InvalidProducerEpoch`` for an older epoch,
  ``OutOfOrderSequence`` (expected vs. sent) for a gap or an overlap.

A gateway also holds batches it accepted and has not flushed yet (*pending*):
:func:`check_with_pending` applies the same rules to the committed state plus
those, so a retry arriving before the flush gets the pending batch's offsets.
A flush writes several batches at once: :func:`sort_out` decides each one's
fate on the committed state plus the batches before it, and
:func:`after_appends` is the state the commit records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from log_layout.errors import InvalidProducerEpoch, OutOfOrderSequence
from log_layout.manifest import PRODUCER_BATCHES_KEPT, ProducerBatch, ProducerEntry


class Verdict(NamedTuple):
    """How a batch fits: the next one (both None), a duplicate of a committed batch
    (its original ``(base, last)`` offsets), or of a pending one (its index)."""

    committed: tuple[int, int] | None = None
    pending: int | None = None


def check_sequence(entry: ProducerEntry | None, batch: ProducerBatch,
                   partition: int) -> tuple[int, int] | None:
    """Kafka's idempotence rules for one batch against a producer's state.

    Returns the original offsets of a duplicate, None for the expected next
    batch; raises InvalidProducerEpoch or OutOfOrderSequence otherwise.
    """
    if entry is None or batch.producer_epoch > entry.epoch:
        # A new producer (or a bumped epoch) starts its sequence at 0.
        if batch.first_sequence != 0:
            raise OutOfOrderSequence(batch.producer_id, partition, 0, batch.first_sequence)
        return None
    if batch.producer_epoch < entry.epoch:
        raise InvalidProducerEpoch(batch.producer_id, batch.producer_epoch, entry.epoch)
    for first, last, base, last_off in entry.batches:
        if first == batch.first_sequence and last == batch.last_sequence:
            return base, last_off
    expected = entry.last_sequence + 1
    if batch.first_sequence != expected:
        raise OutOfOrderSequence(batch.producer_id, partition, expected, batch.first_sequence)
    return None


def check_with_pending(committed: ProducerEntry | None, pending: Sequence[ProducerBatch],
                       batch: ProducerBatch, partition: int) -> Verdict:
    """``batch`` against the producer's committed state and its ``pending`` batches
    (accepted, not committed yet, in sequence order). Raises InvalidProducerEpoch or
    OutOfOrderSequence."""
    if committed is not None and committed.epoch == batch.producer_epoch:
        for first, last, base, last_off in committed.batches:
            if first == batch.first_sequence and last == batch.last_sequence:
                return Verdict(committed=(base, last_off))
    if not pending:
        return Verdict(committed=check_sequence(committed, batch, partition))
    for i, q in enumerate(pending):
        if q.producer_epoch == batch.producer_epoch and q.first_sequence == batch.first_sequence \
                and q.count == batch.count:
            return Verdict(pending=i)
    last = pending[-1]
    if batch.producer_epoch < last.producer_epoch:
        raise InvalidProducerEpoch(batch.producer_id, batch.producer_epoch, last.producer_epoch)
    expected = last.last_sequence + 1 if batch.producer_epoch == last.producer_epoch else 0
    if batch.first_sequence != expected:
        raise OutOfOrderSequence(batch.producer_id, partition, expected, batch.first_sequence)
    return Verdict()


def after_appends(producers: Mapping[int, ProducerEntry],
                  batches: Sequence[tuple[ProducerBatch, int]]) -> dict[int, ProducerEntry]:
    """Producer state after appending ``(batch, base_offset)`` pairs, in order (a base
    of -1: offsets not known yet); each producer keeps its last PRODUCER_BATCHES_KEPT."""
    out = dict(producers)
    for batch, base in batches:
        entry = out.get(batch.producer_id)
        kept = entry.batches if entry is not None and entry.epoch == batch.producer_epoch else ()
        last = -1 if base < 0 else base + batch.count - 1
        out[batch.producer_id] = ProducerEntry(
            batch.producer_epoch,
            (kept + ((batch.first_sequence, batch.last_sequence, base, last),))[
                -PRODUCER_BATCHES_KEPT:])
    return out


def sort_out(producers: Mapping[int, ProducerEntry], batches: Sequence[ProducerBatch],
             partition: int) -> list[tuple[int, int] | Exception | None]:
    """For batches written together in this order: each one's fate on the committed
    ``producers`` plus the batches before it that are written. None: write it; a
    duplicate's original ``(base, last)`` offsets; or the error refusing it (an
    earlier batch of its producer failed, so it no longer fits)."""
    state = dict(producers)
    out: list[tuple[int, int] | Exception | None] = []
    for batch in batches:
        try:
            dup = check_sequence(state.get(batch.producer_id), batch, partition)
        except (OutOfOrderSequence, InvalidProducerEpoch) as e:
            out.append(e)
            continue
        out.append(dup)
        if dup is None:
            state = after_appends(state, [(batch, -1)])
    return out
