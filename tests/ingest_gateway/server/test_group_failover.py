"""Consumer groups across gateways of the broker application (issue 13), over real sockets.

Two gateway processes are slots 0 and 1 of one application on one store; the test
plays the driver and publishes the assignments (``BrokerRegistry.publish``), so it
decides which gateway coordinates a group (the leader of the group's partition of
the offsets topic). Members speak the group protocol routes with plain HTTP.
"""

from __future__ import annotations

import base64

import pyarrow as pa
import pytest

from ingest_gateway.client import Consumer
from jobs.gateway_process import GatewayProcess, wait_for
from log_layout.brokers import (
    OFFSETS_PARTITIONS,
    coordinator_partition,
)
from tests.ingest_gateway.slots import SlotApplication

#: slow (not in ``make test-fast``, issue 28): two or three gateways a test,
#: coordinators killed; 300 s in all, measured beside three other workers
pytestmark = pytest.mark.slow

TOPIC = "clicks"
PARTITIONS = 4
RECORDS = 5  # per partition, written before the gateways start
SESSION_MS = 60_000
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


class Application(SlotApplication):
    """Two gateway slots over one store, and the test as their driver."""

    def publish(self, coordinators: dict[str, int], live: tuple[int, ...] = (0, 1)) -> None:
        """A new assignment: ``coordinators`` group -> slot (other groups: the first live
        slot); the topic's partitions spread over the live slots."""
        owners = [live[0]] * OFFSETS_PARTITIONS
        for group, slot in coordinators.items():
            owners[coordinator_partition(group)] = slot
        self.publish_assignment({TOPIC: [live[p % len(live)] for p in range(PARTITIONS)]},
                                offsets=owners, live=live)

    def wait_coordinator(self, group: str, slot: int, others: tuple[int, ...] = ()) -> None:
        """Until gateway ``slot`` acts as the group's coordinator and each of ``others``
        refuses with not_coordinator naming it (each applies an assignment within 250 ms;
        a gateway with no assignment yet refuses too, but names no coordinator)."""
        def applied() -> bool:
            if probe(self.gateways[slot], group)[0] == 503:
                return False
            return all(probe(self.gateways[o], group) == (503, slot) for o in others)
        wait_for(applied, timeout=20, what=f"slot {slot} coordinating {group}")


def probe(gw: GatewayProcess, group: str) -> tuple[int, int | None]:
    """A heartbeat of a member nobody has: 404 at the coordinator, 503 elsewhere (with
    the coordinator's slot, None before the gateway has an assignment)."""
    status, body, _ = gw.request("POST", f"/groups/{group}/members/nobody/heartbeat",
                                 body={"generation": 0})
    return status, ((body or {}).get("coordinator") or {}).get("slot") if status == 503 else None


@pytest.fixture
def app(tmp_path):
    url = str(tmp_path / "store")
    a = Application(url)
    a.log.create_topic(TOPIC, {"partitions": PARTITIONS})
    for p in range(PARTITIONS):  # records to read (the gateways claim the partitions later)
        a.log.partition(TOPIC, p).claim("seed").append(pa.table({
            "key": [f"k{p}-{i}".encode() for i in range(RECORDS)],
            "value": [f"v{p}-{i}".encode() for i in range(RECORDS)]}))
    with a.running():
        yield a


def join(gw: GatewayProcess, group: str, member_id: str | None = None, client_id: str = "c"):
    status, body, _ = gw.request("POST", f"/groups/{group}/members", body={
        "topics": [TOPIC], "member_id": member_id, "client_id": client_id,
        "session_timeout_ms": SESSION_MS})
    assert status == 200, body
    return body


def heartbeat(gw: GatewayProcess, group: str, member_id: str, generation: int):
    return gw.request("POST", f"/groups/{group}/members/{member_id}/heartbeat",
                      body={"generation": generation})


def commit(gw: GatewayProcess, group: str, member: dict, offsets: dict[int, int]):
    return gw.request("POST", f"/groups/{group}/offsets", body={
        "member_id": member["member_id"], "generation": member["generation"],
        "offsets": [{"topic": TOPIC, "partition": p, "offset": o} for p, o in offsets.items()]})


def committed(gw: GatewayProcess, group: str) -> dict[int, int]:
    status, body, _ = gw.request("GET", f"/groups/{group}/offsets")
    assert status == 200, body
    return {o["partition"]: o["offset"] for o in body["offsets"] if o["topic"] == TOPIC}


def stable_pair(gw: GatewayProcess, group: str) -> list[dict]:
    """Two members of ``group`` at ``gw``, through one rebalance to generation 2."""
    one = join(gw, group, client_id="one")
    two = join(gw, group, client_id="two")
    status, st, _ = heartbeat(gw, group, one["member_id"], one["generation"])
    assert status == 200 and st["rebalance"], st
    join(gw, group, one["member_id"], client_id="one")
    states = [heartbeat(gw, group, m["member_id"], 2)[1] for m in (one, two)]
    assert [(s["generation"], s["assigned"], s["rebalance"]) for s in states] == \
        [(2, True, False)] * 2, states
    return states


