"""The Schema Registry served by a real gateway, driven by confluent-kafka's
SchemaRegistryClient and its Avro/JSON serializers, unchanged, with only a base URL.

Covers: registering, looking up and reading schemas; Avro records serialized with
AvroSerializer produced through the gateway's Kafka listener and read back with
AvroDeserializer; compatibility levels (BACKWARD, FORWARD, FULL, the transitive ones,
NONE) refusing with 409; JSON Schema; references; modes; soft and hard deletes and
Confluent's error codes. Ids under concurrency and hostile input: test_schema_registry_hostile.
"""

from __future__ import annotations

import json
import uuid

import pytest
import urllib3

pytest.importorskip("fastavro")
pytest.importorskip("jsonschema")

from confluent_kafka.schema_registry import (Schema, SchemaReference,  # noqa: E402
                                             SchemaRegistryClient)
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402


PREFIX = "/schema-registry"
CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


@pytest.fixture(scope="session")
def gw(shared_gateway):
    """The session's shared gateway: subjects and topics here are named uniquely."""
    return shared_gateway


@pytest.fixture(scope="module")
def client(gw):
    return SchemaRegistryClient({"url": gw.url + PREFIX})


@pytest.fixture(scope="module")
def http():
    return urllib3.PoolManager()


def call(http, gw, method: str, path: str, body=None):
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    r = http.request(method, gw.url + PREFIX + path, body=data, headers=CT)
    return r.status, (json.loads(r.data) if r.data else None)


def subject() -> str:
    return f"s-{uuid.uuid4().hex[:8]}-value"


def record(*fields) -> Schema:
    return Schema(json.dumps({"type": "record", "name": "Click", "namespace": "demo",
                              "fields": list(fields)}), "AVRO")


F_URL = {"name": "url", "type": "string"}
F_MS_DEFAULT = {"name": "ms", "type": "long", "default": 0}
F_MS = {"name": "ms", "type": "long"}
F_REF_DEFAULT = {"name": "referrer", "type": ["null", "string"], "default": None}


