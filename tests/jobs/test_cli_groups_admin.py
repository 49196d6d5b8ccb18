"""``sparklog groups reset-offsets | delete | delete-offsets | describe --members/--state/
--all-groups`` against a real gateway subprocess on a local store (issue 16)."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from ingest_gateway.client import Consumer, Producer
from log_layout import open_log
from tests.jobs.cli_proc import NO_GATEWAY, assert_one_line_error, sparklog, text

#: slow (not in ``make test-fast``, issue 28): dozens of CLI processes beside a
#: gateway and live consumers; 200 s in all, measured beside three other workers
pytestmark = pytest.mark.slow

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z: record i of a partition has time T0 + i s


@pytest.fixture
def topic(local_gateway):
    """A 2-partition topic of 6 records per partition, record i at T0 + i seconds."""
    gw, store = local_gateway
    name = f"g-{uuid.uuid4().hex[:8]}"
    open_log(store).create_topic(name, {"partitions": 2})
    with Producer(gw.url, linger_ms=0) as producer:
        for p in range(2):
            for i in range(6):
                producer.send(name, f"v{i}", key=f"k{i}", partition=p, timestamp=T0 + i * 1000)
    return name


def _committed(store: str, group: str) -> dict[tuple[str, int], int]:
    doc = open_log(store).read_group_offsets(group) or {}
    return {(t, int(p)): e["offset"] for t, ps in doc.get("offsets", {}).items()
            for p, e in ps.items()}


def _cli(gw, store, *args):
    return sparklog(*args, "--store", store, "--bootstrap-server", gw.url)


def _commit(gw, group, topic, offsets):
    status, body, _ = gw.request("POST", f"/groups/{group}/offsets", body={"offsets": [
        {"topic": topic, "partition": p, "offset": o} for p, o in offsets.items()]})
    assert status == 204, body


def _wait(condition, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"


def test_reset_offsets_dry_run_changes_nothing_and_execute_commits_the_plan(local_gateway, topic):
    gw, store = local_gateway
    group = f"grp-{uuid.uuid4().hex[:6]}"
    _commit(gw, group, topic, {0: 1, 1: 1})
    run = _cli(gw, store, "groups", "reset-offsets", group, "--topic", topic,
               "--to-datetime", "2023-11-14T22:13:23Z")
    out, err = text(run)
    assert run.returncode == 0, err
    header, *rows = out.splitlines()[:3]
    assert header.split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET",
                              "LOG-START", "LOG-END-OFFSET"]
    assert [r.split()[1:5] for r in rows] == [[topic, "0", "1", "3"], [topic, "1", "1", "3"]]
    assert "dry run: nothing changed" in out
    assert _committed(store, group) == {(topic, 0): 1, (topic, 1): 1}
    # --execute: the first record at or after 22:13:23.5 is offset 4 in both partitions
    written_by = open_log(store).read_group_offsets(group)["write_id"]
    run = _cli(gw, store, "groups", "reset-offsets", group, "--topic", topic,
               "--to-datetime", "2023-11-14T23:13:23.500+01:00", "--execute", "--yes")
    assert run.returncode == 0, text(run)
    assert _committed(store, group) == {(topic, 0): 4, (topic, 1): 4}
    # committed by the coordinator (each of its writes has a fresh write_id), not around it
    assert open_log(store).read_group_offsets(group)["write_id"] not in (None, written_by)
    # the other ways, on some partitions only; --shift-by and --to-offset are clamped
    for flags, expected in ((["--topic", f"{topic}:1", "--shift-by", "-2"], {1: 2}),
                            (["--all-topics", "--to-earliest"], {0: 0, 1: 0}),
                            (["--topic", f"{topic}:0", "--to-latest"], {0: 6, 1: 0}),
                            (["--topic", topic, "--to-offset", "99"], {0: 6, 1: 6}),
                            (["--topic", f"{topic}:0", "--shift-by", "-100"], {0: 0, 1: 6}),
                            (["--topic", topic, "--to-datetime", "2030-01-01"], {0: 6, 1: 6})):
        run = _cli(gw, store, "groups", "reset-offsets", group, *flags, "--execute", "--yes")
        assert run.returncode == 0, (flags, text(run))
        got = _committed(store, group)
        assert {p: got[(topic, p)] for p in expected} == expected, flags
    # the gateway sees what was committed: describe's lag follows it
    run = _cli(gw, store, "groups", "describe", group, "--json")
    lags = {p["partition"]: p["lag"] for p in json.loads(text(run)[0])["partitions"]}
    assert lags == {0: 0, 1: 0}


def test_reset_and_delete_refuse_a_group_with_an_active_member(local_gateway, topic):
    gw, store = local_gateway
    group = f"grp-{uuid.uuid4().hex[:6]}"
    _commit(gw, group, topic, {0: 2, 1: 2})
    with Consumer(gateway=gw.url, group_id=group, auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        consumer.subscribe([topic])
        _wait(lambda: consumer.poll(0.2) is not None and consumer.assignment(), "an assignment")
        for action in (["reset-offsets", group, "--topic", topic, "--to-earliest", "--execute",
                        "--yes"], ["delete", group, "--yes"],
                       ["delete-offsets", group, "--topic", topic, "--yes"]):
            assert_one_line_error(_cli(gw, store, "groups", *action), f"'{group}'",
                                  "1 active member (", "stop its consumers first")
        assert _committed(store, group) == {(topic, 0): 2, (topic, 1): 2}
        run = _cli(gw, store, "groups", "describe", group, "--members")
        out = text(run)[0]
        assert run.returncode == 0 and "1 member" in out and "2 members" not in out, out
        row = out.splitlines()[2].split()
        assert row[2:4] == ["classic", "-"], out  # protocol; an epoch only for KIP-848
        assert row[4] == "2" and row[5].startswith("20") and row[5].endswith("Z"), out
        assert row[6:] == [f"{topic}-0,", f"{topic}-1", "-"], out
        run = _cli(gw, store, "groups", "describe", group, "--state")
        assert text(run)[0].splitlines()[1].split()[:3] == [group, "classic", "Stable"], \
            text(run)
    # the member left: the same reset goes through
    run = _cli(gw, store, "groups", "reset-offsets", group, "--topic", topic, "--to-earliest",
               "--execute", "--yes")
    assert run.returncode == 0, text(run)
    assert _committed(store, group) == {(topic, 0): 0, (topic, 1): 0}


def test_reset_without_a_gateway_commits_to_the_store(local_gateway, topic):
    """No gateway answers: the store's document says who the members are, and the new
    offsets go straight to it (no coordinator holds an empty group to overwrite them)."""
    gw, store = local_gateway
    group = f"grp-{uuid.uuid4().hex[:6]}"
    _commit(gw, group, topic, {0: 5, 1: 5})
    run = sparklog("groups", "reset-offsets", group, "--all-topics", "--shift-by", "-3",
                   "--execute", "--yes", "--store", store, "--bootstrap-server", NO_GATEWAY)
    assert run.returncode == 0, text(run)
    assert _committed(store, group) == {(topic, 0): 2, (topic, 1): 2}
    doc = open_log(store).read_group_offsets(group)
    open_log(store).write_group_offsets(group, {**doc, "members": [
        {"member_id": "m-1", "client_id": "c", "topics": [topic], "strategies": ["range"],
         "session_timeout_ms": 10000, "rebalance_timeout_ms": 60000, "assignment": []}]})
    assert_one_line_error(sparklog("groups", "reset-offsets", group, "--all-topics",
                                   "--to-earliest", "--execute", "--yes", "--store", store,
                                   "--bootstrap-server", NO_GATEWAY),
                          "1 active member (m-1, as its store document says")
    assert _committed(store, group) == {(topic, 0): 2, (topic, 1): 2}


def test_delete_offsets_then_delete_group(local_gateway, topic):
    gw, store = local_gateway
    other = f"o-{uuid.uuid4().hex[:8]}"
    open_log(store).create_topic(other, {"partitions": 1})
    group = f"grp-{uuid.uuid4().hex[:6]}"
    _commit(gw, group, topic, {0: 3, 1: 4})
    _commit(gw, group, other, {0: 0})
    run = _cli(gw, store, "groups", "delete-offsets", group, "--topic", f"{topic}:1", "--yes")
    assert run.returncode == 0 and "deleted 1 committed offset of" in text(run)[0], text(run)
    assert _committed(store, group) == {(topic, 0): 3, (other, 0): 0}
    assert _cli(gw, store, "groups", "delete-offsets", group, "--topic", topic,
                "--yes").returncode == 0
    assert _committed(store, group) == {(other, 0): 0}
    run = _cli(gw, store, "groups", "describe", "--all-groups", "--state")
    assert group in text(run)[0], text(run)
    # no terminal and no --yes: refused, nothing deleted
    assert_one_line_error(_cli(gw, store, "groups", "delete", group), "add --yes")
    assert group in open_log(store).groups()
    run = _cli(gw, store, "groups", "delete", group, "--yes")
    assert run.returncode == 0, text(run)
    assert group not in open_log(store).groups()
    assert_one_line_error(_cli(gw, store, "groups", "describe", group), f"'{group}'")
    assert_one_line_error(_cli(gw, store, "groups", "delete", group, "--yes"),
                          f"consumer group '{group}' has no members and no committed offsets")


def test_hostile_arguments_are_one_line_errors(local_gateway, topic):
    gw, store = local_gateway
    group = f"grp-{uuid.uuid4().hex[:6]}"
    reset = ("groups", "reset-offsets", group)
    for args, needles in (
            (["--topic", topic, "--to-datetime", "yesterday"], ["--to-datetime", "ISO 8601"]),
            (["--topic", topic, "--to-datetime", "2023-02-30T00:00:00"], ["--to-datetime"]),
            (["--topic", topic, "--to-datetime", "1969-12-31T23:59:59Z"], ["before 1970"]),
            (["--topic", "nope", "--to-earliest"], ["topic 'nope' does not exist"]),
            (["--topic", f"{topic}:7", "--to-earliest"], ["7"]),
            (["--topic", f"{topic}:x", "--to-earliest"], ["partition 'x'"]),
            (["--topic", topic, "--shift-by", "1"], ["no committed offset", "to shift"]),
            (["--all-topics", "--to-earliest"], ["has no committed offsets"])):
        assert_one_line_error(_cli(gw, store, *reset, *args), *needles)
    for args in (["--topic", topic, "--to-offset", "-1"],  # argparse: usage + one line
                 ["--topic", topic, "--shift-by", "1.5"], ["--topic", topic, "--shift-by", "+2"],
                 ["--topic", topic], ["--to-earliest"],
                 ["--topic", topic, "--to-earliest", "--to-latest"],
                 ["--topic", topic, "--to-earliest", "--dry-run", "--execute"]):
        run = _cli(gw, store, *reset, *args)
        out, err = text(run)
        assert run.returncode == 2 and "Traceback" not in err, err
        assert err.strip().splitlines()[-1].startswith("sparklog groups reset-offsets: error:")
    assert_one_line_error(_cli(gw, store, "groups", "reset-offsets", "bad/name", "--topic",
                               topic, "--to-earliest"), "bad/name")
    assert_one_line_error(_cli(gw, store, "groups", "describe"), "--all-groups")
    assert _committed(store, group) == {}