def owned(member: dict) -> list[int]:
    return [a["partition"] for a in member["assignment"]]


def test_a_group_call_at_the_wrong_gateway_names_the_coordinator(app):
    app.publish({"g": 1})
    app.wait_coordinator("g", 1, others=(0,))
    a, b = app.gateways[0], app.gateways[1]
    refusals = [
        a.request("POST", "/groups/g/members", body={"topics": [TOPIC]}),
        heartbeat(a, "g", "m-1", 1),
        a.request("DELETE", "/groups/g/members/m-1"),
        a.request("POST", "/groups/g/offsets", body={"member_id": None, "generation": -1,
                                                      "offsets": []}),
    ]
    for status, body, _ in refusals:
        assert status == 503, body
        assert (body["error"], body["error_code"]) == ("not_coordinator", 50305)
        assert body["coordinator"] == {"slot": 1, "url": b.url}
    # the right one answers; committed offsets (in the store) are answered by both
    assert join(b, "g")["generation"] == 1
    assert a.request("GET", "/groups/g/offsets")[0] == 200


def test_members_carry_on_at_a_new_coordinator_with_their_generation(app):
    a, b = app.gateways[0], app.gateways[1]
    app.publish({"g": 0})
    app.wait_coordinator("g", 0, others=(1,))
    one, two = stable_pair(a, "g")
    offsets = {p: 2 for p in owned(one)} | {p: 3 for p in owned(two)}
    assert commit(a, "g", one, {p: 2 for p in owned(one)})[0] == 204
    assert commit(a, "g", two, {p: 3 for p in owned(two)})[0] == 204

    app.publish({"g": 1})  # the coordinator moves to slot 1
    app.wait_coordinator("g", 1, others=(0,))
    status, body, _ = heartbeat(a, "g", one["member_id"], 2)
    assert status == 503 and body["coordinator"]["url"] == b.url
    for m in (one, two):  # no rebalance, same generation, same partitions
        status, st, _ = heartbeat(b, "g", m["member_id"], 2)
        assert status == 200, st
        assert (st["generation"], st["rebalance"], st["assigned"], st["assignment"]) == \
            (2, False, True, m["assignment"])
    assert committed(b, "g") == offsets  # nothing committed at the old one is lost
    assert commit(b, "g", one, {owned(one)[0]: RECORDS})[0] == 204
    assert committed(a, "g") == offsets | {owned(one)[0]: RECORDS}


def test_the_coordinator_killed_its_group_goes_on_at_the_survivor(app):
    a, b = app.gateways[0], app.gateways[1]
    app.publish({"g": 0})
    app.wait_coordinator("g", 0, others=(1,))
    one, two = stable_pair(a, "g")
    assert commit(a, "g", two, {p: 4 for p in owned(two)})[0] == 204
    a.kill()  # SIGKILL: nothing written on the way out
    app.publish({"g": 1}, live=(1,))
    app.wait_coordinator("g", 1)
    for m in (one, two):
        status, st, _ = heartbeat(b, "g", m["member_id"], 2)
        assert status == 200 and (st["generation"], st["rebalance"]) == (2, False), st
    assert committed(b, "g") == {p: 4 for p in owned(two)}
    assert commit(b, "g", one, {p: 1 for p in owned(one)})[0] == 204
    assert committed(b, "g") == {p: 4 for p in owned(two)} | {p: 1 for p in owned(one)}
    # a member the dead coordinator never wrote down joins afresh: a rebalance, as in Kafka
    three = join(b, "g", client_id="three")
    assert three["generation"] == 2 and not three["assigned"]


def rest(gw: GatewayProcess, method: str, path: str, body=None, accept=None):
    return gw.request(method, path, body=body, headers={"Accept": accept} if accept else None)


