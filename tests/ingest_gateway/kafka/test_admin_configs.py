"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and DescribeCluster over the
Kafka listener of a real gateway process: confluent-kafka's and kafka-python's admin
clients, raw kio requests for the refusals a client hides."""

from __future__ import annotations

import uuid

import pytest

from tests.ingest_gateway.kafka.kafka_gateway import call, connect

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                                   ConfigResource, ConfigSource, NewTopic, ResourceType)
from kio.schema.describe_configs.v4 import request as dc4  # noqa: E402
from kio.schema.incremental_alter_configs.v1 import request as iac1  # noqa: E402

TIMEOUT = 20


@pytest.fixture(scope="module")
def admin(kafka_gateway):
    return AdminClient({"bootstrap.servers": kafka_gateway.bootstrap})


@pytest.fixture
def topic(admin):
    name = f"cfg-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 2, config={"retention.ms": "3600000"})])[name] \
        .result(timeout=TIMEOUT)
    return name


def _describe(admin, name):
    res = ConfigResource(ResourceType.TOPIC, name)
    return admin.describe_configs([res])[res].result(timeout=TIMEOUT)


def test_describe_topic_configs_with_kafka_names_and_sources(admin, topic, kafka_log):
    configs = _describe(admin, topic)
    assert set(configs) == set(kafka_log.topic(topic, refresh=True).config.to_kafka())
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["partitions"].value == "2" and configs["partitions"].is_read_only
    assert not configs["retention.ms"].is_read_only and configs["retention.ms"].synonyms == {}


def test_incremental_alter_set_delete_append_and_validate_only(admin, topic, kafka_log):
    def alter(*entries, validate_only=False):
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
        admin.incremental_alter_configs([res], validate_only=validate_only)[res] \
            .result(timeout=TIMEOUT)

    alter(ConfigEntry("segment.bytes", "2000000",
                      incremental_operation=AlterConfigOpType.SET), validate_only=True)
    assert kafka_log.topic(topic, refresh=True).config.segment_bytes != 2_000_000
    alter(ConfigEntry("segment.bytes", "2000000", incremental_operation=AlterConfigOpType.SET),
          ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
          ConfigEntry("cleanup.policy", "compact",
                      incremental_operation=AlterConfigOpType.APPEND))
    config = kafka_log.topic(topic, refresh=True).config
    assert config.segment_bytes == 2_000_000
    assert config.retention_ms != 3_600_000  # back to the gateway's default
    assert config.cleanup_policy == "delete,compact" or config.cleanup_policy == "compact,delete"
    assert _describe(admin, topic)["segment.bytes"].value == "2000000"


def test_a_bad_value_is_invalid_config_with_a_message_and_changes_nothing(admin, topic,
                                                                          kafka_log):
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("segment.bytes", "3000000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(ck.KafkaException) as e:
        admin.incremental_alter_configs([res])[res].result(timeout=TIMEOUT)
    err = e.value.args[0]
    assert err.code() == ck.KafkaError.INVALID_CONFIG and "retention.ms" in err.str()
    config = kafka_log.topic(topic, refresh=True).config
    assert config.segment_bytes != 3_000_000 and config.retention_ms == 3_600_000


def test_legacy_alter_configs_replaces_the_whole_set(admin, topic, kafka_log):
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.bytes": "4000000"})
    with pytest.warns(DeprecationWarning):  # confluent-kafka deprecates it; Kafka serves it
        future = admin.alter_configs([res])[res]
    future.result(timeout=TIMEOUT)
    config = kafka_log.topic(topic, refresh=True).config
    assert config.segment_bytes == 4_000_000 and config.retention_ms != 3_600_000


def test_kafka_python_describes_and_alters(kafka_gateway, topic, kafka_log):
    kp = pytest.importorskip("kafka.admin")
    client = kp.KafkaAdminClient(bootstrap_servers=kafka_gateway.bootstrap)
    try:
        client.alter_configs([kp.ConfigResource("TOPIC", topic,
                                                configs={"max.message.bytes": "500000"})],
                             incremental=True)
        assert kafka_log.topic(topic, refresh=True).config.max_message_bytes == 500_000
        answer = client.describe_configs([kp.ConfigResource("TOPIC", topic)],
                                         config_filter="all")["topic"][topic]
        assert answer["max.message.bytes"]["value"] == "500000"
        assert answer["max.message.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert answer["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
    finally:
        client.close()


def _raw_describe(gw, kind, name, keys=None):
    with connect(gw) as s:
        req = dc4.DescribeConfigsRequest(resources=(dc4.DescribeConfigsResource(
            resource_type=kind, resource_name=name, configuration_keys=keys),),
            include_synonyms=True, include_documentation=False)
        return call(s, req, 4)[1].results[0]


def test_raw_describe_unknown_topic_keys_filter_and_broker_defaults(kafka_gateway):
    missing = _raw_describe(kafka_gateway, 2, "no-such-topic")
    assert missing.error_code == 3 and missing.configs == ()
    assert _raw_describe(kafka_gateway, 2, "bad/name").error_code == 17
    assert _raw_describe(kafka_gateway, 7, "x").error_code == 42  # no such resource type
    broker = _raw_describe(kafka_gateway, 4, "0", keys=("retention.ms",))
    assert broker.error_code == 0 and [c.name for c in broker.configs] == ["retention.ms"]
    assert broker.configs[0].read_only and broker.configs[0].config_source == 5


def _raw_alter(gw, topic, *configs, kind=2):
    with connect(gw) as s:
        req = iac1.IncrementalAlterConfigsRequest(resources=(iac1.AlterConfigsResource(
            resource_type=kind, resource_name=topic, configs=tuple(
                iac1.AlterableConfig(name=n, config_operation=op, value=v)
                for n, op, v in configs)),), validate_only=False)
        return call(s, req, 1)[1].responses[0]


def test_raw_alter_refusals(kafka_gateway, topic, kafka_log):
    unknown = _raw_alter(kafka_gateway, topic, ("retention.hours", 0, "1"))
    assert unknown.error_code == 40 and "retention.hours" in unknown.error_message
    assert _raw_alter(kafka_gateway, topic, ("partitions", 0, "9")).error_code == 40
    assert _raw_alter(kafka_gateway, topic, ("retention.ms", 9, "1")).error_code == 42
    assert _raw_alter(kafka_gateway, "no-such-topic", ("retention.ms", 0, "1")).error_code == 3
    assert _raw_alter(kafka_gateway, "0", ("retention.ms", 0, "1"), kind=4).error_code == 42
    config = kafka_log.topic(topic, refresh=True).config
    assert config.partitions == 2 and config.retention_ms == 3_600_000


def test_describe_cluster_names_this_gateway(admin, kafka_gateway, kafka_log):
    cluster = admin.describe_cluster().result(timeout=TIMEOUT)
    assert cluster.cluster_id == kafka_log.cluster_id()
    assert [(n.id, n.host, n.port) for n in cluster.nodes] == \
        [(0, "127.0.0.1", kafka_gateway.kafka_port)]
    assert cluster.controller.id == 0


def test_kafka_python_describes_the_cluster(kafka_gateway, kafka_log):
    kp = pytest.importorskip("kafka.admin")
    client = kp.KafkaAdminClient(bootstrap_servers=kafka_gateway.bootstrap)
    try:
        cluster = client.describe_cluster()
    finally:
        client.close()
    assert cluster["cluster_id"] == kafka_log.cluster_id() and cluster["controller_id"] == 0
    assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == \
        [(0, kafka_gateway.kafka_port)]
