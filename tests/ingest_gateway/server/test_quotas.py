"""Byte-rate quotas (``ingest_gateway.security.quotas``): Kafka's windowed rate and
throttle time, computed by hand for a clock the test sets, precedence, refreshes."""

from __future__ import annotations

import pytest

import conf
from ingest_gateway.security.quotas import QuotaManager, Rate
from log_layout import open_log, quotas


def manager(log, **set_quotas) -> QuotaManager:
    for who, configs in set_quotas.items():
        quotas.alter_quotas(log.store, "<default>" if who == "default" else f"User:{who}",
                            add=configs)
    return QuotaManager(log, conf.load(), background=False)


def test_no_quota_costs_nothing_and_never_throttles(local_log):
    q = manager(local_log)
    assert q.record("User:a", "produce", 10**12, 0.0) == 0
    assert q._sensors == {}
    q = manager(local_log, bob={"producer_byte_rate": 10})
    assert q.record("User:a", "produce", 10**12, 0.0) == 0  # no quota of its own, no default
    assert q.record("User:bob", "fetch", 10**12, 0.0) == 0  # bob's quota is on producing
    assert q._sensors == {}


def test_throttle_time_as_kafka_computes_it(local_log):
    """quota 1000 B/s; the window counts at least 10 whole seconds (11 samples of 1 s)."""
    q = manager(local_log, alice={"producer_byte_rate": 1000})
    # 5000 B at t=0: 5000 B over 10 s = 500 B/s
    assert q.record("User:alice", "produce", 5000, 0.0) == 0
    # 10000 B over 10.5 s = 952 B/s: within
    assert q.record("User:alice", "produce", 5000, 0.5) == 0
    # t=1.0 starts a second sample; 12000 B over 10 s (1 s elapsed + 9 windows) = 1200 B/s:
    # (1200 - 1000) / 1000 * 10000 ms
    assert q.record("User:alice", "produce", 2000, 1.0) == 2000
    # more: 13000 B over 10.5 s = 1238.1 B/s -> 0.2381 * 10500 = 2500 ms
    assert q.record("User:alice", "produce", 1000, 1.5) == 2500
    # 11 s after the last record every sample has expired: 100 B over 10 s
    assert q.record("User:alice", "produce", 100, 12.5) == 0


def test_first_burst_over_the_whole_window(local_log):
    q = manager(local_log, alice={"producer_byte_rate": 1000})
    # 11000 B at once: 1100 B/s over 10 s -> 10% over -> 1000 ms
    assert q.record("User:alice", "produce", 11000, 100.0) == 1000


def test_throttle_is_capped_at_the_whole_window(local_log):
    q = manager(local_log, alice={"consumer_byte_rate": 1})
    assert q.record("User:alice", "fetch", 10**9, 0.0) == 11_000


def test_rate_over_many_windows_recycles_samples():
    """A steady 1000 B/s for 30 s, measured as Kafka measures it: 12 samples kept (11 and
    the one overlapping the window's start); at a sample boundary the oldest has just
    expired, so 11 samples span 10 s (1100 B/s), half a second later 10.5 s."""
    r = Rate()
    for t in range(30):
        r.record(1000, t * 1000.0)
    assert len(r.samples) == 12
    assert r.window_ms(29_000.0) == 10_000
    assert r.measure(29_000.0) == pytest.approx(1100)
    assert r.measure(29_500.0) == pytest.approx(11_000 / 10.5)


def test_user_quota_wins_over_the_default_config_by_config(local_log):
    q = manager(local_log, default={"producer_byte_rate": 100, "consumer_byte_rate": 100},
                alice={"producer_byte_rate": 100_000})
    assert q.record("User:alice", "produce", 2000, 0.0) == 0  # 200 B/s, her own 100000
    assert q.record("User:alice", "fetch", 2000, 0.0) == 10_000  # the default 100: 200 B/s
    assert q.record("User:bob", "produce", 2000, 0.0) == 10_000  # the default's, his own
    assert q.record("User:carol", "produce", 1000, 0.0) == 0  # not shared with bob


def test_produce_and_fetch_are_measured_apart(local_log):
    q = manager(local_log, alice={"producer_byte_rate": 1000, "consumer_byte_rate": 1000})
    assert q.record("User:alice", "produce", 10_000, 0.0) == 0
    assert q.record("User:alice", "fetch", 10_000, 0.0) == 0
    assert q.record("User:alice", "produce", 1000, 0.0) == 1000


def test_unknown_kind_is_a_bug(local_log):
    q = manager(local_log, alice={"producer_byte_rate": 1000})
    with pytest.raises(ValueError, match="produce"):
        q.record("User:alice", "write", 1, 0.0)


def test_refresh_picks_up_a_change_made_through_another_log(tmp_path):
    q = QuotaManager(open_log(str(tmp_path / "s")), conf.load(), background=False)
    other = open_log(str(tmp_path / "s"))
    quotas.alter_quotas(other.store, "User:alice", add={"producer_byte_rate": 1000})
    assert q.record("User:alice", "produce", 11_000, 0.0) == 0  # not yet known
    assert q.refresh() and not q.refresh()
    assert q.record("User:alice", "produce", 11_000, 0.0) == 1000  # counted from now on
    quotas.alter_quotas(other.store, "User:alice", delete=["producer_byte_rate"])
    assert q.refresh() and q.record("User:alice", "produce", 10**9, 0.0) == 0


def test_idle_sensors_are_forgotten(local_log):
    q = manager(local_log, default={"producer_byte_rate": 1000})
    for i in range(100):
        q.record(f"User:u{i}", "produce", 1, 0.0)
    assert len(q._sensors) == 100
    q.record("User:late", "produce", 1, 11.0)
    assert set(q._sensors) == {(("User:late", ""), "produce")}


def test_the_thread_stops_on_close(local_log):
    with QuotaManager(local_log, conf.load({"authorizer.refresh.ms": 10})) as q:
        assert q._refresher is not None
    assert q._refresher is None


def test_client_id_quotas_take_kafkas_precedence_and_share_sensors(local_log):
    """Client-id and user+client-id quotas (Kafka's eight levels): the most specific
    entity with the config wins, and a ``Client:app`` quota is one sensor for every
    user of ``app`` while a default is each one's own."""
    from log_layout import quotas as quota_docs

    quotas.alter_quotas(local_log.store, "Client:app", add={"producer_byte_rate": 1000})
    quotas.alter_quotas(local_log.store, "User:alice/Client:app",
                            add={"producer_byte_rate": 100_000})
    quotas.alter_quotas(local_log.store, "Client:<default>", add={"request_percentage": 50})
    with QuotaManager(local_log, conf.load(), background=False) as q:
        found = q.quotas
        assert found.find("User:alice", "app", "producer_byte_rate") == \
            (100_000, ("User:alice", "app"))
        assert found.find("User:bob", "app", "producer_byte_rate") == (1000, ("", "app"))
        assert found.find("User:bob", "other", "producer_byte_rate") is None
        assert found.find("User:bob", "other", "request_percentage") == (50, ("", "other"))
        # bob and carol share app's 1000 B/s: bob's burst throttles carol
        assert q.record("User:bob", "produce", 5000, 10.0, "app") == 0
        assert q.record("User:carol", "produce", 20_000, 10.0, "app") > 0
        # alice's own user+client quota is hers alone
        assert q.record("User:alice", "produce", 20_000, 10.0, "app") == 0
        # request_percentage: 8 s of handling in the window is over 50% of a thread
        assert q.record("User:x", "request", 800, 10.0, "other") > 0
        assert q.record("User:x", "request", 1, 10.0, "another") == 0
