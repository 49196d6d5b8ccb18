"""A partition's leader-epoch history: Kafka's ``leader-epoch-checkpoint``.

The manifest keeps ``epochs``, pairs ``(epoch, start_offset)`` in increasing order of
both: the records from ``start_offset`` up to the next pair's start were appended under
``epoch``. A claim (``writer.claim``) adds its new epoch at the log end offset, and, as
Kafka's ``LeaderEpochFileCache.assign``, drops any pair it makes empty (an epoch that
wrote nothing, so two pairs never share a start offset); pairs wholly below the log
start offset go too, keeping the one that covers it.

Readers use it to stamp each fetched record batch with the epoch it was written under
(``partitionLeaderEpoch``) and to answer OffsetForLeaderEpoch: a Kafka client checks
its position after a leader change by asking where its last record's epoch ended
(KIP-320). A log written before the history existed has no pair for its older
offsets: those are stamped -1 (no epoch), which clients never ask about.
"""

from __future__ import annotations

import bisect
from typing import Sequence

#: Kafka's "no epoch" (RecordBatch.NO_PARTITION_LEADER_EPOCH, UNDEFINED_EPOCH)
NO_EPOCH = -1
Epochs = tuple[tuple[int, int], ...]


def assign(epochs: Epochs, epoch: int, start_offset: int, log_start_offset: int) -> Epochs:
    """``epochs`` with ``epoch`` starting at ``start_offset`` (a claim at the log end).
    Raises ValueError if ``epoch`` is not above every epoch held."""
    if epochs and epoch <= epochs[-1][0]:
        raise ValueError(f"leader epoch {epoch} is not above the last one, {epochs[-1][0]}")
    kept = [(e, s) for e, s in epochs if s < start_offset]
    kept.append((epoch, start_offset))
    # keep the pair covering the log start and those after it
    first = max(0, bisect.bisect_right([s for _, s in kept], log_start_offset) - 1)
    return tuple(kept[first:])


def epoch_at(epochs: Sequence[tuple[int, int]], offset: int) -> int:
    """The epoch ``offset`` was written under; NO_EPOCH before the first pair."""
    i = bisect.bisect_right(epochs, offset, key=lambda pair: pair[1]) - 1
    return epochs[i][0] if i >= 0 else NO_EPOCH


def end_offset_for(epochs: Sequence[tuple[int, int]], wanted: int,
                   log_end_offset: int) -> tuple[int, int]:
    """Kafka's ``LeaderEpochFileCache.endOffsetFor``: (the largest epoch at most
    ``wanted``, the first offset after it). The latest epoch ends at the log end; an
    epoch older than every pair ends where the first pair starts; an unknown epoch
    (above every pair, negative, or an empty history) answers (NO_EPOCH, -1)."""
    if wanted < 0 or not epochs:
        return NO_EPOCH, -1
    if wanted == epochs[-1][0]:
        return wanted, log_end_offset
    above = bisect.bisect_right(epochs, wanted, key=lambda pair: pair[0])
    if above == len(epochs):
        return NO_EPOCH, -1
    start_above = epochs[above][1]
    return (epochs[above - 1][0] if above else wanted), start_above


def parse(value: object) -> Epochs:
    """The ``epochs`` of a manifest's JSON; raises ValueError unless it is a list of
    ``[epoch, start_offset]`` integer pairs increasing in both."""
    if type(value) is not list:
        raise ValueError(f"epochs must be a list of [epoch, start_offset], not {value!r}")
    pairs = []
    for pair in value:
        if type(pair) is not list or len(pair) != 2 or any(type(x) is not int for x in pair):
            raise ValueError(f"an epochs entry is [epoch, start_offset], not {pair!r}")
        if pairs and (pair[0] <= pairs[-1][0] or pair[1] <= pairs[-1][1]):
            raise ValueError(f"epochs must increase in epoch and offset: {value!r}")
        pairs.append((pair[0], pair[1]))
    return tuple(pairs)
