"""The store's credentials (the S3 secret key, the HDFS delegation token) never leave the
gateway: not in any answer of any page or route a client can reach, not in its log lines
(access log on, debug level), not in its metrics."""

from __future__ import annotations

import json
import os

import pytest
import urllib3

from jobs.gateway_process import GatewayProcess
from log_layout import open_log
from log_layout.hadoop_client import encode_token


@pytest.mark.s3
def test_the_s3_secret_is_never_served_or_logged(s3_server, tmp_path):
    store = f"s3://{s3_server.bucket}/secrets-{os.getpid()}"
    options = s3_server.storage_options()
    assert len(options["secret"]) >= 8
    open_log(store, storage_options=options).create_topic("t", {"partitions": 1})
    never_served_or_logged(store, options, options["secret"], tmp_path)


@pytest.mark.hdfs
def test_the_hdfs_delegation_token_is_never_served_or_logged(hdfs_server, tmp_path,
                                                              monkeypatch):
    """The token as a deployment gives it (SPARKLOG_STORE_HDFS_DELEGATION_TOKEN); this
    cluster, without Kerberos, ignores it and serves the store as its web user."""
    store = hdfs_server.url(f"secrets-{os.urandom(4).hex()}")
    token = encode_token(os.urandom(30), os.urandom(20), "WEBHDFS delegation",
                         f"127.0.0.1:{hdfs_server.http_port}")
    open_log(store, storage_options=hdfs_server.storage_options()).create_topic(
        "t", {"partitions": 1})
    monkeypatch.setenv("SPARKLOG_STORE_HDFS_HTTP_PORT", str(hdfs_server.http_port))
    monkeypatch.setenv("SPARKLOG_STORE_HDFS_DELEGATION_TOKEN", token)
    never_served_or_logged(store, None, token, tmp_path)


def never_served_or_logged(store: str, options: dict | None, secret: str, tmp_path) -> None:
    """A gateway on ``store`` takes a record; ``secret`` is in no page, route, header or
    log line."""
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
    assert logged
    assert secret.encode() not in logged, [line for line in logged.splitlines()
                                           if secret.encode() in line][:3]
