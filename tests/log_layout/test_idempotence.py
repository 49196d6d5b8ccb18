"""Kafka's idempotent-producer rules (``log_layout.idempotence``): the one test file.

The pure rules first (next / duplicate / refused, pending batches, a flush of
several batches, the state a commit records), then the rules as an append on
every backend applies them. The gateway's use of them over HTTP (a retry before
and after the flush) is in tests/ingest_gateway/http/test_http.py.
"""

from __future__ import annotations

import pytest

from log_layout import InvalidProducerEpoch, OutOfOrderSequence, ProducerBatch
from log_layout.idempotence import (Verdict, after_appends, check_sequence, check_with_pending,
                                    sort_out)
from log_layout.manifest import PRODUCER_BATCHES_KEPT, ProducerEntry
from tests.log_layout.helpers import table

P = 0  # the partition named in errors


def state(*batches: tuple[ProducerBatch, int]) -> dict[int, ProducerEntry]:
    return after_appends({}, list(batches))


def test_a_new_producer_starts_at_zero_and_continues_in_order():
    assert check_sequence(None, ProducerBatch(7, 0, 0, 3), P) is None
    with pytest.raises(OutOfOrderSequence) as e:
        check_sequence(None, ProducerBatch(7, 0, 1, 3), P)
    assert (e.value.expected, e.value.got) == (0, 1)
    entry = state((ProducerBatch(7, 0, 0, 3), 100))[7]
    assert check_sequence(entry, ProducerBatch(7, 0, 3, 1), P) is None


def test_a_duplicate_is_answered_with_its_offsets_and_a_gap_or_overlap_refused():
    entry = state((ProducerBatch(7, 0, 0, 3), 100), (ProducerBatch(7, 0, 3, 2), 103))[7]
    assert check_sequence(entry, ProducerBatch(7, 0, 0, 3), P) == (100, 102)
    assert check_sequence(entry, ProducerBatch(7, 0, 3, 2), P) == (103, 104)
    for first in (9, 4, 2):  # a gap, an overlap, a batch cut differently
        with pytest.raises(OutOfOrderSequence) as e:
            check_sequence(entry, ProducerBatch(7, 0, first, 1), P)
        assert (e.value.expected, e.value.got) == (5, first)


def test_epochs_fence_older_producers_and_a_new_epoch_restarts_at_zero():
    entry = state((ProducerBatch(7, 1, 0, 3), 0))[7]
    with pytest.raises(InvalidProducerEpoch):
        check_sequence(entry, ProducerBatch(7, 0, 3, 1), P)
    assert check_sequence(entry, ProducerBatch(7, 2, 0, 1), P) is None
    with pytest.raises(OutOfOrderSequence):
        check_sequence(entry, ProducerBatch(7, 2, 3, 1), P)


def test_only_the_last_batches_are_kept():
    batches = [(ProducerBatch(7, 0, i, 1), 10 + i) for i in range(PRODUCER_BATCHES_KEPT + 2)]
    entry = state(*batches)[7]
    assert len(entry.batches) == PRODUCER_BATCHES_KEPT
    assert entry.batches[-1] == (6, 6, 16, 16)
    with pytest.raises(OutOfOrderSequence):  # too old to be known as a duplicate
        check_sequence(entry, ProducerBatch(7, 0, 0, 1), P)
    assert after_appends({}, [(ProducerBatch(9, 1, 0, 4), -1)])[9].batches == ((0, 3, -1, -1),)


def test_pending_batches_count_before_the_flush():
    committed = state((ProducerBatch(7, 0, 0, 3), 100))[7]
    pending = [ProducerBatch(7, 0, 3, 2), ProducerBatch(7, 0, 5, 1)]
    assert check_with_pending(committed, pending, ProducerBatch(7, 0, 0, 3), P) == \
        Verdict(committed=(100, 102))
    assert check_with_pending(committed, pending, ProducerBatch(7, 0, 5, 1), P) == \
        Verdict(pending=1)
    assert check_with_pending(committed, pending, ProducerBatch(7, 0, 6, 4), P) == Verdict()
    with pytest.raises(OutOfOrderSequence) as e:
        check_with_pending(committed, pending, ProducerBatch(7, 0, 3, 1), P)
    assert (e.value.expected, e.value.got) == (6, 3)
    with pytest.raises(InvalidProducerEpoch):
        check_with_pending(None, [ProducerBatch(7, 2, 0, 1)], ProducerBatch(7, 1, 1, 1), P)
    # no pending batch: the committed state alone decides
    assert check_with_pending(committed, [], ProducerBatch(7, 0, 3, 1), P) == Verdict()


def test_a_flush_sorts_out_each_batch_on_those_before_it():
    committed = state((ProducerBatch(7, 0, 0, 3), 100))
    fates = sort_out(committed, [ProducerBatch(7, 0, 3, 2),   # next: written
                                 ProducerBatch(7, 0, 0, 3),   # committed duplicate
                                 ProducerBatch(7, 0, 9, 1),   # no longer fits
                                 ProducerBatch(7, 0, 5, 1),   # next after the first
                                 ProducerBatch(8, 0, 0, 1)],  # another producer
                     P)
    assert fates[0] is None and fates[1] == (100, 102) and fates[3] is None and fates[4] is None
    assert isinstance(fates[2], OutOfOrderSequence)


def test_an_append_applies_the_rules(part):
    w = part.claim("w")
    b0 = ProducerBatch(producer_id=7, producer_epoch=0, first_sequence=0, count=3)
    b1 = ProducerBatch(7, 0, 3, 2)
    r = w.append(table(0, 5), producer_batches=[(b0, 0), (b1, 3)])
    assert r.batch_offsets == ((0, 2), (3, 4))
    entry = part.snapshot().producers[7]
    assert check_sequence(entry, b0, 0) == (0, 2) and check_sequence(entry, b1, 0) == (3, 4)
    assert check_sequence(entry, ProducerBatch(7, 0, 5, 1), 0) is None
    with pytest.raises(OutOfOrderSequence) as e:
        check_sequence(entry, ProducerBatch(7, 0, 9, 1), 0)
    assert (e.value.expected, e.value.got) == (5, 9)
    with pytest.raises(OutOfOrderSequence):  # a duplicate handed to append is refused
        w.append(table(5, 3), producer_batches=[(b0, 0)])
    assert part.high_watermark() == 5
    w.append(table(5, 1), producer_batches=[(ProducerBatch(7, 1, 0, 1), 0)])  # new epoch
    with pytest.raises(InvalidProducerEpoch):
        check_sequence(part.snapshot().producers[7], ProducerBatch(7, 0, 5, 1), 0)
