"""REST Proxy broker ids under the broker application: a broker is a gateway slot.

Two real gateway processes as slots 0 and 1 of one store, the test publishing the
assignment (``slots.SlotApplication``): v2 partition metadata gives each partition's
leading slot as an int ``leader`` (REST Proxy's shape), ``/brokers`` lists the slots,
and the v3 brokers, replicas, partition leaders and group coordinators point at the
slot that leads or coordinates, with its own host and port.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from jobs.gateway_process import wait_for
from log_layout.brokers import OFFSETS_PARTITIONS
from tests.ingest_gateway.slots import SlotApplication


def test_broker_ids_are_the_slots_that_lead_and_coordinate(tmp_path):
    app = SlotApplication(str(tmp_path / "store"), slots=(0, 1))
    app.log.create_topic("t", {"partitions": 2})
    with app.running():
        app.publish_assignment({"t": (1, 0)}, offsets=(1,) * OFFSETS_PARTITIONS)
        gw = app.gateways[0]
        wait_for(lambda: all(g.request("GET", "/metadata")[1]["generation"] == 1
                             for g in app.gateways.values()),
                 timeout=60, what="both slots to see the assignment")
        status, parts, _ = gw.request("GET", "/topics/t/partitions")
        assert status == 200
        assert [(p["partition"], p["leader"], p["replicas"]) for p in parts] == [
            (0, 1, [{"broker": 1, "leader": True, "in_sync": True}]),
            (1, 0, [{"broker": 0, "leader": True, "in_sync": True}])]
        assert gw.request("GET", "/topics/t/partitions/0")[1]["leader"] == 1
        assert gw.request("GET", "/brokers")[1] == {"brokers": [0, 1]}
        cid = gw.request("GET", "/v3/clusters")[1]["data"][0]["cluster_id"]
        v3 = f"/v3/clusters/{cid}"
        brokers = gw.request("GET", f"{v3}/brokers")[1]["data"]
        assert [(b["broker_id"], b["host"], b["port"]) for b in brokers] == [
            (s, "127.0.0.1", urlsplit(app.url(s)).port) for s in (0, 1)]
        p0 = gw.request("GET", f"{v3}/topics/t/partitions/0")[1]
        assert p0["leader"]["related"] == f"{gw.url}{v3}/topics/t/partitions/0/replicas/1"
        assert gw.request("GET", f"{v3}/topics/t/partitions/0/replicas/1")[0] == 200
        assert gw.request("GET", f"{v3}/topics/t/partitions/0/replicas/0")[0] == 404
        replicas = gw.request("GET", f"{v3}/brokers/1/partition-replicas")[1]["data"]
        assert [(r["topic_name"], r["partition_id"]) for r in replicas] == [("t", 0)]
        # a group, created through slot 1 (its coordinator), seen from slot 0
        one = app.gateways[1]
        assert one.request("POST", "/consumers/g", body={"name": "i"})[0] == 200
        assert one.request("POST", "/consumers/g/instances/i/subscription",
                           body={"topics": ["t"]})[0] == 204
        group = gw.request("GET", f"{v3}/consumer-groups/g")[1]
        assert group["coordinator"]["related"] == f"{gw.url}{v3}/brokers/1"
