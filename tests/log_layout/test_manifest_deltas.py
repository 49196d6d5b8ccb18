"""Appends between checkpoints are stored as deltas of the version before (manifest.py).

On every backend: which versions are whole, a reader with no cache reads through a
chain of deltas, a reader holding the version before applies one, and a damaged
delta is a typed error.
"""

from __future__ import annotations

import json

import pytest

from log_layout import CorruptManifest, open_log
from log_layout import versions as versions_module
from log_layout.manifest import CHECKPOINT_INTERVAL, Manifest
from tests.log_layout.helpers import table, values


def _stored(p, version):
    return Manifest.from_file(p.versions.read_file(p.versions.path(version)),
                              path=f"v{version}")


def test_appends_between_checkpoints_are_deltas(part, store):
    w = part.claim("w")  # version 1: a claim, whole
    for i in range(2 * CHECKPOINT_INTERVAL + 3):
        w.append(table(i, 1))
    top = part.snapshot()
    for v in range(top.version + 1):
        m, delta_of = _stored(part, v)
        if v <= 1 or v % CHECKPOINT_INTERVAL == 0:  # create, claim, checkpoints: whole
            assert delta_of is None and len(m.segments) == max(0, v - 1)
        else:
            assert delta_of == v - 1 and len(m.segments) == 1  # its own segment only
    # a reader with no cache goes back to the last whole version; one with the version
    # before applies one delta; both see what the writer committed
    url, options = store
    cold = open_log(url, storage_options=options).partition("t", 0)
    assert cold.snapshot() == top
    w.append(table(100, 1))
    assert cold.snapshot() == part.snapshot()
    assert cold.read_table(0).column("value").to_pylist() == values(0, top.next_offset) \
        + values(100, 1)
    assert all(cold.version(v).version == v for v in range(top.version + 1))


def test_a_delta_round_trips_and_refuses_the_wrong_parent(part):
    w = part.claim("w")
    w.append(table(0, 3))
    parent = part.snapshot()
    w.append(table(3, 2))
    new = part.snapshot()
    assert new.is_delta_of(parent) and not parent.is_delta_of(new)
    delta, delta_of = Manifest.from_file(new.to_json(delta_of=parent), path="p")
    assert delta_of == parent.version and delta.on_top_of(parent, path="p") == new
    with pytest.raises(CorruptManifest, match="delta of version"):
        delta.on_top_of(new, path="p")
    with pytest.raises(CorruptManifest, match="not a whole manifest"):
        Manifest.from_json(new.to_json(delta_of=parent), path="p")
    doc = json.loads(new.to_json(delta_of=parent))
    assert doc["format"] == 2  # a reader that predates deltas refuses it (format 1 only)
    for bad in (parent.version - 1, str(parent.version), None):
        doc["delta_of"] = bad
        with pytest.raises(CorruptManifest, match="cannot be a delta of"):
            Manifest.from_file(json.dumps(doc).encode(), path="p")
    assert json.loads(new.to_json())["format"] == 1  # whole versions read as before


def test_a_chain_longer_than_the_interval_is_corrupt(part, store, monkeypatch):
    w = part.claim("w")
    for i in range(6):  # versions 2..7: deltas
        w.append(table(i, 1))
    url, options = store
    cold = open_log(url, storage_options=options).partition("t", 0)  # no cache: the
    # chain is read from the store
    monkeypatch.setattr(versions_module, "CHECKPOINT_INTERVAL", 4)  # at most 3 in a row
    with pytest.raises(CorruptManifest, match="more than 3 deltas in a row"):
        cold.version(7)
    assert cold.version(4).next_offset == 3  # 4 -> 3 -> 2 -> 1 (whole): 3 deltas
