"""Two gateways on one store: one deletes and re-creates a topic the other is writing."""

from __future__ import annotations

import pytest

from log_layout import open_log
from tests.conftest import make_log_url
from jobs.gateway_process import GatewayProcess


def produce(gw: GatewayProcess, topic: str, *values: str) -> tuple[int, object]:
    status, doc, _ = gw.request("POST", f"/topics/{topic}/partitions/0?acks=all",
                                body={"records": [{"value": v} for v in values]})
    return status, doc


@pytest.mark.parametrize("backend", ["file", "s3", "hdfs"])
def test_a_gateway_that_missed_a_recreate_cannot_corrupt_the_new_topic(backend, request, tmp_path):
    url, options = make_log_url(backend, request, tmp_path)
    log = open_log(url, storage_options=options)
    log.create_topic("t")
    with GatewayProcess(url, options) as old, GatewayProcess(url, options) as admin:
        for i in range(5):  # the old gateway leads t-0 and has committed several versions
            assert produce(old, "t", f"old-{i}")[0] == 200
        cluster = admin.request("GET", "/v3/clusters")[1]["data"][0]["cluster_id"]
        assert admin.request("DELETE", f"/v3/clusters/{cluster}/topics/t")[0] == 204
        assert admin.request("POST", f"/v3/clusters/{cluster}/topics",
                             body={"topic_name": "t", "partitions_count": 1})[0] == 201
        assert produce(admin, "t", "new-0", "new-1")[0] == 200
        # The old gateway may not have noticed yet (its topic cache lives a second): what
        # it does now must not reach the new topic's log, whatever it answers.
        produce(old, "t", "ghost")
        assert produce(admin, "t", "new-2")[0] == 200
        values = open_log(url, storage_options=options).partition("t", 0) \
            .read_table(0).column("value").to_pylist()
        # "ghost" appears only if the old gateway had already moved to the new topic
        assert values in ([b'"new-0"', b'"new-1"', b'"new-2"'],
                          [b'"new-0"', b'"new-1"', b'"ghost"', b'"new-2"'])
