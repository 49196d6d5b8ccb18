"""The Schema Registry's ``_schemas`` topic seen by Kafka clients through a real gateway:
listed and consumed like Confluent's (keys and values in Confluent's JSON), and never
written by an ordinary producer (Kafka: INVALID_TOPIC_EXCEPTION; REST Proxy: 400
40003), while the registry keeps writing it."""

from __future__ import annotations

import json

import pytest
import urllib3

pytest.importorskip("fastavro")

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402

from tests.ingest_gateway.consumers import consume  # noqa: E402
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess  # noqa: E402

PREFIX = "/schema-registry"
CLICK = json.dumps({"type": "record", "name": "Click", "fields": [
    {"name": "user", "type": "string"}]})


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with KafkaGatewayProcess(f"file://{tmp_path_factory.mktemp('schemas-topic')}") as g:
        yield g


def test_consumed_and_listed_like_confluents(gw):
    client = SchemaRegistryClient({"url": gw.url + PREFIX})
    sid = client.register_schema("clicks-value", Schema(CLICK, "AVRO"))
    client.set_compatibility("clicks-value", "FULL")
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    topics = admin.list_topics(timeout=20).topics
    assert "_schemas" in topics and len(topics["_schemas"].partitions) == 1
    msgs = consume(gw, "_schemas", 2)
    assert json.loads(msgs[0].key()) == {"keytype": "SCHEMA", "subject": "clicks-value",
                                         "version": 1, "magic": 1}
    value = json.loads(msgs[0].value())
    assert (value["subject"], value["version"], value["id"], value["deleted"]) == \
        ("clicks-value", 1, sid, False)
    assert json.loads(value["schema"])["name"] == "Click"
    assert json.loads(msgs[1].key()) == {"keytype": "CONFIG", "subject": "clicks-value",
                                         "magic": 0}
    assert json.loads(msgs[1].value()) == {"compatibilityLevel": "FULL"}


def test_ordinary_producers_may_not_write_it(gw):
    client = SchemaRegistryClient({"url": gw.url + PREFIX})
    client.register_schema("before-value", Schema(CLICK, "AVRO"))
    errors = []
    producer = ck.Producer({"bootstrap.servers": gw.bootstrap, "retries": 0,
                            "message.timeout.ms": 10_000})
    producer.produce("_schemas", key=b'{"keytype":"SCHEMA","subject":"x","version":1,'
                     b'"magic":1}', value=b'{"id":666}', on_delivery=lambda e, m: errors.append(e))
    producer.flush(20)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == ck.KafkaError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION
    http = urllib3.PoolManager()
    r = http.request("POST", gw.url + "/topics/_schemas", body=json.dumps(
        {"records": [{"value": {"id": 666}}]}).encode(),
        headers={"Content-Type": "application/vnd.kafka.json.v2+json"})
    assert r.status == 400 and json.loads(r.data)["error_code"] == 40003
    # the registry itself still writes it, and nothing foreign got in
    sid = client.register_schema("after-value", Schema(CLICK, "AVRO"))
    assert client.get_schema(sid).schema_str
    r = http.request("GET", gw.url + PREFIX + "/subjects")
    assert "x" not in json.loads(r.data) and "after-value" in json.loads(r.data)
