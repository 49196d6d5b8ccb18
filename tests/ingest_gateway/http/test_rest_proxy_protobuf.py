"""REST Proxy's Protobuf embedded format on a real gateway, over real HTTP, checked
against confluent-kafka's ProtobufSerializer and ProtobufDeserializer with a class
``protoc`` generated from the same ``.proto``:

- v2 produce (``vnd.kafka.protobuf.v2+json``) with ``value_schema`` text: read over the
  Kafka listener and decoded by ProtobufDeserializer; v3 records of type PROTOBUF;
- what ProtobufSerializer produced over the Kafka listener (its schema registered as a
  base64 descriptor, as the Python client does) answered decoded by a v2 consumer of
  format protobuf, in Protobuf's canonical JSON;
- hostile schemas and data (not .proto, nested past the bound, an import no reference
  gives, data of the wrong type or an unknown field) refused with Confluent's codes,
  nothing written.
"""

from __future__ import annotations

import importlib
import json
import sys
import uuid

import pytest
import urllib3

protoc = pytest.importorskip("grpc_tools.protoc")

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.protobuf import (ProtobufDeserializer,  # noqa: E402
                                                      ProtobufSerializer)
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from tests.ingest_gateway.consumers import consume  # noqa: E402

PROTOBUF_V2 = "application/vnd.kafka.protobuf.v2+json"
V2 = "application/vnd.kafka.v2+json"
CLICK = ('syntax = "proto3";\npackage demo;\n'
         'message Click {\n  string url = 1;\n  int64 ms = 2;\n  repeated string tags = 3;\n'
         '  Referrer referrer = 4;\n  message Referrer { string host = 1; }\n}\n')


@pytest.fixture(scope="session")
def gw(shared_gateway):
    """The session's shared gateway: subjects and topics here are named uniquely."""
    return shared_gateway


@pytest.fixture(scope="module")
def click_pb2(tmp_path_factory):
    """The Python class protoc generates from CLICK (what a Protobuf user has)."""
    out = tmp_path_factory.mktemp("pb2")
    (out / "click.proto").write_text(CLICK)
    assert protoc.main(["protoc", f"-I{out}", f"--python_out={out}", "click.proto"]) == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("click_pb2")
    finally:
        sys.path.remove(str(out))


@pytest.fixture(scope="module")
def http():
    return urllib3.PoolManager(timeout=urllib3.Timeout(total=60), retries=False)


@pytest.fixture(scope="module")
def registry(gw):
    return SchemaRegistryClient({"url": gw.url + "/schema-registry"})


def post(http, gw, path, body, content_type=PROTOBUF_V2):
    r = http.request("POST", gw.url + path, body=json.dumps(body).encode(),
                     headers={"Content-Type": content_type})
    return r.status, (json.loads(r.data) if r.data else None)


def new_topic(gw) -> str:
    topic = f"pb-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(timeout=30)
    return topic


def test_v2_and_v3_protobuf_read_by_confluents_deserializer(gw, http, registry, click_pb2):
    topic = new_topic(gw)
    values = [{"url": f"/p/{i}", "ms": i, "tags": ["a", "b"][:i],
               "referrer": {"host": "h"}} for i in range(3)]
    status, doc = post(http, gw, f"/topics/{topic}", {"value_schema": CLICK, "records": [
        {"value": v} for v in values]})
    assert status == 200, doc
    latest = registry.get_latest_version(f"{topic}-value")
    assert (doc["value_schema_id"], latest.schema.schema_type) == (latest.schema_id, "PROTOBUF")
    cluster = json.loads(http.request("GET", gw.url + "/v3/clusters").data)["data"][0][
        "cluster_id"]
    status, report = post(http, gw, f"/v3/clusters/{cluster}/topics/{topic}/records", {
        "value": {"type": "PROTOBUF", "data": {"url": "/v3", "ms": "9"}}}, "application/json")
    assert status == 200 and report["value"]["type"] == "PROTOBUF", report
    assert report["value"]["schema_id"] == latest.schema_id
    de = ProtobufDeserializer(click_pb2.Click, {"use.deprecated.format": False})
    got = [de(m.value(), SerializationContext(topic, MessageField.VALUE))
           for m in consume(gw, topic, 4)]
    assert [(g.url, g.ms, list(g.tags), g.referrer.host) for g in got] == [
        (f"/p/{i}", i, ["a", "b"][:i], "h") for i in range(3)] + [("/v3", 9, [], "")]


