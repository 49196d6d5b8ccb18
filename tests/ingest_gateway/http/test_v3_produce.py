"""REST Proxy v3 produce goes straight to the produce service (no v2 JSON in between).

A record refused for its own fields (a header value that is not base64) is refused
alone; the others of the request are written, headers decoded as stored.
"""

from __future__ import annotations

import base64
import json

import pyarrow as pa

from jobs.gateway_process import GatewayProcess
from log_layout import open_log


def test_a_record_refused_alone_and_the_others_written(tmp_path):
    store = str(tmp_path / "store")
    log = open_log(store)
    log.create_topic("t", {"partitions": 1})
    good = {"partition_id": 0, "value": {"type": "STRING", "data": "ok"},
            "headers": [{"name": "h", "value": base64.b64encode(b"\x00\x01").decode()}]}
    bad = {"value": {"type": "STRING", "data": "no"},
           "headers": [{"name": "h", "value": "not base64!"}]}
    with GatewayProcess(store) as gw:
        cid = json.loads(gw.http.request("GET", f"{gw.url}/v3/clusters").data)["data"][0][
            "cluster_id"]
        r = gw.http.request("POST", f"{gw.url}/v3/clusters/{cid}/topics/t/records",
                            body=json.dumps(bad) + json.dumps(good),
                            headers={"Content-Type": "application/json"})
    reports = [json.loads(line) for line in r.data.decode().splitlines()]
    assert reports[0]["error_code"] == 40001 and "record 0" in reports[0]["message"]
    assert (reports[1]["error_code"], reports[1]["offset"]) == (200, 0)
    table = pa.Table.from_batches(list(log.partition("t", 0).read(0)))
    assert table.column("value").to_pylist() == [b"ok"]
    assert table.column("headers").to_pylist() == [[{"key": "h", "value": b"\x00\x01"}]]