def test_a_rest_instance_on_another_gateway_follows_the_coordinator(app):
    a, b = app.gateways[0], app.gateways[1]
    app.publish({"rg": 1})  # the instance lives on slot 0; its group's coordinator is slot 1
    app.wait_coordinator("rg", 1, others=(0,))
    status, body, _ = rest(a, "POST", "/consumers/rg", {
        "name": "i1", "format": "binary", "auto.offset.reset": "earliest",
        "auto.commit.enable": "false", "session.timeout.ms": SESSION_MS})
    assert status == 200, body
    inst = "/consumers/rg/instances/i1"
    assert rest(a, "POST", f"{inst}/subscription", {"topics": [TOPIC]})[0] == 204
    status, hb, _ = rest(a, "POST", f"{inst}/heartbeat")
    assert status == 200 and hb["generation"] == 1 and len(hb["partitions"]) == PARTITIONS
    # the coordinator holds the member: slot 1 describes it, slot 0 only relays
    status, desc, _ = b.request("GET", "/groups/rg")
    assert [m["member_id"] for m in desc["members"]] == [hb["member_id"]]

    got = []
    for _ in range(20):
        status, records, _ = rest(a, "GET", f"{inst}/records?timeout=500", accept=BINARY_V2)
        assert status == 200, records
        got += records
        if len(got) >= PARTITIONS * RECORDS:
            break
    values = sorted(base64.b64decode(r["value"]).decode() for r in got)
    assert values == sorted(f"v{p}-{i}" for p in range(PARTITIONS) for i in range(RECORDS))
    assert rest(a, "POST", f"{inst}/offsets", {})[0] == 204  # every delivered record
    assert committed(b, "rg") == {p: RECORDS for p in range(PARTITIONS)}

    app.publish({"rg": 0})  # the coordinator moves to the instance's own gateway
    app.wait_coordinator("rg", 0, others=(1,))
    status, again, _ = rest(a, "POST", f"{inst}/heartbeat")
    assert status == 200, again
    assert (again["member_id"], again["generation"]) == (hb["member_id"], 1)
    offsets = [{"topic": TOPIC, "partition": 0, "offset": 1}]
    assert rest(a, "POST", f"{inst}/offsets", {"offsets": offsets})[0] == 204
    status, c, _ = rest(a, "GET", f"{inst}/offsets")
    assert status == 200
    assert {o["partition"]: o["offset"] for o in c["offsets"]} == \
        {0: 1} | {p: RECORDS for p in range(1, PARTITIONS)}
    assert rest(a, "DELETE", inst)[0] == 204
    status, desc, _ = a.request("GET", "/groups/rg")
    assert desc["members"] == [] and desc["state"] == "Empty"


def test_a_rest_instance_whose_coordinator_died_answers_503_until_it_is_replaced(app):
    a, b = app.gateways[0], app.gateways[1]
    app.publish({"rg": 0})  # the instance lives on slot 1, its coordinator is slot 0
    app.wait_coordinator("rg", 0, others=(1,))
    status, body, _ = rest(b, "POST", "/consumers/rg", {
        "name": "i2", "auto.offset.reset": "earliest", "auto.commit.enable": "false",
        "session.timeout.ms": SESSION_MS})
    assert status == 200, body
    inst = "/consumers/rg/instances/i2"
    assert rest(b, "POST", f"{inst}/subscription", {"topics": [TOPIC]})[0] == 204
    hb = rest(b, "POST", f"{inst}/heartbeat")[1]
    offsets = [{"topic": TOPIC, "partition": 3, "offset": 2}]
    assert rest(b, "POST", f"{inst}/offsets", {"offsets": offsets})[0] == 204
    a.kill()
    status, body, _ = rest(b, "POST", f"{inst}/heartbeat")
    assert status == 503 and body["error"] == "not_coordinator", body
    app.publish({"rg": 1}, live=(1,))
    app.wait_coordinator("rg", 1)
    status, again, _ = rest(b, "POST", f"{inst}/heartbeat")
    assert status == 200, again
    assert (again["member_id"], again["generation"], again["partitions"]) == \
        (hb["member_id"], hb["generation"], hb["partitions"])
    status, c, _ = rest(b, "GET", f"{inst}/offsets")
    assert {o["partition"]: o["offset"] for o in c["offsets"]} == {3: 2}


def test_a_python_consumer_keeps_its_membership_when_the_coordinator_moves(app):
    a, b = app.gateways[0], app.gateways[1]
    app.publish({"pg": 1})
    app.wait_coordinator("pg", 1, others=(0,))
    c = Consumer(bootstrap_servers=a.url, group_id="pg", client_id="py",
                 auto_offset_reset="earliest", enable_auto_commit=False,
                 session_timeout_ms=SESSION_MS, heartbeat_interval_ms=200)
    try:
        c.subscribe(TOPIC)
        got = []
        wait_for(lambda: got.extend(c.poll(timeout=0.2)) or len(got) >= PARTITIONS * RECORDS,
                 timeout=20, what="every record")
        c.commit()
        assert committed(a, "pg") == {p: RECORDS for p in range(PARTITIONS)}
        before = c.group_metadata()
        app.publish({"pg": 0})
        app.wait_coordinator("pg", 0, others=(1,))
        c.commit(offsets={(TOPIC, 0): 1})  # at the new coordinator, same generation
        c.poll(timeout=0.5)  # heartbeats meanwhile: no rebalance
        assert c.group_metadata() == before
        assert committed(b, "pg")[0] == 1
        status, desc, _ = a.request("GET", "/groups/pg")
        assert status == 200, desc
        assert desc["generation"] == before.generation and len(desc["members"]) == 1
    finally:
        c.close(commit=False)
