"""Discarding segments of an open transaction (``log_layout.txn_discard``): what readers
see at each isolation level, with a commit or an abort after, and what is refused."""

from __future__ import annotations

import pytest

from log_layout import InvalidRecords
from log_layout import transactions as tx
from log_layout.txn_discard import discard_segments
from tests.log_layout.txn_helpers import plain_append, txn_append, values

RC, RU = "read_committed", "read_uncommitted"


@pytest.fixture
def txn(log):
    """An open transaction over t-0 with three segments of one record each, and a plain
    record between the second and the third."""
    log.create_topic("t", {"partitions": 1})
    pid, epoch = tx.init_transactions(log, "job", 60_000)
    tx.add_partitions(log, "job", pid, epoch, [("t", 0)])
    for v in (b"a", b"retried-a"):
        txn_append(log, "t", 0, pid, epoch, [v])
    plain_append(log, "t", 0, [b"plain"])
    txn_append(log, "t", 0, pid, epoch, [b"b"])
    return pid, epoch


def test_a_discarded_segment_is_never_committed(log, txn):
    pid, epoch = txn
    part = log.partition("t", 0)
    assert discard_segments(part, pid, epoch, [(1, 1)]) is not None
    assert discard_segments(part, pid, epoch, [(1, 1)]) is None  # again: nothing to do
    assert values(log, "t", 0, RC) == []  # still open: below the last stable offset only
    tx.end_transaction(log, "job", pid, epoch, True)
    assert values(log, "t", 0, RC) == [b"a", b"plain", b"b"]
    assert values(log, "t", 0, RU) == [b"a", b"retried-a", b"plain", b"b"]


def test_an_abort_after_a_discard_covers_the_whole_transaction(log, txn):
    pid, epoch = txn
    discard_segments(log.partition("t", 0), pid, epoch, [(1, 1)])
    tx.end_transaction(log, "job", pid, epoch, False)
    m = log.partition("t", 0).snapshot()
    assert [a for a in m.aborted if a[0] == pid] == [(pid, 0, 4)]  # one range, no overlap
    assert values(log, "t", 0, RC) == [b"plain"]


def test_what_a_discard_refuses(log, txn):
    pid, epoch = txn
    part = log.partition("t", 0)
    with pytest.raises(InvalidRecords, match="not a segment"):
        discard_segments(part, pid, epoch, [(2, 2)])  # the plain record
    with pytest.raises(InvalidRecords, match="not a segment"):
        discard_segments(part, pid, epoch, [(0, 1)])  # not one segment
    with pytest.raises(Exception, match="epoch"):
        discard_segments(part, pid, epoch + 1, [(1, 1)])
    tx.end_transaction(log, "job", pid, epoch, True)
    with pytest.raises(InvalidRecords, match="no open transaction"):
        discard_segments(part, pid, epoch, [(1, 1)])
    assert values(log, "t", 0, RC) == [b"a", b"retried-a", b"plain", b"b"]
