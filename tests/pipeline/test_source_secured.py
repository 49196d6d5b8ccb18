"""The Spark source beside a secured deployment: records produced through an https +
Basic + ACL gateway are read by ``format("sparklog")`` from the S3 store with its
credentials; a wrong secret is refused with a clear error; the secret appears in no
plan Spark prints."""

from __future__ import annotations

import base64
import json

import pytest
import urllib3

from bench.tls_certs import Pki
from ingest_gateway.security import passwords
from jobs.gateway_process import GatewayProcess
from log_layout import open_log
from log_layout.acls import AclBinding, add_acls

pytestmark = pytest.mark.s3


def test_spark_reads_what_a_secured_gateway_took_and_keeps_the_secret(spark, s3_server,
                                                                       tmp_path):
    store = f"s3://{s3_server.bucket}/secured-{tmp_path.name}"
    options = s3_server.storage_options()
    log = open_log(store, storage_options=options)
    log.create_topic("orders", {"partitions": 2})
    pki = Pki(tmp_path / "pki")
    pw = str(tmp_path / "passwords")
    passwords.add(pw, "alice", "alice-pw")
    add_acls(log.store, [AclBinding.create("Topic", "orders", principal="User:alice",
                                           operation="Write")])
    settings = {**pki.ssl_settings(), "authentication.method": "basic",
                "authentication.password.file": pw, "authorizer.enabled": "true"}
    with GatewayProcess(store, options, settings=settings, scheme="https", ca_file=pki.ca) as gw:
        http = urllib3.PoolManager(retries=False, timeout=30, ca_certs=pki.ca)
        auth = "Basic " + base64.b64encode(b"alice:alice-pw").decode()
        body = json.dumps({"records": [{"key": f"k{i}", "value": {"n": i}}
                                       for i in range(10)]}).encode()
        r = http.request("POST", gw.url + "/topics/orders", body=body, headers={
            "Content-Type": "application/vnd.kafka.json.v2+json", "Authorization": auth})
        assert r.status == 200, r.data

    spark_options = {"store": store, "subscribe": "orders",
                     "store.s3.endpoint.url": options["client_kwargs"]["endpoint_url"],
                     "store.s3.key": options["key"], "store.s3.secret": options["secret"]}
    df = spark.read.format("sparklog").options(**spark_options).load()
    values = sorted(json.loads(v)["n"] for v in df.selectExpr("CAST(value AS STRING)")
                    .toPandas()["value"])
    assert values == list(range(10))
    for mode in ("simple", "extended", "formatted"):
        plan = df._jdf.queryExecution().explainString(
            spark._jvm.org.apache.spark.sql.execution.ExplainMode.fromString(mode))
        assert options["secret"] not in plan, mode

    wrong = {**spark_options, "store.s3.secret": "not-the-secret"}
    with pytest.raises(Exception) as failed:
        spark.read.format("sparklog").options(**wrong).load().count()
    text = str(failed.value)
    assert "not-the-secret" not in text
    assert any(word in text for word in ("Forbidden", "AccessDenied", "denied", "403",
                                          "SignatureDoesNotMatch", "InvalidAccessKeyId")), text
