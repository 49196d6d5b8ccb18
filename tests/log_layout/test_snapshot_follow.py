"""A reader's snapshot refresh follows new manifest versions one by one, without listing.

A reader that keeps up (a direct consumer polling a busy partition) refreshes its
snapshot after every commit; listing the manifest folder each time cost as much as
the folder is long, so a direct consumer's latency grew with the folder (~200 ms
after ~2,400 versions). ``Versions._follow`` reads the next versions by name and
lists only when it is far behind or its cached version is gone.
"""

from __future__ import annotations

import pytest

from log_layout import open_log
from log_layout.versions import FOLLOW_MAX
from tests.conftest import make_log_url
from tests.log_layout.helpers import table


@pytest.fixture(params=["file", "memory"])
def url(request, tmp_path):
    return make_log_url(request.param, request, tmp_path)[0]


class Counting:
    """Wraps a store, counting its listings."""

    def __init__(self, store):
        self.store, self.lists = store, 0
        original = store.list

        def counted(folder):
            self.lists += 1
            return original(folder)
        store.list = counted


def writer_and_reader(url):
    """A writer's partition ``t``-0 and the same partition seen by another Log (another
    process's view: it learns of commits only from the store)."""
    w = open_log(url)
    w.create_topic("t")
    writer = w.partition("t", 0).claim("test")
    reader_log = open_log(url)
    part = reader_log.partition("t", 0)
    return writer, part, Counting(reader_log.store)


def newest(url):
    """The newest snapshot as a fresh reader lists it."""
    return open_log(url).partition("t", 0).snapshot()


def same(a, b) -> bool:
    return (a.version, a.next_offset, [s.file for s in a.segments]) == \
        (b.version, b.next_offset, [s.file for s in b.segments])


def test_a_reader_that_keeps_up_never_lists(url):
    writer, part, counted = writer_and_reader(url)
    part.snapshot()
    listed = counted.lists
    # across whole versions and deltas (a checkpoint every 16 versions)
    for i in range(40):
        writer.append(table(i, 1))
        got = part.snapshot()
        assert got.next_offset == i + 1
        assert same(got, newest(url))
    assert counted.lists == listed


def test_several_versions_behind_are_read_one_by_one(url):
    writer, part, counted = writer_and_reader(url)
    part.snapshot()
    listed = counted.lists
    for i in range(FOLLOW_MAX):
        writer.append(table(i, 2))
    got = part.snapshot()
    assert counted.lists == listed
    assert got.next_offset == 2 * FOLLOW_MAX and same(got, newest(url))


def test_far_behind_lists_once(url):
    writer, part, counted = writer_and_reader(url)
    part.snapshot()
    listed = counted.lists
    for i in range(FOLLOW_MAX + 3):
        writer.append(table(i, 1))
    got = part.snapshot()
    assert counted.lists == listed + 1
    assert got.next_offset == FOLLOW_MAX + 3 and same(got, newest(url))


def test_a_vacuumed_cached_version_falls_back_to_listing(url):
    writer, part, counted = writer_and_reader(url)
    part.snapshot()
    for i in range(20):
        writer.append(table(i, 1))
    # vacuum deletes old versions oldest first, never the last whole one (every 16th)
    # or any after it: the reader's cached version and the next ones are gone
    part.store.delete([part.versions.path(v) for v in range(16)])
    got = part.snapshot()
    assert counted.lists >= 1
    assert got.next_offset == 20 and same(got, newest(url))
