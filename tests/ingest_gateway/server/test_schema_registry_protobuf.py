"""Protobuf through the registry end to end, with confluent-kafka's ProtobufSerializer and
ProtobufDeserializer unchanged, on a real gateway over real sockets:

- classes ``protoc`` (grpcio-tools) generates from three versions of ``shop/order.proto``
  (v2 adds fields: compatible; v3 turns a string into an int64: not), each producer in
  its own interpreter (the versions define the same ``shop.Order``, which one process's
  default descriptor pool holds once), producing over the Kafka listener;
- the subject at FULL_TRANSITIVE: v1 and v2 registered, v3 refused with 409 and
  Confluent's difference name; REST Proxy v2 (``value_schema`` text) the same, with its
  42207, and v3 records under the latest version;
- ``google/protobuf/timestamp.proto`` imported: skipped as a reference (the client's
  default ``skip.known.types``), and registered and served as its own subject when not;
- everything read back over the Kafka listener by ProtobufDeserializer with v1's class.
"""

from __future__ import annotations

import importlib
import json
import pathlib
import subprocess
import sys
import textwrap
import uuid

import pytest
import urllib3

protoc = pytest.importorskip("grpc_tools.protoc")

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from tests.ingest_gateway.consumers import consume  # noqa: E402

HEAD = ('syntax = "proto3";\npackage shop;\nimport "google/protobuf/timestamp.proto";\n')
V1 = HEAD + ("message Order {\n  string id = 1;\n  int64 cents = 2;\n"
             "  google.protobuf.Timestamp at = 3;\n}\n")
# fields added (a message added would be refused: FORWARD's old schema lacks it, Confluent's
# MESSAGE_REMOVED)
V2 = V1.replace("}\n", "  repeated string tags = 4;\n  uint32 qty = 5;\n}\n", 1)
V3 = V2.replace("string id = 1;", "int64 id = 1;")

PRODUCER = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from shop import order_pb2
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import json_format
    url, bootstrap, topic, skip, values = sys.argv[2:7]
    ser = ProtobufSerializer(order_pb2.Order, SchemaRegistryClient({"url": url}),
                             {"use.deprecated.format": False,
                              "skip.known.types": skip == "skip"})
    ctx = SerializationContext(topic, MessageField.VALUE)
    try:
        data = [ser(json_format.ParseDict(v, order_pb2.Order()), ctx)
                for v in json.loads(values)]
    except SchemaRegistryError as e:
        print(json.dumps({"status": e.http_status_code, "code": e.error_code,
                          "message": e.error_message}))
        sys.exit(0)
    p = Producer({"bootstrap.servers": bootstrap})
    for d in data:
        p.produce(topic, d)
    assert p.flush(30) == 0
    print(json.dumps({"produced": len(data)}))
""")


@pytest.fixture(scope="session")
def gw(shared_gateway):
    """The session's shared gateway: subjects and topics here are named uniquely."""
    return shared_gateway


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """{version: folder holding shop/order_pb2.py}, as protoc generates them."""
    import grpc_tools

    well_known = str(pathlib.Path(grpc_tools.__file__).parent / "_proto")
    out = {}
    for name, text in (("v1", V1), ("v2", V2), ("v3", V3)):
        d = tmp_path_factory.mktemp(f"pb2-{name}")
        (d / "shop").mkdir()
        (d / "shop" / "order.proto").write_text(text)
        assert protoc.main(["protoc", f"-I{d}", f"-I{well_known}", f"--python_out={d}",
                            "shop/order.proto"]) == 0
        out[name] = d
    return out


@pytest.fixture(scope="module")
def order_v1(generated):
    """v1's class in this process (the consumer's)."""
    sys.path.insert(0, str(generated["v1"]))
    try:
        return importlib.import_module("shop.order_pb2")
    finally:
        sys.path.remove(str(generated["v1"]))


@pytest.fixture(scope="module")
def registry(gw):
    return SchemaRegistryClient({"url": gw.url + "/schema-registry"})


@pytest.fixture(scope="module")
def http():
    return urllib3.PoolManager(timeout=urllib3.Timeout(total=60), retries=False)


def new_topic(gw) -> str:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(timeout=30)
    return topic


