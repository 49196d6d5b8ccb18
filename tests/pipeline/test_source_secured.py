"""The Spark source beside a secured deployment: records produced through an https +
Basic + ACL gateway are read by ``format("sparklog")`` from the S3 store with its
credentials; a wrong secret is refused with a clear error; the secret appears in no
plan Spark prints. The same with the S3 store itself served over https (SeaweedFS's
TLS port, a certificate from a CA made in the test): the gateway and the source trust
that CA through s3fs's ``client_kwargs.verify``; without it the certificate is refused.

(The source reads the store through ``log_layout``'s fsspec filesystems, not Hadoop's
S3A, so the CA is given as an fsspec option; S3A, used only for a streaming sink's
checkpoint, would need a JVM trust store set when the shared Spark session starts.)"""

from __future__ import annotations

import base64
import json
import uuid

import pyarrow as pa
import pytest
import urllib3

from bench.tls_certs import Pki
from ingest_gateway.security import passwords
from jobs.gateway_process import GatewayProcess
from log_layout import open_log
from log_layout.acls import AclBinding, add_acls
from tests.s3server import REGION, SeaweedS3

pytestmark = pytest.mark.s3


def test_spark_reads_what_a_secured_gateway_took_and_keeps_the_secret(spark, s3_server,
                                                                       tmp_path):
    store = f"s3://{s3_server.bucket}/secured-{uuid.uuid4().hex}"
    options = s3_server.storage_options()
    _produce_secured(store, options, Pki(tmp_path / "pki"), tmp_path)

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
    _refused(spark, wrong, "not-the-secret")


def _refused(spark, options: dict, secret: str, *words: str) -> str:
    """The error reading with ``options`` fails with: it names one of ``words`` (the
    default: S3's refusals of a wrong secret) and never ``secret``."""
    # (a GET's refusal carries S3's message, not its code: which request is refused first
    # depends on what the Spark worker process read before)
    words = words or ("Forbidden", "AccessDenied", "denied", "403", "SignatureDoesNotMatch",
                      "InvalidAccessKeyId", "signature we calculated does not match")
    with pytest.raises(Exception) as failed:
        spark.read.format("sparklog").options(**options).load().count()
    text = str(failed.value)
    assert secret not in text
    assert any(word in text for word in words), text
    return text


def _produce_secured(store: str, options: dict, pki: Pki, tmp_path) -> None:
    """Ten JSON records into ``orders`` through an https + Basic + ACL gateway over
    ``store`` (``options``: its fsspec storage options)."""
    log = open_log(store, storage_options=options)
    log.create_topic("orders", {"partitions": 2})
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


@pytest.fixture(scope="module")
def tls_s3(tmp_path_factory):
    """(SeaweedFS serving S3 over https too, the Pki whose CA signed its certificate)."""
    pki = Pki(tmp_path_factory.mktemp("s3-pki"))
    with SeaweedS3(tls=(pki.server_cert, pki.server_key)) as server:
        yield server, pki


def test_spark_reads_a_store_served_over_https_trusting_the_tests_ca(spark, tls_s3, tmp_path):
    s3, pki = tls_s3
    store = f"s3://{s3.bucket}/tls-{tmp_path.name}"
    options = {"key": s3.key, "secret": s3.secret, "client_kwargs": {
        "endpoint_url": s3.https_endpoint_url, "region_name": REGION, "verify": pki.ca}}
    _produce_secured(store, options, pki, tmp_path)  # the gateway's store is https too
    read = {"store": store, "subscribe": "orders", "storageOptions": json.dumps(options)}
    df = spark.read.format("sparklog").options(**read).load()
    values = sorted(json.loads(v)["n"] for v in df.selectExpr("CAST(value AS STRING)")
                    .toPandas()["value"])
    assert values == list(range(10))
    # the system's CAs do not know the test's: refused as an untrusted certificate
    untrusted = {**options, "client_kwargs": {k: v for k, v in options["client_kwargs"].items()
                                              if k != "verify"},
                 "config_kwargs": {"retries": {"max_attempts": 1}}}
    _refused(spark, {**read, "storageOptions": json.dumps(untrusted)}, s3.secret,
             "CERTIFICATE_VERIFY_FAILED", "certificate verify failed",
             "SSLCertVerificationError")


@pytest.mark.hdfs
def test_an_hdfs_delegation_token_appears_in_no_plan_or_progress(spark, hdfs_server, tmp_path):
    """The token reaches the source as ``materialize`` gives it (``storageOptions``, from
    the store's description); Spark's plans and a stream's plan and progress never
    show it. This cluster, without Kerberos, ignores the token and serves the store as
    its web user."""
    from log_layout.hadoop_client import encode_token
    from pipeline import tables

    token = encode_token(b"id-" + bytes(27), b"pw-" + bytes(17), "WEBHDFS delegation",
                         f"127.0.0.1:{hdfs_server.http_port}")
    url = hdfs_server.url(f"token-{uuid.uuid4().hex}")
    writer = open_log(url, storage_options=hdfs_server.storage_options())
    writer.create_topic("kv", {"partitions": 1})
    writer.partition("kv", 0).claim("w").append(pa.table({"key": [b"k"], "value": [b"v"]}))
    log = open_log(url, storage_options={"webhdfs_port": hdfs_server.http_port,
                                         "delegation_token": token})
    options = tables.source_options(log, "kv")
    assert token in options["storageOptions"]  # what Spark is handed
    df = spark.read.format("sparklog").options(**options).load()
    assert df.select("value").collect()[0].value == b"v"
    for mode in ("simple", "extended", "formatted", "cost", "codegen"):
        plan = df._jdf.queryExecution().explainString(
            spark._jvm.org.apache.spark.sql.execution.ExplainMode.fromString(mode))
        assert token not in plan, mode

    stream = spark.readStream.format("sparklog").options(**options) \
        .option("startingOffsets", "earliest").load()
    query = (stream.writeStream.format("memory").queryName(f"q_{tmp_path.name[-8:]}")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    progress = json.dumps(query.recentProgress, default=str)
    assert query.recentProgress and '"numInputRows": 1' in progress
    assert token not in progress
    assert token not in query._jsq.explainInternal(True)
