"""``server.topic_admin.TopicAdmin``: the one topic and config admin both protocols call.

Against a real batcher on a local store, then through each adapter where they used to
disagree (``partitions`` as a config: refused by both now; shrinking: Kafka's
INVALID_PARTITIONS, REST's 400 ``invalid_config``).
"""

from __future__ import annotations

import asyncio

import pytest

import conf
from conf.errors import ConfigError
from ingest_gateway.errors import InvalidPartitions
from ingest_gateway.server.batcher import Batcher
from ingest_gateway.server.metrics import GatewayMetrics
from ingest_gateway.server.topic_admin import TopicAdmin
from log_layout import TopicExists, UnknownTopic, open_log


@pytest.fixture
def admin(tmp_path):
    settings = conf.load({"topic.partitions": "3", "topic.retention.ms": "1000"})
    log = open_log(str(tmp_path / "store"))
    batcher = Batcher(log, settings.gateway, topic_defaults=settings.topic,
                      metrics=GatewayMetrics())
    yield TopicAdmin(log, batcher, settings.topic), log
    batcher.executor.shutdown(wait=True)


def run(coro):
    return asyncio.run(coro)


def test_create_validates_then_creates(admin):
    topics, log = admin
    config = run(topics.create("t", {"cleanup.policy": "compact"}, validate_only=True))
    assert (config.partitions, config.cleanup_policy) == (3, "compact")
    assert "t" not in log.topics()  # validate_only writes nothing
    run(topics.create("t", {"cleanup.policy": "compact"}, partitions=2))
    assert log.topic("t").partitions == 2
    with pytest.raises(TopicExists):
        run(topics.create("t", validate_only=True))
    for bad in (0, -1, True, "2"):
        with pytest.raises(InvalidPartitions):
            run(topics.create("u", partitions=bad))
    with pytest.raises(ConfigError, match="no.such"):
        run(topics.create("u", {"no.such": "1"}))
    assert "u" not in log.topics()


def test_partitions_only_grow_and_are_not_a_config(admin):
    topics, log = admin
    run(topics.create("t", partitions=2))
    run(topics.add_partitions("t", 4, validate_only=True))
    assert log.topic("t", refresh=True).partitions == 2
    run(topics.add_partitions("t", 4))
    assert log.topic("t", refresh=True).partitions == 4
    with pytest.raises(InvalidPartitions, match="has 4 partitions"):
        run(topics.add_partitions("t", 3))
    with pytest.raises(ConfigError, match="read-only"):
        run(topics.alter_configs("t", {"partitions": "8"}))
    with pytest.raises(UnknownTopic):
        run(topics.add_partitions("missing", 2))


def test_alter_configs_all_or_nothing_and_back_to_default(admin):
    topics, log = admin
    run(topics.create("t", {"retention.ms": "5000"}))
    with pytest.raises(ConfigError):
        run(topics.alter_configs("t", {"segment.ms": "100", "retention.ms": "not a number"}))
    assert run(topics.configs("t"))["retention.ms"] == "5000"  # nothing applied
    run(topics.alter_configs("t", {"segment.ms": "100", "retention.ms": None}))
    now = run(topics.configs("t"))
    assert (now["segment.ms"], now["retention.ms"]) == ("100", "1000")  # 1000: the default
    with pytest.raises(ConfigError, match="unknown topic config"):
        run(topics.alter_configs("t", {"no.such": None}))
    run(topics.alter_configs("t", {"segment.ms": "200"}, validate_only=True))
    assert run(topics.configs("t"))["segment.ms"] == "100"
    run(topics.delete("t"))
    assert "t" not in log.topics()


def test_both_protocols_answer_the_same_operation_alike(tmp_path):
    """Where the two adapters used to disagree: ``partitions`` as a config is read-only
    under both (REST's PUT used to grow the topic), and a bad count is refused by both."""
    import datetime
    import json

    from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
    from kio.schema.incremental_alter_configs.v1.request import (
        AlterableConfig, AlterConfigsResource, IncrementalAlterConfigsRequest)

    from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess, call, connect

    store = f"file://{tmp_path / 'store'}"
    open_log(store).create_topic("t", {"partitions": 2})
    with KafkaGatewayProcess(store) as gw:
        cid = json.loads(gw.http.request("GET", f"{gw.url}/v3/clusters").data)["data"][0][
            "cluster_id"]
        topic_url = f"{gw.url}/v3/clusters/{cid}/topics/t"
        put = gw.http.request("PUT", f"{topic_url}/configs/partitions",
                              body=json.dumps({"value": "8"}),
                              headers={"Content-Type": "application/json"})
        assert (put.status, json.loads(put.data)["error"]) == (400, "invalid_config")
        shrink = gw.http.request("PATCH", topic_url, body=json.dumps({"partitions_count": 1}),
                                 headers={"Content-Type": "application/json"})
        assert shrink.status == 400 and "only grow" in json.loads(shrink.data)["message"]
        with connect(gw) as s:
            alter = IncrementalAlterConfigsRequest(validate_only=False, resources=(
                AlterConfigsResource(resource_type=2, resource_name="t", configs=(
                    AlterableConfig(name="partitions", config_operation=0, value="8"),)),))
            assert call(s, alter, 1)[1].responses[0].error_code == 40  # INVALID_CONFIG
            create = CreateTopicsRequest(
                timeout=datetime.timedelta(seconds=5), validate_only=False,
                topics=(CreatableTopic(name="u", num_partitions=0, replication_factor=1,
                                       assignments=(), configs=()),))
            assert call(s, create, 5)[1].topics[0].error_code == 37  # INVALID_PARTITIONS
    assert open_log(store).topic("t").partitions == 2
