"""How DirectReader.fetch waits: probes whose interval grows with the time no records came.

The clock and the sleep are the test's: nothing here waits for real time.
"""

from __future__ import annotations

import pytest

from log_layout import open_log
from log_layout.direct_reader import PROBE_MIN_S, DirectReader
from tests.log_layout.helpers import table

TP = ("t", 0)


class FakeTime:
    """A clock that only moves when the reader sleeps; ``at`` runs actions at set times."""

    def __init__(self):
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.actions: list[tuple[float, object]] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s
        due = [a for a in self.actions if a[0] <= self.now]
        for a in due:
            self.actions.remove(a)
            a[1]()

    def at(self, t: float, action) -> None:
        self.actions.append((t, action))


@pytest.fixture
def setup(tmp_path):
    log = open_log(str(tmp_path / "store"), fsync=False)
    log.create_topic("t")
    writer = log.partition("t", 0).claim("test")
    ft = FakeTime()
    reader = DirectReader(open_log(str(tmp_path / "store")), backoff_max_ms=10,
                          clock=ft.clock, sleep=ft.sleep)
    return writer, reader, ft


def test_an_idle_partition_is_probed_less_and_less_often_up_to_the_maximum(setup):
    _, reader, ft = setup
    got, errors = reader.fetch({TP: 0}, 100, wait_ms=2000)
    assert got == [] and errors == {}
    assert ft.sleeps[0] == PROBE_MIN_S
    assert ft.sleeps == sorted(ft.sleeps[:-1]) + ft.sleeps[-1:]  # never shorter (but the last)
    assert max(ft.sleeps) == pytest.approx(0.010)
    assert sum(ft.sleeps) == pytest.approx(2.0)
    # 2 s at 10 ms at most, yet far fewer probes than one per ms
    assert 200 <= len(ft.sleeps) < 400


def test_records_arriving_are_seen_at_the_next_short_probe(setup):
    writer, reader, ft = setup
    ft.at(ft.now + 0.0035, lambda: writer.append(table(0, 3)))
    got, _ = reader.fetch({TP: 0}, 100, wait_ms=500)
    assert [b.num_rows for _, b, _ in got] == [3]
    assert ft.sleeps == [PROBE_MIN_S] * 4  # probed every ms: seen within 1 ms


def test_the_interval_counts_from_the_last_records_not_from_each_fetch(setup):
    writer, reader, ft = setup
    writer.append(table(0, 1))
    assert reader.fetch({TP: 0}, 100, wait_ms=0)[0]  # records now
    # a busy partition: the next fetch keeps probing every ms
    ft.at(ft.now + 0.0045, lambda: writer.append(table(1, 1)))
    reader.fetch({TP: 1}, 100, wait_ms=500)
    assert ft.sleeps == [PROBE_MIN_S] * 5
    # a long quiet spell: fetches that find nothing ...
    first_waits = []
    for _ in range(5):
        ft.sleeps.clear()
        reader.fetch({TP: 2}, 100, wait_ms=200)
        first_waits.append(ft.sleeps[0])
    # ... do not start again at 1 ms each (a fetch-scoped backoff did)
    assert first_waits[0] == PROBE_MIN_S
    assert first_waits[1:] == [pytest.approx(0.010)] * 4


def test_the_maximum_bounds_the_interval(setup):
    _, reader, ft = setup
    assert reader.probe_interval(ft.now) == PROBE_MIN_S
    assert reader.probe_interval(ft.now + 0.032) == pytest.approx(0.002)
    assert reader.probe_interval(ft.now + 3600) == pytest.approx(0.010)
