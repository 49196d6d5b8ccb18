"""The store's credentials (the S3 secret key) never leave the gateway: not in any answer
of any page or route a client can reach, not in its log lines (access log on, debug
level), not in its metrics."""

from __future__ import annotations

import json
import os

import pytest
import urllib3

from jobs.gateway_process import GatewayProcess
from log_layout import open_log

pytestmark = pytest.mark.s3


def test_the_s3_secret_is_never_served_or_logged(s3_server, tmp_path):
    store = f"s3://{s3_server.bucket}/secrets-{os.getpid()}"
    options = s3_server.storage_options()
    secret = options["secret"]
    assert len(secret) >= 8
    log = open_log(store, storage_options=options)
    log.create_topic("t", {"partitions": 1})
    log_path = str(tmp_path / "gateway.log")
    settings = {"gateway.access.log": "true", "gateway.auto.create.topics.enable": "true"}
    with GatewayProcess(store, options, settings=settings, log_path=log_path) as gw:
        http = urllib3.PoolManager(retries=False, timeout=30)
        body = json.dumps({"records": [{"value": {"a": 1}}]}).encode()
        r = http.request("POST", gw.url + "/topics/t", body=body,
                         headers={"Content-Type": "application/vnd.kafka.json.v2+json"})
        assert r.status == 200, r.data
        cluster = http.request("GET", gw.url + "/v3/clusters").json()["data"][0]["cluster_id"]
        pages = ["/metrics", "/ui/", "/ui/topics", "/ui/topics/t", "/ui/topics/t/messages",
                 "/ui/maintenance", "/ui/groups", "/openapi.json", "/metadata", "/topics/t",
                 f"/v3/clusters/{cluster}", f"/v3/clusters/{cluster}/topics/t/configs",
                 f"/v3/clusters/{cluster}/brokers", "/brokers", "/readyz", "/healthz",
                 "/topics/nope", "/v3/clusters/nope"]
        for page in pages:
            r = http.request("GET", gw.url + page)
            assert secret.encode() not in r.data, page
            assert all(secret not in v for v in r.headers.values()), page
    with open(log_path, "rb") as f:
        logged = f.read()
    assert logged and secret.encode() not in logged
