"""The leader-epoch history (Kafka's leader-epoch-checkpoint): what claims record, what
readers look up, and how the manifest keeps it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from log_layout import CorruptManifest, leader_epochs
from log_layout.leader_epochs import NO_EPOCH, assign, end_offset_for, epoch_at
from log_layout.manifest import Manifest
from tests.log_layout.helpers import table


def test_claims_record_each_epoch_where_it_starts_on_every_backend(part):
    part.claim("a").append(table(0, 3))
    part.claim("idle")                      # writes nothing: the next claim replaces it
    w = part.claim("b")
    w.append(table(3, 2))
    assert part.snapshot().epochs == ((1, 0), (3, 3))
    w.append(table(5, 1))                   # appends carry the history over
    fresh = part.versions.snapshot(refresh=True)
    assert fresh.epochs == ((1, 0), (3, 3)) and fresh.next_offset == 6


def test_lookups_answer_as_kafkas_leader_epoch_cache():
    epochs = ((2, 0), (4, 10), (7, 25))
    assert [epoch_at(epochs, o) for o in (0, 9, 10, 24, 25, 99)] == [2, 2, 4, 4, 7, 7]
    assert epoch_at((), 5) == NO_EPOCH and epoch_at(((3, 10),), 9) == NO_EPOCH
    log_end = 30
    assert end_offset_for(epochs, 7, log_end) == (7, 30)    # the latest: the log end
    assert end_offset_for(epochs, 4, log_end) == (4, 25)    # ends where 7 starts
    assert end_offset_for(epochs, 5, log_end) == (4, 25)    # unknown: the one below it
    assert end_offset_for(epochs, 1, log_end) == (1, 0)     # older than all: first start
    assert end_offset_for(epochs, 8, log_end) == (NO_EPOCH, -1)
    assert end_offset_for(epochs, -1, log_end) == (NO_EPOCH, -1)
    assert end_offset_for((), 3, log_end) == (NO_EPOCH, -1)


def test_assign_drops_empty_epochs_and_those_below_the_log_start():
    assert assign(((1, 0), (2, 5)), 3, 5, 0) == ((1, 0), (3, 5))
    assert assign(((1, 0), (2, 5), (3, 9)), 4, 12, 10) == ((3, 9), (4, 12))
    assert assign(((1, 0), (2, 5)), 3, 12, 5) == ((2, 5), (3, 12))
    with pytest.raises(ValueError, match="not above"):
        assign(((4, 0),), 4, 3, 0)


@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 5)), max_size=30))
def test_any_run_of_claims_keeps_a_history_that_places_every_offset(steps):
    """Claims with some records between them (and a moving log start): every retained
    offset maps to the epoch that wrote it, and each epoch's end is where the next
    writing epoch starts."""
    epochs, end, start, epoch, wrote = (), 0, 0, 0, {}
    for bump, n in steps:
        epoch += bump
        epochs = assign(epochs, epoch, end, start)
        for off in range(end, end + n):
            wrote[off] = epoch
        end += n
        start = max(start, end - 7)
    assert [epoch_at(epochs, o) for o in range(start, end)] == \
        [wrote[o] for o in range(start, end)]
    for e, first in epochs[:-1]:
        nxt = min((o for o, w in wrote.items() if w > e), default=end)
        assert end_offset_for(epochs, e, end) == (e, nxt) and first <= nxt


def test_the_manifest_keeps_the_history_and_refuses_a_bad_one():
    m = Manifest(topic="t", partition=0, version=3, leader_epoch=4, next_offset=9,
                 epochs=((2, 0), (4, 6)))
    assert Manifest.from_json(m.to_json(), path="p").epochs == ((2, 0), (4, 6))
    old = json.loads(m.to_json())
    del old["epochs"]                       # a manifest written before the history
    assert Manifest.from_json(json.dumps(old).encode(), path="p").epochs == ()
    for bad in ([[4, 0], [2, 6]], [[2, 6], [4, 6]], [[2, "0"]], [[2]], {"2": 0}):
        doc = {**old, "epochs": bad}
        with pytest.raises(CorruptManifest, match="epochs"):
            Manifest.from_json(json.dumps(doc).encode(), path="p")
    assert leader_epochs.parse([]) == ()