def test_register_lookup_and_read_back(client, gw, http):
    s = subject()
    first = client.register_schema(s, record(F_URL))
    assert client.register_schema(s, record(F_URL)) == first  # no new version
    second = client.register_schema(s, record(F_URL, F_MS_DEFAULT))
    assert second != first
    assert client.get_versions(s) == [1, 2]
    latest = client.get_latest_version(s)
    assert (latest.version, latest.schema_id) == (2, second)
    assert json.loads(client.get_schema(first).schema_str)["fields"] == [F_URL]
    found = client.lookup_schema(s, record(F_URL))
    assert (found.version, found.schema_id) == (1, first)
    # the same schema in another subject keeps its one id
    other = subject()
    assert client.register_schema(other, record(F_URL)) == first
    status, pairs = call(http, gw, "GET", f"/schemas/ids/{first}/versions")
    assert status == 200 and {"subject": s, "version": 1} in pairs \
        and {"subject": other, "version": 1} in pairs
    assert call(http, gw, "GET", f"/schemas/ids/{first}/subjects")[1] == sorted([s, other])
    status, raw = call(http, gw, "GET", f"/subjects/{s}/versions/1/schema")
    assert status == 200 and raw["fields"] == [F_URL]
    assert s in client.get_subjects()
    assert call(http, gw, "GET", "/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])
    status, listed = call(http, gw, "GET", f"/schemas?subjectPrefix={s}")
    assert status == 200 and [(x["subject"], x["version"]) for x in listed] == [(s, 1), (s, 2)]
    status, listed = call(http, gw, "GET", f"/schemas?subjectPrefix={s}&latestOnly=true")
    assert [(x["version"], x["id"]) for x in listed] == [(2, second)]


def test_avro_serializer_through_the_kafka_listener(client, gw):
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = f"clicks-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(timeout=30)
    schema = record(F_URL, F_MS).schema_str
    ser = AvroSerializer(client, schema)
    producer = ck.Producer({"bootstrap.servers": gw.bootstrap})
    sent = [{"url": f"/p/{i}", "ms": i * 10} for i in range(20)]
    for value in sent:
        producer.produce(topic, ser(value, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    # TopicNameStrategy: the serializer registered the schema under <topic>-value
    assert client.get_latest_version(f"{topic}-value").version == 1
    de = AvroDeserializer(client)
    consumer = ck.Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "g-" + topic,
                            "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    try:
        while len(got) < len(sent):
            msg = consumer.poll(20)
            assert msg is not None and not msg.error(), msg and msg.error()
            assert msg.value()[0] == 0  # Confluent's wire format: magic byte, then the id
            got.append(de(msg.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        consumer.close()
    assert got == sent


def _refused(client, s, schema, code=409):
    with pytest.raises(SchemaRegistryError) as e:
        client.register_schema(s, schema)
    assert (e.value.http_status_code, e.value.error_code) == (code, code if code == 409 else
                                                              e.value.error_code)
    return e.value


def test_backward_refuses_a_field_without_default(client):
    s = subject()
    client.register_schema(s, record(F_URL))
    err = _refused(client, s, record(F_URL, F_MS))  # new reader, old data has no ms
    assert "ms" in err.error_message
    assert not client.test_compatibility(s, record(F_URL, F_MS))
    assert client.test_compatibility(s, record(F_URL, F_MS_DEFAULT))
    client.register_schema(s, record(F_URL, F_MS_DEFAULT))
    assert client.get_versions(s) == [1, 2]


def test_forward_and_full(client):
    s = subject()
    client.set_compatibility(s, "FORWARD")
    client.register_schema(s, record(F_URL, F_MS))
    # removing a field without default: old readers cannot read new data
    _refused(client, s, record(F_URL))
    client.register_schema(s, record(F_URL, F_MS, F_REF_DEFAULT))  # adding one is fine
    f = subject()
    client.set_compatibility(f, "FULL")
    client.register_schema(f, record(F_URL))
    _refused(client, f, record(F_URL, F_MS))           # backward breaks
    client.register_schema(f, record(F_URL, F_REF_DEFAULT))  # both ways


def test_transitive_checks_every_version(client):
    v1, v2 = record(F_URL), record(F_URL, F_MS_DEFAULT)
    v3 = record(F_URL, {"name": "ms", "type": "long", "default": 0}, F_REF_DEFAULT)
    v3_bad = record({"name": "ms", "type": "long", "default": 0})  # drops url
    for level, accepted in (("BACKWARD", True), ("FORWARD_TRANSITIVE", False)):
        s = subject()
        client.set_compatibility(s, level)
        client.register_schema(s, v1)
        if level == "FORWARD_TRANSITIVE":
            client.register_schema(s, v2)
            client.register_schema(s, v3)
            # v1's readers need url: refused against v1 although v3 could read it
            _refused(client, s, v3_bad)
        else:
            client.register_schema(s, v2)
            client.register_schema(s, v3)
    # BACKWARD_TRANSITIVE: v2 drops a default, fine against v2's neighbour only
    s = subject()
    client.set_compatibility(s, "BACKWARD_TRANSITIVE")
    client.register_schema(s, record(F_URL))
    client.register_schema(s, record(F_URL, F_MS_DEFAULT))
    _refused(client, s, record(F_URL, F_MS))
    s = subject()
    client.set_compatibility(s, "BACKWARD")
    client.register_schema(s, record(F_URL, F_MS_DEFAULT))
    client.register_schema(s, record(F_URL, F_MS_DEFAULT, F_REF_DEFAULT))
    # against its latest only: ms required, latest has it
    client.register_schema(s, record(F_URL, F_MS, F_REF_DEFAULT))


def test_none_and_global_config(client, gw, http):
    s = subject()
    client.register_schema(s, record(F_URL))
    client.set_compatibility(s, "NONE")
    client.register_schema(s, Schema('"string"', "AVRO"))  # anything goes
    assert client.get_compatibility(s) == "NONE"
    status, body = call(http, gw, "GET", f"/config/{subject()}")
    assert (status, body["error_code"]) == (404, 40408)
    status, body = call(http, gw, "GET", f"/config/{subject()}?defaultToGlobal=true")
    assert (status, body) == (200, {"compatibilityLevel": "BACKWARD"})
    for bad in ("SIDEWAYS", 7, None):
        status, body = call(http, gw, "PUT", "/config", {"compatibility": bad})
        assert (status, body["error_code"]) == (422, 42203)
    assert call(http, gw, "DELETE", f"/config/{s}") == (200, {"compatibilityLevel": "NONE"})
    assert client.get_compatibility() == "BACKWARD"


def test_json_schema(client):
    s = subject()
    base = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}
    client.register_schema(s, Schema(json.dumps(base), "JSON"))
    wider = dict(base, properties={"url": {"type": ["string", "null"]}})
    client.register_schema(s, Schema(json.dumps(wider), "JSON"))
    # a new required property: old documents lack it
    required = dict(wider, properties={**wider["properties"], "ms": {"type": "integer"}},
                    required=["url", "ms"])
    _refused(client, s, Schema(json.dumps(required), "JSON"))
    narrowed = dict(base, properties={"url": {"type": "integer"}})
    _refused(client, s, Schema(json.dumps(narrowed), "JSON"))
    with pytest.raises(SchemaRegistryError) as e:
        client.register_schema(subject(), Schema('{"type": "no-such-type"}', "JSON"))
    assert e.value.error_code == 42201
    latest = client.get_latest_version(s)
    assert latest.schema.schema_type == "JSON" and latest.version == 2


def test_json_serializer_round_trip(client):
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = json.dumps({"type": "object", "title": "Click",
                         "properties": {"url": {"type": "string"}}, "required": ["url"]})
    ctx = SerializationContext(f"t-{uuid.uuid4().hex[:6]}", MessageField.VALUE)
    data = JSONSerializer(schema, client)({"url": "/a"}, ctx)
    assert data[0] == 0
    assert JSONDeserializer(schema, schema_registry_client=client)(data, ctx) == {"url": "/a"}


def test_references(client, gw, http):
    dep = subject()
    client.register_schema(dep, Schema(json.dumps(
        {"type": "record", "name": "Page", "namespace": "demo",
         "fields": [{"name": "path", "type": "string"}]}), "AVRO"))
    top = subject()
    with_ref = Schema(json.dumps({"type": "record", "name": "Visit", "namespace": "demo",
                                  "fields": [{"name": "page", "type": "demo.Page"}]}), "AVRO",
                      [SchemaReference("demo.Page", dep, 1)])
    sid = client.register_schema(top, with_ref)
    assert [r.subject for r in client.get_schema(sid).references] == [dep]
    assert call(http, gw, "GET", f"/subjects/{dep}/versions/1/referencedby") == (200, [sid])
    # a referenced version cannot be deleted
    status, body = call(http, gw, "DELETE", f"/subjects/{dep}/versions/1")
    assert (status, body["error_code"]) == (422, 42206)
    # a reference to nothing, or the unknown type without its reference
    for refs in ([SchemaReference("demo.Page", dep, 9)], []):
        with pytest.raises(SchemaRegistryError) as e:
            client.register_schema(subject(), Schema(with_ref.schema_str, "AVRO", refs))
        assert e.value.error_code == 42201


def test_deletes_soft_then_hard(client, gw, http):
    s = subject()
    client.register_schema(s, record(F_URL))
    client.register_schema(s, record(F_URL, F_MS_DEFAULT))
    status, body = call(http, gw, "DELETE", f"/subjects/{s}?permanent=true")
    assert (status, body["error_code"]) == (404, 40405)  # soft delete first
    assert call(http, gw, "DELETE", f"/subjects/{s}/versions/2") == (200, 2)
    status, body = call(http, gw, "GET", f"/subjects/{s}/versions/2")
    assert (status, body["error_code"]) == (404, 40402)
    assert call(http, gw, "GET", f"/subjects/{s}/versions/2?deleted=true")[0] == 200
    assert call(http, gw, "GET", f"/subjects/{s}/versions") == (200, [1])
    assert call(http, gw, "DELETE", f"/subjects/{s}") == (200, [1])
    assert s not in client.get_subjects()
    assert s in call(http, gw, "GET", "/subjects?deleted=true")[1]
    status, body = call(http, gw, "DELETE", f"/subjects/{s}")
    assert (status, body["error_code"]) == (404, 40404)
    assert call(http, gw, "DELETE", f"/subjects/{s}?permanent=true") == (200, [1, 2])
    status, body = call(http, gw, "GET", f"/subjects/{s}/versions")
    assert (status, body["error_code"]) == (404, 40401)
    # a hard-deleted subject starts again at version 1 (over HTTP: the client would answer
    # from its cache without asking)
    status, body = call(http, gw, "POST", f"/subjects/{s}/versions",
                        {"schema": record(F_URL).schema_str})
    assert status == 200 and body["version"] == 1
    assert client.get_versions(s) == [1]


def test_modes(client, gw, http):
    s = subject()
    client.register_schema(s, record(F_URL))
    assert call(http, gw, "PUT", f"/mode/{s}", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    _refused(client, s, record(F_URL, F_MS_DEFAULT), code=422)
    assert call(http, gw, "GET", f"/mode/{s}") == (200, {"mode": "READONLY"})
    assert client.delete_mode(s) == "READONLY"  # back to the global mode
    assert call(http, gw, "GET", f"/mode/{s}") == (200, {"mode": "READWRITE"})
    client.register_schema(s, record(F_URL, F_MS_DEFAULT))
    assert client.get_contexts() == ["."]
    assert call(http, gw, "PUT", f"/mode/{s}", {"mode": "READONLY"})[0] == 200
    status, body = call(http, gw, "PUT", f"/mode/{s}", {"mode": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42204)
    # IMPORT on a subject holding versions needs force; then the given id is kept
    status, body = call(http, gw, "PUT", f"/mode/{s}", {"mode": "IMPORT"})
    assert (status, body["error_code"]) == (422, 42205)
    imported = subject()
    assert call(http, gw, "PUT", f"/mode/{imported}", {"mode": "IMPORT"})[0] == 200
    status, body = call(http, gw, "POST", f"/subjects/{imported}/versions",
                        {"schema": '"bytes"', "id": 900001, "version": 7})
    assert status == 200 and body["id"] == 900001
    assert client.get_latest_version(imported).version == 7
    # an id already holding another schema is not overwritten
    status, body = call(http, gw, "POST", f"/subjects/{imported}/versions",
                        {"schema": '"int"', "id": 900001, "version": 8})
    assert (status, body["error_code"]) == (422, 42205)
    # a content already known by id gets a second id by IMPORT; the subject still finds it
    # by content, and registering it again there adds no version
    known = client.register_schema(subject(), record(F_URL, F_REF_DEFAULT))
    status, body = call(http, gw, "POST", f"/subjects/{imported}/versions",
                        {"schema": record(F_URL, F_REF_DEFAULT).schema_str, "id": 900002,
                         "version": 9})
    assert status == 200 and body["id"] == 900002 != known
    assert call(http, gw, "PUT", f"/mode/{imported}", {"mode": "READWRITE"})[0] == 200
    status, body = call(http, gw, "POST", f"/subjects/{imported}",
                        {"schema": record(F_URL, F_REF_DEFAULT).schema_str})
    assert (status, body["version"], body["id"]) == (200, 9, 900002)
    status, body = call(http, gw, "POST", f"/subjects/{imported}/versions",
                        {"schema": record(F_URL, F_REF_DEFAULT).schema_str})
    assert (status, body["version"], body["id"]) == (200, 9, 900002)


def test_compatibility_endpoint_and_errors(client, gw, http):
    s = subject()
    client.register_schema(s, record(F_URL))
    path = f"/compatibility/subjects/{s}/versions/latest?verbose=true"
    status, body = call(http, gw, "POST", path, {"schema": record(F_URL, F_MS).schema_str})
    assert status == 200 and body["is_compatible"] is False and body["messages"]
    status, body = call(http, gw, "POST", path.replace("latest", "9"),
                        {"schema": record(F_URL).schema_str})
    assert (status, body["error_code"]) == (404, 40402)
    status, body = call(http, gw, "GET", f"/subjects/{s}/versions/0")
    assert (status, body["error_code"]) == (422, 42202)
    status, body = call(http, gw, "GET", "/schemas/ids/424242")
    assert (status, body["error_code"]) == (404, 40403)
    status, body = call(http, gw, "POST", f"/subjects/{s}", {"schema": '"int"'})
    assert (status, body["error_code"]) == (404, 40403)
    r = http.request("GET", gw.url + PREFIX + "/subjects")
    assert r.headers["content-type"].startswith("application/vnd.schemaregistry.v1+json")


def test_subjects_holding_slashes_and_percents(client, gw, http):
    """Protobuf references name subjects after files (``google/protobuf/x.proto``): a
    subject holding ``/`` or ``%`` is one path segment, sent encoded by the client."""
    tag = uuid.uuid4().hex[:8]  # the registry is the session's: no well-known file's name
    for s in (f"google/protobuf/{tag}.proto", f"a%2Fb-{tag}", f"50%-{tag}-value",
              f"sp ace/ü-{tag}"):
        sid = client.register_schema(s, Schema('"string"', "AVRO"))
        assert client.get_latest_version(s).schema_id == sid
        assert s in client.get_subjects()
        assert client.get_versions(s) == [1]
    assert f"a/b-{tag}" not in client.get_subjects()  # a%2Fb-... stayed itself
    status, body = call(http, gw, "GET", "/subjects/google%2Fprotobuf%2Fnothing.proto/versions")
    assert (status, body["error_code"]) == (404, 40401)
    assert "google/protobuf/nothing.proto" in body["message"]


def test_protobuf_serializer_registers_its_imports_as_references(client):
    """ProtobufSerializer registers the file a message imports as its own subject (named
    after the file) and the message's schema with a reference to it; PROTOBUF schemas are
    stored and served as the client sent them (and compiled to check compatibility:
    test_schema_compatibility_protobuf.py)."""
    pytest.importorskip("google.protobuf")
    from confluent_kafka.schema_registry.protobuf import (ProtobufDeserializer,
                                                          ProtobufSerializer)
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    tag = uuid.uuid4().hex[:6]
    fdp = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()
    page = descriptor_pb2.FileDescriptorProto(name=f"demo{tag}/page.proto",
                                              package=f"demo{tag}", syntax="proto3")
    page.message_type.add(name="Page").field.add(name="path", number=1,
                                                 type=fdp.TYPE_STRING, label=1)
    click = descriptor_pb2.FileDescriptorProto(name=f"demo{tag}/click.proto",
                                               package=f"demo{tag}", syntax="proto3",
                                               dependency=[page.name])
    msg = click.message_type.add(name="Click")
    msg.field.add(name="page", number=1, type=fdp.TYPE_MESSAGE, label=1,
                  type_name=f".demo{tag}.Page")
    pool.Add(page)
    pool.Add(click)
    Click = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"demo{tag}.Click"))
    ctx = SerializationContext(f"pb-{tag}", MessageField.VALUE)
    conf = {"use.deprecated.format": False}
    data = ProtobufSerializer(Click, client, conf)(Click(page={"path": "/x"}), ctx)
    latest = client.get_latest_version(f"pb-{tag}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    assert [(r.name, r.subject) for r in latest.schema.references] == [(page.name, page.name)]
    assert client.get_latest_version(page.name).schema.schema_type == "PROTOBUF"
    assert ProtobufDeserializer(Click, conf)(data, ctx).page.path == "/x"
