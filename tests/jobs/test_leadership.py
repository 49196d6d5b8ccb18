"""The driver's leadership keeper over a real local store: live slots, failover, fencing."""

from __future__ import annotations

import collections

import pytest

from jobs.broker_app import SlotState
from jobs.leadership import DriverFenced, LeadershipKeeper
from log_layout import open_log
from log_layout.brokers import OFFSETS_TOPIC, BrokerRegistry


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def log(tmp_path):
    lg = open_log(str(tmp_path / "store"))
    lg.create_topic("clicks", {"partitions": 6})
    return lg


def slots(*up: bool) -> list[SlotState]:
    return [SlotState(s, 9000 + s, host="127.0.0.1", url=f"http://127.0.0.1:{9000 + s}", up=u)
            for s, u in enumerate(up)]


def keeper(log, clock, n=3, **kw) -> LeadershipKeeper:
    k = LeadershipKeeper(log, n, clock=clock, out=lambda line: None, startup_grace_s=10,
                         failover_s=3, topics_every_s=0, topic_configs_every_s=0,
                         registrations_every_s=0, hint_every_s=0, **kw)
    k.start({"application": "app-test"})
    return k


def test_every_partition_and_coordinator_gets_a_live_leader_evenly(log):
    clock = Clock()
    k = keeper(log, clock)
    a = k.tick(slots(True, True, True))
    assert a is not None and a.live == (0, 1, 2)
    assert collections.Counter(a.partitions["clicks"]) == {0: 2, 1: 2, 2: 2}
    assert sorted(collections.Counter(a.partitions[OFFSETS_TOPIC]).values()) == [16, 17, 17]
    assert BrokerRegistry(log.store).assignment() == a
    assert k.tick(slots(True, True, True)) is None  # nothing changed: nothing written


def test_a_silent_slot_keeps_its_partitions_for_the_failover_time_then_loses_them(log):
    clock = Clock()
    k = keeper(log, clock)
    first = k.tick(slots(True, True, True))
    clock.now += 2.9
    assert k.tick(slots(True, False, True)) is None  # within failover_s: a quick restart
    clock.now += 0.2
    moved = k.tick(slots(True, False, True))
    assert moved is not None and moved.live == (0, 2)
    assert 1 not in moved.partitions["clicks"] and 1 not in moved.partitions[OFFSETS_TOPIC]
    # sticky: partitions of the live slots stayed where they were
    for p, s in enumerate(first.partitions["clicks"]):
        if s != 1:
            assert moved.partitions["clicks"][p] == s
    # back up: it gets a fair share again
    back = k.tick(slots(True, True, True))
    assert back is not None and collections.Counter(back.partitions["clicks"])[1] == 2


def test_a_new_topic_is_assigned_where_the_gateways_already_send_it(log):
    clock = Clock()
    k = keeper(log, clock)
    before = k.tick(slots(True, True, True))
    log.create_topic("views", {"partitions": 3})
    after = k.tick(slots(True, True, True))
    assert after is not None
    for p in range(3):  # the fallback every gateway computes alike before the driver writes
        assert after.partitions["views"][p] == before.leader_slot("views", p)


def test_a_restarted_driver_takes_over_and_the_old_one_is_fenced(log):
    clock = Clock()
    old = keeper(log, clock)
    first = old.tick(slots(True, True, True))
    new = keeper(log, clock)
    assert new.epoch == old.epoch + 1 and new.current == first
    taken = new.tick(slots(True, True, True))
    assert taken is not None and taken.driver_epoch == new.epoch
    assert taken.partitions == first.partitions  # a takeover moves nothing
    clock.now += 10  # the old driver's heartbeat or next assignment finds the newer epoch
    with pytest.raises(DriverFenced):
        old.tick(slots(True, False, True))
    assert BrokerRegistry(log.store).assignment().driver_epoch == new.epoch


def test_a_never_started_slot_is_given_up_after_the_startup_grace(log):
    clock = Clock()
    k = keeper(log, clock)
    assert k.tick(slots(True, True, False)).live == (0, 1, 2)
    clock.now += 11
    assert k.tick(slots(True, True, False)).live == (0, 1)


def test_the_copy_of_the_newest_assignment_is_kept_and_put_back_after_a_race(log):
    """Gateways read ``assignment.json`` (one read) and list only now and then; an old
    driver's copy that overwrote the newest is put back at the next tick."""
    clock = Clock()
    k = keeper(log, clock)
    a = k.tick(slots(True, True, True))
    registry = BrokerRegistry(log.store)
    assert registry.latest() == a
    stale = type(a)(a.driver_epoch - 1, 99, a.slots, a.live, a.partitions)
    registry.write_latest(stale)  # a racing old driver's copy
    assert registry.latest().name < a.name and registry.assignment() == a
    assert k.tick(slots(True, True, True)) is None  # nothing new to decide ...
    assert registry.latest() == a  # ... but the copy is the newest again
