"""State the group coordinator holds: lookups keep none, empty groups are dropped,
session timeouts and client-given strings are bounded (issue 11, "state that grows
without bound"). The coordinator directly with an injected clock, then the same
bounds through a real gateway."""

from __future__ import annotations

import threading
import uuid

import pytest

from ingest_gateway.errors import (GroupFieldTooLong, InvalidSessionTimeout, UnknownGroup,
                                   UnknownMemberId)
from ingest_gateway.server.groups.coordinator import GroupCoordinator
from ingest_gateway.server.groups.state import MAX_CLIENT_ID_CHARS, MAX_METADATA_CHARS


@pytest.fixture
def coord(local_log, clock):
    local_log.create_topic("t", {"partitions": 3})
    # the gateway's bounds (Kafka's defaults)
    return GroupCoordinator(local_log, now_ms=clock, default_session_timeout_ms=10_000,
                            min_session_timeout_ms=6000, max_session_timeout_ms=1_800_000)


# -- lookups keep no state -----------------------------------------------------------------
def test_20000_unknown_group_lookups_keep_nothing_in_memory(coord):
    coord.join("live", ["t"])  # one real group, so "unchanged" is not "empty by accident"
    before = coord.groups_in_memory()
    assert before == 1
    lookups = [  # (call, the error it must raise; None: answers {})
        (lambda g: coord.committed(g), None),
        (lambda g: coord.committed(g, [("t", 0)]), None),
        (lambda g: coord.describe(g), UnknownGroup),
        (lambda g: coord.heartbeat(g, "m-1", 0), UnknownMemberId),
        (lambda g: coord.leave(g, "m-1"), UnknownMemberId),
        (lambda g: coord.state(g, "m-1"), UnknownMemberId),
        (lambda g: coord.commit(g, {("t", 0): 0}, member_id="m-1", generation=1),
         UnknownMemberId),
        (lambda g: coord.join(g, ["t"], member_id="m-1"), UnknownMemberId),
    ]
    for i in range(20_000):
        call, error = lookups[i % len(lookups)]
        if error is None:
            assert call(f"nobody-{i}") == {}
        else:
            with pytest.raises(error):
                call(f"nobody-{i}")
    assert coord.groups_in_memory() == before
    assert coord.groups() == ["live"]


def test_a_group_is_dropped_when_its_last_member_leaves_and_comes_back_whole(coord, clock):
    a = coord.join("g", ["t"])
    coord.commit("g", {("t", 1): 0}, member_id=a.member_id, generation=a.generation)
    coord.leave("g", a.member_id)
    assert coord.groups_in_memory() == 0
    # everything worth keeping was in the store: offsets, and the generation (ids never repeat)
    assert coord.committed("g") == {("t", 1): 0}
    d = coord.describe("g")
    assert d.state == "Empty" and d.generation == 1 and coord.groups_in_memory() == 0
    b = coord.join("g", ["t"])
    assert b.generation == 2 and coord.committed("g") == {("t", 1): 0}


def test_a_group_whose_members_expire_is_dropped_by_expire(coord, clock):
    a = coord.join("g", ["t"], session_timeout_ms=6000)
    clock.t += 5999
    assert coord.expire() == [] and coord.groups_in_memory() == 1
    clock.t += 1
    assert coord.expire() == [("g", a.member_id)]
    assert coord.groups_in_memory() == 0