def produce(gw, generated, version: str, topic: str, values: list, skip: bool = True) -> dict:
    """Run ProtobufSerializer and a Producer with ``version``'s generated class in a
    fresh interpreter; its JSON answer (``produced`` or the registry's error)."""
    run = subprocess.run(
        [sys.executable, "-c", PRODUCER, str(generated[version]),
         gw.url + "/schema-registry", gw.bootstrap, topic, "skip" if skip else "register",
         json.dumps(values)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def post(http, gw, path, body, content_type="application/vnd.kafka.protobuf.v2+json"):
    r = http.request("POST", gw.url + path, body=json.dumps(body).encode(),
                     headers={"Content-Type": content_type})
    return r.status, json.loads(r.data) if r.data else None


@pytest.mark.parametrize("skip", [True, pytest.param(False, marks=pytest.mark.slow)],
                         ids=["skip-known-types", "register-known"])
def test_evolve_over_the_kafka_listener_and_rest_proxy(gw, generated, order_v1, registry,
                                                       http, skip):
    topic = new_topic(gw)
    subject = f"{topic}-value"
    registry.set_compatibility(subject, "FULL_TRANSITIVE")
    at = "2026-11-29T04:00:00Z"
    assert produce(gw, generated, "v1", topic, [
        {"id": "o1", "cents": "250", "at": at}], skip) == {"produced": 1}
    assert produce(gw, generated, "v2", topic, [
        {"id": "o2", "cents": "99", "tags": ["gift"], "qty": 2}],
        skip) == {"produced": 1}
    refused = produce(gw, generated, "v3", topic, [{"id": "3", "cents": "1"}], skip)
    assert (refused["status"], refused["code"]) == (409, 409), refused
    assert "FIELD_SCALAR_KIND_CHANGED" in refused["message"], refused
    assert registry.get_versions(subject) == [1, 2]
    latest = registry.get_latest_version(subject)
    assert latest.schema.schema_type == "PROTOBUF"
    refs = [(r.name, r.subject) for r in latest.schema.references]
    if skip:
        assert refs == []  # imported, not referenced: the registry knows the well-known files
    else:
        timestamp = "google/protobuf/timestamp.proto"
        assert refs == [(timestamp, timestamp)]
        served = registry.get_latest_version(timestamp)
        assert served.schema.schema_type == "PROTOBUF" and served.schema.schema_str

    # ?verbose=true says why, in Confluent's names
    status, doc = post(http, gw, f"/schema-registry/compatibility/subjects/{subject}/versions/"
                       "latest?verbose=true", {"schemaType": "PROTOBUF", "schema": V3},
                       "application/vnd.schemaregistry.v1+json")
    assert status == 200 and doc["is_compatible"] is False, doc
    assert any("FIELD_SCALAR_KIND_CHANGED at #/Order/1" in m for m in doc["messages"]), doc
    # REST Proxy v2 with the schema as text: compared with what the serializer registered
    status, doc = post(http, gw, f"/topics/{topic}", {"value_schema": V2, "records": [
        {"value": {"id": "o4", "cents": "7", "qty": 3}}]})
    assert status == 200, doc
    status, doc = post(http, gw, f"/topics/{topic}", {"value_schema": V3, "records": [
        {"value": {"id": "5"}}]})
    assert (status, doc["error_code"]) == (422, 42207), doc
    assert "incompatible" in doc["message"] and "FIELD_SCALAR_KIND_CHANGED" in doc["message"]
    # REST Proxy v3 records under the subject's latest version
    cluster = json.loads(http.request("GET", gw.url + "/v3/clusters").data)["data"][0][
        "cluster_id"]
    status, report = post(http, gw, f"/v3/clusters/{cluster}/topics/{topic}/records", {
        "value": {"type": "PROTOBUF", "subject": subject,
                  "data": {"id": "o6", "cents": "6", "at": at}}}, "application/json")
    assert status == 200 and report["value"]["type"] == "PROTOBUF", report

    de = ProtobufDeserializer(order_v1.Order, {"use.deprecated.format": False})
    got = [de(m.value(), SerializationContext(topic, MessageField.VALUE))
           for m in consume(gw, topic, 4)]
    # v1's class reads what v2 wrote: the added fields skipped as unknown, nothing lost
    assert [(g.id, g.cents, g.at.ToJsonString() if g.HasField("at") else None)
            for g in got] == [("o1", 250, at), ("o2", 99, None), ("o4", 7, None),
                              ("o6", 6, at)]
