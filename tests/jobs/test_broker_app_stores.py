"""``sparklog broker-app`` on S3 and HDFS given only sparklog's settings (issue 33).

The driver, its gateway tasks and its maintenance open the store from the same
settings as the CLI and the standalone gateway: the S3 endpoint as
``SPARKLOG_STORE_S3_ENDPOINT_URL`` or ``--set store.s3.endpoint.url=...`` (keys from
``AWS_*``, as boto reads them), HDFS from ``store.hdfs.*``, never
``--storage-options``. Each application (local mode) serves produce and fetch (a
consumer group over the bootstrap list).
"""

from __future__ import annotations

import time
import uuid

import pytest

from jobs.broker_app_process import BrokerAppProcess
from log_layout import open_log

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def serves_produce_and_fetch(app: BrokerAppProcess, topic: str, n: int = 60) -> None:
    """Produce ``n`` records at acks=all over every slot, then read them back through the
    gateways with a consumer group."""
    from ingest_gateway.client import Consumer, Producer

    with Producer(app.bootstrap, acks="all", enable_idempotence=True) as producer:
        handles = [producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode())
                   for i in range(n)]
        producer.flush()
    assert all(h.result().offset >= 0 for h in handles)
    consumer = Consumer(bootstrap_servers=app.bootstrap, group_id=f"g-{topic}",
                        auto_offset_reset="earliest")
    try:
        consumer.subscribe([topic])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 90
        while len(seen) < n and time.monotonic() < deadline:
            for record in consumer.poll(timeout=1.0, max_records=500):
                seen.add(record.value)
    finally:
        consumer.close()
    assert seen == {f"v{i}".encode() for i in range(n)}


def s3_env(s3_server) -> dict[str, str]:
    """Credentials as boto reads them (what the README tells a user to set)."""
    return {"AWS_ACCESS_KEY_ID": s3_server.key, "AWS_SECRET_ACCESS_KEY": s3_server.secret,
            "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.mark.parametrize("how", ["environment", "set"])
def test_s3_endpoint_from_the_settings_only(tmp_path, s3_server, how):
    store = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
    open_log(store, storage_options=s3_server.storage_options()).create_topic(
        "s3_settings", {"partitions": 4})
    env = s3_env(s3_server)
    settings = None
    if how == "environment":
        env["SPARKLOG_STORE_S3_ENDPOINT_URL"] = s3_server.endpoint_url
    else:
        settings = {"store.s3.endpoint.url": s3_server.endpoint_url}
    app = BrokerAppProcess(store, None, str(tmp_path / "app"), gateways=2, settings=settings,
                           env=env)
    try:
        app.start()
        serves_produce_and_fetch(app, "s3_settings")
    finally:
        status = app.stop()
    assert status == 0, app.log_text()[-3000:]
    assert "--storage-options" not in " ".join(_driver_cmdline(app))


def test_hdfs_from_the_store_hdfs_settings_only(tmp_path, hdfs_server):
    store = hdfs_server.url(f"sparklog-{uuid.uuid4().hex}")
    open_log(store, storage_options=hdfs_server.storage_options()).create_topic(
        "hdfs_settings", {"partitions": 2})
    options = hdfs_server.storage_options()
    app = BrokerAppProcess(store, None, str(tmp_path / "app"), gateways=1, settings={
        "store.hdfs.http.port": str(options["webhdfs_port"]),
        "store.hdfs.user": options["user"]})
    try:
        app.start()
        serves_produce_and_fetch(app, "hdfs_settings", n=30)
    finally:
        status = app.stop()
    assert status == 0, app.log_text()[-3000:]


def _driver_cmdline(app: BrokerAppProcess) -> list[str]:
    return list(app.proc.args) if app.proc is not None else []