def test_a_member_less_commit_keeps_no_state_and_loses_no_concurrent_commit(coord):
    # assign() consumers commit without a membership; many at once to one group:
    # the group is held while any of them is under way, so no update is lost
    errors = []

    def commit(p, offset):
        try:
            coord.commit("solo", {("t", p): offset})
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=commit, args=(i % 3, 0)) for i in range(12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert errors == [] and coord.groups_in_memory() == 0
    assert coord.committed("solo") == {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}


# -- bounds on what a client gives -----------------------------------------------------------
@pytest.mark.parametrize("session", [10**23, 5999, 1_800_001, 0, -1, 2.5, True])
def test_session_timeout_outside_the_bounds_is_refused(coord, session):
    with pytest.raises(InvalidSessionTimeout) as e:
        coord.join("g", ["t"], session_timeout_ms=session)
    assert "6000" in str(e.value) and "1800000" in str(e.value) and repr(session) in str(e.value)
    assert coord.groups_in_memory() == 0


def test_session_timeout_at_the_bounds_is_taken(coord):
    for session in (6000, 1_800_000):
        s = coord.join("g", ["t"], session_timeout_ms=session)
        assert coord.describe("g").members[-1]["session_timeout_ms"] in (6000, 1_800_000)
        coord.leave("g", s.member_id)


def test_rebalance_timeout_is_an_int32(coord):
    with pytest.raises(ValueError, match="rebalance.timeout.ms"):
        coord.join("g", ["t"], rebalance_timeout_ms=10**23)


def test_client_id_and_metadata_are_bounded(coord):
    with pytest.raises(GroupFieldTooLong, match="client_id .* 256 characters, more than 255"):
        coord.join("g", ["t"], client_id="c" * (MAX_CLIENT_ID_CHARS + 1))
    s = coord.join("g", ["t"], client_id="c" * MAX_CLIENT_ID_CHARS)
    with pytest.raises(GroupFieldTooLong, match="metadata"):
        coord.commit("g", {("t", 0): 0}, member_id=s.member_id, generation=s.generation,
                     metadata="m" * (MAX_METADATA_CHARS + 1))
    coord.commit("g", {("t", 0): 0}, member_id=s.member_id, generation=s.generation,
                 metadata="m" * MAX_METADATA_CHARS)


# -- the same through a real gateway (group.min/max.session.timeout.ms defaults) -------------
def test_gateway_answers_400_for_bad_session_timeouts_and_long_client_ids(gateway, topic):
    group = f"g-{uuid.uuid4().hex[:8]}"
    status, body, _ = gateway.request("POST", f"/groups/{group}/members",
                                      body={"topics": [topic], "session_timeout_ms": 10**23})
    assert status == 400 and body["error"] == "invalid_session_timeout"
    assert body["error_code"] == 40013 and str(10**23) in body["message"]
    assert "6000" in body["message"] and "1800000" in body["message"]
    status, body, _ = gateway.request("POST", f"/groups/{group}/members",
                                      body={"topics": [topic], "client_id": "x" * 100_000})
    assert status == 400 and body["error"] == "field_too_long" and "255" in body["message"]
    status, body, _ = gateway.request("POST", f"/consumers/{group}",
                                      body={"name": "short", "session.timeout.ms": 1000})
    assert status == 400 and body["error"] == "invalid_session_timeout"
    status, body, _ = gateway.request("POST", f"/consumers/{group}",
                                      body={"name": "x" * 250})
    assert status == 400 and body["error"] == "invalid_group_id"
    # none of it left a group behind
    assert gateway.request("GET", f"/groups/{group}")[0] == 404
    status, body, _ = gateway.request("POST", f"/groups/{group}/members",
                                      body={"topics": [topic], "session_timeout_ms": 6000})
    assert status == 200
    assert gateway.request("DELETE", f"/groups/{group}/members/{body['member_id']}")[0] == 204


def test_gateway_lookups_of_unknown_groups_answer_without_state(gateway):
    group = f"nobody-{uuid.uuid4().hex[:8]}"
    assert gateway.request("GET", f"/groups/{group}")[0] == 404
    status, body, _ = gateway.request("GET", f"/groups/{group}/offsets")
    assert status == 200 and body == {"offsets": []}
    status, body, _ = gateway.request("POST", f"/groups/{group}/members/m-1/heartbeat", body={})
    assert status == 404 and body["error"] == "unknown_member_id"
    assert gateway.request("DELETE", f"/groups/{group}/members/m-1")[0] == 404
    assert group not in gateway.request("GET", "/groups")[1]["groups"]