def test_protobuf_serializer_read_by_a_v2_protobuf_consumer(gw, http, registry, click_pb2):
    topic = new_topic(gw)
    ser = ProtobufSerializer(click_pb2.Click, registry, {"use.deprecated.format": False})
    producer = ck.Producer({"bootstrap.servers": gw.bootstrap})
    for i in range(3):
        producer.produce(topic, ser(click_pb2.Click(url=f"/k/{i}", ms=i, tags=["t"]),
                                    SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:6]}"
    assert post(http, gw, f"/consumers/{group}", {"name": "i", "format": "protobuf",
                                                  "auto.offset.reset": "earliest"}, V2)[0] == 200
    base = f"/consumers/{group}/instances/i"
    assert post(http, gw, base + "/subscription", {"topics": [topic]}, V2)[0] == 204
    got: list = []
    for _ in range(20):
        r = http.request("GET", gw.url + base + "/records?timeout=2000",
                         headers={"Accept": PROTOBUF_V2})
        assert r.status == 200, r.data
        got += json.loads(r.data)
        if len(got) >= 3:
            break
    # Protobuf's canonical JSON: 64-bit integers as strings, defaults left out
    assert [g["value"] for g in got] == [
        {"url": f"/k/{i}", **({"ms": str(i)} if i else {}), "tags": ["t"]} for i in range(3)]
    http.request("DELETE", gw.url + base)


def test_hostile_protobuf_refused(gw, http, registry):
    topic = new_topic(gw)
    deep = 'syntax = "proto3";\n' + "message M {\n" * 100 + "}\n" * 100
    ok = {"url": "/x"}
    for body, status, code in [
        ({"value_schema": "not a proto at all {", "records": [{"value": ok}]}, 422, 42205),
        ({"value_schema": deep, "records": [{"value": ok}]}, 422, 42205),
        ({"value_schema": 'syntax = "proto3";\nimport "other.proto";\nmessage M { int32 a = 1; }',
          "records": [{"value": {"a": 1}}]}, 422, 42205),
        ({"value_schema": 'syntax = "proto3";', "records": [{"value": {}}]}, 422, 42205),
        ({"value_schema": CLICK, "records": [{"value": {"url": 5}}]}, 422, 42203),
        ({"value_schema": CLICK, "records": [{"value": {"nope": 1}}]}, 422, 42203),
        ({"value_schema": CLICK, "records": [{"value": {"ms": "x"}}]}, 422, 42203),
        ({"value_schema": CLICK, "records": [{"value": [1]}]}, 422, 42203),
        ({"records": [{"value": ok}]}, 422, 42202),
    ]:
        got = post(http, gw, f"/topics/{topic}", body)
        assert (got[0], got[1]["error_code"]) == (status, code), (body, got)
    r = http.request("GET", gw.url + f"/topics/{topic}/partitions/0/offsets")
    assert json.loads(r.data)["end_offset"] == 0
    with pytest.raises(Exception):  # nothing registered by any of them
        registry.get_latest_version(f"{topic}-value")
    # a schema whose reference names a path outside: the registry compiles it to check
    # compatibility, so it is refused when registered (42201), nothing read or written
    ref = registry.register_schema(f"{topic}-dep", __import__(
        "confluent_kafka.schema_registry", fromlist=["Schema"]).Schema(
        'syntax = "proto3";\nmessage D { int32 d = 1; }', "PROTOBUF"))
    assert ref
    status, doc = post(http, gw, "/schema-registry/subjects/" + f"{topic}-value/versions", {
        "schemaType": "PROTOBUF", "schema": 'syntax = "proto3";\nimport "../../x.proto";\n'
        'message M { int32 a = 1; }', "references": [
            {"name": "../../x.proto", "subject": f"{topic}-dep", "version": 1}]},
        "application/vnd.schemaregistry.v1+json")
    assert (status, doc["error_code"]) == (422, 42201), doc
    assert "relative .proto path" in doc["message"]
